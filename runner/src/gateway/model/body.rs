//! A route's request body judged and rebuilt: it must be one JSON object that serde_json parses
//! strictly (a lone surrogate `\ud800`, which Python and Node take, is refused: the agent CLIs
//! send valid JSON), with each top-level field once and `stream` absent or a boolean. What is
//! forwarded is rebuilt from what was judged (keys re-encoded, `stream_options.include_usage`
//! set where the route asks for usage), so the upstream cannot read another request than the
//! one metered.
//!
//! Memory: parsing keeps no tree. One pass validates every value without storing it, a second
//! borrows each top-level value's raw text; only `model`, `stream`, `stream_options` and the
//! forbidden fields are decoded, each bounded. A `Value` of the whole body could take 30 times
//! its size (`[0,0,0,…]`), which the gateway's memory bounds do not count.

use std::borrow::Cow;
use std::fmt;

use bytes::Bytes;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::routes::BodyRule;

/// Most top-level fields taken (the APIs have about 30).
pub const MAX_FIELDS: usize = 128;
/// Largest `stream_options` (or forbidden field) decoded.
const MAX_SMALL_FIELD: usize = 4096;

/// A body as it will be forwarded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judged {
    /// The bytes to send upstream.
    pub body: Bytes,
    /// The `model` it names.
    pub model: Option<String>,
    /// True when it asks for a stream.
    pub streams: bool,
}

/// Why a body was refused; the message names the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// Not JSON serde_json parses.
    #[error("the request body is not valid JSON: {0}")]
    Json(String),
    /// JSON, but not an object.
    #[error("the request body must be a JSON object")]
    NotObject,
    /// A top-level field twice.
    #[error("the request body has the field `{0}` twice")]
    Duplicate(String),
    /// Too many top-level fields.
    #[error("the request body has more than {MAX_FIELDS} top-level fields")]
    TooManyFields,
    /// A field of the wrong type or value.
    #[error("the request body's `{field}` must be {expected}")]
    Field {
        /// The field.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// A body on a route that takes none.
    #[error("this request takes no body")]
    Unexpected,
}

/// Visits every value, storing nothing: serde_json decodes each string strictly on the way.
struct Strict;

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(Strict)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while map.next_key_seed(Strict)?.is_some() {
            map.next_value_seed(Strict)?;
        }
        Ok(())
    }
}

/// The top-level object: each key (decoded) and its value's raw text, in order.
struct Top<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'de: 'a, 'a> de::Deserialize<'de> for Top<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Top<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top<'a>, A::Error> {
                let mut out: Vec<(Cow<'a, str>, &'a RawValue)> = Vec::new();
                while let Some(k) = map.next_key::<Cow<'a, str>>()? {
                    if out.len() >= MAX_FIELDS {
                        return Err(de::Error::custom(TOO_MANY));
                    }
                    if out.iter().any(|(o, _)| *o == k) {
                        return Err(de::Error::custom(format!("{DUPLICATE}{k}")));
                    }
                    let v: &'a RawValue = map.next_value()?;
                    out.push((k, v));
                }
                Ok(Top(out))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

const TOO_MANY: &str = "ralph:too-many-fields";
const DUPLICATE: &str = "ralph:duplicate:";

fn small(raw: &RawValue, field: &'static str) -> Result<Value, BodyError> {
    if raw.get().len() > MAX_SMALL_FIELD {
        return Err(BodyError::Field {
            field,
            expected: "at most 4096 bytes",
        });
    }
    serde_json::from_str(raw.get()).map_err(|e| BodyError::Json(e.to_string()))
}

