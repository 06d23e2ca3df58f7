//! The sandbox-visible host paths of one job (`workspace`, `read`, `write`, `socket`, and the
//! `protect` paths below the workspace), resolved together so that no symlink a round could have
//! planted is followed (SPEC §5): see [`super::resolve`] for the walk and its two rules — one
//! that needs no memory (a link is followed only where root owns it and every directory above
//! it), and the writable trees the runner knows. This is the one place `ralph run`, `ralph serve`
//! (through the job request) and `ralph sandbox exec` judge these paths.
//!
//! The writable trees a path is checked against are the `known` ones the caller passes (the
//! state store's, the service's `workspace_roots`) plus the job's own workspace and `write`
//! directories. Those are resolved first, against the known trees alone (what does not resolve
//! then is left out); then every path is resolved against the full set, so `read = WS/link`, `write = WS/link` and a workspace reached
//! through a link in one of the job's own `write` directories are caught whatever their order.

use std::path::{Component, Path, PathBuf};

use super::resolve::{ResolveError, WritableTrees, resolve};

/// The resolved paths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxPaths {
    /// The workspace (real path).
    pub workspace: PathBuf,
    /// The `read` paths (real paths).
    pub read: Vec<PathBuf>,
    /// The `write` directories (real paths).
    pub write: Vec<PathBuf>,
    /// The `socket` paths (real paths).
    pub sockets: Vec<PathBuf>,
}

impl SandboxPaths {
    /// The job's own writable trees: its workspace and `write` directories.
    pub fn own_trees(&self) -> impl Iterator<Item = PathBuf> + '_ {
        std::iter::once(self.workspace.clone()).chain(self.write.iter().cloned())
    }
}

/// A path of a job that cannot be resolved, with the job key it came from.
#[derive(Debug, thiserror::Error)]
#[error("`{}`: {source}", given.display())]
pub struct PathError {
    /// The job key (`workspace`, `read`, `write`, `protect`); the flag is `--` + the key.
    pub field: &'static str,
    /// The path as given.
    pub given: PathBuf,
    /// Why.
    #[source]
    pub source: ResolveError,
}

/// What a job asks to see, as given (relative paths are taken against the base).
#[derive(Clone, Copy, Debug)]
pub struct Requested<'a> {
    /// The workspace.
    pub workspace: &'a Path,
    /// The `read` paths.
    pub read: &'a [PathBuf],
    /// The `write` directories.
    pub write: &'a [PathBuf],
    /// The `protect` paths (relative to the workspace).
    pub protect: &'a [PathBuf],
    /// The `socket` paths.
    pub sockets: &'a [PathBuf],
}

fn one(
    field: &'static str,
    given: &Path,
    base: &Path,
    trees: &WritableTrees,
) -> Result<PathBuf, PathError> {
    resolve(given, base, trees).map_err(|source| PathError {
        field,
        given: given.to_owned(),
        source,
    })
}

fn all(
    field: &'static str,
    given: &[PathBuf],
    base: &Path,
    trees: &WritableTrees,
) -> Result<Vec<PathBuf>, PathError> {
    given.iter().map(|p| one(field, p, base, trees)).collect()
}

