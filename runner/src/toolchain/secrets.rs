//! What a toolchain grant may never show: the runner user's home itself (or an ancestor of it),
//! the runner's state, and any tree holding a known credentials file. A toolchain's roots are
//! specific directories (`~/.rustup`, `~/.cargo/bin`, `~/.pyenv/versions/3.11.7`), so a grant
//! that would hold one of these is a layout ralph does not know (or a planted pointer, such as
//! a workspace venv's `pyvenv.cfg`): it is refused and said, never widened.

use std::path::{Path, PathBuf};

/// Files and directories under a home directory that hold credentials. `~/.cargo` itself is
/// never granted (only `~/.cargo/bin`), so neither are `~/.cargo/credentials*` and
/// `~/.cargo/config*` (which may carry a registry token); `~/.npmrc` and pip's configuration may
/// hold a registry token too: a round that needs a registry gets its URL with `--env`.
pub const HOME_SECRETS: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".pypirc",
    ".pip",
    ".config/pip",
    ".docker",
    ".aws",
    ".azure",
    ".kube",
    ".config/gcloud",
    ".config/gh",
    ".config/containers",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".cargo/config",
    ".cargo/config.toml",
    ".gem/credentials",
    ".m2",
    ".gradle",
    ".terraform.d",
    ".vault-token",
    ".password-store",
    ".local/share/keyrings",
];

/// Files under a `CARGO_HOME` that may hold a registry token.
pub const CARGO_SECRETS: &[&str] = &["credentials", "credentials.toml", "config", "config.toml"];

/// Why `grant` must not be shown, if it must not: it is `/`, the home or an ancestor of it,
/// holds a credentials file of `home` or `cargo_home`, or holds or lies in a `forbidden` tree.
pub fn refusal(
    grant: &Path,
    home: Option<&Path>,
    cargo_home: Option<&Path>,
    forbidden: &[PathBuf],
) -> Option<String> {
    if grant == Path::new("/") || !grant.is_absolute() {
        return Some("it is not a toolchain's own directory".to_owned());
    }
    if let Some(h) = home {
        if h.starts_with(grant) {
            return Some(format!(
                "it holds the runner's home `{}` itself",
                h.display()
            ));
        }
        if let Some(s) = HOME_SECRETS
            .iter()
            .map(|s| h.join(s))
            .find(|s| s.starts_with(grant))
        {
            return Some(format!(
                "it holds `{}`, which may hold credentials",
                s.display()
            ));
        }
    }
    if let Some(c) = cargo_home {
        if let Some(s) = CARGO_SECRETS
            .iter()
            .map(|s| c.join(s))
            .find(|s| s.starts_with(grant))
        {
            return Some(format!(
                "it holds `{}`, which may hold credentials",
                s.display()
            ));
        }
    }
    if let Some(f) = forbidden
        .iter()
        .find(|f| f.starts_with(grant) || grant.starts_with(f))
    {
        return Some(format!("it overlaps the runner's state `{}`", f.display()));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_home_its_secrets_and_the_state_are_never_granted() {
        let home = Path::new("/home/u");
        let state = vec![PathBuf::from("/home/u/.local/state/ralph")];
        for bad in [
            "/",
            "/home",
            "/home/u",
            "/home/u/.cargo",
            "/home/u/.config",
            "/home/u/.local",
        ] {
            assert!(
                refusal(Path::new(bad), Some(home), None, &state).is_some(),
                "{bad}"
            );
        }
        assert!(
            refusal(
                Path::new("/opt/cargo"),
                Some(home),
                Some(Path::new("/opt/cargo")),
                &[]
            )
            .is_some()
        );
        for ok in [
            "/home/u/.rustup",
            "/home/u/.cargo/bin",
            "/home/u/.pyenv/versions/3.11.7",
            "/home/u/.local/share/mise/installs/node/20",
        ] {
            assert_eq!(
                refusal(Path::new(ok), Some(home), None, &state),
                None,
                "{ok}"
            );
        }
    }
}
