//! Overhead of the model gateway (`ralph_runner::gateway::serve_model`) against talking to the
//! upstream directly, all in one process on loopback (run by `bench/gateway_overhead.sh`).
//!
//! A mock upstream (axum) answers `POST /v1/responses` with an SSE stream (text deltas, then
//! `response.completed` with usage), `POST /v1/chat/completions` with JSON and usage, and two
//! stream variants: `/v1/slow/responses` sends its first event, waits `--delay-ms`, then the
//! rest; `/v1/held/responses` sends its first event and holds the stream open until released.
//! The gateway listens on another port and forwards to the mock.
//!
//! Measured, each against the same request sent straight to the mock in the same run:
//! - latency (request sent → whole response read) of the SSE stream and of the JSON reply, over
//!   `--n` requests per path after `--warmup`, interleaved in blocks of `--block` so both paths
//!   see the same machine state; one HTTP/1.1 keep-alive connection per path, like a CLI;
//! - time to the first body byte of the delayed stream (the gateway must pass the first event
//!   on at once, not after the delay);
//! - memory: VmRSS/VmHWM of a fresh process (this binary, `--mem-phase`) at idle and with
//!   `--streams` held streams open, straight to the mock or through the gateway; the difference
//!   of the two deltas divided by the stream count is the gateway's cost per open stream.
//!
//! Output: a markdown table on stdout; `--json` prints the figures as JSON instead.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::Response;
use axum::routing::post;
use bytes::Bytes;
use futures_util::StreamExt;
use ralph_runner::gateway::{
    ApiFamily, EgressDecision, GatewaySink, ModelGatewayConfig, ModelLimits, ModelRequest, Secret,
    TokenBudget, Upstream, serve_model,
};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

const DELTAS: usize = 8;

#[derive(Clone, Debug)]
struct Opts {
    n: usize,
    warmup: usize,
    block: usize,
    delay_ms: u64,
    ttfb_n: usize,
    streams: usize,
    json: bool,
    mem_phase: Option<String>,
}

fn parse_opts() -> Result<Opts> {
    let mut o = Opts {
        n: 2000,
        warmup: 200,
        block: 100,
        delay_ms: 200,
        ttfb_n: 20,
        streams: 50,
        json: false,
        mem_phase: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |name: &str| -> Result<String> {
            args.next()
                .with_context(|| format!("failed to parse {name}: expected a value"))
        };
        match a.as_str() {
            "--json" => o.json = true,
            "--n" => o.n = val("--n")?.parse()?,
            "--warmup" => o.warmup = val("--warmup")?.parse()?,
            "--block" => o.block = val("--block")?.parse()?,
            "--delay-ms" => o.delay_ms = val("--delay-ms")?.parse()?,
            "--ttfb-n" => o.ttfb_n = val("--ttfb-n")?.parse()?,
            "--streams" => o.streams = val("--streams")?.parse()?,
            "--mem-phase" => o.mem_phase = Some(val("--mem-phase")?),
            "-h" | "--help" => {
                println!(
                    "usage: gateway_bench [--n 2000] [--warmup 200] [--block 100] \
                     [--delay-ms 200] [--ttfb-n 20] [--streams 50] [--json]"
                );
                std::process::exit(0);
            }
            other => bail!("failed to parse argument `{other}`: unknown option"),
        }
    }
    if o.block == 0 || o.n == 0 || o.ttfb_n == 0 || o.streams == 0 {
        bail!("failed to parse options: --n, --block, --ttfb-n and --streams must be > 0");
    }
    Ok(o)
}

// ---------------------------------------------------------------- mock upstream

#[derive(Debug)]
struct Mock {
    delay: Duration,
    release: CancellationToken,
}

fn sse_event(ty: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {ty}\ndata: {data}\n\n"))
}

fn first_event() -> Bytes {
    sse_event(
        "response.created",
        &json!({"type": "response.created", "response": {"id": "resp_bench", "model": "gpt-bench"}}),
    )
}

