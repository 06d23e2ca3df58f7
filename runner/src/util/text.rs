//! Bounded text: anything returned to a caller (summaries, errors, output tails) is cut to a
//! byte bound with a marker that counts inside the bound (SPEC §3).

/// The default bound for text returned to a caller.
pub const RESULT_TEXT_BOUND: usize = 16384;

/// The marker appended where text was cut.
pub const TRUNCATION_MARKER: &str = "… [truncated]";

/// Cuts `text` to at most `bound` bytes, on a character boundary, ending with
/// [`TRUNCATION_MARKER`] when something was cut.
pub fn bounded(text: &str, bound: usize) -> String {
    if text.len() <= bound {
        return text.to_owned();
    }
    if bound < TRUNCATION_MARKER.len() {
        return floor_boundary(TRUNCATION_MARKER, bound).to_owned();
    }
    let keep = floor_boundary(text, bound - TRUNCATION_MARKER.len());
    format!("{keep}{TRUNCATION_MARKER}")
}

/// The last at most `bound` bytes of `text`, starting with a marker when something was cut.
pub fn bounded_tail(text: &str, bound: usize) -> String {
    if text.len() <= bound {
        return text.to_owned();
    }
    const HEAD: &str = "[truncated] …";
    if bound < HEAD.len() {
        return floor_boundary(HEAD, bound).to_owned();
    }
    let mut start = text.len() - (bound - HEAD.len());
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("{HEAD}{}", &text[start..])
}

fn floor_boundary(text: &str, mut at: usize) -> &str {
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    &text[..at]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_untouched() {
        assert_eq!(bounded("abc", 3), "abc");
    }

    #[test]
    fn marker_counts_inside_the_bound() {
        let long = "x".repeat(100);
        let out = bounded(&long, 40);
        assert_eq!(out.len(), 40);
        assert!(out.ends_with(TRUNCATION_MARKER));
    }

    #[test]
    fn cuts_on_char_boundaries() {
        let long = "é".repeat(50);
        for bound in 0..60 {
            let out = bounded(&long, bound);
            assert!(out.len() <= bound, "{bound}: {}", out.len());
            let tail = bounded_tail(&long, bound);
            assert!(tail.len() <= bound);
        }
    }

    #[test]
    fn tail_keeps_the_end() {
        let text = format!("{}END", "a".repeat(100));
        let out = bounded_tail(&text, 30);
        assert!(out.ends_with("END"));
        assert_eq!(out.len(), 30);
    }
}
