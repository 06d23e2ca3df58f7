//! The syscall allow-list of the confined modes (`policies/syscalls-allowed.toml`, embedded):
//! the x86_64 syscalls a read-only or workspace-write round may make at all. Anything not listed
//! answers ENOSYS natively ([`crate::native::seccomp`]); the docker profile is built from the
//! same list ([`crate::docker::seccomp`]).

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use serde::Deserialize;

use super::syscall_table;

/// The source of the embedded list (its JSON is what runs; a test checks they agree).
#[cfg(test)]
const ALLOWED: &str = include_str!("../../../policies/syscalls-allowed.toml");

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    allow: Vec<String>,
}

/// The allowed syscalls: (name, x86_64 number), sorted by number.
pub type Allowed = Vec<(String, i64)>;

/// The embedded allow-list as JSON, converted from its TOML at build time (`build.rs`).
const ALLOWED_JSON: &str = include_str!(concat!(env!("OUT_DIR"), "/syscalls-allowed.json"));

/// Parses an allow-list file's text: every name must be a known x86_64 syscall, listed once.
pub fn parse(text: &str) -> Result<Allowed, String> {
    let file: File = toml::from_str(text)
        .map_err(|e| format!("syscalls-allowed.toml: {}", e.to_string().trim_end()))?;
    checked(file)
}

/// Like [`parse`], from the JSON the build made of the embedded file.
fn parse_json(text: &str) -> Result<Allowed, String> {
    let file: File =
        serde_json::from_str(text).map_err(|e| format!("syscalls-allowed.toml (embedded): {e}"))?;
    checked(file)
}

/// Every name a known x86_64 syscall, listed once: (name, number), sorted by number.
fn checked(file: File) -> Result<Allowed, String> {
    // Looked up by name in a map of the table (a scan of the table per name, and of the names
    // so far for duplicates, were ~120,000 string compares at every start).
    let table: HashMap<&str, i64> = syscall_table::X86_64.iter().copied().collect();
    let mut seen: HashSet<String> = HashSet::with_capacity(file.allow.len());
    let mut out: Allowed = Vec::with_capacity(file.allow.len());
    for name in file.allow {
        let Some(&nr) = table.get(name.as_str()) else {
            return Err(format!(
                "syscalls-allowed.toml: `allow`: `{name}` is not an x86_64 syscall"
            ));
        };
        if !seen.insert(name.clone()) {
            return Err(format!(
                "syscalls-allowed.toml: `allow`: `{name}` is listed twice"
            ));
        }
        out.push((name, nr));
    }
    out.sort_by_key(|(_, nr)| *nr);
    Ok(out)
}

/// The embedded allow-list.
pub fn embedded() -> Result<&'static Allowed, String> {
    static LIST: OnceLock<Result<Allowed, String>> = OnceLock::new();
    LIST.get_or_init(|| parse_json(ALLOWED_JSON))
        .as_ref()
        .map_err(Clone::clone)
}

/// The allowed numbers as closed ranges `(first, last)`, ascending.
pub fn ranges(allowed: &[(String, i64)]) -> Vec<(i64, i64)> {
    let mut nrs: Vec<i64> = allowed.iter().map(|(_, nr)| *nr).collect();
    nrs.sort_unstable();
    nrs.dedup();
    let mut out: Vec<(i64, i64)> = Vec::new();
    for nr in nrs {
        match out.last_mut() {
            Some((_, last)) if *last + 1 == nr => *last = nr,
            _ => out.push((nr, nr)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON the build embeds is exactly the TOML file.
    #[test]
    fn the_embedded_json_is_the_toml() {
        assert_eq!(parse_json(ALLOWED_JSON).unwrap(), parse(ALLOWED).unwrap());
    }

    #[test]
    fn the_embedded_list_parses_and_leaves_out_what_docker_refuses() {
        let list = embedded().unwrap();
        let has = |n: &str| list.iter().any(|(name, _)| name == n);
        assert!(has("read") && has("execve") && has("clone") && has("openat"));
        for refused in [
            "move_pages",
            "migrate_pages",
            "mbind",
            "set_mempolicy",
            "get_mempolicy",
            "kcmp",
            "unshare",
            "setns",
            "mount",
            "bpf",
            "ptrace",
            "clone3",
            "pidfd_getfd",
            "process_madvise",
            "perf_event_open",
            "open_by_handle_at",
        ] {
            assert!(!has(refused), "{refused} is allowed");
        }
    }

    #[test]
    fn bad_lists_are_refused_naming_the_entry() {
        let e = parse("allow = [\"read\", \"nope\"]").unwrap_err();
        assert!(e.contains("`nope`"), "{e}");
        let e = parse("allow = [\"read\", \"read\"]").unwrap_err();
        assert!(e.contains("twice"), "{e}");
        assert!(parse("allow = []\nextra = 1").is_err());
    }

    #[test]
    fn ranges_merge_neighbours() {
        let l = |v: &[i64]| v.iter().map(|n| (String::new(), *n)).collect::<Vec<_>>();
        assert_eq!(ranges(&l(&[3, 0, 1, 2, 5, 7, 8])), [(0, 3), (5, 5), (7, 8)]);
        assert!(ranges(&l(&[])).is_empty());
    }
}
