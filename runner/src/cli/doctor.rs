//! `ralph doctor [--json] [--backend B] [--image IMG] [--reap]`: what this host supports, each
//! check with "ok" or the reason, and the docker backend's engine, image and leftover containers.
//! Exit 0 when the default mode (workspace-write) can run on the chosen backend (native by
//! default), 69 otherwise (for docker: the engine is unreachable or the image is missing).

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
}

fn parse_backend(s: &str) -> Result<BackendKind, String> {
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
    if args.json {
        let v = serde_json::json!({
            "ok": ok,
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
    }
    Ok(if ok {
        Exit::Complete
    } else {
        Exit::SandboxUnavailable
    })
}
