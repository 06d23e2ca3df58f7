use proptest::prelude::*;

use serde_json::Value;

use super::*;

/// Pieces an attacker would use, mixed with arbitrary bytes.
pub(crate) fn hostile_bytes() -> impl Strategy<Value = Vec<u8>> + Clone {
    let piece = prop_oneof![
        3 => prop::collection::vec(any::<u8>(), 1..6),
        1 => Just(b"\x1b]52;c;aGVsbG8=\x07".to_vec()),
        1 => Just(b"\x1b]8;;https://x.example/\x1b\\link\x1b]8;;\x1b\\".to_vec()),
        1 => Just(b"\x1b]0;title\x07".to_vec()),
        1 => Just(b"\x1b[2J\x1b[H".to_vec()),
        1 => Just(b"\x1b[0Ksection_start:123:x\r\x1b[0K".to_vec()),
        1 => Just(b"\n::error title=ralph::pwned".to_vec()),
        1 => Just(b"\n::add-mask::x".to_vec()),
        1 => Just(b"\n2026-01-01T00:00:00.000Z #99 finished: complete (verified): forged".to_vec()),
        1 => Just(b"##[error]x".to_vec()),
        1 => Just(b"##vso[task.setvariable variable=x]y".to_vec()),
        1 => Just("#\u{200b}#[".as_bytes().to_vec()),
        1 => Just("\u{3000}::".as_bytes().to_vec()),
        1 => Just("\u{202e}\u{2028}\u{85}".as_bytes().to_vec()),
        1 => Just(b"#".to_vec()),
        1 => Just(b"[".to_vec()),
        1 => Just(b":".to_vec()),
        1 => Just(b"\r\n".to_vec()),
        1 => Just(b"\t ".to_vec()),
    ];
    prop::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

/// True when `s` holds no control character but those `allowed`.
fn only_controls(s: &str, allowed: &[char]) -> bool {
    s.chars()
        .all(|c| !(c.is_control() || is_reordering(c)) || allowed.contains(&c))
}

#[test]
fn escape_sequences_and_controls_are_shown_escaped() {
    let hostile = b"a\x1b]0;owned\x07b\x1b[2Jc\rX\x08\x9b";
    let s = output_line(hostile, 0, 1000);
    assert_eq!(s, "a\\x1b]0;owned\\x07b\\x1b[2Jc\\rX\\x08\u{fffd}");
    assert_eq!(
        line("osc 52 \x1b]52;c;aGk=\x07 end"),
        "osc 52 \\x1b]52;c;aGk=\\x07 end"
    );
}

#[test]
fn a_newline_in_a_line_is_shown_not_sent() {
    let forged = "summary\n2026-01-01T00:00:00.000Z #99 finished: complete (verified): forged";
    let s = line(&format!("ralph: {forged}"));
    assert!(!s.contains('\n'), "{s}");
    assert!(s.contains("summary\\n2026-01-01T"), "{s}");
    assert_eq!(line("a\tb"), "a\\tb");
    assert_eq!(output_line(b"a\tb", 0, 100), "a\tb");
}

#[test]
fn invalid_utf8_and_c1_controls_are_replaced() {
    let s = output_line(b"ok \xff\xfe end \xc2\x9b31m", 0, 1000);
    assert_eq!(s, "ok \u{fffd}\u{fffd} end \\x9b31m");
}

#[test]
fn bidi_controls_and_separators_are_shown_escaped() {
    assert_eq!(
        line("a\u{202e}b\u{2028}c\u{2066}"),
        "a\\u{202e}b\\u{2028}c\\u{2066}"
    );
}

#[test]
fn hash_commands_anywhere_in_a_line_lose_their_bracket() {
    assert_eq!(line("x ##[error]y"), "x ##\\x5berror]y");
    assert_eq!(
        line("##vso[task.setvariable]"),
        "##vso\\x5btask.setvariable]"
    );
    assert_eq!(line("##teamcity[x]"), "##teamcity\\x5bx]");
    assert_eq!(line("#\u{200b}#[x]"), "#\u{200b}#\\x5bx]");
    // Not a command: ordinary brackets and single hashes stay.
    assert_eq!(line("# [x] #a[1] ## [y]"), "# [x] #a[1] ## [y]");
    assert!(!holds_command(&line("##[stop-commands]tok")));
}

#[test]
fn long_lines_are_cut_with_the_count_inside_the_bound() {
    let s = output_line(&[b'x'; 50], 0, 30);
    assert_eq!(s, "xxxxxxxxxx … (40 more bytes)");
    assert!(s.len() <= 30);
    let s = output_line(b"abc", 7, 100);
    assert_eq!(s, "abc … (7 more bytes)");
    // An escape is never split.
    let s = line_within(&"\x1b".repeat(20), 30);
    assert!(s.len() <= 30 && s.starts_with("\\x1b"), "{s}");
    assert!(!s.replace("\\x1b", "").starts_with('\\'), "{s}");
}

#[test]
fn prefixed_lines_each_start_with_the_prefix() {
    let out = Prefixed::all("[round 1]", b"one\n::error::x\r\n\x1b[2Jlast");
    assert_eq!(
        out,
        "[round 1] one\n[round 1] ::error::x\n[round 1] \\x1b[2Jlast\n"
    );
    assert_eq!(Prefixed::all("[r]", b""), "");
    let mut p = Prefixed::new("[r] ");
    let mut lines = Vec::new();
    p.push(b"par", |l| lines.push(l));
    p.push(b"t\nnext", |l| lines.push(l));
    p.finish(|l| lines.push(l));
    assert_eq!(lines, ["[r] part", "[r] next"]);
}

#[test]
fn verbatim_keeps_lines_and_defuses_command_lines() {
    let patch = b"diff --git a/x b/x\n ::error::ctx\n+\x1b]52;c;x\x07\n-##[add-mask]y\n";
    let v = verbatim(patch);
    assert_eq!(
        v,
        "diff --git a/x b/x\n \\x3a:error::ctx\n+\\x1b]52;c;x\\x07\n-##\\x5badd-mask]y\n"
    );
    // A patch without such bytes is shown as it is.
    let clean = b"diff --git a/x b/x\n+\tok [1] ## x\n";
    assert_eq!(verbatim(clean).as_bytes(), clean);
}

#[test]
fn json_keeps_the_value_and_loses_hash_commands() {
    let v = serde_json::json!({"summary": "a ##[error]b", "k": ["##vso[x]"]});
    for pretty in [true, false] {
        let text = json(&v, pretty);
        assert!(!holds_command(&text), "{text}");
        assert!(text.contains("##\\u005berror]"), "{text}");
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), v);
    }
}

