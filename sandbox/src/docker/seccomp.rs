//! The container's seccomp profile, built as pure data: the embedded base
//! (`policies/docker-seccomp.json`) plus what the mode's policy refuses, so that a container
//! refuses at least what the native backend refuses in the same mode.
//!
//! The allow-list ([`crate::policy::allow_list`]) holds in every mode on docker, full-access
//! included (a container refuses at least what a default `docker run` refuses). It is two
//! layers: this profile refuses with EPERM (as Docker's default profile does), by name, every syscall ralph's table knows
//! ([`crate::policy::syscall_table`]) that the list leaves out and no other rule names; the
//! container's init installs a filter of its own before it runs the command
//! ([`crate::native::seccomp::newer_syscalls_program`]) so that a syscall newer than the table
//! answers ENOSYS too. The default action stays ALLOW: libseccomp lets an unconditional ALLOW rule
//! override the conditional ERRNO rules of the same syscall (measured with this engine: chmod's
//! set-id guard was dropped), so the guards could not sit under a default-deny profile.
//!
//! The Docker profile format cannot AND two conditions on one argument (runc ORs them), so the
//! personality(2) restriction ("only 0 and 0xffffffff") is written as one single-condition rule
//! per bit: refused when bit *b* is set and bit 31 is clear, or bit 31 is set and bit *b* clear.
//! The only values no rule matches are 0 and those whose low 32 bits are all set (the query).

use serde::{Deserialize, Serialize};

use std::collections::BTreeSet;

use crate::policy::network::SocketFamily;
use crate::policy::{Policy, SyscallPolicy, allow_list, guards, syscall_table, syscalls};

const BASE: &str = include_str!("../../../policies/docker-seccomp.json");

const EPERM: i64 = libc::EPERM as i64;
const ENOSYS: i64 = libc::ENOSYS as i64;

/// The namespace flags refused in clone(2) (as in the native filter).
const NS_CLONE_FLAGS: [u64; 7] = [
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
];

/// A profile (the subset of the Docker format ralph uses).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Profile {
    /// Documentation of the data file; never sent.
    #[serde(default, skip_serializing)]
    pub comment: Vec<String>,
    /// What happens to a syscall no rule matches.
    pub default_action: String,
    /// The errno of an `SCMP_ACT_ERRNO` default action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_errno_ret: Option<i64>,
    /// Allowed architectures.
    pub architectures: Vec<String>,
    /// The rules.
    pub syscalls: Vec<Rule>,
}

/// One rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Rule {
    /// Why; never sent.
    #[serde(default, skip_serializing)]
    pub comment: String,
    /// The syscalls.
    pub names: Vec<String>,
    /// `SCMP_ACT_ERRNO` or `SCMP_ACT_ALLOW`.
    pub action: String,
    /// The errno.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub errno_ret: Option<i64>,
    /// Conditions, all on different arguments (ANDed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<Arg>,
}

/// A condition on one argument.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Arg {
    /// Argument index.
    pub index: u32,
    /// Compared value (for `SCMP_CMP_MASKED_EQ`: the mask).
    pub value: u64,
    /// For `SCMP_CMP_MASKED_EQ`: the value the masked argument must equal.
    #[serde(default)]
    pub value_two: u64,
    /// `SCMP_CMP_NE`, `SCMP_CMP_MASKED_EQ`, ...
    pub op: String,
}

fn deny(names: Vec<String>, errno: i64, args: Vec<Arg>, comment: &str) -> Rule {
    Rule {
        comment: comment.to_owned(),
        names,
        action: "SCMP_ACT_ERRNO".into(),
        errno_ret: Some(errno),
        args,
    }
}

fn masked(mask: u64, value: u64) -> Arg {
    Arg {
        index: 0,
        value: mask,
        value_two: value,
        op: "SCMP_CMP_MASKED_EQ".into(),
    }
}

/// The embedded base profile.
pub fn base() -> Result<Profile, String> {
    serde_json::from_str(BASE).map_err(|e| format!("invalid embedded docker-seccomp.json: {e}"))
}

/// The syscall rules a container of `policy`'s mode gets: the mode's own, and on docker, at
/// least Docker's default profile in every mode — full-access included, where the native
/// backend keeps the host's behaviour — so the allow-list, clone(2) without namespace flags
/// (unshare is not allowed at all) and personality(2) limited to PER_LINUX apply there too.
pub fn effective(policy: &Policy) -> SyscallPolicy {
    let mut sys = policy.syscalls.clone();
    sys.allow_list = true;
    sys.restrict_personality = true;
    sys.deny_namespace_clone = true;
    sys
}