/// Judges `raw` by `rule` and rebuilds it.
pub fn judge(rule: BodyRule, raw: &[u8]) -> Result<Judged, BodyError> {
    let BodyRule::Json {
        ask_usage,
        streams: may_stream,
        forbidden,
    } = rule
    else {
        return if raw.is_empty() {
            Ok(Judged {
                body: Bytes::new(),
                model: None,
                streams: false,
            })
        } else {
            Err(BodyError::Unexpected)
        };
    };
    let mut de = serde_json::Deserializer::from_slice(raw);
    Strict
        .deserialize(&mut de)
        .and_then(|()| de.end())
        .map_err(|e| BodyError::Json(e.to_string()))?;
    let Top(fields) = serde_json::from_slice::<Top<'_>>(raw).map_err(|e| {
        let msg = e.to_string();
        if msg.starts_with(TOO_MANY) {
            BodyError::TooManyFields
        } else if let Some(rest) = msg.strip_prefix(DUPLICATE) {
            let key = rest.split(" at line").next().unwrap_or(rest);
            BodyError::Duplicate(crate::util::text::bounded(key, 64))
        } else if e.is_data() {
            BodyError::NotObject
        } else {
            BodyError::Json(msg)
        }
    })?;
    let get = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, v)| *v);
    let streams = match get("stream").map(RawValue::get) {
        None | Some("false") => false,
        Some("true") => true,
        Some(_) => {
            return Err(BodyError::Field {
                field: "stream",
                expected: "a boolean (true or false)",
            });
        }
    };
    if streams && !may_stream {
        return Err(BodyError::Field {
            field: "stream",
            expected: "absent or false on this route (it does not stream)",
        });
    }
    for f in forbidden {
        if let Some(raw) = get(f) {
            if !matches!(raw.get(), "null" | "false") {
                let field: &'static str = f;
                return Err(BodyError::Field {
                    field,
                    expected: "absent, null or false (the gateway could not read its usage)",
                });
            }
        }
    }
    let model = match get("model") {
        None => None,
        Some(raw) => match small(raw, "model")? {
            Value::String(s) => Some(s),
            _ => {
                return Err(BodyError::Field {
                    field: "model",
                    expected: "a string",
                });
            }
        },
    };
    let options = match (streams && ask_usage, get("stream_options")) {
        (false, _) => None,
        (true, None) => Some(json!({"include_usage": true})),
        (true, Some(raw)) => match small(raw, "stream_options")? {
            Value::Null => Some(json!({"include_usage": true})),
            Value::Object(mut o) => {
                o.insert("include_usage".to_owned(), Value::Bool(true));
                Some(Value::Object(o))
            }
            _ => {
                return Err(BodyError::Field {
                    field: "stream_options",
                    expected: "an object",
                });
            }
        },
    };
    let mut out = Vec::with_capacity(raw.len() + 48);
    out.push(b'{');
    let mut first = true;
    let mut member = |out: &mut Vec<u8>, key: &str, value: &str| {
        if !first {
            out.push(b',');
        }
        first = false;
        // A string always serialises.
        out.extend_from_slice(Value::String(key.to_owned()).to_string().as_bytes());
        out.push(b':');
        out.extend_from_slice(value.as_bytes());
    };
    for (k, v) in &fields {
        match (&options, k.as_ref()) {
            (Some(o), "stream_options") => member(&mut out, k, &o.to_string()),
            _ => member(&mut out, k, v.get()),
        }
    }
    if let (Some(o), None) = (&options, get("stream_options")) {
        member(&mut out, "stream_options", &o.to_string());
    }
    out.push(b'}');
    Ok(Judged {
        body: Bytes::from(out),
        model,
        streams,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAT: BodyRule = BodyRule::Json {
        ask_usage: true,
        streams: true,
        forbidden: &[],
    };
    const RESPONSES: BodyRule = BodyRule::Json {
        ask_usage: false,
        streams: true,
        forbidden: &["background"],
    };
    const EMBEDDINGS: BodyRule = BodyRule::Json {
        ask_usage: false,
        streams: false,
        forbidden: &[],
    };

    fn err(rule: BodyRule, body: &str) -> String {
        judge(rule, body.as_bytes()).unwrap_err().to_string()
    }

    #[test]
    fn streamed_chat_asks_for_usage_and_the_body_is_rebuilt_from_what_was_judged() {
        let j = judge(
            CHAT,
            br#"{"model":"m1", "str\u0065am":true,"stream_options":{"x":1,"include_usage":false},"messages":[{"a":"\u00e9"}]}"#,
        )
        .unwrap();
        assert!(j.streams);
        assert_eq!(j.model.as_deref(), Some("m1"));
        let v: Value = serde_json::from_slice(&j.body).unwrap();
        assert_eq!(v["stream"], true);
        assert_eq!(v["stream_options"], json!({"x": 1, "include_usage": true}));
        assert_eq!(v["messages"][0]["a"], "é");
        let j = judge(CHAT, br#"{"stream":true}"#).unwrap();
        assert_eq!(
            std::str::from_utf8(&j.body).unwrap(),
            r#"{"stream":true,"stream_options":{"include_usage":true}}"#
        );
        // Not streamed, or a route that reads usage anyway: fields pass as they were.
        let j = judge(RESPONSES, br#"{"model":"m2", "stream":true}"#).unwrap();
        assert_eq!(&j.body[..], br#"{"model":"m2","stream":true}"#);
    }

    #[test]
    fn what_serde_json_cannot_parse_is_refused_naming_the_problem() {
        assert!(err(CHAT, r#"{"messages":[{"content":"\ud800"}]}"#).contains("hex escape"));
        assert!(err(CHAT, r#"{"a":"\udc00"}"#).contains("not valid JSON"));
        assert!(err(CHAT, r#"{"a":1e400}"#).contains("not valid JSON"));
        assert!(err(CHAT, r#"{"a":1} x"#).contains("not valid JSON"));
        assert!(err(CHAT, "not json").contains("not valid JSON"));
        assert_eq!(err(CHAT, "[1,2]"), "the request body must be a JSON object");
        assert_eq!(
            err(CHAT, r#""s""#),
            "the request body must be a JSON object"
        );
        assert_eq!(
            err(CHAT, r#"{"stream":false,"stream":true}"#),
            "the request body has the field `stream` twice"
        );
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(200), "]".repeat(200));
        assert!(err(CHAT, &deep).contains("recursion limit"));
        let many: String = (0..200).map(|i| format!("\"k{i}\":0,")).collect();
        assert!(err(CHAT, &format!("{{{many}\"z\":0}}")).contains("more than 128"));
    }

    #[test]
    fn stream_must_be_a_boolean_and_background_is_refused() {
        for s in [r#""true""#, "1", "null", "{}", "[]"] {
            let e = err(CHAT, &format!(r#"{{"stream":{s}}}"#));
            assert!(e.contains("`stream` must be a boolean"), "{s}: {e}");
        }
        assert!(err(EMBEDDINGS, r#"{"stream":true}"#).contains("does not stream"));
        assert!(judge(EMBEDDINGS, br#"{"stream":false,"input":"x"}"#).is_ok());
        assert!(err(RESPONSES, r#"{"background":true}"#).contains("`background`"));
        assert!(judge(RESPONSES, br#"{"background":false}"#).is_ok());
        assert!(err(CHAT, r#"{"stream":true,"stream_options":3}"#).contains("`stream_options`"));
        assert!(err(CHAT, r#"{"model":3}"#).contains("`model` must be a string"));
        assert_eq!(
            judge(BodyRule::Empty, b"x").unwrap_err(),
            BodyError::Unexpected
        );
    }
}
