//! The writable trees' socket masks, handed to the init while it builds the view.
//!
//! The supervisor takes the snapshot of the protected paths and walks the writable trees (the
//! git inventory, whose walk also finds their unix sockets: [`super::socket_walk`]) after it
//! forked the init, while the init builds the view on the other CPU: neither changes what the
//! other reads (the init's mounts are in its own mount namespace; the command runs only after
//! the go-ahead, which comes after both). The sockets the walk found are masked like the plan's
//! own, after every other mount step and before the view becomes the root, so the init waits
//! there for this message: each path's bytes and a NUL (a path holds none), then one more NUL.
//! A message cut short (the supervisor died) is refused: the init then ends, and nothing of the
//! command runs.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

use super::step::{StepFailure, restriction};
use crate::plan::SandboxPlan;

/// Whether the init of `plan` waits for the walk's masks: a view built on its own root (the
/// only kind that has a walk to finish) with the git check's walk to take them from.
pub fn expected(plan: &SandboxPlan) -> bool {
    plan.pid_namespace
        && plan.mount_namespace
        && plan.root.is_some()
        && plan.socket_walk.is_some()
        && plan.git.is_some()
}

/// The message for `sockets`.
fn encode(sockets: &[PathBuf]) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        sockets
            .iter()
            .map(|p| p.as_os_str().len() + 1)
            .sum::<usize>()
            + 1,
    );
    for p in sockets {
        out.extend_from_slice(p.as_os_str().as_bytes());
        out.push(0);
    }
    out.push(0);
    out
}

/// The paths of a whole message, or `None` when it is not one (cut short, or a path empty).
fn decode(bytes: &[u8]) -> Option<Vec<PathBuf>> {
    let body = bytes.strip_suffix(&[0])?;
    if body.is_empty() {
        return Some(Vec::new());
    }
    let paths = body.strip_suffix(&[0])?;
    paths
        .split(|b| *b == 0)
        .map(|p| (!p.is_empty()).then(|| PathBuf::from(std::ffi::OsString::from_vec(p.to_vec()))))
        .collect()
}

/// Sends `sockets` and closes `w`. A write that fails (the init died: its set-up failure is on
/// its error pipe) is not an error here.
pub fn send(w: OwnedFd, sockets: &[PathBuf]) {
    let _ = std::fs::File::from(w).write_all(&encode(sockets));
}

/// Reads the whole message (until the supervisor closed its end).
pub fn receive(r: OwnedFd) -> Result<Vec<PathBuf>, StepFailure> {
    let mut bytes = Vec::new();
    let read = std::fs::File::from(r).read_to_end(&mut bytes);
    match read.ok().and_then(|_| decode(&bytes)) {
        Some(paths) => Ok(paths),
        None => Err(StepFailure::new(
            restriction::MOUNTS,
            "socket masks",
            "the supervisor's masks for the writable trees' sockets did not arrive whole",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn through_a_pipe(bytes: &[u8]) -> Result<Vec<PathBuf>, StepFailure> {
        let (r, w) = nix::unistd::pipe().unwrap();
        std::fs::File::from(w).write_all(bytes).unwrap();
        receive(r)
    }

    #[test]
    fn paths_arrive_as_sent_non_utf8_and_newlines_included() {
        let sockets = vec![
            PathBuf::from("/ws/a.sock"),
            PathBuf::from(std::ffi::OsString::from_vec(b"/ws/\xff\nb.sock".to_vec())),
        ];
        assert_eq!(through_a_pipe(&encode(&sockets)).unwrap(), sockets);
        assert_eq!(through_a_pipe(&encode(&[])).unwrap(), Vec::<PathBuf>::new());
    }

    #[test]
    fn a_message_cut_short_is_refused() {
        let whole = encode(&[PathBuf::from("/ws/a.sock"), PathBuf::from("/ws/b.sock")]);
        for cut in 0..whole.len() {
            assert!(
                through_a_pipe(&whole[..cut]).is_err(),
                "cut at {cut}: {:?}",
                &whole[..cut]
            );
        }
        // An empty path is no path.
        assert!(through_a_pipe(b"/ws/a.sock\0\0\0").is_err());
    }

    #[test]
    fn send_to_a_reader_gone_is_quiet() {
        let (r, w) = nix::unistd::pipe().unwrap();
        drop(r);
        // EPIPE (SIGPIPE is ignored, as in every Rust program), not a panic nor a signal.
        send(w, &[PathBuf::from("/ws/a.sock")]);
    }
}
