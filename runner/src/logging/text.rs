//! The text form of the service's log: `TIMESTAMP LEVEL message key=value …` on one line.
//! The message and every field value are escaped (`\n`, `\t`, `\u{1b}`, …), and a value with a
//! space, a quote or an `=` is quoted, so no untrusted text can forge a line or a field. What is
//! escaped is [`crate::util::terminal`]'s rule (controls, reordering characters, the `[` of a
//! `##name[` CI command), written in this log's reversible form.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::registry::LookupSpan;

use crate::util::terminal;

/// The text event format (see the module doc).
#[derive(Clone, Copy, Debug, Default)]
pub struct TextFormat;

/// `s` with control characters escaped (a backslash too, so an escape cannot be forged).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || terminal::is_reordering(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            '[' if terminal::completes_command(&out) => out.push_str("\\u{5b}"),
            c => out.push(c),
        }
    }
    out
}

/// A field value as written: escaped, and quoted when it has a space, a quote or an `=` (or is
/// empty).
fn value(s: &str) -> String {
    let e = escape(s);
    if e.is_empty() || e.contains([' ', '"', '=']) {
        format!("\"{}\"", e.replace('"', "\\\""))
    } else {
        e
    }
}

/// Collects an event's message and fields.
#[derive(Default)]
struct Collect {
    message: String,
    fields: String,
}

impl Collect {
    fn push(&mut self, field: &Field, text: &str) {
        if field.name() == "message" {
            self.message = escape(text);
        } else {
            let _ = write!(self.fields, " {}={}", field.name(), value(text));
        }
    }
}

impl Visit for Collect {
    fn record_str(&mut self, field: &Field, v: &str) {
        self.push(field, v);
    }

    fn record_debug(&mut self, field: &Field, v: &dyn fmt::Debug) {
        self.push(field, &format!("{v:?}"));
    }
}

impl<S, N> FormatEvent<S, N> for TextFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut c = Collect::default();
        event.record(&mut c);
        let now = humantime::format_rfc3339_millis(std::time::SystemTime::now());
        writeln!(
            writer,
            "{now} {:<5} {}{}",
            event.metadata().level(),
            c.message,
            c.fields
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_cannot_start_a_line() {
        assert_eq!(escape("a\nb\r\u{1b}[31m\\n"), "a\\nb\\r\\u{1b}[31m\\\\n");
        assert_eq!(value("x y\n"), "\"x y\\n\"");
        assert_eq!(value("a\"=b"), "\"a\\\"=b\"");
        assert_eq!(value("plain"), "plain");
        assert_eq!(
            escape("x ##[error]y \u{202e}"),
            "x ##\\u{5b}error]y \\u{202e}"
        );
    }
}
