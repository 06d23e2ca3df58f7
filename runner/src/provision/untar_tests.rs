//! Hostile uploads first (each refused naming the entry, nothing written outside `dest`,
//! `dest` left empty), then limits, modes and a pack/unpack round trip.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tar::{EntryType, Header};

use super::*;

const LIMITS: UnpackLimits = UnpackLimits {
    max_bytes: 1 << 20,
    max_files: 100,
};

/// One raw entry: the path and link name are written as bytes, unchecked by the builder.
struct Raw {
    kind: EntryType,
    path: String,
    link: Option<String>,
    data: Vec<u8>,
    mode: u32,
}

fn file(path: &str, data: &[u8]) -> Raw {
    Raw {
        kind: EntryType::Regular,
        path: path.to_string(),
        link: None,
        data: data.to_vec(),
        mode: 0o644,
    }
}

fn dir(path: &str) -> Raw {
    Raw {
        kind: EntryType::Directory,
        mode: 0o755,
        ..file(path, b"")
    }
}

fn link(kind: EntryType, path: &str, target: &str) -> Raw {
    Raw {
        kind,
        link: Some(target.to_string()),
        ..file(path, b"")
    }
}

fn special(kind: EntryType, path: &str) -> Raw {
    Raw {
        kind,
        ..file(path, b"")
    }
}

fn raw_header(entry: &Raw) -> Header {
    let mut header = Header::new_gnu();
    let gnu = header.as_gnu_mut().unwrap();
    gnu.name[..entry.path.len()].copy_from_slice(entry.path.as_bytes());
    if let Some(target) = &entry.link {
        gnu.linkname[..target.len()].copy_from_slice(target.as_bytes());
    }
    header.set_entry_type(entry.kind);
    header.set_mode(entry.mode);
    header.set_size(entry.data.len() as u64);
    header.set_cksum();
    header
}

fn archive(entries: &[Raw]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for entry in entries {
        builder.append(&raw_header(entry), &entry.data[..]).unwrap();
    }
    builder.into_inner().unwrap()
}

/// A sandbox: `base/dest` is the workspace, `base/outside/` holds a sentinel file.
struct Sandbox {
    _tmp: tempfile::TempDir,
    base: PathBuf,
    dest: PathBuf,
}

fn sandbox() -> Sandbox {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().to_path_buf();
    fs::create_dir(base.join("outside")).unwrap();
    fs::write(base.join("outside/sentinel"), b"untouched").unwrap();
    let dest = base.join("dest");
    fs::create_dir(&dest).unwrap();
    Sandbox {
        _tmp: tmp,
        base,
        dest,
    }
}

/// Everything under `root` (no symlink followed): relative path -> kind, mode, content.
fn listing(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(here) = stack.pop() {
        for child in fs::read_dir(&here).unwrap() {
            let path = child.unwrap().path();
            let meta = fs::symlink_metadata(&path).unwrap();
            let mode = meta.permissions().mode() & 0o7777;
            let what = if meta.is_dir() {
                stack.push(path.clone());
                format!("dir {mode:o}")
            } else if meta.file_type().is_symlink() {
                format!("link -> {}", fs::read_link(&path).unwrap().display())
            } else if meta.is_file() {
                format!("file {mode:o} {:?}", fs::read(&path).unwrap())
            } else {
                format!("special {:?}", meta.file_type())
            };
            out.insert(path.strip_prefix(root).unwrap().to_path_buf(), what);
        }
    }
    out
}

/// Unpacks `entries` into a fresh sandbox, expects a refusal, and checks that nothing changed
/// outside `dest` and that `dest` is empty. Returns the error.
fn refused_with(entries: &[Raw], limits: &UnpackLimits) -> UntarError {
    let sb = sandbox();
    let before = listing(&sb.base);
    let err = unpack(&archive(entries)[..], &sb.dest, limits).unwrap_err();
    assert_eq!(
        listing(&sb.base),
        before,
        "something changed beside dest: {err}"
    );
    assert!(
        listing(&sb.dest).is_empty(),
        "dest not emptied after: {err}"
    );
    assert_eq!(
        fs::read("/etc/passwd").is_ok(),
        Path::new("/etc/passwd").exists()
    );
    err
}

fn assert_refused(err: &UntarError, path: &str, rule: Rule) {
    match err {
        UntarError::Refused { path: p, rule: r }
        | UntarError::LinkRefused {
            path: p, rule: r, ..
        } => {
            assert_eq!((p.as_str(), r), (path, &rule), "{err}");
        }
        other => panic!("expected a refusal of {path} ({rule}), got: {other}"),
    }
    let shown = err.to_string();
    assert!(shown.starts_with("failed to unpack"), "{shown}");
    assert!(shown.contains(&format!("`{path}`")), "{shown}");
    assert!(shown.contains(&rule.to_string()), "{shown}");
}

