//! What a confined round sees of the host's filesystem, as the native plan shows it: the
//! policy's read trees, the workspace and the request's own `--read`/`--write` trees, less the
//! policy's hidden paths (the run's private directories aside: they hold nothing of the host).
//! `full-access` sees everything. The runner asks this before round 1 whether the program a
//! round would start is there, rather than re-deriving the rule from the policy.

use std::path::{Path, PathBuf};

use crate::policy::Policy;
use crate::spec::SandboxRequest;

/// Whether a round of `req` under `policy` sees `path` (absolute, as the host names it).
pub fn can_see(policy: &Policy, req: &SandboxRequest, path: &Path) -> bool {
    let fs = &policy.filesystem;
    if fs.unrestricted {
        return true;
    }
    let shown = fs
        .read
        .iter()
        .chain(std::iter::once(&req.workspace))
        .chain(&req.read)
        .chain(&req.write)
        .any(|root: &PathBuf| path.starts_with(root));
    shown && !fs.hidden.iter().any(|h| path.starts_with(h))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mode::Mode;
    use crate::policy::PolicySet;

    use crate::plan::fake::tool_request as req;

    fn policy(mode: Mode) -> Policy {
        let mut p = PolicySet::embedded().unwrap().get(mode).unwrap().clone();
        if !p.filesystem.unrestricted {
            p.filesystem.read = vec![PathBuf::from("/usr")];
            p.filesystem.hidden = vec![PathBuf::from("/usr/secret")];
        }
        p
    }

    #[test]
    fn the_policy_trees_the_workspace_and_the_requests_own_are_seen_less_the_hidden() {
        for mode in [Mode::ReadOnly, Mode::WorkspaceWrite] {
            let (p, r) = (policy(mode), req(mode));
            for seen in [
                "/usr/bin/python3",
                "/work/ws/run.sh",
                "/opt/tool/bin/t",
                "/srv/cache/x",
            ] {
                assert!(can_see(&p, &r, Path::new(seen)), "{mode:?}: {seen}");
            }
            for unseen in [
                "/usr/secret/key",
                "/home/me/bin/t",
                "/opt/toolbox/t",
                "/work/wsx",
            ] {
                assert!(!can_see(&p, &r, Path::new(unseen)), "{mode:?}: {unseen}");
            }
        }
    }

    #[test]
    fn full_access_sees_everything() {
        let (p, r) = (policy(Mode::FullAccess), req(Mode::FullAccess));
        assert!(can_see(&p, &r, Path::new("/home/me/bin/t")));
    }
}