/// Refuses `name` (`socket`/`socketpair`) with EPERM when its family (argument 0) compares to
/// `value` by `op`.
fn family_rule(name: &str, op: &str, value: u64, why: &str) -> Rule {
    deny(
        vec![name.into()],
        EPERM,
        vec![Arg {
            index: 0,
            value,
            value_two: 0,
            op: op.into(),
        }],
        why,
    )
}

/// The profile of one container of `policy`'s mode.
pub fn profile(policy: &Policy, families: Option<&[SocketFamily]>) -> Result<Profile, String> {
    let network_off = families == Some(&[SocketFamily::Unix][..]);
    let mut p = base()?;
    let sys = &effective(policy);
    if let Some(unknown) = sys.deny.iter().find(|n| syscalls::number(n).is_none()) {
        return Err(format!("unknown syscall `{unknown}` in the policy"));
    }
    if !sys.deny.is_empty() {
        p.syscalls
            .push(deny(sys.deny.clone(), EPERM, Vec::new(), "policy"));
    }
    if network_off {
        for name in ["socket", "socketpair"] {
            p.syscalls.push(family_rule(
                name,
                "SCMP_CMP_NE",
                libc::AF_UNIX as u64,
                "network off: only AF_UNIX",
            ));
        }
    } else if let Some(families) = families {
        // One comparison per argument and rule: every family number below the highest allowed
        // that is not allowed is refused by its own rule, every number above it by one more.
        let allowed: Vec<u64> = families.iter().map(|f| f.number() as u64).collect();
        let top = allowed.iter().copied().max().unwrap_or(0);
        let why = "gateway: only AF_UNIX, AF_INET, AF_INET6";
        for name in ["socket", "socketpair"] {
            for n in (0..top).filter(|n| !allowed.contains(n)) {
                p.syscalls.push(family_rule(name, "SCMP_CMP_EQ", n, why));
            }
            p.syscalls.push(family_rule(name, "SCMP_CMP_GT", top, why));
        }
    }
    if sys.restrict_personality {
        const QUERY_BIT: u64 = 1 << 31;
        for bit in (0..31).map(|b| 1u64 << b) {
            for value in [bit, QUERY_BIT] {
                p.syscalls.push(deny(
                    vec!["personality".into()],
                    EPERM,
                    vec![masked(bit | QUERY_BIT, value)],
                    "personality: only PER_LINUX and the query",
                ));
            }
        }
    }
    if sys.deny_namespace_clone {
        for flag in NS_CLONE_FLAGS {
            p.syscalls.push(deny(
                vec!["clone".into()],
                EPERM,
                vec![masked(flag, flag)],
                "clone with a namespace flag",
            ));
        }
        p.syscalls.push(deny(
            vec!["clone3".into()],
            ENOSYS,
            Vec::new(),
            "clone3: flags unreadable by seccomp; libc falls back to clone",
        ));
    }
    for g in guards::guards(sys.switches()) {
        let args = g.conds.iter().map(guard_arg).collect();
        p.syscalls.push(deny(
            vec![g.syscall.into()],
            i64::from(g.errno),
            args,
            g.why,
        ));
    }
    if sys.allow_list {
        if !network_off {
            p.syscalls.push(family_rule(
                "socket",
                "SCMP_CMP_EQ",
                libc::AF_VSOCK as u64,
                "AF_VSOCK, as in Docker's default profile",
            ));
        }
        add_allow_list(&mut p, allow_list::embedded()?);
    }
    Ok(p)
}

/// Refuses with EPERM (what a default `docker run` answers) every syscall of the table that `allowed` leaves out and no rule of
/// `p` names yet (see the module comment).
fn add_allow_list(p: &mut Profile, allowed: &[(String, i64)]) {
    let refused: BTreeSet<String> = p
        .syscalls
        .iter()
        .filter(|r| r.args.is_empty())
        .flat_map(|r| r.names.iter().cloned())
        .collect();
    let unlisted: BTreeSet<String> = syscall_table::X86_64
        .iter()
        .map(|(n, _)| (*n).to_owned())
        .filter(|n| !refused.contains(n) && !allowed.iter().any(|(a, _)| a == n))
        .collect();
    // A conditional rule on a syscall refused outright would only blur the profile.
    for r in &mut p.syscalls {
        if !r.args.is_empty() {
            r.names.retain(|n| !unlisted.contains(n));
        }
    }
    p.syscalls.retain(|r| !r.names.is_empty());
    p.syscalls.push(deny(
        unlisted.into_iter().collect(),
        EPERM,
        Vec::new(),
        "not in policies/syscalls-allowed.toml (EPERM, as Docker's default profile)",
    ));
}