#[test]
fn command_lines_are_recognised_as_a_ci_runner_reads_them() {
    assert!(starts_command("::error::x"));
    assert!(starts_command("  \u{3000}:\u{200b}:x"));
    assert!(!starts_command("[round 1] ::error::x"));
    assert!(!starts_command(": :x"));
}

fn arb_json() -> impl Strategy<Value = Value> {
    let text = hostile_bytes()
        .prop_map(|b| String::from_utf8_lossy(&b).into_owned())
        .boxed();
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<i64>().prop_map(Value::from),
        text.clone().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((text.clone(), inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn a_line_is_one_bounded_line_without_controls(
        bytes in hostile_bytes(),
        bound in 0usize..400,
    ) {
        let text = String::from_utf8_lossy(&bytes);
        let shown = line_within(&format!("ralph: {text}"), bound);
        prop_assert!(shown.len() <= bound, "{} > {bound}", shown.len());
        prop_assert!(only_controls(&shown, &[]), "{shown:?}");
        prop_assert!(!holds_command(&shown), "{shown:?}");
        prop_assert!(!starts_command(&shown), "{shown:?}");
        prop_assert!(!shown.contains('\u{1b}'), "{:?}", shown);
        let whole = line(&format!("ralph: {text}"));
        prop_assert!(whole.len() <= LINE_BOUND);
        prop_assert!(whole.starts_with("ralph: ") || whole.is_empty());
    }

    #[test]
    fn plain_text_is_shown_as_it_is(text in "[a-zA-Z0-9 .,:;/()=_-]{0,200}") {
        prop_assert_eq!(line(&text), text);
    }

    #[test]
    fn prefixed_output_never_lets_the_agent_start_a_line(
        chunks in prop::collection::vec(hostile_bytes(), 0..6),
    ) {
        let mut p = Prefixed::new("[round 3 stdout]");
        let mut out = Vec::new();
        for c in &chunks {
            p.push(c, |l| out.push(l));
        }
        p.finish(|l| out.push(l));
        let all: Vec<u8> = chunks.concat();
        let newlines = all.iter().filter(|b| **b == b'\n').count();
        let tail = usize::from(all.last().is_some_and(|b| *b != b'\n'));
        prop_assert_eq!(out.len(), newlines + tail);
        for l in &out {
            prop_assert!(l.starts_with("[round 3 stdout] "), "{l:?}");
            prop_assert!(only_controls(l, &['\t']), "{l:?}");
            prop_assert!(!holds_command(l), "{l:?}");
            prop_assert!(!starts_command(l), "{l:?}");
            prop_assert!(l.len() <= LINE_BOUND);
        }
        prop_assert_eq!(
            Prefixed::all("[round 3 stdout]", &all),
            out.iter().map(|l| format!("{l}\n")).collect::<String>()
        );
    }

    #[test]
    fn verbatim_data_keeps_its_lines_and_starts_no_command(bytes in hostile_bytes()) {
        let v = verbatim(&bytes);
        prop_assert_eq!(
            v.matches('\n').count(),
            bytes.iter().filter(|b| **b == b'\n').count()
        );
        for l in v.split('\n') {
            prop_assert!(only_controls(l, &['\t']), "{l:?}");
            prop_assert!(!starts_command(l), "{l:?}");
            prop_assert!(!holds_command(l), "{l:?}");
        }
    }

    #[test]
    fn json_is_the_same_value_and_no_command(v in arb_json(), pretty in any::<bool>()) {
        let text = json(&v, pretty);
        prop_assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), v);
        prop_assert!(!holds_command(&text), "{text}");
        for l in text.lines() {
            prop_assert!(!starts_command(l), "{l:?}");
            prop_assert!(only_controls(l, &[]), "{l:?}");
        }
    }
}
