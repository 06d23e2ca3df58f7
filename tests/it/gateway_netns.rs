//! `--network gateway` on both backends, for real: the round keeps its private network
//! namespace (only `lo`: natively the round's own, on docker the container's with network mode
//! `none`), each requested port is a TCP listener made on `127.0.0.2` *inside* it (by the
//! sandbox's init) and handed to the caller, and the caller serves it from the host. Nothing
//! else of the host is reachable, and no descriptor of the hand-over reaches the command.
//!
//! Each case is written once and run against `ralph_sandbox::NativeBackend` (the `ralph` binary
//! hosts the helper) and `ralph_sandbox::docker::DockerBackend` (the `ralph` binary is the
//! container's init), with a command in `python3`, checking on the host side what arrived where.
//! The docker cases are the `docker_*` tests (they need the engine: `.ci/run` runs them as root
//! only). The `egress`
//! tests serve the runner's egress proxy (`ralph_runner::gateway::serve_egress`) on the round's
//! listener with names pinned to chosen addresses, and check which host listeners the round's
//! `HTTP_PROXY`/`HTTPS_PROXY` requests reached (issue 25: an allowed name never leads to this
//! host's own addresses, nor to private ones without `=private`).
//!
//! The native cases need no root: run as root (`cargo test`) and, through user namespaces, as
//! the unprivileged `ralph-ci` (`.ci/run` runs this binary as that user, docker cases skipped).

use crate::common;

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use ralph_sandbox::docker::DockerBackend;
use ralph_sandbox::native::NativeBackend;
use ralph_sandbox::outcome::{Level, Restriction};
use ralph_sandbox::policy::PolicySet;
use ralph_sandbox::{
    ExecIo, ExecReport, ExecSpec, Mode, Network, Running, Sandbox, SandboxError, SandboxRequest,
    StderrMode, StdinMode,
};
use tokio_util::sync::CancellationToken;

use crate::common::capture::{Buf, io_with};

fn backend() -> NativeBackend {
    NativeBackend::new(env!("CARGO_BIN_EXE_ralph"), PolicySet::embedded().unwrap())
}

/// The backend a case runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sb {
    Native,
    Docker,
}

/// Spawns `spec` on `sb` (docker: ralph's init, the image of the docker tests).
async fn spawn(sb: Sb, spec: &ExecSpec, io: ExecIo) -> Result<Box<dyn Running>, SandboxError> {
    match sb {
        Sb::Native => {
            // Through a helper started ahead: the hand-over's end travels in its order (the
            // egress cases below start a helper for their round, the hand-over inherited).
            let b = backend();
            b.prestart(spec.kill_grace);
            b.spawn(spec, io).await
        }
        Sb::Docker => {
            DockerBackend::new(std::sync::Arc::new(PolicySet::embedded().unwrap()))
                .with_init_program(env!("CARGO_BIN_EXE_ralph"))
                .spawn(spec, io)
                .await
        }
    }
}

