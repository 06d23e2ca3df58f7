//! What a preset makes of its CLI's standard output: a report candidate, token usage, the
//! CLI's own request retries and whether the CLI says its run failed. The stream is read line
//! by line as it passes ([`PresetSink`]), so nothing depends on the capture cap.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex};

use ralph_sandbox::capture::OutputSink;
use ralph_sandbox::outcome::CaptureSummary;

use crate::usage::{RoundUsage, UsageTotals};

/// Longest stdout line a preset reads; longer lines (e.g. a huge command output echoed in an
/// event) are skipped and counted as a problem.
pub const MAX_EVENT_LINE: usize = 4 << 20;

/// What a preset read from one round's output.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PresetOutput {
    /// The CLI's final structured answer, as JSON text, to be validated as the report.
    pub report: Option<String>,
    /// Tokens used in this round (deltas, never cumulative totals).
    pub usage: RoundUsage,
    /// Requests the CLI retried, by reason label.
    pub retries: BTreeMap<String, u64>,
    /// Set when the CLI reported that its run failed.
    pub error: Option<String>,
    /// Lines that could not be read (skipped, never fatal).
    pub problems: Vec<String>,
}

/// What a preset carries from one round to the next: the last cumulative usage seen per
/// conversation thread, so a CLI that reports running totals is turned into per-round deltas.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Carry {
    /// Last cumulative usage per thread id.
    pub threads: BTreeMap<String, UsageTotals>,
}

/// Reads a CLI's output one line at a time.
pub trait OutputReader: Send {
    /// Takes one complete line (without the newline).
    fn line(&mut self, line: &[u8]);
    /// Takes note of a line that was too long to read.
    fn skipped(&mut self, len: usize) {
        let _ = len;
    }
    /// The stream ended; `carry` is updated for the next round.
    fn finish(self: Box<Self>, carry: &mut Carry) -> PresetOutput;
    /// The round's usage as far as the stream has shown it (for the token budget while the
    /// round runs); `carry` is what earlier rounds left, not changed. Readers whose CLI reports
    /// usage only at the end may keep the default (nothing yet).
    fn usage_now(&self, carry: &Carry) -> RoundUsage {
        let _ = carry;
        RoundUsage::default()
    }
}

/// The job's token budget, watched while a preset's round runs: once the job's tokens before
/// the round plus what the stream has shown reach `max`, `stop` is cancelled (the round is
/// stopped) and `crossed` set.
#[derive(Debug)]
pub struct BudgetWatch {
    /// What earlier rounds left the reader (to turn cumulative counts into this round's).
    pub carry: Carry,
    /// The job's budget tokens before this round.
    pub before: u64,
    /// The budget.
    pub max: u64,
    /// Cancelled when the budget is crossed.
    pub stop: tokio_util::sync::CancellationToken,
    /// Set when the budget is crossed.
    pub crossed: Arc<std::sync::atomic::AtomicBool>,
}

/// Where a [`PresetSink`] leaves its reader when the stream ends.
pub type ReaderSlot = Arc<Mutex<Option<Box<dyn OutputReader>>>>;

/// Wraps a stdout sink and feeds each line to a preset's reader.
pub struct PresetSink {
    inner: Box<dyn OutputSink>,
    reader: Option<Box<dyn OutputReader>>,
    line: Vec<u8>,
    overlong: Option<usize>,
    slot: ReaderSlot,
    watch: Option<BudgetWatch>,
}

impl std::fmt::Debug for PresetSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PresetSink")
            .field("buffered", &self.line.len())
            .finish_non_exhaustive()
    }
}

impl PresetSink {
    /// Feeds `reader` from the stream written to `inner`; the reader lands in `slot` at the end.
    pub fn new(
        inner: Box<dyn OutputSink>,
        reader: Box<dyn OutputReader>,
        slot: ReaderSlot,
    ) -> Self {
        Self {
            inner,
            reader: Some(reader),
            line: Vec::new(),
            overlong: None,
            slot,
            watch: None,
        }
    }

    /// Stops the round as soon as the stream shows the job's token budget crossed.
    pub fn watching(mut self, watch: Option<BudgetWatch>) -> Self {
        self.watch = watch;
        self
    }

    fn check_budget(&self) {
        let (Some(w), Some(reader)) = (&self.watch, self.reader.as_ref()) else {
            return;
        };
        if w.crossed.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let now = reader.usage_now(&w.carry).total().budget_tokens();
        if w.before.saturating_add(now) >= w.max {
            w.crossed.store(true, std::sync::atomic::Ordering::SeqCst);
            w.stop.cancel();
        }
    }

