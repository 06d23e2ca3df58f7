//! TLS of the PostgreSQL store: libpq's `sslmode`, `sslrootcert`, `sslcert` and `sslkey` in
//! `database_url`, taken out of the string before the client parses the rest, and turned into
//! a rustls client configuration (ring provider, no OpenSSL). [`super::tls_connect`] uses it.
//!
//! Semantics follow libpq's documentation (`libpq-connect`, "SSL Support"):
//! - `disable`: no TLS. `prefer` (the default): TLS when the server offers it, else plain.
//!   `require`: TLS or fail. Neither checks the certificate, unless `sslrootcert` is given: then
//!   the chain is verified as in `verify-ca` (libpq does the same when a root file exists).
//! - `verify-ca`: TLS, the chain verified against `sslrootcert`. `verify-full`: also the host
//!   name (or IP) of the connection string must be in the certificate.
//! - `sslrootcert=system`: the Mozilla roots built into ralph; without `sslmode` it means
//!   `verify-full`, as in libpq 16.
//! - `sslcert`/`sslkey`: a client certificate (PEM) and its key.
//!
//! Unlike libpq, nothing is read from `~/.postgresql/` (a service reads only what its config
//! names), and TLS is never tried over a Unix socket (PostgreSQL does not offer it there).

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

/// libpq's `sslmode` values ralph supports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    /// No TLS.
    Disable,
    /// TLS if the server offers it.
    Prefer,
    /// TLS or fail.
    Require,
    /// TLS with the chain verified.
    VerifyCa,
    /// TLS with the chain and the host name verified.
    VerifyFull,
}

impl SslMode {
    /// libpq's name of the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

/// The TLS keys of a connection string.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsSettings {
    /// `sslmode`, if given.
    pub mode: Option<String>,
    /// `sslrootcert`: a PEM file of CA certificates, or `system`.
    pub root_cert: Option<String>,
    /// `sslcert`: the client's certificate chain (PEM).
    pub cert: Option<PathBuf>,
    /// `sslkey`: the client's private key (PEM).
    pub key: Option<PathBuf>,
}

/// A TLS setting of `database_url` that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// `sslmode` has a value libpq does not define (or ralph does not support).
    #[error(
        "failed to use `database_url`'s sslmode=`{0}`: expected disable, prefer, require, verify-ca or verify-full"
    )]
    Mode(String),
    /// `verify-ca`/`verify-full` without a CA to verify against.
    #[error(
        "failed to use `database_url`'s sslmode={0}: it needs sslrootcert=PATH (a PEM file of the CA certificates) or sslrootcert=system"
    )]
    NoRootCert(&'static str),
    /// `sslrootcert=system` with a weaker `sslmode`.
    #[error(
        "failed to use `database_url`'s sslrootcert=system with sslmode={0}: expected verify-full (as libpq)"
    )]
    SystemWeak(&'static str),
    /// Only one of `sslcert`/`sslkey`.
    #[error("failed to use `database_url`'s sslcert/sslkey: give both or neither")]
    ClientPair,
    /// A certificate or key file could not be read or used.
    #[error("failed to load `database_url`'s {key} `{path}`: {reason}")]
    File {
        /// `sslrootcert`, `sslcert` or `sslkey`.
        key: &'static str,
        /// The file.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// The TLS library refused the configuration.
    #[error("failed to set up TLS for `database_url`: {0}")]
    Config(rustls::Error),
}

/// Takes libpq's TLS keys out of `url` (URL or `key=value` form): the rest, for the client's
/// own parser, and the TLS settings.
pub fn split(url: &str) -> (String, TlsSettings) {
    let mut settings = TlsSettings::default();
    let mut take = |key: &str, value: String| match key {
        "sslmode" => settings.mode = Some(value),
        "sslrootcert" => settings.root_cert = Some(value),
        "sslcert" => settings.cert = Some(PathBuf::from(value)),
        "sslkey" => settings.key = Some(PathBuf::from(value)),
        _ => {}
    };
    let is_ours = |key: &str| matches!(key, "sslmode" | "sslrootcert" | "sslcert" | "sslkey");
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let Some((head, query)) = url.split_once('?') else {
            return (url.to_owned(), settings);
        };
        let mut kept = Vec::new();
        for pair in query.split('&') {
            match pair.split_once('=') {
                Some((k, v)) if is_ours(k) => take(k, percent_decode(v)),
                _ => kept.push(pair),
            }
        }
        let rest = if kept.is_empty() {
            head.to_owned()
        } else {
            format!("{head}?{}", kept.join("&"))
        };
        return (rest, settings);
    }
    let Some(pairs) = key_values(url) else {
        return (url.to_owned(), settings);
    };
    let mut rest = Vec::new();
    for (key, value, span) in pairs {
        if is_ours(&key) {
            take(&key, value);
        } else {
            rest.push(span);
        }
    }
    (rest.join(" "), settings)
}

