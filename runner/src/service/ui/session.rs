//! The dashboard's browser sessions: a login with a token makes one, named by a random cookie
//! value of which only the SHA-256 is kept (with the token's hash, never the token, and a CSRF
//! secret for the session's forms). A session expires after [`SESSION_TTL`], ends at logout,
//! and ends with its token: every use looks the token up again by its hash, so a revoked
//! token's sessions stop at their next request. Sessions live in this process's memory: a
//! restart signs every browser out (each host of a fleet has its own).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use subtle::ConstantTimeEq;

use crate::service::tokens::{self, Caller, Tokens};

/// How long a session lasts from its login.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// The most sessions held at once; a login beyond it drops the oldest.
pub const MAX_SESSIONS: usize = 10_000;

/// The name of the session cookie.
pub const COOKIE: &str = "ralph_session";

#[derive(Debug, Clone)]
struct Session {
    token_hash: [u8; 32],
    csrf: String,
    made: Instant,
}

/// A signed-in browser: who, and the CSRF secret its forms carry.
#[derive(Debug, Clone)]
pub struct Signed {
    /// The token's name and scopes, as of now.
    pub caller: Caller,
    /// The value a form of this session must send back as `csrf`.
    pub csrf: String,
}

/// The sessions of this process.
#[derive(Debug, Default)]
pub struct Sessions {
    map: Mutex<HashMap<[u8; 32], Session>>,
}

impl Sessions {
    /// Signs `token` in: the new cookie value, or `None` when no token matches. The token
    /// itself is not kept.
    pub fn login(&self, tokens: &Tokens, token: &str) -> Option<(String, Signed)> {
        let caller = tokens.verify(token)?;
        let cookie = tokens::generate().ok()?;
        let csrf = tokens::generate().ok()?;
        let session = Session {
            token_hash: tokens::hash(token),
            csrf: csrf.clone(),
            made: Instant::now(),
        };
        let mut map = self.map.lock().ok()?;
        map.retain(|_, s| s.made.elapsed() < SESSION_TTL);
        if map.len() >= MAX_SESSIONS
            && let Some(oldest) = map.iter().min_by_key(|(_, s)| s.made).map(|(k, _)| *k)
        {
            map.remove(&oldest);
        }
        map.insert(tokens::hash(&cookie), session);
        Some((cookie, Signed { caller, csrf }))
    }

    /// The session a cookie value names, if it is live and its token still exists.
    pub fn check(&self, tokens: &Tokens, cookie: &str) -> Option<Signed> {
        let key = tokens::hash(cookie);
        let mut map = self.map.lock().ok()?;
        let session = map.get(&key)?.clone();
        let caller = (session.made.elapsed() < SESSION_TTL)
            .then(|| tokens.verify_hash(&session.token_hash))
            .flatten();
        match caller {
            Some(caller) => Some(Signed {
                caller,
                csrf: session.csrf,
            }),
            None => {
                map.remove(&key);
                None
            }
        }
    }

    /// Ends the session a cookie value names.
    pub fn logout(&self, cookie: &str) {
        if let Ok(mut map) = self.map.lock() {
            map.remove(&tokens::hash(cookie));
        }
    }

    /// How many sessions are held.
    pub fn len(&self) -> usize {
        self.map.lock().map_or(0, |m| m.len())
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether `given` is the session's CSRF value (constant time).
pub fn csrf_matches(expected: &str, given: &str) -> bool {
    expected.len() == given.len() && bool::from(expected.as_bytes().ct_eq(given.as_bytes()))
}

/// The value of the cookie `name` in a `Cookie` header.
pub fn cookie_value<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        (k == name).then_some(v.trim())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::scope::Scope;

    fn tokens_with_reader() -> (tempfile::TempDir, Tokens, String) {
        let dir = tempfile::tempdir().unwrap();
        let tokens =
            Tokens::load("first-token-0123456789", dir.path(), &Default::default()).unwrap();
        let reader = tokens.create("reader", &[Scope::Read]).unwrap();
        (dir, tokens, reader)
    }

    #[test]
    fn a_session_keeps_no_token_and_ends_with_its_token() {
        let (_d, tokens, reader) = tokens_with_reader();
        let sessions = Sessions::default();
        assert!(sessions.login(&tokens, "wrong-token-0000000000").is_none());
        let (cookie, signed) = sessions.login(&tokens, &reader).unwrap();
        assert_eq!(signed.caller.name, "reader");
        assert_ne!(cookie, reader);
        assert_eq!(cookie.len(), 64);
        let again = sessions.check(&tokens, &cookie).unwrap();
        assert_eq!(again.csrf, signed.csrf);
        assert_eq!(again.caller.scopes, vec![Scope::Read]);
        // Nothing held is the token or the cookie.
        let held = format!("{:?}", sessions.map.lock().unwrap());
        assert!(!held.contains(&reader) && !held.contains(&cookie));
        tokens.revoke("reader").unwrap();
        assert!(sessions.check(&tokens, &cookie).is_none());
        assert!(
            sessions.is_empty(),
            "the revoked token's session is dropped"
        );
    }

    #[test]
    fn logout_and_expiry_end_a_session() {
        let (_d, tokens, reader) = tokens_with_reader();
        let sessions = Sessions::default();
        let (cookie, _) = sessions.login(&tokens, &reader).unwrap();
        sessions.logout(&cookie);
        assert!(sessions.check(&tokens, &cookie).is_none());
        let (cookie, _) = sessions.login(&tokens, &reader).unwrap();
        for s in sessions.map.lock().unwrap().values_mut() {
            s.made = Instant::now().checked_sub(SESSION_TTL).unwrap();
        }
        assert!(sessions.check(&tokens, &cookie).is_none());
    }

    #[test]
    fn cookies_and_csrf() {
        assert_eq!(cookie_value("a=1; ralph_session=xyz", COOKIE), Some("xyz"));
        assert_eq!(cookie_value("ralph_sessionx=1", COOKIE), None);
        assert!(csrf_matches("abc", "abc"));
        assert!(!csrf_matches("abc", "abd"));
        assert!(!csrf_matches("abc", ""));
    }
}
