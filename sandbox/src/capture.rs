//! Bounded capture of a command's output: the first `cap` bytes go to a file, a marker says
//! where the cut happened, and everything after it is counted and discarded. The caller's
//! memory stays bounded whatever the command writes.
//!
//! A file that cannot take more (a full disk, an I/O error) never stops the stream being read:
//! the capture keeps what was written, puts [`dropped_marker`] at its end (over the last bytes
//! kept, so it needs no new room), and counts and discards the rest. A reader that stopped
//! instead would leave the command blocked on a full pipe until its timeout.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::outcome::{CaptureDrop, CaptureSummary};

/// Receives a stream of output chunks.
pub trait OutputSink: Send {
    /// Takes the next chunk.
    fn write(&mut self, chunk: &[u8]) -> io::Result<()>;
    /// Ends the stream and says what was kept.
    fn finish(self: Box<Self>) -> io::Result<CaptureSummary>;
}

/// The marker added to a capture whose reader did not finish draining within the limit after
/// the process ended (the capture may be cut short or empty, never silently).
pub const UNDRAINED_MARKER: &str = "\n[ralph: the output reader did not finish within 5 s after the process ended; this capture may be incomplete]\n";

/// The marker written where output was cut. It counts inside the cap.
pub fn truncation_marker(cap: u64) -> String {
    format!("\n[ralph: output truncated at {cap} bytes; the rest was discarded]\n")
}

/// The marker put at the end of a capture whose file stopped taking output after `after`
/// bytes of the stream (`error` says why). It counts inside the cap.
pub fn dropped_marker(after: u64, error: &str) -> String {
    format!(
        "\n[ralph: output dropped after {after} bytes: the log could not be written ({error}); the rest was read and discarded]\n"
    )
}

/// Keeps at most `cap` bytes of a stream in a file, marker included.
#[derive(Debug)]
pub struct CappedFile {
    file: File,
    path: PathBuf,
    cap: u64,
    kept: u64,
    seen: u64,
    truncated: bool,
    dropped: Option<CaptureDrop>,
}

impl CappedFile {
    /// Creates (or truncates) `path` and keeps at most `cap` bytes in it.
    pub fn create(path: &Path, cap: u64) -> io::Result<Self> {
        let file = File::create(path)?;
        Ok(Self {
            file,
            path: path.to_owned(),
            cap,
            kept: 0,
            seen: 0,
            truncated: false,
            dropped: None,
        })
    }

    /// Keeps `chunk` within the cap (the truncation marker where it is reached).
    fn keep(&mut self, chunk: &[u8]) -> io::Result<()> {
        if self.kept + chunk.len() as u64 <= self.cap {
            self.file.write_all(chunk)?;
            self.kept += chunk.len() as u64;
            return Ok(());
        }
        // Over the cap: keep what fits before the marker, then the marker.
        let marker = truncation_marker(self.cap);
        let room = self.cap.saturating_sub(marker.len() as u64);
        if self.kept > room {
            self.file.set_len(room)?;
            self.file.seek(SeekFrom::Start(room))?;
            self.kept = room;
        } else {
            let take = usize::try_from(room - self.kept)
                .unwrap_or(usize::MAX)
                .min(chunk.len());
            self.file.write_all(&chunk[..take])?;
            self.kept += take as u64;
        }
        let marker = &marker.as_bytes()[..marker
            .len()
            .min(usize::try_from(self.cap).unwrap_or(usize::MAX))];
        self.file.write_all(marker)?;
        self.kept += marker.len() as u64;
        self.truncated = true;
        Ok(())
    }

