//! Fuzzing the gateway's target and body handling through the real gateway to a recording
//! upstream (raw request lines), checking after every case:
//! (a) whatever the upstream received has a method and path of the allow-table, byte for byte
//!     the target the agent sent (which was canonical), no query but a route's own parameters,
//!     and a body that is a JSON object (with `include_usage` on a streamed Chat/Completions);
//! (b) every forwarded request's usage is counted: the budget's total is the upstream's known
//!     usage summed over the metered requests it received;
//! (c) no request is forwarded once the budget is spent;
//! (d) the key goes only upstream, never into an answer the gateway made itself.
//!
//! The in-suite run is small (`PROPTEST_CASES`, default 48). The long campaign:
//! `RALPH_FUZZ_SECS=600 cargo test -p ralph --lib gateway::model::fuzz -- --ignored --nocapture`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use super::hostile_tests::{gateway, raw};
use super::routes::{BodyRule, Cost, Route, lookup};
use super::target::parse;
use super::*;
use crate::gateway::testkit::{RAW_USAGE_IN, RAW_USAGE_OUT, RawUpstream};

/// Requests sent and forwarded over a campaign (printed at its end).
static SENT: AtomicU64 = AtomicU64::new(0);
static FORWARDED: AtomicU64 = AtomicU64::new(0);
static REFUSED_BODIES: AtomicU64 = AtomicU64::new(0);

#[derive(Clone, Debug)]
struct Case {
    anthropic: bool,
    budget: Option<u64>,
    requests: Vec<(String, String, String)>,
}

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "responses", "chat", "completions", "embeddings", "models", "messages",
            "count_tokens", "v1", "files", "batches", "organization", "admin_api_keys",
            "ft:gpt-4o:org::x1", "resp_1", "gpt-5",
        ]).prop_map(str::to_owned),
        3 => prop::sample::select(vec![
            "..", ".", "%2e%2e", "%2E%2e", "%2e", "%5c", "%5C", "%2f", "%2F", "\\", "..\\files",
            "..\\..\\v1\\files", "Models", "RESPONSES", "models.", "a;b", "\u{e9}", "", "~x",
            "%41", "%", "%zz", "a b", "a\tb", "\u{1}", "\u{ff0e}\u{ff0e}", "V1", "x..y", "-x",
            "x#y", "x?y", "@", "!", "$", "'", "(", "*", "+", ",", "=", "\"", "{", "|", "^", "/",
        ]).prop_map(str::to_owned),
    ]
}

fn target() -> impl Strategy<Value = String> {
    (
        prop::sample::select(vec![
            "/v1", "/V1", "", "/v1/", "/v10", "//v1", "\\v1", "/v1/.",
        ]),
        prop::collection::vec(segment(), 0..4),
        prop::sample::select(vec!["/", "/", "/", "\\", "//"]),
        prop::sample::select(vec![
            "",
            "",
            "",
            "?",
            "?beta=true",
            "?limit=100",
            "?beta=true&beta=true",
            "?a=%31",
            "?beta=true&x=1",
            "?beta=false",
            "?after=x&order=desc",
            "#frag",
            "?beta=true#x",
        ]),
    )
        .prop_map(|(prefix, segs, sep, query)| {
            let mut t = prefix.to_owned();
            for s in &segs {
                t.push_str(sep);
                t.push_str(s);
            }
            if !t.starts_with('/') {
                t.insert(0, '/');
            }
            t.push_str(query);
            t
        })
}

/// Requests a real CLI could send (for either family: the other family's are refused).
const VALID: &[(&str, &str)] = &[
    ("POST", "/v1/responses"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/embeddings"),
    ("GET", "/v1/models"),
    ("GET", "/v1/models/gpt-5"),
    ("GET", "/v1/models/ft:gpt-4o:org::x1"),
    ("POST", "/v1/messages?beta=true"),
    ("POST", "/v1/messages"),
    ("POST", "/v1/messages/count_tokens?beta=true"),
];

/// A valid (method, target), sometimes with one piece spliced in anywhere.
fn near_valid() -> impl Strategy<Value = (String, String)> {
    (
        prop::sample::select(VALID.to_vec()),
        prop::option::weighted(0.4, (any::<prop::sample::Index>(), segment())),
    )
        .prop_map(|((m, t), splice)| {
            let mut t = t.to_owned();
            if let Some((at, ins)) = splice {
                let mut i = at.index(t.len() + 1);
                while !t.is_char_boundary(i) {
                    i -= 1;
                }
                t.insert_str(i, &ins);
            }
            (m.to_owned(), t)
        })
}

fn good_body() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        r#"{"model":"m","input":"hi"}"#,
        r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#,
        r#"{"model":"m","stream":false,"messages":[]}"#,
        r#"{"model":"m","str\u0065am":true,"stream_options":{"include_usage":false}}"#,
        r#"{"model":"m","stream":true,"stream_options":null}"#,
        r#"{"model":"m","input":["a","b"],"encoding_format":"float"}"#,
        r#"{"model":"m","background":false,"stream":true}"#,
        r#"{"model":"m","messages":[{"content":"\ud83d\ude00 \u00e9"}],"max_tokens":5}"#,
        "",
    ])
    .prop_map(str::to_owned)
}

