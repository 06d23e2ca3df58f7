//! Admission of provisioned workspaces (SPEC §11): a job's `repo` must start with one of
//! `limits.allowed_repos` (at a path boundary), and `push` needs `limits.allow_push`.

use super::admission::Refusal;
use super::config::Limits;
use crate::job::{JobSpec, WorkspaceSource};

/// Whether `url` lies under `prefix`: equal, or the prefix ends with `/` (or `:`), or the next
/// character of the URL is `/` (so `https://h/org` does not let `https://h/org-evil` in).
fn under_prefix(url: &str, prefix: &str) -> bool {
    if prefix.is_empty() {
        return false;
    }
    let Some(rest) = url.strip_prefix(prefix) else {
        return false;
    };
    rest.is_empty() || prefix.ends_with(['/', ':']) || rest.starts_with('/')
}

/// Whether a URL's path climbs (`..` or `.` segments), which a prefix check cannot judge.
fn climbs(url: &str) -> bool {
    url.split(['/', '\\'])
        .any(|seg| seg == ".." || seg == "." || seg.eq_ignore_ascii_case("%2e%2e"))
}

/// Checks a provisioned job's source against the limits.
pub fn admit_source(spec: &JobSpec, limits: &Limits) -> Result<(), Refusal> {
    let Some(source) = &spec.source else {
        return Ok(());
    };
    let WorkspaceSource::Repo { repo, push, .. } = source else {
        return Ok(());
    };
    if climbs(repo) || !limits.allowed_repos.iter().any(|p| under_prefix(repo, p)) {
        return Err(Refusal {
            rule: "allowed_repos",
            field: "repo",
            message: format!(
                "`{repo}` is not under this server's allowed repositories ({})",
                if limits.allowed_repos.is_empty() {
                    "none".to_owned()
                } else {
                    limits.allowed_repos.join(", ")
                }
            ),
        });
    }
    if push.is_some() && !limits.allow_push {
        return Err(Refusal {
            rule: "allow_push",
            field: "push",
            message: "this server does not push results (set `limits.allow_push = true`)".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_match_at_a_path_boundary_only() {
        assert!(under_prefix("https://h/org/r.git", "https://h/org"));
        assert!(under_prefix("https://h/org/r.git", "https://h/org/"));
        assert!(!under_prefix("https://h/org-evil/r.git", "https://h/org"));
        assert!(!under_prefix("https://h/org@evil/r.git", "https://h/org"));
        assert!(!under_prefix("https://h.evil/r.git", "https://h"));
        assert!(!under_prefix("https://h/r.git", ""));
        assert!(climbs("https://h/org/../other/r.git"));
        assert!(!climbs("https://h/org/r..git"));
    }
}
