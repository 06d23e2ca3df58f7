//! A recording fake [`Sandbox`] for callers' tests (feature `testing`, never shipped): every
//! spawn is recorded ([`Call`]: argv, working directory, environment, timeout, stdin, the
//! request) and plays a scripted outcome ([`Script`]: stdout, exit code, time taken, files
//! written, …), and so is every [`Sandbox::prepare`] ([`Prepared`]: how many spawns came
//! before it). Waiting honours the spec's timeout and the cancel token, so a caller's deadline
//! and cancel orderings are its own.
//!
//! Calls are sorted into lanes by a function of the [`ExecSpec`] the caller supplies (e.g. by
//! an environment variable that says which step a command is); each lane plays its own scripts
//! in order, and past their end a command exits 1 at once. Preflight always passes; what a run
//! sees of the host is one answer for every path (everything, unless told otherwise).

mod run;
mod script;

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::backend::{ExecIo, Running, Sandbox, SpawnFuture};
use crate::error::SandboxError;
use crate::mode::BackendKind;
use crate::spec::{ExecSpec, SandboxRequest};

pub use script::Script;

/// Sorts a spawn into its lane.
type LaneOf = Box<dyn Fn(&ExecSpec) -> &'static str + Send + Sync>;

/// One recorded spawn.
#[derive(Clone, Debug)]
pub struct Call {
    /// The lane it was sorted into (`""` without lanes).
    pub lane: &'static str,
    /// The command.
    pub argv: Vec<String>,
    /// Its working directory.
    pub cwd: PathBuf,
    /// Its environment.
    pub env: Vec<(String, String)>,
    /// The timeout it was given.
    pub timeout: Option<Duration>,
    /// What it got on stdin.
    pub stdin: Option<Vec<u8>>,
    /// The sandbox it asked for.
    pub request: SandboxRequest,
}

impl Call {
    /// The value of `name` in its environment.
    pub fn var(&self, name: &str) -> Option<&str> {
        var(&self.env, name)
    }

    /// Its stdin as text (lossy; empty when it got none).
    pub fn stdin_text(&self) -> String {
        String::from_utf8_lossy(self.stdin.as_deref().unwrap_or_default()).into_owned()
    }
}

/// One recorded [`Sandbox::prepare`] or [`Sandbox::discard`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prepared {
    /// How many spawns were recorded before it.
    pub after_calls: usize,
    /// The kill grace it named (a discard: zero).
    pub kill_grace: Duration,
    /// A discard: the run announced last will not come.
    pub discard: bool,
}

/// The fake: scripted runs, recorded.
pub struct FakeSandbox {
    kind: BackendKind,
    sees: bool,
    lane_of: LaneOf,
    scripts: Mutex<BTreeMap<&'static str, VecDeque<Script>>>,
    calls: Mutex<Vec<Call>>,
    prepares: Mutex<Vec<Prepared>>,
}

impl std::fmt::Debug for FakeSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeSandbox")
            .field("kind", &self.kind)
            .field("sees", &self.sees)
            .field("calls", &lock(&self.calls).len())
            .finish_non_exhaustive()
    }
}

impl Default for FakeSandbox {
    fn default() -> Self {
        Self::new()
    }
}

impl FakeSandbox {
    /// A native-kind fake with one lane (`""`) and no scripts, which sees every path.
    pub fn new() -> Self {
        Self {
            kind: BackendKind::Native,
            sees: true,
            lane_of: Box::new(|_| ""),
            scripts: Mutex::default(),
            calls: Mutex::default(),
            prepares: Mutex::default(),
        }
    }

    /// Sorts every spawn into the lane `lane_of` names.
    pub fn with_lanes(
        mut self,
        lane_of: impl Fn(&ExecSpec) -> &'static str + Send + Sync + 'static,
    ) -> Self {
        self.lane_of = Box::new(lane_of);
        self
    }

    /// Says it is `kind` (in [`Sandbox::kind`] and the runs' enforcement reports).
    pub fn of_kind(mut self, kind: BackendKind) -> Self {
        self.kind = kind;
        self
    }

    /// What [`Sandbox::can_see`] answers for every path.
    pub fn seeing(mut self, sees: bool) -> Self {
        self.sees = sees;
        self
    }

    /// Appends `scripts` to what `lane`'s spawns play, in order.
    pub fn script(&self, lane: &'static str, scripts: Vec<Script>) {
        lock(&self.scripts).entry(lane).or_default().extend(scripts);
    }

    /// Every [`Sandbox::prepare`] and [`Sandbox::discard`] so far, in order.
    pub fn prepares(&self) -> Vec<Prepared> {
        lock(&self.prepares).clone()
    }

    /// Every spawn so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        lock(&self.calls).clone()
    }

    /// Records the spawn and takes its script (exit 1 past the end of its lane's).
    fn record(&self, spec: &ExecSpec, io: &ExecIo) -> Script {
        let lane = (self.lane_of)(spec);
        let script = lock(&self.scripts)
            .get_mut(lane)
            .and_then(VecDeque::pop_front)
            .unwrap_or_else(|| Script::exit(1));
        lock(&self.calls).push(Call {
            lane,
            argv: spec.argv.clone(),
            cwd: spec.cwd.clone(),
            env: spec.env.clone(),
            timeout: spec.timeout,
            stdin: io.stdin.clone(),
            request: spec.sandbox.clone(),
        });
        script
    }
}

impl Sandbox for FakeSandbox {
    fn kind(&self) -> BackendKind {
        self.kind
    }

    fn preflight(&self, _req: &SandboxRequest) -> Result<(), SandboxError> {
        Ok(())
    }

    fn can_see(&self, _req: &SandboxRequest, _path: &Path) -> Result<bool, SandboxError> {
        Ok(self.sees)
    }

    fn spawn<'a>(&'a self, spec: &'a ExecSpec, io: ExecIo) -> SpawnFuture<'a> {
        let script = self.record(spec, &io);
        let started = run::FakeRun::start(self.kind, script, spec, io);
        Box::pin(async move { started.map(|r| Box::new(r) as Box<dyn Running>) })
    }

    fn prepare(&self, kill_grace: Duration) {
        // Counted under the calls' lock: a spawn is either before it or after it.
        let calls = lock(&self.calls);
        lock(&self.prepares).push(Prepared {
            after_calls: calls.len(),
            kill_grace,
            discard: false,
        });
    }

    fn discard(&self) {
        let calls = lock(&self.calls);
        lock(&self.prepares).push(Prepared {
            after_calls: calls.len(),
            kill_grace: Duration::ZERO,
            discard: true,
        });
    }
}

fn var<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// A lock that survives a panicking test thread (what it guards stays consistent).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests;