    /// A write failed (`e`) once `before` bytes of the stream were seen: the file keeps what
    /// it holds, its last bytes overwritten by the drop marker (already allocated room, so a
    /// full disk takes it), and takes nothing more. Best effort: the summary says it anyway.
    fn drop_rest(&mut self, before: u64, e: &io::Error) {
        let error = e.to_string();
        // What the file really holds (a failed `write_all` may have written part of a chunk).
        let len = self
            .file
            .metadata()
            .map_or(self.kept, |m| m.len())
            .min(self.cap);
        let marker = dropped_marker(before, &error);
        let n = marker
            .len()
            .min(usize::try_from(self.cap).unwrap_or(usize::MAX));
        let at = len.saturating_sub(n as u64);
        let _ = self.file.set_len(len);
        let _ = self.file.write_all_at(&marker.as_bytes()[..n], at);
        self.kept = self.file.metadata().map_or(len, |m| m.len()).min(self.cap);
        self.dropped = Some(CaptureDrop {
            after: before,
            no_space: is_no_space(e),
            error,
        });
    }
}

/// Whether an OS error says the disk (or the user's quota) is full.
pub fn is_no_space(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
        || e.kind() == io::ErrorKind::StorageFull
        || e.kind() == io::ErrorKind::QuotaExceeded
}

impl OutputSink for CappedFile {
    fn write(&mut self, chunk: &[u8]) -> io::Result<()> {
        let before = self.seen;
        self.seen += chunk.len() as u64;
        if self.truncated || self.dropped.is_some() {
            return Ok(());
        }
        // Never an error: the stream is read to its end whatever the file does.
        if let Err(e) = self.keep(chunk) {
            self.drop_rest(before, &e);
        }
        Ok(())
    }
    fn finish(self: Box<Self>) -> io::Result<CaptureSummary> {
        // Logs are artifacts, not the journal: no fsync (it would cost ~0.5 ms per stream).
        Ok(CaptureSummary {
            path: Some(self.path),
            bytes_seen: self.seen,
            bytes_kept: self.kept,
            truncated: self.truncated,
            undrained: false,
            dropped: self.dropped,
        })
    }
}

/// Counts and discards a stream.
#[derive(Debug, Default)]
pub struct Discard {
    seen: u64,
}

impl OutputSink for Discard {
    fn write(&mut self, chunk: &[u8]) -> io::Result<()> {
        self.seen += chunk.len() as u64;
        Ok(())
    }

