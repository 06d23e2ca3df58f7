//! The seccomp filters of a plan, built as pure data (unit-tested without touching the process)
//! and installed in one small step just before `execve`.
//!
//! Three programs: the deny list and argument rules (EPERM, arch-checked by seccompiler: any
//! other architecture is killed), `clone3` answering ENOSYS (its flags live in memory seccomp
//! cannot read, so libc falls back to `clone`, whose flags we can check), and on x86_64 a refusal
//! of every x32-ABI syscall number, which would otherwise bypass number-based rules.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::step::{StepFailure, restriction};
use crate::plan::SeccompPlan;

/// The namespace flags refused in `clone(2)`.
const NS_CLONE_FLAGS: [u64; 7] = [
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
];

fn arch() -> Result<TargetArch, String> {
    TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|e| format!("unsupported architecture: {e:?}"))
}

fn cond(
    arg: u8,
    op: SeccompCmpOp,
    value: u64,
    len: SeccompCmpArgLen,
) -> Result<SeccompCondition, String> {
    SeccompCondition::new(arg, len, op, value).map_err(|e| format!("{e}"))
}

fn rule(conds: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(conds).map_err(|e| format!("{e}"))
}

/// Builds the BPF programs for `plan`.
pub fn build(plan: &SeccompPlan) -> Result<Vec<BpfProgram>, String> {
    let arch = arch()?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (_, nr) in &plan.deny {
        rules.insert(*nr, Vec::new());
    }
    if plan.deny_inet_sockets {
        let not_unix = rule(vec![cond(
            0,
            SeccompCmpOp::Ne,
            libc::AF_UNIX as u64,
            SeccompCmpArgLen::Dword,
        )?])?;
        rules.insert(libc::SYS_socket, vec![not_unix.clone()]);
        rules.insert(libc::SYS_socketpair, vec![not_unix]);
    }
    if plan.restrict_personality && !rules.contains_key(&libc::SYS_personality) {
        // Allowed: 0 (PER_LINUX) and 0xffffffff (query).
        let change = rule(vec![
            cond(0, SeccompCmpOp::Ne, 0, SeccompCmpArgLen::Dword)?,
            cond(0, SeccompCmpOp::Ne, 0xffff_ffff, SeccompCmpArgLen::Dword)?,
        ])?;
        rules.insert(libc::SYS_personality, vec![change]);
    }
    if plan.deny_namespace_clone {
        let per_flag = NS_CLONE_FLAGS
            .iter()
            .map(|f| {
                rule(vec![cond(
                    0,
                    SeccompCmpOp::MaskedEq(*f),
                    *f,
                    SeccompCmpArgLen::Qword,
                )?])
            })
            .collect::<Result<Vec<_>, _>>()?;
        rules.insert(libc::SYS_clone, per_flag);
    }
    let eperm = SeccompAction::Errno(libc::EPERM as u32);
    let main =
        SeccompFilter::new(rules, SeccompAction::Allow, eperm, arch).map_err(|e| format!("{e}"))?;
    let mut programs: Vec<BpfProgram> = vec![
        main.try_into()
            .map_err(|e: seccompiler::BackendError| format!("{e}"))?,
    ];
    if plan.deny_namespace_clone {
        let clone3 = SeccompFilter::new(
            BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
            SeccompAction::Allow,
            SeccompAction::Errno(libc::ENOSYS as u32),
            arch,
        )
        .map_err(|e| format!("{e}"))?;
        programs.push(
            clone3
                .try_into()
                .map_err(|e: seccompiler::BackendError| format!("{e}"))?,
        );
    }
    #[cfg(target_arch = "x86_64")]
    programs.push(x32_refusal());
    Ok(programs)
}

/// Refuses every syscall number with the x32 bit set (`__X32_SYSCALL_BIT`), with EPERM.
#[cfg(target_arch = "x86_64")]
fn x32_refusal() -> BpfProgram {
    use seccompiler::sock_filter;
    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    const RET_ALLOW: u32 = 0x7fff_0000;
    const RET_ERRNO: u32 = 0x0005_0000;
    let ins = |code: u16, jt: u8, jf: u8, k: u32| sock_filter { code, jt, jf, k };
    let (ld_w_abs, jeq_k, jge_k, ret_k) = (0x20u16, 0x15u16, 0x35u16, 0x06u16);
    vec![
        ins(ld_w_abs, 0, 0, 4),              // A = seccomp_data.arch
        ins(jeq_k, 1, 0, AUDIT_ARCH_X86_64), // x86_64? go on : allow (the main filter kills it)
        ins(ret_k, 0, 0, RET_ALLOW),
        ins(ld_w_abs, 0, 0, 0),            // A = seccomp_data.nr
        ins(jge_k, 0, 1, X32_SYSCALL_BIT), // nr >= x32 bit? refuse : allow
        ins(ret_k, 0, 0, RET_ERRNO | libc::EPERM as u32),
        ins(ret_k, 0, 0, RET_ALLOW),
    ]
}

/// Installs `programs` on the calling thread (no_new_privs must be set).
pub fn install(programs: &[BpfProgram]) -> Result<(), StepFailure> {
    for p in programs {
        seccompiler::apply_filter(p).map_err(|e| {
            StepFailure::new(
                restriction::SECCOMP,
                "seccomp(SECCOMP_SET_MODE_FILTER)",
                format!("failed to install the filter: {e}"),
            )
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(inet: bool) -> SeccompPlan {
        SeccompPlan {
            deny: vec![
                ("ptrace".into(), libc::SYS_ptrace),
                ("io_uring_setup".into(), libc::SYS_io_uring_setup),
            ],
            deny_inet_sockets: inet,
            restrict_personality: true,
            deny_namespace_clone: true,
        }
    }

    #[test]
    fn builds_the_three_programs() {
        let progs = build(&plan(true)).unwrap();
        assert_eq!(
            progs.len(),
            if cfg!(target_arch = "x86_64") { 3 } else { 2 }
        );
        assert!(progs.iter().all(|p| !p.is_empty() && p.len() < 4096));
        // Network rules make the main program longer.
        let without = build(&plan(false)).unwrap();
        assert!(progs[0].len() > without[0].len());
    }
}
