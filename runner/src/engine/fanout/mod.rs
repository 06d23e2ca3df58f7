//! Fan-out (SPEC §13, `--attempts N`): N independent loops from the same start. Each attempt is
//! a job of its own (`attempt_of` names this one) on its own view of the workspace, made after
//! the set-up passed, at `<state-dir>/attempts/<job>.<n>`: an overlay whose lower layer is the
//! workspace itself (a mount, and the disk of what the attempt changes; a root runner), or a
//! copy where an overlay cannot be mounted ([`layout`]). They run concurrently by this runner
//! with the whole engine (rounds, retries, verify, caps, cancel). The first attempt that ends
//! `complete` (its verify passed: a fan-out job needs `verify`) wins and the others are
//! cancelled (their tokens still count: the job's usage is the sum). The winner's changes are
//! then applied to the job's workspace ([`apply`]), which nothing touched until then; without a
//! winner the workspace stays as it was and the job ends with the best outcome among the
//! attempts ([`choose`]). The copies are removed at the end; each attempt's journal and files
//! stay, listed in the job's `attempts`.
//!
//! The journal tells it: `attempts_started` (the copies), one `attempt_finished` per attempt,
//! `attempt_chosen` (with what was applied), then the job's `job_finished` with the chosen
//! attempt's outcome.

pub mod apply;
pub mod choose;
pub mod layout;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures_util::stream::{FuturesUnordered, StreamExt};

use super::EngineError;
use super::cancel::Cancel;
use super::job_run::JobRun;
use crate::job::{AttemptOf, FinishReason, JobResult, JobSpec, Outcome};
use crate::store::EventKind;
use crate::store::event::AttemptCopy;

/// How often the running attempts look at the job's own cancel.
const CANCEL_POLL: Duration = Duration::from_millis(100);

/// One attempt as made.
struct Made {
    index: u32,
    job: String,
    copy: PathBuf,
    layout: layout::Layout,
    hold: crate::store::hold::RunHold,
    cancel: Cancel,
}

