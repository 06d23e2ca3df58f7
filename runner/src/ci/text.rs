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

/// Text as one Markdown code span, shown as it is (nothing is markup inside a code span, so
/// nothing is backslash-escaped): delimited by more backticks than its longest backtick run,
/// padded with a space where it starts or ends with a backtick or a space, its control characters
/// (a line break too) shown escaped ([`terminal::line`]). In a table cell (`in_table`) a `|`
/// is written `\|`, which GitHub's tables read before the code span (it shows `|`); the table
/// reads backslashes in pairs, so a `|` after an odd run of them gets one more (shown).
pub fn markdown_code(s: &str, in_table: bool) -> String {
    let mut text = terminal::line(s);
    if in_table {
        text = table_pipes(&text);
    }
    if text.is_empty() {
        return String::new();
    }
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    let pad = text.starts_with('`')
        || text.ends_with('`')
        || (text.starts_with(' ') && text.ends_with(' ') && text.trim() != "");
    let pad = if pad { " " } else { "" };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// `|` escaped for a table row as GitHub reads it (cmark-gfm: a backslash and the character after
/// it are one unit): each `|` behind an odd number of backslashes, its own included.
fn table_pipes(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 4);
    let mut run = 0usize;
    for c in text.chars() {
        if c == '|' {
            if run % 2 == 1 {
                out.push('\\');
            }
            out.push_str("\\|");
        } else {
            out.push(c);
        }
        run = if c == '\\' { run + 1 } else { 0 };
    }
    out
}

/// Text for one Markdown line or table cell whose backtick-quoted parts (`` `pytest -q` ``)
/// are code: those become code spans ([`markdown_code`]), the rest is escaped as by
/// [`markdown_inline`]. A backtick run is closed by the next run of the same length, as in
/// CommonMark; one that is never closed is text.
pub fn markdown_inline_code(s: &str, in_table: bool) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    let mut text_start = 0;
    let mut i = 0;
    let bytes = s.as_bytes();
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let run = bytes[i..].iter().take_while(|b| **b == b'`').count();
        let open_end = i + run;
        // The closing run: the next run of exactly `run` backticks.
        let mut j = open_end;
        let mut close = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let r = bytes[j..].iter().take_while(|b| **b == b'`').count();
                if r == run {
                    close = Some(j);
                    break;
                }
                j += r;
            } else {
                j += 1;
            }
        }
        match close {
            Some(c) => {
                out.push_str(&markdown_inline(&s[text_start..i]));
                out.push_str(&markdown_code(&s[open_end..c], in_table));
                i = c + run;
                text_start = i;
            }
            None => i = open_end,
        }
    }
    out.push_str(&markdown_inline(&s[text_start..]));
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

    #[test]
    fn code_is_a_code_span_not_backslash_escapes() {
        // The regression of issue 26: `verified by \`pytest -q tests\`` showed the backslashes.
        assert_eq!(
            markdown_inline_code("verified by `pytest -q tests`", false),
            "verified by `pytest -q tests`"
        );
        assert_eq!(markdown_code("a_b*c\\d", false), "`a_b*c\\d`");
        // Backticks inside: a longer fence, padded where the text touches it.
        assert_eq!(markdown_code("echo `date`", false), "`` echo `date` ``");
        assert_eq!(markdown_code("``x", false), "``` ``x ```");
        // Controls and line breaks shown escaped; a pipe escaped only in a table.
        assert_eq!(markdown_code("a\nb\u{1b}[2J", false), "`a\\nb\\x1b[2J`");
        assert_eq!(markdown_code("a | b", true), "`a \\| b`");
        assert_eq!(markdown_code("a | b", false), "`a | b`");
        // A backslash before the pipe cannot pair with the escape and free the pipe.
        assert_eq!(markdown_code("a\\|b", true), "`a\\\\\\|b`");
        assert_eq!(markdown_code("a\\\\|b", true), "`a\\\\\\|b`");
        // Text around the code is escaped; an unclosed backtick is text.
        assert_eq!(
            markdown_inline_code("*x* `a|b` and `c", true),
            "\\*x\\* `a\\|b` and \\`c"
        );
        assert_eq!(markdown_inline_code("``a`b``", false), "``a`b``");
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
            let c = markdown_inline_code(&s, true);
            prop_assert!(!c.chars().any(|c| bad(c, &[])), "{c:?}");
        }
    }
}