/// One guard condition in the profile's terms. libseccomp compares all 64 bits of an argument,
/// while the kernel reads a 32-bit argument's low half only: a 32-bit equality is written as a
/// masked comparison of the low half, so garbage in the upper half cannot slip past it.
fn guard_arg(c: &guards::Cond) -> Arg {
    let (op, value, value_two) = match (c.op, c.width) {
        (guards::Op::Eq(v), guards::Width::Dword) => ("SCMP_CMP_MASKED_EQ", 0xffff_ffff, v),
        (guards::Op::Eq(v), guards::Width::Qword) => ("SCMP_CMP_EQ", v, 0),
        // Wider than the kernel's view: refuses a little more, never less.
        (guards::Op::Ne(v), _) => ("SCMP_CMP_NE", v, 0),
        (guards::Op::MaskedEq { mask, value }, guards::Width::Dword) => {
            ("SCMP_CMP_MASKED_EQ", mask & 0xffff_ffff, value)
        }
        (guards::Op::MaskedEq { mask, value }, guards::Width::Qword) => {
            ("SCMP_CMP_MASKED_EQ", mask, value)
        }
    };
    Arg {
        index: u32::from(c.arg),
        value,
        value_two,
        op: op.into(),
    }
}

/// The profile as the engine takes it (`SecurityOpt` `seccomp=<json>`).
pub fn security_opt(p: &Profile) -> Result<String, String> {
    serde_json::to_string(p)
        .map(|json| format!("seccomp={json}"))
        .map_err(|e| format!("failed to encode the seccomp profile: {e}"))
}

/// Whether `p` refuses `name` unconditionally with `errno`.
pub fn refuses(p: &Profile, name: &str, errno: i64) -> bool {
    p.syscalls.iter().any(|r| {
        r.args.is_empty()
            && r.action == "SCMP_ACT_ERRNO"
            && r.errno_ret == Some(errno)
            && r.names.iter().any(|n| n == name)
    })
}

#[cfg(test)]
mod tests {
    const UNIX: Option<&[SocketFamily]> = Some(&[SocketFamily::Unix]);
    use super::*;
    use crate::mode::Mode;
    use crate::policy::PolicySet;

    /// Evaluates the personality rules the way the kernel filter would.
    fn personality_refused(p: &Profile, value: u64) -> bool {
        p.syscalls
            .iter()
            .filter(|r| r.names.iter().any(|n| n == "personality"))
            .any(|r| {
                r.args
                    .iter()
                    .all(|a| a.op == "SCMP_CMP_MASKED_EQ" && value & a.value == a.value_two)
            })
    }

    /// Whether `p` refuses `socket(family, …)` by one of its argument rules.
    fn refuses_family(p: &Profile, family: u64) -> bool {
        p.syscalls
            .iter()
            .filter(|r| r.names.iter().any(|n| n == "socket") && !r.args.is_empty())
            .any(|r| {
                r.args.iter().all(|a| match a.op.as_str() {
                    "SCMP_CMP_EQ" => family == a.value,
                    "SCMP_CMP_NE" => family != a.value,
                    "SCMP_CMP_GT" => family > a.value,
                    _ => false,
                })
            })
    }

    #[test]
    fn each_network_setting_refuses_the_socket_families_its_namespace_has_no_use_for() {
        use crate::policy::network::socket_families;
        let set = PolicySet::embedded().unwrap();
        let policy = set.get(Mode::WorkspaceWrite).unwrap();
        let none = profile(policy, socket_families(crate::Network::None)).unwrap();
        let gateway = profile(policy, socket_families(crate::Network::Gateway)).unwrap();
        let full = profile(policy, socket_families(crate::Network::Full)).unwrap();
        for family in 0..=64u64 {
            let unix = family == libc::AF_UNIX as u64;
            let ip = family == libc::AF_INET as u64 || family == libc::AF_INET6 as u64;
            assert_eq!(refuses_family(&none, family), !unix, "none: {family}");
            assert_eq!(
                refuses_family(&gateway, family),
                !unix && !ip,
                "gateway: {family}"
            );
            // Full: only AF_VSOCK, as Docker's default profile.
            assert_eq!(
                refuses_family(&full, family),
                family == libc::AF_VSOCK as u64,
                "full: {family}"
            );
        }
    }