fn rest_events() -> Vec<Bytes> {
    let mut out: Vec<Bytes> = (0..DELTAS)
        .map(|i| {
            sse_event(
                "response.output_text.delta",
                &json!({"type": "response.output_text.delta", "item_id": "msg_1",
                        "output_index": 0, "content_index": 0, "delta": format!("word{i} ")}),
            )
        })
        .collect();
    out.push(sse_event(
        "response.completed",
        &json!({"type": "response.completed", "response": {"id": "resp_bench",
                "model": "gpt-bench", "status": "completed",
                "usage": {"input_tokens": 120, "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens": 16, "output_tokens_details": {"reasoning_tokens": 0},
                          "total_tokens": 136}}}),
    ));
    out
}

fn sse_response(body: Body) -> Response {
    let mut r = Response::new(body);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/event-stream"),
    );
    r
}

async fn mock_responses() -> Response {
    let mut events = vec![first_event()];
    events.extend(rest_events());
    let s = futures_util::stream::iter(events.into_iter().map(Ok::<_, std::io::Error>));
    sse_response(Body::from_stream(s))
}

async fn mock_slow(State(m): State<Arc<Mock>>) -> Response {
    let delay = m.delay;
    let s = futures_util::stream::once(async { Ok::<_, std::io::Error>(first_event()) }).chain(
        futures_util::stream::once(async move {
            tokio::time::sleep(delay).await;
            futures_util::stream::iter(rest_events().into_iter().map(Ok))
        })
        .flatten(),
    );
    sse_response(Body::from_stream(s))
}

async fn mock_held(State(m): State<Arc<Mock>>) -> Response {
    let release = m.release.clone();
    let s = futures_util::stream::once(async { Ok::<_, std::io::Error>(first_event()) }).chain(
        futures_util::stream::once(async move {
            release.cancelled().await;
            futures_util::stream::iter(rest_events().into_iter().map(Ok))
        })
        .flatten(),
    );
    sse_response(Body::from_stream(s))
}

