//! TLS as operators set it up (issue 27): the usual self-signed certificate made by the real
//! `openssl req -x509` (OpenSSL 3 marks it `CA:TRUE`) given as the client's `--ca-file` is pinned
//! and works, another self-signed certificate is refused saying what to do; `ralph tls init`'s
//! CA, server and client certificates work with the real `curl` and with the ralph client,
//! mutual TLS included.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::Output;
use common::tls_serve::{Serve, tempdir};

/// `PROGRAM ARGS`, its output.
fn run(program: &str, args: &[&str]) -> Output {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("`{program}` is needed by this test and did not run: {e}"));
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A self-signed certificate and key as the OpenSSL documentation makes one, for `cn` and
/// `san`; returns (certificate, key).
fn openssl_self_signed(dir: &Path, stem: &str, cn: &str, san: &str) -> (PathBuf, PathBuf) {
    let cert = dir.join(format!("{stem}.pem"));
    let key = dir.join(format!("{stem}-key.pem"));
    let out = run(
        "openssl",
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "30",
            "-subj",
            &format!("/CN={cn}"),
            "-addext",
            &format!("subjectAltName={san}"),
            "-keyout",
            key.to_str().unwrap(),
            "-out",
            cert.to_str().unwrap(),
        ],
    );
    out.expect_code(0);
    // What makes rustls' WebPKI refuse it as a server's own certificate.
    let text = run(
        "openssl",
        &["x509", "-in", cert.to_str().unwrap(), "-noout", "-text"],
    );
    assert!(text.stdout.contains("CA:TRUE"), "{}", text.stdout);
    (cert, key)
}

fn tls_config(cert: &Path, key: &Path) -> String {
    format!(
        "tls_cert = \"{}\"\ntls_key = \"{}\"\n",
        cert.display(),
        key.display()
    )
}

/// `curl ARGS URL/v1/jobs` with the server's token.
fn curl(s: &Serve, args: &[&str]) -> Output {
    let auth = format!("Authorization: Bearer {}", s.token());
    let url = format!("{}/v1/jobs", s.https());
    let mut all = vec!["-sS", "--fail", "--max-time", "20", "-H", &auth];
    all.extend_from_slice(args);
    all.push(&url);
    run("curl", &all)
}

#[test]
fn the_openssl_self_signed_certificate_works_as_its_own_ca_file() {
    let dir = tempdir();
    let (cert, key) = openssl_self_signed(
        dir.path(),
        "self",
        "localhost",
        "DNS:localhost,IP:127.0.0.1",
    );
    let (other, _) = openssl_self_signed(
        dir.path(),
        "other",
        "localhost",
        "DNS:localhost,IP:127.0.0.1",
    );
    let mut s = Serve::spawn(dir, "127.0.0.1", &tls_config(&cert, &key));
    let url = s.https();
    let pinned = cert.display().to_string();
    // The server's own certificate as --ca-file: pinned, the call works (as with curl).
    let out = s.wait_until_ok(&["jobs", "--server", &url, "--ca-file", &pinned, "--json"]);
    assert!(out.stdout.contains("\"jobs\""), "{}", out.stdout);
    curl(&s, &["--cacert", &pinned]).expect_code(0);
    let localhost = format!("https://localhost:{}", s.port);
    s.ralph(&["jobs", "--server", &localhost, "--ca-file", &pinned], &[])
        .expect_code(0);

    // Another self-signed certificate, or none: refused, saying what to give.
    let other = other.display().to_string();
    for args in [
        vec![
            "jobs",
            "--server",
            url.as_str(),
            "--ca-file",
            other.as_str(),
        ],
        vec!["jobs", "--server", url.as_str()],
    ] {
        let out = s.ralph(&args, &[]);
        assert_eq!(out.code, 70, "{out:?}");
        assert!(
            out.stderr
                .contains("self-signed (CA) certificate that is not in --ca-file")
                && out.stderr.contains("it is then pinned"),
            "{}",
            out.stderr
        );
        assert!(out.stdout.is_empty(), "{}", out.stdout);
    }
    // curl refuses it too.
    assert_ne!(curl(&s, &["--cacert", &other]).code, 0);
}

