//! The client's TLS connector over tokio-rustls ([`super::tls::TlsPlan`] decides the verifier),
//! and the words for a TLS failure: each names `database_url`'s `sslmode` (and `sslrootcert`),
//! never the password.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use postgres::Socket;
use postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use rustls::CertificateError;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::tls::{SslMode, TlsPlan};

/// A TLS handshake with the server failed; the message says why in `database_url`'s terms.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HandshakeError(String);

/// Makes one TLS connector per connection (the host name comes from the connection string).
#[derive(Clone, Debug)]
pub struct RustlsConnect {
    plan: TlsPlan,
}

impl RustlsConnect {
    /// A connector following `plan`.
    pub fn new(plan: TlsPlan) -> Self {
        Self { plan }
    }

    /// The plan's mode.
    pub fn mode(&self) -> SslMode {
        self.plan.mode
    }

    /// Why a connection failed, in `database_url`'s terms, when the failure is about TLS.
    pub fn explain(&self, e: &postgres::Error) -> Option<String> {
        let cause = std::error::Error::source(e)?;
        if let Some(h) = cause.downcast_ref::<HandshakeError>() {
            return Some(h.0.clone());
        }
        (cause.to_string() == "server does not support TLS").then(|| {
            format!(
                "the server does not offer TLS, and `database_url` has sslmode={} (turn `ssl` on in the server, or use sslmode=prefer or disable)",
                self.plan.mode.as_str()
            )
        })
    }
}

impl MakeTlsConnect<Socket> for RustlsConnect {
    type Stream = RustlsStream;
    type TlsConnect = Handshake;
    type Error = HandshakeError;

    fn make_tls_connect(&mut self, domain: &str) -> Result<Handshake, HandshakeError> {
        Ok(Handshake {
            plan: self.plan.clone(),
            host: domain.to_owned(),
        })
    }
}

/// One connection's handshake.
#[derive(Debug)]
pub struct Handshake {
    plan: TlsPlan,
    host: String,
}

impl TlsConnect<Socket> for Handshake {
    type Stream = RustlsStream;
    type Error = HandshakeError;
    type Future = Pin<Box<dyn Future<Output = Result<RustlsStream, HandshakeError>> + Send>>;

    fn connect(self, socket: Socket) -> Self::Future {
        Box::pin(async move {
            let mode = self.plan.mode.as_str();
            let Some(config) = self.plan.config.clone() else {
                return Err(HandshakeError(format!(
                    "TLS was attempted with `database_url`'s sslmode={mode}"
                )));
            };
            let name = ServerName::try_from(self.host.clone()).map_err(|_| {
                HandshakeError(format!(
                    "the host `{}` is not a name or address TLS can verify (`database_url` has sslmode={mode})",
                    self.host
                ))
            })?;
            let stream = tokio_rustls::TlsConnector::from(Arc::clone(&config))
                .connect(name, socket)
                .await
                .map_err(|e| HandshakeError(describe(&e, &self.plan, &self.host)))?;
            Ok(RustlsStream(Box::new(stream)))
        })
    }
}

fn describe(e: &io::Error, plan: &TlsPlan, host: &str) -> String {
    let mode = plan.mode.as_str();
    let root = plan.root_cert.as_deref().unwrap_or("");
    let tls = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
    match tls {
        Some(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)) => format!(
            "the server's certificate is not signed by a CA of `database_url`'s sslrootcert `{root}` (sslmode={mode}): unknown issuer"
        ),
        Some(rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        )) => format!(
            "the server's certificate does not name the host `{host}` of `database_url` (sslmode={mode} checks the name; verify-ca checks the CA only)"
        ),
        Some(rustls::Error::InvalidCertificate(c)) => format!(
            "the server's certificate was refused ({c:?}; `database_url` has sslmode={mode}, sslrootcert `{root}`)"
        ),
        _ => format!("the TLS handshake failed: {e} (`database_url` has sslmode={mode})"),
    }
}

/// A TLS session with the server.
#[derive(Debug)]
pub struct RustlsStream(Box<tokio_rustls::client::TlsStream<Socket>>);

impl AsyncRead for RustlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for RustlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

impl TlsStream for RustlsStream {
    fn channel_binding(&self) -> ChannelBinding {
        // No channel binding: SCRAM without `-PLUS` (the server's certificate hash algorithm
        // would have to be matched; the TLS verification above is what authenticates it).
        ChannelBinding::none()
    }
}