#[test]
fn path_traversal_is_refused() {
    let ok = file("ok.txt", b"fine");
    let err = refused_with(&[file("ok.txt", b"fine"), file("../x", b"evil")], &LIMITS);
    assert_refused(&err, "../x", Rule::ParentDir);
    let err = refused_with(&[dir("a"), file("a/../../x", b"evil")], &LIMITS);
    assert_refused(&err, "a/../../x", Rule::ParentDir);
    let err = refused_with(&[ok, file("/tmp/abs", b"evil")], &LIMITS);
    assert_refused(&err, "/tmp/abs", Rule::AbsolutePath);
}

#[test]
fn symlink_to_etc_then_a_file_through_it_is_refused() {
    let err = refused_with(
        &[
            link(EntryType::Symlink, "a", "/etc"),
            file("a/passwd", b"evil"),
        ],
        &LIMITS,
    );
    assert_refused(&err, "a", Rule::LinkAbsolute);
    assert!(err.to_string().contains("a link to `/etc`"), "{err}");
}

#[test]
fn a_file_through_an_inner_symlink_is_refused() {
    // The link itself is allowed (it points inside); writing through it is not.
    let err = refused_with(
        &[
            dir("sub"),
            link(EntryType::Symlink, "l", "sub"),
            file("l/x", b"via link"),
        ],
        &LIMITS,
    );
    assert_refused(&err, "l/x", Rule::ThroughLink);
    // A duplicate name cannot turn a link into a write through it either.
    let err = refused_with(
        &[
            link(EntryType::Symlink, "l", "x"),
            dir("l"),
            file("l/y", b"evil"),
        ],
        &LIMITS,
    );
    assert_refused(&err, "l", Rule::ThroughLink);
}

#[test]
fn symlinks_pointing_out_are_refused() {
    let err = refused_with(&[link(EntryType::Symlink, "up", "../../outside")], &LIMITS);
    assert_refused(&err, "up", Rule::LinkOutside);
    let err = refused_with(
        &[
            dir("d"),
            link(EntryType::Symlink, "d/up", "../../outside/sentinel"),
        ],
        &LIMITS,
    );
    assert_refused(&err, "d/up", Rule::LinkOutside);
    // `l -> .` is inside, but `l/..` is dest's parent for the kernel: refused.
    let err = refused_with(
        &[
            link(EntryType::Symlink, "l", "."),
            link(EntryType::Symlink, "m", "l/../outside"),
        ],
        &LIMITS,
    );
    assert_refused(&err, "m", Rule::LinkThroughLink);
}

#[test]
fn hard_links_out_are_refused() {
    let err = refused_with(&[link(EntryType::Link, "pw", "/etc/passwd")], &LIMITS);
    assert_refused(&err, "pw", Rule::AbsolutePath);
    let err = refused_with(
        &[link(EntryType::Link, "pw", "../outside/sentinel")],
        &LIMITS,
    );
    assert_refused(&err, "pw", Rule::ParentDir);
    let err = refused_with(
        &[dir("d"), link(EntryType::Link, "h", "d"), file("f", b"x")],
        &LIMITS,
    );
    assert_refused(&err, "h", Rule::HardLinkTarget);
    let err = refused_with(
        &[
            link(EntryType::Symlink, "s", "f"),
            file("f", b"x"),
            link(EntryType::Link, "h", "s"),
        ],
        &LIMITS,
    );
    assert_refused(&err, "h", Rule::HardLinkTarget);
}

#[test]
fn devices_and_fifos_are_refused() {
    let err = refused_with(
        &[file("ok", b"x"), special(EntryType::Char, "null")],
        &LIMITS,
    );
    assert_refused(&err, "null", Rule::Special("character device"));
    let err = refused_with(&[special(EntryType::Block, "sda")], &LIMITS);
    assert_refused(&err, "sda", Rule::Special("block device"));
    let err = refused_with(&[special(EntryType::Fifo, "pipe")], &LIMITS);
    assert_refused(&err, "pipe", Rule::Special("fifo"));
}

#[test]
fn a_tar_bomb_of_many_files_is_refused() {
    let limits = UnpackLimits {
        max_bytes: 1 << 20,
        max_files: 10,
    };
    let entries: Vec<Raw> = (0..50).map(|i| file(&format!("f{i}"), b"x")).collect();
    let err = refused_with(&entries, &limits);
    assert_refused(&err, "f10", Rule::TooManyFiles(10));
}