    #[test]
    fn every_mode_refuses_at_least_what_native_refuses() {
        let set = PolicySet::embedded().unwrap();
        for mode in Mode::ALL {
            let policy = set.get(mode).unwrap();
            let p = profile(policy, Some(&[SocketFamily::Unix])).unwrap();
            for name in &policy.syscalls.deny {
                assert!(refuses(&p, name, EPERM), "{mode}: {name} is not refused");
            }
            for name in ["io_uring_setup", "io_uring_enter", "io_uring_register"] {
                assert!(refuses(&p, name, EPERM), "{mode}: {name} is allowed");
            }
            assert_eq!(p.default_action, "SCMP_ACT_ALLOW");
            // At least Docker's default refusals, in every mode (issue 28).
            for name in [
                "move_pages",
                "mbind",
                "set_mempolicy",
                "kcmp",
                "unshare",
                "setns",
                "ptrace",
                "mount",
                "get_mempolicy",
                "process_vm_readv",
            ] {
                assert!(
                    refuses(&p, name, ENOSYS) || refuses(&p, name, EPERM),
                    "{mode}: {name} is allowed"
                );
            }
            for name in ["read", "execve", "openat", "chmod", "clone", "socket"] {
                assert!(
                    !refuses(&p, name, ENOSYS) && !refuses(&p, name, EPERM),
                    "{mode}: {name}"
                );
            }
            assert_eq!(p.architectures, ["SCMP_ARCH_X86_64"]);
            let json = security_opt(&p).unwrap();
            assert!(json.starts_with("seccomp={") && !json.contains("comment"));
        }
        let ww = set.get(Mode::WorkspaceWrite).unwrap();
        let p = profile(ww, None).unwrap();
        // With the network on, only AF_VSOCK is refused (as in Docker's default profile).
        let socket: Vec<&Rule> = p
            .syscalls
            .iter()
            .filter(|r| r.names == ["socket"])
            .collect();
        assert_eq!(socket.len(), 1);
        assert_eq!(socket[0].args[0].op, "SCMP_CMP_EQ");
        assert_eq!(socket[0].args[0].value, libc::AF_VSOCK as u64);
        assert!(refuses(&p, "clone3", ENOSYS));
        let p = profile(ww, UNIX).unwrap();
        assert!(p.syscalls.iter().any(|r| r.names == ["socket"]
            && r.args[0].op == "SCMP_CMP_NE"
            && r.args[0].value == libc::AF_UNIX as u64));
    }

    #[test]
    fn personality_allows_exactly_per_linux_and_the_query() {
        let set = PolicySet::embedded().unwrap();
        let p = profile(set.get(Mode::WorkspaceWrite).unwrap(), UNIX).unwrap();
        for allowed in [0u64, 0xffff_ffff, 0x1_ffff_ffff] {
            assert!(!personality_refused(&p, allowed), "{allowed:#x} refused");
        }
        for refused in [
            0x0040000u64, // ADDR_NO_RANDOMIZE
            0x0400000,    // READ_IMPLIES_EXEC
            0x8000_0000 | 0x0040000,
            0x8000_0000,
            0x7fff_ffff,
            0xffff_fffe,
            1,
            8,
        ] {
            assert!(personality_refused(&p, refused), "{refused:#x} allowed");
        }
        // On docker full-access too: Docker's default profile refuses it.
        let fa = profile(set.get(Mode::FullAccess).unwrap(), None).unwrap();
        assert!(personality_refused(&fa, 0x0040000));
        assert!(!personality_refused(&fa, 0));
    }

    /// Whether the profile refuses `name` with these argument values (rules ORed, conditions
    /// ANDed, compared on 64 bits as libseccomp does).
    fn refused_with(p: &Profile, name: &str, args: [u64; 6]) -> Option<i64> {
        p.syscalls
            .iter()
            .filter(|r| r.names.iter().any(|n| n == name))
            .find(|r| {
                r.args.iter().all(|a| {
                    let v = args[a.index as usize];
                    match a.op.as_str() {
                        "SCMP_CMP_EQ" => v == a.value,
                        "SCMP_CMP_NE" => v != a.value,
                        "SCMP_CMP_MASKED_EQ" => v & a.value == a.value_two,
                        other => panic!("op {other}"),
                    }
                })
            })
            .and_then(|r| r.errno_ret)
    }

