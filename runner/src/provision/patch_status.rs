//! What became of a job's `result.patch` (SPEC §11), as journalled in `result_written` and
//! shown in the job's result (`patch` in `GET /v1/jobs/{id}`): `written` (every change is in
//! it), `partial` (some paths could not be taken: each is named with its reason, the rest of
//! the work is in the patch) or `failed` (no patch could be built: why). The skipped paths are
//! agent-controlled names: kept escaped ([`escape_path`]) and bounded in count and bytes.

use serde::{Deserialize, Serialize};

use crate::util::text::{TRUNCATION_MARKER, bounded};

/// What the result patch holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PatchState {
    /// Every change of the workspace is in it.
    Written,
    /// Paths were skipped (named in `skipped`); everything else is in it.
    Partial,
    /// No patch could be built (`failure`, `error`).
    Failed,
}

impl PatchState {
    /// Its name.
    pub const fn as_str(self) -> &'static str {
        match self {
            PatchState::Written => "written",
            PatchState::Partial => "partial",
            PatchState::Failed => "failed",
        }
    }
}

/// Why no patch could be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PatchFailure {
    /// The runner's git ran out of its memory bound.
    OutOfMemory,
    /// The runner's git failed otherwise.
    GitFailed,
    /// The runner's repository beside the workspace is gone.
    RepositoryMissing,
    /// A file of the runner's could not be written or read.
    Io,
}

impl PatchFailure {
    /// Its name.
    pub const fn as_str(self) -> &'static str {
        match self {
            PatchFailure::OutOfMemory => "out_of_memory",
            PatchFailure::GitFailed => "git_failed",
            PatchFailure::RepositoryMissing => "repository_missing",
            PatchFailure::Io => "io",
        }
    }
}

/// Why a path of the workspace is not in the patch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// A path git refuses in an index: `.git` in any case or spelling at any depth (NTFS and
    /// HFS+ aliases too), `.gitmodules` as a link ([`super::git_path`]).
    GitPath,
    /// git could not add it (its message in `detail`).
    GitRefused,
    /// A file bigger than a file of a patch may be ([`super::stage::MAX_PATCH_FILE`]).
    TooLarge,
    /// A FIFO, socket or device: not a file a patch can hold.
    SpecialFile,
    /// The runner could not read it.
    Unreadable,
    /// A directory that is a git repository of its own (a patch cannot hold its files).
    NestedRepository,
}

impl SkipReason {
    /// Its name.
    pub const fn as_str(self) -> &'static str {
        match self {
            SkipReason::GitPath => "git_path",
            SkipReason::GitRefused => "git_refused",
            SkipReason::TooLarge => "too_large",
            SkipReason::SpecialFile => "special_file",
            SkipReason::Unreadable => "unreadable",
            SkipReason::NestedRepository => "nested_repository",
        }
    }

    /// What it means, for people.
    pub const fn explained(self) -> &'static str {
        match self {
            SkipReason::GitPath => "a path git refuses",
            SkipReason::GitRefused => "git could not add it",
            SkipReason::TooLarge => "larger than a file of a patch may be",
            SkipReason::SpecialFile => "not a regular file, link or directory",
            SkipReason::Unreadable => "unreadable to the runner",
            SkipReason::NestedRepository => "a git repository of its own",
        }
    }
}

/// One path left out of the patch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedPath {
    /// The path in the workspace, escaped ([`escape_path`]) and bounded.
    pub path: String,
    /// Why.
    pub reason: SkipReason,
    /// More about it (git's message, the size), bounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Skipped paths named in a `result_written`, at most (the rest are counted).
pub const SKIPPED_LISTED: usize = 64;

/// Bytes of the named skipped paths and their details, at most.
pub const SKIPPED_BYTES: usize = 8192;

/// Bytes of one escaped path, at most.
const PATH_BYTES: usize = 512;

/// Bytes of one detail, at most.
const DETAIL_BYTES: usize = 256;

/// The skipped paths of a result: the first ones named (within [`SKIPPED_LISTED`] and
/// [`SKIPPED_BYTES`]), all of them counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Skipped {
    /// The named ones, in the order they were found.
    pub listed: Vec<SkippedPath>,
    /// How many there were in all.
    pub total: u64,
    bytes: usize,
}

impl Skipped {
    /// Records `path` (raw bytes, as git lists it) as skipped for `reason`.
    pub fn add(&mut self, path: &[u8], reason: SkipReason, detail: Option<String>) {
        self.total += 1;
        let entry = SkippedPath {
            path: bounded(&escape_path(path), PATH_BYTES),
            reason,
            detail: detail.map(|d| bounded(&d, DETAIL_BYTES)),
        };
        let size = entry.path.len() + entry.detail.as_ref().map_or(0, String::len);
        if self.listed.len() < SKIPPED_LISTED && self.bytes + size <= SKIPPED_BYTES {
            self.bytes += size;
            self.listed.push(entry);
        }
    }

    /// Whether nothing was skipped.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }
}

