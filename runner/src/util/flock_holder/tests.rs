#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

fn id(dev_major: u64, dev_minor: u64, ino: u64) -> FileId {
    FileId {
        dev: nix::sys::stat::makedev(dev_major, dev_minor),
        ino,
    }
}

const LOCKS: &str = "\
1: POSIX  ADVISORY  WRITE 900 fd:01:555 0 EOF
2: FLOCK  ADVISORY  WRITE 901 00:2e:777 0 EOF
3: FLOCK  ADVISORY  WRITE 4711 fd:01:555 0 EOF
3: -> FLOCK  ADVISORY  WRITE 4712 fd:01:555 0 EOF
4: OFDLCK ADVISORY  READ  -1 fd:01:556 0 EOF
";

#[test]
fn the_holder_is_the_flock_line_of_the_same_device_and_inode() {
    assert_eq!(holder_pid(LOCKS, id(0xfd, 1, 555)), Some(4711));
    assert_eq!(holder_pid(LOCKS, id(0, 0x2e, 777)), Some(901));
    // POSIX and OFD locks are not workspace locks; nothing else holds inode 556.
    assert_eq!(holder_pid(LOCKS, id(0xfd, 1, 556)), None);
    assert_eq!(holder_pid("", id(0xfd, 1, 555)), None);
}

#[test]
fn an_inode_on_another_device_number_is_taken_only_when_unambiguous() {
    // btrfs: st_dev of a subvolume differs from the superblock device /proc/locks shows.
    assert_eq!(holder_pid(LOCKS, id(0, 0x99, 777)), Some(901));
    let two = "1: FLOCK  ADVISORY  WRITE 10 00:2e:777 0 EOF\n2: FLOCK  ADVISORY  WRITE 11 00:2f:777 0 EOF\n";
    assert_eq!(holder_pid(two, id(0, 0x99, 777)), None);
}

#[test]
fn a_holder_in_another_pid_namespace_is_no_answer() {
    let hidden = "1: FLOCK  ADVISORY  WRITE 0 fd:01:555 0 EOF\n";
    assert_eq!(holder_pid(hidden, id(0xfd, 1, 555)), None);
    let garbled =
        "1: FLOCK  ADVISORY  WRITE x fd:01:555 0 EOF\n2: FLOCK ADVISORY WRITE 5 <none> 0 EOF\n";
    assert_eq!(holder_pid(garbled, id(0xfd, 1, 555)), None);
}

#[test]
fn the_command_line_is_joined_and_bounded() {
    let proc = tempfile::tempdir().unwrap();
    std::fs::create_dir(proc.path().join("42")).unwrap();
    std::fs::write(
        proc.path().join("42/cmdline"),
        b"ralph\0run\0--workspace\0/w\0",
    )
    .unwrap();
    assert_eq!(command_line(proc.path(), 42), "ralph run --workspace /w");
    std::fs::create_dir(proc.path().join("43")).unwrap();
    std::fs::write(proc.path().join("43/cmdline"), "x\0".repeat(1000)).unwrap();
    let long = command_line(proc.path(), 43);
    assert!(long.len() <= COMMAND_BOUND, "{}", long.len());
    assert!(
        long.ends_with(crate::util::text::TRUNCATION_MARKER),
        "{long}"
    );
    assert_eq!(command_line(proc.path(), 44), "");
}

#[test]
fn holders_read_well() {
    let job = Holder::Job {
        id: "j1".into(),
        role: "serve".into(),
        pid: 7,
    };
    assert_eq!(job.to_string(), "job `j1` (`ralph serve`, pid 7)");
    let p = Holder::Process {
        pid: 8,
        command: "flock /w sleep 9".into(),
    };
    assert_eq!(p.to_string(), "pid 8 (`flock /w sleep 9`)");
    let bare = Holder::Process {
        pid: 9,
        command: String::new(),
    };
    assert_eq!(bare.to_string(), "pid 9");
    assert_eq!(
        Holder::Unknown.to_string(),
        "a process not visible from here"
    );
}
