//! The `codex` and `claude` presets against recorded output of the real CLIs
//! (`tests/fixtures/agents/`): per-round usage deltas, never double counts; the report taken
//! from the CLI's structured answer; the CLI's own failures and request retries.

use std::path::{Path, PathBuf};

use ralph_runner::agent::output::{Carry, PresetOutput, read_all};
use ralph_runner::agent::{Preset, presets};
use ralph_runner::usage::UsageTotals;
use serde_json::Value;

fn fixture(rel: &str) -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/agents")
        .join(rel);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn preset(name: &str) -> &'static dyn Preset {
    *presets().iter().find(|p| p.name() == name).unwrap()
}

fn read(name: &str, rel: &str, carry: &mut Carry) -> PresetOutput {
    read_all(preset(name).reader(), &fixture(rel), carry)
}

fn totals(input: u64, cached: u64, output: u64, reasoning: u64, write: u64) -> UsageTotals {
    UsageTotals {
        input_tokens: input,
        cached_input_tokens: cached,
        output_tokens: output,
        reasoning_tokens: reasoning,
        cache_write_input_tokens: write,
    }
}

fn assert_valid_report(out: &PresetOutput, status: &str) {
    let text = out.report.as_deref().expect("a report candidate");
    let r = ralph_runner::report::decode(text.as_bytes(), 16384)
        .unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(r.status.as_str(), status);
}

/// The last `turn.completed.usage` of a recorded stream: the CLI's own cumulative total.
fn codex_final_cumulative(rel: &str) -> UsageTotals {
    let bytes = fixture(rel);
    let last = String::from_utf8(bytes)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .rfind(|v| v["type"] == "turn.completed")
        .unwrap();
    let u = &last["usage"];
    let n = |k: &str| u[k].as_u64().unwrap_or(0);
    totals(
        n("input_tokens"),
        n("cached_input_tokens"),
        n("output_tokens"),
        n("reasoning_output_tokens"),
        n("cache_write_input_tokens"),
    )
}

#[test]
fn codex_cumulative_usage_becomes_per_round_deltas_that_add_up_to_the_final_total() {
    let mut carry = Carry::default();
    let mut sum = UsageTotals::default();
    let mut per_round = Vec::new();
    for i in 1..=3 {
        let out = read("codex", &format!("codex/resume-round{i}.jsonl"), &mut carry);
        assert_eq!(out.error, None, "round {i}");
        assert_eq!(
            out.usage.by_model.keys().collect::<Vec<_>>(),
            vec!["unknown"]
        );
        let t = out.usage.total();
        sum.add(&t);
        per_round.push(t);
    }
    assert_eq!(sum, codex_final_cumulative("codex/resume-round3.jsonl"));
    assert_eq!(per_round[0], totals(24763, 24448, 122, 64, 0));
    assert_eq!(
        per_round[1],
        totals(51200 - 24763, 48896 - 24448, 410 - 122, 192 - 64, 0)
    );
    // Round 3 has two turns: only its last cumulative snapshot counts.
    assert_eq!(
        per_round[2],
        totals(80011 - 51200, 73344 - 48896, 655 - 410, 320 - 192, 0)
    );
}

#[test]
fn codex_fresh_threads_count_each_round_once() {
    let mut carry = Carry::default();
    let mut sum = UsageTotals::default();
    let mut expected = UsageTotals::default();
    for i in 1..=3 {
        let rel = format!("codex/fresh-round{i}.jsonl");
        let out = read("codex", &rel, &mut carry);
        sum.add(&out.usage.total());
        expected.add(&codex_final_cumulative(&rel));
        assert_valid_report(&out, if i == 3 { "complete" } else { "continue" });
    }
    assert_eq!(sum, expected);
    assert_eq!(carry.threads.len(), 3);
}

#[test]
fn codex_reports_the_last_agent_message_and_counts_reconnects() {
    let mut carry = Carry::default();
    let out = read("codex", "codex/resume-round2.jsonl", &mut carry);
    assert_valid_report(&out, "continue");
    assert_eq!(out.retries.get("network"), Some(&1));
    let out = read("codex", "codex/resume-round3.jsonl", &mut Carry::default());
    assert_valid_report(&out, "complete");
}

#[test]
fn codex_newer_usage_fields_are_read() {
    let out = read("codex", "codex/with-reasoning.jsonl", &mut Carry::default());
    assert_eq!(out.usage.total(), totals(17102, 9984, 205, 150, 2048));
}

#[test]
fn codex_failures_are_the_cli_s_verdict() {
    let out = read("codex", "codex/turn-failed.jsonl", &mut Carry::default());
    let e = out.error.unwrap();
    assert!(
        e.contains("turn failed") && e.contains("401 Unauthorized"),
        "{e}"
    );
    assert!(out.usage.by_model.is_empty());

    let out = read("codex", "codex/no-turn.jsonl", &mut Carry::default());
    let e = out.error.unwrap();
    assert!(e.contains("without a completed turn"), "{e}");
    assert_eq!(out.retries.get("server_error"), Some(&1));
    assert_eq!(out.retries.get("rate_limit"), Some(&1));
}

