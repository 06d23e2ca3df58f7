//! The hot commands parsed alone. Building clap's whole command tree (every subcommand's
//! arguments, help texts and groups) costs ~0.5 ms at every start, about a tenth of a
//! `ralph sandbox exec`; `ralph sandbox exec` and `ralph run` are parsed here with only their
//! own arguments' parser.
//!
//! Only a command line that parses cleanly takes this path. Anything else — a usage error,
//! `--help`, `--version` (the subcommand alone has none), a typo — returns `None`, and the full
//! parser runs and reports it exactly as it always did. Both parsers are built from the same
//! `#[derive(Args)]` structs, and a test checks that they agree on a corpus of command lines.

use std::ffi::OsString;

use clap::{Args, FromArgMatches};

use super::{Command, SandboxCommand, run, sandbox_exec};

/// The command of `args` (the whole `argv`), when it is a hot command that parses cleanly.
pub fn parse(args: &[OsString]) -> Option<Command> {
    let word = |i: usize| args.get(i).and_then(|a| a.to_str());
    match (word(1), word(2)) {
        (Some("sandbox"), Some("exec")) => alone::<sandbox_exec::ExecArgs>("exec", &args[2..])
            .map(|a| Command::Sandbox(SandboxCommand::Exec(Box::new(a)))),
        (Some("run"), _) => {
            alone::<run::RunArgs>("run", &args[1..]).map(|a| Command::Run(Box::new(a)))
        }
        _ => None,
    }
}

/// Parses `args` (the subcommand's name first) with `T`'s arguments only.
fn alone<T: Args + FromArgMatches>(name: &'static str, args: &[OsString]) -> Option<T> {
    let cmd = T::augment_args(clap::Command::new(name));
    let matches = cmd.try_get_matches_from(args).ok()?;
    T::from_arg_matches(&matches).ok()
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::Cli;

    fn argv(line: &[&str]) -> Vec<OsString> {
        std::iter::once("ralph")
            .chain(line.iter().copied())
            .map(OsString::from)
            .collect()
    }

    fn full(args: &[OsString]) -> Option<String> {
        Cli::try_parse_from(args)
            .ok()
            .map(|c| format!("{:?}", c.command))
    }

    /// Every line either parses to the same command both ways, or is left to the full parser.
    #[test]
    fn the_fast_path_agrees_with_the_full_parser() {
        let lines: &[&[&str]] = &[
            &["sandbox", "exec", "--", "/bin/true"],
            &["sandbox", "exec", "/bin/echo", "a", "--b"],
            &[
                "sandbox",
                "exec",
                "--workspace",
                "/w",
                "--mode",
                "read-only",
                "--",
                "sh",
                "-c",
                "x",
            ],
            &[
                "sandbox",
                "exec",
                "--mode",
                "full-access",
                "--timeout",
                "5s",
                "--",
                "x",
            ],
            &[
                "sandbox",
                "exec",
                "--network",
                "gateway",
                "--allow-host",
                "a.example:443",
                "--",
                "x",
            ],
            &[
                "sandbox", "exec", "--write", "/a", "--write", "/b", "--read", "/c", "--", "x",
            ],
            &[
                "sandbox", "exec", "--memory", "1GiB", "--pids", "64", "--env", "A=1", "--", "x",
            ],
            &[
                "sandbox",
                "exec",
                "--backend",
                "docker",
                "--image",
                "i:1",
                "--",
                "x",
            ],
            &[
                "sandbox",
                "exec",
                "--kill-grace",
                "2s",
                "--agent-user",
                "--",
                "x",
            ],
            &["sandbox", "exec", "--mode", "bogus", "--", "x"],
            &["sandbox", "exec", "--help"],
            &["sandbox", "exec", "--version"],
            &["sandbox", "exec"],
            &["sandbox", "exec", "--no-such-flag", "--", "x"],
            &[
                "run",
                "--objective",
                "fix it",
                "--agent-cmd",
                "sh a.sh",
                "--workspace",
                "/w",
            ],
            &[
                "run",
                "--objective",
                "o",
                "--agent",
                "codex",
                "--max-rounds",
                "3",
                "--json",
            ],
            &[
                "run",
                "--objective",
                "o",
                "--objective",
                "p",
                "--agent-cmd",
                "x",
            ],
            &[
                "run",
                "--objective-file",
                "o.md",
                "--agent-cmd",
                "x",
                "--verify",
                "make test",
            ],
            &["run", "--agent-cmd", "x"],
            &["run", "--objective", "o"],
            &["run", "--help"],
            &["run", "--version"],
            &[
                "run",
                "--objective",
                "o",
                "--agent-cmd",
                "x",
                "--mode",
                "read-only",
                "--network",
                "none",
            ],
            &["runs"],
            &["sandbox", "execs", "--", "x"],
            &["jobs"],
            &["--version"],
        ];
        let mut fast_taken = 0;
        for line in lines {
            let args = argv(line);
            match parse(&args) {
                Some(fast) => {
                    fast_taken += 1;
                    assert_eq!(
                        Some(format!("{fast:?}")),
                        full(&args),
                        "{line:?}: the fast path parsed what the full parser does not, or differently"
                    );
                }
                None => {
                    // Left to the full parser: fine for anything; but a line the full parser
                    // takes for a hot command should not have been refused here.
                    if let Some(f) = full(&args) {
                        assert!(
                            !(f.starts_with("Run(") || f.starts_with("Sandbox(Exec(")),
                            "{line:?}: the fast path refused a line the full parser takes: {f}"
                        );
                    }
                }
            }
        }
        assert!(
            fast_taken >= 10,
            "only {fast_taken} lines took the fast path"
        );
    }
}
