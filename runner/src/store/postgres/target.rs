//! The connection string of the PostgreSQL store: parsed into a client configuration with
//! ralph's defaults, and redacted for every message and log (a password never leaves here).

use std::str::FromStr;
use std::time::Duration;

use super::tls::{SslMode, TlsError, TlsPlan, split};
use super::tls_connect::RustlsConnect;

/// How long one connection attempt may take, unless the URL says (`connect_timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long sent data may stay unacknowledged on a TCP connection before it is dropped, unless
/// the URL says (`tcp_user_timeout`): a vanished server fails a call instead of hanging it.
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(30);

/// A parsed connection string.
#[derive(Clone)]
pub struct Target {
    /// What the client connects with.
    pub config: postgres::Config,
    /// The connection string with any password replaced by `***`, for messages.
    pub redacted: String,
    /// How connections are encrypted (`sslmode`, `sslrootcert`, ...).
    pub tls: RustlsConnect,
}

/// A connection string that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// The client's parser refused it.
    #[error("{}", super::worker::describe(.0))]
    Parse(postgres::Error),
    /// Its TLS settings cannot be used.
    #[error(transparent)]
    Tls(#[from] TlsError),
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Target").field(&self.redacted).finish()
    }
}

impl Target {
    /// Parses `url` (`postgres://user@host/db?...` or `key=value ...`).
    pub fn parse(url: &str) -> Result<Self, TargetError> {
        let (rest, settings) = split(url);
        let mut config = postgres::Config::from_str(&rest).map_err(TargetError::Parse)?;
        let plan = TlsPlan::new(&settings)?;
        // PostgreSQL offers no TLS over a Unix socket; libpq does not try it there either.
        let unix_only = !config.get_hosts().is_empty()
            && config
                .get_hosts()
                .iter()
                .all(|h| !matches!(h, postgres::config::Host::Tcp(_)));
        config.ssl_mode(match plan.mode {
            _ if unix_only => postgres::config::SslMode::Disable,
            SslMode::Disable => postgres::config::SslMode::Disable,
            SslMode::Prefer => postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                postgres::config::SslMode::Require
            }
        });
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(TCP_USER_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("ralph");
        }
        Ok(Self {
            config,
            redacted: redact(url),
            tls: RustlsConnect::new(plan),
        })
    }
}

/// `url` with the password of a URL's user info and every `password` parameter replaced by
/// `***`.
pub fn redact(url: &str) -> String {
    let scheme = ["postgres://", "postgresql://"]
        .into_iter()
        .find(|s| url.starts_with(s));
    let Some(scheme) = scheme else {
        return redact_key_values(url);
    };
    let rest = &url[scheme.len()..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{user}:***@{host}"),
            None => authority.to_owned(),
        },
        None => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => kv.to_owned(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}{authority}{tail}")
}

/// A `key=value` connection string with its `password` value replaced (quoted values included).
fn redact_key_values(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = find_password_key(rest) {
        let (before, after) = rest.split_at(pos);
        out.push_str(before);
        let eq = after.find('=').map_or(after.len(), |i| i + 1);
        out.push_str(&after[..eq]);
        out.push_str("***");
        let value = after[eq..].trim_start();
        let skip = if let Some(quoted) = value.strip_prefix('\'') {
            let mut escaped = false;
            let mut end = quoted.len();
            for (i, c) in quoted.char_indices() {
                match c {
                    '\\' if !escaped => escaped = true,
                    '\'' if !escaped => {
                        end = i + 1;
                        break;
                    }
                    _ => escaped = false,
                }
            }
            1 + end
        } else {
            value.find(char::is_whitespace).unwrap_or(value.len())
        };
        rest = &value[skip.min(value.len())..];
    }
    out.push_str(rest);
    out
}

/// The byte offset of a `password` key (at the start or after whitespace, followed by `=`).
fn find_password_key(s: &str) -> Option<usize> {
    let lower = s.to_ascii_lowercase();
    let mut from = 0;
    while let Some(i) = lower[from..].find("password") {
        let at = from + i;
        let starts = at == 0 || lower[..at].ends_with(char::is_whitespace);
        let key_ends = lower[at + "password".len()..].trim_start().starts_with('=');
        if starts && key_ends {
            return Some(at);
        }
        from = at + "password".len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_survive_redaction() {
        let cases = [
            (
                "postgres://ralph:s3cret@db.example:5432/ralph",
                "postgres://ralph:***@db.example:5432/ralph",
            ),
            (
                "postgresql://ralph:s3cret@db/ralph?password=s3cret&sslmode=disable",
                "postgresql://ralph:***@db/ralph?password=***&sslmode=disable",
            ),
            (
                "postgres://ralph@/ralph?host=/run/postgresql",
                "postgres://ralph@/ralph?host=/run/postgresql",
            ),
            (
                "host=db user=ralph password=s3cret dbname=ralph",
                "host=db user=ralph password=*** dbname=ralph",
            ),
            (
                "host=db password = 'se cr\\'et' dbname=ralph",
                "host=db password =*** dbname=ralph",
            ),
        ];
        for (url, want) in cases {
            let got = redact(url);
            assert_eq!(got, want, "{url}");
            assert!(!got.contains("s3cret") && !got.contains("cr"), "{got}");
        }
    }

    #[test]
    fn defaults_are_added_and_the_socket_form_parses() {
        let t = Target::parse("postgres://ralph@/ralph?host=/run/postgresql").unwrap();
        assert_eq!(t.config.get_dbname(), Some("ralph"));
        assert_eq!(t.config.get_connect_timeout(), Some(&CONNECT_TIMEOUT));
        assert!(matches!(
            t.config.get_hosts(),
            [postgres::config::Host::Unix(p)] if p == std::path::Path::new("/run/postgresql")
        ));
        let t = Target::parse("postgres://u:pw@h/d?connect_timeout=3").unwrap();
        assert_eq!(
            t.config.get_connect_timeout(),
            Some(&Duration::from_secs(3))
        );
        assert!(!format!("{t:?}").contains("pw"));
        assert!(Target::parse("postgres://u@h/d?sslmode=sometimes").is_err());
    }
}
