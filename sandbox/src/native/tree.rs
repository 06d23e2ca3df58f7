//! Finding and signalling every descendant of the supervisor.
//!
//! The supervisor is a child subreaper (`PR_SET_CHILD_SUBREAPER`), so a grandchild that called
//! `setsid` and whose parent exited is re-parented to it and stays findable here. Signals go
//! through pidfds, after checking the parent link again, so a recycled pid is never hit.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io;

use crate::sys;

/// The parent pid of `pid`, read from `/proc/PID/stat`.
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: parse after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    let _state = fields.next()?;
    fields.next()?.parse().ok()
}

/// Every live descendant of `root`, parents before children.
pub fn descendants(root: i32) -> io::Result<Vec<i32>> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for entry in std::fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some(ppid) = parent_of(pid) {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut out = Vec::new();
    let mut queue = VecDeque::from([root]);
    let mut seen = HashSet::from([root]);
    while let Some(p) = queue.pop_front() {
        for &c in children.get(&p).map(Vec::as_slice).unwrap_or_default() {
            if seen.insert(c) {
                out.push(c);
                queue.push_back(c);
            }
        }
    }
    Ok(out)
}

/// Sends `signal` to every descendant of `root`; returns how many were signalled.
///
/// Each target is opened as a pidfd first and its parent is checked again afterwards, so a pid
/// that was recycled between the scan and the signal is left alone.
pub fn signal_descendants(root: i32, signal: i32) -> io::Result<u32> {
    let pids = descendants(root)?;
    let tree: HashSet<i32> = pids.iter().copied().chain([root]).collect();
    let mut count = 0;
    for pid in pids {
        let Ok(fd) = sys::pidfd_open(pid) else {
            continue;
        };
        match parent_of(pid) {
            Some(ppid) if tree.contains(&ppid) => {}
            _ => continue,
        }
        if sys::pidfd_send_signal(&fd, signal).is_ok() {
            count += 1;
            if signal == libc::SIGTERM {
                // A stopped process would never see the SIGTERM.
                let _ = sys::pidfd_send_signal(&fd, libc::SIGCONT);
            }
        }
    }
    Ok(count)
}
