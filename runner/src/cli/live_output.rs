//! `ralph run --follow`: each round attempt's output printed on stderr while it is written.
//!
//! An observer of the journal: `round_started` starts a thread that tails the attempt's
//! `stdout.log` and `stderr.log` (the capped artifact files; the sandbox's pipes are not
//! touched), `round_finished` drains what is left and stops it — before the progress observer
//! prints the round's summary, as it comes first in the observer list. The set-up (SPEC §12)
//! is followed the same way, from `setup_started` to `setup_finished`, its merged output
//! (`rounds/0/setup/output.log`) behind `[setup]`, and so is each verify, from
//! `verify_started` to `verify_finished` (`rounds/K/verify/output.log` behind
//! `[round K verify]`). Lines are prefixed
//! `[round K]` (`[round K attempt A]` on a retry, `[round K stderr]` for stderr) and escaped
//! ([`Prefixed`]): no escape sequence of the agent reaches the terminal, and no line of the
//! agent starts a line of the CI log.

use std::fs::File;
use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use ralph_runner::store::{Event, EventKind, JobView, Observer};
use ralph_runner::util::terminal::Prefixed;

use super::progress::Progress;

/// How often the files are looked at when nothing was new.
const POLL: Duration = Duration::from_millis(100);

/// Prints round output live through the progress view.
pub struct LiveOutput {
    progress: Arc<Progress>,
    /// The job's artifact directory.
    job_dir: PathBuf,
    current: Mutex<Option<Tail>>,
}

impl std::fmt::Debug for LiveOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveOutput").finish_non_exhaustive()
    }
}

struct Tail {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Tail {
    /// Asks the thread to drain the files and waits for it.
    fn finish(self) {
        self.stop.store(true, Ordering::Release);
        self.thread.thread().unpark();
        let _ = self.thread.join();
    }
}

impl LiveOutput {
    /// Prints through `progress` what the runs of the job in `job_dir` write.
    pub fn new(progress: Arc<Progress>, job_dir: PathBuf) -> Self {
        Self {
            progress,
            job_dir,
            current: Mutex::new(None),
        }
    }

    fn stop_current(&self) {
        let tail = self.current.lock().ok().and_then(|mut c| c.take());
        if let Some(t) = tail {
            t.finish();
        }
    }

    fn start(&self, readers: Vec<Reader>) {
        self.stop_current();
        let stop = Arc::new(AtomicBool::new(false));
        let progress = self.progress.clone();
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("ralph-follow".to_owned())
            .spawn(move || tail(readers, &flag, &progress));
        match thread {
            Ok(thread) => {
                if let Ok(mut c) = self.current.lock() {
                    *c = Some(Tail { stop, thread });
                }
            }
            Err(e) => self.progress.print(&format!(
                "ralph: warning: failed to start following the round's output: {e}"
            )),
        }
    }
}

impl Observer for LiveOutput {
    fn on_event(&self, view: &JobView, ev: &Event) {
        match &ev.kind {
            EventKind::RoundStarted {
                round,
                attempt,
                dir,
            } => {
                let mut label = if view.spec.kind == ralph_runner::job::JobKind::Task {
                    "task".to_owned()
                } else {
                    format!("round {round}")
                };
                if *attempt > 1 {
                    label.push_str(&format!(" attempt {attempt}"));
                }
                self.start(vec![
                    Reader::new(dir.join("stdout.log"), &format!("[{label}]")),
                    Reader::new(dir.join("stderr.log"), &format!("[{label} stderr]")),
                ]);
            }
            EventKind::SetupStarted { .. } => {
                let log = ralph_runner::engine::AttemptDirs::setup(&self.job_dir).output_log();
                self.start(vec![Reader::new(log, "[setup]")]);
            }
            EventKind::VerifyStarted { round } => {
                let log =
                    ralph_runner::engine::AttemptDirs::verify(&self.job_dir, *round).output_log();
                self.start(vec![Reader::new(log, &format!("[round {round} verify]"))]);
            }
            EventKind::RoundFinished { .. }
            | EventKind::SetupFinished { .. }
            | EventKind::VerifyFinished { .. }
            | EventKind::Interrupted { .. }
            | EventKind::JobFinished { .. } => self.stop_current(),
            _ => {}
        }
    }
}

impl Drop for LiveOutput {
    fn drop(&mut self) {
        self.stop_current();
    }
}

/// One growing file and the line being read from it.
struct Reader {
    path: PathBuf,
    file: Option<File>,
    lines: Prefixed,
}

impl Reader {
    fn new(path: PathBuf, prefix: &str) -> Self {
        Self {
            path,
            file: None,
            lines: Prefixed::new(prefix),
        }
    }

    /// Prints the whole lines written since the last call; true when there were new bytes.
    fn pump(&mut self, progress: &Progress) -> bool {
        if self.file.is_none() {
            self.file = File::open(&self.path).ok();
        }
        let Some(mut file) = self.file.take() else {
            return false;
        };
        let any = self.read_lines(&mut file, progress);
        self.file = Some(file);
        any
    }

    fn read_lines(&mut self, file: &mut File, progress: &Progress) -> bool {
        let mut buf = [0u8; 16 * 1024];
        let mut any = false;
        // A bounded share per call, so a flood on one stream does not starve the other.
        for _ in 0..64 {
            let n = match file.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            any = true;
            self.lines.push(&buf[..n], |l| progress.print(&l));
        }
        any
    }

    /// Prints an unterminated last line.
    fn flush(&mut self, progress: &Progress) {
        self.lines.finish(|l| progress.print(&l));
    }
}

fn tail(mut readers: Vec<Reader>, stop: &AtomicBool, progress: &Progress) {
    loop {
        // Read after seeing the stop: what was written before the round ended is printed.
        let stopping = stop.load(Ordering::Acquire);
        let mut any = false;
        for r in &mut readers {
            any |= r.pump(progress);
        }
        if stopping {
            // To the end of both files, however much is left.
            while readers.iter_mut().fold(false, |a, r| r.pump(progress) | a) {}
            for r in &mut readers {
                r.flush(progress);
            }
            return;
        }
        if !any {
            std::thread::park_timeout(POLL);
        }
    }
}
