//! End-to-end tests of the egress proxy with raw HTTP/1.1 clients, a mock HTTP server and a TCP
//! echo server on loopback.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::Request;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::host::FixedHostAddresses;
use super::policy::{Refusal, decide};
use super::resolve::Resolving;
use super::*;
use crate::gateway::testkit::{DEADLINE, RecordingSink};

/// Answers from a fixed table.
#[derive(Debug)]
struct StaticResolver(HashMap<String, Vec<std::net::IpAddr>>);

impl Resolve for StaticResolver {
    fn resolve<'a>(&'a self, host: &'a str, port: u16) -> Resolving<'a> {
        let found = self.0.get(host).cloned();
        Box::pin(async move {
            found
                .map(|ips| {
                    ips.into_iter()
                        .map(|ip| SocketAddr::new(ip, port))
                        .collect()
                })
                .ok_or_else(|| std::io::Error::other(format!("no such host {host}")))
        })
    }
}

struct Http {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
}

async fn http_mock() -> Http {
    let hits = Arc::new(AtomicUsize::new(0));
    let h2 = Arc::clone(&hits);
    let app = Router::new().fallback(move |req: Request| {
        let hits = Arc::clone(&h2);
        async move {
            hits.fetch_add(1, Ordering::SeqCst);
            let host = req
                .headers()
                .get("host")
                .map(|h| h.to_str().unwrap_or("?").to_owned())
                .unwrap_or_default();
            let proxy_auth = req.headers().contains_key("proxy-authorization");
            format!("mock saw {} host={host} proxy-auth={proxy_auth}", req.uri())
        }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Http { addr, hits }
}

async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

struct Proxy {
    addr: SocketAddr,
    sink: Arc<RecordingSink>,
    stop: CancellationToken,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A configuration whose names resolve by `names` (each `NAME`, `IP[,IP]...`) on a host whose
/// own addresses are `own`.
fn config(allow: &[String], names: &[(&str, &str)], own: &[&str]) -> EgressConfig {
    let table = names
        .iter()
        .map(|(n, ips)| {
            (
                (*n).to_owned(),
                ips.split(',').map(|ip| ip.parse().unwrap()).collect(),
            )
        })
        .collect();
    EgressConfig {
        allow: allow.iter().map(|a| a.parse().unwrap()).collect(),
        resolver: Arc::new(StaticResolver(table)),
        host: Arc::new(FixedHostAddresses::of(own)),
        connect_timeout: DEADLINE,
    }
}

async fn proxy(allow: &[String], names: &[(&str, &str)]) -> Proxy {
    proxy_on(config(allow, names, &["127.0.0.1", "::1"])).await
}

async fn proxy_on(cfg: EgressConfig) -> Proxy {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sink = Arc::new(RecordingSink::default());
    let stop = CancellationToken::new();
    let sink_dyn: Arc<dyn crate::gateway::GatewaySink> = sink.clone();
    tokio::spawn(serve_egress(
        listener,
        Arc::new(cfg),
        sink_dyn,
        stop.clone(),
    ));
    Proxy { addr, sink, stop }
}

/// Sends `request` and reads the answer to the end (the request says `Connection: close`).
async fn exchange(proxy: SocketAddr, request: &str) -> String {
    let work = async {
        let mut s = TcpStream::connect(proxy).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.unwrap();
        String::from_utf8_lossy(&out).into_owned()
    };
    tokio::time::timeout(DEADLINE, work).await.unwrap()
}

fn get(target: &str, host: &str) -> String {
    format!(
        "GET {target} HTTP/1.1\r\nHost: {host}\r\nProxy-Authorization: Basic eDp5\r\n\
         Connection: close\r\n\r\n"
    )
}

#[tokio::test]
async fn an_allowed_host_is_reachable_by_absolute_form_get() {
    let m = http_mock().await;
    let p = proxy(&[m.addr.to_string()], &[]).await;
    let a = m.addr;
    let out = exchange(
        p.addr,
        &get(&format!("http://{a}/path?q=1"), &a.to_string()),
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(
        out.contains(&format!("mock saw /path?q=1 host={a} proxy-auth=false")),
        "{out}"
    );
    let e = p.sink.egress.lock().unwrap().clone();
    assert_eq!(e.len(), 1);
    assert!(e[0].allowed && e[0].method == "GET" && e[0].port == a.port());
    assert_eq!(e[0].host, "127.0.0.1");
}

#[tokio::test]
async fn an_allowed_host_is_reachable_through_a_connect_tunnel() {
    let echo = echo_server().await;
    let p = proxy(&[echo.to_string()], &[]).await;
    let work = async {
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        s.write_all(format!("CONNECT {echo} HTTP/1.1\r\nHost: {echo}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut b = [0u8; 1];
            assert_eq!(s.read(&mut b).await.unwrap(), 1, "closed: {head:?}");
            head.push(b[0]);
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        s.write_all(b"ping through the tunnel").await.unwrap();
        let mut back = [0u8; 23];
        s.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"ping through the tunnel");
    };
    tokio::time::timeout(DEADLINE, work).await.unwrap();
    let e = p.sink.egress.lock().unwrap().clone();
    assert!(e[0].allowed && e[0].method == "CONNECT");
}

#[tokio::test]
async fn a_port_not_allowed_is_403_and_reported() {
    let echo = echo_server().await;
    let p = proxy(&[echo.to_string()], &[]).await;
    let other = echo.port().wrapping_add(1).max(1);
    let out = exchange(
        p.addr,
        &format!("CONNECT 127.0.0.1:{other} HTTP/1.1\r\nHost: 127.0.0.1:{other}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    assert!(
        out.contains(&format!(
            "ralph egress proxy: 127.0.0.1:{other} is not in the job's allowed hosts (--allow-host)"
        )),
        "{out}"
    );
    let e = p.sink.egress.lock().unwrap().clone();
    assert_eq!(e.len(), 1);
    assert!(!e[0].allowed);
    assert_eq!((e[0].port, e[0].method.as_str()), (other, "CONNECT"));
}

#[tokio::test]
async fn loopback_is_reached_through_localhost_but_not_through_a_public_name() {
    let m = http_mock().await;
    let port = m.addr.port();
    let p = proxy(
        &[
            format!("localhost:{port}"),
            format!("rebind.example:{port}"),
        ],
        &[("localhost", "127.0.0.1"), ("rebind.example", "127.0.0.1")],
    )
    .await;
    let out = exchange(
        p.addr,
        &get(
            &format!("http://localhost:{port}/"),
            &format!("localhost:{port}"),
        ),
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    let out = exchange(
        p.addr,
        &get(
            &format!("http://rebind.example:{port}/"),
            &format!("rebind.example:{port}"),
        ),
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    assert!(
        out.contains(&format!(
            "rebind.example:{port} resolves to 127.0.0.1, a loopback address; refused"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("`--allow-host 127.0.0.1:{port}`")),
        "{out}"
    );
    assert_eq!(m.hits.load(Ordering::SeqCst), 1);
    let e = p.sink.egress.lock().unwrap().clone();
    assert_eq!(
        e.iter()
            .map(|d| (d.host.as_str(), d.allowed))
            .collect::<Vec<_>>(),
        vec![("localhost", true), ("rebind.example", false)]
    );
}

#[tokio::test]
async fn link_local_metadata_behind_an_allowed_name_is_refused() {
    let p = proxy(
        &["metadata.example".to_owned()],
        &[("metadata.example", "169.254.169.254")],
    )
    .await;
    let out = exchange(
        p.addr,
        "CONNECT metadata.example:443 HTTP/1.1\r\nHost: metadata.example:443\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
}

#[tokio::test]
async fn a_name_resolving_to_an_address_of_this_host_is_refused_and_journalled() {
    let p = proxy_on(config(
        &["pypi.example.org".to_owned()],
        &[("pypi.example.org", "172.17.0.1")],
        &["127.0.0.1", "172.17.0.1", "192.0.2.2"],
    ))
    .await;
    let out = exchange(
        p.addr,
        "CONNECT pypi.example.org:443 HTTP/1.1\r\nHost: pypi.example.org:443\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    assert!(
        out.contains(
            "ralph egress proxy: pypi.example.org:443 resolves to 172.17.0.1, an address of this \
             host; refused (to reach it on purpose, allow the address itself: \
             `--allow-host 172.17.0.1:443`)"
        ),
        "{out}"
    );
    let e = p.sink.egress.lock().unwrap().clone();
    assert_eq!(e.len(), 1);
    assert!(!e[0].allowed);
    assert_eq!(
        (e[0].host.as_str(), e[0].port, e[0].reason.as_str()),
        (
            "pypi.example.org",
            443,
            "resolves to 172.17.0.1, an address of this host"
        )
    );
}

#[tokio::test]
async fn a_private_name_without_opt_in_gets_a_403_saying_how_to_opt_in() {
    let p = proxy_on(config(
        &["pypi.corp:3141".to_owned()],
        &[("pypi.corp", "10.0.0.5")],
        &["127.0.0.1"],
    ))
    .await;
    let out = exchange(
        p.addr,
        &get("http://pypi.corp:3141/simple/", "pypi.corp:3141"),
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    assert!(
        out.contains("pypi.corp:3141 resolves to 10.0.0.5, a private address; refused"),
        "{out}"
    );
    assert!(
        out.contains("`--allow-host pypi.corp:3141=private`")
            && out.contains("`--allow-host 10.0.0.5:3141`"),
        "{out}"
    );
    let e = p.sink.egress.lock().unwrap().clone();
    assert_eq!(e[0].reason, "resolves to 10.0.0.5, a private address");
}

#[tokio::test]
async fn mixed_answers_connect_only_to_the_permitted_address() {
    let m = http_mock().await;
    let port = m.addr.port();
    // `localhost` leads to loopback only: the private address in the answer is skipped (never
    // tried: it is first, and would hang until the connect timeout).
    let p = proxy_on(config(
        &[format!("localhost:{port}")],
        &[("localhost", "10.255.0.1,127.0.0.1")],
        &["127.0.0.1"],
    ))
    .await;
    let out = exchange(
        p.addr,
        &get(
            &format!("http://localhost:{port}/"),
            &format!("localhost:{port}"),
        ),
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert_eq!(m.hits.load(Ordering::SeqCst), 1);
    let e = p.sink.egress.lock().unwrap().clone();
    assert!(e[0].allowed);
    assert_eq!(
        e[0].reason,
        format!("allowed by localhost:{port} (skipped 10.255.0.1, a private address)")
    );
}

#[tokio::test]
async fn this_hosts_addresses_are_read_again_for_each_decision() {
    let cfg = config(
        &["pypi.example.org".to_owned()],
        &[("pypi.example.org", "192.0.2.77")],
        &["127.0.0.1"],
    );
    let allowed = decide(&cfg, "pypi.example.org", 443).await.unwrap();
    assert_eq!(allowed.addrs, ["192.0.2.77:443".parse().unwrap()]);
    // An interface with that address comes up (a bridge, a VPN): refused from then on.
    let own = FixedHostAddresses::of(&["127.0.0.1", "192.0.2.77"]);
    let cfg = EgressConfig {
        host: Arc::new(own),
        ..cfg
    };
    match decide(&cfg, "pypi.example.org", 443).await {
        Err(Refusal::Denied { reason, .. }) => {
            assert_eq!(reason, "resolves to 192.0.2.77, an address of this host");
        }
        other => panic!("{other:?}"),
    }
}

#[derive(Debug)]
struct NoInterfaces;

impl HostAddresses for NoInterfaces {
    fn addresses(&self) -> std::io::Result<Vec<std::net::IpAddr>> {
        Err(std::io::Error::other("netlink said no"))
    }
}

#[tokio::test]
async fn a_name_is_refused_when_this_hosts_addresses_cannot_be_listed() {
    let cfg = EgressConfig {
        host: Arc::new(NoInterfaces),
        ..config(
            &["pypi.example.org".to_owned(), "93.184.216.34".to_owned()],
            &[("pypi.example.org", "93.184.216.34")],
            &[],
        )
    };
    match decide(&cfg, "pypi.example.org", 443).await {
        Err(Refusal::Failed { reason, body }) => {
            assert!(reason.contains("netlink said no"), "{reason}");
            assert!(
                body.contains("failed to list this host's addresses"),
                "{body}"
            );
        }
        other => panic!("{other:?}"),
    }
    // A literal needs no list.
    assert!(decide(&cfg, "93.184.216.34", 443).await.is_ok());
}

#[tokio::test]
async fn a_host_header_that_disagrees_with_the_target_is_refused() {
    let m = http_mock().await;
    let p = proxy(&[m.addr.to_string()], &[]).await;
    let out = exchange(p.addr, &get(&format!("http://{}/", m.addr), "evil.example")).await;
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    assert!(out.contains("does not match"), "{out}");
    assert_eq!(m.hits.load(Ordering::SeqCst), 0);
    let e = p.sink.egress.lock().unwrap().clone();
    assert!(!e[0].allowed);
}

#[tokio::test]
async fn origin_form_requests_are_not_proxied() {
    let p = proxy(&[], &[]).await;
    let out = exchange(
        p.addr,
        "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
}

#[test]
fn proxy_env_points_at_the_gateway_address_and_exempts_it() {
    let env: HashMap<String, String> = proxy_env(3128, &[]).into_iter().collect();
    for k in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
        assert_eq!(env[k], "http://127.0.0.2:3128");
    }
    assert_eq!(env["NO_PROXY"], "127.0.0.2,127.0.0.1,localhost,::1");
    assert_eq!(env["no_proxy"], env["NO_PROXY"]);
}

/// Issue 26: an allowed loopback host (a mirror on the runner host's `127.0.0.1:3141`) is never
/// in `NO_PROXY` — clients ignore its ports, so naming `127.0.0.1` there sent every request for
/// the mirror to the round's own empty loopback. The gateway's own address stays exempt.
#[test]
fn no_proxy_never_names_an_allowed_loopback_host() {
    let allow =
        |hosts: &[&str]| -> Vec<AllowHost> { hosts.iter().map(|h| h.parse().unwrap()).collect() };
    let no = |hosts: &[&str]| -> String {
        proxy_env(41411, &allow(hosts))
            .into_iter()
            .find(|(k, _)| k == "NO_PROXY")
            .unwrap()
            .1
    };
    assert_eq!(no(&["127.0.0.1:3141"]), "127.0.0.2,localhost,::1");
    assert_eq!(
        no(&["localhost:4873", "mirror.example"]),
        "127.0.0.2,127.0.0.1,::1"
    );
    assert_eq!(no(&["[::1]:8080", "127.0.0.1:1"]), "127.0.0.2,localhost");
    // Names are matched as the entries normalise them.
    assert_eq!(no(&["LocalHost.:1"]), "127.0.0.2,127.0.0.1,::1");
}

#[tokio::test]
async fn stop_ends_the_proxy_and_its_tunnels() {
    let echo = echo_server().await;
    let cfg = EgressConfig::new(vec![echo.to_string().parse().unwrap()]);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sink: Arc<dyn crate::gateway::GatewaySink> = Arc::new(RecordingSink::default());
    let stop = CancellationToken::new();
    let server = tokio::spawn(serve_egress(listener, Arc::new(cfg), sink, stop.clone()));
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("CONNECT {echo} HTTP/1.1\r\nHost: {echo}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        let n = tokio::time::timeout(DEADLINE, s.read(&mut b))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(n, 1);
        head.push(b[0]);
    }
    stop.cancel();
    tokio::time::timeout(DEADLINE, server)
        .await
        .expect("serve_egress did not return after stop")
        .unwrap()
        .unwrap();
    let mut rest = Vec::new();
    let n = tokio::time::timeout(DEADLINE, s.read_to_end(&mut rest))
        .await
        .expect("the tunnel stayed open after stop")
        .unwrap();
    assert_eq!(n, 0);
}
