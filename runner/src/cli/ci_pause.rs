//! Under GitHub Actions (`GITHUB_ACTIONS=true`), the workflow commands paused while a command
//! prints job data: [`CommandPause`]'s start line on each stream that carries agent text, before
//! the command runs, and its end line once it is done (after its error, if it failed). A second
//! layer only: every line of agent text is already printed so that it is no command
//! ([`ralph_runner::util::terminal`]). Machine output (`--json`, `logs --round --raw`, a patch)
//! gets no extra line.

use std::io::Write;

use ralph_runner::util::ci_log::{CiEnv, CommandPause};

/// The streams a command prints agent text on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Streams {
    /// Its stdout (text, not JSON or raw bytes).
    pub stdout: bool,
    /// Its stderr (progress, events, errors).
    pub stderr: bool,
}

/// A pause that ends when dropped.
#[derive(Debug)]
pub struct Paused {
    pause: Option<CommandPause>,
    streams: Streams,
}

impl Paused {
    /// Pauses commands on `streams` when `env` is GitHub Actions; otherwise does nothing.
    pub fn start(streams: Streams, env: CiEnv) -> Self {
        let pause =
            (env.github_actions && (streams.stdout || streams.stderr)).then(CommandPause::new);
        if let Some(p) = &pause {
            write(streams, &p.start());
        }
        Self { pause, streams }
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        if let Some(p) = &self.pause {
            write(self.streams, &p.end());
        }
    }
}

fn write(streams: Streams, line: &str) {
    if streams.stdout {
        super::stdout::write(&format!("{line}\n"));
    }
    if streams.stderr {
        let _ = writeln!(std::io::stderr().lock(), "{line}");
    }
}
