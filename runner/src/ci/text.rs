//! Escaping agent-written text for XML and Markdown.

/// Text for an XML attribute or element: `&`, `<`, `>`, `"` and `'` escaped, and characters XML
/// 1.0 does not allow (controls other than tab, newline and return; U+FFFE, U+FFFF) replaced
/// with U+FFFD.
pub fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// Text for one Markdown table cell or line: no line breaks, `|` and the characters that start
/// markup (`` ` ``, `*`, `_`, `[`, `]`, `<`, `>`, `#`, `!`, `\`) escaped with a backslash, and
/// control characters dropped.
pub fn markdown_inline(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' | '\r' | '\t' => out.push(' '),
            '|' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '#' | '!' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// Text for a fenced Markdown block: a fence longer than any backtick run inside, and the text
/// without control characters other than newline and tab.
pub fn markdown_block(s: &str) -> String {
    let clean: String = s
        .chars()
        .filter(|c| !c.is_control() || *c == '\n' || *c == '\t')
        .collect();
    let longest = clean.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat((longest + 1).max(3));
    format!("{fence}text\n{clean}\n{fence}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_text_cannot_close_an_element_or_carry_forbidden_characters() {
        assert_eq!(
            xml("</failure><testcase name=\"x\">&\u{1}'"),
            "&lt;/failure&gt;&lt;testcase name=&quot;x&quot;&gt;&amp;\u{FFFD}&apos;"
        );
        assert_eq!(xml("a\tb\nc"), "a\tb\nc");
    }

    #[test]
    fn markdown_text_cannot_leave_its_cell_or_its_block() {
        assert_eq!(markdown_inline("a|b\n# c"), "a\\|b \\# c");
        let block = markdown_block("x\n````\ny");
        assert!(block.starts_with("`````text\n"), "{block}");
        assert!(block.ends_with("\n`````\n"), "{block}");
    }
}
