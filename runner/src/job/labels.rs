//! A job's `name` and `labels`: free-form tags for finding jobs again (`ralph jobs --name N
//! --label KEY=VALUE`, `GET /v1/jobs?name=&label=`). They are printed in tables, so no control
//! character is allowed anywhere.

use std::collections::BTreeMap;

use super::spec::SpecError;

/// Longest `name`, in characters.
pub const MAX_NAME_CHARS: usize = 128;
/// Longest label value, in characters.
pub const MAX_LABEL_VALUE_CHARS: usize = 256;
/// Most labels on one job.
pub const MAX_LABELS: usize = 32;
/// Longest label key, in characters.
pub const MAX_LABEL_KEY_CHARS: usize = 63;

/// Whether `key` is a label key: `[a-z0-9][a-z0-9._/-]{0,62}`.
pub fn valid_label_key(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && key.len() <= MAX_LABEL_KEY_CHARS
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._/-".contains(c))
}

fn has_control(s: &str) -> bool {
    s.chars().any(char::is_control)
}

/// Checks a job's name and labels.
pub fn validate(name: Option<&str>, labels: &BTreeMap<String, String>) -> Result<(), SpecError> {
    if let Some(n) = name {
        if n.trim().is_empty() {
            return Err(SpecError {
                field: "name",
                message: "must not be empty".into(),
            });
        }
        if n.chars().count() > MAX_NAME_CHARS {
            return Err(SpecError {
                field: "name",
                message: format!("is over {MAX_NAME_CHARS} characters"),
            });
        }
        if has_control(n) {
            return Err(SpecError {
                field: "name",
                message: "must not contain control characters".into(),
            });
        }
    }
    if labels.len() > MAX_LABELS {
        return Err(SpecError {
            field: "labels",
            message: format!("{} labels, over the limit of {MAX_LABELS}", labels.len()),
        });
    }
    for (k, v) in labels {
        if !valid_label_key(k) {
            return Err(SpecError {
                field: "labels",
                message: format!(
                    "key `{}` is not a label key (expected [a-z0-9][a-z0-9._/-]{{0,62}})",
                    k.escape_debug()
                ),
            });
        }
        if v.chars().count() > MAX_LABEL_VALUE_CHARS {
            return Err(SpecError {
                field: "labels",
                message: format!("the value of `{k}` is over {MAX_LABEL_VALUE_CHARS} characters"),
            });
        }
        if has_control(v) {
            return Err(SpecError {
                field: "labels",
                message: format!("the value of `{k}` must not contain control characters"),
            });
        }
    }
    Ok(())
}

/// Parses `KEY=VALUE` (a `--label` flag or a `label=` filter).
pub fn parse_label(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if valid_label_key(k) => Ok((k.to_owned(), v.to_owned())),
        Some((k, _)) => Err(format!(
            "key `{}` is not a label key (expected [a-z0-9][a-z0-9._/-]{{0,62}})",
            k.escape_debug()
        )),
        None => Err(format!("`{}` is not KEY=VALUE", s.escape_debug())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_values_and_names_are_checked() {
        let ok: BTreeMap<String, String> = [("team".into(), "infra".into())].into();
        assert!(validate(Some("nightly"), &ok).is_ok());
        for key in ["Team", "", "-x", "a b", "a%b", &"k".repeat(64)] {
            let bad: BTreeMap<String, String> = [(key.to_owned(), "v".to_owned())].into();
            let e = validate(None, &bad).unwrap_err();
            assert_eq!(e.field, "labels");
            assert!(e.message.contains("is not a label key"), "{e}");
        }
        let ctl: BTreeMap<String, String> = [("t".into(), "a\u{1b}[31m".into())].into();
        assert!(validate(None, &ctl).unwrap_err().message.contains("`t`"));
        assert_eq!(
            validate(Some("a\nb"), &BTreeMap::new()).unwrap_err().field,
            "name"
        );
        assert!(validate(Some(&"n".repeat(129)), &BTreeMap::new()).is_err());
        let many: BTreeMap<String, String> =
            (0..33).map(|i| (format!("k{i}"), String::new())).collect();
        assert!(validate(None, &many).is_err());
        assert_eq!(
            parse_label("a.b/c=x=y").unwrap(),
            ("a.b/c".into(), "x=y".into())
        );
        assert!(parse_label("novalue").is_err());
    }
}
