//! The `[tokens.NAME]` tables of the service configuration: a token defined by its SHA-256
//! (`sha256`, `scopes`), or the policy of a token made with `ralph token create` (no `sha256`);
//! either way its rate limits (`requests_per_minute`, `jobs_per_minute`) and its `[limits]`
//! overrides (`[tokens.NAME.limits]`, keys over the service's `[limits]`).

use std::collections::BTreeMap;

use serde::Deserialize;

use super::config::Limits;
use super::scope::Scope;

/// One `[tokens.NAME]` table.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// The token's SHA-256, in hex (`printf %s "$TOKEN" | sha256sum`): the token is defined here.
    pub sha256: Option<String>,
    /// What a token defined here may do.
    #[serde(default)]
    pub scopes: Vec<Scope>,
    /// Requests per minute (absent: no limit); over it, 429 with `Retry-After`.
    pub requests_per_minute: Option<u32>,
    /// Jobs submitted per minute (absent: no limit); over it, 429 with `Retry-After`.
    pub jobs_per_minute: Option<u32>,
    /// `[limits]` keys this token's jobs get instead of the service's.
    pub limits: Option<LimitsOverride>,
}

/// A partial `[limits]` table.
#[derive(Clone, Debug, Deserialize)]
#[serde(transparent)]
pub struct LimitsOverride(pub toml::Table);

impl PartialEq for LimitsOverride {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl Eq for LimitsOverride {}

/// Whether `name` may name a token: 1 to 64 of `a-z 0-9 - _ .`, starting with a letter or digit.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b))
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// A 64-hex-digit SHA-256.
pub fn parse_sha256(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim();
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Checks the `[tokens]` tables and resolves each one's limits (its overrides over the service's
/// `[limits]`, as written in `text`). Errors name the key.
pub fn resolve(
    text: &str,
    tokens: &BTreeMap<String, TokenConfig>,
) -> Result<BTreeMap<String, Limits>, String> {
    let raw: toml::Table = toml::from_str(text).map_err(|e| e.message().to_owned())?;
    let base = raw
        .get("limits")
        .and_then(toml::Value::as_table)
        .cloned()
        .unwrap_or_default();
    let mut out = BTreeMap::new();
    for (name, t) in tokens {
        let key = format!("tokens.{name}");
        if !valid_name(name) {
            return Err(format!(
                "`{key}`: a token name is 1 to 64 of a-z, 0-9, `-`, `_`, `.`"
            ));
        }
        if let Some(h) = &t.sha256 {
            if parse_sha256(h).is_none() {
                return Err(format!("`{key}.sha256` must be 64 hex digits (a SHA-256)"));
            }
            if t.scopes.is_empty() {
                return Err(format!(
                    "`{key}.scopes` must name at least one of read, submit, cancel, admin"
                ));
            }
        } else if !t.scopes.is_empty() {
            return Err(format!(
                "`{key}.scopes` is set without `sha256`: a token made with `ralph token create` keeps its own scopes"
            ));
        }
        for (k, v) in [
            ("requests_per_minute", t.requests_per_minute),
            ("jobs_per_minute", t.jobs_per_minute),
        ] {
            if v == Some(0) {
                return Err(format!("`{key}.{k}` must be at least 1"));
            }
        }
        if let Some(LimitsOverride(o)) = &t.limits {
            let mut merged = base.clone();
            for (k, v) in o {
                merged.insert(k.clone(), v.clone());
            }
            let limits = Limits::deserialize(toml::Value::Table(merged))
                .map_err(|e| format!("`{key}.limits`: {}", e.message()))?;
            out.insert(name.clone(), limits);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_hashes() {
        assert!(valid_name("ci-runner_1.x"));
        assert!(!valid_name("CI"));
        assert!(!valid_name("-x"));
        assert!(!valid_name(""));
        assert!(parse_sha256(&"ab".repeat(32)).is_some());
        assert!(parse_sha256("abc").is_none());
        assert!(parse_sha256(&"zz".repeat(32)).is_none());
    }
}
