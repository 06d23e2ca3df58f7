//! Making untrusted output safe to print on a terminal: an agent's bytes may carry escape
//! sequences (move the cursor, set the title, clear the screen), carriage returns that rewrite
//! a line, or invalid UTF-8. [`safe_line`] turns one line of such bytes into plain text.

/// Escape sequences and their parameters are dropped; other control characters (C0 but tab,
/// DEL, C1) are shown as `\xNN` (`\r` as `\r`); invalid UTF-8 becomes U+FFFD. The result holds
/// at most `max` characters of the line, then ` … (N more bytes)`.
pub fn safe_line(bytes: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::with_capacity(text.len().min(max + 32));
    let mut shown = 0usize;
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if shown >= max {
            let rest = text.len() - at;
            out.push_str(&format!(" … ({rest} more bytes)"));
            break;
        }
        match c {
            '\u{1b}' => skip_escape(&mut chars),
            '\t' => {
                out.push('\t');
                shown += 1;
            }
            '\r' => {
                out.push_str("\\r");
                shown += 2;
            }
            c if c.is_control() || is_format_override(c) => {
                let code = u32::from(c);
                let e = if code <= 0xff {
                    format!("\\x{code:02x}")
                } else {
                    format!("\\u{{{code:x}}}")
                };
                shown += e.len();
                out.push_str(&e);
            }
            c => {
                out.push(c);
                shown += 1;
            }
        }
    }
    out
}

/// Bidirectional overrides and isolates reorder what a terminal shows: shown escaped.
fn is_format_override(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Skips the rest of an escape sequence whose ESC was just read: CSI (`ESC [` … final byte),
/// OSC/DCS/APC/PM/SOS strings (to BEL or `ESC \`), or one following character.
fn skip_escape(chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>) {
    let Some(&(_, kind)) = chars.peek() else {
        return;
    };
    chars.next();
    match kind {
        '[' => {
            // Parameters and intermediates, then one final byte in @..~.
            for (_, c) in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
                if !(' '..='?').contains(&c) {
                    // Not a CSI byte: the sequence was malformed; drop what was read.
                    break;
                }
            }
        }
        ']' | 'P' | '_' | '^' | 'X' => {
            while let Some((_, c)) = chars.next() {
                if c == '\u{7}' {
                    break;
                }
                if c == '\u{1b}' {
                    if chars.peek().is_some_and(|&(_, n)| n == '\\') {
                        chars.next();
                    }
                    break;
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_and_controls_never_pass() {
        let hostile = b"a\x1b]0;owned\x07b\x1b[2Jc\x1b[1;31mred\x1b[0m\rX\x08\x9b\x1bPdcs\x1b\\d";
        let s = safe_line(hostile, 1000);
        assert!(
            !s.contains('\u{1b}') && !s.contains('\r') && !s.contains('\u{7}'),
            "{s:?}"
        );
        assert!(!s.contains('\u{8}'), "{s:?}");
        assert!(s.starts_with("abcred\\rX\\x08"), "{s:?}");
        assert!(
            s.ends_with('d') && !s.contains("owned") && !s.contains("dcs"),
            "{s:?}"
        );
    }

    #[test]
    fn invalid_utf8_and_c1_controls_are_replaced() {
        let s = safe_line(b"ok \xff\xfe end \xc2\x9b31m", 1000);
        assert_eq!(s, "ok \u{fffd}\u{fffd} end \\x9b31m");
    }

    #[test]
    fn bidi_overrides_are_shown_escaped() {
        assert_eq!(safe_line("a\u{202e}b".as_bytes(), 100), "a\\u{202e}b");
    }

    #[test]
    fn long_lines_are_cut_with_the_count() {
        let s = safe_line(&[b'x'; 50], 10);
        assert_eq!(s, "xxxxxxxxxx … (40 more bytes)");
    }

    #[test]
    fn an_escape_at_the_end_is_dropped() {
        assert_eq!(safe_line(b"abc\x1b", 10), "abc");
        assert_eq!(safe_line(b"abc\x1b[12", 10), "abc");
    }
}
