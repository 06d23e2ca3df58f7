//! The program a command starts with, and where the runner's shell would find it: the first
//! word of the command (after `VAR=value` assignments and an `exec`), when it is a plain path or
//! name. A word with shell syntax in it (`$HOME/x`, quotes, globs, `~`), a shell builtin or
//! keyword, or a relative path (the round runs in the workspace, which may create it) is left to
//! the shell.

use std::path::{Path, PathBuf};

use super::host::HostFs;

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

/// Each executable `program` the shell could run, in the order it looks (the path itself, or
/// each absolute `PATH` entry), as found and as resolved.
pub fn candidates(fs: &dyn HostFs, program: &str, path: &str) -> Vec<(PathBuf, PathBuf)> {
    let looked: Vec<PathBuf> = if program.starts_with('/') {
        vec![PathBuf::from(program)]
    } else {
        path.split(':')
            .filter(|d| d.starts_with('/'))
            .map(|d| Path::new(d).join(program))
            .collect()
    };
    looked
        .into_iter()
        .filter(|c| fs.is_executable(c))
        .filter_map(|c| fs.canonicalize(&c).map(|real| (c, real)))
        .collect()
}

/// The interpreter a script's `#!` line names, found as the kernel (or `env`) would: an absolute
/// path, or for `/usr/bin/env NAME` the first `NAME` on `path`.
pub fn interpreter(fs: &dyn HostFs, script: &Path, path: &str) -> Option<PathBuf> {
    let head = fs.read_small(script, 256)?;
    let line = head.strip_prefix("#!")?.lines().next()?;
    let mut words = line.split_whitespace();
    let first = words.next()?;
    let name = if Path::new(first).file_name().is_some_and(|n| n == "env") {
        words.find(|w| !w.starts_with('-'))?
    } else {
        first
    };
    if name.starts_with('/') {
        return Some(PathBuf::from(name));
    }
    candidates(fs, name, path)
        .into_iter()
        .next()
        .map(|(c, _)| c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toolchain::host::RealFs;

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

    #[test]
    fn a_scripts_interpreter_is_found_through_env_on_the_path() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let bin = d.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let node = bin.join("node");
        std::fs::write(&node, "").unwrap();
        std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o755)).unwrap();
        let script = d.path().join("cli.js");
        std::fs::write(&script, "#!/usr/bin/env -S node --x\nrun()\n").unwrap();
        let path = format!("{}:/usr/bin", bin.display());
        assert_eq!(interpreter(&RealFs, &script, &path), Some(node));
        std::fs::write(&script, "#!/opt/py/bin/python3 -u\n").unwrap();
        assert_eq!(
            interpreter(&RealFs, &script, &path),
            Some(PathBuf::from("/opt/py/bin/python3"))
        );
        std::fs::write(&script, "\x7fELF").unwrap();
        assert_eq!(interpreter(&RealFs, &script, &path), None);
    }
}
