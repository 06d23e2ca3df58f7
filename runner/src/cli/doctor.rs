//! `ralph doctor [--json]`: what this host supports, each check with "ok" or the reason.
//! Exit 0 when the default mode (workspace-write) can run on the native backend, 69 otherwise.

use clap::Args;
use ralph_sandbox::doctor;

use super::CliError;
use super::exit::Exit;

/// `ralph doctor` flags.
#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `ralph doctor` (single-threaded: probes fork).
pub fn execute(args: DoctorArgs) -> Result<Exit, CliError> {
    let policies = super::sandbox_args::load_policies()?;
    let host = ralph_sandbox::host::probe();
    let report = doctor::run(&host, &policies, &doctor::docker_socket());
    if args.json {
        let v = serde_json::json!({
            "ok": report.default_mode_ok(),
            "euid": host.euid,
            "checks": report.checks,
            "modes": report.modes,
            "policies": report.policies.iter().map(|(m, s)| serde_json::json!({"mode": m, "source": s})).collect::<Vec<_>>(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| CliError::internal(e.to_string()))?
        );
    } else {
        println!(
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
            println!("  {:width$}{}", c.name, c.status);
        }
        println!("native backend, by mode:");
        for m in &report.modes {
            println!("  {:width$}{}", m.name, m.status);
        }
        println!("policies:");
        for (m, s) in &report.policies {
            println!("  {:width$}{}", m.as_str(), s);
        }
    }
    Ok(if report.default_mode_ok() {
        Exit::Complete
    } else {
        Exit::SandboxUnavailable
    })
}
