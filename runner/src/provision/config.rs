//! The runner's side of provisioning, from the service configuration's `[provision]` table:
//! credentials for private repositories (files the runner reads; never passed into a round),
//! whether `push` is allowed, the workspaces' retention and disk budget, and how long unused
//! uploads are kept.

use std::path::PathBuf;

use serde::Deserialize;

use crate::util::units::{ByteSize, HumanDuration};

/// One repository credential: used for every repository URL that starts with `prefix`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepoCredential {
    /// URL prefix (`https://git.example.com/team/`).
    pub prefix: String,
    /// HTTP(S): the user name sent with the token (default `x-access-token`).
    #[serde(default)]
    pub username: Option<String>,
    /// HTTP(S): a file holding the token or password.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// SSH: the private key file.
    #[serde(default)]
    pub ssh_key: Option<PathBuf>,
}

/// `[provision]` in the service configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProvisionConfig {
    /// Whether jobs may ask for `push = "BRANCH"`: the service sets it from
    /// `limits.allow_push` (default false).
    #[serde(skip)]
    pub allow_push: bool,
    /// The service's `agent_user` (a root runner's overlays belong to it).
    #[serde(skip)]
    pub agent_user: Option<String>,
    /// Credentials by URL prefix (the longest matching prefix is used).
    #[serde(default)]
    pub credentials: Vec<RepoCredential>,
    /// How long a finished job's provisioned workspace is kept (its patch stays). Unset: kept
    /// until the budget removes it (`ralph prune` removes artifacts, not workspaces).
    #[serde(default)]
    pub workspace_retention: Option<HumanDuration>,
    /// Disk budget of all provisioned workspaces: finished jobs' workspaces are removed, oldest
    /// first, to stay under it.
    #[serde(default)]
    pub workspace_budget: Option<ByteSize>,
    /// How a repository job's workspace is laid out (default `auto`).
    #[serde(default)]
    pub workspace_layout: WorkspaceLayout,
    /// How long an upload no queued or running job names is kept after it was received (or
    /// last named by a submitted job). Unset: [`DEFAULT_UPLOAD_RETENTION`].
    #[serde(default)]
    pub upload_retention: Option<HumanDuration>,
}

/// How a repository job's workspace is made (`[provision] workspace_layout`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkspaceLayout {
    /// An overlay where the runner can mount one (root, overlayfs), else a checkout.
    #[default]
    Auto,
    /// Always an overlay of the shared base tree: a job fails if it cannot be mounted.
    Overlay,
    /// Always a full checkout of its own (a clone sharing the mirror's objects).
    Clone,
}

impl WorkspaceLayout {
    /// Its name, as journalled.
    pub fn as_str(self) -> &'static str {
        match self {
            WorkspaceLayout::Auto => "auto",
            WorkspaceLayout::Overlay => "overlay",
            WorkspaceLayout::Clone => "clone",
        }
    }
}

/// How long an unused upload is kept when `upload_retention` is not set.
pub const DEFAULT_UPLOAD_RETENTION: std::time::Duration = std::time::Duration::from_secs(3600);

impl ProvisionConfig {
    /// The credential for `url`, if one is configured.
    pub fn credential_for(&self, url: &str) -> Option<&RepoCredential> {
        self.credentials
            .iter()
            .filter(|c| !c.prefix.is_empty() && url.starts_with(&c.prefix))
            .max_by_key(|c| c.prefix.len())
    }
}

/// Standard base64 of `bytes` (for an HTTP Basic header).
pub(crate) fn base64(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(TABLE[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc_examples() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }

    #[test]
    fn the_longest_prefix_wins() {
        let c = ProvisionConfig {
            credentials: vec![
                RepoCredential {
                    prefix: "https://h/".into(),
                    ..Default::default()
                },
                RepoCredential {
                    prefix: "https://h/team/".into(),
                    username: Some("u".into()),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        assert_eq!(
            c.credential_for("https://h/team/r.git")
                .and_then(|c| c.username.as_deref()),
            Some("u")
        );
        assert!(c.credential_for("https://other/r.git").is_none());
    }
}
