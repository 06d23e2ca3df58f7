//! Reads chosen top-level members (`model`, `usage`) of a JSON response body as it passes, in
//! bounded memory: the body is never kept whole. An embeddings response is mostly floats and
//! can be far larger than any buffer worth keeping; its `usage` comes last.
//!
//! The scanner tracks string and escape state and the nesting depth; at depth 1 it reads each
//! key and, for a wanted one, copies the value's bytes (up to [`MAX_MEMBER`]) until the value
//! ends. It does not validate the JSON: the captured members are parsed afterwards, and a body
//! that is not an object yields nothing.

/// Largest captured member; a bigger one is dropped.
pub const MAX_MEMBER: usize = 64 << 10;
/// Longest top-level key compared.
const MAX_KEY: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Before the top-level `{`.
    Start,
    /// Inside the top-level object, expecting a key (or `}`).
    Key,
    /// Reading a top-level key.
    InKey { escape: bool },
    /// After a key, before `:`.
    Colon,
    /// After `:`, before the value starts.
    BeforeValue,
    /// In a value (`depth` counts open brackets inside it).
    Value {
        depth: u32,
        string: bool,
        escape: bool,
    },
    /// In a scalar value at depth 1 (not a string): ends at `,` or `}`.
    Scalar,
    /// The top-level object ended, or the body is not an object.
    Done,
}

/// The scanner.
#[derive(Debug)]
pub struct TopLevelScan {
    wanted: &'static [&'static str],
    state: State,
    key: Vec<u8>,
    capturing: Option<Vec<u8>>,
    found: Vec<(&'static str, Vec<u8>)>,
}

