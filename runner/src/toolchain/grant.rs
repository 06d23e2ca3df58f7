//! What a job is granted of the runner's toolchains, as plain data: the toolchains recognised,
//! the read-only trees, the variables (host values, or paths inside the round's private HOME for
//! the writable parts), and what was not granted and why. Applied to a round in one small step
//! ([`ToolchainGrant::apply`], [`ToolchainGrant::env`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A kind of per-user toolchain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// rustup's proxies (`cargo`, `rustc`, ...) and `RUSTUP_HOME`.
    Rustup,
    /// A stand-alone Rust install or a directory of `cargo install`ed tools.
    Cargo,
    /// pyenv's shims and the versions they select.
    Pyenv,
    /// A Python installation's own `bin` on the PATH (e.g. `~/.pyenv/versions/3.11.7/bin`).
    Python,
    /// A virtualenv and the base interpreter it links to.
    Venv,
    /// A node version installed by nvm.
    Nvm,
    /// A Go installation (`GOROOT`).
    Go,
    /// `GOPATH/bin`: tools installed with `go install`.
    GoBin,
    /// asdf's shims or one of its installs.
    Asdf,
    /// mise's shims or one of its installs.
    Mise,
}

impl Kind {
    /// The name shown and journalled.
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Rustup => "rustup",
            Kind::Cargo => "cargo",
            Kind::Pyenv => "pyenv",
            Kind::Python => "python",
            Kind::Venv => "venv",
            Kind::Nvm => "nvm",
            Kind::Go => "go",
            Kind::GoBin => "go-bin",
            Kind::Asdf => "asdf",
            Kind::Mise => "mise",
        }
    }
}

/// A variable's value inside the round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// The same text as on the runner (a read-only root, a version).
    Host(String),
    /// A path inside the round's private HOME (a writable part redirected: `.cargo`, `go`).
    InHome(&'static str),
}

impl Value {
    /// The value for a round whose private HOME is `home`.
    pub fn for_home(&self, home: &Path) -> String {
        match self {
            Value::Host(v) => v.clone(),
            Value::InHome(rel) => home.join(rel).display().to_string(),
        }
    }

    /// As shown and journalled (`$HOME/.cargo` for a redirect).
    pub fn shown(&self) -> String {
        match self {
            Value::Host(v) => v.clone(),
            Value::InHome(rel) => format!("$HOME/{rel}"),
        }
    }
}

/// One toolchain recognised on the runner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Toolchain {
    /// What it is.
    pub kind: Kind,
    /// What of it is used: a version, a root (`3.11.7`, `/root/.rustup`).
    pub detail: String,
    /// The PATH directory (or a command's program directory) it was recognised by.
    pub found_at: PathBuf,
    /// Trees shown read-only (only those the sandbox does not show already).
    pub read: Vec<PathBuf>,
    /// Variables set in the round, in order.
    pub vars: Vec<(String, Value)>,
}

/// A tree that was not granted, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// The tree.
    pub path: PathBuf,
    /// Why (lowercase, for a message).
    pub why: String,
}

/// Everything a job is granted of the runner's toolchains.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolchainGrant {
    /// The toolchains, in the runner's PATH order.
    pub toolchains: Vec<Toolchain>,
    /// What was recognised but not granted.
    pub refused: Vec<Refused>,
}

/// Entries of each list in the journal.
pub const JOURNAL_ITEMS: usize = 32;
/// Bytes of each journalled string.
pub const JOURNAL_TEXT: usize = 512;

/// What is journalled (`toolchain_granted`) and shown by `ralph doctor --workspace`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantRecord {
    /// `kind detail (found at PATH-DIR)` of each toolchain.
    pub toolchains: Vec<String>,
    /// The read-only trees.
    pub read: Vec<PathBuf>,
    /// The variables set in the round (none of them secret: roots, versions, redirects shown
    /// as `$HOME/...`).
    pub variables: BTreeMap<String, String>,
    /// What was not granted, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<String>,
}

