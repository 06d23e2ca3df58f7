//! Unit tests of the report contract: each rule accepted and rejected, the cap boundary, and a
//! property test that arbitrary input never panics the decoder.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

const CAP: usize = DEFAULT_HANDOFF_CAP;

fn dec(v: Value) -> Result<Report, ReportError> {
    decode(v.to_string().as_bytes(), CAP)
}

fn cont() -> Value {
    json!({"status":"continue","summary":"did a thing","evidence":[],"nextSteps":["do more"],"blocker":""})
}

#[test]
fn accepts_each_valid_status() {
    assert_eq!(dec(cont()).unwrap().status, Status::Continue);
    let c = json!({"status":"complete","summary":"done","evidence":["tests pass"],"nextSteps":[],"blocker":""});
    assert_eq!(dec(c).unwrap().status, Status::Complete);
    let b = json!({"status":"blocked","summary":"stuck","evidence":[],"nextSteps":["ask"],"blocker":"no access"});
    assert_eq!(dec(b).unwrap().status, Status::Blocked);
}

#[test]
fn rejects_input_that_is_not_json() {
    assert!(matches!(
        decode(b"not json", CAP),
        Err(ReportError::NotJson { .. })
    ));
    assert!(matches!(
        decode(b"{\"status\":", CAP),
        Err(ReportError::NotJson { .. })
    ));
    assert!(matches!(decode(b"", CAP), Err(ReportError::NotJson { .. })));
    assert!(matches!(
        decode(b"{} {}", CAP),
        Err(ReportError::NotJson { .. })
    ));
}

#[test]
fn rejects_non_objects() {
    for (v, found) in [
        (json!([1]), "an array"),
        (json!("x"), "a string"),
        (json!(null), "null"),
        (json!(3), "a number"),
    ] {
        assert_eq!(dec(v).unwrap_err(), ReportError::NotObject { found });
    }
}

#[test]
fn rejects_each_missing_key() {
    for key in KEYS {
        let mut v = cont();
        v.as_object_mut().unwrap().remove(key);
        let err = dec(v).unwrap_err();
        assert_eq!(err, ReportError::MissingKey { key });
        assert!(err.to_string().contains(key));
    }
}

#[test]
fn rejects_an_extra_key() {
    let mut v = cont();
    v.as_object_mut()
        .unwrap()
        .insert("confidence".into(), json!(0.9));
    let err = dec(v).unwrap_err();
    assert_eq!(
        err,
        ReportError::UnknownKey {
            key: "confidence".into()
        }
    );
    assert!(err.to_string().contains("`confidence`"));
}

#[test]
fn rejects_a_duplicate_key() {
    let raw = br#"{"status":"continue","status":"complete","summary":"s","evidence":["e"],"nextSteps":[],"blocker":""}"#;
    assert_eq!(
        decode(raw, CAP).unwrap_err(),
        ReportError::DuplicateKey {
            key: "status".into()
        }
    );
}

#[test]
fn rejects_wrong_types() {
    let cases = [
        ("status", json!(1), "status"),
        ("summary", json!(["x"]), "summary"),
        ("evidence", json!("x"), "evidence"),
        ("nextSteps", json!([1]), "nextSteps"),
        ("blocker", json!(null), "blocker"),
    ];
    for (key, value, named) in cases {
        let mut v = cont();
        v[key] = value;
        let err = dec(v).unwrap_err();
        assert!(
            matches!(err, ReportError::WrongType { key, .. } if key == named),
            "{err}"
        );
    }
}

#[test]
fn rejects_an_unknown_status() {
    let mut v = cont();
    v["status"] = json!("done");
    assert_eq!(
        dec(v).unwrap_err(),
        ReportError::InvalidStatus {
            found: "done".into()
        }
    );
}

#[test]
fn summary_must_not_be_blank() {
    for s in ["", "   ", "\n\t"] {
        let mut v = cont();
        v["summary"] = json!(s);
        assert_eq!(dec(v).unwrap_err(), ReportError::EmptySummary);
    }
}

#[test]
fn list_items_must_not_be_blank() {
    let mut v = cont();
    v["nextSteps"] = json!(["ok", "  "]);
    assert_eq!(
        dec(v).unwrap_err(),
        ReportError::EmptyItem {
            key: "nextSteps",
            index: 1
        }
    );
    let mut v = cont();
    v["evidence"] = json!([""]);
    assert_eq!(
        dec(v).unwrap_err(),
        ReportError::EmptyItem {
            key: "evidence",
            index: 0
        }
    );
}

#[test]
fn blocker_must_equal_its_trim() {
    let b = json!({"status":"blocked","summary":"s","evidence":[],"nextSteps":[],"blocker":" no access"});
    assert_eq!(dec(b).unwrap_err(), ReportError::UntrimmedBlocker);
}

fn rule_of(v: Value) -> &'static str {
    match dec(v).unwrap_err() {
        ReportError::StatusRule { rule, .. } => rule,
        other => panic!("expected a status rule, got {other}"),
    }
}

