//! Escaping agent-written text for XML and Markdown. Control characters are shown escaped as
//! everywhere else ([`crate::util::terminal`]: `\x1b`, `\u{202e}`), never dropped or sent.

use crate::util::terminal;

/// A control or reordering character as [`terminal`] shows it (`\x1b`, `\u{202e}`).
fn shown(c: char) -> String {
    terminal::line(c.encode_utf8(&mut [0u8; 4]))
}

/// Text for an XML attribute or element: `&`, `<`, `>`, `"` and `'` escaped, tab and newline
/// kept, every other control character (and the reordering ones) shown escaped (`\x01`), and
/// U+FFFE, U+FFFF (which XML 1.0 does not allow) replaced with U+FFFD.
pub fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' => out.push(c),
            c if c.is_control() || terminal::is_reordering(c) => out.push_str(&shown(c)),
            '\u{FFFE}' | '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// Text for one Markdown table cell or line: no line breaks, `|` and the characters that start
/// markup (`` ` ``, `*`, `_`, `[`, `]`, `<`, `>`, `#`, `!`, `\`) escaped with a backslash, and
/// control characters shown escaped (`\x1b`, its backslash escaped for Markdown).
pub fn markdown_inline(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' | '\r' | '\t' => out.push(' '),
            '|' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '#' | '!' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() || terminal::is_reordering(c) => {
                out.push('\\');
                out.push_str(&shown(c));
            }
            c => out.push(c),
        }
    }
    out
}

/// Text for a fenced Markdown block: a fence longer than any backtick run inside, and the text
/// with its control characters other than newline and tab shown escaped
/// ([`terminal::verbatim`]).
pub fn markdown_block(s: &str) -> String {
    let clean = terminal::verbatim(s.as_bytes());
    let longest = clean.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat((longest + 1).max(3));
    format!("{fence}text\n{clean}\n{fence}\n")
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn xml_text_cannot_close_an_element_or_carry_forbidden_characters() {
        assert_eq!(
            xml("</failure><testcase name=\"x\">&\u{1}'\u{fffe}"),
            "&lt;/failure&gt;&lt;testcase name=&quot;x&quot;&gt;&amp;\\x01&apos;\u{FFFD}"
        );
        assert_eq!(xml("a\tb\nc\r\u{1b}[2J"), "a\tb\nc\\r\\x1b[2J");
    }

    #[test]
    fn markdown_text_cannot_leave_its_cell_or_its_block() {
        assert_eq!(markdown_inline("a|b\n# c"), "a\\|b \\# c");
        assert_eq!(markdown_inline("x\u{1b}]0;t\u{7}"), "x\\\\x1b\\]0;t\\\\x07");
        let block = markdown_block("x\n````\ny");
        assert!(block.starts_with("`````text\n"), "{block}");
        assert!(block.ends_with("\n`````\n"), "{block}");
        assert_eq!(markdown_block("a\u{1b}[2Jb"), "```text\na\\x1b[2Jb\n```\n");
    }

    proptest! {
        #[test]
        fn no_control_character_reaches_a_report(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            let s = String::from_utf8_lossy(&bytes);
            let bad = |c: char, keep: &[char]| {
                (c.is_control() || terminal::is_reordering(c)) && !keep.contains(&c)
            };
            let x = xml(&s);
            prop_assert!(!x.chars().any(|c| bad(c, &['\t', '\n'])), "{x:?}");
            let m = markdown_inline(&s);
            prop_assert!(!m.chars().any(|c| bad(c, &[])), "{m:?}");
            let b = markdown_block(&s);
            prop_assert!(!b.chars().any(|c| bad(c, &['\t', '\n'])), "{b:?}");
        }
    }
}
