//! The runner's files of kept listings (the git check's `walk-listings`, the socket scan's
//! `socket-listings`): little-endian numbers and length-prefixed names behind a magic line,
//! written through a temporary file renamed over the old one (a reader sees the old file or the
//! new one), read with every length checked against what is left (a short or malformed file is
//! no file: the caller lists everything, as without one).

use std::path::Path;

/// Appends numbers and names to a file's bytes.
#[derive(Debug, Default)]
pub(crate) struct Writer {
    /// The bytes so far.
    pub out: Vec<u8>,
}

impl Writer {
    /// A file that starts with `magic`.
    pub fn new(magic: &[u8], capacity: usize) -> Self {
        let mut out = Vec::with_capacity(capacity + magic.len());
        out.extend_from_slice(magic);
        Self { out }
    }

    pub fn u64(&mut self, v: u64) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }

    pub fn i64(&mut self, v: i64) {
        self.out.extend_from_slice(&v.to_le_bytes());
    }

    /// A length-prefixed byte string.
    pub fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.out.extend_from_slice(b);
    }

    /// Writes the bytes to `path` (mode 0600) through `<path>.tmp`.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let tmp = path.with_extension("tmp");
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        f.write_all(&self.out)?;
        drop(f);
        std::fs::rename(&tmp, path)
    }
}

/// Reads a file of kept listings.
#[derive(Debug)]
pub(crate) struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A reader of `b` past `magic`; `None` when `b` does not start with it.
    pub fn new(b: &'a [u8], magic: &[u8]) -> Option<Self> {
        b.starts_with(magic).then_some(Self { b, at: magic.len() })
    }

    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }

    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    pub fn i64(&mut self) -> Option<i64> {
        Some(i64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    /// A length-prefixed byte string.
    pub fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.u64()?).ok()?;
        self.take(len)
    }

    /// A length-prefixed name of a directory entry (not empty, no `/`, no NUL).
    pub fn name(&mut self) -> Option<&'a [u8]> {
        let name = self.bytes()?;
        (!name.is_empty() && !name.contains(&b'/') && !name.contains(&0)).then_some(name)
    }

    /// Whether everything was read.
    pub fn done(&self) -> bool {
        self.at == self.b.len()
    }
}

/// Reads `path` when it is a regular file of at most `max` bytes (not following a symlink).
pub(crate) fn read(path: &Path, max: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .ok()?;
    let meta = f.metadata().ok()?;
    if !meta.is_file() || meta.len() > max {
        return None;
    }
    let mut out = Vec::with_capacity(usize::try_from(meta.len()).ok()?);
    f.take(max).read_to_end(&mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_reads_back_and_a_short_or_foreign_file_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kept");
        let mut w = Writer::new(b"rltest1\n", 64);
        w.u64(7);
        w.i64(-3);
        w.bytes(b"name");
        w.save(&path).unwrap();
        let bytes = read(&path, 1 << 20).unwrap();
        let mut r = Reader::new(&bytes, b"rltest1\n").unwrap();
        assert_eq!(
            (r.u64(), r.i64(), r.name(), r.done()),
            (Some(7), Some(-3), Some(&b"name"[..]), true)
        );
        assert!(Reader::new(&bytes, b"rlother\n").is_none());
        let mut short = Reader::new(&bytes[..bytes.len() - 1], b"rltest1\n").unwrap();
        assert_eq!(
            (short.u64(), short.i64(), short.name()),
            (Some(7), Some(-3), None)
        );
        // A name that is not one entry's name is refused.
        for bad in [&b""[..], b"a/b", b"a\0b"] {
            let mut w = Writer::new(b"m", 8);
            w.bytes(bad);
            assert_eq!(Reader::new(&w.out, b"m").unwrap().name(), None);
        }
        // Too big, or not a regular file: not read.
        assert!(read(&path, 4).is_none());
        assert!(read(dir.path(), 1 << 20).is_none());
        std::os::unix::fs::symlink(&path, dir.path().join("link")).unwrap();
        assert!(read(&dir.path().join("link"), 1 << 20).is_none());
    }
}
