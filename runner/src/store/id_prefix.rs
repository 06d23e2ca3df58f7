//! Job id prefixes: what a user may type instead of a whole id, and the range of ids a prefix
//! covers (so both backends find them with an indexed range query, never a pattern).

use super::StoreError;

/// Fewest characters of an id accepted as a prefix.
pub const MIN_ID_PREFIX: usize = 4;
/// Most candidates named when a prefix is ambiguous.
pub const MAX_CANDIDATES: usize = 10;
/// Length of a whole id (UUID text).
const ID_LEN: usize = 36;

/// The prefix, lowercased, when it can begin a job id: hex digits and `-`, between
/// [`MIN_ID_PREFIX`] and 36 characters.
pub fn check(prefix: &str) -> Result<String, StoreError> {
    let invalid = |expected| StoreError::InvalidIdPrefix {
        prefix: prefix.escape_debug().to_string(),
        expected,
    };
    if !prefix.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
        return Err(invalid(
            "expected a job id or a prefix of one (hex digits and `-` only)",
        ));
    }
    if prefix.len() < MIN_ID_PREFIX {
        return Err(invalid("a prefix needs at least 4 characters of the id"));
    }
    if prefix.len() > ID_LEN {
        return Err(invalid("a job id has 36 characters"));
    }
    Ok(prefix.to_ascii_lowercase())
}

/// The exclusive upper bound of the ids starting with `prefix` (a checked prefix): `~` sorts
/// after every hex digit and `-`.
pub fn upper_bound(prefix: &str) -> String {
    format!("{prefix}~")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_and_short_prefixes_are_refused() {
        for bad in [
            "01%", "0190%", "0190_", "abc", "", "0190 ", "0190'--", "ü123",
        ] {
            assert!(
                matches!(check(bad), Err(StoreError::InvalidIdPrefix { .. })),
                "{bad}"
            );
        }
        assert_eq!(check("019A-b").unwrap(), "019a-b");
        assert!(upper_bound("019a").as_str() > "019affff-");
    }
}
