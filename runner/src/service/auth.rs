//! The API token: generated at first start into a file with mode 0600 (or given by the
//! operator), and compared in constant time.

use std::io::{Read, Write};
use std::path::Path;

/// A token that could not be loaded or created.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file exists but cannot be used.
    #[error("failed to read the token `{path}`: {message}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// A new token could not be written.
    #[error("failed to create the token `{path}`: {source}")]
    Create {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Reads the token at `path`, creating a random one (mode 0600) if the file does not exist.
pub fn load_or_create(path: &Path) -> Result<String, TokenError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let token = text.trim().to_owned();
            if token.len() < 16 {
                return Err(TokenError::Read {
                    path: path.display().to_string(),
                    message: "the token is shorter than 16 characters".into(),
                });
            }
            let mode = std::fs::metadata(path)
                .map(|m| m.permissions().mode() & 0o077)
                .unwrap_or(0);
            if mode != 0 {
                return Err(TokenError::Read {
                    path: path.display().to_string(),
                    message: format!(
                        "the file is readable by group or others (mode {:o}); chmod 600 it",
                        mode
                    ),
                });
            }
            Ok(token)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let create = |source| TokenError::Create {
                path: path.display().to_string(),
                source,
            };
            let mut raw = [0u8; 32];
            std::fs::File::open("/dev/urandom")
                .and_then(|mut f| f.read_exact(&mut raw))
                .map_err(create)?;
            let token: String = raw.iter().map(|b| format!("{b:02x}")).collect();
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)
                .map_err(create)?;
            f.write_all(token.as_bytes())
                .and_then(|()| f.write_all(b"\n"))
                .and_then(|()| f.sync_all())
                .map_err(create)?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(create)?;
            Ok(token)
        }
        Err(e) => Err(TokenError::Read {
            path: path.display().to_string(),
            message: e.to_string(),
        }),
    }
}

/// Constant-time comparison (in the length of `expected`).
pub fn matches(expected: &str, given: &str) -> bool {
    let (a, b) = (expected.as_bytes(), given.as_bytes());
    let mut diff = u8::from(a.len() != b.len());
    for (i, x) in a.iter().enumerate() {
        diff |= x ^ b.get(i).copied().unwrap_or(0);
    }
    diff == 0
}

/// The token in an `Authorization: Bearer …` header value.
pub fn bearer(header: &str) -> Option<&str> {
    header.strip_prefix("Bearer ").map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_once_with_mode_0600_then_reused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token");
        let t = load_or_create(&p).unwrap();
        assert_eq!(t.len(), 64);
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(load_or_create(&p).unwrap(), t);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(
            load_or_create(&p)
                .unwrap_err()
                .to_string()
                .contains("chmod 600")
        );
    }

    #[test]
    fn comparison() {
        assert!(matches("secret-token-123", "secret-token-123"));
        assert!(!matches("secret-token-123", "secret-token-124"));
        assert!(!matches("secret-token-123", "secret-token-12"));
        assert!(!matches("secret-token-123", ""));
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
    }
}
