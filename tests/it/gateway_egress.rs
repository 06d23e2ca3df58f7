//! The egress proxy end to end (SPEC §5 "Network", §9): a round with `--allow-host` reaches
//! that service through the proxy (plain HTTP and a `CONNECT` tunnel), is refused everything
//! else with a 403 that is journalled and counted, and has no direct path at all.

use crate::common;

use common::model_server::{Api, ModelServer};
use common::*;
use std::path::PathBuf;

#[test]
fn an_allowed_host_is_reachable_through_the_proxy_and_nothing_else_is() {
    let f = Fixture::new();
    let allowed = ModelServer::start(Api::Chat, vec![]);
    let other = ModelServer::start(Api::Chat, vec![]);
    let (a, b) = (allowed.port(), other.port());
    let agent = f.agent(
        "egress.sh",
        &format!(
            r#"code() {{ curl -s -o /dev/null -w '%{{http_code}}' --max-time 20 "$@"; }}
# These loopback services are the test's stand-ins for remote hosts; the proxy is forced with
# --noproxy '' (without it, the allowed one goes through the proxy too: see the mirror test).
via() {{ code --noproxy '' -x "$HTTP_PROXY" "$@"; }}
via http://127.0.0.1:{a}/allowed > a.txt
via -p http://127.0.0.1:{a}/tunnel > tunnel.txt
via http://127.0.0.1:{b}/refused > b.txt
curl -s -o /dev/null -w '%{{http_connect}}' --max-time 20 --noproxy '' -x "$HTTP_PROXY" -p http://127.0.0.1:{b}/refused-tunnel > b-tunnel.txt
code --noproxy '*' http://127.0.0.1:{a}/direct > direct.txt
env | grep -i _proxy= | sort > proxy-env.txt
echo '{{"status":"complete","summary":"probed","evidence":["a"],"nextSteps":[],"blocker":""}}' > "$RALPH_REPORT_FILE""#
        ),
    );
    let prom = f.root.path().join("egress.prom");
    let out = f
        .run(&agent)
        .args(["--allow-host", &format!("127.0.0.1:{a}")])
        .arg("--metrics-textfile")
        .arg(&prom)
        .output();
    out.expect_code(0);
    assert_eq!(f.read_ws("a.txt"), "200");
    assert_eq!(f.read_ws("tunnel.txt"), "200");
    assert_eq!(f.read_ws("b.txt"), "403");
    // The proxy's answer to the refused CONNECT.
    assert_eq!(f.read_ws("b-tunnel.txt"), "403");
    assert_eq!(f.read_ws("direct.txt"), "000", "no direct route");
    let env = f.read_ws("proxy-env.txt");
    assert!(env.contains("HTTPS_PROXY=http://127.0.0.2:"), "{env}");
    // The allowed loopback host is not exempt; the gateway's address is.
    assert!(env.contains("NO_PROXY=127.0.0.2,localhost,::1\n"), "{env}");
    let paths: Vec<String> = allowed.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/allowed", "/tunnel"]);
    assert_eq!(other.request_count(), 0, "the refused service saw nothing");

    let events = f.events(&out.job_id());
    let egress: Vec<_> = events.iter().filter(|(t, _)| t == "egress").collect();
    let refused: Vec<_> = egress
        .iter()
        .filter(|(_, v)| v["allowed"] == false)
        .collect();
    assert_eq!(refused.len(), 2, "{egress:?}");
    assert!(
        refused
            .iter()
            .all(|(_, v)| v["host"] == "127.0.0.1" && v["port"] == b)
    );
    assert!(refused.iter().any(|(_, v)| v["method"] == "CONNECT"));
    assert_eq!(egress.len() - refused.len(), 2, "{egress:?}");
    let text = std::fs::read_to_string(&prom).unwrap();
    assert!(
        text.contains("ralph_egress_requests_total{decision=\"refused\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("ralph_egress_requests_total{decision=\"allowed\"} 2"),
        "{text}"
    );
}

#[test]
fn allow_host_needs_the_gateway_network_and_a_valid_entry() {
    let f = Fixture::new();
    let out = f
        .run_cmd("true")
        .args(["--allow-host", "example.com", "--network", "full"])
        .output();
    out.expect_code(64);
    assert!(out.stderr.contains("network") || out.stdout.contains("network"));
    let out = f
        .run_cmd("true")
        .args(["--allow-host", "exa mple.com:99999"])
        .output();
    out.expect_code(64);
    assert!(out.stderr.contains("--allow-host"), "{out:?}");
    assert!(out.stderr.contains("exa mple.com:99999"), "{out:?}");
}

#[test]
fn sandbox_exec_serves_the_egress_proxy_for_its_command() {
    let f = Fixture::new();
    let allowed = ModelServer::start(Api::Chat, vec![]);
    let other = ModelServer::start(Api::Chat, vec![]);
    let script = format!(
        "c() {{ curl -s -o /dev/null -w '%{{http_code}} ' --max-time 20 \"$@\"; }}; \
         c --noproxy '' -x \"$HTTP_PROXY\" http://127.0.0.1:{a}/ok; \
         c --noproxy '' -x \"$HTTP_PROXY\" http://127.0.0.1:{b}/no; \
         c --noproxy '*' http://127.0.0.1:{a}/direct",
        a = allowed.port(),
        b = other.port()
    );
    let out = Ralph::new()
        .args(["sandbox", "exec", "--mode", TEST_MODE])
        .args(["--allow-host", &format!("127.0.0.1:{}", allowed.port())])
        .arg("--workspace")
        .arg(&f.ws)
        .args(["--", "/bin/sh", "-c", &script])
        .output();
    // curl's last call fails to connect (exit 7): there is no direct route.
    assert_eq!(out.code, 7, "{out:?}");
    assert_eq!(out.stdout, "200 403 000 ");
    assert!(
        out.stderr
            .contains(&format!("egress refused: GET 127.0.0.1:{}", other.port())),
        "{}",
        out.stderr
    );
    assert_eq!(allowed.request_count(), 1);
    assert_eq!(other.request_count(), 0);
}

/// `=private` (a name that may resolve to private addresses) is checked where the entry is
/// given: a malformed opt-in, or one after an IP literal (explicit already), is a usage error
/// naming the entry (exit 64) for `ralph run` and `ralph sandbox exec`; a well-formed one runs.
#[test]
fn allow_host_private_opt_in_is_checked_where_it_is_given() {
    let f = Fixture::new();
    for bad in ["pypi.corp=privat", "10.1.2.3:3141=private"] {
        let out = f.run_cmd("true").args(["--allow-host", bad]).output();
        out.expect_code(64);
        assert!(
            out.stderr.contains(&format!("`{bad}`")) && out.stderr.contains("=private"),
            "{out:?}"
        );
        let out = Ralph::new()
            .args(["sandbox", "exec", "--mode", TEST_MODE, "--allow-host", bad])
            .arg("--workspace")
            .arg(&f.ws)
            .args(["--", "/bin/true"])
            .output();
        assert_eq!(out.code, 64, "{out:?}");
        assert!(out.stderr.contains(&format!("`{bad}`")), "{out:?}");
    }
    let out = Ralph::new()
        .args(["sandbox", "exec", "--mode", TEST_MODE])
        .args(["--allow-host", "pypi.corp:443=private"])
        .arg("--workspace")
        .arg(&f.ws)
        .args(["--", "/bin/sh", "-c", "echo \"$HTTPS_PROXY\""])
        .output();
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.starts_with("http://127.0.0.2:"), "{out:?}");
}

