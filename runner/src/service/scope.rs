//! What a token may do: `read` (list and show jobs, their journal, logs, metrics), `submit`
//! (queue jobs, upload their trees), `cancel` (cancel and resume jobs), `admin` (everything, and the tokens), and
//! which scope each API call needs.

use serde::{Deserialize, Serialize};

/// A token's permission.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Read jobs, journals, logs and metrics.
    Read,
    /// Submit jobs.
    Submit,
    /// Cancel and resume jobs.
    Cancel,
    /// Everything, including token management.
    Admin,
}

impl Scope {
    /// Every scope, in order.
    pub const ALL: [Scope; 4] = [Scope::Read, Scope::Submit, Scope::Cancel, Scope::Admin];

    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Submit => "submit",
            Scope::Cancel => "cancel",
            Scope::Admin => "admin",
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Scope {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Scope::ALL
            .into_iter()
            .find(|x| x.as_str() == s)
            .ok_or_else(|| format!("`{s}` is not a scope (read, submit, cancel, admin)"))
    }
}

/// Whether `held` allows what `needed` asks (`admin` allows everything).
pub fn allows(held: &[Scope], needed: Scope) -> bool {
    held.contains(&Scope::Admin) || held.contains(&needed)
}

/// The scope an API call needs. Fail-closed: a method or path not listed here (one a later
/// route adds without a rule, or one no route serves) needs `admin`, so a new endpoint is never
/// open to every token by default. `path` may be written with or without its `/v1` prefix (a
/// nested router sees it without).
pub fn needed(method: &axum::http::Method, path: &str) -> Scope {
    use axum::http::Method;
    let mut segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    if segs.first() == Some(&"v1") {
        segs.remove(0);
    }
    match (method, segs.as_slice()) {
        (&Method::GET | &Method::HEAD, ["metrics"]) => Scope::Read,
        (&Method::POST, ["jobs"] | ["uploads"]) => Scope::Submit,
        (&Method::GET | &Method::HEAD, ["limits"]) => Scope::Submit,
        (&Method::POST, ["jobs", _, "cancel" | "resume"]) => Scope::Cancel,
        (&Method::GET | &Method::HEAD, ["jobs", ..]) => Scope::Read,
        (&Method::GET | &Method::HEAD, ["batches", _]) => Scope::Read,
        // A retry queues new jobs.
        (&Method::POST, ["batches", _, "retry"]) => Scope::Submit,
        _ => Scope::Admin,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    #[test]
    fn each_call_needs_its_scope() {
        assert_eq!(needed(&Method::POST, "/v1/jobs"), Scope::Submit);
        assert_eq!(needed(&Method::POST, "/v1/uploads"), Scope::Submit);
        assert_eq!(needed(&Method::GET, "/v1/limits"), Scope::Submit);
        assert_eq!(needed(&Method::GET, "/v1/uploads"), Scope::Admin);
        assert_eq!(needed(&Method::GET, "/v1/jobs"), Scope::Read);
        assert_eq!(needed(&Method::GET, "/v1/jobs/x/events"), Scope::Read);
        assert_eq!(needed(&Method::POST, "/v1/jobs/x/cancel"), Scope::Cancel);
        assert_eq!(needed(&Method::POST, "/v1/jobs/x/resume"), Scope::Cancel);
        assert_eq!(needed(&Method::GET, "/v1/tokens"), Scope::Admin);
        assert_eq!(needed(&Method::POST, "/jobs"), Scope::Submit);
        assert_eq!(needed(&Method::GET, "/metrics"), Scope::Read);
        assert_eq!(needed(&Method::GET, "/v1/nope"), Scope::Admin);
        assert_eq!(needed(&Method::DELETE, "/v1/jobs/x"), Scope::Admin);
        assert_eq!(needed(&Method::PUT, "/v1/jobs"), Scope::Admin);
        assert!(allows(&[Scope::Admin], Scope::Submit));
        assert!(!allows(&[Scope::Read], Scope::Submit));
        assert_eq!("cancel".parse::<Scope>(), Ok(Scope::Cancel));
        assert!("root".parse::<Scope>().is_err());
    }
}
