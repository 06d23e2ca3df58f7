//! Strict decoding: parse (rejecting duplicate keys), check the shape, the per-status rules and
//! the size, in that order.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde_json::Value;

use super::{KEYS, Report, ReportError, Status};
use crate::util::text::bounded;

/// Raw input larger than this multiple of the cap (plus slack) is not parsed at all.
const RAW_FACTOR: usize = 8;
const RAW_SLACK: usize = 64 * 1024;

/// The most raw bytes worth reading for a report under `cap`.
pub fn raw_limit(cap: usize) -> usize {
    cap.saturating_mul(RAW_FACTOR).saturating_add(RAW_SLACK)
}

/// The UTF-8 byte order mark some editors and tools write first; one is skipped.
pub const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Decodes and validates a report from raw bytes (one leading UTF-8 BOM is skipped).
pub fn decode(bytes: &[u8], cap: usize) -> Result<Report, ReportError> {
    let bytes = bytes.strip_prefix(UTF8_BOM).unwrap_or(bytes);
    if bytes.len() > raw_limit(cap) {
        return Err(ReportError::InputTooLarge {
            size: bytes.len(),
            cap,
        });
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let strict = StrictValue::deserialize(&mut de).map_err(|e| not_json(&e))?;
    de.end().map_err(|e| not_json(&e))?;
    let entries = match strict {
        StrictValue::Object(entries) => entries,
        StrictValue::Other(v) => {
            return Err(ReportError::NotObject {
                found: type_name(&v),
            });
        }
        StrictValue::Duplicate(key) => {
            return Err(ReportError::DuplicateKey {
                key: bounded(&key, 128),
            });
        }
    };
    decode_entries(entries, cap)
}

/// Validates an already-parsed JSON value (e.g. a report read back from the journal).
pub fn decode_value(value: &Value, cap: usize) -> Result<Report, ReportError> {
    match value {
        Value::Object(map) => decode_entries(
            map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            cap,
        ),
        other => Err(ReportError::NotObject {
            found: type_name(other),
        }),
    }
}

fn not_json(e: &serde_json::Error) -> ReportError {
    ReportError::NotJson {
        message: bounded(&e.to_string(), 512),
    }
}

fn decode_entries(entries: Vec<(String, Value)>, cap: usize) -> Result<Report, ReportError> {
    if let Some((key, _)) = entries.iter().find(|(k, _)| !KEYS.contains(&k.as_str())) {
        return Err(ReportError::UnknownKey {
            key: bounded(key, 128),
        });
    }
    let get = |key: &'static str| -> Result<&Value, ReportError> {
        entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
            .ok_or(ReportError::MissingKey { key })
    };
    let (status, summary, evidence, next_steps, blocker) = (
        get("status")?,
        get("summary")?,
        get("evidence")?,
        get("nextSteps")?,
        get("blocker")?,
    );

    let status = match string(status, "status")? {
        "continue" => Status::Continue,
        "complete" => Status::Complete,
        "blocked" => Status::Blocked,
        other => {
            return Err(ReportError::InvalidStatus {
                found: bounded(other, 64),
            });
        }
    };
    let summary = string(summary, "summary")?;
    if summary.trim().is_empty() {
        return Err(ReportError::EmptySummary);
    }
    let evidence = string_list(evidence, "evidence")?;
    let next_steps = string_list(next_steps, "nextSteps")?;
    let blocker = string(blocker, "blocker")?;
    if blocker != blocker.trim() {
        return Err(ReportError::UntrimmedBlocker);
    }

    let rule = |rule| Err(ReportError::StatusRule { status, rule });
    match status {
        Status::Continue => {
            if next_steps.is_empty() {
                return rule("needs at least one item in `nextSteps`");
            }
            if !blocker.is_empty() {
                return rule("needs an empty `blocker`");
            }
        }
        Status::Complete => {
            if evidence.is_empty() {
                return rule("needs at least one item in `evidence`");
            }
            if !next_steps.is_empty() {
                return rule("must have no `nextSteps`");
            }
            if !blocker.is_empty() {
                return rule("needs an empty `blocker`");
            }
        }
        Status::Blocked => {
            if blocker.is_empty() {
                return rule("needs a non-empty `blocker`");
            }
        }
    }

    let report = Report {
        status,
        summary: summary.to_owned(),
        evidence,
        next_steps,
        blocker: blocker.to_owned(),
    };
    let size = report.to_compact_json().len();
    if size > cap {
        return Err(ReportError::Oversize { size, cap });
    }
    Ok(report)
}

fn string<'v>(value: &'v Value, key: &'static str) -> Result<&'v str, ReportError> {
    value.as_str().ok_or(ReportError::WrongType {
        key,
        expected: "a string",
        found: type_name(value),
    })
}

fn string_list(value: &Value, key: &'static str) -> Result<Vec<String>, ReportError> {
    let items = value.as_array().ok_or(ReportError::WrongType {
        key,
        expected: "an array of strings",
        found: type_name(value),
    })?;
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let s = item.as_str().ok_or(ReportError::WrongType {
                key,
                expected: "an array of strings",
                found: "an array with a non-string item",
            })?;
            if s.trim().is_empty() {
                return Err(ReportError::EmptyItem { key, index });
            }
            Ok(s.to_owned())
        })
        .collect()
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A top-level JSON value that remembers object keys in order and notices duplicates.
enum StrictValue {
    Object(Vec<(String, Value)>),
    Duplicate(String),
    Other(Value),
}

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StrictValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<StrictValue, A::Error> {
                let mut entries: Vec<(String, Value)> = Vec::new();
                let mut duplicate = None;
                while let Some(key) = map.next_key::<String>()? {
                    let value: Value = map.next_value()?;
                    if duplicate.is_none() && entries.iter().any(|(k, _)| *k == key) {
                        duplicate = Some(key.clone());
                    }
                    entries.push((key, value));
                }
                Ok(match duplicate {
                    Some(key) => StrictValue::Duplicate(key),
                    None => StrictValue::Object(entries),
                })
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<StrictValue, A::Error> {
                let mut items = Vec::new();
                while let Some(v) = seq.next_element::<Value>()? {
                    items.push(v);
                }
                Ok(StrictValue::Other(Value::Array(items)))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<StrictValue, E> {
                Ok(StrictValue::Other(Value::Bool(v)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<StrictValue, E> {
                Ok(StrictValue::Other(Value::from(v)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<StrictValue, E> {
                Ok(StrictValue::Other(Value::from(v)))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<StrictValue, E> {
                Ok(StrictValue::Other(Value::from(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<StrictValue, E> {
                Ok(StrictValue::Other(Value::from(v)))
            }
            fn visit_unit<E: de::Error>(self) -> Result<StrictValue, E> {
                Ok(StrictValue::Other(Value::Null))
            }
        }
        d.deserialize_any(V)
    }
}
