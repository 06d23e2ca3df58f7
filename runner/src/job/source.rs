//! Where a provisioned job's workspace comes from (SPEC §11): a git repository at a ref, or an
//! upload. A job with a source has its workspace made by the runner under its state dir
//! (`<state-dir>/workspaces/<job-id>`), never a directory the submitter names.

use serde::{Deserialize, Serialize};

use super::spec::SpecError;

/// Longest repository URL, ref or branch name accepted.
const MAX_NAME: usize = 4096;

/// The source of a provisioned workspace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum WorkspaceSource {
    /// A clone of `repo` at `ref` (the remote's HEAD when absent).
    Repo {
        /// The repository URL (allowed by `limits.allowed_repos`).
        repo: String,
        /// Branch, tag or commit.
        #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
        git_ref: Option<String>,
        /// The branch of `repo` the result is pushed to, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        push: Option<String>,
    },
    /// A tree uploaded with the job (`ralph submit --upload DIR`).
    Upload {
        /// The upload's id on the server.
        upload: String,
    },
}

impl WorkspaceSource {
    /// The repository URL, for a repository source.
    pub fn repo(&self) -> Option<&str> {
        match self {
            WorkspaceSource::Repo { repo, .. } => Some(repo),
            WorkspaceSource::Upload { .. } => None,
        }
    }

    /// The branch the result is pushed to, if any.
    pub fn push(&self) -> Option<&str> {
        match self {
            WorkspaceSource::Repo { push, .. } => push.as_deref(),
            WorkspaceSource::Upload { .. } => None,
        }
    }
}

fn refuse(field: &'static str, message: String) -> Result<(), SpecError> {
    Err(SpecError { field, message })
}

/// Checks one text a git command line will carry: not empty, bounded, no control characters,
/// and not starting with `-` (never taken for an option).
fn check_word(field: &'static str, value: &str, what: &str) -> Result<(), SpecError> {
    if value.is_empty() || value.len() > MAX_NAME {
        return refuse(
            field,
            format!("`{field}` must be a non-empty {what} of at most {MAX_NAME} bytes"),
        );
    }
    if value.starts_with('-') || value.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return refuse(
            field,
            format!(
                "`{field}` must be a {what} without spaces or control characters, not starting with `-`"
            ),
        );
    }
    Ok(())
}

/// Checks a branch name git would accept (`git check-ref-format`'s rules, the ones that matter
/// for a name the runner passes on).
fn check_branch(field: &'static str, value: &str) -> Result<(), SpecError> {
    check_word(field, value, "branch name")?;
    let bad = value.contains("..")
        || value.contains("@{")
        || value.ends_with('/')
        || value.ends_with(".lock")
        || value.ends_with('.')
        || value.starts_with('/')
        || value.contains("//")
        || value
            .chars()
            .any(|c| matches!(c, '~' | '^' | ':' | '?' | '*' | '[' | '\\'));
    if bad {
        return refuse(
            field,
            format!("`{field}` must be a valid git branch name (see git check-ref-format)"),
        );
    }
    Ok(())
}

impl WorkspaceSource {
    /// Checks the source's texts (they reach git's command line).
    pub fn validate(&self) -> Result<(), SpecError> {
        match self {
            WorkspaceSource::Repo {
                repo,
                git_ref,
                push,
            } => {
                check_word("repo", repo, "repository URL")?;
                if repo.starts_with("ext::") || repo.contains("::") {
                    return refuse(
                        "repo",
                        "`repo` must be a plain URL (https://, ssh://, git://, file:// or a path), not a git remote helper".into(),
                    );
                }
                if let Some(r) = git_ref {
                    check_word("ref", r, "branch, tag or commit")?;
                }
                if let Some(b) = push {
                    check_branch("push", b)?;
                }
                Ok(())
            }
            WorkspaceSource::Upload { upload } => {
                if upload.is_empty()
                    || upload.len() > 64
                    || !upload
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-')
                {
                    return refuse(
                        "upload",
                        "`upload` must be an upload id the server returned".into(),
                    );
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(url: &str, r: Option<&str>, push: Option<&str>) -> WorkspaceSource {
        WorkspaceSource::Repo {
            repo: url.into(),
            git_ref: r.map(Into::into),
            push: push.map(Into::into),
        }
    }

    #[test]
    fn option_like_and_helper_urls_are_refused() {
        for (s, field) in [
            (repo("--upload-pack=touch /tmp/x", None, None), "repo"),
            (repo("ext::sh -c touch% /tmp/x", None, None), "repo"),
            (repo("fd::3", None, None), "repo"),
            (repo("git://h/r", Some("--output=/tmp/x"), None), "ref"),
            (repo("git://h/r", Some("a b"), None), "ref"),
            (repo("git://h/r", None, Some("a..b")), "push"),
            (repo("git://h/r", None, Some("x:refs/heads/main")), "push"),
            (
                WorkspaceSource::Upload {
                    upload: "../x".into(),
                },
                "upload",
            ),
        ] {
            assert_eq!(s.validate().unwrap_err().field, field, "{s:?}");
        }
        repo("git://127.0.0.1:9/r.git", Some("main"), Some("ralph/fix"))
            .validate()
            .unwrap();
    }

    #[test]
    fn the_ref_key_is_named_ref() {
        let s = repo("git://h/r", Some("v1"), None);
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["ref"], "v1");
        assert_eq!(v["kind"], "repo");
    }
}