/// Resolves what `req` asks for against `known` writable trees and the job's own (see the module
/// doc). A `protect` path may be missing (the sandbox creates a placeholder) but no symlink may
/// stand on its way; one that is absolute or climbs out with `..` is left to
/// [`super::JobSpec::validate`], which refuses it.
pub fn resolve_paths(
    req: Requested<'_>,
    base: &Path,
    known: &WritableTrees,
) -> Result<SandboxPaths, PathError> {
    // The job's own trees first; one that does not resolve now fails again below, against
    // every tree, with the most precise reason (a link inside one of the others).
    let own = std::iter::once(req.workspace)
        .chain(req.write.iter().map(PathBuf::as_path))
        .filter_map(|p| resolve(p, base, known).ok());
    let trees = known.with(own.collect::<Vec<_>>());
    let paths = SandboxPaths {
        workspace: one("workspace", req.workspace, base, &trees)?,
        read: all("read", req.read, base, &trees)?,
        write: all("write", req.write, base, &trees)?,
        sockets: all("socket", req.sockets, base, &trees)?,
    };
    for rel in req.protect {
        let inside = rel
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if !inside {
            continue;
        }
        match resolve(&paths.workspace.join(rel), base, &trees) {
            // Missing: the sandbox makes a placeholder. Not a directory: the sandbox says so.
            Ok(_) | Err(ResolveError::Missing { .. } | ResolveError::NotDirectory { .. }) => {}
            Err(source) => {
                return Err(PathError {
                    field: "protect",
                    given: rel.clone(),
                    source,
                });
            }
        }
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn world() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (ws, host) = (root.join("ws"), root.join("host"));
        std::fs::create_dir(&ws).unwrap();
        std::fs::create_dir(&host).unwrap();
        (dir, ws, host)
    }

    fn req<'a>(
        ws: &'a Path,
        read: &'a [PathBuf],
        write: &'a [PathBuf],
        protect: &'a [PathBuf],
    ) -> Requested<'a> {
        Requested {
            workspace: ws,
            read,
            write,
            protect,
            sockets: &[],
        }
    }

    #[test]
    fn a_read_or_write_through_a_link_in_the_jobs_own_workspace_is_refused() {
        let (_d, ws, host) = world();
        symlink(&host, ws.join("cache")).unwrap();
        let link = [ws.join("cache")];
        // The test's own links trusted like root's: what is judged here is the tree rule.
        let none = WritableTrees::none().trusting(&[0, nix::unistd::geteuid().as_raw()]);
        for (read, write, field) in [(&link[..], &[][..], "read"), (&[][..], &link[..], "write")] {
            let e = resolve_paths(req(&ws, read, write, &[]), &ws, &none).unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert!(
                matches!(e.source, ResolveError::LinkInWritableTree { ref tree, .. } if *tree == ws),
                "{e}"
            );
            assert!(
                e.to_string()
                    .starts_with(&format!("`{}`: ", ws.join("cache").display()))
            );
        }
        // Relative to the base, the same.
        let e = resolve_paths(req(&ws, &["cache".into()], &[], &[]), &ws, &none).unwrap_err();
        assert_eq!(e.field, "read", "{e}");
    }

    #[test]
    fn a_workspace_through_a_link_in_one_of_the_jobs_write_directories_is_refused() {
        let (_d, ws, host) = world();
        let linked = host.join("ws");
        symlink(&ws, &linked).unwrap();
        let e = resolve_paths(
            req(&linked, &[], std::slice::from_ref(&host), &[]),
            &host,
            &WritableTrees::none().trusting(&[0, nix::unistd::geteuid().as_raw()]),
        )
        .unwrap_err();
        assert_eq!(e.field, "workspace", "{e}");
        assert!(
            matches!(e.source, ResolveError::LinkInWritableTree { ref tree, .. } if *tree == host),
            "{e}"
        );
    }

    #[test]
    fn a_known_tree_catches_the_workspace_itself() {
        let (_d, ws, host) = world();
        let sub = ws.join("sub");
        symlink(&host, &sub).unwrap();
        let known = WritableTrees::new([ws.clone()]);
        let e = resolve_paths(req(&sub, &[], &[], &[]), &ws, &known).unwrap_err();
        assert_eq!(e.field, "workspace", "{e}");
        // Unknown, a link of a trusted owner (root's, on a real host) is followed.
        let me = nix::unistd::geteuid().as_raw();
        let trusted = WritableTrees::none().trusting(&[0, me]);
        let p = resolve_paths(req(&sub, &[], &[], &[]), &ws, &trusted).unwrap();
        assert_eq!(p.workspace, host);
    }

    /// Issue 25: with no tree known at all (another store, `ralph sandbox exec`), a workspace
    /// through a link that is not root's is refused, naming the flag's field.
    #[test]
    fn a_workspace_through_a_link_that_is_not_roots_is_refused_with_no_tree_known() {
        let (_d, ws, host) = world();
        std::fs::create_dir(ws.join("packages")).unwrap();
        let link = ws.join("packages/foo");
        symlink(&host, &link).unwrap();
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
        }
        for (read, field) in [
            (&[][..], "workspace"),
            (std::slice::from_ref(&link), "read"),
        ] {
            // The read case from another workspace: `ws` is no tree of this job's.
            let wsp = if field == "workspace" { &link } else { &host };
            let e =
                resolve_paths(req(wsp, read, &[], &[]), &ws, &WritableTrees::none()).unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert!(
                matches!(e.source, ResolveError::UntrustedLink { .. }),
                "{e}"
            );
        }
    }

    #[test]
    fn protect_paths_may_be_missing_but_not_run_through_a_link() {
        let (_d, ws, host) = world();
        let none = WritableTrees::none();
        resolve_paths(req(&ws, &[], &[], &["tests/unit".into()]), &ws, &none).unwrap();
        symlink(&host, ws.join("tests")).unwrap();
        let e = resolve_paths(req(&ws, &[], &[], &["tests/unit".into()]), &ws, &none).unwrap_err();
        assert_eq!(e.field, "protect", "{e}");
        // `..` and absolute paths are validate()'s to refuse.
        resolve_paths(
            req(&ws, &[], &[], &["../x".into(), "/etc".into()]),
            &ws,
            &none,
        )
        .unwrap();
    }

    #[test]
    fn real_paths_resolve_to_themselves() {
        let (_d, ws, host) = world();
        std::fs::create_dir(ws.join("data")).unwrap();
        let p = resolve_paths(
            req(
                &ws,
                &[ws.join("data"), host.clone()],
                &[ws.join("data")],
                &[],
            ),
            &ws,
            &WritableTrees::new([ws.clone()]),
        )
        .unwrap();
        assert_eq!(p.workspace, ws);
        assert_eq!(p.read, vec![ws.join("data"), host]);
        assert_eq!(p.write, vec![ws.join("data")]);
    }
}
