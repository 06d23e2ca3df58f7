//! The PostgreSQL store over TLS (issue 15): `database_url`'s `sslmode`/`sslrootcert`, end to
//! end against a PostgreSQL cluster of the test's own (`common::pg_cluster`: initdb in a temp
//! dir, a free loopback port, stopped however the test ends), so the shared cluster of
//! `.ci/setup` is never reconfigured. Its certificate is made here with rcgen: a CA, a server
//! certificate for `localhost` signed by it, and a second CA that signed nothing.
//!
//! Hostile cases first: `require` against a server without TLS, a wrong CA, a certificate that
//! does not name the host; each fails naming `sslmode` and never printing the password. Then
//! `verify-ca` and `verify-full` work (a `ralph run` journals a whole job into the store over
//! TLS, and the server's `pg_stat_ssl` shows the sessions encrypted), and `disable` still works.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::pg_cluster::PgCluster;
use common::{complete_report, continue_report, wait_until};
use ralph_runner::store::postgres::target::Target;
use ralph_runner::store::{JobState, Store};

/// Never accepted by the cluster (trust auth) but carried in every URL: it must never be shown.
const PASSWORD: &str = "pw-never-shown-7d1c";

/// PEM files of a test PKI, in the cluster's directory.
struct Pki {
    ca: PathBuf,
    wrong_ca: PathBuf,
}

fn write_owned(path: &Path, content: &str, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, content).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    if nix::unistd::Uid::effective().is_root() {
        let pg = nix::unistd::User::from_name("postgres").unwrap().unwrap();
        std::os::unix::fs::chown(path, Some(pg.uid.as_raw()), Some(pg.gid.as_raw())).unwrap();
    }
}

fn ca(name: &str) -> (rcgen::Certificate, rcgen::KeyPair) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::CrlSign,
    ];
    (params.self_signed(&key).unwrap(), key)
}

/// Makes the PKI and turns TLS on in the cluster (a reload), waiting until new sessions see it.
fn enable_tls(cluster: &PgCluster) -> Pki {
    let (ca_cert, ca_key) = ca("ralph test CA");
    let (wrong_cert, _) = ca("some other CA");
    let server_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "localhost");
    let server = params.signed_by(&server_key, &ca_cert, &ca_key).unwrap();
    let dir = cluster.path();
    let pki = Pki {
        ca: dir.join("ca.pem"),
        wrong_ca: dir.join("wrong-ca.pem"),
    };
    write_owned(&pki.ca, &ca_cert.pem(), 0o644);
    write_owned(&pki.wrong_ca, &wrong_cert.pem(), 0o644);
    write_owned(&dir.join("server.pem"), &server.pem(), 0o644);
    write_owned(&dir.join("server.key"), &server_key.serialize_pem(), 0o600);
    let conf = dir.join("data/postgresql.conf");
    let mut text = std::fs::read_to_string(&conf).unwrap();
    text.push_str(&format!(
        "\nssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\n",
        dir.join("server.pem").display(),
        dir.join("server.key").display()
    ));
    std::fs::write(&conf, text).unwrap();
    admin(cluster)
        .batch_execute("SELECT pg_reload_conf()")
        .unwrap();
    wait_until("the cluster serves TLS", Duration::from_secs(30), || {
        let row = admin(cluster).query_one("SHOW ssl", &[]).unwrap();
        row.get::<_, String>(0) == "on"
    });
    pki
}

fn admin(cluster: &PgCluster) -> postgres::Client {
    postgres::Client::connect(&cluster.url, postgres::NoTls).unwrap()
}

/// The cluster's URL with `host`, the password, and `params`.
fn url(cluster: &PgCluster, host: &str, params: &str) -> String {
    format!(
        "postgres://ralph:{PASSWORD}@{host}:{}/postgres?{params}",
        cluster.port
    )
}

/// Whether a session opened with ralph's own client settings for `url` is encrypted, as the
/// server sees it.
fn session_is_tls(url: &str) -> bool {
    let target = Target::parse(url).unwrap();
    let mut client = target.config.connect(target.tls.clone()).unwrap();
    client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .unwrap()
        .get(0)
}

/// `ralph run` with an agent that completes in round 2, journalling into `url`.
fn run_job(f: &common::Fixture, url: &str) -> common::Output {
    let agent = f.agent(
        "two-rounds.sh",
        &format!(
            "if [ \"$RALPH_ROUND\" -ge 2 ]; then echo '{}' > \"$RALPH_REPORT_FILE\"; else echo '{}' > \"$RALPH_REPORT_FILE\"; fi",
            complete_report("done"),
            continue_report("more")
        ),
    );
    f.run(&agent)
        .args(["--max-rounds", "3"])
        .env("RALPH_DATABASE_URL", url)
        .output()
}

