//! What a CI log does with a program's output, and ralph's second layer against it. GitHub
//! Actions runs workflow commands from any step's output (`::name::` at the start of a line,
//! `##[name]` anywhere); its documented defence is to pause them around untrusted text:
//! `::stop-commands::TOKEN` before, `::TOKEN::` after, with a token nobody can guess. ralph
//! prints agent text so that none of it is a command anyway ([`super::terminal`]); under GitHub
//! Actions it pauses commands as well ([`CommandPause`]).

use std::io::Read;

/// Where a process runs, as its environment tells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CiEnv {
    /// GitHub Actions (`GITHUB_ACTIONS=true`): workflow commands are read from the output.
    pub github_actions: bool,
    /// Any CI (`CI` set and not `false`/`0`, or `GITHUB_ACTIONS`, `GITLAB_CI`): the output is a
    /// log that people read in a browser and tools parse.
    pub ci: bool,
}

impl CiEnv {
    /// From the environment `get` reads.
    pub fn from(get: impl Fn(&str) -> Option<String>) -> Self {
        let github_actions = get("GITHUB_ACTIONS").is_some_and(|v| v == "true");
        let set = |k: &str| get(k).is_some_and(|v| !v.is_empty() && v != "false" && v != "0");
        Self {
            github_actions,
            ci: github_actions || set("CI") || set("GITLAB_CI"),
        }
    }

    /// This process's.
    pub fn current() -> Self {
        Self::from(|k| std::env::var(k).ok())
    }
}

/// A pause of GitHub's workflow commands: print [`CommandPause::start`] before untrusted text
/// and [`CommandPause::end`] after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandPause {
    token: String,
}

impl CommandPause {
    /// A pause with a fresh random token.
    pub fn new() -> Self {
        Self { token: token() }
    }

    /// The line that pauses commands.
    pub fn start(&self) -> String {
        format!("::stop-commands::{}", self.token)
    }

    /// The line that resumes them.
    pub fn end(&self) -> String {
        format!("::{}::", self.token)
    }
}

impl Default for CommandPause {
    fn default() -> Self {
        Self::new()
    }
}

/// `ralph-` and 128 random bits in hex (from `/dev/urandom`; a v7 UUID's 74 random bits if it
/// cannot be read).
fn token() -> String {
    let mut raw = [0u8; 16];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut raw));
    let hex = match read {
        Ok(()) => raw.iter().map(|b| format!("{b:02x}")).collect(),
        Err(_) => uuid::Uuid::now_v7().simple().to_string(),
    };
    format!("ralph-{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn the_environment_says_which_ci() {
        let gh = CiEnv::from(env(&[("GITHUB_ACTIONS", "true"), ("CI", "true")]));
        assert!(gh.github_actions && gh.ci);
        let gl = CiEnv::from(env(&[("GITLAB_CI", "true")]));
        assert!(!gl.github_actions && gl.ci);
        let none = CiEnv::from(env(&[("CI", "false"), ("GITHUB_ACTIONS", "1")]));
        assert!(!none.github_actions && !none.ci);
    }

    #[test]
    fn a_pause_has_an_unguessable_token_and_its_two_lines() {
        let (a, b) = (CommandPause::new(), CommandPause::new());
        assert_ne!(a, b);
        let token = a
            .start()
            .strip_prefix("::stop-commands::")
            .unwrap()
            .to_owned();
        assert!(
            token.starts_with("ralph-") && token.len() == 6 + 32,
            "{token}"
        );
        assert_eq!(a.end(), format!("::{token}::"));
    }
}
