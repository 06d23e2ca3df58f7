//! `ralph serve` on a network, TLS side (issue 15): HTTPS with certificates made here (rcgen),
//! the client's `--ca-file`, `RALPH_CA_FILE` and client certificate flags, plain HTTP to the TLS
//! port, mutual TLS, the refusal to listen in clear on a non-loopback address, and the
//! certificate reloaded on SIGHUP.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::tls_serve::{Serve, tempdir, write};
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};

/// A CA: its certificate and key.
struct Ca {
    cert: Certificate,
    key: KeyPair,
}

fn ca(name: &str) -> Ca {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, name);
    let key = KeyPair::generate().unwrap();
    let cert = p.self_signed(&key).unwrap();
    Ca { cert, key }
}

/// A leaf certificate signed by `ca`, as (cert PEM, key PEM).
fn leaf(ca: &Ca, names: &[&str], usage: ExtendedKeyUsagePurpose) -> (String, String) {
    let mut p =
        CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>()).unwrap();
    p.distinguished_name.push(
        DnType::CommonName,
        names.first().copied().unwrap_or("client"),
    );
    p.extended_key_usages = vec![usage];
    let key = KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, &ca.cert, &ca.key).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// The files of one test's PKI: the server's CA and certificate (for localhost and 127.0.0.1),
