//! Progress of a foreground job on stderr: a live line on a terminal (indicatif), plain lines
//! otherwise. It is an observer of the journal, so it shows exactly what was recorded. The live
//! line shows the current step's and the job's elapsed time, ticking every second; plain mode
//! (not a terminal, `TERM=dumb`, or `NO_COLOR` set) writes no escape sequence at all. Every
//! line, and the live line's text, goes through [`terminal::line`]: what it quotes of the agent
//! (a report's summary, a failure's stderr tail, a model's name, an egress host) is escaped and
//! never starts a line.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressState, ProgressStyle};
use ralph_runner::ci::VERIFY_TAIL_LINES;
use ralph_runner::report::Report;
use ralph_runner::store::event::RunnerStep;
use ralph_runner::store::{AttemptResult, Event, EventKind, JobView, Observer};
use ralph_runner::util::terminal::{self, Prefixed};
use ralph_runner::util::text::bounded;

/// The prefix of each line of a runner step's output shown when it failed (verify, set-up).
const VERIFY_PREFIX: &str = "ralph: |";

/// Where progress lines go.
enum Out {
    /// The live view of a terminal.
    Live(ProgressBar),
    /// Plain lines on stderr.
    Plain,
    /// Kept (unit tests).
    #[cfg(test)]
    Lines(Mutex<Vec<String>>),
}

/// Prints journal events as progress.
pub struct Progress {
    live: Out,
    /// When the current round attempt or verify started (the live line's step clock).
    step: Arc<Mutex<Option<Instant>>>,
    artifacts: PathBuf,
    state: Mutex<State>,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("live", &matches!(self.live, Out::Live(_)))
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    last_summary: String,
}

fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// A clock for the live line: `7s`, `2m05s`, `1h02m05s`.
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, s) => format!("{h}h{m:02}m{s:02}s"),
    }
}

/// True when stderr gets the live view: a terminal, `TERM` not `dumb`, and `NO_COLOR` unset
/// (or empty). Everything else gets plain lines without escape sequences.
pub fn live_terminal() -> bool {
    let dumb = std::env::var_os("TERM").is_some_and(|t| t == "dumb");
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    std::io::stderr().is_terminal() && !dumb && !no_color
}

impl Progress {
    /// A live display when `live`, plain lines otherwise; `artifacts` is the job's directory,
    /// shown when the job starts.
    pub fn new(live: bool, artifacts: PathBuf) -> Self {
        let started = Instant::now();
        let step: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
        let live = live.then(|| {
            let pb = ProgressBar::new_spinner();
            let step_clock = step.clone();
            let style = ProgressStyle::with_template(
                "{spinner} {prefix} · {step_elapsed} · job {job_elapsed}{msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_spinner())
            .with_key(
                "job_elapsed",
                move |_: &ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = w.write_str(&clock(started.elapsed()));
                },
            )
            .with_key(
                "step_elapsed",
                move |_: &ProgressState, w: &mut dyn std::fmt::Write| {
                    let at = step_clock.lock().ok().and_then(|s| *s);
                    let _ = w.write_str(&clock(at.map_or(Duration::ZERO, |t| t.elapsed())));
                },
            );
            pb.set_style(style);
            pb.set_prefix("starting");
            pb.enable_steady_tick(Duration::from_millis(120));
            pb
        });
        Self {
            live: live.map_or(Out::Plain, Out::Live),
            step,
            artifacts,
            state: Mutex::new(State::default()),
        }
    }

    /// Progress that keeps its lines (unit tests), plain.
    #[cfg(test)]
    pub(super) fn kept() -> Self {
        Self {
            live: Out::Lines(Mutex::new(Vec::new())),
            step: Arc::new(Mutex::new(None)),
            artifacts: PathBuf::from("/artifacts"),
            state: Mutex::new(State::default()),
        }
    }

