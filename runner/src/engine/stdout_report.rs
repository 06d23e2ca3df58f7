//! Finds the report on stdout when the agent wrote no report file: the last line that parses
//! as a JSON object (SPEC §4). Works on the stream as it passes, so the whole stdout is scanned
//! even past the capture cap, with memory bounded by the longest line considered.

use std::io;
use std::sync::{Arc, Mutex};

use ralph_sandbox::capture::OutputSink;
use ralph_sandbox::outcome::CaptureSummary;

/// The candidate found on stdout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StdoutReport {
    /// A line that parses as a JSON object.
    Line(Vec<u8>),
    /// A line starting with `{` too long to be considered; its length so far.
    Overlong(usize),
}

/// Shared slot the sink fills when the stream ends.
pub type Slot = Arc<Mutex<Option<StdoutReport>>>;

/// Wraps another sink and tracks the last JSON-object line.
pub struct ReportLineSink {
    inner: Box<dyn OutputSink>,
    line: Vec<u8>,
    line_len: usize,
    max_line: usize,
    last: Option<StdoutReport>,
    slot: Slot,
}

impl std::fmt::Debug for ReportLineSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReportLineSink")
            .field("max_line", &self.max_line)
            .finish_non_exhaustive()
    }
}

impl ReportLineSink {
    /// Tracks lines up to `max_line` bytes; the result lands in `slot` at the end.
    pub fn new(inner: Box<dyn OutputSink>, max_line: usize, slot: Slot) -> Self {
        Self {
            inner,
            line: Vec::new(),
            line_len: 0,
            max_line,
            last: None,
            slot,
        }
    }

    fn end_line(&mut self) {
        if self.line_len > self.max_line {
            // The kept prefix tells whether this looked like a JSON object.
            if self.line.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
                self.last = Some(StdoutReport::Overlong(self.line_len));
            }
        } else {
            // One UTF-8 BOM before the object is skipped, as the decoder does.
            let line = self.line.trim_ascii_start();
            let trimmed = line
                .strip_prefix(crate::report::decode::UTF8_BOM)
                .unwrap_or(line)
                .trim_ascii();
            if trimmed.first() == Some(&b'{')
                && trimmed.last() == Some(&b'}')
                && serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(trimmed)
                    .is_ok()
            {
                self.last = Some(StdoutReport::Line(trimmed.to_vec()));
            }
        }
        self.line.clear();
        self.line_len = 0;
    }
}

impl OutputSink for ReportLineSink {
    fn write(&mut self, chunk: &[u8]) -> io::Result<()> {
        self.inner.write(chunk)?;
        crate::util::lines::for_each_part(chunk, |part, ends_line| {
            self.line_len += part.len();
            let room = (self.max_line + 1).saturating_sub(self.line.len());
            self.line.extend_from_slice(&part[..part.len().min(room)]);
            if ends_line {
                self.end_line();
            }
        });
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> io::Result<CaptureSummary> {
        if self.line_len > 0 {
            self.end_line();
        }
        if let Ok(mut slot) = self.slot.lock() {
            *slot = self.last.take();
        }
        self.inner.finish()
    }
}

#[cfg(test)]
mod tests {
    use ralph_sandbox::capture::Discard;

    use super::*;

    fn scan(chunks: &[&[u8]], max_line: usize) -> Option<StdoutReport> {
        let slot: Slot = Arc::default();
        let mut s: Box<dyn OutputSink> = Box::new(ReportLineSink::new(
            Box::new(Discard::default()),
            max_line,
            slot.clone(),
        ));
        for c in chunks {
            s.write(c).unwrap();
        }
        s.finish().unwrap();
        slot.lock().unwrap().clone()
    }

    #[test]
    fn takes_the_last_object_line() {
        let out = scan(
            &[b"log\n{\"a\":1}\nmore log\n{\"b\"", b":2}\ntrailing text\n"],
            1000,
        );
        assert_eq!(out, Some(StdoutReport::Line(b"{\"b\":2}".to_vec())));
    }

    #[test]
    fn ignores_non_objects_and_broken_json() {
        assert_eq!(scan(&[b"[1]\n{not json}\n\"x\"\n"], 1000), None);
    }

    #[test]
    fn an_unterminated_last_line_counts() {
        assert_eq!(
            scan(&[b"x\n  {\"a\":1}  "], 1000),
            Some(StdoutReport::Line(b"{\"a\":1}".to_vec()))
        );
    }

    #[test]
    fn a_bom_before_the_object_is_skipped() {
        assert_eq!(
            scan(&[b"log\n\xEF\xBB\xBF{\"a\":1}\n"], 1000),
            Some(StdoutReport::Line(b"{\"a\":1}".to_vec()))
        );
    }

    #[test]
    fn overlong_object_lines_are_flagged_not_buffered() {
        let mut big = b"{\"summary\":\"".to_vec();
        big.extend(std::iter::repeat_n(b'x', 5000));
        big.extend(b"\"}\n");
        assert_eq!(
            scan(&[b"{\"ok\":1}\n", &big], 100),
            Some(StdoutReport::Overlong(big.len() - 1))
        );
    }
}