fn json_value() -> impl Strategy<Value = String> {
    let leaf = prop::sample::select(vec![
        "true",
        "false",
        "null",
        "1",
        "-0.5e3",
        "1e400",
        r#""true""#,
        r#""x""#,
        r#""\ud800""#,
        r#""\udc00""#,
        r#""\ud83d\ude00""#,
        "\"\u{e9}\"",
        r#""\u0000""#,
        "{}",
        "[]",
        r#""a\"b""#,
        "01",
        "NaN",
        r#""\x""#,
    ])
    .prop_map(str::to_owned);
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec(
                (
                    prop::sample::select(vec!["a", "stream", "content", "include_usage"]),
                    inner
                ),
                0..3
            )
            .prop_map(|v| {
                let m: Vec<String> = v.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                format!("{{{}}}", m.join(","))
            }),
        ]
    })
}

fn body() -> impl Strategy<Value = String> {
    let field = (
        prop::sample::select(vec![
            "model",
            "stream",
            "stream",
            "stream_options",
            "messages",
            "input",
            "background",
            r"str\u0065am",
            "max_tokens",
            "tools",
        ]),
        json_value(),
    );
    prop_oneof![
        6 => prop::collection::vec(field, 0..5).prop_map(|fs| {
            let m: Vec<String> = fs.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            format!("{{{}}}", m.join(","))
        }),
        1 => prop::sample::select(vec![
            "", "not json", "[1]", "\"s\"", "{", "{\"model\":\"m\"", "{\"a\":1} x", "{}",
            "{\"model\":\"m\",\"stream\":true}", "{\"model\":\"m\",\"stream\":false}",
        ]).prop_map(str::to_owned),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        any::<bool>(),
        prop_oneof![Just(None), (0u64..100).prop_map(Some)],
        prop::collection::vec(
            prop_oneof![
                4 => (near_valid(), prop_oneof![3 => good_body(), 1 => body()])
                    .prop_map(|((m, t), b)| (m, t, b)),
                2 => (
                    prop::sample::select(vec![
                        "POST", "POST", "POST", "GET", "GET", "DELETE", "PUT", "HEAD",
                        "OPTIONS", "PATCH", "get",
                    ])
                    .prop_map(str::to_owned),
                    target(),
                    body(),
                ),
            ],
            1..7,
        ),
    )
        .prop_map(|(anthropic, budget, requests)| Case {
            anthropic,
            budget,
            requests,
        })
}

fn fail(msg: String) -> TestCaseError {
    TestCaseError::fail(msg)
}

