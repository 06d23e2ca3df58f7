//! What one scripted run of the fake does: what it writes at its start (files in its working
//! directory, files named by its environment), what it prints, how long it runs and how it
//! ends.

use std::path::PathBuf;
use std::time::Duration;

/// What one scripted run does.
#[derive(Clone, Debug)]
pub struct Script {
    /// Written to stdout.
    pub stdout: String,
    /// The exit code when it ends by itself.
    pub exit: i32,
    /// How long it runs unless stopped (by the spec's timeout or the cancel token).
    pub elapsed: Duration,
    /// Its stdout reader does not finish draining in time (the capture says so).
    pub undrained: bool,
    /// A cancel makes it fail as a sandbox error (a set-up torn down mid-way), not end.
    pub fails_on_cancel: bool,
    /// It fills its report directory (no entry left at its end).
    pub fills_report_dir: bool,
    /// Files it writes in its working directory at the start (relative path, content).
    pub writes: Vec<(PathBuf, String)>,
    /// Files it writes at the start where its environment says (variable naming the path,
    /// content); nothing when the variable is not set.
    pub writes_at_var: Vec<(String, String)>,
}

impl Script {
    /// Exits with `code` at once, having done nothing.
    pub fn exit(code: i32) -> Self {
        Self {
            stdout: String::new(),
            exit: code,
            elapsed: Duration::ZERO,
            undrained: false,
            fails_on_cancel: false,
            fills_report_dir: false,
            writes: Vec::new(),
            writes_at_var: Vec::new(),
        }
    }

    /// Also prints `stdout`.
    pub fn printing(mut self, stdout: &str) -> Self {
        self.stdout = stdout.to_owned();
        self
    }

    /// Also writes `content` to `rel` in its working directory.
    pub fn writing(mut self, rel: &str, content: &str) -> Self {
        self.writes.push((PathBuf::from(rel), content.to_owned()));
        self
    }

    /// Also writes `content` to the file the environment variable `var` names, if set.
    pub fn writing_at_var(mut self, var: &str, content: &str) -> Self {
        self.writes_at_var
            .push((var.to_owned(), content.to_owned()));
        self
    }

    /// Fills its report directory.
    pub fn filling_report_dir(mut self) -> Self {
        self.fills_report_dir = true;
        self
    }

    /// Its stdout reader does not drain in time.
    pub fn undrained(mut self) -> Self {
        self.undrained = true;
        self
    }

    /// A cancel while it runs fails it as the sandbox's set-up would (a sandbox error).
    pub fn failing_on_cancel(mut self) -> Self {
        self.fails_on_cancel = true;
        self
    }

    /// Runs for `elapsed` before it ends by itself.
    pub fn taking(mut self, elapsed: Duration) -> Self {
        self.elapsed = elapsed;
        self
    }
}
