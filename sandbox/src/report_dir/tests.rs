use std::os::unix::fs::symlink;
use std::path::PathBuf;

use super::*;

fn spec(host: &Path) -> ReportDir {
    ReportDir {
        path: host.to_owned(),
        bytes: 64 * 1024,
        entries: 16,
        files: vec![
            ReportFile {
                name: "report.json".into(),
                max_bytes: 10,
            },
            ReportFile {
                name: "usage.jsonl".into(),
                max_bytes: 100,
            },
            ReportFile {
                name: "fifo".into(),
                max_bytes: 100,
            },
        ],
    }
}

/// A directory on a tmpfs (`/dev/shm`), standing in for the sandbox's.
fn shm_dir() -> Option<tempfile::TempDir> {
    let d = tempfile::tempdir_in("/dev/shm").ok()?;
    let fs = nix::sys::statfs::statfs(d.path()).ok()?;
    (fs.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC).then_some(d)
}

#[test]
fn only_regular_kept_files_reach_the_host_each_cut_at_its_bound() {
    let Some(from) = shm_dir() else {
        eprintln!("skipped: /dev/shm is not a tmpfs on this host");
        return;
    };
    let host = tempfile::tempdir().unwrap();
    let canary = tempfile::tempdir().unwrap();
    std::fs::write(canary.path().join("secret"), "precious").unwrap();
    std::fs::write(from.path().join("report.json"), "0123456789abcdef").unwrap();
    symlink(
        canary.path().join("secret"),
        from.path().join("usage.jsonl"),
    )
    .unwrap();
    nix::unistd::mkfifo(&from.path().join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    std::fs::write(from.path().join("junk"), vec![0u8; 4096]).unwrap();
    let fd = open_for_handover(from.path()).unwrap();

    let end = deliver(&spec(host.path()), Some(fd));
    assert_eq!(
        end.kept,
        vec![KeptFile {
            name: "report.json".into(),
            bytes: 10,
            truncated: true
        }]
    );
    assert!(!end.full(), "{end:?}");
    assert_eq!(
        std::fs::read_to_string(host.path().join("report.json")).unwrap(),
        "0123456789"
    );
    let mut names: Vec<PathBuf> = std::fs::read_dir(host.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into())
        .collect();
    names.sort();
    assert_eq!(names, vec![PathBuf::from("report.json")], "{end:?}");
    assert!(
        end.refused("usage.jsonl")
            .is_some_and(|w| w.contains("symlinks are refused")),
        "{end:?}"
    );
    assert_eq!(end.refused("fifo"), Some("not a regular file"), "{end:?}");
    assert_eq!(
        std::fs::read_to_string(canary.path().join("secret")).unwrap(),
        "precious"
    );
}

#[test]
fn a_handover_that_is_not_a_tmpfs_or_missing_keeps_nothing() {
    let host = tempfile::tempdir().unwrap();
    let end = deliver(&spec(host.path()), None);
    assert!(end.kept.is_empty() && !end.problems.is_empty(), "{end:?}");
    let disk = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
    let fs = nix::sys::statfs::statfs(disk.path()).unwrap();
    if fs.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC {
        return;
    }
    std::fs::write(disk.path().join("report.json"), "x").unwrap();
    let end = deliver(
        &spec(host.path()),
        Some(open_for_handover(disk.path()).unwrap()),
    );
    assert!(end.kept.is_empty(), "{end:?}");
    assert!(!host.path().join("report.json").exists());
}

#[test]
fn the_descriptor_travels_with_its_tag() {
    let mut fds = [-1; 2];
    // SAFETY: socketpair writes two descriptors into the array we own.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    assert_eq!(rc, 0);
    // SAFETY: both were just created and are ours.
    let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("x"), "hello").unwrap();
    let fd = open_for_handover(dir.path()).unwrap();
    send_fd(a.as_fd(), fd.as_fd(), HANDOVER_TAG).unwrap();
    drop((a, fd));
    let mut buf = [0u8; 64];
    let (n, got) = recv_with_fds(b.as_fd(), &mut buf, libc::MSG_DONTWAIT).unwrap();
    assert_eq!(&buf[..n], HANDOVER_TAG);
    assert_eq!(got.len(), 1);
    let again = open_in(got[0].as_fd(), "x", libc::O_RDONLY, 0).unwrap();
    let mut text = String::new();
    std::fs::File::from(again)
        .read_to_string(&mut text)
        .unwrap();
    assert_eq!(text, "hello");
    let (n, got) = recv_with_fds(b.as_fd(), &mut buf, libc::MSG_DONTWAIT).unwrap();
    assert_eq!((n, got.len()), (0, 0), "end-of-file after the one message");
}

#[test]
fn an_overfull_host_directory_is_emptied_and_said_full() {
    let host = tempfile::tempdir().unwrap();
    let out = host.path().join("out");
    std::fs::create_dir(&out).unwrap();
    for i in 0..20 {
        std::fs::write(out.join(format!("f{i}")), "x").unwrap();
    }
    let end = check_host(&spec(&out));
    assert!(end.full(), "{end:?}");
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0);
    std::fs::write(out.join("report.json"), "{}").unwrap();
    let end = check_host(&spec(&out));
    assert!(!end.full(), "{end:?}");
    assert_eq!(end.kept.len(), 1);
}
