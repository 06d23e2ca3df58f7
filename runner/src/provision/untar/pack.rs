//! Packing a directory into a tar stream for an upload: regular files, directories and
//! symlinks (as symlinks, never followed); sockets, fifos and devices are left out and counted.

use std::fs::{File, Metadata};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::{UnpackSummary, UntarError};

/// Packs the contents of `dir` (not `dir` itself) into a tar stream on `writer`, in a stable
/// order. Paths are relative to `dir`; owners and times are recorded but [`super::unpack`]
/// does not apply them.
pub fn pack(dir: &Path, writer: impl Write) -> Result<UnpackSummary, UntarError> {
    let mut builder = tar::Builder::new(writer);
    builder.follow_symlinks(false);
    let mut summary = UnpackSummary::default();
    add_dir(&mut builder, dir, Path::new(""), &mut summary)?;
    let failed = |source| UntarError::Pack {
        path: dir.to_path_buf(),
        source,
    };
    let mut writer = builder.into_inner().map_err(failed)?;
    writer.flush().map_err(failed)?;
    Ok(summary)
}

fn add_dir<W: Write>(
    builder: &mut tar::Builder<W>,
    root: &Path,
    rel: &Path,
    summary: &mut UnpackSummary,
) -> Result<(), UntarError> {
    let here = root.join(rel);
    let failed = |path: &Path| {
        let path = path.to_path_buf();
        move |source| UntarError::Pack { path, source }
    };
    let mut names = Vec::new();
    for child in std::fs::read_dir(&here).map_err(failed(&here))? {
        names.push(child.map_err(failed(&here))?.file_name());
    }
    names.sort();
    for name in names {
        let rel_child: PathBuf = rel.join(&name);
        let full = root.join(&rel_child);
        let meta = std::fs::symlink_metadata(&full).map_err(failed(&full))?;
        let kind = meta.file_type();
        if kind.is_dir() {
            let mut header = header(&meta, tar::EntryType::Directory);
            builder
                .append_data(&mut header, &rel_child, io::empty())
                .map_err(failed(&full))?;
            summary.files += 1;
            add_dir(builder, root, &rel_child, summary)?;
        } else if kind.is_file() {
            let file = File::options()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&full)
                .map_err(failed(&full))?;
            let meta = file.metadata().map_err(failed(&full))?;
            let mut header = header(&meta, tar::EntryType::Regular);
            header.set_size(meta.len());
            let mut content = Exact {
                inner: file.take(meta.len()),
                left: meta.len(),
            };
            builder
                .append_data(&mut header, &rel_child, &mut content)
                .map_err(failed(&full))?;
            summary.files += 1;
            summary.bytes += meta.len();
        } else if kind.is_symlink() {
            let target = std::fs::read_link(&full).map_err(failed(&full))?;
            let mut header = header(&meta, tar::EntryType::Symlink);
            builder
                .append_link(&mut header, &rel_child, &target)
                .map_err(failed(&full))?;
            summary.files += 1;
        } else {
            summary.skipped += 1;
        }
    }
    Ok(())
}

fn header(meta: &Metadata, kind: tar::EntryType) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_metadata(meta);
    header.set_entry_type(kind);
    header.set_size(0);
    header
}

/// A file's content that must be exactly as long as its header says (a file that shrank
/// while being packed fails instead of corrupting the stream).
struct Exact<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Exact<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && self.left > 0 && !buf.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file shrank while it was being packed",
            ));
        }
        self.left = self.left.saturating_sub(n as u64);
        Ok(n)
    }
}
