use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use super::*;

/// `ioctl(NS_GET_NSTYPE)`: the kind of namespace a descriptor refers to.
const NS_GET_NSTYPE: libc::c_ulong = 0xb703;

/// A `sleep` in a mount namespace of its own (and a user namespace that allows it without
/// root), or `None` (printed) where this host makes none.
fn in_own_view() -> Option<Child> {
    let mut cmd = Command::new("sleep");
    cmd.arg("60").stdin(Stdio::null());
    // SAFETY: unshare is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    match cmd.spawn() {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!("skipped: this host makes no user and mount namespace here: {e}");
            None
        }
    }
}

/// `child`'s mount namespace as (device, inode), once it left ours (after its `unshare`).
fn view_of(child: &Child) -> (u64, u64) {
    let ours = std::fs::metadata("/proc/self/ns/mnt").unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let theirs = std::fs::metadata(format!("/proc/{}/ns/mnt", child.id())).unwrap();
        if theirs.ino() != ours.ino() {
            return (theirs.dev(), theirs.ino());
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the child never left this mount namespace"
        );
        std::thread::yield_now();
    }
}

fn end(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_process_in_this_view_has_none_to_hand_back() {
    let child = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
    assert!(hold_view(pid).is_none(), "the host's own view held");
    end(child);
    assert!(
        hold_view(Pid::from_raw(i32::MAX)).is_none(),
        "no such process"
    );
}

#[test]
fn a_view_sent_back_outlives_its_last_process_in_the_runners_end_only() {
    let Some(child) = in_own_view() else { return };
    let (dev, ino) = view_of(&child);
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
    let view = hold_view(pid).expect("the child's own view");
    let held = std::fs::metadata(format!("/proc/self/fd/{}", view.as_raw_fd())).unwrap();
    assert_eq!(
        (held.dev(), held.ino()),
        (dev, ino),
        "the child's view is held"
    );
    let (ours, theirs) = channel().unwrap();
    send(theirs, view);
    // Its last process gone, and the helper's end closed (sent): the view is in flight only.
    end(child);
    let mut buf = [0u8; 16];
    let got = fd_pass::recv(ours.as_fd(), &mut buf, 2, libc::MSG_DONTWAIT).unwrap();
    assert_eq!(&buf[..got.len], MESSAGE);
    assert_eq!(got.fds.len(), 1, "one descriptor: the view");
    let arrived = std::fs::metadata(format!("/proc/self/fd/{}", got.fds[0].as_raw_fd())).unwrap();
    assert_eq!(
        (arrived.dev(), arrived.ino()),
        (dev, ino),
        "the view arrived after its last process ended"
    );
    // SAFETY: an ioctl without arguments on a descriptor we own.
    let kind = unsafe { libc::ioctl(got.fds[0].as_raw_fd(), NS_GET_NSTYPE) };
    assert_eq!(kind, libc::CLONE_NEWNS, "a mount namespace");
}

#[test]
fn a_view_whose_runner_end_is_gone_is_dropped_by_the_sender() {
    let Some(child) = in_own_view() else { return };
    view_of(&child);
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
    let view = hold_view(pid).expect("the child's own view");
    let (ours, theirs) = channel().unwrap();
    drop(ours);
    // No SIGPIPE (this test process would die of it), no error to handle: the view goes here.
    send(theirs, view);
    end(child);
}

#[test]
fn the_runners_end_is_closed_off_the_runtime_and_at_once_without_one() {
    // Without a runtime: closed here (the helper's end sees end-of-file at once).
    let (ours, theirs) = channel().unwrap();
    release(ours);
    let mut buf = [0u8; 4];
    let got = fd_pass::recv(theirs.as_fd(), &mut buf, 1, libc::MSG_DONTWAIT).unwrap();
    assert_eq!((got.len, got.fds.len()), (0, 0), "end-of-file");
    // In a runtime: closed on a blocking thread, soon.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (ours, theirs) = channel().unwrap();
    rt.block_on(async { release(ours) });
    drop(rt);
    let got = fd_pass::recv(theirs.as_fd(), &mut buf, 1, 0).unwrap();
    assert_eq!(
        (got.len, got.fds.len()),
        (0, 0),
        "end-of-file once released"
    );
}
