//! The API client's TLS configuration (rustls, ring provider): the Mozilla roots plus the
//! certificates of `--ca-file`, each of which is also *pinned* — a server presenting exactly one
//! of them is trusted (its name still checked), so the usual self-signed certificate (OpenSSL 3's
//! `req -x509` marks it `CA:TRUE`, which WebPKI refuses as a server's own certificate) works as
//! its own `--ca-file`, as it does with curl. Anything else goes through the WebPKI chain check.
//! Also the client certificate for mutual TLS (`--client-cert`, `--client-key`).

use std::path::Path;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};

/// A CA file or client certificate that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("failed to read {what} `{path}`: {message}")]
pub struct TlsFileError {
    /// Which file (`--ca-file`, `--client-cert`, `--client-key`).
    pub what: &'static str,
    /// The file.
    pub path: String,
    /// Why.
    pub message: String,
}

fn file_error(what: &'static str, path: &Path, message: impl Into<String>) -> TlsFileError {
    TlsFileError {
        what,
        path: path.display().to_string(),
        message: message.into(),
    }
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsFileError> {
    std::fs::read(path).map_err(|e| file_error(what, path, e.to_string()))
}

/// The PEM certificates in `pem`, at least one.
fn certificates(
    what: &'static str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsFileError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(what, path, format!("{e} (expected PEM)")))?;
    if certs.is_empty() {
        return Err(file_error(
            what,
            path,
            "no `BEGIN CERTIFICATE` block: expected a PEM certificate",
        ));
    }
    Ok(certs)
}

/// Trusts a server presenting one of `pinned` exactly (the name it was reached by must be in
/// it); any other certificate is judged by `webpki`. The handshake's signatures are always
/// checked with the provider's algorithms, so the server holds the certificate's key.
#[derive(Debug)]
struct PinningVerifier {
    pinned: Vec<CertificateDer<'static>>,
    webpki: Arc<WebPkiServerVerifier>,
}

impl ServerCertVerifier for PinningVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self
            .pinned
            .iter()
            .any(|p| p.as_ref() == end_entity.as_ref())
        {
            let parsed = ParsedCertificate::try_from(end_entity)?;
            rustls::client::verify_server_name(&parsed, server_name)?;
            return Ok(ServerCertVerified::assertion());
        }
        self.webpki
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// The client's rustls configuration: `ca_file`'s certificates trusted (as CAs, and pinned),
/// `client` (certificate file, key file or `None` when the key is in the certificate's file)
/// presented for mutual TLS.
pub fn client_config(
    ca_file: Option<&Path>,
    client: Option<(&Path, Option<&Path>)>,
) -> Result<rustls::ClientConfig, TlsFileError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let mut pinned = Vec::new();
    if let Some(ca) = ca_file {
        pinned = certificates("--ca-file", ca, &read("--ca-file", ca)?)?;
        // One that cannot be a trust anchor may still be pinned.
        roots.add_parsable_certificates(pinned.iter().cloned());
    }
    let setup = |what: &'static str, path: &Path, e: &dyn std::fmt::Display| {
        file_error(what, path, e.to_string())
    };
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| setup("--ca-file", ca_file.unwrap_or(Path::new("")), &e))?;
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| setup("--ca-file", ca_file.unwrap_or(Path::new("")), &e))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PinningVerifier { pinned, webpki }));
    let mut config = match client {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let pem = read("--client-cert", cert)?;
            let chain = certificates("--client-cert", cert, &pem)?;
            let (key_what, key_path, key_pem) = match key {
                Some(k) => ("--client-key", k, read("--client-key", k)?),
                None => ("--client-cert", cert, pem),
            };
            let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
                file_error(
                    key_what,
                    key_path,
                    format!("{e} (expected a PEM private key)"),
                )
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| setup(key_what, key_path, &e))?
        }
    };
    // What reqwest offers with HTTP/2 built in.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_without_a_certificate_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let e = client_config(Some(&junk), None).unwrap_err();
        assert_eq!(e.what, "--ca-file");
        assert!(
            e.to_string().contains("junk.pem") && e.message.contains("BEGIN CERTIFICATE"),
            "{e}"
        );
        let e = client_config(Some(&dir.path().join("missing.pem")), None).unwrap_err();
        assert!(e.to_string().contains("missing.pem"), "{e}");
    }

    #[test]
    fn a_client_key_that_is_not_pem_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["c".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let cert_file = dir.path().join("c.pem");
        std::fs::write(&cert_file, cert.pem()).unwrap();
        let key_file = dir.path().join("k.pem");
        std::fs::write(&key_file, "junk\n").unwrap();
        let e = client_config(None, Some((&cert_file, Some(&key_file)))).unwrap_err();
        assert_eq!(e.what, "--client-key");
        // The key in the certificate's own file.
        std::fs::write(&cert_file, format!("{}{}", cert.pem(), key.serialize_pem())).unwrap();
        client_config(None, Some((&cert_file, None))).unwrap();
    }
}
