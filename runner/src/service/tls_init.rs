//! `ralph tls init`'s certificates (rcgen): a private CA, a server certificate for the given
//! host names and addresses, and client certificates for mutual TLS, all signed by that CA;
//! written into one directory that must not hold them yet (keys mode 0600), nothing left behind
//! when a file cannot be written.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

/// Days the CA is valid.
pub const CA_DAYS: u32 = 3650;

/// A request that cannot be made, or files that cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum TlsInitError {
    /// No `--name`.
    #[error("--name: give at least one host name or IP address the server is reached by")]
    NoName,
    /// A name that cannot be in a certificate.
    #[error("--name `{name}`: {message} (expected a DNS name or an IP address)")]
    BadName {
        /// The name.
        name: String,
        /// Why.
        message: String,
    },
    /// A client name that cannot be a file name.
    #[error(
        "--client `{name}`: expected a-z, 0-9, `-`, `_`, `.` (not starting with `.`), and neither `ca` nor `server`"
    )]
    BadClient {
        /// The name.
        name: String,
    },
    /// `--days` out of range.
    #[error("--days {days}: expected 1 to {CA_DAYS}")]
    BadDays {
        /// The value.
        days: u32,
    },
    /// rcgen failed.
    #[error("failed to make the {what}: {message}")]
    Generate {
        /// Which certificate.
        what: String,
        /// rcgen's reason.
        message: String,
    },
    /// A file is already there.
    #[error(
        "`{path}` already exists: ralph tls init writes only new files (choose another --dir, or remove the old ones)"
    )]
    Exists {
        /// The file.
        path: PathBuf,
    },
    /// A file or the directory could not be written.
    #[error("failed to write `{path}`: {message}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
}

/// What to make.
#[derive(Clone, Debug)]
pub struct Request {
    /// The server's names and addresses (its certificate's subject alternative names).
    pub names: Vec<String>,
    /// The client certificates' names (their common names and file names).
    pub clients: Vec<String>,
    /// Days the server and client certificates are valid.
    pub days: u32,
    /// Seconds since the Unix epoch: when they start being valid.
    pub now: u64,
}

/// One file to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PemFile {
    /// Its name in the directory.
    pub name: String,
    /// Its PEM text.
    pub pem: String,
    /// A private key (mode 0600; certificates are 0644).
    pub secret: bool,
}

/// The files of a new PKI, in the order they are written.
#[derive(Clone, Debug)]
pub struct Pki {
    /// `ca.pem`, `ca-key.pem`, `server.pem`, `server-key.pem`, then `NAME.pem`, `NAME-key.pem`
    /// for each client.
    pub files: Vec<PemFile>,
}

fn valid_client(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name != "ca"
        && name != "server"
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b))
}

/// The civil date (year, month, day; UTC) of `unix_secs`.
fn civil_date(unix_secs: u64) -> (i32, u8, u8) {
    // Howard Hinnant's days-to-civil algorithm.
    let z = i64::try_from(unix_secs / 86_400).unwrap_or(i64::MAX / 2) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        i32::try_from(year).unwrap_or(i32::MAX),
        u8::try_from(month).unwrap_or(1),
        u8::try_from(day).unwrap_or(1),
    )
}

fn validity(params: &mut CertificateParams, now: u64, days: u32) {
    let (y, m, d) = civil_date(now);
    params.not_before = rcgen::date_time_ymd(y, m, d);
    let (y, m, d) = civil_date(now + u64::from(days) * 86_400);
    params.not_after = rcgen::date_time_ymd(y, m, d);
}

fn generated(what: &str) -> impl Fn(rcgen::Error) -> TlsInitError + '_ {
    move |e| TlsInitError::Generate {
        what: what.to_owned(),
        message: e.to_string(),
    }
}

/// Makes the CA, the server's certificate and the clients' certificates.
pub fn generate(req: &Request) -> Result<Pki, TlsInitError> {
    if req.names.is_empty() {
        return Err(TlsInitError::NoName);
    }
    // What a client can put in a server address (the same check as the client's).
    for name in &req.names {
        rustls_pki_types::ServerName::try_from(name.as_str()).map_err(|e| {
            TlsInitError::BadName {
                name: name.clone(),
                message: e.to_string(),
            }
        })?;
    }
    if req.days == 0 || req.days > CA_DAYS {
        return Err(TlsInitError::BadDays { days: req.days });
    }
    if let Some(name) = req.clients.iter().find(|c| !valid_client(c)) {
        return Err(TlsInitError::BadClient { name: name.clone() });
    }
    let mut files = Vec::new();
    let mut push = |name: String, pem: String, secret: bool| {
        files.push(PemFile { name, pem, secret });
    };

    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(generated("CA"))?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name
        .push(DnType::CommonName, format!("ralph CA for {}", req.names[0]));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    validity(&mut ca, req.now, CA_DAYS);
    let ca_key = KeyPair::generate().map_err(generated("CA key"))?;
    let ca_cert = ca.self_signed(&ca_key).map_err(generated("CA"))?;
    push("ca.pem".into(), ca_cert.pem(), false);
    push("ca-key.pem".into(), ca_key.serialize_pem(), true);

    let mut server =
        CertificateParams::new(req.names.clone()).map_err(generated("server certificate"))?;
    server
        .distinguished_name
        .push(DnType::CommonName, req.names[0].clone());
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    server.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    server.use_authority_key_identifier_extension = true;
    validity(&mut server, req.now, req.days);
    let server_key = KeyPair::generate().map_err(generated("server key"))?;
    let server_cert = server
        .signed_by(&server_key, &ca_cert, &ca_key)
        .map_err(generated("server certificate"))?;
    push("server.pem".into(), server_cert.pem(), false);
    push("server-key.pem".into(), server_key.serialize_pem(), true);

    for client in &req.clients {
        let what = format!("client certificate `{client}`");
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(generated(&what))?;
        params
            .distinguished_name
            .push(DnType::CommonName, client.clone());
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.use_authority_key_identifier_extension = true;
        validity(&mut params, req.now, req.days);
        let key = KeyPair::generate().map_err(generated(&what))?;
        let cert = params
            .signed_by(&key, &ca_cert, &ca_key)
            .map_err(generated(&what))?;
        push(format!("{client}.pem"), cert.pem(), false);
        push(format!("{client}-key.pem"), key.serialize_pem(), true);
    }
    Ok(Pki { files })
}

