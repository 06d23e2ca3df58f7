//! A container's network (`none`, the gateway's loopback-only namespace, or the bridge), its
//! seccomp profile and the process-wide restrictions every container gets.

use super::super::seccomp::{self, Profile};
use crate::error::SandboxError;
use crate::mode::Network;
use crate::outcome::{Enforcement, Level, NetworkEnforced, Restriction};
use crate::plan::gateway_detail;
use crate::policy::Policy;
use crate::policy::admit::Admitted;
use crate::spec::SandboxRequest;

/// The seccomp profile, refusing a policy it cannot express; records the network and the
/// process-wide lines.
pub(super) fn process(
    policy: &Policy,
    req: &SandboxRequest,
    admitted: &Admitted,
    e: &mut Enforcement,
) -> Result<Profile, SandboxError> {
    network(req, admitted, e);
    let seccomp = seccomp::profile(policy, admitted.socket_families)
        .map_err(|m| SandboxError::invalid("policy", m))?;
    e.record(
        Restriction::Syscalls,
        Level::Full,
        format!(
            "seccomp profile: {} rule(s), io_uring refused",
            seccomp.syscalls.len()
        ),
    );
    e.record(Restriction::Capabilities, Level::Full, "cap_drop ALL");
    e.record(
        Restriction::NoNewPrivs,
        Level::Full,
        "security_opt no-new-privileges",
    );
    e.record(
        Restriction::Environment,
        Level::Full,
        "only the request's environment",
    );
    e.record(
        Restriction::Descriptors,
        Level::Full,
        "a fresh container: only stdin, stdout and stderr",
    );
    e.record(
        Restriction::ProcessTree,
        Level::Full,
        "own pid namespace with an init; the container is killed and removed at the end",
    );
    e.record(Restriction::CoreDumps, Level::Full, "ulimit core 0");
    e.record(
        Restriction::Scoping,
        Level::Full,
        "own pid, ipc and network namespaces",
    );
    Ok(seccomp)
}

/// The network line. `--network gateway`: the container's own network namespace with loopback
/// only (network mode none), where ralph's init makes the gateway's listeners and hands them to
/// the runner before the command exists (`crate::docker::gateway`), as the native init does.
fn network(req: &SandboxRequest, admitted: &Admitted, e: &mut Enforcement) {
    let network = admitted.network;
    match network {
        Network::None => e.record(
            Restriction::Network,
            Level::Full,
            "network mode none (loopback only), non-AF_UNIX sockets refused",
        ),
        Network::Gateway => {
            e.record(
                Restriction::Network,
                Level::Full,
                gateway_detail(&req.gateway_ports, admitted.socket_families.unwrap_or(&[]))
                    .replace("private network namespace", "network mode none"),
            );
            e.network = Some(NetworkEnforced {
                network,
                gateway_ports: req.gateway_ports.clone(),
            });
        }
        Network::Full => e.record(Restriction::Network, Level::NotRequested, "bridge network"),
    }
}
