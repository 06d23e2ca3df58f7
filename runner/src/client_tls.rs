//! The API client's TLS configuration (rustls, ring provider): the Mozilla roots plus the
//! certificates of `--ca-file`, each of which is also *pinned* — a server presenting exactly one
//! of them is trusted (its name still checked), so the usual self-signed certificate (OpenSSL 3's
//! `req -x509` marks it `CA:TRUE`, which WebPKI refuses as a server's own certificate) works as
//! its own `--ca-file`, as it does with curl; its dates are checked ([`validity`]). Anything
//! else goes through the WebPKI chain check.
//! Also the client certificate for mutual TLS (`--client-cert`, `--client-key`).

use std::path::Path;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};

mod validity;

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
/// it, and `now` within its dates); any other certificate is judged by `webpki`. The handshake's signatures are always
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
            let (not_before, not_after) = validity::validity(end_entity.as_ref()).ok_or(
                rustls::Error::InvalidCertificate(CertificateError::BadEncoding),
            )?;
            let now = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
            if now < not_before {
                return Err(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidYet,
                ));
            }
            if now > not_after {
                return Err(rustls::Error::InvalidCertificate(CertificateError::Expired));
            }
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

    /// A self-signed `CA:TRUE` certificate for `names`, valid in `years`.
    fn self_signed_ca(names: &[&str], years: (i32, i32)) -> CertificateDer<'static> {
        let mut p = rcgen::CertificateParams::new(
            names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>(),
        )
        .unwrap();
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.not_before = rcgen::date_time_ymd(years.0, 1, 1);
        p.not_after = rcgen::date_time_ymd(years.1, 1, 1);
        let key = rcgen::KeyPair::generate().unwrap();
        p.self_signed(&key).unwrap().der().clone()
    }

    fn verifier(pinned: &[CertificateDer<'static>]) -> PinningVerifier {
        let mut roots = RootCertStore::empty();
        roots.add_parsable_certificates(pinned.iter().cloned());
        let webpki = WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap();
        PinningVerifier {
            pinned: pinned.to_vec(),
            webpki,
        }
    }

    fn verify(
        v: &PinningVerifier,
        cert: &CertificateDer<'_>,
        host: &str,
        year: i32,
    ) -> Result<(), String> {
        let secs = u64::try_from((year - 1970) as i64 * 365 * 86_400 + 180 * 86_400).unwrap();
        v.verify_server_cert(
            cert,
            &[],
            &ServerName::try_from(host.to_owned()).unwrap(),
            &[],
            UnixTime::since_unix_epoch(std::time::Duration::from_secs(secs)),
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
    }

    #[test]
    fn a_pinned_certificate_is_trusted_for_its_names_and_dates_only() {
        let pinned = self_signed_ca(&["localhost", "127.0.0.1"], (2020, 2040));
        let v = verifier(std::slice::from_ref(&pinned));
        verify(&v, &pinned, "localhost", 2030).unwrap();
        verify(&v, &pinned, "127.0.0.1", 2030).unwrap();
        let e = verify(&v, &pinned, "elsewhere", 2030).unwrap_err();
        assert!(e.contains("not valid for name"), "{e}");
        let e = verify(&v, &pinned, "localhost", 2045).unwrap_err();
        assert!(e.contains("Expired"), "{e}");
        let e = verify(&v, &pinned, "localhost", 2010).unwrap_err();
        assert!(e.contains("NotValidYet"), "{e}");
        // Another self-signed certificate with the same names: WebPKI's refusal.
        let other = self_signed_ca(&["localhost"], (2020, 2040));
        let e = verify(&v, &other, "localhost", 2030).unwrap_err();
        assert!(e.contains("CaUsedAsEndEntity"), "{e}");
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