    /// The lines kept so far (unit tests).
    #[cfg(test)]
    pub(super) fn lines(&self) -> Vec<String> {
        match &self.live {
            Out::Lines(l) => l.lock().map(|l| l.clone()).unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    fn is_live(&self) -> bool {
        matches!(self.live, Out::Live(_))
    }

    /// A progress line, `ralph: ` and `text`: `text` may quote the agent (a report summary,
    /// the tail of its stderr), so the line is made safe first — one line, whatever it quotes.
    fn line(&self, text: &str) {
        self.print(&terminal::line(&format!("ralph: {text}")));
    }

    /// Prints one whole line on stderr without tearing the live view (`text` must be safe for a
    /// terminal: made by `ralph_runner::util::terminal`).
    pub fn print(&self, text: &str) {
        match &self.live {
            Out::Live(pb) => pb.println(text),
            Out::Plain => {
                let mut err = std::io::stderr().lock();
                let _ = writeln!(err, "{text}");
            }
            #[cfg(test)]
            Out::Lines(l) => {
                if let Ok(mut l) = l.lock() {
                    l.push(text.to_owned());
                }
            }
        }
    }

    /// Shows `label` with a step clock started now.
    fn status(&self, label: String, rest: String) {
        if let Ok(mut s) = self.step.lock() {
            *s = Some(Instant::now());
        }
        if let Out::Live(pb) = &self.live {
            pb.set_prefix(terminal::line(&label));
            pb.set_message(terminal::line(&rest));
        }
    }

    /// The last lines of a failed runner step's output (`what`: `verify`, `set-up`; `step`: its
    /// directory under `rounds/`), each behind the runner's prefix and escaped ([`Prefixed`]):
    /// the agent's workspace decides what verify (and a set-up's `npm ci`) prints.
    fn step_tail(&self, what: &str, step: &[&str], output_tail: &str) {
        let (tail, before) = ralph_runner::ci::last_lines(output_tail, VERIFY_TAIL_LINES);
        if tail.trim().is_empty() {
            self.line(&format!("{what} printed nothing"));
            return;
        }
        let log = step
            .iter()
            .fold(self.artifacts.join("rounds"), |p, s| p.join(s))
            .join("output.log");
        let which = if before > 0 {
            format!("its last {VERIFY_TAIL_LINES} lines")
        } else {
            "its output".to_owned()
        };
        self.line(&format!(
            "{what} output ({which}; all of it: {}):",
            log.display()
        ));
        let mut lines = Vec::new();
        let mut p = Prefixed::new(VERIFY_PREFIX);
        p.push(tail.as_bytes(), |l| lines.push(l));
        p.finish(|l| lines.push(l));
        for l in lines {
            self.print(&l);
        }
    }

    /// Removes the live line (before the final summary).
    pub fn finish(&self) {
        if let Out::Live(pb) = &self.live {
            pb.finish_and_clear();
        }
    }
}

/// What follows a failed verify, as the loop decides it (`engine/job_run.rs`): another round
/// while one is left; otherwise the job ends, and how.
fn after_failed_verify(
    view: &JobView,
    round: u32,
    exit: Option<ralph_sandbox::Termination>,
    ended_by: Option<ralph_sandbox::EndedBy>,
) -> String {
    use ralph_sandbox::{EndedBy, Termination};
    let n = view.spec.max_rounds;
    match (ended_by, exit) {
        (Some(EndedBy::Cancel | EndedBy::RunnerGone), _) => "the job is cancelled".to_owned(),
        (None, None) => "the job ends (the sandbox could not be set up)".to_owned(),
        (_, Some(Termination::Exited { code: 126 | 127 })) => {
            "the command cannot run in the sandbox: the job ends (configuration)".to_owned()
        }
        _ if view.spec.kind == ralph_runner::job::JobKind::Task => {
            "the task job ends failed".to_owned()
        }
        _ if round >= n => format!("no round is left ({round}/{n}): the job ends budget-limited"),
        (Some(EndedBy::Timeout), _) if view.spec.job_timeout.is_some() => format!(
            "the loop goes on (round {}/{n} is told the output) unless the job timeout has passed",
            round + 1
        ),
        _ => format!(
            "the loop goes on: round {}/{n} is told the output",
            round + 1
        ),
    }
}

/// What follows a failed set-up (`engine/setup.rs`): the job ends, and how.
fn after_failed_setup(
    exit: Option<ralph_sandbox::Termination>,
    ended_by: Option<ralph_sandbox::EndedBy>,
) -> &'static str {
    use ralph_sandbox::{EndedBy, Termination};
    match (ended_by, exit) {
        (Some(EndedBy::Cancel | EndedBy::RunnerGone), _) => "the job is cancelled",
        (None, None) => "the job ends (the sandbox could not be set up)",
        (_, Some(Termination::Exited { code: 126 | 127 })) => {
            "the command cannot run in the sandbox: the job ends (configuration)"
        }
        _ => "no round is started: the job ends (error, setup_failed)",
    }
}

/// Who an egress decision or a git check after a run was for: a round, the set-up (round 0) or
/// verify.
fn run_label(round: u32, attempt: Option<u32>, step: Option<RunnerStep>) -> String {
    match (step, attempt) {
        (Some(RunnerStep::Setup), _) => "set-up".to_owned(),
        (Some(RunnerStep::Verify), _) => format!("verify after round {round}"),
        (None, Some(_)) => format!("round {round}"),
        (None, None) if round == 0 => "set-up".to_owned(),
        (None, None) => format!("verify after round {round}"),
    }
}

fn summary_of(r: &Report) -> String {
    bounded(&r.summary, 200)
}

impl Observer for Progress {
    fn on_event(&self, view: &JobView, ev: &Event) {
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        let n = view.spec.max_rounds;
        let task = view.spec.kind == ralph_runner::job::JobKind::Task;
        // A task job runs its command once: no round budget to count against.
        let of = |round: &u32| {
            if task {
                "the task".to_owned()
            } else {
                format!("round {round}/{n}")
            }
        };
        match &ev.kind {
            EventKind::JobStarted { .. } => {
                let s = &view.spec;
                self.line(&format!(
                    "job {} started: {} job, {}, workspace {}, sandbox {}/{}",
                    view.id,
                    s.kind.as_str(),
                    if task {
                        "one run".to_owned()
                    } else {
                        format!("up to {n} round(s)")
                    },
                    s.workspace.display(),
                    s.sandbox.backend,
                    s.sandbox.mode
                ));
                self.line(&format!("artifacts: {}", self.artifacts.display()));
            }
            EventKind::RoundStarted { round, attempt, .. } => {
                let label = of(round);
                let a = if *attempt > 1 {
                    format!(" (attempt {attempt})")
                } else {
                    String::new()
                };
                if !self.is_live() {
                    self.line(&format!("{label}{a} started"));
                }
                let last = if st.last_summary.is_empty() {
                    String::new()
                } else {
                    format!(" · last: {}", st.last_summary)
                };
                self.status(format!("{label}{a}"), last);
            }
            EventKind::RoundFinished {
                round,
                attempt,
                result,
                duration_ms,
                sandbox_violations,
                ..
            } => {
                let label = of(round);
                for v in sandbox_violations {
                    self.line(&format!("warning: round {round}: sandbox: {v}"));
                }
                let took = secs(Duration::from_millis(*duration_ms));
                let text = match result {
                    AttemptResult::Reported { .. } => match &view.last_report {
                        Some(r) => {
                            st.last_summary = summary_of(r);
                            format!("{label} {} ({took}): {}", r.status, st.last_summary)
                        }
                        None => format!("{label} reported ({took})"),
                    },
                    AttemptResult::Failed { reason, message } => {
                        format!(
                            "{label} attempt {attempt} failed ({took}): {reason}: {}",
                            bounded(message, 400)
                        )
                    }
                    AttemptResult::Exited => format!("{label} ended ({took})"),
                    AttemptResult::SandboxFailed { message, .. } => {
                        format!("{label}: sandbox failed: {message}")
                    }
                    AttemptResult::Cancelled => format!("{label} cancelled ({took})"),
                    AttemptResult::DeadlineReached => {
                        format!("{label} stopped by the job timeout ({took})")
                    }
                    AttemptResult::BudgetSpent => {
                        format!("{label} stopped: the token budget is spent ({took})")
                    }
                    AttemptResult::Interrupted => format!("{label} interrupted"),
                };
                self.line(&text);
            }
            EventKind::RoundRetried {
                round, backoff_ms, ..
            } => {
                self.line(&format!(
                    "retrying round {round} in {}",
                    secs(Duration::from_millis(*backoff_ms))
                ));
            }
            EventKind::WorkspaceSanitized {
                round,
                attempt,
                repositories,
                counts,
                unchecked,
            } => {
                let after = run_label(*round, *attempt, None);
                for s in repositories {
                    self.line(&format!(
                        "warning: {after}: git repository made safe for the host's git: {}",
                        bounded(&s.to_string(), 1024)
                    ));
                }
                let more =
                    counts.total() as usize - repositories.len().min(counts.total() as usize);
                if more > 0 {
                    self.line(&format!(
                        "warning: {after}: {more} more git repositor{} made safe",
                        if more == 1 { "y" } else { "ies" }
                    ));
                }
                if let Some(u) = unchecked {
                    self.line(&format!("warning: {after}: {}", bounded(u, 1024)));
                }
            }
            EventKind::UsageSkipped {
                round,
                line,
                message,
                ..
            } => {
                self.line(&format!(
                    "warning: round {round}: usage line {line} skipped: {message}"
                ));
            }
            EventKind::Egress {
                round,
                step,
                host,
                port,
                method,
                allowed: false,
                reason,
                ..
            } => {
                self.line(&format!(
                    "warning: {}: egress refused: {method} {host}:{port}{}",
                    run_label(*round, Some(0), *step),
                    reason
                        .as_deref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                ));
            }
            EventKind::ModelRequest {
                round,
                status,
                error: Some(e),
                ..
            } => {
                self.line(&format!(
                    "warning: round {round}: model request answered {status} by the gateway: {e}"
                ));
            }
            EventKind::UsageMismatch {
                round,
                gateway,
                agent,
                ..
            } => {
                self.line(&format!(
                    "note: round {round}: the agent reported {} tokens, the model API {} (the API's count is used)",
                    agent.budget_tokens(),
                    gateway.budget_tokens()
                ));
            }
            EventKind::SetupStarted { command } => {
                if !self.is_live() {
                    self.line(&format!("set-up: running `{command}`"));
                }
                self.status(format!("set-up `{}`", bounded(command, 80)), String::new());
            }
            EventKind::SetupFinished {
                passed,
                exit,
                ended_by,
                output_tail,
                duration_ms,
            } => {
                let took = secs(Duration::from_millis(*duration_ms));
                if *passed {
                    self.line(&format!("set-up passed ({took})"));
                } else {
                    let how = ralph_runner::ci::verify_how(*exit, *ended_by);
                    let next = after_failed_setup(*exit, *ended_by);
                    self.line(&format!("set-up failed ({took}): {how}; {next}"));
                    self.step_tail("set-up", &["0", "setup"], output_tail);
                }
            }
            EventKind::VerifyStarted { .. } => {
                let cmd = view.spec.verify.as_deref().unwrap_or("");
                if !self.is_live() {
                    self.line(&format!("verify: running `{cmd}`"));
                }
                self.status(format!("verify `{}`", bounded(cmd, 80)), String::new());
            }
            EventKind::VerifyFinished {
                round,
                passed,
                exit,
                ended_by,
                output_tail,
                duration_ms,
                ..
            } => {
                let took = secs(Duration::from_millis(*duration_ms));
                if *passed {
                    self.line(&format!("verify passed ({took})"));
                } else {
                    let how = ralph_runner::ci::verify_how(*exit, *ended_by);
                    let next = after_failed_verify(view, *round, *exit, *ended_by);
                    self.line(&format!("verify failed ({took}): {how}; {next}"));
                    let round = round.to_string();
                    self.step_tail("verify", &[&round, "verify"], output_tail);
                }
            }
            EventKind::CancelRequested { by } => self.line(&format!(
                "cancelling ({by}): stopping the round's process tree"
            )),
            EventKind::WorkspaceProvisioned {
                repo,
                git_ref,
                commit,
                ..
            } => self.line(&match repo {
                Some(repo) => format!(
                    "workspace from {repo} at {}: {commit}",
                    git_ref.as_deref().unwrap_or("HEAD")
                ),
                None => format!("workspace from an upload: {commit}"),
            }),
            EventKind::ResultWritten { files, error, .. } => match error {
                Some(e) => self.line(&format!("result: {e}")),
                None => self.line(&format!("result.patch: {files} file(s) changed")),
            },
            EventKind::CacheLookup { path, hit, .. } => {
                let r = if *hit { "hit" } else { "miss" };
                self.line(&format!("cache {path}: {r}"));
            }
            EventKind::AttemptFinished { .. } | EventKind::AttemptChosen { .. } => {
                self.line(&super::client_cmds::describe_event_text(ev));
            }
            EventKind::CacheSaved { path, error, .. } => match error {
                Some(e) => self.line(&format!("cache {path}: not kept: {e}")),
                None => self.line(&format!("cache {path}: kept from the set-up")),
            },
            EventKind::JobSubmitted { .. }
            | EventKind::ToolchainGranted { .. }
            | EventKind::RoundSpawned { .. }
            | EventKind::ModelRequest { .. }
            | EventKind::ModelRefusals { .. }
            | EventKind::Egress { .. }
            | EventKind::Interrupted { .. }
            | EventKind::Resumed { .. }
            | EventKind::Notified { .. }
            | EventKind::AttemptsStarted { .. }
            | EventKind::JobFinished { .. } => {}
        }
    }
}
