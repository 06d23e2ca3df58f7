//! What a container sees of the host's filesystem: only its bind mounts ([`super::mounts`]) —
//! the workspace and the request's `--read`, `--write` and `--socket` paths — less the
//! policy's hidden paths; in every mode, full-access included (a container has no host
//! filesystem beyond its mounts). The image's own files are the image's, not the host's: a
//! host path the image happens to have too is not seen. The run's private directories hold
//! nothing of the host and are left out, as natively ([`crate::plan::visible`]).

use std::path::{Path, PathBuf};

use crate::policy::Policy;
use crate::spec::SandboxRequest;

/// Whether a container of `req` under `policy` sees the host's `path` (absolute).
pub fn can_see(policy: &Policy, req: &SandboxRequest, path: &Path) -> bool {
    let fs = &policy.filesystem;
    let mounted = std::iter::once(&req.workspace)
        .chain(&req.read)
        .chain(&req.write)
        .chain(&req.sockets)
        .any(|root: &PathBuf| path.starts_with(root));
    mounted && (fs.unrestricted || !fs.hidden.iter().any(|h| path.starts_with(h)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mode::Mode;
    use crate::policy::PolicySet;

    use crate::plan::fake::tool_request as req;

    #[test]
    fn only_the_mounts_are_seen_in_every_mode_less_the_hidden() {
        let set = PolicySet::embedded().unwrap();
        for mode in [Mode::ReadOnly, Mode::WorkspaceWrite, Mode::FullAccess] {
            let mut p = set.get(mode).unwrap().clone();
            p.filesystem.hidden = vec![PathBuf::from("/opt/tool/secret")];
            let r = req(mode);
            for seen in ["/work/ws/run.sh", "/opt/tool/bin/t", "/srv/cache/x"] {
                assert!(can_see(&p, &r, Path::new(seen)), "{mode:?}: {seen}");
            }
            for unseen in ["/usr/bin/python3", "/home/me/bin/t", "/work/wsx"] {
                assert!(!can_see(&p, &r, Path::new(unseen)), "{mode:?}: {unseen}");
            }
            assert_eq!(
                can_see(&p, &r, Path::new("/opt/tool/secret/key")),
                mode == Mode::FullAccess,
                "{mode:?}"
            );
        }
    }
}