/// `%XX` decoding of a URL query value (invalid escapes are kept as they are).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b, hex) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The pairs of a `key=value` string: (key, unquoted value, the pair's original text). `None`
/// when it does not parse (the client's parser then says why).
fn key_values(s: &str) -> Option<Vec<(String, String, &str)>> {
    let mut out = Vec::new();
    let mut rest = s.trim_start();
    while !rest.is_empty() {
        let start = s.len() - rest.len();
        let key_end = rest.find(|c: char| c == '=' || c.is_whitespace())?;
        let key = rest[..key_end].to_owned();
        rest = rest[key_end..].trim_start().strip_prefix('=')?.trim_start();
        let mut value = String::new();
        if let Some(quoted) = rest.strip_prefix('\'') {
            let mut chars = quoted.char_indices();
            let mut end = None;
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => value.push(chars.next()?.1),
                    '\'' => {
                        end = Some(i + 1);
                        break;
                    }
                    c => value.push(c),
                }
            }
            rest = &quoted[end?..];
        } else {
            let mut chars = rest.char_indices();
            let mut end = rest.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => value.push(chars.next()?.1),
                    c if c.is_whitespace() => {
                        end = i;
                        break;
                    }
                    c => value.push(c),
                }
            }
            rest = &rest[end..];
        }
        let end = s.len() - rest.len();
        out.push((key, value, s.get(start..end)?));
        rest = rest.trim_start();
    }
    Some(out)
}

/// What a connection string's TLS settings mean: the mode and, unless `disable`, the rustls
/// configuration (its verifier chosen by the mode).
#[derive(Clone, Debug)]
pub struct TlsPlan {
    /// The effective mode.
    pub mode: SslMode,
    /// The `sslrootcert` value, for messages.
    pub root_cert: Option<String>,
    /// The rustls configuration (`None` for `disable`).
    pub config: Option<Arc<rustls::ClientConfig>>,
}

impl TlsPlan {
    /// Checks the settings and loads their files.
    pub fn new(settings: &TlsSettings) -> Result<Self, TlsError> {
        let system = settings.root_cert.as_deref() == Some("system");
        let mode = match settings.mode.as_deref() {
            None if system => SslMode::VerifyFull,
            None | Some("prefer") => SslMode::Prefer,
            Some("disable") => SslMode::Disable,
            Some("require") => SslMode::Require,
            Some("verify-ca") => SslMode::VerifyCa,
            Some("verify-full") => SslMode::VerifyFull,
            Some(other) => return Err(TlsError::Mode(other.to_owned())),
        };
        if system && mode != SslMode::VerifyFull && mode != SslMode::Disable {
            return Err(TlsError::SystemWeak(mode.as_str()));
        }
        if matches!(mode, SslMode::VerifyCa | SslMode::VerifyFull) && settings.root_cert.is_none() {
            return Err(TlsError::NoRootCert(mode.as_str()));
        }
        let config = match mode {
            SslMode::Disable => None,
            _ => Some(Arc::new(client_config(mode, settings)?)),
        };
        Ok(Self {
            mode,
            root_cert: settings.root_cert.clone(),
            config,
        })
    }
}

fn client_config(mode: SslMode, settings: &TlsSettings) -> Result<rustls::ClientConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier: Arc<dyn ServerCertVerifier> = match &settings.root_cert {
        None => Arc::new(AnyCertificate(provider.clone())),
        Some(root) => {
            let roots = Arc::new(root_store(root)?);
            let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                .build()
                .map_err(|e| TlsError::File {
                    key: "sslrootcert",
                    path: root.clone(),
                    reason: e.to_string(),
                })?;
            match mode {
                SslMode::VerifyFull => webpki,
                _ => Arc::new(ChainOnly(webpki)),
            }
        }
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let mut config = match (&settings.cert, &settings.key) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert), Some(key)) => {
            let chain = certificates("sslcert", &cert.to_string_lossy())?;
            let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::File {
                key: "sslkey",
                path: key.display().to_string(),
                reason: e.to_string(),
            })?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|e| TlsError::File {
                    key: "sslkey",
                    path: key.display().to_string(),
                    reason: e.to_string(),
                })?
        }
        _ => return Err(TlsError::ClientPair),
    };
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(config)
}