    fn end_line(&mut self) {
        if let Some(reader) = self.reader.as_mut() {
            match self.overlong.take() {
                Some(len) => reader.skipped(len),
                None => {
                    let l = self.line.trim_ascii();
                    if !l.is_empty() {
                        reader.line(l);
                    }
                }
            }
        }
        self.line.clear();
        self.check_budget();
    }
}

impl OutputSink for PresetSink {
    fn write(&mut self, chunk: &[u8]) -> io::Result<()> {
        self.inner.write(chunk)?;
        crate::util::lines::for_each_part(chunk, |part, ends_line| {
            match self.overlong.as_mut() {
                Some(len) => *len += part.len(),
                None if self.line.len() + part.len() > MAX_EVENT_LINE => {
                    self.overlong = Some(self.line.len() + part.len());
                    self.line.clear();
                }
                None => self.line.extend_from_slice(part),
            }
            if ends_line {
                self.end_line();
            }
        });
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> io::Result<CaptureSummary> {
        if !self.line.is_empty() || self.overlong.is_some() {
            self.end_line();
        }
        if let Ok(mut slot) = self.slot.lock() {
            *slot = self.reader.take();
        }
        self.inner.finish()
    }
}

/// Reads a whole recorded output with `reader` (fixtures, tests, re-reading a capture).
pub fn read_all(
    mut reader: Box<dyn OutputReader>,
    bytes: &[u8],
    carry: &mut Carry,
) -> PresetOutput {
    for line in bytes.split(|b| *b == b'\n') {
        let l = line.trim_ascii();
        if !l.is_empty() {
            reader.line(l);
        }
    }
    reader.finish(carry)
}

/// The JSON objects of one output line: the line itself, or each element when it is an array
/// (`--output-format json --verbose` prints one array). Anything else is noted in `problems`.
pub(super) fn json_objects(line: &[u8], problems: &mut Vec<String>) -> Vec<serde_json::Value> {
    use serde_json::Value;
    match serde_json::from_slice::<Value>(line) {
        Ok(Value::Array(items)) => items.into_iter().filter(Value::is_object).collect(),
        Ok(v) if v.is_object() => vec![v],
        Ok(_) => {
            problems.push("a line is not a JSON object".into());
            Vec::new()
        }
        Err(e) => {
            problems.push(crate::util::text::bounded(
                &format!("a line is not JSON: {e}"),
                256,
            ));
            Vec::new()
        }
    }
}

/// The problem noted for a line too long to read.
pub(super) fn overlong(len: usize) -> String {
    format!("a {len}-byte line was too long to read")
}

/// Adds `n` to a JSON number field of `v`, reading a missing or non-number as 0.
pub(super) fn u64_field(v: &serde_json::Value, key: &str) -> u64 {
    v.get(key).and_then(serde_json::Value::as_u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use ralph_sandbox::capture::Discard;

    use super::*;

    #[derive(Default)]
    struct Lines(Vec<Vec<u8>>, usize);

    impl OutputReader for Lines {
        fn line(&mut self, line: &[u8]) {
            self.0.push(line.to_vec());
        }
        fn skipped(&mut self, _len: usize) {
            self.1 += 1;
        }
        fn finish(self: Box<Self>, _carry: &mut Carry) -> PresetOutput {
            PresetOutput {
                problems: self
                    .0
                    .iter()
                    .map(|l| String::from_utf8_lossy(l).into_owned())
                    .collect(),
                report: Some(self.1.to_string()),
                ..PresetOutput::default()
            }
        }
    }

    #[test]
    fn lines_split_across_chunks_are_joined_and_overlong_ones_skipped() {
        let slot: ReaderSlot = Arc::default();
        let mut sink: Box<dyn OutputSink> = Box::new(PresetSink::new(
            Box::new(Discard::default()),
            Box::new(Lines::default()),
            slot.clone(),
        ));
        sink.write(b"{\"a\":").unwrap();
        sink.write(b"1}\n\n  {\"b\":2}\n").unwrap();
        let big = vec![b'x'; MAX_EVENT_LINE + 10];
        sink.write(&big).unwrap();
        sink.write(b"\n{\"c\":3}").unwrap();
        sink.finish().unwrap();
        let reader = slot.lock().unwrap().take().unwrap();
        let out = reader.finish(&mut Carry::default());
        assert_eq!(out.problems, vec!["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"]);
        assert_eq!(out.report.as_deref(), Some("1"));
    }
}
