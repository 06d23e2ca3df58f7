//! The service's `[notify]` table (SPEC §13), validated once into [`Notify`]: the URL every
//! job's end goes to (optional), the secret that signs every delivery, how long a failed one is
//! retried and how long one attempt may take. No delivery is ever sent unsigned: a `url`, or a
//! `limits.allowed_notify` that lets jobs name their own, needs `secret_file`.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::Url;
use serde::Deserialize;

use crate::util::units::HumanDuration;

/// Shortest secret accepted, in bytes.
pub const MIN_SECRET: usize = 16;
/// Default `retry_for`.
pub const DEFAULT_RETRY_FOR: Duration = Duration::from_secs(600);
/// Default `timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// `[notify]` as written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyConfig {
    /// Every job's end is POSTed here.
    pub url: Option<String>,
    /// The HMAC-SHA256 key (the file's bytes, a trailing newline aside).
    pub secret_file: Option<PathBuf>,
    /// How long a failed delivery is tried again, from its first attempt (default 10m).
    pub retry_for: Option<HumanDuration>,
    /// How long one attempt may take, connection to the answer's end (default 10s).
    pub timeout: Option<HumanDuration>,
}

/// `[notify]` checked and its secret read.
#[derive(Clone)]
pub struct Notify {
    /// The service-wide receiver.
    pub url: Option<Url>,
    /// The signing key.
    pub secret: Vec<u8>,
    /// How long a failed delivery is tried again.
    pub retry_for: Duration,
    /// How long one attempt may take.
    pub timeout: Duration,
}

impl std::fmt::Debug for Notify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notify")
            .field("url", &self.url.as_ref().map(super::target::origin))
            .field("secret", &"<redacted>")
            .field("retry_for", &self.retry_for)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Why `[notify]` is refused; each names its key.
#[derive(Debug, thiserror::Error)]
pub enum NotifyConfigError {
    /// `notify.url` is not a receiver.
    #[error("`notify.url`: {0}")]
    Url(super::target::TargetError),
    /// A URL would be signed with no secret.
    #[error("`notify.secret_file` is required with {0}: deliveries are always signed")]
    NoSecret(&'static str),
    /// The secret file could not be read.
    #[error("`notify.secret_file` `{path}`: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The secret is too short.
    #[error("`notify.secret_file` `{path}` holds {len} byte(s): at least {MIN_SECRET} expected (e.g. `openssl rand -hex 32 > {path}`)", path = path.display())]
    Short {
        /// The file.
        path: PathBuf,
        /// Its length.
        len: usize,
    },
    /// Others may read the secret.
    #[error("`notify.secret_file` `{path}` is readable by other users (mode {mode:o}): `chmod 600` it", path = path.display())]
    Exposed {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A duration of zero.
    #[error("`notify.{0}` must be more than 0s")]
    Zero(&'static str),
}

impl NotifyConfig {
    /// Checks the table without reading the secret (config validation).
    pub fn validate(&self, jobs_may_name: bool) -> Result<(), NotifyConfigError> {
        if let Some(u) = &self.url {
            super::target::parse(u).map_err(NotifyConfigError::Url)?;
        }
        if self.secret_file.is_none() {
            if self.url.is_some() {
                return Err(NotifyConfigError::NoSecret("`notify.url`"));
            }
            if jobs_may_name {
                return Err(NotifyConfigError::NoSecret("`limits.allowed_notify`"));
            }
        }
        if self.retry_for.is_some_and(|d| d.0.is_zero()) {
            return Err(NotifyConfigError::Zero("retry_for"));
        }
        if self.timeout.is_some_and(|d| d.0.is_zero()) {
            return Err(NotifyConfigError::Zero("timeout"));
        }
        Ok(())
    }

    /// The table checked and its secret read (`None`: no secret, so no webhooks).
    pub fn load(&self, jobs_may_name: bool) -> Result<Option<Notify>, NotifyConfigError> {
        self.validate(jobs_may_name)?;
        let Some(path) = &self.secret_file else {
            return Ok(None);
        };
        let secret = read_secret(path)?;
        Ok(Some(Notify {
            url: match &self.url {
                Some(u) => Some(super::target::parse(u).map_err(NotifyConfigError::Url)?),
                None => None,
            },
            secret,
            retry_for: self.retry_for.map_or(DEFAULT_RETRY_FOR, |d| d.0),
            timeout: self.timeout.map_or(DEFAULT_TIMEOUT, |d| d.0),
        }))
    }
}

fn read_secret(path: &Path) -> Result<Vec<u8>, NotifyConfigError> {
    let read = |source| NotifyConfigError::Read {
        path: path.to_owned(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read)?;
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(NotifyConfigError::Exposed {
            path: path.to_owned(),
            mode,
        });
    }
    let mut secret = std::fs::read(path).map_err(read)?;
    while secret.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        secret.pop();
    }
    if secret.len() < MIN_SECRET {
        return Err(NotifyConfigError::Short {
            path: path.to_owned(),
            len: secret.len(),
        });
    }
    Ok(secret)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn secret(dir: &Path, text: &str, mode: u32) -> PathBuf {
        let p = dir.join("s");
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn a_url_needs_a_private_long_enough_secret() {
        let dir = tempfile::tempdir().unwrap();
        let c = |url: Option<&str>, file: Option<PathBuf>| NotifyConfig {
            url: url.map(str::to_owned),
            secret_file: file,
            ..NotifyConfig::default()
        };
        assert!(c(None, None).load(false).unwrap().is_none());
        let e = c(Some("https://h.example/x"), None)
            .load(false)
            .unwrap_err();
        assert!(
            e.to_string().contains("`notify.secret_file` is required"),
            "{e}"
        );
        let e = c(None, None).load(true).unwrap_err();
        assert!(e.to_string().contains("allowed_notify"), "{e}");
        let e = c(Some("ftp://h/x"), None).load(false).unwrap_err();
        assert!(e.to_string().starts_with("`notify.url`"), "{e}");
        let short = secret(dir.path(), "short\n", 0o600);
        assert!(matches!(
            c(None, Some(short)).load(false),
            Err(NotifyConfigError::Short { len: 5, .. })
        ));
        let open = secret(dir.path(), "0123456789abcdef0123", 0o644);
        assert!(matches!(
            c(None, Some(open)).load(false),
            Err(NotifyConfigError::Exposed { mode: 0o644, .. })
        ));
        let good = secret(dir.path(), "0123456789abcdef0123\n", 0o600);
        let n = c(Some("https://h.example/x"), Some(good))
            .load(true)
            .unwrap()
            .unwrap();
        assert_eq!(n.secret, b"0123456789abcdef0123");
        assert_eq!(
            (n.retry_for, n.timeout),
            (DEFAULT_RETRY_FOR, DEFAULT_TIMEOUT)
        );
        assert!(!format!("{n:?}").contains("0123456789"));
    }
}