    fn finish(self: Box<Self>) -> io::Result<CaptureSummary> {
        Ok(CaptureSummary {
            path: None,
            bytes_seen: self.seen,
            bytes_kept: 0,
            truncated: false,
            undrained: false,
            dropped: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(cap: u64, chunks: &[&[u8]]) -> (Vec<u8>, CaptureSummary) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.log");
        let mut sink: Box<dyn OutputSink> = Box::new(CappedFile::create(&path, cap).unwrap());
        for c in chunks {
            sink.write(c).unwrap();
        }
        let summary = sink.finish().unwrap();
        (std::fs::read(&path).unwrap(), summary)
    }

    #[test]
    fn keeps_everything_up_to_the_cap() {
        let (bytes, s) = run(10, &[b"01234", b"56789"]);
        assert_eq!(bytes, b"0123456789");
        assert!(!s.truncated);
        assert_eq!((s.bytes_seen, s.bytes_kept), (10, 10));
    }

    #[test]
    fn one_byte_over_the_cap_truncates_with_the_marker_inside_the_cap() {
        let cap = 200;
        let body = vec![b'x'; 201];
        let (bytes, s) = run(cap, &[&body]);
        assert!(s.truncated);
        assert_eq!(bytes.len() as u64, cap);
        assert_eq!(s.bytes_kept, cap);
        assert_eq!(s.bytes_seen, 201);
        assert!(String::from_utf8_lossy(&bytes).ends_with(&truncation_marker(cap)));
    }

    #[test]
    fn a_flood_is_counted_but_not_kept() {
        let chunk = vec![b'y'; 65536];
        let chunks: Vec<&[u8]> = (0..64).map(|_| chunk.as_slice()).collect();
        let (bytes, s) = run(4096, &chunks);
        assert_eq!(bytes.len(), 4096);
        assert_eq!(s.bytes_seen, 64 * 65536);
    }

    #[test]
    fn a_cut_after_several_small_writes_rewinds_to_fit_the_marker() {
        let cap = 100;
        let (bytes, s) = run(cap, &[&[b'a'; 90], &[b'b'; 20]]);
        assert_eq!(bytes.len() as u64, cap);
        assert!(s.truncated);
    }

    #[test]
    fn a_file_that_takes_nothing_never_stops_the_stream() {
        // Every write to /dev/full fails with ENOSPC.
        let mut sink: Box<dyn OutputSink> =
            Box::new(CappedFile::create(Path::new("/dev/full"), 1 << 20).unwrap());
        let chunk = vec![b'z'; 65536];
        for _ in 0..100 {
            sink.write(&chunk).unwrap();
        }
        let s = sink.finish().unwrap();
        assert_eq!(s.bytes_seen, 100 * 65536);
        let d = s.dropped.expect("the drop is said");
        assert_eq!(d.after, 0);
        assert!(d.no_space, "{d:?}");
        assert!(d.error.contains("No space left"), "{d:?}");
        assert!(!s.truncated);
    }

    /// A tmpfs of `size` mounted for one test (unmounted when dropped); `None`, said, where
    /// this process may not mount one.
    struct SmallDisk {
        dir: tempfile::TempDir,
    }

    impl SmallDisk {
        fn mount(size: &str) -> Option<Self> {
            let dir = tempfile::tempdir().unwrap();
            match nix::mount::mount(
                Some("tmpfs"),
                dir.path(),
                Some("tmpfs"),
                nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
                Some(format!("size={size}").as_str()),
            ) {
                Ok(()) => Some(Self { dir }),
                Err(e) => {
                    assert!(!nix::unistd::geteuid().is_root(), "root cannot mount: {e}");
                    eprintln!("skipped: mounting a tmpfs needs root ({e})");
                    None
                }
            }
        }
    }

    impl Drop for SmallDisk {
        fn drop(&mut self) {
            let _ = nix::mount::umount2(self.dir.path(), nix::mount::MntFlags::MNT_DETACH);
        }
    }

    #[test]
    fn a_full_disk_drops_the_rest_with_a_marker_over_the_last_bytes_kept() {
        let Some(disk) = SmallDisk::mount("64k") else {
            return;
        };
        let path = disk.dir.path().join("stdout.log");
        let mut sink: Box<dyn OutputSink> = Box::new(CappedFile::create(&path, 8 << 20).unwrap());
        // 1 MiB in odd-sized chunks: the disk fills within the 17th or so.
        let chunk = vec![b'a'; 4000];
        for _ in 0..262 {
            sink.write(&chunk).unwrap();
        }
        let s = sink.finish().unwrap();
        assert_eq!(s.bytes_seen, 262 * 4000);
        let d = s.dropped.clone().expect("the drop is said");
        assert!(d.no_space, "{d:?}");
        assert!(d.after > 0 && d.after < 64 * 1024, "{d:?}");
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, s.bytes_kept);
        let text = String::from_utf8_lossy(&bytes);
        let marker = dropped_marker(d.after, &d.error);
        assert!(
            text.ends_with(&marker),
            "{:?}",
            &text[text.len().saturating_sub(300)..]
        );
        // What is kept before the marker is the stream's start, unchanged.
        let body = &bytes[..bytes.len() - marker.len()];
        assert!(body.len() > 32 * 1024, "{}", body.len());
        assert!(body.iter().all(|b| *b == b'a'));
    }

    #[test]
    fn the_drop_marker_counts_inside_a_small_cap() {
        let Some(disk) = SmallDisk::mount("8k") else {
            return;
        };
        // A neighbour fills all but a little of the disk; the cap is larger than what fits.
        let filler = disk.dir.path().join("filler");
        let _ = std::fs::write(&filler, vec![0u8; 64 * 1024]);
        let path = disk.dir.path().join("stdout.log");
        let mut sink: Box<dyn OutputSink> = Box::new(CappedFile::create(&path, 200).unwrap());
        sink.write(&[b'b'; 150]).unwrap();
        sink.write(&[b'c'; 150]).unwrap();
        let s = sink.finish().unwrap();
        assert_eq!(s.bytes_seen, 300);
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes.len() as u64 <= 200, "{}", bytes.len());
        assert_eq!(bytes.len() as u64, s.bytes_kept);
    }
}
