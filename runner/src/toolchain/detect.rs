//! The rule (docs/toolchains.md): every directory on the runner's `PATH` — and the directory of
//! each program a job's commands name by absolute path, the active virtualenv (`VIRTUAL_ENV`)
//! and a virtualenv at the workspace's `.venv` or `venv` — is asked, in `PATH` order, whether it
//! belongs to a per-user toolchain ralph knows; each one found is granted, read-only, with the
//! variables it needs. The agent's own shell runs `cargo test` or `pytest` that no pre-round
//! check sees, so the grant does not depend on which programs the commands name: the runner's
//! `PATH` is what the round's shell searches, and each toolchain on it works inside as it does on
//! the runner. Trees the sandbox shows anyway (the policy's system trees, the workspace) are not
//! granted again; on docker a toolchain in a system tree is the image's business and skipped.

use std::path::{Path, PathBuf};

use super::grant::{Refused, Toolchain, ToolchainGrant};
use super::host::HostFs;
use super::{go, managers, node, python, rust, secrets};
use crate::engine::env::{DEFAULT_PATH, RunnerEnv};

/// The runner's side: its filesystem and environment.
pub struct Host<'a> {
    /// The filesystem.
    pub fs: &'a dyn HostFs,
    /// The runner's environment (`PATH`, `HOME`, the toolchain variables).
    pub env: &'a RunnerEnv,
}

impl std::fmt::Debug for Host<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host").finish_non_exhaustive()
    }
}

/// The job's side.
#[derive(Clone, Copy, Debug)]
pub struct Scope<'a> {
    /// The workspace (visible, and where version files are looked up from).
    pub workspace: &'a Path,
    /// Directories of the programs the job's commands name by absolute path.
    pub program_dirs: &'a [PathBuf],
    /// Trees the sandbox shows anyway (the policy's read trees).
    pub shown: &'a [PathBuf],
    /// The docker backend: a toolchain found in a shown tree is the image's.
    pub docker: bool,
    /// Trees a grant may never overlap (the runner's state).
    pub forbidden: &'a [PathBuf],
}

/// What detectors read: the host and the runner's home.
pub(super) struct Ctx<'a> {
    pub fs: &'a dyn HostFs,
    env: &'a RunnerEnv,
    pub home: Option<PathBuf>,
    pub workspace: &'a Path,
}

impl Ctx<'_> {
    /// A variable of the runner (non-empty).
    pub fn var(&self, name: &str) -> Option<&str> {
        self.env.get(name).filter(|v| !v.is_empty())
    }

    /// A variable holding an absolute path.
    pub fn abs_var(&self, name: &str) -> Option<PathBuf> {
        self.var(name)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    }

    /// `rel` under the runner's home.
    pub fn in_home(&self, rel: &str) -> Option<PathBuf> {
        self.home.as_ref().map(|h| h.join(rel))
    }

    /// The directory `var` names, else `rel` under the home.
    pub fn dir_of(&self, var: &str, rel: &str) -> Option<PathBuf> {
        self.abs_var(var).or_else(|| self.in_home(rel))
    }

    /// Whether `a` and `b` are the same directory (as written, or resolved).
    pub fn same_dir(&self, a: &Path, b: &Path) -> bool {
        a == b
            || matches!(
                (self.fs.canonicalize(a), self.fs.canonicalize(b)),
                (Some(x), Some(y)) if x == y
            )
    }

    /// `p`, and its resolved path when that differs (both must exist inside: the first is
    /// what the PATH or a variable names, the second what the links lead to).
    pub fn with_real(&self, p: &Path) -> Vec<PathBuf> {
        let mut v = vec![p.to_path_buf()];
        if let Some(r) = self.fs.canonicalize(p).filter(|r| r != p) {
            v.push(r);
        }
        v
    }

    /// The first executable `name` on the runner's PATH.
    pub fn which(&self, name: &str) -> Option<PathBuf> {
        path_dirs(self.env)
            .into_iter()
            .map(|d| d.join(name))
            .find(|c| self.fs.is_executable(c))
    }
}

