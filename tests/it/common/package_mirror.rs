//! A package mirror on the host's loopback (`tests/fixtures/package_mirror.py`): one package
//! served as a PyPI simple index, an npm registry and a cargo sparse registry, plus `/ping`;
//! every request logged with its user agent (and its `Authorization` header, if any). Stopped (its process killed) when dropped.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A running mirror.
pub struct PackageMirror {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl PackageMirror {
    /// Starts the mirror, its request log in `dir`.
    pub fn start(dir: &Path) -> Self {
        let log = dir.join("mirror-requests.log");
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/package_mirror.py");
        let mut child = Command::new("/usr/bin/python3")
            .arg(script)
            .arg(&log)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs the mirror");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the mirror printed no port: {line:?}"));
        Self { child, port, log }
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The requests it served, as `GET PATH USER-AGENT[ auth=VALUE]` lines.
    pub fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for PackageMirror {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
