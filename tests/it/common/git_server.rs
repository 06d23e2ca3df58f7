//! A real git server on loopback for provisioning tests: bare repositories under a temporary
//! base path, served by `git daemon --inetd` (one process per connection, accepted by a thread
//! of the test on a port the kernel chose, so there is no port race), pushes enabled.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpListener;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A git server under test.
pub struct GitServer {
    pub dir: tempfile::TempDir,
    pub base: PathBuf,
    pub port: u16,
}

/// `git ARGS` in `dir` (an isolated configuration), which must succeed; its stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

impl GitServer {
    /// Starts serving an empty base path.
    pub fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("ralph-git-")
            .tempdir()
            .unwrap();
        let base = dir.path().canonicalize().unwrap().join("srv");
        std::fs::create_dir_all(&base).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let served = base.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let Ok(out) = conn.try_clone() else { continue };
                let child = Command::new("git")
                    .args([
                        "daemon",
                        "--inetd",
                        "--export-all",
                        "--enable=receive-pack",
                        "--informative-errors",
                    ])
                    .arg(format!("--base-path={}", served.display()))
                    .env("GIT_CONFIG_NOSYSTEM", "1")
                    .env("GIT_CONFIG_GLOBAL", "/dev/null")
                    .stdin(Stdio::from(OwnedFd::from(conn)))
                    .stdout(Stdio::from(OwnedFd::from(out)))
                    .stderr(Stdio::null())
                    .spawn();
                if let Ok(mut c) = child {
                    std::thread::spawn(move || {
                        let _ = c.wait();
                    });
                }
            }
        });
        Self { dir, base, port }
    }

    /// The URL of repository `name`.
    pub fn url(&self, name: &str) -> String {
        format!("git://127.0.0.1:{}/{name}", self.port)
    }

    /// The bare repository `name` on disk.
    pub fn bare(&self, name: &str) -> PathBuf {
        self.base.join(name)
    }

    /// Creates the bare repository `name` holding the files `make` writes into a work tree,
    /// committed on `main`. Returns the commit.
    pub fn create(&self, name: &str, make: impl FnOnce(&Path)) -> String {
        let work = self.dir.path().join(format!("work-{name}"));
        std::fs::create_dir_all(&work).unwrap();
        git(&work, &["init", "-q", "-b", "main"]);
        make(&work);
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-q", "-m", "initial"]);
        let bare = self.bare(name);
        git(
            self.dir.path(),
            &[
                "clone",
                "-q",
                "--bare",
                work.to_str().unwrap(),
                bare.to_str().unwrap(),
            ],
        );
        git(&bare, &["rev-parse", "main"])
    }

    /// A fresh clone of `name` (over the network, as a user would make it) at `main`.
    pub fn fresh_clone(&self, name: &str, into: &Path) {
        git(
            self.dir.path(),
            &["clone", "-q", &self.url(name), into.to_str().unwrap()],
        );
    }
}