/// A refused `ralph run`: no job, the reason on stderr, no password anywhere.
fn assert_refused(out: &common::Output, words: &[&str]) {
    assert_ne!(out.code, 0, "stdout:\n{}", out.stdout);
    common::assert_no_result(out);
    for w in words {
        assert!(
            out.stderr.contains(w),
            "stderr lacks `{w}`:\n{}",
            out.stderr
        );
    }
    assert!(
        !out.stderr.contains(PASSWORD) && !out.stdout.contains(PASSWORD),
        "the password was printed:\n{}{}",
        out.stdout,
        out.stderr
    );
}

#[test]
fn require_fails_against_a_server_without_tls_and_disable_still_works() {
    let Some(cluster) = PgCluster::start("postgres_tls") else {
        return;
    };
    let f = common::Fixture::new();
    let out = run_job(&f, &url(&cluster, "localhost", "sslmode=require"));
    assert_refused(&out, &["does not offer TLS", "sslmode=require", "over TLS"]);

    // `disable` (and the default, `prefer`, against this server) still run a job.
    for params in ["sslmode=disable", "connect_timeout=10"] {
        let u = url(&cluster, "127.0.0.1", params);
        let out = run_job(&f, &u);
        out.expect_code(0);
        let id = out.job_id();
        let store = Store::open_postgres(&u).unwrap();
        let view = store.load(&id).unwrap();
        assert_eq!(view.state, JobState::Finished, "{params}");
        assert!(!session_is_tls(&u), "{params}");
    }
}

#[test]
fn verify_full_runs_a_job_over_tls_and_a_wrong_ca_or_host_name_is_refused() {
    let Some(cluster) = PgCluster::start("postgres_tls") else {
        return;
    };
    let pki = enable_tls(&cluster);
    let ca = pki.ca.display().to_string();
    let wrong = pki.wrong_ca.display().to_string();
    let f = common::Fixture::new();

    // A CA that did not sign the server's certificate.
    let out = run_job(
        &f,
        &url(
            &cluster,
            "localhost",
            &format!("sslmode=verify-full&sslrootcert={wrong}"),
        ),
    );
    assert_refused(
        &out,
        &[
            "not signed by a CA",
            "sslmode=verify-full",
            &wrong,
            "over TLS",
        ],
    );
    // `require` with a root certificate verifies the chain too (libpq).
    let out = run_job(
        &f,
        &url(
            &cluster,
            "localhost",
            &format!("sslmode=require&sslrootcert={wrong}"),
        ),
    );
    assert_refused(&out, &["not signed by a CA", "sslmode=require"]);
    // The right CA, but the certificate names `localhost`, not `127.0.0.1`.
    let out = run_job(
        &f,
        &url(
            &cluster,
            "127.0.0.1",
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        ),
    );
    assert_refused(
        &out,
        &["does not name the host `127.0.0.1`", "sslmode=verify-full"],
    );
    // verify-full without a CA is a configuration error, said before connecting.
    let out = run_job(&f, &url(&cluster, "localhost", "sslmode=verify-full"));
    assert_refused(&out, &["sslmode=verify-full", "needs sslrootcert"]);

    // verify-ca checks the CA only: 127.0.0.1 is fine.
    let u = url(
        &cluster,
        "127.0.0.1",
        &format!("sslmode=verify-ca&sslrootcert={ca}"),
    );
    assert!(session_is_tls(&u));
    Store::open_postgres(&u).unwrap();

    // verify-full with the right CA and name: a whole job, journalled over TLS.
    let u = url(
        &cluster,
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    let out = run_job(&f, &u);
    out.expect_code(0);
    let id = out.job_id();
    let store = Store::open_postgres(&u).unwrap();
    let view = store.load(&id).unwrap();
    assert_eq!(view.state, JobState::Finished);
    assert_eq!(view.outcome().map(|o| o.as_str()), Some("complete"));
    let types: Vec<String> = store
        .events(&id)
        .unwrap()
        .iter()
        .map(|e| {
            serde_json::to_value(e).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert!(types.iter().any(|t| t == "job_started"), "{types:?}");
    assert!(types.iter().any(|t| t == "job_finished"), "{types:?}");
    assert!(session_is_tls(&u));
    // `prefer` (the default) encrypts when the server offers TLS.
    assert!(session_is_tls(&url(
        &cluster,
        "localhost",
        "connect_timeout=10"
    )));
}