impl ToolchainGrant {
    /// Nothing recognised.
    pub fn is_empty(&self) -> bool {
        self.toolchains.is_empty() && self.refused.is_empty()
    }

    /// The read-only trees, sorted, without one that lies inside another.
    pub fn read_paths(&self) -> Vec<PathBuf> {
        let mut all: Vec<PathBuf> = self
            .toolchains
            .iter()
            .flat_map(|t| t.read.iter().cloned())
            .collect();
        all.sort();
        all.dedup();
        let mut out: Vec<PathBuf> = Vec::new();
        for p in all {
            if !out.iter().any(|o| p.starts_with(o)) {
                out.push(p);
            }
        }
        out
    }

    /// The variables for a round whose private HOME is `home`: the first toolchain on the
    /// runner's PATH that sets a variable decides it (as the first one on the PATH runs).
    pub fn env(&self, home: &Path) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for (k, v) in self.toolchains.iter().flat_map(|t| &t.vars) {
            if !out.iter().any(|(n, _)| n == k) {
                out.push((k.clone(), v.for_home(home)));
            }
        }
        out
    }

    /// The variables as shown (redirects as `$HOME/...`).
    pub fn shown_vars(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for (k, v) in self.toolchains.iter().flat_map(|t| &t.vars) {
            out.entry(k.clone()).or_insert_with(|| v.shown());
        }
        out
    }

    /// Whether `p` lies in a granted tree.
    pub fn shows(&self, p: &Path) -> bool {
        self.toolchains
            .iter()
            .flat_map(|t| &t.read)
            .any(|r| p.starts_with(r))
    }

    /// The toolchain a program found at `p` (as on the PATH, or resolved) belongs to.
    pub fn owner_of(&self, p: &Path) -> Option<&Toolchain> {
        self.toolchains.iter().find(|t| {
            p.parent() == Some(t.found_at.as_path()) || t.read.iter().any(|r| p.starts_with(r))
        })
    }

    /// Shows the granted trees to `req` on `backend` read-only (those no tree of it shows
    /// already). A native `full-access` round sees the host's whole filesystem: nothing to add;
    /// a container sees only what is bound, in every mode.
    pub fn apply(
        &self,
        req: &mut ralph_sandbox::SandboxRequest,
        backend: ralph_sandbox::BackendKind,
    ) {
        if req.mode == ralph_sandbox::Mode::FullAccess
            && backend == ralph_sandbox::BackendKind::Native
        {
            return;
        }
        for p in self.read_paths() {
            let shown = std::iter::once(&req.workspace)
                .chain(&req.read)
                .chain(&req.write)
                .any(|t| p.starts_with(t));
            if !shown {
                req.read.push(p);
            }
        }
    }

    /// What is journalled, bounded.
    pub fn record(&self) -> GrantRecord {
        use crate::util::text::bounded;
        let b = |s: String| bounded(&s, JOURNAL_TEXT);
        GrantRecord {
            toolchains: self
                .toolchains
                .iter()
                .take(JOURNAL_ITEMS)
                .map(|t| b(t.label()))
                .collect(),
            read: self.read_paths().into_iter().take(JOURNAL_ITEMS).collect(),
            variables: self
                .shown_vars()
                .into_iter()
                .take(JOURNAL_ITEMS)
                .map(|(k, v)| (b(k), b(v)))
                .collect(),
            refused: self
                .refused
                .iter()
                .take(JOURNAL_ITEMS)
                .map(|r| b(format!("{}: {}", r.path.display(), r.why)))
                .collect(),
        }
    }
}

impl Toolchain {
    /// `kind detail (found at DIR)`.
    pub fn label(&self) -> String {
        let detail = if self.detail.is_empty() {
            String::new()
        } else {
            format!(" {}", self.detail)
        };
        format!(
            "{}{detail} (at {})",
            self.kind.as_str(),
            self.found_at.display()
        )
    }
}

