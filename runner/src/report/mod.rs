//! The report (handoff) contract of SPEC §2: the only data that passes from one round to the
//! next. Decoding is strict and total: any byte string either becomes a valid [`Report`] or a
//! [`ReportError`] naming the rule it broke; nothing panics and nothing is repaired.

pub mod decode;

use serde::{Deserialize, Serialize};

pub use decode::{decode, decode_value};

/// The default handoff cap, in bytes of compact JSON.
pub const DEFAULT_HANDOFF_CAP: usize = 16384;

/// Highest handoff cap a job may ask for (the deployment ceiling when none is configured).
pub const MAX_HANDOFF_CAP: usize = 1 << 20;

/// The five keys, in the order they are serialized.
pub const KEYS: [&str; 5] = ["status", "summary", "evidence", "nextSteps", "blocker"];

/// What a round says about the objective.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// More work remains; `nextSteps` says what.
    Continue,
    /// The worker claims the objective is met; `evidence` says why.
    Complete,
    /// The worker cannot go on; `blocker` says why.
    Blocked,
}

impl Status {
    /// The status as written in a report.
    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Continue => "continue",
            Status::Complete => "complete",
            Status::Blocked => "blocked",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A validated round report. Only [`decode`] makes one from untrusted bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The round's status.
    pub status: Status,
    /// What the round did, non-empty after trimming.
    pub summary: String,
    /// Checkable facts backing the status.
    pub evidence: Vec<String>,
    /// What the next round should do.
    #[serde(rename = "nextSteps")]
    pub next_steps: Vec<String>,
    /// Why the work cannot go on (empty unless blocked).
    pub blocker: String,
}

impl Report {
    /// The compact JSON form whose length is measured against the cap.
    pub fn to_compact_json(&self) -> String {
        // Serializing strings and arrays of strings cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Why a report was rejected. Every message names the key or rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// No report was produced at all.
    #[error("no report: `{file}` does not exist and no line of stdout is a JSON object")]
    Missing {
        /// The report file that was looked for.
        file: String,
    },
    /// The bytes are not JSON.
    #[error("report is not valid JSON: {message}")]
    NotJson {
        /// The parser's message.
        message: String,
    },
    /// The JSON is not an object.
    #[error("report must be a JSON object, found {found}")]
    NotObject {
        /// The JSON type found.
        found: &'static str,
    },
    /// A key appears twice.
    #[error("report has the key `{key}` twice")]
    DuplicateKey {
        /// The repeated key.
        key: String,
    },
    /// A required key is absent.
    #[error("report is missing the key `{key}`")]
    MissingKey {
        /// The absent key.
        key: &'static str,
    },
    /// A key outside the contract.
    #[error(
        "report has the unknown key `{key}` (allowed: status, summary, evidence, nextSteps, blocker)"
    )]
    UnknownKey {
        /// The extra key (bounded).
        key: String,
    },
    /// A value has the wrong JSON type.
    #[error("report key `{key}` must be {expected}, found {found}")]
    WrongType {
        /// The key.
        key: &'static str,
        /// The expected type.
        expected: &'static str,
        /// The type found.
        found: &'static str,
    },
    /// `status` is not one of the three values.
    #[error("report key `status` must be one of continue, complete, blocked, found `{found}`")]
    InvalidStatus {
        /// The value found (bounded).
        found: String,
    },
    /// `summary` is blank.
    #[error("report key `summary` must not be empty")]
    EmptySummary,
    /// An item of `evidence` or `nextSteps` is blank.
    #[error("report key `{key}` item {index} must not be empty")]
    EmptyItem {
        /// The array key.
        key: &'static str,
        /// The item's index.
        index: usize,
    },
    /// `blocker` has leading or trailing whitespace.
    #[error("report key `blocker` must equal its own trim")]
    UntrimmedBlocker,
    /// A status rule is broken.
    #[error("a `{status}` report {rule}")]
    StatusRule {
        /// The report's status.
        status: Status,
        /// The rule, worded as a requirement.
        rule: &'static str,
    },
    /// The compact serialization is over the cap.
    #[error("report is {size} bytes as compact JSON, over the handoff cap of {cap} bytes")]
    Oversize {
        /// Size of the compact JSON.
        size: usize,
        /// The cap.
        cap: usize,
    },
    /// The raw input is too large to even parse.
    #[error("report input is {size} bytes, far over the handoff cap of {cap} bytes")]
    InputTooLarge {
        /// Bytes seen (at least).
        size: usize,
        /// The cap.
        cap: usize,
    },
}

#[cfg(test)]
mod tests;