impl JobRun<'_> {
    /// Runs the job's attempts (module doc) and ends the job with the chosen one's outcome.
    pub(super) async fn run_fanout(&mut self) -> Result<(), EngineError> {
        let n = self.spec.attempts;
        let made = match self.make_attempts(n) {
            Ok(m) => m,
            Err(message) => {
                return self.finish(Outcome::Error, FinishReason::InternalError, &message, None);
            }
        };
        let results = self.run_attempts(&made).await;
        let chosen = choose::choose(&results);
        let Some(best) = chosen else {
            self.remove_copies(&made);
            return self.finish(
                Outcome::Error,
                FinishReason::InternalError,
                "no attempt ran to an end",
                None,
            );
        };
        let (index, won) = (best.index, best.outcome == Outcome::Complete);
        let winner = made.iter().find(|m| m.index == index);
        let applied = match (won, winner) {
            (true, Some(w)) => {
                let placeholders = self.spec.sandbox.protect.clone();
                let owner = owner_of(&self.spec.workspace);
                let (copy, ws, lay) = (w.copy.clone(), self.spec.workspace.clone(), w.layout);
                match crate::store::journal::blocking(|| {
                    // The attempt's overlay was unmounted with its job: mounted again to be read.
                    layout::open(&copy, lay).map_err(|e| e.to_string())?;
                    match lay {
                        // Only what the upper layer holds can differ from the workspace.
                        layout::Layout::Overlay => apply::apply_overlay(
                            &copy,
                            &crate::provision::layered::layer_dir(&copy).join("upper"),
                            &ws,
                            &placeholders,
                            owner,
                        ),
                        layout::Layout::Copy => apply::apply(&copy, &ws, &placeholders, owner),
                    }
                    .map_err(|e| e.to_string())
                }) {
                    Ok(a) => Some(a),
                    Err(e) => {
                        self.remove_copies(&made);
                        return self.finish(
                            Outcome::Error,
                            FinishReason::InternalError,
                            &format!(
                                "attempt {index} won, but its changes could not be applied to the workspace (it may hold part of them): {e}"
                            ),
                            None,
                        );
                    }
                }
            }
            _ => None,
        };
        self.journal.record(EventKind::AttemptChosen {
            job: best.job.clone(),
            index,
            won,
            applied,
        })?;
        self.remove_copies(&made);
        let message = if won {
            format!("attempt {index} of {n} won: {}", best.message)
        } else {
            format!(
                "no attempt of {n} passed its verify; attempt {index}'s outcome is the job's: {}",
                best.message
            )
        };
        let (outcome, reason) = match (best.outcome, self.cancel.is_cancelled()) {
            // The job itself was cancelled: it says so, whatever its attempts ended with.
            (o, true) if o != Outcome::Complete => {
                (Outcome::Cancelled, FinishReason::CancelRequested)
            }
            _ => (best.outcome, best.reason),
        };
        self.finish(outcome, reason, &message, best.exit_code)
    }

    /// Copies the workspace once per attempt and journals each attempt as a job of its own.
    fn make_attempts(&mut self, n: u32) -> Result<Vec<Made>, String> {
        let id = self.journal.view().id.clone();
        let root = layout::attempts_dir(&self.engine.state_dir);
        std::fs::create_dir_all(&root)
            .map_err(|e| format!("failed to create `{}`: {e}", root.display()))?;
        let owner = owner_of(&self.spec.workspace);
        // The user a root runner's rounds run as (as the sandbox decides it).
        let agent = owner.and_then(|_| {
            ralph_sandbox::identity::agent_user(
                self.engine.agent_user.as_deref(),
                Path::new("/etc"),
            )
            .ok()
            .map(|ids| (ids.uid, ids.gid))
        });
        let mut made = Vec::new();
        let mut copies = Vec::new();
        for index in 1..=n {
            let copy = root.join(format!("{id}.{index}"));
            let started = Instant::now();
            let view = match layout::make(&self.spec.workspace, &copy, owner, agent) {
                Ok(v) => v,
                Err(e) => {
                    self.remove_copies(&made);
                    layout::remove(&copy);
                    return Err(format!(
                        "failed to make the workspace of attempt {index}: {e}"
                    ));
                }
            };
            let spec = attempt_spec(&self.spec, &id, index, &copy);
            let (job, hold) = match self.engine.submit_started_held(&spec) {
                Ok(x) => x,
                Err(e) => {
                    self.remove_copies(&made);
                    layout::remove(&copy);
                    return Err(format!("failed to start attempt {index}: {e}"));
                }
            };
            copies.push(AttemptCopy {
                job: job.clone(),
                index,
                layout: Some(view.layout.as_str().to_owned()),
                files: view.files,
                bytes: view.bytes,
                copy_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            });
            made.push(Made {
                index,
                job,
                copy,
                layout: view.layout,
                hold,
                cancel: Cancel::new(),
            });
        }
        self.journal
            .record(EventKind::AttemptsStarted { attempts: copies })
            .map_err(|e| e.to_string())?;
        Ok(made)
    }

    /// Runs every attempt at once; the first `complete` cancels the others. Each attempt's end
    /// is journalled as it comes.
    async fn run_attempts(&mut self, made: &[Made]) -> Vec<choose::Ended> {
        let engine = self.engine;
        let heard = self.attempt_observers.clone();
        let heard = &heard;
        let mut running = FuturesUnordered::new();
        for m in made {
            let fut = async move {
                let lock = match crate::store::journal::blocking(|| engine.lock_workspace(&m.copy))
                {
                    Ok(l) => l,
                    Err(e) => {
                        return (
                            m.index,
                            Err(EngineError::Config {
                                message: e.to_string(),
                            }),
                        );
                    }
                };
                let mut observers = vec![m.hold.observer()];
                observers.extend(heard.iter().cloned());
                let r = engine.run(&m.job, lock, m.cancel.clone(), observers).await;
                (m.index, r)
            };
            running.push(fut);
        }
        let mut ended = Vec::new();
        let mut won = false;
        loop {
            let next = tokio::select! {
                n = running.next() => n,
                () = tokio::time::sleep(CANCEL_POLL) => {
                    // The job's cancel, or its drain (no new round), reaches every attempt.
                    if self.cancel.is_cancelled() {
                        let by = self.cancel.by();
                        for m in made {
                            m.cancel.cancel(&by);
                        }
                    } else if self.cancel.is_draining() {
                        let by = self.cancel.by();
                        for m in made.iter().filter(|m| !m.cancel.is_draining()) {
                            m.cancel.drain(&by);
                        }
                    }
                    continue;
                }
            };
            let Some((index, r)) = next else { break };
            let Some(m) = made.iter().find(|m| m.index == index) else {
                continue;
            };
            let e = match r {
                Ok(r) => choose::Ended::of(&m.job, index, &r),
                Err(e) => choose::Ended::failed(&m.job, index, &e.to_string()),
            };
            let report = e.report.clone();
            let _ = self.journal.record(EventKind::AttemptFinished {
                job: m.job.clone(),
                index,
                outcome: e.outcome,
                reason: e.reason,
                message: e.message.clone(),
                rounds: e.rounds,
                verified: e.verified,
                report,
                usage: e.usage,
            });
            if e.outcome == Outcome::Complete && !won {
                won = true;
                for other in made.iter().filter(|o| o.index != index) {
                    other.cancel.cancel(&format!("attempt {index} won"));
                }
            }
            ended.push(e);
        }
        ended
    }

    fn remove_copies(&self, made: &[Made]) {
        for m in made {
            layout::remove(&m.copy);
        }
    }
}

