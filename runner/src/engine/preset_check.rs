//! Before round 1: is a preset's CLI visible inside the sandbox (SPEC §6)? A CLI installed
//! under a home directory or a project's `node_modules` is on the runner's `PATH` but hidden
//! from the round; without this check the job would find out in round 1 and retry for nothing.
//! The answer is a fix that works (judged as for commands, [`super::command_check`]). After the
//! fact, [`cannot_run_message`] says what a shell's "not found" (exit 126/127) means.

use std::path::{Path, PathBuf};

use ralph_sandbox::Mode;

use super::command_check::View;
use super::env::{DEFAULT_PATH, RunnerEnv};
use super::sandboxes::Sandboxes;
use crate::agent::Preset;
use crate::job::JobSpec;
use crate::toolchain::ToolchainMode;

/// The first executable `name` on `path` (a `PATH` value), as found and as resolved.
fn find_on_path(name: &str, path: &str) -> Option<(PathBuf, PathBuf)> {
    use std::os::unix::fs::PermissionsExt;
    path.split(':').filter(|d| !d.is_empty()).find_map(|dir| {
        let candidate = Path::new(dir).join(name);
        let meta = std::fs::metadata(&candidate).ok()?;
        if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
            return None;
        }
        let real = std::fs::canonicalize(&candidate).ok()?;
        Some((candidate, real))
    })
}

/// The directory to grant for `real`: a `node_modules` tree as a whole (a CLI from npm runs
/// files of its sibling packages), else the file's directory.
pub(super) fn grant_for(real: &Path) -> PathBuf {
    let mut best = None;
    for a in real.ancestors() {
        if a.file_name().is_some_and(|n| n == "node_modules") {
            best = Some(a.to_path_buf());
        }
    }
    best.unwrap_or_else(|| real.parent().unwrap_or(real).to_path_buf())
}

/// Checks that `preset`'s program is on the round's `PATH`, that the sandbox runs the same one
/// the runner would, and that what it needs (its links, its script's interpreter, e.g. `node`
/// from nvm) is visible ([`super::command_check::View`]). The message says what to do otherwise.
pub fn program_visible(
    preset: &dyn Preset,
    spec: &JobSpec,
    env: &RunnerEnv,
    sandboxes: &Sandboxes,
) -> Result<(), String> {
    if preset.runs_ralph() {
        // The runner shows the round its own executable ([`show_ralph`]).
        return Ok(());
    }
    let name = preset.program();
    let path = env.get("PATH").unwrap_or(DEFAULT_PATH);
    let missing = format!(
        "the `{}` preset runs `{name}`, which is not on the PATH ({path}): install it, or put its directory on the runner's PATH",
        preset.name()
    );
    if find_on_path(name, path).is_none() {
        return Err(missing);
    }
    let Some(view) = View::of(spec, env, sandboxes)? else {
        return Ok(());
    };
    view.judge(name).map_err(|p| {
        p.message(
            &format!("the `{}` preset runs `{name}`, found at", preset.name()),
            missing,
        )
    })
}

/// Shows the round this executable (`exe`, its real path), read-only, for a preset that runs
/// it, unless a tree the round sees already holds it. In full-access mode everything is seen.
pub(super) fn show_ralph(req: &mut ralph_sandbox::SandboxRequest, exe: PathBuf) {
    if req.mode == Mode::FullAccess {
        return;
    }
    let shown = std::iter::once(&req.workspace)
        .chain(&req.read)
        .chain(&req.write)
        .any(|t| exe.starts_with(t));
    if !shown {
        req.read.push(exe);
    }
}

/// What to say when the shell could not run `command` (exit 126 or 127) in the sandbox: the
/// shell's own words, and where its program lives on the runner if it is there (the `--read`
/// that fixes it).
pub fn cannot_run_message(
    what: &str,
    command: &str,
    code: i32,
    output: &str,
    spec: &JobSpec,
    env: &RunnerEnv,
) -> String {
    let why = if code == 127 {
        "not found"
    } else {
        "not executable"
    };
    let program = command
        .split_whitespace()
        .find(|w| !w.contains('='))
        .unwrap_or("");
    let path = env.get("PATH").unwrap_or(DEFAULT_PATH);
    let fix = match find_on_path(program, path) {
        Some((_, real)) if spec.sandbox.mode != Mode::FullAccess => {
            // Where toolchains are off and a toolchain rule covers the program, that is the fix
            // (a bare `--read` of a shim or proxy would not make it work).
            let auto = (spec.toolchain == ToolchainMode::None).then(|| {
                let mut s = spec.clone();
                s.toolchain = ToolchainMode::Auto;
                crate::toolchain::for_job(&s, env, &[], &[])
            });
            match auto.filter(|g| g.shows(&real)) {
                Some(g) => format!(
                    "`{program}` is at `{}` on the runner, in a toolchain the job's `--toolchain none` leaves out ({}): add --toolchain auto",
                    real.display(),
                    g.owner_of(&real).map_or_else(String::new, |t| t.label())
                ),
                None => format!(
                    "`{program}` is at `{}` on the runner, outside what the sandbox shows: add --read {}",
                    real.display(),
                    grant_for(&real).display()
                ),
            }
        }
        _ => format!(
            "install `{program}` where the sandbox can see it (system directories, the workspace or a --read path), or fix the command"
        ),
    };
    let said = output
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    format!(
        "{what} `{command}` cannot run in the sandbox (exit {code}: {why}{}): {fix}",
        if said.is_empty() {
            String::new()
        } else {
            format!(
                "; the shell said: {}",
                crate::util::text::bounded(said.trim(), 256)
            )
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cli_from_npm_is_granted_as_its_node_modules_tree() {
        assert_eq!(
            grant_for(Path::new(
                "/home/u/x/node_modules/@openai/codex/node_modules/@openai/codex-linux-x64/vendor/codex"
            )),
            PathBuf::from("/home/u/x/node_modules")
        );
        assert_eq!(
            grant_for(Path::new("/opt/tools/bin/claude")),
            PathBuf::from("/opt/tools/bin")
        );
    }

    #[test]
    fn only_executables_on_path_are_found() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tool");
        std::fs::write(&f, "#!/bin/sh\n").unwrap();
        let path = format!("/nonexistent:{}", dir.path().display());
        assert!(find_on_path("tool", &path).is_none());
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (found, _) = find_on_path("tool", &path).unwrap();
        assert_eq!(found, f);
    }
}