/// One `#[test]` per backend for a case `fn name(sb: Sb)`: `name` (native) and `docker_name`
/// (skipped only where the docker tests may skip: no engine and `CI` unset).
macro_rules! both_backends {
    ($($case:ident => $docker:ident),* $(,)?) => {
        $(
            #[test]
            fn $docker() {
                if common::docker::ready(stringify!($docker)) {
                    $case(Sb::Docker);
                }
            }
        )*
    };
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A world under `/var/tmp` (the sandbox's `/tmp` is its own).
struct World {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

fn world() -> World {
    let dir = tempfile::Builder::new()
        .prefix("ralph-gateway-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let root = dir.path().canonicalize().unwrap();
    for d in ["ws", "home", "tmp", "control"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    World { _dir: dir, root }
}

fn spec(w: &World, mode: Mode, network: Network, ports: &[u16], script: &str) -> ExecSpec {
    let ws = w.root.join("ws");
    ExecSpec {
        argv: vec!["/usr/bin/python3".into(), "-c".into(), script.into()],
        cwd: ws.clone(),
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        stdin: StdinMode::Null,
        stderr: StderrMode::Separate,
        timeout: Some(Duration::from_secs(60)),
        kill_grace: Duration::from_secs(1),
        sandbox: SandboxRequest {
            network: Some(network),
            gateway_ports: ports.to_vec(),
            ..SandboxRequest::minimal(mode, ws, w.root.join("home"), w.root.join("tmp"))
        },
        control_dir: w.root.join("control"),
        listings: None,
        protected_copies: None,
        layers: None,
    }
}

fn io() -> (ExecIo, Buf, Buf) {
    io_with(None)
}

/// A port nobody on the host listens on right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `spec` on `sb` to the end, serving each gateway listener on a thread with `serve`.
fn run_serving(
    sb: Sb,
    spec: &ExecSpec,
    serve: fn(u16, TcpStream),
) -> (Result<ExecReport, SandboxError>, String, String, Vec<u16>) {
    let (io, out, err) = io();
    let rt = rt();
    let (report, ports) = rt.block_on(async {
        let mut run = match spawn(sb, spec, io).await {
            Ok(r) => r,
            Err(e) => return (Err(e), Vec::new()),
        };
        let listeners = run.take_gateway_listeners();
        assert!(
            run.take_gateway_listeners().is_empty(),
            "the listeners are handed out once"
        );
        let ports: Vec<u16> = listeners.iter().map(|(p, _)| *p).collect();
        for (port, l) in listeners {
            // What the runner will do: a tokio listener from the std one.
            let l = tokio::net::TcpListener::from_std(l).unwrap();
            tokio::spawn(async move {
                while let Ok((s, _)) = l.accept().await {
                    let s = s.into_std().unwrap();
                    s.set_nonblocking(false).unwrap();
                    std::thread::spawn(move || serve(port, s));
                }
            });
        }
        (run.wait(CancellationToken::new()).await, ports)
    });
    (report, out.text(), err.text(), ports)
}

/// Reads a line, answers `pong PORT: LINE`.
fn pong(port: u16, s: TcpStream) {
    let mut line = String::new();
    BufReader::new(s.try_clone().unwrap())
        .read_line(&mut line)
        .unwrap();
    let mut s = s;
    writeln!(s, "pong {port}: {}", line.trim()).unwrap();
}

both_backends! {
    the_gateway_is_reachable_and_the_host_is_not => docker_the_gateway_is_reachable_and_the_host_is_not,
    the_listeners_are_not_in_the_hosts_namespace => docker_the_listeners_are_not_in_the_hosts_namespace,
    no_listener_descriptor_reaches_the_command => docker_no_listener_descriptor_reaches_the_command,
    ip_sockets_inside_gateway_only => docker_ip_sockets_inside_gateway_only,
    gateway_ports_without_the_gateway_are_refused => docker_gateway_ports_without_the_gateway_are_refused,
}

/// The command talks to the gateway both ways on two ports; the host's own listener on another
/// port is not reachable (refused inside the private namespace) and never sees a connection;
/// the gateway ports do not exist in the host's namespace.
#[test]
fn native_the_gateway_is_reachable_and_the_host_is_not() {
    the_gateway_is_reachable_and_the_host_is_not(Sb::Native);
}

fn the_gateway_is_reachable_and_the_host_is_not(sb: Sb) {
    let w = world();
    let (g1, g2) = (free_port(), free_port());
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    host.set_nonblocking(true).unwrap();
    let host_port = host.local_addr().unwrap().port();
    let script = format!(
        r#"
import errno, socket
for port in ({g1}, {g2}):
    s = socket.create_connection(("127.0.0.2", port), timeout=20)
    s.sendall(b"ping from inside %d\n" % port)
    print("gateway", port, "->", s.makefile().readline().strip(), flush=True)
    s.close()
for host, port in (("127.0.0.1", {host_port}), ("::1", {g1}), ("127.0.0.1", {g1})):
    try:
        socket.create_connection((host, port), timeout=5)
        print("reached", host, port)
    except OSError as e:
        print("refused", host, port, errno.errorcode.get(e.errno, e.errno))
"#
    );
    let s = spec(
        &w,
        Mode::WorkspaceWrite,
        Network::Gateway,
        &[g1, g2],
        &script,
    );
    let (report, out, err, ports) = run_serving(sb, &s, pong);
    let report = report.unwrap_or_else(|e| panic!("{e}\nstdout: {out}\nstderr: {err}"));
    assert!(
        report.outcome.termination.success(),
        "{:?}\nstdout: {out}\nstderr: {err}",
        report.outcome.termination
    );
    assert_eq!(ports, [g1, g2]);
    for port in [g1, g2] {
        assert!(
            out.contains(&format!(
                "gateway {port} -> pong {port}: ping from inside {port}"
            )),
            "{out}\n{err}"
        );
    }
    assert!(
        out.contains(&format!("refused 127.0.0.1 {host_port} ECONNREFUSED")),
        "the host's listener must not be reachable: {out}"
    );
    assert!(
        out.contains(&format!("refused ::1 {g1} ")),
        "only 127.0.0.2 is served: {out}"
    );
    // The gateway has an address of its own: the round's 127.0.0.1 stays its own (what
    // `NO_PROXY` tells apart from an allowed mirror on the host's 127.0.0.1).
    assert!(
        out.contains(&format!("refused 127.0.0.1 {g1} ECONNREFUSED")),
        "the gateway is on 127.0.0.2 only: {out}"
    );
    assert_eq!(
        host.accept().map(|_| ()).unwrap_err().kind(),
        ErrorKind::WouldBlock,
        "the host listener saw a connection"
    );
    // The enforcement report says gateway, with the ports.
    let e = &report.outcome.enforcement;
    let net = e.network.as_ref().expect("a network entry");
    assert_eq!(net.network, Network::Gateway);
    assert_eq!(net.gateway_ports, [g1, g2]);
    let line = e
        .restrictions
        .iter()
        .find(|r| r.restriction == Restriction::Network)
        .unwrap();
    assert_eq!(line.level, Level::Full);
    assert!(
        line.detail.starts_with("gateway:") && line.detail.contains(&format!("port(s) {g1}, {g2}")),
        "{}",
        line.detail
    );
}

/// The listeners live in the round's namespace, not the host's: while the round runs, the
/// host's 127.0.0.2:PORT refuses.
#[test]
fn native_the_listeners_are_not_in_the_hosts_namespace() {
    the_listeners_are_not_in_the_hosts_namespace(Sb::Native);
}

fn the_listeners_are_not_in_the_hosts_namespace(sb: Sb) {
    let w = world();
    let g = free_port();
    let s = spec(
        &w,
        Mode::ReadOnly,
        Network::Gateway,
        &[g],
        "import time; time.sleep(30)",
    );
    let (io, _out, _err) = io();
    rt().block_on(async {
        let mut run = spawn(sb, &s, io).await.unwrap();
        let listeners = run.take_gateway_listeners();
        assert_eq!(listeners.len(), 1);
        let (port, l) = &listeners[0];
        assert_eq!(*port, g);
        // Non-blocking, close-on-exec, listening on 127.0.0.2:g.
        assert_eq!(
            l.local_addr().unwrap().to_string(),
            format!("127.0.0.2:{g}")
        );
        assert_eq!(l.accept().unwrap_err().kind(), ErrorKind::WouldBlock);
        let fd = std::os::fd::AsRawFd::as_raw_fd(l);
        // SAFETY: fcntl query on a descriptor this test owns.
        assert!(unsafe { libc::fcntl(fd, libc::F_GETFD) } & libc::FD_CLOEXEC != 0);
        let e = TcpStream::connect(("127.0.0.2", g)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
        let cancel = CancellationToken::new();
        cancel.cancel();
        let _ = run.wait(cancel).await;
    });
}

const FDS: &str = r#"
import os
fds = sorted(int(f) for f in os.listdir("/proc/self/fd"))
for f in fds:
    try:
        print(f, os.readlink("/proc/self/fd/%d" % f))
    except OSError as e:
        print(f, "?", e)
"#;

/// No descriptor of the hand-over (nor any listener) reaches the command: it has the same
/// descriptors as under `--network none`, and no socket among them.
#[test]
fn native_no_listener_descriptor_reaches_the_command() {
    no_listener_descriptor_reaches_the_command(Sb::Native);
}

fn no_listener_descriptor_reaches_the_command(sb: Sb) {
    let w = world();
    let listing = |network: Network, ports: &[u16]| {
        let s = spec(&w, Mode::WorkspaceWrite, network, ports, FDS);
        let (report, out, err, _) = run_serving(sb, &s, pong);
        let report = report.unwrap_or_else(|e| panic!("{e}\n{err}"));
        assert!(report.outcome.termination.success(), "{out}\n{err}");
        out
    };
    let gateway = listing(Network::Gateway, &[free_port(), free_port()]);
    let none = listing(Network::None, &[]);
    let numbers = |text: &str| -> Vec<String> {
        text.lines()
            .map(|l| l.split_whitespace().next().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        numbers(&gateway),
        numbers(&none),
        "gateway:\n{gateway}\nnone:\n{none}"
    );
    // 0, 1, 2 and the directory os.listdir reads.
    assert_eq!(numbers(&gateway), ["0", "1", "2", "3"], "{gateway}");
    assert!(!gateway.contains("socket:"), "{gateway}");
}

/// Inside the gateway namespace, ordinary local work keeps going: a server the command starts on
/// loopback and a client of it (Landlock does not restrict TCP there). AF_NETLINK stays refused.
/// With `--network none`, an AF_INET socket cannot even be created.
#[test]
fn native_ip_sockets_inside_gateway_only() {
    ip_sockets_inside_gateway_only(Sb::Native);
}

fn ip_sockets_inside_gateway_only(sb: Sb) {
    let w = world();
    let script = r#"
import errno, socket, threading
def probe(name, family, kind):
    try:
        socket.socket(family, kind).close()
        print(name, "ok")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
probe("inet", socket.AF_INET, socket.SOCK_STREAM)
probe("inet6", socket.AF_INET6, socket.SOCK_STREAM)
probe("netlink", socket.AF_NETLINK, socket.SOCK_RAW)
probe("unix", socket.AF_UNIX, socket.SOCK_STREAM)
try:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    def answer():
        c, _ = srv.accept()
        c.sendall(c.recv(64).upper())
    threading.Thread(target=answer).start()
    c = socket.create_connection(srv.getsockname(), timeout=10)
    c.sendall(b"local test server")
    print("local:", c.recv(64).decode())
except OSError as e:
    print("local:", errno.errorcode.get(e.errno, e.errno))
"#;
    let run = |network: Network| {
        let s = spec(&w, Mode::WorkspaceWrite, network, &[], script);
        let (report, out, err, _) = run_serving(sb, &s, pong);
        let report = report.unwrap_or_else(|e| panic!("{e}\n{err}"));
        assert!(report.outcome.termination.success(), "{out}\n{err}");
        out
    };
    let gateway = run(Network::Gateway);
    for want in [
        "inet ok",
        "inet6 ok",
        "netlink EPERM",
        "unix ok",
        "local: LOCAL TEST SERVER",
    ] {
        assert!(
            gateway.contains(want),
            "gateway: want `{want}` in\n{gateway}"
        );
    }
    let none = run(Network::None);
    for want in [
        "inet EPERM",
        "inet6 EPERM",
        "netlink EPERM",
        "unix ok",
        "local: EPERM",
    ] {
        assert!(none.contains(want), "none: want `{want}` in\n{none}");
    }
}

/// Ports asked for without `--network gateway` are refused before anything runs, naming the
/// field; so are malformed port lists. And a run inside the caller's process cannot serve them.
#[test]
fn native_gateway_ports_without_the_gateway_are_refused() {
    gateway_ports_without_the_gateway_are_refused(Sb::Native);
}

fn gateway_ports_without_the_gateway_are_refused(sb: Sb) {
    let w = world();
    let control = w.root.join("control");
    for (network, ports) in [
        (Network::None, vec![8080]),
        (Network::Full, vec![8080]),
        (Network::Gateway, vec![0]),
        (Network::Gateway, vec![8080, 8080]),
    ] {
        let s = spec(&w, Mode::WorkspaceWrite, network, &ports, "print('ran')");
        let (io, out, _) = io();
        let e = match rt().block_on(spawn(sb, &s, io)) {
            Ok(_) => panic!("{network} {ports:?}: spawned"),
            Err(e) => e,
        };
        match &e {
            SandboxError::InvalidRequest { field, .. } => {
                assert_eq!(field, "gateway_ports", "{network}: {e}");
            }
            other => panic!("{network} {ports:?}: expected a usage error, got {other:?}"),
        }
        assert!(e.to_string().contains("gateway_ports"), "{e}");
        assert!(out.text().is_empty());
        assert_eq!(
            std::fs::read_dir(&control).unwrap().count(),
            0,
            "nothing was set up"
        );
    }
    if sb == Sb::Docker {
        return;
    }
    let s = spec(
        &w,
        Mode::WorkspaceWrite,
        Network::Gateway,
        &[8080],
        "print('ran')",
    );
    let e = ralph_sandbox::native::exec_inline(&backend(), &s).unwrap_err();
    assert!(
        matches!(&e, SandboxError::Unavailable { restriction, .. } if restriction.contains("network")),
        "{e:?}"
    );
}

/// The hand-over fails closed: when the sandbox ends without handing the listeners over,
/// `spawn` fails with the network restriction named (exit 69), and nothing runs. The helper is
/// replaced by stand-ins: one that dies at once, and one that reports the init's failure the way
/// the real one does (a bind that failed inside the namespace).
#[test]
fn a_failed_hand_over_fails_closed() {
    use std::os::unix::fs::PermissionsExt;
    let w = world();
    let marker = w.root.join("ws/ran");
    let script = format!("open({:?}, 'w').write('ran')", marker.display().to_string());
    let s = spec(
        &w,
        Mode::WorkspaceWrite,
        Network::Gateway,
        &[free_port()],
        &script,
    );
    let result = w.root.join("control/sandbox-result.json");
    let failed = r#"{"result":"setup_failed","failure":{"restriction":"network isolation (the runner's gateway)","step":"bind","reason":"failed to listen on 127.0.0.1:1 for the runner's gateway: Address in use"}}"#;
    let canned = w.root.join("canned-result.json");
    std::fs::write(&canned, failed).unwrap();
    for (name, body, says) in [
        ("dies", "exit 3".to_owned(), "gateway listeners"),
        (
            "reports",
            format!("exec /bin/cp '{}' '{}'", canned.display(), result.display()),
            "failed to listen on 127.0.0.1:1",
        ),
    ] {
        let fake = w.root.join(format!("helper-{name}"));
        std::fs::write(&fake, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let b = NativeBackend::new(&fake, PolicySet::embedded().unwrap());
        let (io, _, _) = io();
        let e = rt().block_on(b.spawn(&s, io)).unwrap_err();
        match &e {
            SandboxError::Unavailable {
                restriction,
                reason,
            } => {
                assert!(restriction.contains("network"), "{name}: {e}");
                assert!(reason.contains(says), "{name}: {e}");
            }
            other => panic!("{name}: expected Unavailable, got {other:?}"),
        }
        assert_eq!(e.class(), ralph_sandbox::ErrorClass::Unavailable);
        assert_eq!(e.reason_label(), "network");
        assert!(!marker.exists());
    }
}

// ---------------------------------------------------------------------------------------------
// The egress proxy on the round's listener, with the runner's own decision code
// (`ralph_runner::gateway::serve_egress`), the real list of this host's addresses (getifaddrs),
// and answers pinned per name (a DNS rebinding, in effect): what a name may lead to.

mod egress {
    use std::collections::HashMap;
    use std::io::{BufRead, BufReader, Write};
    use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use ralph_runner::gateway::egress::InterfaceAddresses;
    use ralph_runner::gateway::egress::resolve::Resolving;
    use ralph_runner::gateway::{
        AllowHost, EgressConfig, EgressDecision, GatewaySink, ModelRequest, Resolve, serve_egress,
    };
    use ralph_sandbox::{Mode, Network, Sandbox};
    use tokio_util::sync::CancellationToken;

    use super::{backend, free_port, io, rt, spec, world};

    /// Answers from a fixed table, as a rebinding DNS server would.
    #[derive(Debug)]
    struct Pinned(HashMap<String, IpAddr>);

    impl Resolve for Pinned {
        fn resolve<'a>(&'a self, host: &'a str, port: u16) -> Resolving<'a> {
            let found = self.0.get(host).copied();
            Box::pin(async move {
                found
                    .map(|ip| vec![SocketAddr::new(ip, port)])
                    .ok_or_else(|| std::io::Error::other(format!("no such host {host}")))
            })
        }
    }

    #[derive(Default)]
    struct Decisions(Mutex<Vec<EgressDecision>>);

    impl GatewaySink for Decisions {
        fn model_request(&self, _: &ModelRequest) {}
        fn egress(&self, e: &EgressDecision) {
            self.0.lock().unwrap().push(e.clone());
        }
        fn budget_crossed(&self, _: u64, _: u64) {}
    }

    /// An HTTP service on the host that records every connection it gets (the request line)
    /// and answers `200 reached ADDR`.
    struct Service {
        addr: SocketAddr,
        seen: Arc<Mutex<Vec<String>>>,
    }

    impl Service {
        fn on(listener: TcpListener) -> Service {
            let addr = listener.local_addr().unwrap();
            let seen = Arc::new(Mutex::new(Vec::new()));
            let log = Arc::clone(&seen);
            std::thread::spawn(move || {
                for s in listener.incoming() {
                    let Ok(s) = s else { return };
                    let mut line = String::new();
                    let _ = BufReader::new(&s).read_line(&mut line);
                    if line.starts_with("STOP") {
                        return;
                    }
                    log.lock().unwrap().push(line.trim().to_owned());
                    let body = format!("reached {addr}");
                    let _ = write!(
                        &s,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                }
            });
            Service { addr, seen }
        }

        fn bind(ip: IpAddr) -> Service {
            Service::on(TcpListener::bind((ip, 0)).unwrap())
        }

        fn seen(&self) -> Vec<String> {
            self.seen.lock().unwrap().clone()
        }
    }

    /// The python the round runs: for each `(label, host, port)`, a GET through `HTTP_PROXY`
    /// (absolute form) and a GET inside a CONNECT tunnel through `HTTPS_PROXY`, one line each:
    /// `LABEL get|tunnel -> STATUS BODY`.
    fn round_script(targets: &[(String, String, u16)]) -> String {
        let list = targets
            .iter()
            .map(|(l, h, p)| format!("({l:?}, {h:?}, {p})"))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            r#"
import http.client, os, urllib.error, urllib.request
ph, pp = os.environ["HTTPS_PROXY"].rsplit("/", 1)[1].rsplit(":", 1)
def get(host, port, path):
    try:
        with urllib.request.urlopen("http://%s:%d%s" % (host, port, path), timeout=30) as r:
            return "%d %s" % (r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        return "%d %s" % (e.code, e.read().decode().strip())
    except OSError as e:
        return "error %s" % e
def tunnel(host, port, path):
    c = http.client.HTTPConnection(ph, int(pp), timeout=30)
    c.set_tunnel(host, port)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return "%d %s" % (r.status, r.read().decode())
    except OSError as e:
        return "error %s" % e
for label, host, port in [{list}]:
    print(label, "get ->", get(host, port, "/get-" + label), flush=True)
    print(label, "tunnel ->", tunnel(host, port, "/tunnel-" + label), flush=True)
"#
        )
    }

    /// Runs `script` in a `--network gateway` round whose egress proxy allows `allow`, with
    /// names pinned to `names`; returns the round's stdout and the proxy's decisions.
    fn round(
        allow: &[String],
        names: &[(&str, IpAddr)],
        script: &str,
    ) -> (String, Vec<EgressDecision>) {
        let w = world();
        let port = free_port();
        let mut s = spec(&w, Mode::WorkspaceWrite, Network::Gateway, &[port], script);
        let proxy = format!("http://127.0.0.2:{port}");
        s.env.push(("HTTP_PROXY".into(), proxy.clone()));
        s.env.push(("HTTPS_PROXY".into(), proxy));
        let cfg = EgressConfig {
            allow: allow
                .iter()
                .map(|a| a.parse::<AllowHost>().unwrap())
                .collect(),
            resolver: Arc::new(Pinned(
                names.iter().map(|(n, ip)| ((*n).to_owned(), *ip)).collect(),
            )),
            host: Arc::new(InterfaceAddresses),
            connect_timeout: Duration::from_secs(10),
        };
        let sink = Arc::new(Decisions::default());
        let (io, out, err) = io();
        let report = rt().block_on(async {
            let mut run = backend().spawn(&s, io).await.unwrap();
            let stop = CancellationToken::new();
            let (_, l) = run.take_gateway_listeners().into_iter().next().unwrap();
            let l = tokio::net::TcpListener::from_std(l).unwrap();
            let sink: Arc<dyn GatewaySink> = sink.clone();
            tokio::spawn(serve_egress(l, Arc::new(cfg), sink, stop.clone()));
            let report = run.wait(CancellationToken::new()).await;
            stop.cancel();
            report
        });
        let (out, err) = (out.text(), err.text());
        let report = report.unwrap_or_else(|e| panic!("{e}\nstdout: {out}\nstderr: {err}"));
        assert!(
            report.outcome.termination.success(),
            "{:?}\nstdout: {out}\nstderr: {err}",
            report.outcome.termination
        );
        let decisions = sink.0.lock().unwrap().clone();
        (out, decisions)
    }

    /// This host's IPv4 addresses that are not loopback or link-local (eth0's, docker0's, ...),
    /// read with getifaddrs independently of the code under test.
    fn own_addresses() -> Vec<Ipv4Addr> {
        let mut out = Vec::new();
        for ifa in nix::ifaddrs::getifaddrs().unwrap() {
            let Some(v4) = ifa.address.as_ref().and_then(|a| a.as_sockaddr_in()) else {
                continue;
            };
            let ip = v4.ip();
            if !ip.is_loopback() && !ip.is_link_local() && !out.contains(&ip) {
                out.push(ip);
            }
        }
        out
    }

    fn line<'a>(out: &'a str, label: &str, how: &str) -> &'a str {
        let start = format!("{label} {how} -> ");
        out.lines()
            .find_map(|l| l.strip_prefix(&start))
            .unwrap_or_else(|| panic!("no `{start}` line in\n{out}"))
    }

    /// Issue 25: an allowed name whose answer is one of the runner host's own addresses (the
    /// LAN address, the docker0 bridge) was connected to. Now the listener bound there gets no
    /// connection through the name (GET and CONNECT), the round gets a 403 naming the address
    /// and how to allow it, the decision is reported with the class; the same listener named
    /// by its IP literal is reached.
    #[test]
    fn egress_a_name_resolving_to_an_address_of_this_host_never_reaches_it() {
        let own = own_addresses();
        assert!(
            !own.is_empty(),
            "this host has no non-loopback IPv4 address to test with"
        );
        let services: Vec<Service> = own.iter().map(|ip| Service::bind((*ip).into())).collect();
        let mut allow = Vec::new();
        let mut names = Vec::new();
        let mut targets = Vec::new();
        for (i, svc) in services.iter().enumerate() {
            let (ip, port) = (svc.addr.ip(), svc.addr.port());
            let name = format!("mirror{i}.rebind.test");
            allow.push(format!("{name}:{port}"));
            allow.push(format!("{ip}:{port}"));
            targets.push((format!("name{i}"), name.clone(), port));
            targets.push((format!("literal{i}"), ip.to_string(), port));
            names.push((name, ip));
        }
        let pinned: Vec<(&str, IpAddr)> = names.iter().map(|(n, ip)| (n.as_str(), *ip)).collect();
        let (out, decisions) = round(&allow, &pinned, &round_script(&targets));
        for (i, svc) in services.iter().enumerate() {
            let (ip, port) = (svc.addr.ip(), svc.addr.port());
            assert_eq!(
                svc.seen(),
                [
                    format!("GET /get-literal{i} HTTP/1.1"),
                    format!("GET /tunnel-literal{i} HTTP/1.1"),
                ],
                "the listener on {ip} got only the literal's requests\n{out}"
            );
            for how in ["get", "tunnel"] {
                let got = line(&out, &format!("name{i}"), how);
                if how == "get" {
                    assert_eq!(
                        got,
                        format!(
                            "403 ralph egress proxy: mirror{i}.rebind.test:{port} resolves to \
                             {ip}, an address of this host; refused (to reach it on purpose, \
                             allow the address itself: `--allow-host {ip}:{port}`)"
                        ),
                        "{out}"
                    );
                } else {
                    assert!(got.contains("403"), "{how} {ip}: {got}\n{out}");
                }
                let got = line(&out, &format!("literal{i}"), how);
                assert_eq!(got, format!("200 reached {ip}:{port}"), "{how}: {out}");
            }
            let refused: Vec<_> = decisions
                .iter()
                .filter(|d| d.host == format!("mirror{i}.rebind.test"))
                .collect();
            assert_eq!(refused.len(), 2, "{decisions:?}");
            for d in refused {
                assert!(!d.allowed, "{d:?}");
                assert_eq!(
                    d.reason,
                    format!("resolves to {ip}, an address of this host")
                );
            }
        }
    }

    /// A network namespace of the test's own on the other end of a veth pair: `10.231.N.2` is
    /// a private address that is not this host's (the host's end, `10.231.N.1`, is). Lives in
    /// a thread of this process (`unshare(CLONE_NEWNET)`), so it goes away with the process
    /// whatever happens; dropped, the link is deleted and the thread ends.
    struct PrivatePeer {
        host_end: String,
        peer: Service,
        stop: Arc<AtomicBool>,
        thread: Option<std::thread::JoinHandle<()>>,
        host_ip: Ipv4Addr,
    }

    fn ip_cmd(args: &[&str]) {
        let out = std::process::Command::new("ip")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    impl PrivatePeer {
        fn new() -> PrivatePeer {
            let id = std::process::id();
            let n = (id % 250) as u8;
            let (host_ip, peer_ip) = (Ipv4Addr::new(10, 231, n, 1), Ipv4Addr::new(10, 231, n, 2));
            let host_end = format!("regh{}", id % 10_000_000);
            let peer_end = format!("regp{}", id % 10_000_000);
            let (tid_tx, tid_rx) = std::sync::mpsc::channel();
            let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
            let (svc_tx, svc_rx) = std::sync::mpsc::channel();
            let stop = Arc::new(AtomicBool::new(false));
            let stopping = Arc::clone(&stop);
            let peer_name = peer_end.clone();
            let thread = std::thread::spawn(move || {
                nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
                tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
                go_rx.recv().unwrap();
                // Commands started from this thread run in its namespace.
                ip_cmd(&["link", "set", "lo", "up"]);
                ip_cmd(&["addr", "add", &format!("{peer_ip}/30"), "dev", &peer_name]);
                ip_cmd(&["link", "set", &peer_name, "up"]);
                let l = TcpListener::bind((peer_ip, 0)).unwrap();
                svc_tx.send(l.try_clone().unwrap()).unwrap();
                // Serve here (the listener's namespace is fixed at its creation, but keep the
                // thread alive until the drop so the namespace and its link stay).
                while !stopping.load(Ordering::SeqCst) {
                    std::thread::park();
                }
            });
            let tid = tid_rx.recv().unwrap();
            ip_cmd(&[
                "link",
                "add",
                &host_end,
                "type",
                "veth",
                "peer",
                "name",
                &peer_end,
                "netns",
                &tid.to_string(),
            ]);
            ip_cmd(&["addr", "add", &format!("{host_ip}/30"), "dev", &host_end]);
            ip_cmd(&["link", "set", &host_end, "up"]);
            go_tx.send(()).unwrap();
            let peer = Service::on(svc_rx.recv().unwrap());
            PrivatePeer {
                host_end,
                peer,
                stop,
                thread: Some(thread),
                host_ip,
            }
        }
    }

    impl Drop for PrivatePeer {
        fn drop(&mut self) {
            // End the peer's accept loop, then the namespace's thread, then the link.
            if let Ok(mut s) = TcpStream::connect_timeout(&self.peer.addr, Duration::from_secs(5)) {
                let _ = s.write_all(b"STOP\r\n");
            }
            self.stop.store(true, Ordering::SeqCst);
            if let Some(t) = self.thread.take() {
                t.thread().unpark();
                let _ = t.join();
            }
            let _ = std::process::Command::new("ip")
                .args(["link", "del", &self.host_end])
                .output();
        }
    }

    /// A name that resolves to a private address (an internal registry) is refused without the
    /// opt-in, with a 403 saying how to opt in, and reaches the service with `=private`; even
    /// opted in, a name resolving to this host's own end of the link is refused.
    #[test]
    fn egress_a_private_address_needs_the_opt_in_and_this_hosts_never_does() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!(
                "skipped: making a network namespace and a veth pair on the host needs root \
                 (the decision itself is covered by the lib tests and the test above)"
            );
            return;
        }
        let net = PrivatePeer::new();
        let own_end = Service::bind(net.host_ip.into());
        let (pip, pport) = (net.peer.addr.ip(), net.peer.addr.port());
        let oport = own_end.addr.port();
        // Reachable from here by number: the link works (the answer comes after the record).
        let mut probe =
            TcpStream::connect_timeout(&net.peer.addr, Duration::from_secs(10)).unwrap();
        probe.write_all(b"GET /probe HTTP/1.1\r\n\r\n").unwrap();
        let mut answer = String::new();
        std::io::Read::read_to_string(&mut probe, &mut answer).unwrap();
        assert!(
            answer.ends_with(&format!("reached {pip}:{pport}")),
            "{answer}"
        );
        assert_eq!(net.peer.seen(), ["GET /probe HTTP/1.1"]);
        net.peer.seen.lock().unwrap().clear();
        let targets = [
            ("plain".to_owned(), "pypi.corp".to_owned(), pport),
            ("optin".to_owned(), "pypi2.corp".to_owned(), pport),
            ("ownend".to_owned(), "gw.corp".to_owned(), oport),
        ];
        let (out, decisions) = round(
            &[
                format!("pypi.corp:{pport}"),
                format!("pypi2.corp:{pport}=private"),
                format!("gw.corp:{oport}=private"),
            ],
            &[
                ("pypi.corp", pip),
                ("pypi2.corp", pip),
                ("gw.corp", own_end.addr.ip()),
            ],
            &round_script(&targets),
        );
        assert_eq!(
            net.peer.seen(),
            ["GET /get-optin HTTP/1.1", "GET /tunnel-optin HTTP/1.1"],
            "the private service got only the opted-in name's requests\n{out}"
        );
        assert!(
            own_end.seen().is_empty(),
            "this host's end got {:?}\n{out}",
            own_end.seen()
        );
        assert_eq!(
            line(&out, "plain", "get"),
            format!(
                "403 ralph egress proxy: pypi.corp:{pport} resolves to {pip}, a private \
                 address; refused (if pypi.corp is an internal host, let it resolve to private \
                 addresses with `--allow-host pypi.corp:{pport}=private`, or allow the address \
                 itself with `--allow-host {pip}:{pport}`)"
            ),
            "{out}"
        );
        assert!(line(&out, "plain", "tunnel").contains("403"), "{out}");
        for how in ["get", "tunnel"] {
            assert_eq!(
                line(&out, "optin", how),
                format!("200 reached {pip}:{pport}"),
                "{out}"
            );
            let own = line(&out, "ownend", how);
            assert!(own.contains("403"), "{how}: {own}\n{out}");
        }
        assert!(
            line(&out, "ownend", "get").contains("an address of this host"),
            "{out}"
        );
        let reason = |host: &str| {
            decisions
                .iter()
                .filter(|d| d.host == host)
                .map(|d| (d.allowed, d.reason.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            reason("pypi.corp"),
            vec![(false, format!("resolves to {pip}, a private address")); 2]
        );
        assert_eq!(
            reason("pypi2.corp"),
            vec![(true, format!("allowed by pypi2.corp:{pport}=private")); 2]
        );
        assert_eq!(
            reason("gw.corp"),
            vec![
                (
                    false,
                    format!("resolves to {}, an address of this host", net.host_ip)
                );
                2
            ]
        );
    }
}