#[test]
fn continue_rules() {
    let mut v = cont();
    v["nextSteps"] = json!([]);
    assert_eq!(rule_of(v), "needs at least one item in `nextSteps`");
    let mut v = cont();
    v["blocker"] = json!("x");
    assert_eq!(rule_of(v), "needs an empty `blocker`");
}

#[test]
fn complete_rules() {
    let base =
        json!({"status":"complete","summary":"s","evidence":["e"],"nextSteps":[],"blocker":""});
    let mut v = base.clone();
    v["evidence"] = json!([]);
    assert_eq!(rule_of(v), "needs at least one item in `evidence`");
    let mut v = base.clone();
    v["nextSteps"] = json!(["more"]);
    assert_eq!(rule_of(v), "must have no `nextSteps`");
    let mut v = base;
    v["blocker"] = json!("x");
    assert_eq!(rule_of(v), "needs an empty `blocker`");
}

#[test]
fn blocked_rules() {
    let v = json!({"status":"blocked","summary":"s","evidence":[],"nextSteps":[],"blocker":""});
    assert_eq!(rule_of(v), "needs a non-empty `blocker`");
    // A blocked report may still carry evidence and next steps.
    let ok =
        json!({"status":"blocked","summary":"s","evidence":["e"],"nextSteps":["n"],"blocker":"b"});
    assert!(dec(ok).is_ok());
}

/// A continue report whose compact JSON is exactly `size` bytes.
fn report_of_size(size: usize) -> Value {
    let mut v = cont();
    v["summary"] = json!("");
    let base = v.to_string().len();
    v["summary"] = json!("x".repeat(size - base));
    assert_eq!(v.to_string().len(), size);
    v
}

#[test]
fn a_report_of_exactly_the_cap_is_accepted() {
    let r = dec(report_of_size(CAP)).unwrap();
    assert_eq!(r.to_compact_json().len(), CAP);
}

#[test]
fn a_report_one_byte_over_the_cap_is_rejected() {
    assert_eq!(
        dec(report_of_size(CAP + 1)).unwrap_err(),
        ReportError::Oversize {
            size: CAP + 1,
            cap: CAP
        }
    );
}

#[test]
fn size_is_measured_on_compact_json_not_raw_bytes() {
    // Whitespace in the input does not count; the compact form does.
    let v = report_of_size(CAP);
    let pretty = serde_json::to_string_pretty(&v).unwrap();
    assert!(pretty.len() > CAP);
    assert!(decode(pretty.as_bytes(), CAP).is_ok());
}

#[test]
fn enormous_input_is_refused_before_parsing() {
    let huge = vec![b' '; decode::raw_limit(CAP) + 1];
    assert!(matches!(
        decode(&huge, CAP),
        Err(ReportError::InputTooLarge { .. })
    ));
}

#[test]
fn decode_value_applies_the_same_rules() {
    let mut v = cont();
    v["extra"] = json!(1);
    assert!(matches!(
        decode_value(&v, CAP),
        Err(ReportError::UnknownKey { .. })
    ));
    assert!(decode_value(&cont(), CAP).is_ok());
}

#[test]
fn compact_json_round_trips() {
    let r = dec(cont()).unwrap();
    assert_eq!(decode(r.to_compact_json().as_bytes(), CAP).unwrap(), r);
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        ".{0,20}".prop_map(Value::from),
        prop::sample::select(vec!["continue", "complete", "blocked", "", " x "])
            .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop::sample::select(vec![
                        "status",
                        "summary",
                        "evidence",
                        "nextSteps",
                        "blocker",
                        "x"
                    ]),
                    inner
                ),
                0..7
            )
            .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())),
        ]
    })
}

proptest! {
    #[test]
    fn random_json_never_panics(v in arb_json(), cap in 0usize..400) {
        let _ = decode(v.to_string().as_bytes(), cap);
        let _ = decode_value(&v, cap);
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode(&bytes, CAP);
    }

    #[test]
    fn accepted_reports_satisfy_every_rule(v in arb_json()) {
        if let Ok(r) = decode(v.to_string().as_bytes(), CAP) {
            prop_assert!(!r.summary.trim().is_empty());
            prop_assert_eq!(r.blocker.trim(), r.blocker.as_str());
            match r.status {
                Status::Continue => prop_assert!(!r.next_steps.is_empty() && r.blocker.is_empty()),
                Status::Complete => prop_assert!(!r.evidence.is_empty() && r.next_steps.is_empty() && r.blocker.is_empty()),
                Status::Blocked => prop_assert!(!r.blocker.is_empty()),
            }
            prop_assert!(r.to_compact_json().len() <= CAP);
        }
    }
}

/// Text that is non-empty after trimming (and, for the blocker, its own trim).
fn arb_text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_ .é✓-]{0,12}[a-zA-Z0-9é✓]".prop_map(|s| s.trim().to_owned())
}

fn arb_items(min: usize) -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(arb_text(), min..4)
}

