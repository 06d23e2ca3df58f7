//! `ralph doctor [--json] [--backend B] [--image IMG] [--reap] [--workspace DIR [--mode M]
//! [--toolchain MODE] [--agent-cmd CMD] [--verify CMD] [--setup CMD]] [--state-dir DIR]`: what this host supports, each check
//! with "ok" or the reason, the free space of the state directory's disk, and the docker backend's engine, image and leftover containers; with
//! `--workspace`, what a job there would be granted of the runner's toolchains (SPEC §12) and
//! whether the commands' programs run in its sandbox as on the runner (the pre-round check, with
//! its fix). Exit 0 when the default mode (workspace-write) can run on the chosen backend
//! (native by default), 69 otherwise (for docker: the engine is unreachable or the image is
//! missing); with `--workspace`, 64 when a command's program would not run.

use super::stdout::outln;
use clap::Args;
use ralph_sandbox::BackendKind;
use ralph_sandbox::docker::doctor::DockerReport;
use ralph_sandbox::doctor;

use super::CliError;
use super::exit::Exit;

/// `ralph doctor` flags.
#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// The backend whose readiness decides the exit status: native (default) or docker.
    #[arg(long, value_parser = parse_backend)]
    pub backend: Option<BackendKind>,
    /// The docker image to check (default: ralph-agent-base:latest).
    #[arg(long, value_name = "IMG")]
    pub image: Option<String>,
    /// Remove this host's leftover ralph containers whose runner is gone.
    #[arg(long)]
    pub reap: bool,
    /// Show what a job in this workspace would be granted of the runner's toolchains.
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<std::path::PathBuf>,
    /// With --workspace: the job's mode (default workspace-write).
    #[arg(long, value_parser = parse_mode, requires = "workspace")]
    pub mode: Option<ralph_sandbox::Mode>,
    /// With --workspace: auto (default) or none.
    #[arg(long, value_enum, value_name = "MODE", requires = "workspace")]
    pub toolchain: Option<ralph_runner::toolchain::ToolchainMode>,
    /// With --workspace: check this agent command's program as the pre-round check would.
    #[arg(long, value_name = "CMD", requires = "workspace")]
    pub agent_cmd: Option<String>,
    /// With --workspace: check this verify command's program as the pre-round check would.
    #[arg(long, value_name = "CMD", requires = "workspace")]
    pub verify: Option<String>,
    /// With --workspace: check this set-up command's program as the pre-round check would.
    #[arg(long, value_name = "CMD", requires = "workspace")]
    pub setup: Option<String>,
    /// The state directory whose disk is checked for room (default: as `ralph run`'s).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<std::path::PathBuf>,
}

fn parse_backend(s: &str) -> Result<BackendKind, String> {
    s.parse()
        .map_err(|e: ralph_sandbox::mode::UnknownWord| e.to_string())
}

fn parse_mode(s: &str) -> Result<ralph_sandbox::Mode, String> {
    s.parse()
        .map_err(|e: ralph_sandbox::mode::UnknownWord| e.to_string())
}

fn either(r: &Result<String, String>) -> serde_json::Value {
    match r {
        Ok(v) => serde_json::json!({"ok": true, "status": v}),
        Err(e) => serde_json::json!({"ok": false, "status": e}),
    }
}

fn docker_json(d: &DockerReport) -> serde_json::Value {
    serde_json::json!({
        "socket": d.socket,
        "engine": either(&d.engine),
        "image": d.image,
        "image_status": either(&d.image_status),
        "runner": d.runner,
        "containers": match &d.containers {
            Ok(c) => serde_json::json!(c),
            Err(e) => serde_json::json!({"error": e}),
        },
    })
}

