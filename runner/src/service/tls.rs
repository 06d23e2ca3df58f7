//! TLS for the API: the server's certificate and key (`tls_cert`, `tls_key`, PEM), optional
//! client certificates checked against `client_ca` (mutual TLS), loaded at start and again on
//! SIGHUP (a bad new pair leaves the old one in force), and the rule that a non-loopback address
//! is not listened on in clear unless `insecure_listen = true`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// A TLS setting that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A PEM file could not be read or holds nothing usable.
    #[error("failed to read `{key}` `{path}`: {message}")]
    Pem {
        /// The configuration key.
        key: &'static str,
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// rustls refused the certificate, key or CA.
    #[error("failed to set up TLS from `{path}`: {message}")]
    Setup {
        /// The file concerned.
        path: String,
        /// rustls' reason.
        message: String,
    },
}

/// Where the TLS files are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain (PEM).
    pub cert: PathBuf,
    /// The private key (PEM).
    pub key: PathBuf,
    /// The CA client certificates must be signed by (PEM); `None`: no client certificate.
    pub client_ca: Option<PathBuf>,
}

fn pem_err(key: &'static str, path: &Path, message: impl Into<String>) -> TlsError {
    TlsError::Pem {
        key,
        path: path.display().to_string(),
        message: message.into(),
    }
}

fn certs(key: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_err(key, path, e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| pem_err(key, path, e.to_string()))?;
    if certs.is_empty() {
        return Err(pem_err(
            key,
            path,
            "no `BEGIN CERTIFICATE` block: expected a PEM certificate",
        ));
    }
    Ok(certs)
}

/// The ring provider (the one already linked through reqwest; no C build).
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Builds the server's TLS configuration from its files.
pub fn server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>, TlsError> {
    let chain = certs("tls_cert", &files.cert)?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| {
        pem_err(
            "tls_key",
            &files.key,
            format!("{e} (expected a PEM private key)"),
        )
    })?;
    let setup = |path: &Path, e: &dyn std::fmt::Display| TlsError::Setup {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| setup(&files.cert, &e))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in certs("client_ca", ca)? {
                roots.add(c).map_err(|e| setup(ca, &e))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|e| setup(ca, &e))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| setup(&files.key, &e))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The TLS configuration in force, replaced on SIGHUP.
#[derive(Debug)]
pub struct Reloadable {
    files: TlsFiles,
    current: RwLock<Arc<ServerConfig>>,
}

impl Reloadable {
    /// Loads `files`.
    pub fn load(files: TlsFiles) -> Result<Self, TlsError> {
        let config = server_config(&files)?;
        Ok(Self {
            files,
            current: RwLock::new(config),
        })
    }

    /// The configuration for a new connection.
    pub fn current(&self) -> Arc<ServerConfig> {
        self.current
            .read()
            .map(|c| c.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Reads the files again (`files`, when the configuration names new ones); the old
    /// configuration stays when they are unusable.
    pub fn reload(&self, files: Option<&TlsFiles>) -> Result<(), TlsError> {
        let config = server_config(files.unwrap_or(&self.files))?;
        if let Ok(mut c) = self.current.write() {
            *c = config;
        }
        Ok(())
    }
}

/// Whether `listen` (an `ip:port`) is a loopback address.
pub fn is_loopback(listen: &str) -> bool {
    listen
        .parse::<std::net::SocketAddr>()
        .is_ok_and(|a| a.ip().is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback() {
        assert!(is_loopback("127.0.0.1:7979"));
        assert!(is_loopback("[::1]:7979"));
        assert!(!is_loopback("0.0.0.0:7979"));
        assert!(!is_loopback("10.1.2.3:7979"));
    }

    #[test]
    fn unreadable_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("cert.pem");
        std::fs::write(&cert, "not a certificate\n").unwrap();
        let files = TlsFiles {
            cert: cert.clone(),
            key: dir.path().join("missing.pem"),
            client_ca: None,
        };
        let e = server_config(&files).unwrap_err().to_string();
        assert!(e.contains("tls_cert") && e.contains("cert.pem"), "{e}");
    }
}