/// a CA nobody uses, a client CA and a client certificate.
struct Pki {
    ca: PathBuf,
    wrong_ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    client_ca: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

fn pki(dir: &Path) -> Pki {
    let server_ca = ca("ralph test server CA");
    let (cert, key) = leaf(
        &server_ca,
        &["localhost", "127.0.0.1"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let clients = ca("ralph test client CA");
    let (ccert, ckey) = leaf(
        &clients,
        &["ci-runner"],
        ExtendedKeyUsagePurpose::ClientAuth,
    );
    Pki {
        ca: write(dir, "ca.pem", &server_ca.cert.pem()),
        wrong_ca: write(dir, "wrong-ca.pem", &ca("some other CA").cert.pem()),
        cert: write(dir, "cert.pem", &cert),
        key: write(dir, "key.pem", &key),
        client_ca: write(dir, "client-ca.pem", &clients.cert.pem()),
        client_cert: write(dir, "client.pem", &ccert),
        client_key: write(dir, "client-key.pem", &ckey),
    }
}

fn tls_config(p: &Pki) -> String {
    format!(
        "tls_cert = \"{}\"\ntls_key = \"{}\"\n",
        p.cert.display(),
        p.key.display()
    )
}

#[test]
fn https_works_with_the_right_ca_and_fails_clearly_with_a_wrong_one() {
    let dir = tempdir();
    let p = pki(dir.path());
    let config = tls_config(&p);
    // TLS on: a non-loopback address is fine.
    let mut s = Serve::spawn(dir, "0.0.0.0", &config);
    let url = s.https();
    let ca = p.ca.display().to_string();
    let out = s.wait_until_ok(&["jobs", "--server", &url, "--ca-file", &ca, "--json"]);
    assert!(out.stdout.contains("\"jobs\""), "{}", out.stdout);
    assert!(
        s.log_text()
            .contains(&format!("listening on https://0.0.0.0:{}", s.port)),
        "{}",
        s.log_text()
    );
    // RALPH_CA_FILE does the same as --ca-file.
    let out = s.ralph(
        &["jobs", "--server", &url, "--json"],
        &[("RALPH_CA_FILE", &ca)],
    );
    out.expect_code(0);

    // A CA that did not sign the server's certificate: refused, saying what to do.
    let wrong = p.wrong_ca.display().to_string();
    for args in [
        vec![
            "jobs",
            "--server",
            url.as_str(),
            "--ca-file",
            wrong.as_str(),
        ],
        vec!["jobs", "--server", url.as_str()],
    ] {
        let out = s.ralph(&args, &[]);
        assert_eq!(out.code, 70, "{out:?}");
        assert!(
            out.stderr.contains("not signed by a CA this client trusts")
                && out.stderr.contains("--ca-file"),
            "{}",
            out.stderr
        );
        assert!(out.stdout.is_empty(), "{}", out.stdout);
    }

    // The right CA, a name the certificate does not hold.
    let other = format!("https://127.0.0.2:{}", s.port);
    let out = s.ralph(&["jobs", "--server", &other, "--ca-file", &ca], &[]);
    assert_eq!(out.code, 70, "{out:?}");
    assert!(
        out.stderr.contains("does not name the host"),
        "{}",
        out.stderr
    );

    // Plain HTTP to the TLS port: refused, pointing at https.
    let plain = format!("http://127.0.0.1:{}", s.port);
    let out = s.ralph(&["jobs", "--server", &plain], &[]);
    assert_ne!(out.code, 0, "{out:?}");
    assert!(out.stderr.contains("https://"), "{}", out.stderr);

    // A CA file that is not PEM: named.
    let junk = write(s.dir.path(), "junk.pem", "not a certificate\n");
    let out = s.ralph(
        &[
            "jobs",
            "--server",
            &url,
            "--ca-file",
            junk.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.code, 64, "{out:?}");
    assert!(
        out.stderr.contains("--ca-file") && out.stderr.contains("junk.pem"),
        "{}",
        out.stderr
    );
}

#[test]
fn mutual_tls_refuses_a_client_without_a_certificate() {
    let dir = tempdir();
    let p = pki(dir.path());
    let config = format!(
        "{}client_ca = \"{}\"\n",
        tls_config(&p),
        p.client_ca.display()
    );
    let mut s = Serve::spawn(dir, "127.0.0.1", &config);
    let url = s.https();
    let ca = p.ca.display().to_string();
    let (cert, key) = (
        p.client_cert.display().to_string(),
        p.client_key.display().to_string(),
    );
    s.wait_until_ok(&[
        "jobs",
        "--server",
        &url,
        "--ca-file",
        &ca,
        "--client-cert",
        &cert,
        "--client-key",
        &key,
    ]);
    // No client certificate: refused, saying which flags give one.
    let out = s.ralph(&["jobs", "--server", &url, "--ca-file", &ca], &[]);
    assert_eq!(out.code, 70, "{out:?}");
    assert!(
        out.stderr.contains("requires a client certificate")
            && out.stderr.contains("--client-cert"),
        "{}",
        out.stderr
    );
    // A certificate its CA did not sign (the server's own): refused too.
    let out = s.ralph(
        &[
            "jobs",
            "--server",
            &url,
            "--ca-file",
            &ca,
            "--client-cert",
            p.cert.to_str().unwrap(),
            "--client-key",
            p.key.to_str().unwrap(),
        ],
        &[],
    );
    assert_ne!(out.code, 0, "{out:?}");
    // The environment variables work like the flags.
    let out = s.ralph(
        &["jobs", "--server", &url],
        &[
            ("RALPH_CA_FILE", &ca),
            ("RALPH_CLIENT_CERT", &cert),
            ("RALPH_CLIENT_KEY", &key),
        ],
    );
    out.expect_code(0);
}

#[test]
fn a_non_loopback_address_without_tls_is_refused_unless_insecure_listen() {
    let mut s = Serve::spawn(tempdir(), "0.0.0.0", "");
    assert_eq!(s.wait_exit(), 64, "{}", s.log_text());
    let log = s.log_text();
    assert!(
        log.contains(&format!(
            "refusing to listen on `0.0.0.0:{}` without TLS",
            s.port
        )) && log.contains("tls_cert")
            && log.contains("insecure_listen"),
        "{log}"
    );
    // Loopback without TLS stays the default.
    let mut s = Serve::spawn(tempdir(), "127.0.0.1", "");
    let url = format!("http://127.0.0.1:{}", s.port);
    s.wait_until_ok(&["jobs", "--server", &url]);
    // insecure_listen = true: it listens, and the log says so.
    let mut s = Serve::spawn(tempdir(), "0.0.0.0", "insecure_listen = true\n");
    let url = format!("http://127.0.0.1:{}", s.port);
    s.wait_until_ok(&["jobs", "--server", &url]);
    assert!(
        s.log_text().contains("insecure_listen = true"),
        "{}",
        s.log_text()
    );
}

#[test]
fn the_certificate_is_reloaded_on_sighup() {
    let dir = tempdir();
    let p = pki(dir.path());
    let config = tls_config(&p);
    let mut s = Serve::spawn(dir, "127.0.0.1", &config);
    let url = s.https();
    let old_ca = p.ca.display().to_string();
    s.wait_until_ok(&["jobs", "--server", &url, "--ca-file", &old_ca]);
    // A new certificate from a new CA, in place of the old files.
    let new_ca = ca("ralph renewed CA");
    let (cert, key) = leaf(
        &new_ca,
        &["localhost", "127.0.0.1"],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let new_ca_file = write(s.dir.path(), "new-ca.pem", &new_ca.cert.pem());
    std::fs::write(&p.cert, cert).unwrap();
    std::fs::write(&p.key, key).unwrap();
    // Not before SIGHUP: the old certificate is still served.
    s.ralph(&["jobs", "--server", &url, "--ca-file", &old_ca], &[])
        .expect_code(0);
    s.signal(nix::sys::signal::Signal::SIGHUP);
    let new_ca_file = new_ca_file.display().to_string();
    s.wait_until_ok(&["jobs", "--server", &url, "--ca-file", &new_ca_file]);
    let out = s.ralph(&["jobs", "--server", &url, "--ca-file", &old_ca], &[]);
    assert_eq!(out.code, 70, "{out:?}");
    assert!(
        s.log_text().contains("TLS certificate reloaded"),
        "{}",
        s.log_text()
    );
    // A broken pair on SIGHUP: the log says so and the served certificate stays.
    std::fs::write(&p.key, "broken\n").unwrap();
    s.signal(nix::sys::signal::Signal::SIGHUP);
    let start = Instant::now();
    while !s.log_text().contains("TLS certificate not reloaded") {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{}",
            s.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    s.ralph(&["jobs", "--server", &url, "--ca-file", &new_ca_file], &[])
        .expect_code(0);
}

#[test]
fn the_dashboards_session_cookie_is_secure_under_tls() {
    let dir = tempdir();
    let p = pki(dir.path());
    let mut s = Serve::spawn(dir, "127.0.0.1", &tls_config(&p));
    let url = s.https();
    let ca = p.ca.display().to_string();
    s.wait_until_ok(&["jobs", "--server", &url, "--ca-file", &ca]);
    let pem = std::fs::read(&p.ca).unwrap();
    let token = s.token();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (status, set_cookie, location) = rt.block_on(async {
        let client = reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let r = client
            .post(format!("{url}/ui/login"))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(format!("token={token}"))
            .send()
            .await
            .unwrap();
        let h = |n: &str| {
            r.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        (r.status().as_u16(), h("set-cookie"), h("location"))
    });
    assert_eq!(status, 303);
    assert_eq!(location, "/ui/jobs");
    for attr in ["; Secure", "; HttpOnly", "; SameSite=Strict", "; Path=/ui"] {
        assert!(set_cookie.contains(attr), "{attr} missing: {set_cookie}");
    }
    assert!(!set_cookie.contains(&token));
}