    #[test]
    fn the_host_boundary_guards_are_in_the_confined_profiles() {
        let set = PolicySet::embedded().unwrap();
        for mode in [Mode::ReadOnly, Mode::WorkspaceWrite] {
            let p = profile(set.get(mode).unwrap(), UNIX).unwrap();
            assert_eq!(
                refused_with(&p, "chmod", [0, 0o4755, 0, 0, 0, 0]),
                Some(EPERM)
            );
            assert_eq!(
                refused_with(&p, "fchmodat", [3, 0, 0o2755, 0, 0, 0]),
                Some(EPERM)
            );
            assert_eq!(refused_with(&p, "chmod", [0, 0o755, 0, 0, 0, 0]), None);
            let creat = (libc::O_CREAT | libc::O_WRONLY) as u64;
            assert_eq!(
                refused_with(&p, "openat", [3, 0, creat, 0o4755, 0, 0]),
                Some(EPERM)
            );
            assert_eq!(refused_with(&p, "openat", [3, 0, creat, 0o644, 0, 0]), None);
            assert_eq!(refused_with(&p, "openat2", [0; 6]), Some(ENOSYS));
            let chr = (libc::S_IFCHR | 0o600) as u64;
            assert_eq!(
                refused_with(&p, "mknodat", [3, 0, chr, 0, 0, 0]),
                Some(EPERM)
            );
            assert_eq!(
                refused_with(&p, "ioctl", [0, 0x5412, 0, 0, 0, 0]),
                Some(EPERM)
            );
            // Garbage in the upper half of a 32-bit argument does not slip past.
            assert_eq!(
                refused_with(&p, "ioctl", [0, 0x5412 | (1 << 40), 0, 0, 0, 0]),
                Some(EPERM)
            );
            assert_eq!(
                refused_with(&p, "kill", [1 | (1 << 35), 9, 0, 0, 0, 0]),
                Some(EPERM)
            );
            assert_eq!(refused_with(&p, "kill", [2, 9, 0, 0, 0, 0]), None);
            assert_eq!(
                refused_with(&p, "prlimit64", [1, 7, 0x7000, 0, 0, 0]),
                Some(EPERM)
            );
            assert_eq!(refused_with(&p, "prlimit64", [0, 7, 0x7000, 0, 0, 0]), None);
            // The init's scheduling (issue 25), and pidfd_send_signal (a pidfd of /proc/1).
            assert_eq!(
                refused_with(&p, "setpriority", [0, 1, 19, 0, 0, 0]),
                Some(EPERM)
            );
            assert_eq!(
                refused_with(&p, "setpriority", [1, 1 | (1 << 40), 19, 0, 0, 0]),
                Some(EPERM)
            );
            assert_eq!(
                refused_with(&p, "setpriority", [2, 0, 19, 0, 0, 0]),
                Some(EPERM)
            );
            assert_eq!(refused_with(&p, "setpriority", [0, 0, 19, 0, 0, 0]), None);
            assert_eq!(
                refused_with(&p, "sched_setscheduler", [1, 5, 0, 0, 0, 0]),
                Some(EPERM)
            );
            assert_eq!(
                refused_with(&p, "ioprio_set", [1, 1, 3 << 13, 0, 0, 0]),
                Some(EPERM)
            );
            assert_eq!(
                refused_with(&p, "pidfd_send_signal", [3, 15, 0, 0, 0, 0]),
                Some(ENOSYS)
            );
            assert!(refuses(&p, "process_madvise", EPERM));
        }
        let fa = profile(set.get(Mode::FullAccess).unwrap(), None).unwrap();
        assert_eq!(refused_with(&fa, "chmod", [0, 0o4755, 0, 0, 0, 0]), None);
    }

    #[test]
    fn each_rule_has_at_most_one_condition_per_argument() {
        let set = PolicySet::embedded().unwrap();
        for mode in Mode::ALL {
            let p = profile(set.get(mode).unwrap(), UNIX).unwrap();
            for r in &p.syscalls {
                let mut idx: Vec<u32> = r.args.iter().map(|a| a.index).collect();
                idx.dedup();
                assert_eq!(idx.len(), r.args.len(), "{r:?}");
            }
        }
    }
}