async fn run_case(up: &RawUpstream, c: Case) -> Result<(), TestCaseError> {
    let family = if c.anthropic {
        ApiFamily::Anthropic
    } else {
        ApiFamily::OpenAi
    };
    let prefix = if c.anthropic { "" } else { "/v1" };
    up.seen.lock().unwrap().clear();
    let gw = gateway(
        up,
        family,
        ModelLimits::default(),
        TokenBudget::new(c.budget, 0),
        None,
    )
    .await;
    let per = RAW_USAGE_IN + RAW_USAGE_OUT;
    let mut used = 0u64;
    let mut forwarded: Vec<(String, String, &'static Route)> = Vec::new();
    let mut reports = 0usize;
    for (method, target, body) in &c.requests {
        SENT.fetch_add(1, Ordering::Relaxed);
        let before = up.requests().len();
        let (status, answer) = raw(gw.addr, method, target, body.as_bytes()).await;
        let after = up.requests().len();
        prop_assert!(
            after - before <= 1,
            "one request made {} upstream",
            after - before
        );
        // (d) the key never comes back in an answer.
        prop_assert!(
            !answer.contains("sk-real-key"),
            "the key in an answer: {answer}"
        );
        if answer.contains("ralph_bad_request_body") {
            REFUSED_BODIES.fetch_add(1, Ordering::Relaxed);
        }
        if after > before {
            // (c) nothing is forwarded once the budget is spent.
            if let Some(max) = c.budget {
                prop_assert!(
                    used < max,
                    "forwarded with {used} of {max} spent: {method} {target}"
                );
            }
            let uri: axum::http::Uri = target
                .parse()
                .map_err(|e| fail(format!("forwarded an unparsable {target}: {e}")))?;
            let t = parse(&uri, prefix).map_err(|e| fail(format!("forwarded {target}: {e}")))?;
            let m: axum::http::Method = method
                .parse()
                .map_err(|e| fail(format!("forwarded method {method}: {e}")))?;
            let route = lookup(family, &m, &t.segments, &t.query)
                .map_err(|e| fail(format!("forwarded {method} {target}: {e:?}")))?;
            if route.cost == Cost::Metered {
                used += per;
            }
            // A fragment never reaches the gateway (the HTTP parser drops it): what is judged
            // and forwarded is the target without it.
            let judged = target.split('#').next().unwrap_or("").to_owned();
            forwarded.push((method.clone(), judged, route));
            FORWARDED.fetch_add(1, Ordering::Relaxed);
            prop_assert_eq!(status, 200);
        }
        // Every answer the gateway made, or forwarded, is reported once (hyper's own 400 for an
        // unparsable request line is not the gateway's).
        if status != 400 || !answer.is_empty() {
            reports += 1;
            gw.sink.requests(reports).await;
        }
    }
    let seen = up.requests();
    prop_assert_eq!(seen.len(), forwarded.len());
    for (s, (method, target, route)) in seen.iter().zip(&forwarded) {
        // (a) byte for byte the canonical target that was judged, and its method.
        prop_assert_eq!(&s.target, target);
        prop_assert_eq!(&s.method, method);
        let key = if c.anthropic {
            s.header("x-api-key")
        } else {
            s.header("authorization")
                .map(|a| a.trim_start_matches("Bearer "))
        };
        prop_assert_eq!(key, Some("sk-real-key"));
        match route.body {
            BodyRule::Empty => prop_assert!(s.body.is_empty()),
            BodyRule::Json {
                ask_usage,
                forbidden,
                ..
            } => {
                prop_assert_eq!(s.header("content-type"), Some("application/json"));
                let v: serde_json::Value = serde_json::from_slice(&s.body)
                    .map_err(|e| fail(format!("forwarded a body serde_json refuses: {e}")))?;
                prop_assert!(v.is_object());
                let stream = v.get("stream");
                prop_assert!(stream.is_none_or(serde_json::Value::is_boolean));
                if ask_usage && stream == Some(&serde_json::Value::Bool(true)) {
                    prop_assert_eq!(
                        &v["stream_options"]["include_usage"],
                        &serde_json::Value::Bool(true)
                    );
                }
                for f in forbidden {
                    prop_assert!(v.get(*f).is_none_or(|b| b.is_null() || b == false), "{f}");
                }
            }
        }
    }
    // (b) the budget is the upstream's usage summed over what it answered.
    prop_assert_eq!(gw.budget.used(), used);
    Ok(())
}

fn campaign(config: &Config, until: Option<Instant>) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let up = Arc::new(rt.block_on(RawUpstream::start()));
    let mut runs = 0u64;
    loop {
        let mut runner = TestRunner::new(config.clone());
        let u = Arc::clone(&up);
        if let Err(e) = runner.run(&case(), |c| rt.block_on(run_case(&u, c))) {
            panic!("{e}");
        }
        runs += 1;
        match until {
            Some(t) if Instant::now() < t => {}
            _ => break,
        }
    }
    eprintln!(
        "fuzz: {runs} runs of {} cases: {} requests sent, {} forwarded, {} bodies refused",
        config.cases,
        SENT.load(Ordering::Relaxed),
        FORWARDED.load(Ordering::Relaxed),
        REFUSED_BODIES.load(Ordering::Relaxed),
    );
}

#[test]
fn fuzzed_targets_and_bodies_keep_the_gateway_s_invariants() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(48);
    campaign(
        &Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        None,
    );
}

#[test]
#[ignore = "the long campaign: RALPH_FUZZ_SECS=600"]
fn fuzz_campaign() {
    let secs: u64 = std::env::var("RALPH_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    campaign(
        &Config {
            cases: 256,
            failure_persistence: None,
            ..Config::default()
        },
        Some(Instant::now() + Duration::from_secs(secs)),
    );
}
