//! The roots rules (`limits.workspace_roots`, `limits.read_roots`) decided on the paths as the
//! submitter wrote them, before any is looked up: a path outside the roots gets the same refusal
//! whether it exists or not, so the API cannot be used to probe the host's files. What is inside
//! the roots is then resolved and checked again by [`super::admission::admit`].

use std::path::{Component, Path, PathBuf};

use super::admission::Refusal;
use super::config::Limits;
use crate::job::request::JobRequest;

/// `p` made absolute against `/`, with `.` dropped; `None` when it holds a `..` (which could
/// climb out of a root through a symlink that only the filesystem knows of).
fn as_written(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// Whether `p` (as written) lies under one of `roots`, as configured or as resolved (the
/// administrator's own symlinks count).
fn under(p: &Path, roots: &[PathBuf]) -> bool {
    let Some(p) = as_written(p) else {
        return false;
    };
    roots.iter().any(|r| {
        as_written(r).is_some_and(|r| p.starts_with(r))
            || std::fs::canonicalize(r).is_ok_and(|r| p.starts_with(r))
    })
}

fn list(roots: &[PathBuf]) -> String {
    let roots: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
    roots.join(", ")
}

/// Refuses a request whose workspace, `read`, `write` or `socket` path lies outside the roots,
/// judged on the text of the path alone.
pub fn admit_paths_as_written(req: &JobRequest, limits: &Limits) -> Result<(), Refusal> {
    let provisioned = req.repo.is_some() || req.upload.is_some();
    if limits.workspace_roots.is_empty() && !provisioned {
        return Err(Refusal {
            rule: "workspace_roots",
            field: "workspace",
            message: "this server allows no workspace (set `limits.workspace_roots`)".into(),
        });
    }
    if let Some(ws) = &req.workspace {
        if !under(ws, &limits.workspace_roots) {
            return Err(Refusal {
                rule: "workspace_roots",
                field: "workspace",
                // The path is not echoed: the answer is the same for every path outside.
                message: format!(
                    "the workspace is not under {}",
                    list(&limits.workspace_roots)
                ),
            });
        }
    }
    let roots = limits.path_roots();
    for (field, paths) in [
        ("read", &req.read),
        ("write", &req.write),
        ("socket", &req.socket),
    ] {
        if let Some(i) = paths.iter().position(|p| !under(p, &roots)) {
            return Err(Refusal {
                rule: "read_roots",
                field,
                message: format!("{field}[{i}] is not under a workspace root or a read root"),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(root: &Path) -> Limits {
        Limits {
            workspace_roots: vec![root.to_owned()],
            ..Limits::default()
        }
    }

    #[test]
    fn outside_the_roots_is_refused_alike_whether_the_path_exists_or_not() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let l = limits(&root);
        let refusal = |ws: &Path| {
            admit_paths_as_written(
                &JobRequest {
                    workspace: Some(ws.to_owned()),
                    ..Default::default()
                },
                &l,
            )
            .unwrap_err()
        };
        let there = refusal(Path::new("/etc"));
        let absent = refusal(Path::new("/etc-nope-1234"));
        assert_eq!((there.rule, there.field), ("workspace_roots", "workspace"));
        assert_eq!(there, absent);
        // A climb out through `..` is outside, however the filesystem would resolve it.
        let climb = refusal(&root.join("../root/x"));
        assert_eq!(climb.rule, "workspace_roots");
        // Inside the roots (existing or not): left to the resolution that follows.
        for ws in [root.join("a"), root.join("./b/c")] {
            let req = JobRequest {
                workspace: Some(ws),
                ..Default::default()
            };
            admit_paths_as_written(&req, &l).unwrap();
        }
    }

    #[test]
    fn read_write_and_socket_paths_are_judged_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let l = limits(dir.path());
        for (field, req) in [
            (
                "read",
                JobRequest {
                    read: vec!["/etc/shadow".into()],
                    ..Default::default()
                },
            ),
            (
                "write",
                JobRequest {
                    write: vec!["nope/relative".into()],
                    ..Default::default()
                },
            ),
            (
                "socket",
                JobRequest {
                    socket: vec!["/run/docker.sock".into()],
                    ..Default::default()
                },
            ),
        ] {
            let r = admit_paths_as_written(&req, &l).unwrap_err();
            assert_eq!((r.rule, r.field), ("read_roots", field), "{r}");
        }
    }
}