/// A Claude Code result's usage by model, normalised by hand from the fixture (input includes
/// cache reads and writes).
fn claude_expected(rel: &str) -> std::collections::BTreeMap<String, UsageTotals> {
    let text = String::from_utf8(fixture(rel)).unwrap();
    let result = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["type"] == "result")
        .unwrap();
    result["modelUsage"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(m, u)| {
            let n = |k: &str| u[k].as_u64().unwrap();
            (
                m.clone(),
                totals(
                    n("inputTokens") + n("cacheReadInputTokens") + n("cacheCreationInputTokens"),
                    n("cacheReadInputTokens"),
                    n("outputTokens"),
                    0,
                    n("cacheCreationInputTokens"),
                ),
            )
        })
        .collect()
}

#[test]
fn claude_usage_per_model_over_three_rounds_adds_up_to_what_the_cli_reported() {
    let mut carry = Carry::default();
    let mut sum = UsageTotals::default();
    let mut expected = UsageTotals::default();
    for i in 1..=3 {
        let rel = format!("claude/round{i}.jsonl");
        let out = read("claude", &rel, &mut carry);
        assert_eq!(out.error, None);
        let want = claude_expected(&rel);
        assert_eq!(out.usage.by_model, want, "round {i}");
        assert_eq!(
            out.usage.by_model.keys().collect::<Vec<_>>(),
            vec!["claude-haiku-4-5-20251001", "claude-sonnet-4-5-20250929"]
        );
        for u in want.values() {
            expected.add(u);
        }
        sum.add(&out.usage.total());
        assert_valid_report(&out, if i == 3 { "complete" } else { "continue" });
    }
    assert_eq!(sum, expected);
    // Round 1 sonnet, by hand: 21 + 81100 + 9010 input of which 81100 cached, 9010 written.
    let r1 = read("claude", "claude/round1.jsonl", &mut Carry::default());
    assert_eq!(
        r1.usage.by_model["claude-sonnet-4-5-20250929"],
        totals(21 + 81100 + 9010, 81100, 1703, 0, 9010)
    );
}

#[test]
fn claude_api_retries_are_counted_by_reason() {
    let out = read("claude", "claude/round2.jsonl", &mut Carry::default());
    assert_eq!(out.retries.get("overloaded"), Some(&1));
    assert_eq!(out.retries.get("rate_limit"), Some(&1));
    let out = read("claude", "claude/round1.jsonl", &mut Carry::default());
    assert!(out.retries.is_empty());
}

#[test]
fn claude_is_error_is_respected_even_when_the_subtype_says_success() {
    let out = read(
        "claude",
        "claude/error-success-subtype.json",
        &mut Carry::default(),
    );
    let e = out.error.unwrap();
    assert!(
        e.contains("is_error true") && e.contains("API Error: 500"),
        "{e}"
    );
}

#[test]
fn claude_error_subtypes_fail_the_round_but_keep_the_tokens_spent() {
    let out = read("claude", "claude/max-turns.json", &mut Carry::default());
    assert!(out.error.unwrap().contains("error_max_turns"));
    assert_eq!(
        out.usage.total(),
        totals(61 + 401223 + 22301, 401223, 6120, 0, 22301)
    );
}

#[test]
fn claude_json_array_output_and_missing_result() {
    let out = read("claude", "claude/verbose-array.json", &mut Carry::default());
    assert_eq!(out.error, None);
    assert_valid_report(&out, "complete");
    assert_eq!(
        out.usage.by_model["claude-opus-4-5-20251101"],
        totals(3 + 1200 + 15000, 15000, 40, 0, 1200)
    );
    let out = read("claude", "claude/no-result.jsonl", &mut Carry::default());
    assert!(out.error.unwrap().contains("without a result"));
    assert_eq!(out.retries.get("network"), Some(&1));
}

#[test]
fn presets_build_their_command_lines_with_the_prompt_on_stdin() {
    let input = PathBuf::from("/state/jobs/j/rounds/1/1/in");
    let ws = PathBuf::from("/ws");
    let p = PathBuf::from("/x");
    let files = ralph_runner::agent::RoundFiles {
        prompt: &p,
        report: &p,
        usage: &p,
        workspace: &ws,
        input_dir: &input,
    };
    let none = ralph_runner::agent::AgentOptions::default();
    let codex = preset("codex").argv(&files, &none);
    assert_eq!(codex[..3], ["codex", "exec", "--json"]);
    assert!(codex.contains(&"/state/jobs/j/rounds/1/1/in/report.schema.json".to_owned()));
    assert!(codex.contains(&"--dangerously-bypass-approvals-and-sandbox".to_owned()));
    assert_eq!(codex.last().map(String::as_str), Some("-"));
    let claude = preset("claude").argv(&files, &none);
    assert_eq!(claude[..2], ["claude", "-p"]);
    let schema_at = claude.iter().position(|a| a == "--json-schema").unwrap();
    let schema: Value = serde_json::from_str(&claude[schema_at + 1]).unwrap();
    assert_eq!(schema["required"].as_array().unwrap().len(), 5);
    assert_eq!(schema["additionalProperties"], false);
}