#[test]
fn a_pinned_certificate_must_still_name_the_host() {
    let dir = tempdir();
    let (cert, key) = openssl_self_signed(dir.path(), "elsewhere", "elsewhere", "DNS:elsewhere");
    let s = Serve::spawn(dir, "127.0.0.1", &tls_config(&cert, &key));
    let url = s.https();
    let pinned = cert.display().to_string();
    // Up: its log says it listens (the client cannot get in to tell).
    let start = std::time::Instant::now();
    while !s.log_text().contains("listening on https://") {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(30),
            "{}",
            s.log_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = s.ralph(&["jobs", "--server", &url, "--ca-file", &pinned], &[]);
    assert_eq!(out.code, 70, "{out:?}");
    assert!(
        out.stderr.contains("does not name the host"),
        "{}",
        out.stderr
    );
}

#[test]
fn tls_init_output_works_with_curl_and_ralph_mutual_tls_included() {
    let dir = tempdir();
    let pki = dir.path().join("pki");
    let pki_arg = pki.display().to_string();
    let init = run(
        common::ralph_bin().to_str().unwrap(),
        &[
            "tls",
            "init",
            "--dir",
            &pki_arg,
            "--name",
            "localhost",
            "--name",
            "127.0.0.1",
            "--client",
            "ci",
        ],
    );
    init.expect_code(0);
    for f in [
        "ca.pem",
        "ca-key.pem",
        "server.pem",
        "server-key.pem",
        "ci.pem",
        "ci-key.pem",
    ] {
        assert!(init.stderr.contains(f), "{f}: {}", init.stderr);
    }
    // What it prints is the service configuration (comments and keys), used as it is.
    assert!(
        init.stdout.contains("client_ca = ") && init.stdout.contains("--client-cert"),
        "{}",
        init.stdout
    );
    let file = |n: &str| pki.join(n).display().to_string();
    let (ca, cert, key) = (file("ca.pem"), file("ci.pem"), file("ci-key.pem"));

    let mut s = Serve::spawn(dir, "127.0.0.1", &init.stdout);
    let url = s.https();
    let with_cert = [
        "--ca-file",
        ca.as_str(),
        "--client-cert",
        cert.as_str(),
        "--client-key",
        key.as_str(),
    ];
    let mut args = vec!["jobs", "--server", url.as_str()];
    args.extend_from_slice(&with_cert);
    s.wait_until_ok(&args);
    // The real curl, with the CA and the client certificate.
    let out = curl(&s, &["--cacert", &ca, "--cert", &cert, "--key", &key]);
    out.expect_code(0);
    assert!(out.stdout.contains("\"jobs\""), "{}", out.stdout);
    // Without a client certificate: refused, by curl and by ralph (saying which flags give one).
    assert_ne!(curl(&s, &["--cacert", &ca]).code, 0);
    let out = s.ralph(&["jobs", "--server", &url, "--ca-file", &ca], &[]);
    assert_eq!(out.code, 70, "{out:?}");
    assert!(
        out.stderr.contains("requires a client certificate"),
        "{}",
        out.stderr
    );
    // The server's certificate is no client's (its key usage says server).
    let out = s.ralph(
        &[
            "jobs",
            "--server",
            &url,
            "--ca-file",
            &ca,
            "--client-cert",
            &file("server.pem"),
            "--client-key",
            &file("server-key.pem"),
        ],
        &[],
    );
    assert_ne!(out.code, 0, "{out:?}");

    // A second init into the same directory: refused, nothing replaced.
    let before = std::fs::read(pki.join("ca.pem")).unwrap();
    let again = run(
        common::ralph_bin().to_str().unwrap(),
        &["tls", "init", "--dir", &pki_arg, "--name", "localhost"],
    );
    assert_eq!(again.code, 64, "{again:?}");
    assert!(again.stderr.contains("already exists"), "{}", again.stderr);
    assert_eq!(std::fs::read(pki.join("ca.pem")).unwrap(), before);
}
