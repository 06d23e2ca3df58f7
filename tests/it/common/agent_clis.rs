//! The real agent CLIs `.ci/setup` installs into `<repo>/target/agent-clis` (pinned by
//! `.ci/agent-clis/package-lock.json`): where their binaries are, and what a test does when
//! they are missing (fail under `CI=true`, skip otherwise).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

/// The command that installs the CLIs.
pub const INSTALL_COMMAND: &str = ".ci/agent-clis/install.sh (run by .ci/setup)";

/// `<repo>/target/agent-clis`, its links resolved (a worktree may link it to a shared install,
/// and a sandbox given the resolved tree must find the binaries by paths inside it).
pub fn agent_clis_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("target/agent-clis");
    dir.canonicalize().unwrap_or(dir)
}

/// The tree a sandbox must be able to read for the CLIs to run (`--read` it): the native
/// binaries live inside it.
pub fn agent_clis_read_dir() -> PathBuf {
    agent_clis_dir().join("node_modules")
}

/// The native binary of `name` (`codex` or `claude`) under `root/node_modules`. Both npm
/// packages ship one per platform as an optional dependency; the JavaScript launchers
/// (`codex.js`, `.bin/*`) only find and exec it, so tests run the binary itself.
fn binary_in(root: &Path, name: &str) -> Option<PathBuf> {
    let nm = root.join("node_modules");
    let candidates: &[&str] = match name {
        "codex" => &[
            "@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex",
            "@openai/codex-linux-arm64/vendor/aarch64-unknown-linux-musl/bin/codex",
        ],
        "claude" => &[
            "@anthropic-ai/claude-code-linux-x64/claude",
            "@anthropic-ai/claude-code-linux-x64-musl/claude",
            "@anthropic-ai/claude-code-linux-arm64/claude",
            "@anthropic-ai/claude-code-linux-arm64-musl/claude",
        ],
        _ => &[],
    };
    candidates
        .iter()
        .map(|c| nm.join(c))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The installed native binary of `name` (`codex` or `claude`), if any.
pub fn agent_cli(name: &str) -> Option<PathBuf> {
    binary_in(&agent_clis_dir(), name)
}

/// An installed CLI: its binary and the directory a sandbox must be given read access to.
#[derive(Clone, Debug)]
pub struct AgentCli {
    pub bin: PathBuf,
    pub read_dir: PathBuf,
}

/// [`agent_cli`], for a test that needs it: under `CI=true` a missing CLI panics with the
/// install command; otherwise the test is skipped (a reason on stderr, `None`).
pub fn require_agent_cli(name: &str) -> Option<AgentCli> {
    if let Some(bin) = agent_cli(name) {
        return Some(AgentCli {
            bin,
            read_dir: agent_clis_read_dir(),
        });
    }
    let why = format!(
        "the {name} CLI is not installed under {}; install it with {INSTALL_COMMAND}",
        agent_clis_dir().display()
    );
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
    eprintln!("skipped: {why}");
    None
}