fn certificates(key: &'static str, path: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let failed = |reason: String| TlsError::File {
        key,
        path: path.to_owned(),
        reason,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| failed(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| failed(e.to_string()))?;
    if certs.is_empty() {
        return Err(failed("no PEM certificate in it".into()));
    }
    Ok(certs)
}

fn root_store(root: &str) -> Result<RootCertStore, TlsError> {
    if root == "system" {
        return Ok(RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        });
    }
    let mut store = RootCertStore::empty();
    for cert in certificates("sslrootcert", root)? {
        store.add(cert).map_err(|e| TlsError::File {
            key: "sslrootcert",
            path: root.to_owned(),
            reason: e.to_string(),
        })?;
    }
    Ok(store)
}

/// `prefer`/`require` without `sslrootcert`: any certificate (the handshake's signatures are
/// still checked, so the session is encrypted to whoever holds the certificate's key).
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must lead to `sslrootcert`; the name is not checked.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // webpki checks the chain first and the name last: a name error means the chain held.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_keys_are_taken_out_of_both_forms() {
        let (rest, s) = split(
            "postgres://u:pw@h:5/d?sslmode=verify-full&connect_timeout=3&sslrootcert=%2Ftmp%2Fca.pem",
        );
        assert_eq!(rest, "postgres://u:pw@h:5/d?connect_timeout=3");
        assert_eq!(s.mode.as_deref(), Some("verify-full"));
        assert_eq!(s.root_cert.as_deref(), Some("/tmp/ca.pem"));
        let (rest, s) =
            split("host=h user=u sslmode=require sslrootcert='/a b/ca.pem' password='p w'");
        assert_eq!(rest, "host=h user=u password='p w'");
        assert_eq!(s.mode.as_deref(), Some("require"));
        assert_eq!(s.root_cert.as_deref(), Some("/a b/ca.pem"));
        let (rest, s) = split("postgres://u@h/d?sslmode=disable");
        assert_eq!(
            (rest.as_str(), s.mode.as_deref()),
            ("postgres://u@h/d", Some("disable"))
        );
    }

    #[test]
    fn modes_follow_libpq() {
        let plan = |mode: Option<&str>, root: Option<&str>| {
            TlsPlan::new(&TlsSettings {
                mode: mode.map(str::to_owned),
                root_cert: root.map(str::to_owned),
                ..TlsSettings::default()
            })
        };
        assert_eq!(plan(None, None).unwrap().mode, SslMode::Prefer);
        assert!(plan(Some("disable"), None).unwrap().config.is_none());
        assert_eq!(
            plan(None, Some("system")).unwrap().mode,
            SslMode::VerifyFull
        );
        let e = plan(Some("verify-full"), None).unwrap_err().to_string();
        assert!(
            e.contains("sslmode=verify-full") && e.contains("sslrootcert"),
            "{e}"
        );
        let e = plan(Some("sometimes"), None).unwrap_err().to_string();
        assert!(e.contains("sslmode=`sometimes`"), "{e}");
        let e = plan(Some("require"), Some("system"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("sslrootcert=system"), "{e}");
        let e = plan(Some("verify-ca"), Some("/nonexistent/ca.pem"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("sslrootcert `/nonexistent/ca.pem`"), "{e}");
        let e = TlsPlan::new(&TlsSettings {
            mode: Some("require".into()),
            cert: Some("/etc/ralph/client.pem".into()),
            ..TlsSettings::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("sslcert/sslkey: give both"), "{e}");
        // Unix sockets never try TLS, whatever sslmode says.
        let t = super::super::target::Target::parse(
            "postgres://ralph@/ralph?host=/run/postgresql&sslmode=require",
        )
        .unwrap();
        assert_eq!(t.config.get_ssl_mode(), postgres::config::SslMode::Disable);
    }
}
