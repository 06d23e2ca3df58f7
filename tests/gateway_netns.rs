//! `--network gateway` on the native backend, for real: the round keeps its private network
//! namespace (only `lo`), each requested port is a TCP listener made on `127.0.0.1` *inside* it
//! and handed to the caller, and the caller serves it from the host. Nothing else of the host is
//! reachable, and no descriptor of the hand-over reaches the command.
//!
//! Each test drives `ralph_sandbox::NativeBackend` directly (the `ralph` binary hosts the helper)
//! with a command in `python3`, and checks on the host side what arrived where.
//!
//! Nothing here needs root: run as root (`cargo test`) and, through user namespaces, as the
//! unprivileged `ralph-ci` (`.ci/run` runs this binary as that user).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ralph_sandbox::native::NativeBackend;
use ralph_sandbox::outcome::{CaptureSummary, Level, Restriction};
use ralph_sandbox::policy::PolicySet;
use ralph_sandbox::{
    Backend, ExecIo, ExecReport, ExecSpec, Limits, Mode, Network, PrivateDirs, Running,
    SandboxError, SandboxRequest, StderrMode, StdinMode,
};
use tokio_util::sync::CancellationToken;

fn backend() -> NativeBackend {
    NativeBackend::new(env!("CARGO_BIN_EXE_ralph"), PolicySet::embedded().unwrap())
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
    for d in ["ws", "home", "tmp"] {
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
            mode,
            network: Some(network),
            workspace: ws,
            protect: Vec::new(),
            read: Vec::new(),
            write: Vec::new(),
            sockets: Vec::new(),
            private: PrivateDirs {
                home: w.root.join("home"),
                tmp: w.root.join("tmp"),
                readable: Vec::new(),
                writable: Vec::new(),
                report: None,
            },
            limits: Limits::default(),
            image: None,
            forbidden: Vec::new(),
            agent_user: None,
            gateway_ports: ports.to_vec(),
        },
        control_dir: w.root.join("control"),
    }
}

/// Captures into a shared buffer.
#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl ralph_sandbox::capture::OutputSink for Buf {
    fn write(&mut self, chunk: &[u8]) -> std::io::Result<()> {
        self.0.lock().unwrap().extend_from_slice(chunk);
        Ok(())
    }
    fn finish(self: Box<Self>) -> std::io::Result<CaptureSummary> {
        Ok(CaptureSummary::default())
    }
}

impl Buf {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

fn io() -> (ExecIo, Buf, Buf) {
    let (out, err) = (Buf::default(), Buf::default());
    (
        ExecIo {
            stdin: None,
            stdout: Box::new(out.clone()),
            stderr: Box::new(err.clone()),
        },
        out,
        err,
    )
}

/// A port nobody on the host listens on right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `spec` to the end, serving each gateway listener on a thread with `serve`.
fn run_serving(
    spec: &ExecSpec,
    serve: fn(u16, TcpStream),
) -> (Result<ExecReport, SandboxError>, String, String, Vec<u16>) {
    let (io, out, err) = io();
    let rt = rt();
    let (report, ports) = rt.block_on(async {
        let mut run = match backend().spawn(spec, io).await {
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

/// The command talks to the gateway both ways on two ports; the host's own listener on another
/// port is not reachable (refused inside the private namespace) and never sees a connection;
/// the gateway ports do not exist in the host's namespace.
#[test]
fn the_gateway_is_reachable_and_the_host_is_not() {
    let w = world();
    let (g1, g2) = (free_port(), free_port());
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    host.set_nonblocking(true).unwrap();
    let host_port = host.local_addr().unwrap().port();
    let script = format!(
        r#"
import errno, socket
for port in ({g1}, {g2}):
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    s.sendall(b"ping from inside %d\n" % port)
    print("gateway", port, "->", s.makefile().readline().strip(), flush=True)
    s.close()
for host, port in (("127.0.0.1", {host_port}), ("::1", {g1})):
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
    let (report, out, err, ports) = run_serving(&s, pong);
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
        "only 127.0.0.1 is served: {out}"
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
/// host's 127.0.0.1:PORT refuses.
#[test]
fn the_listeners_are_not_in_the_hosts_namespace() {
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
        let mut run = backend().spawn(&s, io).await.unwrap();
        let listeners = run.take_gateway_listeners();
        assert_eq!(listeners.len(), 1);
        let (port, l) = &listeners[0];
        assert_eq!(*port, g);
        // Non-blocking, close-on-exec, listening on 127.0.0.1:g.
        assert_eq!(
            l.local_addr().unwrap().to_string(),
            format!("127.0.0.1:{g}")
        );
        assert_eq!(l.accept().unwrap_err().kind(), ErrorKind::WouldBlock);
        let fd = std::os::fd::AsRawFd::as_raw_fd(l);
        // SAFETY: fcntl query on a descriptor this test owns.
        assert!(unsafe { libc::fcntl(fd, libc::F_GETFD) } & libc::FD_CLOEXEC != 0);
        let e = TcpStream::connect(("127.0.0.1", g)).unwrap_err();
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
fn no_listener_descriptor_reaches_the_command() {
    let w = world();
    let listing = |network: Network, ports: &[u16]| {
        let s = spec(&w, Mode::WorkspaceWrite, network, ports, FDS);
        let (report, out, err, _) = run_serving(&s, pong);
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
fn ip_sockets_inside_gateway_only() {
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
        let (report, out, err, _) = run_serving(&s, pong);
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
fn gateway_ports_without_the_gateway_are_refused() {
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
        let e = rt().block_on(backend().spawn(&s, io)).unwrap_err();
        match &e {
            SandboxError::InvalidRequest { field, .. } => {
                assert_eq!(field, "gateway_ports", "{network}: {e}");
            }
            other => panic!("{network} {ports:?}: expected a usage error, got {other:?}"),
        }
        assert!(e.to_string().contains("gateway_ports"), "{e}");
        assert!(out.text().is_empty());
        assert!(!control.exists(), "nothing was set up");
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