/// A detector: the toolchain `dir` belongs to, if it is one it knows.
type Detector = fn(&Ctx<'_>, &Path, &mut Vec<Refused>) -> Option<Toolchain>;

/// In the order asked; the first that knows a directory decides it.
const DETECTORS: &[Detector] = &[
    rust::rustup,
    python::pyenv,
    python::venv,
    node::nvm,
    managers::asdf,
    managers::mise,
    go::goroot,
    go::go_bin,
    python::prefix,
    rust::cargo,
];

/// Virtualenvs the workspace may hold (their base interpreter is granted).
const WORKSPACE_VENVS: &[&str] = &[".venv", "venv"];

/// The runner's PATH as absolute directories, in order, each once.
pub fn path_dirs(env: &RunnerEnv) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for d in env.get("PATH").unwrap_or(DEFAULT_PATH).split(':') {
        let p = PathBuf::from(d);
        if p.is_absolute() && !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// Detects the toolchains of `host` a job of `scope` is granted (the module rule).
pub fn detect(host: &Host<'_>, scope: &Scope<'_>) -> ToolchainGrant {
    let ctx = Ctx {
        fs: host.fs,
        env: host.env,
        home: host
            .env
            .get("HOME")
            .map(PathBuf::from)
            .filter(|h| h.is_absolute() && h != Path::new("/")),
        workspace: scope.workspace,
    };
    let mut dirs = path_dirs(host.env);
    dirs.extend(scope.program_dirs.iter().cloned());
    if let Some(v) = ctx.abs_var("VIRTUAL_ENV") {
        dirs.push(v.join("bin"));
    }
    dirs.extend(
        WORKSPACE_VENVS
            .iter()
            .map(|v| scope.workspace.join(v).join("bin")),
    );
    let mut seen: Vec<PathBuf> = Vec::new();
    dirs.retain(|d| {
        let new = !seen.contains(d);
        seen.push(d.clone());
        new
    });
    let shown = |p: &Path| scope.shown.iter().any(|t| p.starts_with(t));
    let mut grant = ToolchainGrant::default();
    for dir in &dirs {
        if scope.docker && shown(dir) {
            continue;
        }
        let Some(t) = DETECTORS
            .iter()
            .find_map(|d| d(&ctx, dir, &mut grant.refused))
        else {
            continue;
        };
        // The same toolchain reached through several PATH entries (pyenv's shims and bin) is
        // granted once, as found first.
        if !grant
            .toolchains
            .iter()
            .any(|o| o.kind == t.kind && o.read == t.read && o.vars == t.vars)
        {
            grant.toolchains.push(t);
        }
    }
    let cargo_home = ctx.dir_of("CARGO_HOME", ".cargo");
    let mut refused = std::mem::take(&mut grant.refused);
    for t in &mut grant.toolchains {
        let mut read: Vec<PathBuf> = Vec::new();
        for p in std::mem::take(&mut t.read) {
            if shown(&p) || p.starts_with(scope.workspace) || read.contains(&p) {
                continue;
            }
            match secrets::refusal(
                &p,
                ctx.home.as_deref(),
                cargo_home.as_deref(),
                scope.forbidden,
            ) {
                Some(why) => refused.push(Refused { path: p, why }),
                None => read.push(p),
            }
        }
        t.read = read;
    }
    grant
        .toolchains
        .retain(|t| !t.read.is_empty() || !t.vars.is_empty());
    refused.dedup();
    grant.refused = refused;
    grant
}

/// Orders version names the way people mean them (`3.9.18` before `3.10.13`).
pub(super) fn version_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    let parts = |s: &str| -> Vec<(u64, String)> {
        s.split(['.', '-'])
            .map(|p| (p.parse::<u64>().unwrap_or(0), p.to_owned()))
            .collect()
    };
    parts(a).cmp(&parts(b))
}

/// A name that is one plain path component (what a version directory may be called).
pub(super) fn plain_name(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '\0']) && s.len() <= 128
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_numerically_and_names_stay_plain() {
        let mut v = vec!["3.10.13", "3.9.18", "3.12.1", "3.10.2"];
        v.sort_by(|a, b| version_cmp(a, b));
        assert_eq!(v, ["3.9.18", "3.10.2", "3.10.13", "3.12.1"]);
        assert!(plain_name("3.11.7"));
        for bad in ["", ".", "..", "../x", "a/b"] {
            assert!(!plain_name(bad), "{bad}");
        }
    }
}
