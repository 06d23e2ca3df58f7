//! Judging one attempt, as a pure function: how the process ended, what the report file and
//! stdout held, what a preset read from the CLI's stream and the report policy decide the
//! attempt's [`AttemptEnd`]. The caller reads the files; nothing here touches the system.

use ralph_sandbox::Termination;
use ralph_sandbox::outcome::{EndedBy, ExecOutcome};

use super::round::{AttemptEnd, ReportPolicy};
use super::stdout_report::StdoutReport;
use crate::agent::output::PresetOutput;
use crate::job::RoundFailure;
use crate::report::{self, Report, ReportError};
use crate::util::text::bounded;

/// Everything an attempt's end is decided from.
pub(crate) struct AttemptFacts<'a> {
    /// The sandbox's account of the process.
    pub outcome: &'a ExecOutcome,
    /// The report file, decoded (`None`: it does not exist).
    pub report_file: Option<Result<Report, ReportError>>,
    /// The last JSON-object line of stdout.
    pub stdout: Option<StdoutReport>,
    /// What a preset read from the CLI's stream.
    pub preset: Option<&'a PresetOutput>,
    /// Where the report may come from.
    pub policy: ReportPolicy,
    /// Whether the job deadline (not the round timeout) bounded the process.
    pub deadline_bound: bool,
    /// The round timeout, as the user wrote it.
    pub round_timeout: Option<String>,
    /// The handoff cap.
    pub cap: usize,
    /// The report file's path, for the message when there is none.
    pub report_path: &'a str,
    /// The tail of the agent's stderr.
    pub stderr_tail: &'a str,
    /// The agent's shell command line, when it is one (not a preset): a 126/127 from its shell
    /// with no report means it cannot run at all.
    pub agent_command: Option<&'a str>,
}

/// Why a round failed with `report_dir_full`: the bound, what was left, the way out.
fn report_dir_full(dir: &ralph_sandbox::outcome::ReportDirEnd) -> String {
    let left = |v: Option<u64>| v.map_or_else(|| "?".to_owned(), |n| n.to_string());
    bounded(
        &format!(
            "the round filled its report directory `{}` ({} of {} bytes and {} of {} entries left): it is bounded ({} bytes, following --handoff-cap, and {} entries, REPORT_DIR_ENTRIES) and keeps only report.json and usage.jsonl; write other files in HOME, TMPDIR or the workspace",
            dir.path.display(),
            left(dir.free_bytes),
            dir.bytes,
            left(dir.free_entries),
            dir.entries,
            dir.bytes,
            dir.entries,
        ),
        2048,
    )
}

/// Decides how the attempt ended. `cannot_run(code, output)` words the configuration error of
/// an agent command its shell cannot run.
pub(crate) fn judge(f: AttemptFacts<'_>, cannot_run: &dyn Fn(i32, &str) -> String) -> AttemptEnd {
    let o = f.outcome;
    match o.ended_by {
        EndedBy::Cancel | EndedBy::RunnerGone => return AttemptEnd::Cancelled,
        EndedBy::Timeout if f.deadline_bound => return AttemptEnd::Deadline,
        _ => {}
    }
    // Whatever the round claims, it broke the sandbox's rules on the host side (undone by
    // now): its report is not trusted.
    if !o.violations.is_empty() {
        let found: Vec<String> = o.violations.iter().map(ToString::to_string).collect();
        return AttemptEnd::Failed(
            RoundFailure::WorkspaceTampered,
            bounded(
                &format!(
                    "the round left what the sandbox forbids: {}",
                    found.join("; ")
                ),
                2048,
            ),
        );
    }
    if let Some(msg) = &o.exec_error {
        return AttemptEnd::Failed(RoundFailure::ExecFailed, bounded(msg, 2048));
    }
    // The round filled its bounded report directory: nothing it left there is trusted.
    if let Some(dir) = o.report_dir.as_ref().filter(|d| d.full()) {
        return AttemptEnd::Failed(RoundFailure::ReportDirFull, report_dir_full(dir));
    }
    let timed_out = o.ended_by == EndedBy::Timeout;
    // The CLI's own verdict on its run wins over anything it left behind.
    if !timed_out {
        if let Some(err) = f.preset.and_then(|p| p.error.as_ref()) {
            return AttemptEnd::Failed(RoundFailure::AgentError, err.clone());
        }
    }
    let cap = f.cap;
    let decoded = match (f.report_file, f.policy, f.preset) {
        (Some(r), _, _) => Some(r),
        (None, ReportPolicy::OptionalFile, _) => None,
        (None, ReportPolicy::Required, Some(p)) => {
            p.report.as_ref().map(|r| report::decode(r.as_bytes(), cap))
        }
        (None, ReportPolicy::Required, None) => match f.stdout {
            Some(StdoutReport::Line(bytes)) => Some(report::decode(&bytes, cap)),
            Some(StdoutReport::Overlong(len)) => {
                Some(Err(ReportError::InputTooLarge { size: len, cap }))
            }
            None => None,
        },
    };
    if timed_out {
        // A valid report written before the round timeout counts: the work is done and said;
        // the journal still records that the process was stopped by the timeout.
        if let Some(Ok(r)) = decoded {
            return AttemptEnd::Reported(r);
        }
        let t = f
            .round_timeout
            .map_or_else(String::new, |t| format!(" of {t}"));
        return AttemptEnd::Failed(
            RoundFailure::Timeout,
            format!("the round timeout{t} passed; the process tree was killed"),
        );
    }
    match decoded {
        Some(Ok(r)) => AttemptEnd::Reported(r),
        Some(Err(e)) => {
            AttemptEnd::Failed(RoundFailure::InvalidReport, bounded(&e.to_string(), 2048))
        }
        None if f.policy == ReportPolicy::OptionalFile => AttemptEnd::Exited,
        None => {
            if let (
                Some(_),
                Termination::Exited {
                    code: code @ (126 | 127),
                },
                EndedBy::Exit,
            ) = (f.agent_command, o.termination, o.ended_by)
            {
                return AttemptEnd::CannotRun(cannot_run(code, f.stderr_tail));
            }
            let missing = ReportError::Missing {
                file: f.report_path.to_owned(),
            };
            let why = match (o.ended_by, o.termination) {
                (EndedBy::MemoryLimit, _) => "the memory limit was hit".to_owned(),
                (_, t) => format!("the agent ended with {t}"),
            };
            let stderr = f.stderr_tail.trim();
            let detail = if stderr.is_empty() {
                String::new()
            } else {
                format!("; stderr ends with: {stderr}")
            };
            let reason = if matches!(o.termination, Termination::Signaled { .. }) {
                RoundFailure::Crashed
            } else {
                RoundFailure::NoReport
            };
            AttemptEnd::Failed(reason, bounded(&format!("{missing}; {why}{detail}"), 2048))
        }
    }
}