/// The owner of what the runner makes for a root runner: the workspace's (a round's identity
/// follows the workspace's owner); `None` for any other runner (it owns what it makes).
fn owner_of(workspace: &Path) -> Option<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    std::fs::metadata(workspace)
        .ok()
        .map(|m| (m.uid(), m.gid()))
}

/// The spec of attempt `index` of job `id`: the job's own, on `copy`, one loop, no set-up
/// (the copy holds what the job's set-up made), nothing to notify.
pub(crate) fn attempt_spec(spec: &JobSpec, id: &str, index: u32, copy: &Path) -> JobSpec {
    let mut s = spec.clone();
    let rebase = |paths: &mut Vec<PathBuf>| {
        for p in paths.iter_mut() {
            if let Ok(rel) = p.strip_prefix(&spec.workspace) {
                *p = copy.join(rel);
            }
        }
    };
    rebase(&mut s.sandbox.read);
    rebase(&mut s.sandbox.write);
    rebase(&mut s.sandbox.sockets);
    s.workspace = copy.to_owned();
    s.attempts = 1;
    s.attempt_of = Some(AttemptOf {
        job: id.to_owned(),
        index,
    });
    s.setup = None;
    s.notify_url = None;
    s.batch = None;
    s.retry_of = None;
    s
}

/// A job's result as an attempt's end.
impl choose::Ended {
    fn of(job: &str, index: u32, r: &JobResult) -> Self {
        choose::Ended {
            job: job.to_owned(),
            index,
            outcome: r.outcome,
            reason: r.reason,
            message: r.message.clone(),
            rounds: r.rounds,
            verified: r.verified,
            report: r.report.as_ref().and_then(|x| serde_json::to_value(x).ok()),
            usage: r.usage,
            exit_code: r.exit_code,
        }
    }

    fn failed(job: &str, index: u32, message: &str) -> Self {
        choose::Ended {
            job: job.to_owned(),
            index,
            outcome: Outcome::Error,
            reason: FinishReason::InternalError,
            message: crate::util::text::bounded(message, crate::util::text::RESULT_TEXT_BOUND),
            rounds: 0,
            verified: None,
            report: None,
            usage: Default::default(),
            exit_code: None,
        }
    }
}
