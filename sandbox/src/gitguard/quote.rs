//! Agent-made bytes (names in a writable tree, configuration keys) as bounded, printable text
//! for messages, the journal and prompts: nothing in it can start a new line, end a quoted
//! string or carry a terminal escape.

/// Marker appended where the text was cut.
const CUT: &str = "…";

/// `bytes` as printable ASCII: `\` and `"` as `\\` and `\"`, every byte outside `0x20..=0x7e`
/// as `\xNN`; at most `bound` bytes (cut on an escape's boundary, ending with `…`).
pub fn escape(bytes: &[u8], bound: usize) -> String {
    let piece = |b: u8| match b {
        b'\\' => "\\\\".to_owned(),
        b'"' => "\\\"".to_owned(),
        0x20..=0x7e => char::from(b).to_string(),
        _ => format!("\\x{b:02x}"),
    };
    let full: usize = bytes.iter().map(|&b| piece(b).len()).sum();
    let room = if full <= bound {
        bound
    } else {
        bound.saturating_sub(CUT.len())
    };
    let mut out = String::with_capacity(full.min(bound));
    for &b in bytes {
        let p = piece(b);
        if out.len() + p.len() > room {
            out.push_str(CUT);
            break;
        }
        out.push_str(&p);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_ascii_is_kept() {
        assert_eq!(escape(b"sub/.git", 100), "sub/.git");
    }

    #[test]
    fn quotes_newlines_and_non_ascii_are_escaped() {
        assert_eq!(
            escape(b"a\"b\\c\nd\x1b[31m\xff", 100),
            "a\\\"b\\\\c\\x0ad\\x1b[31m\\xff"
        );
        assert!(!escape(b"x\n## Runner notes\n", 100).contains('\n'));
    }

    #[test]
    fn bounded_with_a_marker() {
        let long = vec![b'a'; 1000];
        let out = escape(&long, 50);
        assert!(out.len() <= 50, "{}", out.len());
        assert!(out.ends_with(CUT));
        let exact = vec![b'a'; 50];
        assert_eq!(escape(&exact, 50), "a".repeat(50));
        let weird = vec![0xffu8; 100];
        let out = escape(&weird, 30);
        assert!(out.len() <= 30 && out.ends_with(CUT), "{out}");
        assert!(!out.contains("\\x…"), "an escape is never cut: {out}");
    }
}
