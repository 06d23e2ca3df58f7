//! Unix sockets in a native run's writable trees, found by the git check's walk before the run
//! ([`crate::gitguard::inventory`]), so that each writable tree is walked once for both (SPEC §5
//! "The host boundary": a socket in a visible tree is not connectable unless granted).
//!
//! The plan scans what the git walk does not cover — the policy's scanned trees, the `--read`
//! trees and the protected paths inside the writable trees (read-only mounts, which the git walk
//! never looks into) — and leaves the writable trees to the helper: [`SocketWalk`] is what it
//! hands over. Once the inventory is taken, [`SocketWalk::finish`] names the sockets it found
//! to mask (the init mounts an empty mode-000 file over each, as for the plan's own:
//! [`super::late_masks`]) and states the restriction's final line in the run's enforcement.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::gitguard::Inventory;
use crate::outcome::{Enforcement, Level, Restriction};
use crate::plan::sockets_detail;

/// What the plan leaves to the helper's walk of the writable trees.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SocketWalk {
    /// Sockets granted with `--socket` (made visible and left connectable).
    pub granted: Vec<PathBuf>,
    /// Sockets the plan's own scan masked (in the other visible trees).
    pub masked: usize,
    /// Trees the plan's own scan did not walk to the end.
    pub incomplete: Vec<PathBuf>,
    /// The Landlock ABI (for the restriction's line).
    pub abi: i32,
}

impl SocketWalk {
    /// The sockets `inventory` found that are not granted (to mask), and the final line of
    /// [`Restriction::UnixSockets`] in `e` (replacing the plan's).
    pub fn finish(&self, inventory: &Inventory, e: &mut Enforcement) -> Vec<PathBuf> {
        let found = inventory.sockets();
        let masks: Vec<PathBuf> = found
            .sockets
            .into_iter()
            .filter(|s| !self.granted.contains(s))
            .collect();
        let mut incomplete = self.incomplete.clone();
        incomplete.extend(found.incomplete);
        e.restrictions
            .retain(|r| r.restriction != Restriction::UnixSockets);
        e.record(
            Restriction::UnixSockets,
            if incomplete.is_empty() {
                Level::Full
            } else {
                Level::Partial
            },
            sockets_detail(
                self.masked + masks.len(),
                self.granted.len(),
                &incomplete,
                Some(self.abi),
            ),
        );
        masks
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gitguard::{self, GitGuard};
    use crate::mode::{BackendKind, Mode};

    #[test]
    fn the_git_walk_finds_the_sockets_and_finish_masks_all_but_the_granted() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(ws.join("a/b/.git")).unwrap();
        std::fs::create_dir_all(ws.join(".ralph")).unwrap();
        let bind = |p: &std::path::Path| std::os::unix::net::UnixListener::bind(p).unwrap();
        let _deep = bind(&ws.join("a/b/deep.sock"));
        let _in_git = bind(&ws.join("a/b/.git/fsmonitor--daemon.ipc"));
        let _granted = bind(&ws.join("granted.sock"));
        // Inside a protected path: not the walk's (the plan scans protected paths itself).
        let _protected = bind(&ws.join(".ralph/agent.sock"));
        std::fs::write(ws.join("a/plain.txt"), "x").unwrap();
        std::os::unix::fs::symlink(ws.join("a/b/deep.sock"), ws.join("link.sock")).unwrap();
        let guard = GitGuard::new(&ws, &[], vec![ws.join(".ralph")]);
        let inventory = gitguard::inventory(&guard);
        let found = inventory.sockets();
        assert_eq!(
            found.sockets,
            [
                ws.join("a/b/.git/fsmonitor--daemon.ipc"),
                ws.join("a/b/deep.sock"),
                ws.join("granted.sock"),
            ],
            "every socket of the tree, none through the symlink, none in the protected path"
        );
        assert!(found.incomplete.is_empty());
        let walk = SocketWalk {
            granted: vec![ws.join("granted.sock")],
            masked: 2,
            incomplete: Vec::new(),
            abi: 7,
        };
        let mut e = Enforcement::new(BackendKind::Native, Mode::WorkspaceWrite);
        e.record(Restriction::UnixSockets, Level::Full, "the plan's line");
        let masks = walk.finish(&inventory, &mut e);
        assert_eq!(
            masks,
            [
                ws.join("a/b/.git/fsmonitor--daemon.ipc"),
                ws.join("a/b/deep.sock"),
            ]
        );
        let lines: Vec<_> = e
            .restrictions
            .iter()
            .filter(|r| r.restriction == Restriction::UnixSockets)
            .collect();
        assert_eq!(lines.len(), 1, "the plan's line is replaced: {lines:?}");
        assert_eq!(lines[0].level, Level::Full);
        assert!(
            lines[0]
                .detail
                .starts_with("4 unix socket(s) in visible trees masked, 1 granted"),
            "{}",
            lines[0].detail
        );
    }
}