/// Runs `ralph doctor` (single-threaded: probes fork).
pub fn execute(args: DoctorArgs) -> Result<Exit, CliError> {
    let policies = super::sandbox_args::load_policies()?;
    let host = ralph_sandbox::host::probe();
    let report = doctor::run(&host, &policies, &doctor::docker_socket());
    let image = args
        .image
        .clone()
        .unwrap_or_else(|| ralph_sandbox::docker::DEFAULT_IMAGE.to_owned());
    let docker = ralph_sandbox::docker::doctor::check(&image, args.reap);
    let ok = match args.backend.unwrap_or_default() {
        BackendKind::Native => report.default_mode_ok(),
        BackendKind::Docker => docker.ok(),
    };
    let toolchains = match &args.workspace {
        Some(ws) => Some(toolchains(&args, ws)?),
        None => None,
    };
    let state_disk = match &args.state_dir {
        Some(d) => Some(d.clone()),
        None => super::state_dir::default_state_dir().ok(),
    }
    .map(|d| super::doctor_disk::StateDisk::check(&d));
    if args.json {
        let v = serde_json::json!({
            "ok": ok,
            "toolchains": toolchains.as_ref().map(Toolchains::json),
            "state_dir": state_disk.as_ref().map(super::doctor_disk::StateDisk::json),
            "docker": docker_json(&docker),
            "euid": host.euid,
            "checks": report.checks,
            "modes": report.modes,
            "policies": report.policies.iter().map(|(m, s)| serde_json::json!({"mode": m, "source": s})).collect::<Vec<_>>(),
        });
        outln!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| CliError::internal(e.to_string()))?
        );
    } else {
        outln!(
            "ralph {} on this host (uid {}):",
            env!("CARGO_PKG_VERSION"),
            host.euid
        );
        let width = report
            .checks
            .iter()
            .chain(&report.modes)
            .map(|c| c.name.len())
            .max()
            .unwrap_or(10)
            + 2;
        for c in &report.checks {
            outln!("  {:width$}{}", c.name, c.status);
        }
        outln!("native backend, by mode:");
        for m in &report.modes {
            outln!("  {:width$}{}", m.name, m.status);
        }
        if let Some(d) = &state_disk {
            outln!("state dir ({}):", d.dir.display());
            outln!("  {:width$}{}", "free space", d.status);
        }
        outln!("policies:");
        for (m, s) in &report.policies {
            outln!("  {:width$}{}", m.as_str(), s);
        }
        outln!("docker backend ({}):", docker.socket);
        let line = |r: &Result<String, String>| match r {
            Ok(v) => format!("ok: {v}"),
            Err(e) => e.clone(),
        };
        outln!("  {:width$}{}", "engine", line(&docker.engine));
        outln!(
            "  {:width$}{}",
            format!("image {}", docker.image),
            line(&docker.image_status)
        );
        let what = if args.reap {
            "leftovers removed"
        } else {
            "containers"
        };
        match &docker.containers {
            Ok(list) if list.is_empty() => {
                outln!("  {:width$}none (runner `{}`)", what, docker.runner);
            }
            Ok(list) => {
                outln!(
                    "  {:width$}{} (runner `{}`)",
                    what,
                    list.len(),
                    docker.runner
                );
                for c in list {
                    outln!(
                        "    {} job {} round {} {}{}",
                        c.id,
                        c.job,
                        c.round,
                        c.state,
                        if c.owner_alive {
                            " (its runner is alive)"
                        } else {
                            " (leftover: its runner is gone; `ralph doctor --reap` removes it)"
                        }
                    );
                }
            }
            Err(e) => outln!("  {what:width$}{e}"),
        }
        if let Some(t) = &toolchains {
            t.print();
        }
    }
    if toolchains.as_ref().is_some_and(|t| !t.commands_ok()) {
        return Ok(Exit::Usage);
    }
    Ok(if ok {
        Exit::Complete
    } else {
        Exit::SandboxUnavailable
    })
}

