//! Text an agent, a workspace or a round's output could influence, made safe to print on an
//! operator's terminal and in a CI log. The one rule behind every text output of ralph (`show`,
//! `logs`, `wait`, `ralph run`'s progress and result line, `submit`'s echo, errors, the CI
//! summary and JUnit report):
//!
//! - Every control character is shown escaped, never sent: `\n`, `\r`, `\t`, `\xNN` for the other
//!   C0 controls, DEL and the C1 controls — `\x1b` for ESC, so no escape sequence (OSC 52 to the
//!   clipboard, OSC 8 links, a title, a screen clear, GitLab's `\e[0K` section markers) reaches a
//!   terminal or a log viewer — and `\u{…}` for the bidirectional controls and the line and
//!   paragraph separators. Invalid UTF-8 becomes U+FFFD.
//! - A [`line`] is one line: a newline in it (in a field it quotes) is shown as `\n`, so a field
//!   never starts a line of its own. Runner lines begin with runner text (`ralph: `, a timestamp,
//!   `job …`, a label).
//! - Captured output, which has lines of its own, is shown line by line behind a runner-owned
//!   prefix ([`Prefixed`]): no line the agent controls starts at column 0, so none is a GitHub
//!   workflow command (`::name::`, recognised at the start of a line after white space).
//!   Prefix-less data meant for reading (a patch on a terminal) gets [`verbatim`], which escapes
//!   the `:` of a line that would start with `::`.
//! - A `[` that would complete a `##name[` command — GitHub's legacy `##[name]`, Azure's
//!   `##vso[`, TeamCity's `##teamcity[`, all recognised anywhere in a line — is shown as `\x5b`.
//! - The result is bounded ([`LINE_BOUND`] bytes by default, SPEC §3) with a marker
//!   (` … (N more bytes)`) that counts inside the bound.
//!
//! A backslash of the text is kept as it is: the escapes are for reading, not reversible.
//! [`json`] writes JSON for the same outputs (`--json`): the same value, byte for byte but
//! `\u005b` for a `[` that would complete a `##name[` command and `\uXXXX` for DEL, C1 and the
//! reordering characters (only possible inside strings).

/// The most bytes of one printed line (SPEC §3: text returned to a caller is bounded).
pub const LINE_BOUND: usize = crate::util::text::RESULT_TEXT_BOUND;

/// The most bytes of one line of captured output kept while it is read; the rest is counted.
pub const KEEP_BYTES: usize = LINE_BOUND;

/// What a tab becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tabs {
    /// `\t`: runner lines and the fields in them.
    Escape,
    /// Kept: captured output, whose indentation it is.
    Keep,
}

/// One line of runner text, with the untrusted text it quotes, as printed: every control
/// character escaped (a newline too), bounded to [`LINE_BOUND`] bytes.
pub fn line(text: &str) -> String {
    line_within(text, LINE_BOUND)
}

/// [`line`], bounded to `bound` bytes.
pub fn line_within(text: &str, bound: usize) -> String {
    render(text, Tabs::Escape, 0, bound)
}

/// One line of captured output (without its newline): escaped like [`line`] but tabs kept, at
/// most `bound` bytes, `dropped` more bytes of the line counted in the marker.
pub fn output_line(bytes: &[u8], dropped: usize, bound: usize) -> String {
    render(&String::from_utf8_lossy(bytes), Tabs::Keep, dropped, bound)
}

/// Line-structured data shown for reading without a prefix (a patch on a terminal): each line
/// escaped like [`output_line`] (unbounded) and ended by its newline as in `bytes`, a `\r` before
/// it shown; a line that would start with `::` after white space has that `:` shown as `\x3a`.
pub fn verbatim(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::with_capacity(text.len());
    for (i, l) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let start = out.len();
        match command_colon(l) {
            Some(at) => {
                escape_into(&mut out, start, &l[..at], Tabs::Keep, usize::MAX);
                out.push_str("\\x3a");
                escape_into(&mut out, start, &l[at + 1..], Tabs::Keep, usize::MAX);
            }
            None => {
                escape_into(&mut out, start, l, Tabs::Keep, usize::MAX);
            }
        }
    }
    out
}

