//! Text an agent, a workspace or a round's output could influence, made safe to show in a page:
//! the terminal rules of [`crate::util::terminal`] (every control character shown escaped, so
//! an OSC 8 link or an OSC 52 clipboard write is text, and bidirectional controls are shown
//! as `\u{…}`), bounded. The HTML escaping is the template engine's, after this.

use crate::util::terminal;

/// The most bytes of one multi-line field shown (a summary, an output tail, a patch).
pub const FIELD_BOUND: usize = 256 * 1024;

/// A one-line field (a name, a label, a step): every control character escaped, a newline too.
pub fn line(text: &str) -> String {
    terminal::line(text)
}

/// A multi-line field: lines kept, tabs kept, every other control character escaped, at most
/// [`FIELD_BOUND`] bytes (with a marker saying how many more there were).
pub fn block(text: &str) -> String {
    block_bytes(text.as_bytes())
}

/// [`block`] of bytes that may not be UTF-8.
pub fn block_bytes(bytes: &[u8]) -> String {
    let cut = bytes.len().min(FIELD_BOUND);
    let mut out = terminal::verbatim(&bytes[..cut]);
    if bytes.len() > cut {
        out.push_str(&format!("\n… ({} more bytes)", bytes.len() - cut));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_reach_the_page_as_text() {
        let osc8 = "\u{1b}]8;;javascript:alert(1)\u{1b}\\click\u{1b}]8;;\u{1b}\\";
        let shown = block(&format!("a\n{osc8}\n\u{1b}]52;c;aGk=\u{7}\tok\u{202e}"));
        assert!(
            !shown
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t')
        );
        assert!(shown.contains("\\x1b]8;;javascript:alert(1)"));
        assert!(shown.contains("\\x07\tok"));
        assert!(!shown.contains('\u{202e}'));
        assert_eq!(shown.lines().count(), 3);
        assert_eq!(line("a\nb"), "a\\nb");
        let big = "x".repeat(FIELD_BOUND + 10);
        assert!(block(&big).ends_with("(10 more bytes)"));
    }
}
