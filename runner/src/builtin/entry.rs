//! `ralph __builtin-agent`: the built-in agent as a round's process. It reads what every agent
//! reads (`RALPH_PROMPT_FILE`, `RALPH_REPORT_FILE`, `RALPH_WORKSPACE`, `RALPH_GATEWAY_URL`), runs
//! one round ([`super::run`]) and prints its events as JSON lines on stdout, for the runner to
//! count (steps, tool calls, retries). Exit status: 0 when the model gave its final answer (the
//! runner validates the report), 2 on a usage error, 3 when the steps ran out, 4 when the model
//! server failed.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use super::{BuiltinError, Config, DEFAULT_CONTEXT_BUDGET, DEFAULT_MAX_STEPS};

/// The hidden subcommand.
pub const ARG: &str = "__builtin-agent";

/// Prints one event line (a closed stdout is not the agent's problem: the runner has the files).
fn emit(v: &serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

fn usage(message: &str) -> ExitCode {
    emit(&serde_json::json!({"type": "error", "message": message}));
    eprintln!("ralph builtin agent: {message}");
    ExitCode::from(2)
}

fn env_path(name: &str) -> Result<PathBuf, String> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| format!("`{name}` is not set: the built-in agent runs inside a round"))
}

/// Parses `--model NAME --max-steps N [--no-stream]`.
fn parse(args: &[OsString]) -> Result<(String, u32, bool), String> {
    let (mut model, mut steps, mut stream) = (None, DEFAULT_MAX_STEPS, true);
    let mut it = args.iter().map(|a| a.to_string_lossy().into_owned());
    while let Some(a) = it.next() {
        match a.as_str() {
            "--model" => model = it.next(),
            "--max-steps" => {
                let v = it.next().unwrap_or_default();
                steps = v
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("--max-steps: `{v}` is not a positive number"))?;
            }
            "--no-stream" => stream = false,
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    let model = model
        .filter(|m| !m.is_empty())
        .ok_or("--model is required")?;
    Ok((model, steps, stream))
}

/// Runs the agent with the arguments after the subcommand.
pub fn main(args: Vec<OsString>) -> ExitCode {
    let (model, max_steps, stream) = match parse(&args) {
        Ok(p) => p,
        Err(e) => return usage(&e),
    };
    let paths = (|| {
        Ok::<_, String>((
            env_path("RALPH_PROMPT_FILE")?,
            env_path("RALPH_REPORT_FILE")?,
            env_path("RALPH_WORKSPACE")?,
            std::env::var("RALPH_GATEWAY_URL")
                .ok()
                .filter(|u| !u.is_empty())
                .ok_or("`RALPH_GATEWAY_URL` is not set: the built-in agent needs the job's model gateway (--upstream)")?,
        ))
    })();
    let (prompt_file, report_file, workspace, base_url) = match paths {
        Ok(p) => p,
        Err(e) => return usage(&e),
    };
    let prompt = match std::fs::read_to_string(&prompt_file) {
        Ok(p) => p,
        Err(e) => return usage(&format!("failed to read {}: {e}", prompt_file.display())),
    };
    let cfg = Config {
        base_url,
        model,
        max_steps,
        workspace,
        report_file,
        prompt,
        stream,
        context_budget: DEFAULT_CONTEXT_BUDGET,
        limits: super::tools::ToolLimits::default(),
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return usage(&format!("failed to start the runtime: {e}")),
    };
    match rt.block_on(super::run(&cfg, |e| emit(&e))) {
        Ok(super::Ending::Answered { steps }) => {
            emit(&serde_json::json!({"type": "done", "steps": steps}));
            ExitCode::SUCCESS
        }
        Err(e) => {
            emit(&serde_json::json!({"type": "error", "message": e.to_string()}));
            eprintln!("ralph builtin agent: {e}");
            match e {
                BuiltinError::OutOfSteps { .. } => ExitCode::from(3),
                BuiltinError::Chat { .. } | BuiltinError::Report { .. } => ExitCode::from(4),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn arguments_are_checked() {
        assert_eq!(
            parse(&args(&["--model", "m", "--max-steps", "7", "--no-stream"])).unwrap(),
            ("m".to_owned(), 7, false)
        );
        assert_eq!(
            parse(&args(&["--model", "m"])).unwrap().1,
            DEFAULT_MAX_STEPS
        );
        assert!(parse(&args(&[])).unwrap_err().contains("--model"));
        assert!(parse(&args(&["--model", "m", "--max-steps", "0"])).is_err());
        assert!(parse(&args(&["--model", "m", "--bogus"])).is_err());
    }
}
