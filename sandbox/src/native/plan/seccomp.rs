//! The seccomp filter of a native run (the policy's deny list, its allow-list, the socket
//! families of the network, the host-boundary guards) and the other process-wide restrictions
//! the helper always applies: no capabilities, no_new_privs, no core dumps.

use super::{SeccompPlan, unavailable};
use crate::error::SandboxError;
use crate::host::Host;
use crate::outcome::{Enforcement, Level, Restriction};
use crate::policy::admit::Admitted;
use crate::policy::network::SocketFamily;
use crate::policy::{Policy, syscalls};

/// The filter, refusing a host without seccomp and a deny list naming an unknown syscall.
pub(super) fn seccomp_plan(
    policy: &Policy,
    host: &Host,
    admitted: &Admitted,
    e: &mut Enforcement,
) -> Result<SeccompPlan, SandboxError> {
    host.seccomp
        .clone()
        .map_err(|reason| unavailable("the syscall filter (seccomp)", reason))?;
    let deny = policy
        .syscalls
        .deny
        .iter()
        .map(|n| {
            syscalls::number(n)
                .map(|nr| (n.clone(), nr))
                .ok_or_else(|| SandboxError::invalid("policy", format!("unknown syscall `{n}`")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let allow = if policy.syscalls.allow_list {
        let list = crate::policy::allow_list::embedded()
            .map_err(|m| SandboxError::invalid("policy", m))?;
        Some(list.iter().map(|(_, nr)| *nr).collect())
    } else {
        None
    };
    e.record(
        Restriction::Syscalls,
        Level::Full,
        format!("seccomp: {} syscalls refused with EPERM", deny.len()),
    );
    e.record(
        Restriction::Capabilities,
        Level::Full,
        "effective, permitted, inheritable, ambient and bounding sets emptied",
    );
    e.record(
        Restriction::NoNewPrivs,
        Level::Full,
        "prctl PR_SET_NO_NEW_PRIVS",
    );
    e.record(Restriction::CoreDumps, Level::Full, "RLIMIT_CORE 0");
    Ok(SeccompPlan {
        allow,
        deny,
        socket_families: admitted.socket_families.map(<[SocketFamily]>::to_vec),
        restrict_personality: policy.syscalls.restrict_personality,
        deny_namespace_clone: policy.syscalls.deny_namespace_clone,
        guards: policy.syscalls.switches(),
    })
}