/// What `--workspace` asks: a job's toolchain grant there and its commands' checks.
struct Toolchains {
    workspace: std::path::PathBuf,
    spec: ralph_runner::job::JobSpec,
    grant: ralph_runner::toolchain::GrantRecord,
    /// (what, command, the check's answer).
    commands: Vec<(&'static str, String, Result<(), String>)>,
}

/// The grant and checks of a job in `workspace` with the given flags.
fn toolchains(args: &DoctorArgs, workspace: &std::path::Path) -> Result<Toolchains, CliError> {
    use ralph_runner::job::{AgentSpec, JobSpec};
    let ws = std::fs::canonicalize(workspace).map_err(|e| {
        CliError::usage(format!(
            "`--workspace {}`: failed to resolve it: {e}",
            workspace.display()
        ))
    })?;
    if !ws.is_dir() {
        return Err(CliError::usage(format!(
            "`--workspace {}`: not a directory",
            workspace.display()
        )));
    }
    let agent = args.agent_cmd.clone().unwrap_or_else(|| "true".to_owned());
    let mut spec = JobSpec::new("doctor", &ws, AgentSpec::Command { command: agent });
    spec.verify = args.verify.clone();
    spec.setup = args.setup.clone().map(ralph_runner::job::SetupSpec::new);
    spec.toolchain = args.toolchain.unwrap_or_default();
    spec.sandbox.mode = args.mode.unwrap_or(ralph_sandbox::Mode::WorkspaceWrite);
    spec.sandbox.backend = args.backend.unwrap_or_default();
    let env = ralph_runner::engine::RunnerEnv::capture();
    let policy_mode = match spec.sandbox.mode {
        ralph_sandbox::Mode::FullAccess => ralph_sandbox::Mode::WorkspaceWrite,
        m => m,
    };
    let sandboxes = ralph_runner::engine::Sandboxes::new(
        "/proc/self/exe",
        super::sandbox_args::load_policies()?,
    );
    let shown = sandboxes
        .policies()
        .get(policy_mode)
        .map(|p| p.filesystem.read.clone())
        .unwrap_or_default();
    let grant = ralph_runner::toolchain::for_job(&spec, &env, &shown, &[]);
    let mut commands = Vec::new();
    let native = spec.sandbox.backend == BackendKind::Native;
    for (what, command) in [
        ("the agent command", args.agent_cmd.as_ref()),
        ("the verify command", args.verify.as_ref()),
        ("the set-up command", args.setup.as_ref()),
    ] {
        let Some(command) = command else { continue };
        let answer = if native {
            ralph_runner::engine::command_visible(what, command, &spec, &env, &sandboxes)
        } else {
            Ok(())
        };
        commands.push((what, command.clone(), answer));
    }
    Ok(Toolchains {
        workspace: ws,
        grant: grant.record(),
        spec,
        commands,
    })
}

impl Toolchains {
    fn commands_ok(&self) -> bool {
        self.commands.iter().all(|(_, _, r)| r.is_ok())
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "workspace": self.workspace,
            "toolchain": self.spec.toolchain.as_str(),
            "mode": self.spec.sandbox.mode.as_str(),
            "granted": self.grant,
            "commands": self.commands.iter().map(|(what, command, r)| serde_json::json!({
                "what": what,
                "command": command,
                "ok": r.is_ok(),
                "message": r.as_ref().err(),
            })).collect::<Vec<_>>(),
        })
    }

    /// Printed through [`terminal::line`]: paths come from the workspace (a `pyvenv.cfg`).
    fn print(&self) {
        use ralph_runner::util::terminal;
        outln!(
            "{}",
            terminal::line(&format!(
                "toolchains for a job in {} (--toolchain {}, --mode {}, {}):",
                self.workspace.display(),
                self.spec.toolchain.as_str(),
                self.spec.sandbox.mode.as_str(),
                self.spec.sandbox.backend.as_str()
            ))
        );
        if self.spec.toolchain == ralph_runner::toolchain::ToolchainMode::None {
            outln!("  none granted (--toolchain none)");
        } else {
            for l in self.grant.lines() {
                outln!("  {}", terminal::line(&l));
            }
        }
        for (what, command, r) in &self.commands {
            let answer = match r {
                Ok(()) => format!("{what} `{command}`: ok"),
                Err(m) => m.clone(),
            };
            outln!("{}", terminal::line(&answer));
        }
    }
}
