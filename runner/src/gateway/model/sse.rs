//! An incremental Server-Sent Events parser for the gateway's tee: fed chunks as they pass, it
//! yields the `data` of each complete event. Memory is bounded: an event larger than
//! [`MAX_EVENT_BYTES`] is skipped whole (counted in [`SseParser::skipped`]).

/// Largest single event kept for parsing (a Responses `response.completed` repeats the whole
/// output, so this is generous).
pub const MAX_EVENT_BYTES: usize = 8 << 20;

/// The parser's state between chunks.
#[derive(Debug)]
pub struct SseParser {
    cap: usize,
    line: Vec<u8>,
    data: Vec<u8>,
    has_data: bool,
    skipping: bool,
    skipped: u64,
    /// Bytes of the current line seen, kept or not, and its last byte: a dropped line is not a
    /// blank one.
    line_seen: usize,
    last_byte: u8,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::with_cap(MAX_EVENT_BYTES)
    }
}

impl SseParser {
    /// A parser that skips events over `cap` bytes.
    pub fn with_cap(cap: usize) -> Self {
        Self {
            cap,
            line: Vec::new(),
            data: Vec::new(),
            has_data: false,
            skipping: false,
            skipped: 0,
            line_seen: 0,
            last_byte: 0,
        }
    }

    /// Events skipped for size.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Feeds a chunk; calls `on_event` with the data of each event it completes.
    pub fn feed(&mut self, chunk: &[u8], mut on_event: impl FnMut(&[u8])) {
        let mut rest = chunk;
        while !rest.is_empty() {
            match rest.iter().position(|b| *b == b'\n') {
                Some(i) => {
                    self.push_line_bytes(&rest[..i]);
                    rest = &rest[i + 1..];
                    self.end_line(&mut on_event);
                }
                None => {
                    self.push_line_bytes(rest);
                    rest = &[];
                }
            }
        }
    }

    /// Ends the stream: an event not terminated by a blank line is dispatched anyway.
    pub fn finish(&mut self, mut on_event: impl FnMut(&[u8])) {
        if !self.line.is_empty() {
            self.end_line(&mut on_event);
        }
        self.end_line(&mut on_event);
    }

    fn push_line_bytes(&mut self, bytes: &[u8]) {
        self.line_seen += bytes.len();
        if let Some(b) = bytes.last() {
            self.last_byte = *b;
        }
        if self.skipping {
            return;
        }
        if self.line.len() + self.data.len() + bytes.len() > self.cap {
            self.skipping = true;
            self.skipped += 1;
            self.line = Vec::new();
            self.data = Vec::new();
            self.has_data = false;
            return;
        }
        self.line.extend_from_slice(bytes);
    }

    fn end_line(&mut self, on_event: &mut impl FnMut(&[u8])) {
        let mut line = std::mem::take(&mut self.line);
        let blank = self.line_seen == 0 || (self.line_seen == 1 && self.last_byte == b'\r');
        self.line_seen = 0;
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if blank {
            if self.skipping {
                self.skipping = false;
            } else if self.has_data {
                on_event(&self.data);
            }
            self.data.clear();
            self.has_data = false;
            return;
        }
        if self.skipping {
            return;
        }
        if let Some(value) = line.strip_prefix(b"data") {
            let value = match value.first() {
                Some(b':') => &value[1..],
                None => &[][..],
                Some(_) => return,
            };
            let value = value.strip_prefix(b" ").unwrap_or(value);
            if self.has_data {
                self.data.push(b'\n');
            }
            self.data.extend_from_slice(value);
            self.has_data = true;
        }
        self.line = line;
        self.line.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]], cap: usize) -> (Vec<String>, u64) {
        let mut p = SseParser::with_cap(cap);
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c, |d| out.push(String::from_utf8_lossy(d).into_owned()));
        }
        p.finish(|d| out.push(String::from_utf8_lossy(d).into_owned()));
        (out, p.skipped())
    }

    #[test]
    fn events_split_across_chunks_and_crlf_are_joined() {
        let (ev, _) = events(
            &[
                b"event: a\r\ndata: {\"x\"",
                b":1}\r\n\r\n: comment\n\ndata: one\ndata:two\n",
                b"\ndata: tail",
            ],
            1024,
        );
        assert_eq!(ev, vec!["{\"x\":1}", "one\ntwo", "tail"]);
    }

    #[test]
    fn oversized_events_are_skipped_and_the_next_one_is_read() {
        let big = vec![b'x'; 100];
        let (ev, skipped) = events(
            &[b"data: ", &big, b"\ndata: more\n\n", b"data: small\n\n"],
            50,
        );
        assert_eq!(ev, vec!["small"]);
        assert_eq!(skipped, 1);
    }
}
