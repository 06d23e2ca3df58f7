//! Listing a directory with plain `getdents64`: a directory costs its `openat`, its listing and
//! its `close`, with no stat per entry, the kinds coming from `d_type` ([`entries`]), or entry
//! by entry with a buffer of the caller's size ([`Listing`]).

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use super::error::FsError;
use super::stat::{Kind, lstat};
use super::sys;

/// Bytes read per `getdents64` call by [`entries`].
const ENTRIES_BUFFER: usize = 32 * 1024;

/// `struct linux_dirent64`: `d_ino` (8 bytes), `d_off` (8), `d_reclen` (2), `d_type` (1), then
/// the NUL-terminated name, padded to `d_reclen`.
const NAME_AT: usize = 19;

/// One entry as `getdents64` gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawEntry {
    /// Its inode number.
    pub ino: u64,
    /// `DT_*`; `DT_UNKNOWN` when the file system does not say.
    pub d_type: u8,
    /// Its name (never empty, `.` or `..`).
    pub name: OsString,
}

/// One entry of a directory with its kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Its name.
    pub name: OsString,
    /// What it is (never following a symlink).
    pub kind: Kind,
    /// Its inode number as the listing gave it (`d_ino`).
    pub ino: u64,
}

/// A directory open for listing (`fd`: an `O_RDONLY` directory descriptor, owned or borrowed)
/// read with `getdents64` into a buffer of its own, one entry at a time.
#[derive(Debug)]
pub struct Listing<F> {
    fd: F,
    buf: Vec<u8>,
    len: usize,
    pos: usize,
}

fn malformed(what: &str) -> FsError {
    FsError::os(
        "getdents64",
        PathBuf::new(),
        io::Error::new(io::ErrorKind::InvalidData, what.to_owned()),
    )
}

impl<F: AsFd> Listing<F> {
    /// Lists `fd` from where its position is (its start, for a fresh descriptor), reading up to
    /// `buffer` bytes of entries per call.
    pub fn new(fd: F, buffer: usize) -> Self {
        Self {
            fd,
            buf: vec![0; buffer.max(NAME_AT + 1)],
            len: 0,
            pos: 0,
        }
    }

    /// The directory's descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The next entry but `.` and `..`; `None` at the end. The error names no path: anchor it.
    pub fn next_entry(&mut self) -> Result<Option<RawEntry>, FsError> {
        loop {
            if self.pos >= self.len {
                let n = match sys::getdents64(self.fd.as_fd(), &mut self.buf) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(FsError::os("getdents64", PathBuf::new(), e)),
                };
                if n == 0 {
                    return Ok(None);
                }
                self.len = n;
                self.pos = 0;
            }
            let rec = self.buf.get(self.pos..self.len).unwrap_or_default();
            if rec.len() < NAME_AT {
                return Err(malformed("a truncated directory entry"));
            }
            let mut ino = [0u8; 8];
            ino.copy_from_slice(&rec[..8]);
            let ino = u64::from_ne_bytes(ino);
            let reclen = usize::from(u16::from_ne_bytes([rec[16], rec[17]]));
            if reclen <= NAME_AT || reclen > rec.len() {
                return Err(malformed("a malformed directory entry"));
            }
            let d_type = rec[18];
            let raw = &rec[NAME_AT..reclen];
            let name = &raw[..raw.iter().position(|&b| b == 0).unwrap_or(raw.len())];
            self.pos += reclen;
            if name == b"." || name == b".." || name.is_empty() {
                continue;
            }
            return Ok(Some(RawEntry {
                ino,
                d_type,
                name: OsString::from_vec(name.to_vec()),
            }));
        }
    }

    /// Starts over from the first entry (`lseek` to 0).
    pub fn rewind(&mut self) -> Result<(), FsError> {
        sys::rewind(self.fd.as_fd()).map_err(|e| FsError::os("lseek", PathBuf::new(), e))?;
        self.len = 0;
        self.pos = 0;
        Ok(())
    }
}

/// Every entry of the directory open at `fd` (read from its position, its start for a fresh
/// descriptor, which the listing uses up) but `.` and `..`, with kinds from `d_type` and a
/// `fstatat(AT_SYMLINK_NOFOLLOW)` only where the file system does not fill it in (an entry gone
/// since the listing is left out). The error names no path: anchor it.
pub fn entries(fd: BorrowedFd<'_>) -> Result<Vec<Entry>, FsError> {
    let mut listing = Listing::new(fd, ENTRIES_BUFFER);
    let mut out = Vec::new();
    while let Some(e) = listing.next_entry()? {
        let kind = match e.d_type {
            libc::DT_DIR => Kind::Dir,
            libc::DT_REG => Kind::File,
            libc::DT_LNK => Kind::Symlink,
            libc::DT_UNKNOWN => match lstat(fd, &e.name)? {
                Some(st) => st.kind,
                None => continue,
            },
            _ => Kind::Special,
        };
        out.push(Entry {
            name: e.name,
            kind,
            ino: e.ino,
        });
    }
    Ok(out)
}
