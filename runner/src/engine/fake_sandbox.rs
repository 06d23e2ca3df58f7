//! The loop's unit tests' view of the recording fake sandbox (`ralph_sandbox::testing`): which
//! process a spawn started (an agent attempt, the set-up or the verify command: each plays its
//! own scripts, in order), what a round's scripts write where the runner looks (its report
//! file, its usage file), and the fake world's programs: every one a command names is on the
//! runner's `PATH` (a stub in the harness's own directory) and the fake sandbox sees it, so
//! the pre-round program check passes and what runs is the script.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ralph_sandbox::ExecSpec;
use ralph_sandbox::testing::FakeSandbox;
pub(crate) use ralph_sandbox::testing::Script;

/// The lanes of the fake's calls.
const AGENT: &str = "agent";
const VERIFY: &str = "verify";
const SETUP: &str = "setup";

/// A round's scripts: what it writes where the runner looks.
pub(crate) trait RoundScript {
    /// Writes `report` to the report file (`$RALPH_REPORT_FILE`, agent attempts only) and
    /// exits 0 at once.
    fn report(report: serde_json::Value) -> Self;
    /// Also reports `tokens` input tokens used (`$RALPH_USAGE_FILE`).
    fn spending(self, tokens: u64) -> Self;
}

impl RoundScript for Script {
    fn report(report: serde_json::Value) -> Self {
        Script::exit(0).writing_at_var("RALPH_REPORT_FILE", &report.to_string())
    }

    fn spending(self, tokens: u64) -> Self {
        self.writing_at_var(
            "RALPH_USAGE_FILE",
            &format!("{{\"model\":\"m\",\"input_tokens\":{tokens}}}\n"),
        )
    }
}

/// Which process a call started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CallKind {
    /// A round attempt of the agent.
    Agent,
    /// The verify command.
    Verify,
    /// The set-up command.
    Setup,
}

/// One recorded spawn.
#[derive(Clone, Debug)]
pub(crate) struct Call {
    /// Agent, set-up or verify.
    pub kind: CallKind,
    /// `RALPH_ROUND`.
    pub round: Option<u32>,
    /// `RALPH_ATTEMPT` (agent attempts).
    pub attempt: Option<u32>,
    /// The timeout the loop gave the process.
    pub timeout: Option<Duration>,
    /// What the process got on stdin (the prompt, for an agent).
    pub stdin: String,
    /// Its environment.
    pub env: Vec<(String, String)>,
    /// Its network.
    pub network: Option<ralph_sandbox::Network>,
    /// The gateway ports opened for it.
    pub gateway_ports: Vec<u16>,
}

/// A spawn, a [`ralph_sandbox::Sandbox::prepare`] (a run announced ahead) or a
/// [`ralph_sandbox::Sandbox::discard`], in the order the engine made them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The engine said another run follows.
    Prepare,
    /// The engine said the run it announced will not come.
    Discard,
    /// A process started.
    Run(CallKind),
}

/// An agent attempt has a report file; a runner step says which it is.
fn lane(spec: &ExecSpec) -> &'static str {
    let var = |name: &str| spec.env.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    match (var("RALPH_REPORT_FILE"), var("RALPH_STEP")) {
        (Some(_), _) => AGENT,
        (None, Some(step)) if step == "setup" => SETUP,
        (None, _) => VERIFY,
    }
}

/// The fake: scripted agent attempts, set-up and verify runs, in order; past the end of a
/// script a process exits 1 with no report.
#[derive(Debug)]
pub(crate) struct FakeRounds(Arc<FakeSandbox>);

impl FakeRounds {
    /// Agent attempts play `agent`, verify runs `verify`, set-up runs `setup`.
    pub fn new(agent: Vec<Script>, verify: Vec<Script>, setup: Vec<Script>) -> Self {
        let fake = FakeSandbox::new().with_lanes(lane);
        fake.script(AGENT, agent);
        fake.script(VERIFY, verify);
        fake.script(SETUP, setup);
        Self(Arc::new(fake))
    }

    /// The sandbox the engine runs every process in.
    pub fn sandbox(&self) -> Arc<dyn ralph_sandbox::Sandbox> {
        self.0.clone()
    }

    /// Every spawn so far.
    pub fn calls(&self) -> Vec<Call> {
        self.0
            .calls()
            .into_iter()
            .map(|c| Call {
                kind: match c.lane {
                    AGENT => CallKind::Agent,
                    SETUP => CallKind::Setup,
                    _ => CallKind::Verify,
                },
                round: c.var("RALPH_ROUND").and_then(|v| v.parse().ok()),
                attempt: c.var("RALPH_ATTEMPT").and_then(|v| v.parse().ok()),
                timeout: c.timeout,
                stdin: c.stdin_text(),
                network: c.request.network,
                gateway_ports: c.request.gateway_ports.clone(),
                env: c.env,
            })
            .collect()
    }

    /// The kinds of the spawns so far.
    pub fn kinds(&self) -> Vec<CallKind> {
        self.calls().iter().map(|c| c.kind).collect()
    }

    /// The kill grace each prepare so far named.
    pub fn prepared_graces(&self) -> Vec<Duration> {
        self.0
            .prepares()
            .iter()
            .filter(|p| !p.discard)
            .map(|p| p.kill_grace)
            .collect()
    }

    /// The spawns, prepares and discards so far, in order.
    pub fn steps(&self) -> Vec<Step> {
        let step = |p: &ralph_sandbox::testing::Prepared| {
            if p.discard {
                Step::Discard
            } else {
                Step::Prepare
            }
        };
        let mut prepares = self.0.prepares().into_iter().peekable();
        let mut steps = Vec::new();
        for (i, kind) in self.kinds().into_iter().enumerate() {
            while let Some(p) = prepares.next_if(|p| p.after_calls <= i) {
                steps.push(step(&p));
            }
            steps.push(Step::Run(kind));
        }
        steps.extend(prepares.map(|p| step(&p)));
        steps
    }
}

/// Puts a stub of the program each of `commands` starts with in `bin` (on the runner's `PATH`
/// in the fake world), unless one is there: the program check before round 1 finds it.
pub(crate) fn stub_programs<'a>(bin: &Path, commands: impl IntoIterator<Item = &'a str>) {
    use std::os::unix::fs::PermissionsExt;
    for command in commands {
        let Some(program) = crate::toolchain::first_program(command) else {
            continue;
        };
        if program.contains('/') {
            continue;
        }
        let stub = bin.join(program);
        if !stub.exists() {
            std::fs::write(&stub, "#!/bin/sh\nexit 0\n").unwrap();
            std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
}