/// What the round runs against the mirror on the host's `127.0.0.1:$1` with the usual clients
/// as they come, the proxy variables ralph set and nothing else (no `--noproxy`, no proxy
/// flag): curl, Python's urllib, pip (into a virtualenv), npm and cargo (a sparse registry,
/// `cargo fetch`, whose toolchain is `$2`). Each writes NAME.out and NAME.rc.
const MIRROR_CLIENTS: &str = r#"cd "$RALPH_WORKSPACE"
m="http://127.0.0.1:$1"
run() { name=$1; shift; "$@" > "$name.out" 2>&1; echo $? > "$name.rc"; }
run curl curl -sS --max-time 30 "$m/ping"
run urllib /usr/bin/python3 -c "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=30).read().decode())" "$m/ping"
run pip sh -c "/usr/bin/python3 -m venv venv && venv/bin/pip install --disable-pip-version-check --index-url $m/simple/ ralph-mirror-probe && venv/bin/python -c 'import ralph_mirror_probe as p; print(p.VALUE)'"
mkdir npm-project
run npm sh -c "cd npm-project && /usr/bin/npm install --no-audit --no-fund --no-update-notifier --registry $m/ ralph-mirror-probe && /usr/bin/node -e 'console.log(require(\"ralph-mirror-probe\"))'"
mkdir -p cargo-project/src
printf '[package]\nname = "probe"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\nralph-mirror-probe = { version = "1", registry = "mirror" }\n' > cargo-project/Cargo.toml
: > cargo-project/src/lib.rs
[ "$2" = - ] || run cargo sh -c "cd cargo-project && CARGO_HOME=\$PWD/../cargo-home CARGO_REGISTRIES_MIRROR_INDEX=sparse+$m/index/ RUSTC=$2/rustc $2/cargo fetch && ls ../cargo-home/registry/cache/*/"
env | grep -i '^no_proxy=' > no-proxy.txt
echo '{"status":"complete","summary":"asked the mirror","evidence":["x"],"nextSteps":[],"blocker":""}' > "$RALPH_REPORT_FILE"
"#;

