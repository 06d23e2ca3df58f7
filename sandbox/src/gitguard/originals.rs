//! Where the originals of what a sanitizing replaces go: `<control_dir>/sanitized/<n>/`, one
//! numbered directory per repository, with the files as they were (mode 0600: never
//! executable), and a `manifest.json` saying what each was (a symlink's target, a file too large
//! to keep). All of it is bounded by one budget per run ([`BUDGET`]); beyond it, an original is
//! noted in the manifest and not kept. The control directory is the runner's and never visible
//! to the run, so plain paths are safe here; what is read comes from the tree through
//! descriptors ([`crate::fsat`]).

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::quote::escape;
use crate::fsat::{self, Access, Kind};

/// Bytes of originals kept per run, at most.
pub const BUDGET: u64 = 16 * 1024 * 1024;

/// Levels of a directory (`hooks/`) copied.
const MAX_DEPTH: usize = 4;

/// Entries of one directory copied.
const MAX_ENTRIES: usize = 1024;

/// The originals of one run.
#[derive(Debug)]
pub struct Originals {
    root: PathBuf,
    next: u32,
    left: u64,
}

/// One entry of a manifest.
#[derive(Debug, Serialize)]
struct Item {
    /// Its path inside the git directory (escaped).
    name: String,
    /// `file`, `dir`, `symlink` or `special`.
    kind: &'static str,
    /// Whether its bytes are in this directory.
    kept: bool,
    /// Anything else (a symlink's target, why it was not kept).
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

/// The originals of one repository.
#[derive(Debug)]
pub struct Slot {
    /// The directory.
    pub dir: PathBuf,
    items: Vec<Item>,
    what: String,
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Dir => "dir",
        Kind::File => "file",
        Kind::Symlink => "symlink",
        Kind::Special => "special",
    }
}

impl Originals {
    /// Originals of a run whose control directory is `control_dir`.
    pub fn new(control_dir: &Path) -> Self {
        Self {
            root: control_dir.join("sanitized"),
            next: 1,
            left: BUDGET,
        }
    }

    /// A fresh numbered directory for the repository described by `what` (numbers already
    /// taken, by an earlier check with the same control directory, are skipped).
    pub fn slot(&mut self, what: String) -> std::io::Result<Slot> {
        let mut b = std::fs::DirBuilder::new();
        b.recursive(true).mode(0o700);
        b.create(&self.root)?;
        loop {
            let dir = self.root.join(self.next.to_string());
            self.next = self.next.saturating_add(1);
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => {
                    return Ok(Slot {
                        dir,
                        items: Vec::new(),
                        what,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && self.next < u32::MAX => {
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Keeps `name` of the directory `from` (whatever it is; never following it) as `as_name`
    /// in `slot`.
    pub fn keep(&mut self, slot: &mut Slot, from: BorrowedFd<'_>, name: &OsStr, as_name: &Path) {
        self.keep_at(slot, from, name, as_name, 0);
    }

    fn keep_at(
        &mut self,
        slot: &mut Slot,
        from: BorrowedFd<'_>,
        name: &OsStr,
        as_name: &Path,
        depth: usize,
    ) {
        let label = escape(as_name.as_os_str().as_bytes(), 256);
        let st = match fsat::lstat(from, name) {
            Ok(Some(st)) => st,
            Ok(None) => return,
            Err(e) => {
                slot.items.push(Item {
                    name: label,
                    kind: "unknown",
                    kept: false,
                    note: Some(format!("could not be inspected: {}", e.cause())),
                });
                return;
            }
        };
        let kind = st.kind;
        let mut item = Item {
            name: label,
            kind: kind_name(kind),
            kept: false,
            note: None,
        };
        match kind {
            Kind::File => match self.copy_file(from, name, &slot.dir.join(as_name)) {
                Ok(()) => item.kept = true,
                Err(why) => item.note = Some(why),
            },
            Kind::Symlink => {
                item.note = Some(match fsat::read_link(from, name) {
                    Ok(t) => format!(
                        "a symlink to \"{}\" (removed, never followed)",
                        escape(&t, 512)
                    ),
                    Err(e) => format!("a symlink (its target could not be read: {})", e.cause()),
                });
            }
            Kind::Dir => {
                slot.items.push(item);
                self.copy_dir(slot, from, name, as_name, depth);
                return;
            }
            Kind::Special => item.note = Some("a special file (removed, never opened)".into()),
        }
        slot.items.push(item);
    }

    fn copy_file(&mut self, from: BorrowedFd<'_>, name: &OsStr, to: &Path) -> Result<(), String> {
        let (f, st) = fsat::open_regular(from, name)
            .map_err(|e| format!("could not be read: {}", e.cause()))?;
        let size = st.size;
        if size > self.left {
            return Err(format!(
                "not kept: {size} bytes, over what is left of the {BUDGET}-byte budget for originals"
            ));
        }
        let mut bytes = Vec::new();
        f.take(self.left + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("could not be read: {e}"))?;
        if bytes.len() as u64 > self.left {
            return Err("not kept: it grew past the budget for originals".into());
        }
        self.left -= bytes.len() as u64;
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(to)
            .map_err(|e| format!("could not be kept: {e}"))?;
        out.write_all(&bytes)
            .map_err(|e| format!("could not be kept: {e}"))
    }

    fn copy_dir(
        &mut self,
        slot: &mut Slot,
        from: BorrowedFd<'_>,
        name: &OsStr,
        as_name: &Path,
        depth: usize,
    ) {
        let fail = |slot: &mut Slot, why: String| {
            slot.items.push(Item {
                name: escape(as_name.as_os_str().as_bytes(), 256),
                kind: "dir",
                kept: false,
                note: Some(why),
            });
        };
        if depth >= MAX_DEPTH {
            return fail(slot, format!("not copied below {MAX_DEPTH} levels"));
        }
        if let Err(e) = std::fs::DirBuilder::new()
            .mode(0o700)
            .create(slot.dir.join(as_name))
        {
            return fail(slot, format!("could not be kept: {e}"));
        }
        let d = match fsat::open_dir(from, name, Access::Read) {
            Ok(d) => d,
            Err(e) => return fail(slot, format!("could not be opened: {}", e.cause())),
        };
        let entries = match fsat::entries(d.as_fd()) {
            Ok(e) => e,
            Err(e) => return fail(slot, format!("could not be listed: {}", e.cause())),
        };
        if entries.len() > MAX_ENTRIES {
            fail(
                slot,
                format!(
                    "{} entries: only the first {MAX_ENTRIES} were looked at",
                    entries.len()
                ),
            );
        }
        for e in entries.iter().take(MAX_ENTRIES) {
            self.keep_at(slot, d.as_fd(), &e.name, &as_name.join(&e.name), depth + 1);
        }
    }
}

#[derive(Serialize)]
struct Manifest<'a> {
    repository: &'a str,
    originals: &'a [Item],
}

impl Slot {
    /// Writes the manifest; returns the directory.
    pub fn finish(self) -> PathBuf {
        let m = Manifest {
            repository: &self.what,
            originals: &self.items,
        };
        if let Ok(bytes) = serde_json::to_vec_pretty(&m) {
            let _ = std::fs::write(self.dir.join("manifest.json"), bytes);
        }
        self.dir
    }
}
