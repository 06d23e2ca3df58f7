//! A `ralph serve` with a configuration of the test's own, for the TLS tests (the shared
//! harness in [`super::server`] waits on plain HTTP): spawned, waited on through `ralph jobs`,
//! signalled, killed on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{Output, ralph_bin};

/// Writes `text` to `dir/name`; returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// A port free on loopback now.
pub fn free_port() -> u16 {
    super::listen_port()
}

/// A `ralph serve` with a configuration of our own (the shared harness waits on plain HTTP).
pub struct Serve {
    /// The test's directory (config, state, certificates).
    pub dir: tempfile::TempDir,
    /// The port it listens on.
    pub port: u16,
    child: Option<Child>,
    log: PathBuf,
}

impl Serve {
    /// Starts `ralph serve` on `listen_ip` with `extra` configuration; does not wait.
    pub fn spawn(dir: tempfile::TempDir, listen_ip: &str, extra: &str) -> Self {
        let port = free_port();
        let base = dir.path().to_path_buf();
        let config = write(
            &base,
            "config.toml",
            &format!(
                "listen = \"{listen_ip}:{port}\"\nstate_dir = \"{}\"\n{extra}\n",
                base.join("state").display()
            ),
        );
        let log = base.join("serve.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(ralph_bin())
            .args(["serve", "--config"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        Serve {
            dir,
            port,
            child: Some(child),
            log,
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn token(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("state/token"))
            .unwrap_or_default()
            .trim()
            .to_owned()
    }

    pub fn https(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// `ralph ARGS` against this server (the token from its state dir).
    pub fn ralph(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let out = Command::new(ralph_bin())
            .args(args)
            .env("RALPH_TOKEN", self.token())
            .env_remove("RALPH_SERVER")
            .env_remove("RALPH_CA_FILE")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        Output {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Waits until `ralph jobs ARGS` succeeds (the server is up and the call works).
    pub fn wait_until_ok(&mut self, args: &[&str]) -> Output {
        let start = Instant::now();
        loop {
            let out = self.ralph(args, &[]);
            if out.code == 0 {
                return out;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("ralph serve exited with {status}:\n{}", self.log_text());
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "`ralph {}` never succeeded: {}\n{}",
                args.join(" "),
                out.stderr,
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for the server to exit; returns its status code.
    pub fn wait_exit(&mut self) -> i32 {
        let mut c = self.child.take().unwrap();
        let start = Instant::now();
        loop {
            if let Some(s) = c.try_wait().unwrap() {
                return s.code().unwrap_or(-1);
            }
            if start.elapsed() > Duration::from_secs(30) {
                let _ = c.kill();
                panic!("ralph serve did not exit:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        let pid = self.child.as_ref().unwrap().id();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig).unwrap();
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A test directory under the system's temp dir.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("ralph-net-")
        .tempdir()
        .unwrap()
}