/// Issue 26 (SPEC §12): an allowed loopback host — a package mirror on the runner host,
/// `--allow-host 127.0.0.1:PORT` — works for pip, npm, cargo, curl and Python's urllib: they go
/// through the egress proxy to the host's mirror, because `NO_PROXY` names only the gateway's own
/// address. (It named `127.0.0.1`, so every client went to the round's own empty loopback.)
#[test]
fn an_allowed_loopback_mirror_works_for_pip_npm_cargo_curl_and_urllib() {
    let f = Fixture::new();
    let mirror = common::package_mirror::PackageMirror::start(f.root.path());
    // The toolchain of the cargo running this test (rustup's: `…/toolchains/NAME/bin/cargo`).
    // `cargo test` sets CARGO when it runs the test; a test binary run directly (CI's
    // unprivileged pass, under `env -i`) has the one that built it.
    let cargo = PathBuf::from(std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").into()));
    let bin = cargo.parent().unwrap().to_path_buf();
    let toolchain = bin.parent().unwrap();
    // A toolchain under a home this user cannot enter (root's rustup, seen by CI's unprivileged
    // pass) cannot be handed to the round; the root pass runs the cargo client.
    let with_cargo = std::process::Command::new(&cargo)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if with_cargo {
        assert!(
            bin.join("rustc").is_file(),
            "no rustc beside {}",
            cargo.display()
        );
    } else {
        eprintln!(
            "note: {} is not runnable by this user: the cargo client is left out of this pass",
            cargo.display()
        );
    }
    let agent = f.agent("mirror-clients.sh", MIRROR_CLIENTS);
    let out = f
        .run_cmd(&format!(
            "{} {} {}",
            agent.display(),
            mirror.port(),
            if with_cargo {
                bin.display().to_string()
            } else {
                "-".into()
            }
        ))
        .args(["--allow-host", &format!("127.0.0.1:{}", mirror.port())])
        .args(if with_cargo {
            vec!["--read".into(), toolchain.as_os_str().to_owned()]
        } else {
            vec![]
        })
        .args(["--round-timeout", "10m"])
        .output();
    out.expect_code(0);
    let requests = mirror.requests();
    for (client, says, agent_of) in [
        ("curl", "pong from the mirror", "curl/"),
        ("urllib", "pong from the mirror", "Python-urllib/"),
        ("pip", "from the mirror", "pip/"),
        ("npm", "from the mirror", "npm/"),
        ("cargo", "ralph-mirror-probe-1.0.0.crate", "cargo/"),
    ] {
        if client == "cargo" && !with_cargo {
            continue;
        }
        let text = f.read_ws(&format!("{client}.out"));
        assert_eq!(
            f.read_ws(&format!("{client}.rc")).trim(),
            "0",
            "{client}: {text}"
        );
        assert!(text.contains(says), "{client}: {text}");
        // The host's mirror served it.
        assert!(
            requests.iter().any(|r| r.contains(agent_of)),
            "{client} never reached the mirror: {requests:#?}"
        );
    }
    for wanted in [
        "/simple/ralph-mirror-probe/",
        "/files/ralph_mirror_probe-1.0-py3-none-any.whl",
        "/ralph-mirror-probe/-/ralph-mirror-probe-1.0.0.tgz",
        "/index/config.json",
        "/crates/ralph-mirror-probe/1.0.0/download",
    ] {
        if !with_cargo && (wanted.starts_with("/index/") || wanted.starts_with("/crates/")) {
            continue;
        }
        assert!(
            requests
                .iter()
                .any(|r| r.starts_with(&format!("GET {wanted} "))),
            "{wanted}: {requests:#?}"
        );
    }
    assert!(
        f.read_ws("no-proxy.txt")
            .contains("NO_PROXY=127.0.0.2,localhost,::1\n"),
        "{}",
        f.read_ws("no-proxy.txt")
    );
    // Every request went through the proxy, which allowed each.
    let egress: Vec<serde_json::Value> = f
        .events(&out.job_id())
        .into_iter()
        .filter(|(t, _)| t == "egress")
        .map(|(_, v)| v)
        .collect();
    assert!(egress.len() >= 5, "{egress:?}");
    assert!(
        egress.iter().all(|e| e["allowed"] == true
            && e["host"] == "127.0.0.1"
            && e["port"] == mirror.port()),
        "{egress:?}"
    );
}
