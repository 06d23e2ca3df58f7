//! The network of a native run: a private network namespace (loopback only) unless the network
//! is the host's; with `--network gateway` the runner's gateway listeners are the only route out.

use super::{LandlockPlan, unavailable};
use crate::error::SandboxError;
use crate::mode::Network;
use crate::outcome::{Enforcement, Level, NetworkEnforced, Restriction};
use crate::plan::gateway_detail;
use crate::policy::admit::Admitted;
use crate::spec::SandboxRequest;

/// Refuses a private network without namespaces; records the network.
pub(super) fn network(
    req: &SandboxRequest,
    admitted: &Admitted,
    can_ns: bool,
    landlock: Option<&LandlockPlan>,
    e: &mut Enforcement,
) -> Result<(), SandboxError> {
    let network = admitted.network;
    if network.private_namespace() && !can_ns {
        return Err(unavailable(
            "network isolation",
            "no network namespace can be created",
        ));
    }
    match network {
        Network::None => {
            let tcp = if landlock.is_some_and(|l| l.deny_tcp) {
                ", landlock denies tcp"
            } else {
                ""
            };
            e.record(
                Restriction::Network,
                Level::Full,
                format!(
                    "private network namespace (loopback only), non-AF_UNIX sockets refused{tcp}"
                ),
            );
        }
        Network::Gateway => {
            e.record(
                Restriction::Network,
                Level::Full,
                gateway_detail(&req.gateway_ports, admitted.socket_families.unwrap_or(&[])),
            );
            e.network = Some(NetworkEnforced {
                network,
                gateway_ports: req.gateway_ports.clone(),
            });
        }
        Network::Full => e.record(Restriction::Network, Level::NotRequested, "host network"),
    }
    Ok(())
}
