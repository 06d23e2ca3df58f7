//! The named API tokens: the generated first token (`<state-dir>/token`, named `admin`), those
//! of the configuration (`[tokens.NAME] sha256 = …`), and those made with `ralph token create`
//! (kept hashed in `<state-dir>/tokens.json`, mode 0600). Only SHA-256 hashes are held; a given
//! token is compared with every one in constant time.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use super::scope::Scope;
use super::token_config::{TokenConfig, parse_sha256, valid_name};

/// The name of the generated first token.
pub const FIRST_TOKEN: &str = "admin";

/// The file of the tokens made with `ralph token create`.
pub const TOKENS_FILE: &str = "tokens.json";

/// A token operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum TokensError {
    /// The tokens file could not be read or written.
    #[error("failed to {action} `{path}`: {message}")]
    File {
        /// read or write.
        action: &'static str,
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// The name is taken or invalid, or the token cannot be changed.
    #[error("{0}")]
    Refused(String),
    /// No token has that name.
    #[error("no token is named `{0}`")]
    Unknown(String),
}

/// Where a token comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The generated first token (`<state-dir>/token`).
    Generated,
    /// `[tokens.NAME]` in the configuration.
    Config,
    /// `ralph token create`.
    Created,
}

/// One token as stored in the tokens file.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoredToken {
    /// Its name.
    pub name: String,
    /// SHA-256 of the token, hex.
    pub sha256: String,
    /// What it may do.
    pub scopes: Vec<Scope>,
    /// When it was made (RFC 3339).
    pub created_at: String,
}

#[derive(Clone, Debug)]
struct Entry {
    name: String,
    hash: [u8; 32],
    scopes: Vec<Scope>,
    source: Source,
    created_at: Option<String>,
}

/// Who called: the token's name and scopes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// The token's name.
    pub name: String,
    /// Its scopes.
    pub scopes: Vec<Scope>,
}

/// A token as listed (never the token itself).
#[derive(Clone, Debug, Serialize)]
pub struct Listed {
    /// Its name.
    pub name: String,
    /// Its scopes.
    pub scopes: Vec<Scope>,
    /// Where it comes from.
    pub source: Source,
    /// When it was made, for created tokens.
    pub created_at: Option<String>,
}

/// The SHA-256 of a token.
pub fn hash(token: &str) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A new random token: 32 bytes from the OS, in hex.
pub fn generate() -> Result<String, std::io::Error> {
    use std::io::Read;
    let mut raw = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut raw)?;
    Ok(hex(&raw))
}

/// The tokens the service accepts.
#[derive(Debug)]
pub struct Tokens {
    file: PathBuf,
    first: Entry,
    config: RwLock<Vec<Entry>>,
    created: RwLock<Vec<StoredToken>>,
}

fn config_entries(config: &std::collections::BTreeMap<String, TokenConfig>) -> Vec<Entry> {
    config
        .iter()
        .filter_map(|(name, t)| {
            Some(Entry {
                name: name.clone(),
                hash: parse_sha256(t.sha256.as_deref()?)?,
                scopes: t.scopes.clone(),
                source: Source::Config,
                created_at: None,
            })
        })
        .collect()
}

impl Tokens {
    /// The generated token `first`, the configuration's, and those of `<state_dir>/tokens.json`.
    pub fn load(
        first: &str,
        state_dir: &Path,
        config: &std::collections::BTreeMap<String, TokenConfig>,
    ) -> Result<Self, TokensError> {
        let file = state_dir.join(TOKENS_FILE);
        let created = match std::fs::read_to_string(&file) {
            Ok(text) => {
                serde_json::from_str::<Vec<StoredToken>>(&text).map_err(|e| TokensError::File {
                    action: "read",
                    path: file.display().to_string(),
                    message: e.to_string(),
                })?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                return Err(TokensError::File {
                    action: "read",
                    path: file.display().to_string(),
                    message: e.to_string(),
                });
            }
        };
        if config.contains_key(FIRST_TOKEN) && config[FIRST_TOKEN].sha256.is_some() {
            return Err(TokensError::Refused(format!(
                "`tokens.{FIRST_TOKEN}`: `{FIRST_TOKEN}` is the generated token's name"
            )));
        }
        let tokens = Self {
            file,
            first: Entry {
                name: FIRST_TOKEN.to_owned(),
                hash: hash(first),
                scopes: vec![Scope::Admin],
                source: Source::Generated,
                created_at: None,
            },
            config: RwLock::new(config_entries(config)),
            created: RwLock::new(created),
        };
        Ok(tokens)
    }

    /// Takes the configuration's tokens again (SIGHUP).
    pub fn set_config(&self, config: &std::collections::BTreeMap<String, TokenConfig>) {
        if let Ok(mut c) = self.config.write() {
            *c = config_entries(config);
        }
    }

    fn all(&self) -> Vec<Entry> {
        let mut all = vec![self.first.clone()];
        if let Ok(c) = self.config.read() {
            all.extend(c.iter().cloned());
        }
        if let Ok(c) = self.created.read() {
            all.extend(c.iter().filter_map(|t| {
                Some(Entry {
                    name: t.name.clone(),
                    hash: parse_sha256(&t.sha256)?,
                    scopes: t.scopes.clone(),
                    source: Source::Created,
                    created_at: Some(t.created_at.clone()),
                })
            }));
        }
        all
    }