/// Writes `pki` into `dir` (made with mode 0700 when missing): every file new, or none written.
pub fn write(dir: &Path, pki: &Pki) -> Result<Vec<PathBuf>, TlsInitError> {
    let failed = |path: &Path, e: std::io::Error| TlsInitError::Write {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| failed(dir, e))?;
    for f in &pki.files {
        let path = dir.join(&f.name);
        if path.symlink_metadata().is_ok() {
            return Err(TlsInitError::Exists { path });
        }
    }
    let mut written = Vec::new();
    for f in &pki.files {
        let path = dir.join(&f.name);
        let result = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if f.secret { 0o600 } else { 0o644 })
            .open(&path)
            .and_then(|mut file| {
                file.write_all(f.pem.as_bytes())?;
                file.sync_all()
            });
        match result {
            Ok(()) => written.push(path),
            Err(e) => {
                let exists = e.kind() == std::io::ErrorKind::AlreadyExists;
                if !exists {
                    let _ = std::fs::remove_file(&path);
                }
                for p in &written {
                    let _ = std::fs::remove_file(p);
                }
                return Err(if exists {
                    TlsInitError::Exists { path }
                } else {
                    failed(&path, e)
                });
            }
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Request {
        Request {
            names: vec!["localhost".into(), "127.0.0.1".into()],
            clients: vec!["client".into()],
            days: 825,
            now: 1_796_212_800, // 2026-12-02
        }
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(civil_date(951_782_400), (2000, 2, 29));
        assert_eq!(civil_date(1_796_212_800), (2026, 12, 2));
    }

    #[test]
    fn files_in_order_with_their_modes() {
        let pki = generate(&request()).unwrap();
        let names: Vec<_> = pki.files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "ca.pem",
                "ca-key.pem",
                "server.pem",
                "server-key.pem",
                "client.pem",
                "client-key.pem"
            ]
        );
        for f in &pki.files {
            assert_eq!(f.secret, f.name.ends_with("-key.pem"), "{}", f.name);
            let begins = if f.secret {
                "-----BEGIN PRIVATE KEY-----"
            } else {
                "-----BEGIN CERTIFICATE-----"
            };
            assert!(f.pem.starts_with(begins), "{}", f.pem);
        }
    }

    #[test]
    fn bad_requests_are_named() {
        let mut r = request();
        r.names.clear();
        assert!(matches!(generate(&r), Err(TlsInitError::NoName)));
        let mut r = request();
        r.clients = vec!["ca".into()];
        assert!(matches!(generate(&r), Err(TlsInitError::BadClient { .. })));
        r.clients = vec!["../x".into()];
        assert!(matches!(generate(&r), Err(TlsInitError::BadClient { .. })));
        let mut r = request();
        r.days = 0;
        assert!(matches!(
            generate(&r),
            Err(TlsInitError::BadDays { days: 0 })
        ));
        let mut r = request();
        r.names = vec!["bad name!".into()];
        let e = generate(&r).unwrap_err().to_string();
        assert!(e.contains("bad name!"), "{e}");
    }

    #[test]
    fn nothing_is_overwritten_and_nothing_half_written() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("pki");
        let pki = generate(&request()).unwrap();
        let written = write(&out, &pki).unwrap();
        assert_eq!(written.len(), 6);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&out), 0o700);
        assert_eq!(mode(&out.join("ca-key.pem")), 0o600);
        assert_eq!(mode(&out.join("server.pem")), 0o644);
        let before = std::fs::read(out.join("ca.pem")).unwrap();
        // A second run into the same directory: refused, the old files as they were.
        let again = generate(&request()).unwrap();
        let e = write(&out, &again).unwrap_err();
        assert!(matches!(e, TlsInitError::Exists { .. }), "{e}");
        assert_eq!(std::fs::read(out.join("ca.pem")).unwrap(), before);
        // One name taken in a fresh directory: nothing of the new set is left.
        let fresh = dir.path().join("fresh");
        std::fs::create_dir(&fresh).unwrap();
        std::fs::write(fresh.join("client-key.pem"), "mine").unwrap();
        assert!(write(&fresh, &again).is_err());
        let left: Vec<_> = std::fs::read_dir(&fresh).unwrap().collect();
        assert_eq!(left.len(), 1);
    }
}