async fn mock_chat() -> Response {
    let body = json!({"id": "chatcmpl-bench", "object": "chat.completion", "model": "gpt-bench",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello from the mock."},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 16, "total_tokens": 136}});
    let mut r = Response::new(Body::from(body.to_string()));
    *r.status_mut() = StatusCode::OK;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}

// ---------------------------------------------------------------- gateway sink

#[derive(Debug, Default)]
struct CountingSink {
    requests: AtomicU64,
    tokens: AtomicU64,
    errors: AtomicU64,
}

impl GatewaySink for CountingSink {
    fn model_request(&self, r: &ModelRequest) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.tokens.fetch_add(
            r.usage.input_tokens + r.usage.output_tokens,
            Ordering::Relaxed,
        );
        if r.error.is_some() {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn egress(&self, _e: &EgressDecision) {}
    fn budget_crossed(&self, _used: u64, _max: u64) {}
}

// ---------------------------------------------------------------- set-up

struct Rig {
    direct: String,
    gateway: String,
    mock: Arc<Mock>,
    sink: Arc<CountingSink>,
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

async fn start(delay: Duration) -> Result<Rig> {
    let stop = CancellationToken::new();
    let mock = Arc::new(Mock {
        delay,
        release: CancellationToken::new(),
    });
    let app = Router::new()
        .route("/v1/responses", post(mock_responses))
        .route("/v1/slow/responses", post(mock_slow))
        .route("/v1/held/responses", post(mock_held))
        .route("/v1/chat/completions", post(mock_chat))
        .with_state(Arc::clone(&mock));
    let mock_listener = TcpListener::bind("127.0.0.1:0").await?;
    let mock_addr: SocketAddr = mock_listener.local_addr()?;
    let mock_stop = stop.clone();
    let mut tasks = vec![tokio::spawn(async move {
        let served = axum::serve(mock_listener, app)
            .with_graceful_shutdown(mock_stop.cancelled_owned())
            .await;
        if let Err(e) = served {
            eprintln!("mock upstream failed: {e}");
        }
    })];
    let cfg = Arc::new(ModelGatewayConfig::new(
        Upstream {
            url: format!("http://{mock_addr}/v1"),
            api: ApiFamily::OpenAi,
            key: Secret::new("sk-bench-real-key"),
        },
        ModelLimits::default(),
        Arc::new(TokenBudget::new(None, 0)),
    )?);
    let gw_listener = TcpListener::bind("127.0.0.1:0").await?;
    let gw_port = gw_listener.local_addr()?.port();
    let gateway = cfg.agent_base_url(gw_port);
    let sink = Arc::new(CountingSink::default());
    let dyn_sink: Arc<dyn GatewaySink> = sink.clone();
    let gw_stop = stop.clone();
    tasks.push(tokio::spawn(async move {
        if let Err(e) = serve_model(gw_listener, cfg, dyn_sink, gw_stop).await {
            eprintln!("gateway failed: {e}");
        }
    }));
    Ok(Rig {
        direct: format!("http://{mock_addr}/v1"),
        gateway,
        mock,
        sink,
        stop,
        tasks,
    })
}

fn client(max_idle: usize) -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .no_proxy()
        .http1_only()
        .pool_max_idle_per_host(max_idle)
        .build()?)
}

const STREAM_REQ: &str = r#"{"model":"gpt-bench","input":"Say hello.","stream":true}"#;
const CHAT_REQ: &str =
    r#"{"model":"gpt-bench","messages":[{"role":"user","content":"Say hello."}]}"#;

fn request(c: &reqwest::Client, url: String, body: &'static str) -> reqwest::RequestBuilder {
    c.post(url)
        .header(header::AUTHORIZATION, "Bearer placeholder")
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
}

/// One request; returns (time to the first body chunk, time to the end, body bytes).
async fn one(
    c: &reqwest::Client,
    url: String,
    body: &'static str,
) -> Result<(Duration, Duration, usize)> {
    let t0 = Instant::now();
    let mut resp = request(c, url, body).send().await?;
    if !resp.status().is_success() {
        bail!("failed request: status {}", resp.status());
    }
    let mut first = None;
    let mut n = 0;
    while let Some(chunk) = resp.chunk().await? {
        if first.is_none() {
            first = Some(t0.elapsed());
        }
        n += chunk.len();
    }
    let total = t0.elapsed();
    Ok((first.unwrap_or(total), total, n))
}

// ---------------------------------------------------------------- statistics

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[derive(Debug, Clone, Copy)]
struct Pcts {
    p50: f64,
    p90: f64,
    p99: f64,
}

fn pcts(mut v: Vec<f64>) -> Pcts {
    v.sort_by(f64::total_cmp);
    Pcts {
        p50: pct(&v, 50.0),
        p90: pct(&v, 90.0),
        p99: pct(&v, 99.0),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Interleaved latency of one endpoint: (direct, gateway) full-response times in ms.
async fn latency(rig: &Rig, o: &Opts, path: &str, body: &'static str) -> Result<(Pcts, Pcts)> {
    let cd = client(1)?;
    let cg = client(1)?;
    let d_url = format!("{}{path}", rig.direct);
    let g_url = format!("{}{path}", rig.gateway);
    for _ in 0..o.warmup {
        one(&cd, d_url.clone(), body).await?;
        one(&cg, g_url.clone(), body).await?;
    }
    let (mut d, mut g) = (Vec::with_capacity(o.n), Vec::with_capacity(o.n));
    let mut flip = false;
    while d.len() < o.n {
        let k = o.block.min(o.n - d.len());
        // Alternate which path goes first in each pair of blocks.
        for side in [flip, !flip] {
            let (c, url, out) = if side {
                (&cg, &g_url, &mut g)
            } else {
                (&cd, &d_url, &mut d)
            };
            for _ in 0..k {
                let (_, total, _) = one(c, url.clone(), body).await?;
                out.push(ms(total));
            }
        }
        flip = !flip;
    }
    Ok((pcts(d), pcts(g)))
}

/// First byte and total of the delayed stream: ((direct first, direct total), (gw first, gw total)).
async fn first_byte(rig: &Rig, o: &Opts) -> Result<((Pcts, Pcts), (Pcts, Pcts))> {
    let cd = client(1)?;
    let cg = client(1)?;
    let d_url = format!("{}/slow/responses", rig.direct);
    let g_url = format!("{}/slow/responses", rig.gateway);
    let (mut df, mut dt, mut gf, mut gt) = (vec![], vec![], vec![], vec![]);
    for i in 0..o.ttfb_n {
        let order = if i % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for gw in order {
            let (c, url) = if gw { (&cg, &g_url) } else { (&cd, &d_url) };
            let (first, total, _) = one(c, url.clone(), STREAM_REQ).await?;
            if gw {
                gf.push(ms(first));
                gt.push(ms(total));
            } else {
                df.push(ms(first));
                dt.push(ms(total));
            }
        }
    }
    Ok(((pcts(df), pcts(dt)), (pcts(gf), pcts(gt))))
}

// ---------------------------------------------------------------- memory

fn proc_status_kib(field: &str) -> Result<u64> {
    let s = std::fs::read_to_string("/proc/self/status")?;
    for line in s.lines() {
        if let Some(rest) = line.strip_prefix(field) {
            let v = rest
                .trim_start_matches(':')
                .trim()
                .trim_end_matches("kB")
                .trim();
            return Ok(v.parse()?);
        }
    }
    bail!("failed to read {field} from /proc/self/status: not found")
}

/// Child process: warm both paths, measure idle, hold `streams` streams on one path, measure.
async fn mem_phase(o: &Opts, phase: &str) -> Result<()> {
    let rig = start(Duration::from_millis(o.delay_ms)).await?;
    let warm = client(o.streams)?;
    // Warm both paths the same way in both phases, so the idle figure is comparable.
    for _ in 0..20 {
        one(&warm, format!("{}/responses", rig.direct), STREAM_REQ).await?;
        one(&warm, format!("{}/responses", rig.gateway), STREAM_REQ).await?;
    }
    drop(warm);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let idle_rss = proc_status_kib("VmRSS")?;
    let idle_hwm = proc_status_kib("VmHWM")?;
    let base = match phase {
        "direct" => rig.direct.clone(),
        "gateway" => rig.gateway.clone(),
        other => bail!("failed to parse --mem-phase `{other}`: expected direct or gateway"),
    };
    let c = client(o.streams)?;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(o.streams);
    let mut held = Vec::with_capacity(o.streams);
    for _ in 0..o.streams {
        let c = c.clone();
        let url = format!("{base}/held/responses");
        let tx = tx.clone();
        held.push(tokio::spawn(async move {
            let mut resp = request(&c, url, STREAM_REQ).send().await?;
            let mut n = resp.chunk().await?.map_or(0, |b| b.len());
            tx.send(()).await?;
            while let Some(b) = resp.chunk().await? {
                n += b.len();
            }
            anyhow::Ok(n)
        }));
    }
    drop(tx);
    for _ in 0..o.streams {
        rx.recv()
            .await
            .context("failed to open the held streams: a stream ended early")?;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held_rss = proc_status_kib("VmRSS")?;
    let held_hwm = proc_status_kib("VmHWM")?;
    rig.mock.release.cancel();
    for h in held {
        h.await??;
    }
    rig.stop.cancel();
    for t in rig.tasks {
        t.await?;
    }
    println!(
        "{}",
        json!({"phase": phase, "streams": o.streams, "idle_rss_kib": idle_rss,
               "idle_hwm_kib": idle_hwm, "held_rss_kib": held_rss, "held_hwm_kib": held_hwm})
    );
    Ok(())
}

fn run_mem_child(o: &Opts, phase: &str) -> Result<Value> {
    let exe = std::env::current_exe()?;
    let out = std::process::Command::new(exe)
        .args([
            "--mem-phase",
            phase,
            "--streams",
            &o.streams.to_string(),
            "--delay-ms",
            &o.delay_ms.to_string(),
        ])
        .output()?;
    if !out.status.success() {
        bail!(
            "failed to run the {phase} memory phase: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

fn field(v: &Value, k: &str) -> Result<f64> {
    v.get(k)
        .and_then(Value::as_f64)
        .with_context(|| format!("failed to read `{k}` from a memory phase"))
}

// ---------------------------------------------------------------- main

fn pj(p: Pcts) -> Value {
    json!({"p50": p.p50, "p90": p.p90, "p99": p.p99})
}

async fn bench(o: &Opts) -> Result<()> {
    let rig = start(Duration::from_millis(o.delay_ms)).await?;
    let (sd, sg) = latency(&rig, o, "/responses", STREAM_REQ).await?;
    let (jd, jg) = latency(&rig, o, "/chat/completions", CHAT_REQ).await?;
    let ((fd, td), (fg, tg)) = first_byte(&rig, o).await?;
    rig.stop.cancel();
    let gw_requests = rig.sink.requests.load(Ordering::Relaxed);
    let gw_tokens = rig.sink.tokens.load(Ordering::Relaxed);
    let gw_errors = rig.sink.errors.load(Ordering::Relaxed);
    for t in rig.tasks {
        t.await?;
    }
    let md = run_mem_child(o, "direct")?;
    let mg = run_mem_child(o, "gateway")?;
    let d_delta = field(&md, "held_rss_kib")? - field(&md, "idle_rss_kib")?;
    let g_delta = field(&mg, "held_rss_kib")? - field(&mg, "idle_rss_kib")?;
    let per_stream = (g_delta - d_delta) / o.streams as f64;

    if o.json {
        let out = json!({
            "n": o.n, "warmup": o.warmup, "block": o.block,
            "stream": {"direct_ms": pj(sd), "gateway_ms": pj(sg),
                       "added_p50_ms": sg.p50 - sd.p50, "added_p99_ms": sg.p99 - sd.p99},
            "json": {"direct_ms": pj(jd), "gateway_ms": pj(jg),
                     "added_p50_ms": jg.p50 - jd.p50, "added_p99_ms": jg.p99 - jd.p99},
            "first_byte": {"delay_ms": o.delay_ms, "n": o.ttfb_n,
                           "direct_first_ms": pj(fd), "gateway_first_ms": pj(fg),
                           "direct_total_ms": pj(td), "gateway_total_ms": pj(tg)},
            "memory": {"streams": o.streams, "direct": md, "gateway": mg,
                       "direct_delta_kib": d_delta, "gateway_delta_kib": g_delta,
                       "gateway_kib_per_stream": per_stream},
            "gateway_sink": {"requests": gw_requests, "tokens": gw_tokens, "errors": gw_errors},
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "Latency, request sent → whole response read, {} requests per path after {} warm-up, \
         interleaved in blocks of {} (ms):\n",
        o.n, o.warmup, o.block
    );
    println!("| response | path | p50 | p90 | p99 |");
    println!("|---|---|---|---|---|");
    for (name, d, g) in [("SSE stream (10 events)", sd, sg), ("JSON (chat)", jd, jg)] {
        println!(
            "| {name} | direct | {:.3} | {:.3} | {:.3} |",
            d.p50, d.p90, d.p99
        );
        println!(
            "| {name} | gateway | {:.3} | {:.3} | {:.3} |",
            g.p50, g.p90, g.p99
        );
        println!(
            "| {name} | **added** | **{:+.3}** | {:+.3} | **{:+.3}** |",
            g.p50 - d.p50,
            g.p90 - d.p90,
            g.p99 - d.p99
        );
    }
    println!(
        "\nDelayed stream (first event, {} ms pause, rest), {} requests per path (ms):\n",
        o.delay_ms, o.ttfb_n
    );
    println!("| path | first byte p50 | first byte p99 | total p50 |");
    println!("|---|---|---|---|");
    println!("| direct | {:.3} | {:.3} | {:.1} |", fd.p50, fd.p99, td.p50);
    println!(
        "| gateway | {:.3} | {:.3} | {:.1} |",
        fg.p50, fg.p99, tg.p50
    );
    println!(
        "\nMemory, {} streams held open (fresh process per path, KiB):\n",
        o.streams
    );
    println!("| path | idle RSS | held RSS | delta | held HWM |");
    println!("|---|---|---|---|---|");
    for (name, m, delta) in [("direct", &md, d_delta), ("gateway", &mg, g_delta)] {
        println!(
            "| {name} | {:.0} | {:.0} | {:+.0} | {:.0} |",
            field(m, "idle_rss_kib")?,
            field(m, "held_rss_kib")?,
            delta,
            field(m, "held_hwm_kib")?
        );
    }
    println!("\nGateway cost per open stream: {per_stream:.1} KiB");
    println!(
        "Gateway sink: {gw_requests} requests reported, {gw_tokens} tokens read, {gw_errors} errors"
    );
    Ok(())
}

fn main() -> Result<()> {
    let o = parse_opts()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        match o.mem_phase.clone() {
            Some(phase) => mem_phase(&o, &phase).await,
            None => bench(&o).await,
        }
    })
}
