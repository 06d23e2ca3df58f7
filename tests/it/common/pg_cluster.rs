//! A throwaway PostgreSQL cluster for fault-injection tests: `initdb` into a temporary directory,
//! served on a free loopback port (trust auth, loopback only), crashed with
//! `pg_ctl stop -m immediate` (no checkpoint: unflushed asynchronous commits are lost, as in a
//! real crash) and restarted. Run as the `postgres` system user when the test runs as root
//! (PostgreSQL refuses root). Stopped and deleted however the test ends.
//!
//! Without the PostgreSQL server binaries a test is skipped with the reason printed; under `CI`
//! it fails.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A PostgreSQL cluster that lives as long as this value.
pub struct PgCluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    data: PathBuf,
    /// The loopback port it listens on.
    pub port: u16,
    /// Connection string of its `postgres` database (user `ralph`, trust auth).
    pub url: String,
    running: bool,
}

/// The newest `/usr/lib/postgresql/*/bin` that has `initdb` and `pg_ctl`.
fn server_bin() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("pg_ctl").is_file()).then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, b)| b)
}

fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

fn free_port() -> u16 {
    super::listen_port()
}

impl PgCluster {
    /// Creates and starts a cluster, or returns `None` (saying why) when the server binaries are
    /// missing and `CI` is not set.
    pub fn start(test: &str) -> Option<Self> {
        let Some(bin) = server_bin() else {
            let why = "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin \
                       (apt-get install postgresql; .ci/setup does)";
            if std::env::var_os("CI").is_some() {
                panic!("{test}: CI is set but {why}");
            }
            eprintln!("{test}: skipped (CI unset): {why}");
            return None;
        };
        let dir = tempfile::Builder::new()
            .prefix("ralph-pg-")
            .tempdir()
            .unwrap();
        if is_root() {
            let pg = nix::unistd::User::from_name("postgres")
                .unwrap()
                .expect("a `postgres` system user to run the cluster as");
            std::os::unix::fs::chown(dir.path(), Some(pg.uid.as_raw()), Some(pg.gid.as_raw()))
                .unwrap();
        }
        let data = dir.path().join("data");
        let mut c = Self {
            port: free_port(),
            url: String::new(),
            bin,
            data,
            dir,
            running: false,
        };
        c.url = format!("postgres://ralph@127.0.0.1:{}/postgres", c.port);
        let out = c.pg(
            "initdb",
            &[
                "-D".as_ref(),
                c.data.as_os_str(),
                "-U".as_ref(),
                "ralph".as_ref(),
                "--auth=trust".as_ref(),
                "--no-sync".as_ref(),
                "-E".as_ref(),
                "UTF8".as_ref(),
            ],
        );
        assert!(out.status.success(), "initdb failed: {}", text(&out));
        c.restart();
        Some(c)
    }

    /// Runs a server binary (as `postgres` when we are root).
    fn pg(&self, tool: &str, args: &[&std::ffi::OsStr]) -> Output {
        let exe = self.bin.join(tool);
        let mut cmd = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(exe);
            c
        } else {
            Command::new(exe)
        };
        cmd.args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// Starts the (stopped or crashed) cluster and waits until it accepts connections.
    pub fn restart(&mut self) {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=60",
            self.port,
            self.dir.path().display()
        );
        let out = self.pg(
            "pg_ctl",
            &[
                "-D".as_ref(),
                self.data.as_os_str(),
                "-l".as_ref(),
                self.log().as_os_str(),
                "-o".as_ref(),
                opts.as_ref(),
                "-w".as_ref(),
                "-t".as_ref(),
                "60".as_ref(),
                "start".as_ref(),
            ],
        );
        assert!(
            out.status.success(),
            "pg_ctl start failed: {}\n{}",
            text(&out),
            std::fs::read_to_string(self.log()).unwrap_or_default()
        );
        self.running = true;
        let start = Instant::now();
        while postgres::Client::connect(&self.url, postgres::NoTls).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the cluster does not answer at {}",
                self.url
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Crashes the cluster: `pg_ctl stop -m immediate` (every server process ends at once, no
    /// checkpoint, no flush of pending WAL).
    pub fn crash(&mut self) {
        let out = self.pg(
            "pg_ctl",
            &[
                "-D".as_ref(),
                self.data.as_os_str(),
                "-m".as_ref(),
                "immediate".as_ref(),
                "-w".as_ref(),
                "stop".as_ref(),
            ],
        );
        assert!(out.status.success(), "pg_ctl stop failed: {}", text(&out));
        self.running = false;
    }

    /// The cluster's own log (for failure messages).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.log()).unwrap_or_default()
    }

    /// Where the cluster lives.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        if self.running {
            let _ = self.pg(
                "pg_ctl",
                &[
                    "-D".as_ref(),
                    self.data.as_os_str(),
                    "-m".as_ref(),
                    "immediate".as_ref(),
                    "-w".as_ref(),
                    "stop".as_ref(),
                ],
            );
        }
    }
}