impl GrantRecord {
    /// Human lines (`ralph doctor --workspace`, `ralph logs`).
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.toolchains.is_empty() {
            out.push("no per-user toolchain on the runner's PATH".to_owned());
        }
        for t in &self.toolchains {
            out.push(format!("toolchain {t}"));
        }
        for p in &self.read {
            out.push(format!("read-only {}", p.display()));
        }
        for (k, v) in &self.variables {
            out.push(format!("set {k}={v}"));
        }
        for r in &self.refused {
            out.push(format!("not granted {r}"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tc(kind: Kind, read: &[&str], vars: Vec<(&str, Value)>) -> Toolchain {
        Toolchain {
            kind,
            detail: String::new(),
            found_at: PathBuf::from("/x/bin"),
            read: read.iter().map(PathBuf::from).collect(),
            vars: vars.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
        }
    }

    #[test]
    fn nested_trees_are_granted_once_and_the_first_toolchain_sets_a_variable() {
        let g = ToolchainGrant {
            toolchains: vec![
                tc(
                    Kind::Rustup,
                    &["/h/.rustup", "/h/.cargo/bin"],
                    vec![
                        ("RUSTUP_HOME", Value::Host("/h/.rustup".into())),
                        ("CARGO_HOME", Value::InHome(".cargo")),
                    ],
                ),
                tc(
                    Kind::Cargo,
                    &["/h/.rustup/toolchains/x"],
                    vec![("CARGO_HOME", Value::Host("/elsewhere".into()))],
                ),
            ],
            refused: Vec::new(),
        };
        assert_eq!(
            g.read_paths(),
            vec![PathBuf::from("/h/.cargo/bin"), PathBuf::from("/h/.rustup")]
        );
        assert_eq!(
            g.env(Path::new("/r/home")),
            vec![
                ("RUSTUP_HOME".to_owned(), "/h/.rustup".to_owned()),
                ("CARGO_HOME".to_owned(), "/r/home/.cargo".to_owned()),
            ]
        );
        let r = g.record();
        assert_eq!(r.variables["CARGO_HOME"], "$HOME/.cargo");
        assert_eq!(r.toolchains.len(), 2);
    }

    #[test]
    fn apply_adds_only_what_the_request_does_not_show() {
        let g = ToolchainGrant {
            toolchains: vec![tc(Kind::Venv, &["/ws/.venv", "/opt/py"], vec![])],
            refused: Vec::new(),
        };
        let mut req = ralph_sandbox::SandboxRequest {
            mode: ralph_sandbox::Mode::WorkspaceWrite,
            network: None,
            gateway_ports: Vec::new(),
            workspace: PathBuf::from("/ws"),
            protect: Vec::new(),
            read: vec![PathBuf::from("/opt")],
            write: Vec::new(),
            sockets: Vec::new(),
            private: ralph_sandbox::PrivateDirs {
                home: PathBuf::from("/h"),
                tmp: PathBuf::from("/t"),
                readable: Vec::new(),
                writable: Vec::new(),
                report: None,
            },
            limits: ralph_sandbox::Limits::default(),
            image: None,
            forbidden: Vec::new(),
            agent_user: None,
        };
        g.apply(&mut req, ralph_sandbox::BackendKind::Native);
        assert_eq!(req.read, vec![PathBuf::from("/opt")]);
        let g = ToolchainGrant {
            toolchains: vec![tc(Kind::Go, &["/h/sdk/go"], vec![])],
            refused: Vec::new(),
        };
        g.apply(&mut req, ralph_sandbox::BackendKind::Native);
        assert_eq!(
            req.read,
            vec![PathBuf::from("/opt"), PathBuf::from("/h/sdk/go")]
        );
        // full-access: natively the host is seen whole (nothing added); a container sees only
        // what is bound, so the trees are added there too.
        let mut fa = req.clone();
        fa.mode = ralph_sandbox::Mode::FullAccess;
        fa.read.clear();
        g.apply(&mut fa, ralph_sandbox::BackendKind::Native);
        assert!(fa.read.is_empty());
        g.apply(&mut fa, ralph_sandbox::BackendKind::Docker);
        assert_eq!(fa.read, vec![PathBuf::from("/h/sdk/go")]);
    }
}
