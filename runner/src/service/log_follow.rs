//! `GET /v1/jobs/{id}/rounds/{k}/logs?follow=true`: a round attempt's (or a verify run's) log
//! streamed as it grows, until the journal says that attempt has ended.
//!
//! An attempt not started yet is waited for; if the job ends (or is interrupted) first, the
//! answer is 404 naming the round. The file is read from where the round's output goes (the
//! capped artifact files); the stream is plain text, sent in chunks as they are written.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::io::AsyncReadExt;

use super::Service;
use super::api::ApiError;
use crate::store::journal::blocking;
use crate::store::{Event, EventKind};

/// How often the file is looked at when nothing was new.
const FILE_POLL: Duration = Duration::from_millis(200);
/// How often the journal is read to see whether the attempt has ended.
const JOURNAL_POLL: Duration = Duration::from_millis(500);

/// What is followed: a round attempt's stdout/stderr, or the verify run after a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// `round`/`attempt`.
    Attempt {
        /// Round.
        round: u32,
        /// Attempt.
        attempt: u32,
    },
    /// The verify run after `round`.
    Verify {
        /// Round.
        round: u32,
    },
    /// The job's set-up run (round 0).
    Setup,
}

impl Target {
    fn name(self) -> String {
        match self {
            Target::Attempt { round, attempt } => format!("round {round} (attempt {attempt})"),
            Target::Verify { round } => format!("the verify after round {round}"),
            Target::Setup => "the set-up".to_owned(),
        }
    }

    fn starts(self, kind: &EventKind) -> bool {
        match (self, kind) {
            (
                Target::Attempt { round, attempt },
                EventKind::RoundStarted {
                    round: r,
                    attempt: a,
                    ..
                },
            ) => *r == round && *a == attempt,
            (Target::Verify { round }, EventKind::VerifyStarted { round: r }) => *r == round,
            (Target::Setup, EventKind::SetupStarted { .. }) => true,
            _ => false,
        }
    }

    fn ends(self, kind: &EventKind) -> bool {
        match (self, kind) {
            (
                Target::Attempt { round, attempt },
                EventKind::RoundFinished {
                    round: r,
                    attempt: a,
                    ..
                },
            ) => *r == round && *a == attempt,
            (Target::Verify { round }, EventKind::VerifyFinished { round: r, .. }) => *r == round,
            (Target::Setup, EventKind::SetupFinished { .. }) => true,
            _ => false,
        }
    }
}

/// Where the target stands in a journal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Not started, and the job may still start it.
    Pending,
    /// Not started, and the job is over (finished or interrupted).
    Never,
    /// Started, not ended.
    Running,
    /// Ended (its own end, or the job's after it started).
    Ended,
}

fn phase(events: &[Event], target: Target) -> Phase {
    let mut started = false;
    let mut over = false;
    for e in events {
        match &e.kind {
            k if target.starts(k) => {
                started = true;
                over = false;
            }
            k if started && target.ends(k) => return Phase::Ended,
            EventKind::JobFinished { .. } | EventKind::Interrupted { .. } => over = true,
            EventKind::Resumed { .. } => over = false,
            _ => {}
        }
    }
    match (started, over) {
        (true, true) => Phase::Ended,
        (true, false) => Phase::Running,
        (false, true) => Phase::Never,
        (false, false) => Phase::Pending,
    }
}

async fn phase_now(svc: &Arc<Service>, id: &str, target: Target) -> Result<Phase, ApiError> {
    let events = blocking(|| svc.engine().store().events(id))?;
    Ok(phase(&events, target))
}

/// The followed log at `path` of job `id`'s `target`.
pub async fn follow(
    svc: Arc<Service>,
    id: String,
    target: Target,
    path: PathBuf,
) -> Result<Response, ApiError> {
    // Wait for the attempt to start (its files exist before it is journalled as started).
    let mut now = loop {
        match phase_now(&svc, &id, target).await? {
            Phase::Pending => tokio::time::sleep(JOURNAL_POLL).await,
            Phase::Never => {
                return Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    format!("job `{id}` ended without starting {}", target.name()),
                ));
            }
            p => break p,
        }
    };
    let file = loop {
        match tokio::fs::File::open(&path).await {
            Ok(f) => break f,
            Err(_) if now == Phase::Running => {
                tokio::time::sleep(FILE_POLL).await;
                now = phase_now(&svc, &id, target).await?;
            }
            Err(_) => {
                return Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    format!("job `{id}` has no such log ({})", target.name()),
                ));
            }
        }
    };
    struct S {
        file: tokio::fs::File,
        svc: Arc<Service>,
        id: String,
        target: Target,
        ended: bool,
        failed: bool,
        checked: Instant,
    }
    let st = S {
        file,
        svc,
        id,
        target,
        ended: now == Phase::Ended,
        failed: false,
        checked: Instant::now(),
    };
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        if st.failed {
            return None;
        }
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match st.file.read(&mut buf).await {
                Ok(0) => {}
                Ok(n) => {
                    buf.truncate(n);
                    return Some((Ok::<_, std::io::Error>(Bytes::from(buf)), st));
                }
                Err(e) => {
                    // One error, then the end.
                    st.failed = true;
                    return Some((Err(e), st));
                }
            }
            // At the end of the file: over once the attempt has ended and all is read (the end
            // is journalled after its output is written, so one more read finds the rest).
            if st.ended {
                return None;
            }
            if st.checked.elapsed() >= JOURNAL_POLL {
                st.checked = Instant::now();
                match phase_now(&st.svc, &st.id, st.target).await {
                    Ok(Phase::Running | Phase::Pending) => {}
                    Ok(Phase::Ended | Phase::Never) | Err(_) => {
                        st.ended = true;
                        continue;
                    }
                }
            }
            tokio::time::sleep(FILE_POLL).await;
        }
    });
    Ok((
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        Body::from_stream(stream),
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(seq: u64, kind: EventKind) -> Event {
        Event {
            seq,
            job_id: "j".into(),
            at: String::new(),
            kind,
        }
    }

    #[test]
    fn phases_follow_the_journal() {
        let t = Target::Attempt {
            round: 1,
            attempt: 1,
        };
        let started = ev(
            1,
            EventKind::RoundStarted {
                round: 1,
                attempt: 1,
                dir: PathBuf::new(),
            },
        );
        assert_eq!(phase(&[], t), Phase::Pending);
        assert_eq!(phase(std::slice::from_ref(&started), t), Phase::Running);
        let later = Target::Attempt {
            round: 2,
            attempt: 1,
        };
        assert_eq!(phase(std::slice::from_ref(&started), later), Phase::Pending);
        let interrupted = ev(
            2,
            EventKind::Interrupted {
                message: String::new(),
            },
        );
        let both = [started, interrupted];
        assert_eq!(phase(&both, t), Phase::Ended);
        assert_eq!(phase(&both, later), Phase::Never);
    }
}
