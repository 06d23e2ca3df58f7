//! Under GitHub Actions (`GITHUB_ACTIONS=true`), the workflow commands paused while a command
//! that prints job data runs: [`CommandPause`]'s start line on stderr before the command runs,
//! its end line once it is done (after its error, if it failed). GitHub reads a step's stdout
//! and stderr through one command processor, so the pause covers both; it is written on stderr
//! only, so stdout stays exactly the command's output (`id=$(ralph submit …)`, `--json`, a
//! patch). A second layer only: every line of agent text is already printed so that it is no
//! command ([`ralph_runner::util::terminal`]).

use std::io::Write;

use ralph_runner::util::ci_log::{CiEnv, CommandPause};

/// A pause that ends when dropped.
#[derive(Debug)]
pub struct Paused {
    pause: Option<CommandPause>,
}

impl Paused {
    /// Pauses commands when `prints_job_text` and `env` is GitHub Actions; otherwise does
    /// nothing.
    pub fn start(prints_job_text: bool, env: CiEnv) -> Self {
        let pause = (env.github_actions && prints_job_text).then(CommandPause::new);
        if let Some(p) = &pause {
            line(&p.start());
        }
        Self { pause }
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        if let Some(p) = &self.pause {
            line(&p.end());
        }
    }
}

fn line(text: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}
