//! Bounded capture of a command's output: the first `cap` bytes go to a file, a marker says
//! where the cut happened, and everything after it is counted and discarded. The caller's
//! memory stays bounded whatever the command writes.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::outcome::CaptureSummary;

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

/// Keeps at most `cap` bytes of a stream in a file, marker included.
#[derive(Debug)]
pub struct CappedFile {
    file: File,
    path: PathBuf,
    cap: u64,
    kept: u64,
    seen: u64,
    truncated: bool,
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
        })
    }
}

impl OutputSink for CappedFile {
    fn write(&mut self, chunk: &[u8]) -> io::Result<()> {
        self.seen += chunk.len() as u64;
        if self.truncated {
            return Ok(());
        }
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

    fn finish(self: Box<Self>) -> io::Result<CaptureSummary> {
        // Logs are artifacts, not the journal: no fsync (it would cost ~0.5 ms per stream).
        Ok(CaptureSummary {
            path: Some(self.path),
            bytes_seen: self.seen,
            bytes_kept: self.kept,
            truncated: self.truncated,
            undrained: false,
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
}