#[test]
fn presets_point_their_cli_at_the_gateway_with_a_placeholder_key() {
    let input = PathBuf::from("/in");
    let ws = PathBuf::from("/ws");
    let p = PathBuf::from("/x");
    let files = ralph_runner::agent::RoundFiles {
        prompt: &p,
        report: &p,
        usage: &p,
        workspace: &ws,
        input_dir: &input,
    };
    let args = vec!["-c".to_owned(), "model_reasoning_effort=\"low\"".to_owned()];
    let opts = ralph_runner::agent::AgentOptions {
        gateway_url: Some("http://127.0.0.1:41410/v1"),
        model: Some("gpt-5-codex"),
        args: &args,
        ..Default::default()
    };
    let codex = preset("codex").argv(&files, &opts);
    let joined = codex.join(" ");
    // Codex 0.169 ignores OPENAI_BASE_URL: a model provider of its own points it at the gateway.
    assert!(joined.contains("-c model_provider=\"ralph\""), "{joined}");
    assert!(
        joined.contains("-c model_providers.ralph.base_url=\"http://127.0.0.1:41410/v1\""),
        "{joined}"
    );
    assert!(joined.contains("model_providers.ralph.env_key=\"OPENAI_API_KEY\""));
    assert!(joined.contains("--model gpt-5-codex -c model_reasoning_effort=\"low\" -"));
    assert_eq!(codex.last().map(String::as_str), Some("-"));
    let env = preset("codex").env(&opts);
    assert_eq!(
        env,
        [(
            "OPENAI_API_KEY".to_owned(),
            ralph_runner::agent::KEY_PLACEHOLDER.to_owned()
        )]
    );
    let claude = preset("claude").argv(&files, &opts);
    assert!(
        claude
            .join(" ")
            .ends_with("--model gpt-5-codex -c model_reasoning_effort=\"low\"")
    );
    let env: std::collections::BTreeMap<String, String> =
        preset("claude").env(&opts).into_iter().collect();
    assert_eq!(env["ANTHROPIC_BASE_URL"], "http://127.0.0.1:41410/v1");
    assert_eq!(
        env["ANTHROPIC_API_KEY"],
        ralph_runner::agent::KEY_PLACEHOLDER
    );
    assert_eq!(env["IS_SANDBOX"], "1");
    // Without a gateway (`--network full`), no key variable is set by the preset.
    let none = ralph_runner::agent::AgentOptions::default();
    assert!(preset("codex").env(&none).is_empty());
    assert!(
        !preset("claude")
            .env(&none)
            .iter()
            .any(|(k, _)| k.starts_with("ANTHROPIC"))
    );
}

fn ralph(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_ralph"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn ralph_agent_lists_and_shows_the_presets() {
    let out = ralph(&["agent", "list", "--json"]);
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["codex", "claude", "builtin"]);
    let out = ralph(&["agent", "show", "codex", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["argv"][0], "codex");
    // The built-in agent shows what it tells the model: its system message and tool schemas.
    let out = ralph(&["agent", "show", "builtin", "--json"]);
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["argv"][1], "__builtin-agent");
    assert!(
        v["system_message"]
            .as_str()
            .unwrap()
            .contains("`edit_file` replaces exactly one occurrence")
    );
    let tools: Vec<&str> = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["shell", "read_file", "write_file", "edit_file"]);
    assert_eq!(
        v["tools"][3]["function"]["parameters"]["required"],
        serde_json::json!(["path", "old", "new"])
    );
    let out = ralph(&["agent", "show", "builtin"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("\nsystem message:\nYou are a coding agent"),
        "{text}"
    );
    assert!(text.contains("\ntools:\n["), "{text}");
    let out = ralph(&["agent", "show", "nope"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("available: codex, claude"));
}

#[test]
fn ralph_completions_prints_a_script_per_shell() {
    for (shell, marker) in [
        ("bash", "_ralph()"),
        ("zsh", "#compdef ralph"),
        ("fish", "complete -c ralph"),
    ] {
        let out = ralph(&["completions", shell]);
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(marker),
            "{shell}: {}",
            &text[..text.len().min(200)]
        );
        assert!(
            text.contains("metrics-textfile"),
            "{shell} completes the flags"
        );
    }
    assert_eq!(ralph(&["completions", "nosh"]).status.code(), Some(64));
}