impl TopLevelScan {
    /// A scanner for the members named `wanted`.
    pub fn new(wanted: &'static [&'static str]) -> Self {
        Self {
            wanted,
            state: State::Start,
            key: Vec::new(),
            capturing: None,
            found: Vec::new(),
        }
    }

    fn begin_value(&mut self) {
        let key = std::mem::take(&mut self.key);
        self.capturing = self
            .wanted
            .iter()
            .any(|w| w.as_bytes() == key.as_slice())
            .then(Vec::new);
        self.key = key;
    }

    fn capture(&mut self, b: u8) {
        if let Some(c) = &mut self.capturing {
            if c.len() < MAX_MEMBER {
                c.push(b);
            } else {
                self.capturing = None;
                self.key.clear();
            }
        }
    }

    fn end_value(&mut self) {
        if let Some(c) = self.capturing.take() {
            if let Some(name) = self.wanted.iter().find(|w| w.as_bytes() == self.key) {
                self.found.retain(|(n, _)| n != name);
                self.found.push((name, c));
            }
        }
        self.key.clear();
    }

    /// Feeds the next bytes.
    pub fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.step(b);
            if self.state == State::Done {
                return;
            }
        }
    }

    fn step(&mut self, b: u8) {
        let ws = matches!(b, b' ' | b'\t' | b'\n' | b'\r');
        self.state = match self.state {
            State::Start if ws => State::Start,
            State::Start if b == b'{' => State::Key,
            State::Start | State::Done => State::Done,
            State::Key if ws || b == b',' => State::Key,
            State::Key if b == b'"' => {
                self.key.clear();
                State::InKey { escape: false }
            }
            State::Key => State::Done,
            State::InKey { escape: true } => {
                if self.key.len() < MAX_KEY {
                    self.key.push(b);
                }
                State::InKey { escape: false }
            }
            State::InKey { escape: false } => match b {
                b'"' => State::Colon,
                b'\\' => {
                    // An escaped key never matches a plain name: mark it.
                    self.key.push(0);
                    State::InKey { escape: true }
                }
                _ => {
                    if self.key.len() < MAX_KEY {
                        self.key.push(b);
                    } else {
                        self.key.push(0);
                    }
                    State::InKey { escape: false }
                }
            },
            State::Colon if ws => State::Colon,
            State::Colon if b == b':' => State::BeforeValue,
            State::Colon => State::Done,
            State::BeforeValue if ws => State::BeforeValue,
            State::BeforeValue => {
                self.begin_value();
                self.capture(b);
                match b {
                    b'"' => State::Value {
                        depth: 0,
                        string: true,
                        escape: false,
                    },
                    b'{' | b'[' => State::Value {
                        depth: 1,
                        string: false,
                        escape: false,
                    },
                    _ => State::Scalar,
                }
            }
            State::Scalar => match b {
                b',' => {
                    self.end_value();
                    State::Key
                }
                b'}' => {
                    self.end_value();
                    State::Done
                }
                _ => {
                    if !ws {
                        self.capture(b);
                    }
                    State::Scalar
                }
            },
            State::Value {
                depth,
                string,
                escape,
            } => {
                self.capture(b);
                if string {
                    match (escape, b) {
                        (true, _) => State::Value {
                            depth,
                            string,
                            escape: false,
                        },
                        (false, b'\\') => State::Value {
                            depth,
                            string,
                            escape: true,
                        },
                        (false, b'"') if depth == 0 => {
                            self.end_value();
                            State::Key
                        }
                        (false, b'"') => State::Value {
                            depth,
                            string: false,
                            escape: false,
                        },
                        _ => State::Value {
                            depth,
                            string,
                            escape,
                        },
                    }
                } else {
                    match b {
                        b'"' => State::Value {
                            depth,
                            string: true,
                            escape: false,
                        },
                        b'{' | b'[' => State::Value {
                            depth: depth.saturating_add(1),
                            string,
                            escape,
                        },
                        b'}' | b']' if depth <= 1 => {
                            self.end_value();
                            State::Key
                        }
                        b'}' | b']' => State::Value {
                            depth: depth - 1,
                            string,
                            escape,
                        },
                        _ => State::Value {
                            depth,
                            string,
                            escape,
                        },
                    }
                }
            }
        };
    }

    /// Ends the body: the members found, as JSON text.
    pub fn finish(mut self) -> Vec<(&'static str, Vec<u8>)> {
        if self.state == State::Scalar {
            self.end_value();
        }
        self.found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(chunks: &[&[u8]]) -> Vec<(&'static str, String)> {
        let mut s = TopLevelScan::new(&["model", "usage"]);
        for c in chunks {
            s.feed(c);
        }
        s.finish()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8(v).unwrap()))
            .collect()
    }

    #[test]
    fn top_level_members_are_found_across_chunks_and_nested_ones_ignored() {
        let body = br#"{"object":"list","data":[{"embedding":[0.1,-2e-3],"usage":{"x":1}}],
            "model" : "text-embedding-3-small", "note":"a \"usage\": {} }",
            "usage":{"prompt_tokens":8,"total_tokens":8}}"#;
        for split in [1, 3, 7, body.len()] {
            let chunks: Vec<&[u8]> = body.chunks(split).collect();
            assert_eq!(
                scan(&chunks),
                vec![
                    ("model", r#""text-embedding-3-small""#.to_owned()),
                    (
                        "usage",
                        r#"{"prompt_tokens":8,"total_tokens":8}"#.to_owned()
                    ),
                ],
                "split {split}"
            );
        }
    }

    #[test]
    fn scalars_escaped_keys_and_non_objects() {
        assert_eq!(
            scan(&[br#"{"usage":null,"model":"m"}"#]),
            vec![("usage", "null".to_owned()), ("model", r#""m""#.to_owned())]
        );
        assert_eq!(scan(&[br#"{"us\u0061ge":{"a":1}}"#]), vec![]);
        assert_eq!(scan(&[b"[1,2]"]), vec![]);
        assert_eq!(scan(&[b"not json"]), vec![]);
        let big = format!(
            r#"{{"usage":"{}","model":"m"}}"#,
            "x".repeat(MAX_MEMBER + 1)
        );
        assert_eq!(
            scan(&[big.as_bytes()]),
            vec![("model", r#""m""#.to_owned())]
        );
    }
}