#[test]
fn files_over_the_byte_limit_are_refused() {
    let limits = UnpackLimits {
        max_bytes: 1000,
        max_files: 100,
    };
    let err = refused_with(&[file("a", &[1; 600]), file("b", &[2; 600])], &limits);
    assert_refused(&err, "b", Rule::TooManyBytes(1000));
}

#[test]
fn a_huge_declared_size_is_refused_before_writing() {
    let mut header = raw_header(&file("huge", b""));
    header.set_size(1 << 40);
    header.set_cksum();
    let mut stream = header.as_bytes().to_vec();
    stream.extend_from_slice(&[0; 4096]);
    let sb = sandbox();
    let before = listing(&sb.base);
    let err = unpack(&stream[..], &sb.dest, &LIMITS).unwrap_err();
    assert_refused(&err, "huge", Rule::TooManyBytes(LIMITS.max_bytes));
    assert_eq!(listing(&sb.base), before);
}

#[test]
fn a_header_smaller_than_its_data_is_refused() {
    // The header says 10 bytes, 2048 follow: the rest is garbage where a header should be.
    let mut header = raw_header(&file("liar", b""));
    header.set_size(10);
    header.set_cksum();
    let mut stream = header.as_bytes().to_vec();
    stream.extend_from_slice(&[b'A'; 2048]);
    stream.extend_from_slice(&[0; 1024]);
    let sb = sandbox();
    let before = listing(&sb.base);
    let err = unpack(&stream[..], &sb.dest, &LIMITS).unwrap_err();
    assert!(matches!(err, UntarError::Stream { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with("failed to read the upload's tar stream"),
        "{err}"
    );
    assert_eq!(listing(&sb.base), before);
    assert!(listing(&sb.dest).is_empty());
}

#[test]
fn a_huge_sparse_file_is_refused_on_bytes_written() {
    // GNU sparse: 512 bytes of data at the end of a 16 GiB file of holes.
    let real = 1u64 << 34;
    let mut header = Header::new_gnu();
    let gnu = header.as_gnu_mut().unwrap();
    gnu.name[..6].copy_from_slice(b"sparse");
    gnu.sparse[0].set_offset(real - 512);
    gnu.sparse[0].set_length(512);
    gnu.set_real_size(real);
    header.set_entry_type(EntryType::GNUSparse);
    header.set_mode(0o644);
    header.set_size(512);
    header.set_cksum();
    let mut stream = header.as_bytes().to_vec();
    stream.extend_from_slice(&[7; 512]);
    stream.extend_from_slice(&[0; 1024]);
    let sb = sandbox();
    let before = listing(&sb.base);
    let err = unpack(&stream[..], &sb.dest, &LIMITS).unwrap_err();
    assert_refused(&err, "sparse", Rule::TooManyBytes(LIMITS.max_bytes));
    assert_eq!(listing(&sb.base), before);
    assert!(listing(&sb.dest).is_empty());
}

#[test]
fn a_stream_of_padding_over_the_bound_is_refused() {
    let limits = UnpackLimits {
        max_bytes: 0,
        max_files: 0,
    };
    // Global PAX headers create nothing but still cost stream bytes.
    let mut entries = Vec::new();
    for _ in 0..40 {
        entries.push(Raw {
            kind: EntryType::XGlobalHeader,
            data: vec![b'\n'; 60 * 1024],
            ..file("g", b"")
        });
    }
    let err = refused_with(&entries, &limits);
    assert!(matches!(err, UntarError::StreamTooLarge { .. }), "{err}");
}

#[test]
fn a_non_empty_dest_is_refused() {
    let sb = sandbox();
    fs::write(sb.dest.join("mine"), b"keep").unwrap();
    let err = unpack(&archive(&[file("x", b"y")])[..], &sb.dest, &LIMITS).unwrap_err();
    assert!(matches!(err, UntarError::Dest { .. }), "{err}");
    assert!(err.to_string().contains("it is not empty"), "{err}");
    assert_eq!(fs::read(sb.dest.join("mine")).unwrap(), b"keep");
}

#[test]
fn modes_are_masked_and_duplicates_never_write_through_a_hard_link() {
    let sb = sandbox();
    let mut suid = file("suid", b"#!/bin/sh\n");
    suid.mode = 0o6777;
    let mut sticky = dir("sticky");
    sticky.mode = 0o1777;
    let entries = [
        suid,
        sticky,
        file("f", b"original"),
        link(EntryType::Link, "h", "f"),
        file("h", b"replaced"),
        file("dup", b"one"),
        file("dup", b"two"),
    ];
    let summary = unpack(&archive(&entries)[..], &sb.dest, &LIMITS).unwrap();
    assert_eq!(summary.files, 7);
    let mode = |p: &str| fs::metadata(sb.dest.join(p)).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode("suid"), 0o775);
    assert_eq!(mode("sticky"), 0o775);
    assert_eq!(fs::read(sb.dest.join("f")).unwrap(), b"original");
    assert_eq!(fs::read(sb.dest.join("h")).unwrap(), b"replaced");
    assert_eq!(fs::read(sb.dest.join("dup")).unwrap(), b"two");
}

#[test]
fn long_names_and_inner_links_unpack() {
    let sb = sandbox();
    let long = format!("{}/{}", "d".repeat(120), "f".repeat(150));
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = Header::new_gnu();
    header.set_size(5);
    header.set_mode(0o644);
    builder
        .append_data(&mut header, &long, &b"hello"[..])
        .unwrap();
    let mut header = Header::new_gnu();
    header.set_entry_type(EntryType::Symlink);
    header.set_size(0);
    builder
        .append_link(&mut header, "deep/link", format!("../{long}"))
        .unwrap();
    let record = b"31 path=pax/named/by/extension\n";
    let pax = Raw {
        kind: EntryType::XHeader,
        data: record.to_vec(),
        ..file("PaxHeaders/short", b"")
    };
    builder.append(&raw_header(&pax), &record[..]).unwrap();
    let mut header = Header::new_ustar();
    header.set_size(3);
    header.set_mode(0o644);
    builder
        .append_data(&mut header, "short", &b"pax"[..])
        .unwrap();
    let stream = builder.into_inner().unwrap();
    let summary = unpack(&stream[..], &sb.dest, &LIMITS).unwrap();
    assert_eq!(
        summary,
        UnpackSummary {
            files: 3,
            bytes: 8,
            skipped: 0
        }
    );
    assert_eq!(
        fs::read(sb.dest.join("pax/named/by/extension")).unwrap(),
        b"pax"
    );
    assert!(!sb.dest.join("short").exists());
    assert_eq!(fs::read(sb.dest.join(&long)).unwrap(), b"hello");
    assert_eq!(fs::read(sb.dest.join("deep/link")).unwrap(), b"hello");
}

#[test]
fn pack_then_unpack_round_trips() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir_all(src.join(".git/objects/ab")).unwrap();
    fs::write(src.join(".git/HEAD"), b"ref: refs/heads/main\n").unwrap();
    let binary: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    fs::write(src.join(".git/objects/ab/cdef"), &binary).unwrap();
    fs::create_dir(src.join("empty")).unwrap();
    fs::create_dir(src.join("src")).unwrap();
    fs::write(src.join("src/main.rs"), b"fn main() {}\n").unwrap();
    fs::write(src.join("run.sh"), b"#!/bin/sh\necho hi\n").unwrap();
    fs::set_permissions(src.join("run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("src/main.rs", src.join("main-link")).unwrap();
    std::os::unix::fs::symlink("../../outside", src.join("src/dangling")).unwrap();
    nix::unistd::mkfifo(
        &src.join("pipe"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    assert!(
        fs::symlink_metadata(src.join("pipe"))
            .unwrap()
            .file_type()
            .is_fifo()
    );

    let mut stream = Vec::new();
    let packed = pack(&src, &mut stream).unwrap();
    assert_eq!(packed.skipped, 1, "the fifo is left out");
    let expected_bytes = 21 + 70_000 + 13 + 18;
    assert_eq!(packed.bytes, expected_bytes);

    let dest = tmp.path().join("dest");
    let unpacked = unpack(&stream[..], &dest, &LIMITS);
    // `src/dangling` climbs out of the workspace: packing keeps it, unpacking refuses it.
    let err = unpacked.unwrap_err();
    assert_refused(&err, "src/dangling", Rule::LinkOutside);
    assert!(listing(&dest).is_empty());

    fs::remove_file(src.join("src/dangling")).unwrap();
    let mut stream = Vec::new();
    let packed = pack(&src, &mut stream).unwrap();
    let unpacked = unpack(&stream[..], &dest, &LIMITS).unwrap();
    assert_eq!(unpacked.files, packed.files);
    assert_eq!(unpacked.bytes, expected_bytes);
    let mut want = listing(&src);
    want.remove(Path::new("pipe"));
    assert_eq!(listing(&dest), want);
    assert_eq!(
        fs::read_link(dest.join("main-link")).unwrap(),
        Path::new("src/main.rs")
    );
}
