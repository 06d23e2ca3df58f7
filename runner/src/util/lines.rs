//! Splitting a byte stream into lines as chunks arrive, for the output sinks that read lines
//! (the report line tracker, the presets' readers).

/// Calls `f(part, ends_line)` for each piece of `chunk`: the text up to each newline (with
/// `ends_line = true`, newline excluded), then the unterminated rest (`false`), which the next
/// chunk continues.
pub fn for_each_part(chunk: &[u8], mut f: impl FnMut(&[u8], bool)) {
    let mut rest = chunk;
    while !rest.is_empty() {
        match rest.iter().position(|b| *b == b'\n') {
            Some(i) => {
                f(&rest[..i], true);
                rest = &rest[i + 1..];
            }
            None => {
                f(rest, false);
                rest = &[];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_end_at_newlines_and_the_rest_is_open() {
        let mut parts = Vec::new();
        for_each_part(b"ab\n\ncd\ne", |p, end| parts.push((p.to_vec(), end)));
        assert_eq!(
            parts,
            vec![
                (b"ab".to_vec(), true),
                (Vec::new(), true),
                (b"cd".to_vec(), true),
                (b"e".to_vec(), false)
            ]
        );
    }
}