/// JSON text of `v` for a terminal or a CI log (pretty when `pretty`): the same value, with
/// `\u005b` for a `[` (inside a string: `#` appears nowhere else) that would complete a
/// `##name[` command, and `\uXXXX` for the characters [`line`] escapes that JSON may leave raw.
pub fn json<T: serde::Serialize + ?Sized>(v: &T, pretty: bool) -> String {
    let text = if pretty {
        serde_json::to_string_pretty(v)
    } else {
        serde_json::to_string(v)
    }
    .unwrap_or_default();
    if !text.contains('#') && !text.chars().any(json_escaped) {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c == '[' && completes_command(&out) {
            out.push_str("\\u005b");
        } else if json_escaped(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// What [`json`] writes as a `\uXXXX` escape though serde_json writes it raw: DEL, the C1
/// controls and the reordering characters (all inside strings: a raw newline is the layout's).
fn json_escaped(c: char) -> bool {
    (c.is_control() && c != '\n') || is_reordering(c)
}

/// Captured output (a round's stdout, stderr, a verify log) fed in chunks as it arrives and
/// shown line by line, each line behind a runner-owned prefix and escaped like [`output_line`]
/// (a `\r\n` ends a line like `\n`).
#[derive(Debug)]
pub struct Prefixed {
    prefix: String,
    line: Vec<u8>,
    /// Bytes of the current line past [`KEEP_BYTES`].
    dropped: usize,
}

impl Prefixed {
    /// Lines behind `prefix`, which must begin with a printable character other than white
    /// space (a space is added when it does not end with one).
    pub fn new(prefix: &str) -> Self {
        let mut prefix = line(prefix);
        if !prefix.ends_with(' ') {
            prefix.push(' ');
        }
        Self {
            prefix,
            line: Vec::new(),
            dropped: 0,
        }
    }

    /// Feeds `chunk`; `emit` gets each line it completes (without a newline).
    pub fn push(&mut self, chunk: &[u8], mut emit: impl FnMut(String)) {
        crate::util::lines::for_each_part(chunk, |part, ends| {
            let room = KEEP_BYTES.saturating_sub(self.line.len());
            let keep = part.len().min(room);
            self.line.extend_from_slice(&part[..keep]);
            self.dropped += part.len() - keep;
            if ends {
                emit(self.take());
            }
        });
    }

    /// Ends the output: `emit` gets an unterminated last line, if there is one.
    pub fn finish(&mut self, mut emit: impl FnMut(String)) {
        if !self.line.is_empty() || self.dropped > 0 {
            emit(self.take());
        }
    }

    /// Everything of `bytes` as lines, each ended by a newline.
    pub fn all(prefix: &str, bytes: &[u8]) -> String {
        let mut p = Self::new(prefix);
        let mut out = String::with_capacity(bytes.len() + bytes.len() / 8);
        let mut add = |l: String| {
            out.push_str(&l);
            out.push('\n');
        };
        p.push(bytes, &mut add);
        p.finish(&mut add);
        out
    }

    fn take(&mut self) -> String {
        if self.line.last() == Some(&b'\r') && self.dropped == 0 {
            self.line.pop();
        }
        let room = LINE_BOUND.saturating_sub(self.prefix.len());
        let text = format!(
            "{}{}",
            self.prefix,
            output_line(&self.line, self.dropped, room)
        );
        self.line.clear();
        self.dropped = 0;
        text
    }
}

/// `text` escaped, at most `bound` bytes including the marker of what was cut.
fn render(text: &str, tabs: Tabs, dropped: usize, bound: usize) -> String {
    let mut out = String::with_capacity(text.len().min(bound));
    let shown = escape_into(&mut out, 0, text, tabs, bound);
    if shown == text.len() && dropped == 0 {
        return out;
    }
    let marker = |rest: usize| format!(" … ({rest} more bytes)");
    // Room for the longest marker this text can need.
    let reserve = marker(text.len() + dropped).len();
    let Some(room) = bound.checked_sub(reserve) else {
        return String::new();
    };
    out.clear();
    let shown = escape_into(&mut out, 0, text, tabs, room);
    out.push_str(&marker(text.len() - shown + dropped));
    out
}

/// Appends `text` escaped to `out` while `out` stays within `cap` bytes; returns how many bytes
/// of `text` were shown. `start` is where the current line begins in `out` (what a `##name[`
/// command could be read from).
fn escape_into(out: &mut String, start: usize, text: &str, tabs: Tabs, cap: usize) -> usize {
    for (at, c) in text.char_indices() {
        let escaped = match c {
            '\n' => Some("\\n".to_owned()),
            '\r' => Some("\\r".to_owned()),
            '\t' if tabs == Tabs::Escape => Some("\\t".to_owned()),
            '\t' => None,
            c if c.is_control() => Some(format!("\\x{:02x}", u32::from(c))),
            c if is_reordering(c) => Some(format!("\\u{{{:x}}}", u32::from(c))),
            '[' if completes_command(&out[start..]) => Some("\\x5b".to_owned()),
            _ => None,
        };
        let len = escaped.as_ref().map_or(c.len_utf8(), String::len);
        if out.len() + len > cap {
            return at;
        }
        match escaped {
            Some(e) => out.push_str(&e),
            None => out.push(c),
        }
    }
    text.len()
}

/// Characters that reorder or break what a terminal shows: the bidirectional controls (marks,
/// embeddings, overrides, isolates) and the line and paragraph separators. Shown escaped, like
/// the controls.
pub fn is_reordering(c: char) -> bool {
    matches!(
        c,
        '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
            | '\u{2028}' | '\u{2029}'
    )
}

/// Unicode's default-ignorable code points: a culture-sensitive string search (as .NET's, which
/// CI runners use) may skip them, so `#\u{200b}#[` can read as `##[`.
fn is_ignorable(c: char) -> bool {
    matches!(
        c,
        '\u{00ad}'
            | '\u{034f}'
            | '\u{061c}'
            | '\u{115f}'
            | '\u{1160}'
            | '\u{17b4}'
            | '\u{17b5}'
            | '\u{180b}'..='\u{180f}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}'
            | '\u{3164}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{feff}'
            | '\u{ffa0}'
            | '\u{fff0}'..='\u{fff8}'
            | '\u{1bca0}'..='\u{1bca3}'
            | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0000}'..='\u{e0fff}'
    )
}

/// The longest command name read before a `[` (`teamcity` is 8).
const COMMAND_NAME: usize = 32;

/// Whether a `[` after `before` (the line so far) would complete a `##name[` command: `before`
/// ends with `##` and at most [`COMMAND_NAME`] ASCII letters or digits, ignorable characters
/// skipped. Such a `[` is shown escaped.
pub fn completes_command(before: &str) -> bool {
    let mut rev = before
        .chars()
        .rev()
        .take(4 * COMMAND_NAME)
        .filter(|c| !is_ignorable(*c));
    let mut c = rev.next();
    let mut name = 0;
    while let Some(x) = c
        && x.is_ascii_alphanumeric()
        && name < COMMAND_NAME
    {
        name += 1;
        c = rev.next();
    }
    c == Some('#') && rev.next() == Some('#')
}

/// Where the `:` is that would make `line` start with `::` (after white space; ignorable
/// characters skipped): the first one.
fn command_colon(line: &str) -> Option<usize> {
    let mut chars = line
        .char_indices()
        .filter(|(_, c)| !is_ignorable(*c))
        .skip_while(|(_, c)| c.is_whitespace());
    match (chars.next(), chars.next()) {
        (Some((at, ':')), Some((_, ':'))) => Some(at),
        _ => None,
    }
}

/// Whether `line` (as a CI runner reads it: white space and ignorable characters skipped at
/// the start) begins with `::`. For tests and callers that check what they print.
pub fn starts_command(line: &str) -> bool {
    command_colon(line).is_some()
}

/// Whether `text` holds a `##name[` command anywhere. For tests and callers that check.
pub fn holds_command(text: &str) -> bool {
    text.char_indices()
        .any(|(at, c)| c == '[' && completes_command(&text[..at]))
}

#[cfg(test)]
#[path = "terminal_tests.rs"]
mod tests;