    /// The caller `given` authenticates, if any. Every token's hash is compared, in constant time.
    pub fn verify(&self, given: &str) -> Option<Caller> {
        self.verify_hash(&hash(given))
    }

    /// The caller whose token has the SHA-256 `h` (a dashboard session keeps only that), if
    /// the token still exists. Every token's hash is compared, in constant time.
    pub fn verify_hash(&self, h: &[u8; 32]) -> Option<Caller> {
        let mut found = None;
        for e in self.all() {
            if bool::from(e.hash.ct_eq(h)) && found.is_none() {
                found = Some(Caller {
                    name: e.name,
                    scopes: e.scopes,
                });
            }
        }
        found
    }

    /// Every token, without secrets.
    pub fn list(&self) -> Vec<Listed> {
        self.all()
            .into_iter()
            .map(|e| Listed {
                name: e.name,
                scopes: e.scopes,
                source: e.source,
                created_at: e.created_at,
            })
            .collect()
    }

    /// Makes a token named `name`; returns it (the only time it is shown).
    pub fn create(&self, name: &str, scopes: &[Scope]) -> Result<String, TokensError> {
        if !valid_name(name) {
            return Err(TokensError::Refused(format!(
                "`{name}` is not a token name: 1 to 64 of a-z, 0-9, `-`, `_`, `.`"
            )));
        }
        if scopes.is_empty() {
            return Err(TokensError::Refused(
                "a token needs at least one scope (read, submit, cancel, admin)".into(),
            ));
        }
        if self.all().iter().any(|e| e.name == name) {
            return Err(TokensError::Refused(format!(
                "a token named `{name}` exists already (revoke it first)"
            )));
        }
        let token = generate().map_err(|e| TokensError::File {
            action: "read",
            path: "/dev/urandom".into(),
            message: e.to_string(),
        })?;
        let mut scopes = scopes.to_vec();
        scopes.sort();
        scopes.dedup();
        let mut created = self
            .created
            .write()
            .map_err(|_| TokensError::Refused("the token table is poisoned".into()))?;
        let mut next = created.clone();
        next.push(StoredToken {
            name: name.to_owned(),
            sha256: hex(&hash(&token)),
            scopes,
            created_at: crate::store::now_rfc3339(),
        });
        self.save(&next)?;
        *created = next;
        Ok(token)
    }

    /// Revokes the created token `name`.
    pub fn revoke(&self, name: &str) -> Result<(), TokensError> {
        if name == FIRST_TOKEN {
            return Err(TokensError::Refused(format!(
                "`{FIRST_TOKEN}` is the generated token: replace its file (`<state-dir>/token`) and restart to change it"
            )));
        }
        if self
            .config
            .read()
            .is_ok_and(|c| c.iter().any(|e| e.name == name))
        {
            return Err(TokensError::Refused(format!(
                "`{name}` is defined in the configuration (`[tokens.{name}]`): remove it there and reload"
            )));
        }
        let mut created = self
            .created
            .write()
            .map_err(|_| TokensError::Refused("the token table is poisoned".into()))?;
        if !created.iter().any(|t| t.name == name) {
            return Err(TokensError::Unknown(name.to_owned()));
        }
        let next: Vec<StoredToken> = created.iter().filter(|t| t.name != name).cloned().collect();
        self.save(&next)?;
        *created = next;
        Ok(())
    }

    /// Writes the tokens file whole (mode 0600, replaced atomically).
    fn save(&self, tokens: &[StoredToken]) -> Result<(), TokensError> {
        use std::os::unix::fs::PermissionsExt;
        let fail = |e: &dyn std::fmt::Display| TokensError::File {
            action: "write",
            path: self.file.display().to_string(),
            message: e.to_string(),
        };
        let dir = self.file.parent().unwrap_or(Path::new("."));
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| fail(&e))?;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| fail(&e))?;
        let text = serde_json::to_string_pretty(tokens).map_err(|e| fail(&e))?;
        tmp.write_all(text.as_bytes())
            .and_then(|()| tmp.as_file().sync_all())
            .map_err(|e| fail(&e))?;
        tmp.persist(&self.file).map_err(|e| fail(&e.error))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_tokens_are_stored_hashed_and_revocable() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let t = Tokens::load("first-token-0123456789", dir.path(), &Default::default()).unwrap();
        assert_eq!(
            t.verify("first-token-0123456789").unwrap().name,
            FIRST_TOKEN
        );
        let ci = t.create("ci", &[Scope::Submit, Scope::Read]).unwrap();
        let text = std::fs::read_to_string(dir.path().join(TOKENS_FILE)).unwrap();
        assert!(!text.contains(&ci), "the token itself is not stored");
        assert_eq!(
            std::fs::metadata(dir.path().join(TOKENS_FILE))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o600
        );
        let again =
            Tokens::load("first-token-0123456789", dir.path(), &Default::default()).unwrap();
        let c = again.verify(&ci).unwrap();
        assert_eq!(c.name, "ci");
        assert_eq!(c.scopes, vec![Scope::Read, Scope::Submit]);
        assert!(again.create("ci", &[Scope::Read]).is_err());
        assert!(again.revoke(FIRST_TOKEN).is_err());
        again.revoke("ci").unwrap();
        assert!(again.verify(&ci).is_none());
        assert!(matches!(again.revoke("ci"), Err(TokensError::Unknown(_))));
        assert!(again.verify("wrong").is_none());
    }
}