/// A path's bytes as printable text: valid UTF-8 stays as it is but for `\` (shown `\\`),
/// control characters (`\n`, `\t`, `\r`, else `\xNN`) and the bidirectional and zero-width
/// format characters (`\u{200c}`), which are shown escaped; bytes that are not UTF-8 are shown
/// `\xNN`. Two different paths never look the same.
pub fn escape_path(path: &[u8]) -> String {
    let mut out = String::with_capacity(path.len());
    for chunk in path.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                c if c.is_control() => {
                    let code = u32::from(c);
                    if code <= 0xff {
                        out.push_str(&format!("\\x{code:02x}"));
                    } else {
                        out.push_str(&format!("\\u{{{code:x}}}"));
                    }
                }
                c if is_format(c) => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// Format characters that reorder or hide text on a terminal: zero-width ones, bidirectional
/// marks, embeddings, overrides and isolates, the byte-order mark.
fn is_format(c: char) -> bool {
    matches!(
        c,
        '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}'
            | '\u{feff}'
            | '\u{061c}'
    )
}

/// The patch as a job's result shows it (`patch` in `GET /v1/jobs/{id}`): the last
/// `result_written` of its journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PatchStatus {
    /// What the patch holds.
    pub state: PatchState,
    /// Files it changes.
    pub files: u64,
    /// Its bytes.
    pub bytes: u64,
    /// The first skipped paths (escaped), with their reasons.
    pub skipped: Vec<SkippedPath>,
    /// How many paths were skipped in all.
    pub skipped_total: u64,
    /// Why no patch could be built (`failed`).
    pub failure: Option<PatchFailure>,
    /// What failed: the patch (`failed`) or the push.
    pub error: Option<String>,
    /// The branch and commit pushed, if any.
    pub pushed: Option<String>,
}

impl PatchStatus {
    /// One line for people: `written (3 files, 812 bytes)`, `partial (3 files, 812 bytes; 2
    /// paths skipped: `.GIT/config` (git_path), …)`, `failed: <error>`.
    pub fn summary(&self) -> String {
        if self.state == PatchState::Failed {
            return format!(
                "failed{}: {}",
                self.failure
                    .map_or_else(String::new, |f| format!(" ({})", f.as_str())),
                self.error.as_deref().unwrap_or("no reason was recorded")
            );
        }
        let mut s = format!(
            "{} ({} file(s), {} bytes",
            self.state.as_str(),
            self.files,
            self.bytes
        );
        if self.skipped_total > 0 {
            s.push_str(&format!(
                "; {} path(s) skipped: {}",
                self.skipped_total,
                skipped_list(&self.skipped, self.skipped_total)
            ));
        }
        s.push(')');
        s
    }
}

/// `` `a` (git_path), `b` (too_large: 300 MiB) `` and, when not all are named, `and N more`.
pub fn skipped_list(listed: &[SkippedPath], total: u64) -> String {
    let mut parts: Vec<String> = listed
        .iter()
        .map(|p| match &p.detail {
            Some(d) => format!("`{}` ({}: {d})", p.path, p.reason.as_str()),
            None => format!("`{}` ({})", p.path, p.reason.as_str()),
        })
        .collect();
    let more = total.saturating_sub(listed.len() as u64);
    if more > 0 {
        parts.push(format!("and {more} more"));
    }
    let text = parts.join(", ");
    bounded(&text, SKIPPED_BYTES + TRUNCATION_MARKER.len() + 256)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_escaped_so_none_can_pass_for_another_or_move_a_terminal() {
        assert_eq!(escape_path(b"a/b.txt"), "a/b.txt");
        assert_eq!(escape_path("café".as_bytes()), "café");
        assert_eq!(escape_path(b"a\nb\tc\rd"), "a\\nb\\tc\\rd");
        assert_eq!(escape_path(b"\x1b[2J"), "\\x1b[2J");
        assert_eq!(escape_path(b"\xff\xfe"), "\\xff\\xfe");
        // A literal `\xff` is not the byte 0xff.
        assert_eq!(escape_path(b"\\xff"), "\\\\xff");
        assert_eq!(escape_path(".g\u{200c}it".as_bytes()), ".g\\u{200c}it");
        assert_eq!(escape_path("a\u{202e}b".as_bytes()), "a\\u{202e}b");
        assert_eq!(escape_path("\u{85}".as_bytes()), "\\x85");
    }

    #[test]
    fn skipped_paths_are_bounded_in_count_and_bytes_but_all_counted() {
        let mut s = Skipped::default();
        for i in 0..1000 {
            s.add(format!("f{i}").as_bytes(), SkipReason::TooLarge, None);
        }
        assert_eq!(s.total, 1000);
        assert_eq!(s.listed.len(), SKIPPED_LISTED);
        let mut long = Skipped::default();
        for _ in 0..100 {
            long.add(&[b'x'; 4096], SkipReason::GitPath, Some("d".repeat(4096)));
        }
        assert_eq!(long.total, 100);
        let bytes: usize = long
            .listed
            .iter()
            .map(|p| p.path.len() + p.detail.as_ref().map_or(0, String::len))
            .sum();
        assert!(bytes <= SKIPPED_BYTES, "{bytes}");
        assert!(!long.listed.is_empty());
        assert!(long.listed.iter().all(|p| p.path.len() <= PATH_BYTES));
        let text = skipped_list(&long.listed, long.total);
        assert!(
            text.ends_with("more") || text.ends_with(TRUNCATION_MARKER),
            "{text}"
        );
    }
}
