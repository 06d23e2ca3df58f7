//! Before round 1: can the sandbox run the program an `--agent-cmd` or `--verify` command starts
//! with (SPEC §6)? A script in `/tmp` or a tool in `~/.cargo/bin` is there on the runner but not
//! inside the sandbox; without this check the job finds out in round 1 (`not found`, exit 127)
//! after a round is spent. The answer names the `--read` that fixes it.
//!
//! Only what can be judged without running the shell is judged: the first word of the command
//! (after `VAR=value` assignments and an `exec`), when it is a plain path or name. A word with
//! shell syntax in it (`$HOME/x`, quotes, globs, `~`), a shell builtin or keyword, or a relative
//! path (the round runs in the workspace, which may create it) is left to the shell.

use std::path::{Path, PathBuf};

use ralph_sandbox::Mode;

use super::backends::Backends;
use super::env::{DEFAULT_PATH, RunnerEnv};
use super::preset_check::grant_for;
use crate::job::JobSpec;

/// Words the shell runs itself (builtins and keywords of `dash` and POSIX `sh`).
const SHELL_WORDS: &[&str] = &[
    "!", ".", ":", "[", "alias", "bg", "break", "case", "cd", "command", "continue", "do", "done",
    "echo", "elif", "else", "esac", "eval", "exit", "export", "false", "fc", "fg", "fi", "for",
    "getopts", "hash", "if", "jobs", "kill", "local", "printf", "pwd", "read", "readonly",
    "return", "set", "shift", "test", "then", "times", "trap", "true", "type", "ulimit", "umask",
    "unalias", "unset", "until", "wait", "while", "{", "}",
];

/// Characters that make a word the shell's to interpret.
const SHELL_SYNTAX: &[char] = &[
    '$', '`', '"', '\'', '\\', '*', '?', '[', ']', '{', '}', '(', ')', '<', '>', '|', '&', ';',
    '~', '#',
];

/// The program `command` starts with, when it can be judged (module doc).
pub fn first_program(command: &str) -> Option<&str> {
    let mut words = command.split_whitespace().skip_while(|w| is_assignment(w));
    let mut word = words.next()?;
    if word == "exec" {
        word = words.next()?;
    }
    if word.contains(SHELL_SYNTAX) || SHELL_WORDS.contains(&word) {
        return None;
    }
    if word.contains('/') && !word.starts_with('/') {
        return None;
    }
    Some(word)
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric())
            && !name.starts_with(|c: char| c.is_ascii_digit())
    })
}

/// Checks that the program `command` starts with exists and that the sandbox of `spec` can see
/// it; `what` names the command in the message ("the agent command", "the verify command").
pub fn command_visible(
    what: &str,
    command: &str,
    spec: &JobSpec,
    env: &RunnerEnv,
    backends: &Backends,
) -> Result<(), String> {
    let Some(program) = first_program(command) else {
        return Ok(());
    };
    let path = env.get("PATH").unwrap_or(DEFAULT_PATH);
    // Where the shell would look on the runner: the path itself, or each PATH entry in turn.
    let candidates: Vec<PathBuf> = if program.starts_with('/') {
        vec![PathBuf::from(program)]
    } else {
        path.split(':')
            .filter(|d| d.starts_with('/'))
            .map(|d| Path::new(d).join(program))
            .collect()
    };
    let found: Vec<(PathBuf, PathBuf)> = candidates
        .into_iter()
        .filter(|c| is_executable_file(c))
        .filter_map(|c| std::fs::canonicalize(&c).ok().map(|real| (c, real)))
        .collect();
    let Some((first, first_real)) = found.first().cloned() else {
        return Err(if program.starts_with('/') {
            format!(
                "{what} `{command}` runs `{program}`, which does not exist on the runner (or is not an executable file): fix the path"
            )
        } else {
            format!(
                "{what} `{command}` runs `{program}`, which is not on the PATH ({path}): install it, put its directory on the runner's PATH, or give its full path"
            )
        });
    };
    if spec.sandbox.mode == Mode::FullAccess {
        return Ok(());
    }
    let policy = backends
        .native()
        .policies()
        .get(spec.sandbox.mode)
        .map_err(|e| e.to_string())?;
    let fs = &policy.filesystem;
    let visible = |p: &Path| {
        let granted = fs
            .read
            .iter()
            .chain(std::iter::once(&spec.workspace))
            .chain(&spec.sandbox.read)
            .chain(&spec.sandbox.write)
            .any(|root| p.starts_with(root));
        granted && !fs.hidden.iter().any(|h| p.starts_with(h))
    };
    // Inside, the shell takes the first one it can see: both the path it looks up and the file
    // that leads to must be reachable.
    if found.iter().any(|(c, real)| visible(c) && visible(real)) {
        return Ok(());
    }
    let mut grants: Vec<PathBuf> = Vec::new();
    for p in [&first_real, &first] {
        let g = grant_for(p);
        if !visible(p) && !grants.contains(&g) {
            grants.push(g);
        }
    }
    let fix: Vec<String> = grants
        .iter()
        .map(|g| format!("--read {}", g.display()))
        .collect();
    Err(format!(
        "{what} `{command}` runs `{}`{}, which the sandbox cannot see: add {}",
        first.display(),
        if first == first_real {
            String::new()
        } else {
            format!(" (→ `{}`)", first_real.display())
        },
        fix.join(" ")
    ))
}

fn is_executable_file(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_program_is_judged_only_when_it_is_plain() {
        assert_eq!(
            first_program("/tmp/x/agent.sh --fast"),
            Some("/tmp/x/agent.sh")
        );
        assert_eq!(first_program("A=1 B_2=x mytool run"), Some("mytool"));
        assert_eq!(first_program("exec /opt/a"), Some("/opt/a"));
        assert_eq!(first_program("  pytest -q"), Some("pytest"));
        for shell in [
            "$HOME/bin/agent",
            "\"/tmp/with space/a\"",
            "~/bin/a",
            "./run.sh",
            "scripts/run.sh",
            "cd sub && make",
            "if true; then x; fi",
            "echo hi",
            "(cd x; y)",
            "a*b",
            "",
            "X=1",
        ] {
            assert_eq!(first_program(shell), None, "{shell}");
        }
    }
}