/// Reports that keep every rule of SPEC §2, for each status.
fn arb_valid_report() -> impl Strategy<Value = Value> {
    prop_oneof![
        (arb_text(), arb_items(0), arb_items(1)).prop_map(|(s, e, n)| json!({
            "status": "continue", "summary": s, "evidence": e, "nextSteps": n, "blocker": ""
        })),
        (arb_text(), arb_items(1)).prop_map(|(s, e)| json!({
            "status": "complete", "summary": s, "evidence": e, "nextSteps": [], "blocker": ""
        })),
        (arb_text(), arb_items(0), arb_items(0), arb_text()).prop_map(|(s, e, n, b)| json!({
            "status": "blocked", "summary": s, "evidence": e, "nextSteps": n, "blocker": b
        })),
    ]
}

/// One change that breaks a valid report (each rule of SPEC §2 in turn).
fn break_report(mut v: Value, which: usize) -> Value {
    let o = v.as_object_mut().unwrap();
    let status = o["status"].as_str().unwrap().to_owned();
    match which % 9 {
        0 => {
            o.remove(KEYS[which / 9 % KEYS.len()]);
        }
        1 => {
            o.insert("extra".into(), json!(1));
        }
        2 => {
            o.insert("summary".into(), json!("  "));
        }
        3 => {
            o.insert("evidence".into(), json!(["ok", " "]));
        }
        4 => {
            o.insert("blocker".into(), json!(" untrimmed "));
        }
        5 => {
            o.insert("status".into(), json!("done"));
        }
        6 => {
            o.insert("nextSteps".into(), json!("not a list"));
        }
        7 => {
            // The status rule: continue without next steps, complete with some, blocked
            // without a blocker.
            match status.as_str() {
                "continue" => o.insert("nextSteps".into(), json!([])),
                "complete" => o.insert("nextSteps".into(), json!(["more"])),
                _ => o.insert("blocker".into(), json!("")),
            };
        }
        _ => {
            o.insert("summary".into(), json!("x".repeat(CAP)));
        }
    }
    v
}

/// Valid reports and near-valid ones (a valid report with one rule broken), about half each.
fn arb_report_like() -> impl Strategy<Value = (Value, bool)> {
    prop_oneof![
        arb_valid_report().prop_map(|v| (v, true)),
        (arb_valid_report(), 0usize..45).prop_map(|(v, w)| (break_report(v, w), false)),
    ]
}

fn satisfies_every_rule(r: &Report) -> bool {
    let by_status = match r.status {
        Status::Continue => !r.next_steps.is_empty() && r.blocker.is_empty(),
        Status::Complete => {
            !r.evidence.is_empty() && r.next_steps.is_empty() && r.blocker.is_empty()
        }
        Status::Blocked => !r.blocker.is_empty(),
    };
    by_status
        && !r.summary.trim().is_empty()
        && r.blocker.trim() == r.blocker
        && r.evidence
            .iter()
            .chain(&r.next_steps)
            .all(|i| !i.trim().is_empty())
        && r.to_compact_json().len() <= CAP
}

proptest! {
    #[test]
    fn generated_valid_reports_are_accepted_and_round_trip(v in arb_valid_report()) {
        let r = decode(v.to_string().as_bytes(), CAP);
        prop_assert!(r.is_ok(), "{v} rejected: {r:?}");
        let r = r.unwrap();
        prop_assert!(satisfies_every_rule(&r));
        prop_assert_eq!(serde_json::to_value(&r).unwrap(), v);
    }

    #[test]
    fn near_valid_reports_are_rejected_and_valid_ones_accepted((v, valid) in arb_report_like()) {
        let r = decode(v.to_string().as_bytes(), CAP);
        prop_assert_eq!(r.is_ok(), valid, "{} -> {:?}", v, r);
        if let Ok(r) = r {
            prop_assert!(satisfies_every_rule(&r));
        }
    }
}

#[test]
fn the_mixed_strategy_exercises_both_branches() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = arb_report_like();
    let n = 400;
    let accepted = (0..n)
        .filter(|_| {
            let (v, _) = strategy.new_tree(&mut runner).unwrap().current();
            decode(v.to_string().as_bytes(), CAP).is_ok()
        })
        .count();
    assert!(
        (n / 4..=n * 3 / 4).contains(&accepted),
        "{accepted} of {n} accepted: both branches must be exercised"
    );
}

#[test]
fn one_leading_bom_is_skipped() {
    let text = cont().to_string();
    let with_bom = [UTF8_BOM_BYTES, text.as_bytes()].concat();
    assert_eq!(decode(&with_bom, CAP).unwrap(), dec(cont()).unwrap());
    // Only one, and only first.
    let two = [UTF8_BOM_BYTES, UTF8_BOM_BYTES, text.as_bytes()].concat();
    assert!(matches!(
        decode(&two, CAP),
        Err(ReportError::NotJson { .. })
    ));
    let inside = [b" ".as_slice(), UTF8_BOM_BYTES, text.as_bytes()].concat();
    assert!(matches!(
        decode(&inside, CAP),
        Err(ReportError::NotJson { .. })
    ));
}

const UTF8_BOM_BYTES: &[u8] = decode::UTF8_BOM;
