//! The seccomp filters of a plan, built as pure data (unit-tested without touching the process)
//! and installed in one small step just before `execve`.
//!
//! One program, installed with one `seccomp(2)` call: a short hand-written prefix — on x86_64 every
//! x32-ABI syscall number refused (they would otherwise bypass number-based rules), and `clone3`
//! answering ENOSYS (its flags live in memory seccomp cannot read, so libc falls back to `clone`,
//! whose flags the rules check) — followed by seccompiler's program for the deny list and the
//! argument rules (EPERM; any other architecture is killed).
//!
//! In the confined modes a second, smaller program comes first: the allow-list
//! ([`crate::policy::allow_list`]), a sorted chain of number ranges answering ENOSYS for any
//! syscall not listed. The kernel runs every installed program and keeps the most recently
//! installed one's answer among equally strong ones, so the deny list's EPERM (installed second)
//! still wins over the allow-list's ENOSYS.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::step::{StepFailure, restriction};
use crate::plan::SeccompPlan;
use crate::policy::guards::{self, Op, Width};
use crate::policy::syscalls;

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

/// Why a filter program could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FilterError {
    /// Not an architecture seccompiler knows.
    #[error("unsupported architecture: {0}")]
    Arch(String),
    /// The policy names a syscall ralph's table does not.
    #[error("unknown syscall `{0}` in a guard")]
    UnknownSyscall(String),
    /// A guard answers with something else than EPERM (or a plain ENOSYS).
    #[error("guard on `{0}`: only EPERM or a plain ENOSYS")]
    GuardErrno(String),
    /// seccompiler refused a condition, a rule or the filter.
    #[error("{0}")]
    Seccompiler(#[from] seccompiler::Error),
    /// seccompiler could not compile the filter.
    #[error("{0}")]
    Backend(#[from] seccompiler::BackendError),
    /// The program is over the kernel's limit.
    #[error("the filter has {0} instructions, over the kernel's limit of 4096")]
    TooLong(usize),
    /// The allow-list exists for x86_64 only.
    #[error("the syscall allow-list is defined for x86_64 only")]
    AllowListArch,
    /// The allow-list's ranges do not fit one program's jumps.
    #[error("the allow-list has too many ranges ({0}) for one program")]
    TooManyRanges(usize),
    /// A syscall number outside 32 bits.
    #[error("syscall number {0} out of range")]
    Number(i64),
}

fn arch() -> Result<TargetArch, FilterError> {
    TargetArch::try_from(std::env::consts::ARCH).map_err(|e| FilterError::Arch(format!("{e:?}")))
}

fn cond(
    arg: u8,
    op: SeccompCmpOp,
    value: u64,
    len: SeccompCmpArgLen,
) -> Result<SeccompCondition, FilterError> {
    Ok(SeccompCondition::new(arg, len, op, value)?)
}

fn rule(conds: Vec<SeccompCondition>) -> Result<SeccompRule, FilterError> {
    Ok(SeccompRule::new(conds)?)
}

/// Builds the filter for `plan`: one BPF program (a short prefix for x32 and clone3, then
/// seccompiler's arch-checked rule program).
pub fn build(plan: &SeccompPlan) -> Result<Vec<BpfProgram>, FilterError> {
    let arch = arch()?;
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (_, nr) in &plan.deny {
        rules.insert(*nr, Vec::new());
    }
    if let Some(families) = &plan.socket_families {
        // Refused when the family is none of the allowed ones (one rule, its conditions ANDed;
        // no family at all allowed: refused always).
        let not_allowed = rule(
            families
                .iter()
                .map(|f| {
                    cond(
                        0,
                        SeccompCmpOp::Ne,
                        u64::from(f.number().unsigned_abs()),
                        SeccompCmpArgLen::Dword,
                    )
                })
                .collect::<Result<Vec<_>, _>>()?,
        );
        let refused = if families.is_empty() {
            Vec::new()
        } else {
            vec![not_allowed?]
        };
        rules.insert(libc::SYS_socket, refused.clone());
        rules.insert(libc::SYS_socketpair, refused);
    }
    if plan.allow.is_some() && plan.socket_families.is_none() {
        // As Docker's default profile: no AF_VSOCK socket (the host's hypervisor channel).
        rules.insert(
            libc::SYS_socket,
            vec![rule(vec![cond(
                0,
                SeccompCmpOp::Eq,
                libc::AF_VSOCK as u64,
                SeccompCmpArgLen::Dword,
            )?])?],
        );
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
    let mut enosys = Vec::new();
    if plan.deny_namespace_clone {
        enosys.push(libc::SYS_clone3);
    }
    for g in guards::guards(plan.guards) {
        let nr = syscalls::number(g.syscall)
            .ok_or_else(|| FilterError::UnknownSyscall(g.syscall.to_string()))?;
        if g.errno == libc::ENOSYS && g.conds.is_empty() {
            enosys.push(nr);
            continue;
        }
        if g.errno != libc::EPERM {
            return Err(FilterError::GuardErrno(g.syscall.to_string()));
        }
        let conds = g
            .conds
            .iter()
            .map(|c| {
                let len = match c.width {
                    Width::Dword => SeccompCmpArgLen::Dword,
                    Width::Qword => SeccompCmpArgLen::Qword,
                };
                let (op, value) = match c.op {
                    Op::Eq(v) => (SeccompCmpOp::Eq, v),
                    Op::Ne(v) => (SeccompCmpOp::Ne, v),
                    Op::MaskedEq { mask, value } => (SeccompCmpOp::MaskedEq(mask), value),
                };
                cond(c.arg, op, value, len)
            })
            .collect::<Result<Vec<_>, _>>()?;
        match rules.get_mut(&nr) {
            // Refused unconditionally already.
            Some(existing) if existing.is_empty() => {}
            Some(existing) => existing.push(rule(conds)?),
            None => {
                rules.insert(nr, vec![rule(conds)?]);
            }
        }
    }
    let eperm = SeccompAction::Errno(libc::EPERM as u32);
    let main = SeccompFilter::new(rules, SeccompAction::Allow, eperm, arch)?;
    let main: BpfProgram = main.try_into()?;
    let mut program = prefix(&enosys);
    program.extend(main);
    if program.len() > 4096 {
        return Err(FilterError::TooLong(program.len()));
    }
    match &plan.allow {
        // Installed first, so that the deny program's answers win (see the module comment).
        Some(allowed) => Ok(vec![allow_program(allowed)?, program]),
        None => Ok(vec![program]),
    }
}

/// The docker backend's second layer, installed by the container's init under the engine's
/// profile: every syscall of ralph's table passes (the engine's profile answers for those: the
/// allow-list by name, the deny list, the guards), any other number — a syscall newer than the
/// table, which the profile cannot name — answers ENOSYS.
pub fn newer_syscalls_program() -> Result<BpfProgram, FilterError> {
    let known: Vec<i64> = crate::policy::syscall_table::X86_64
        .iter()
        .map(|(_, nr)| *nr)
        .collect();
    allow_program(&known)
}

/// The allow-list program: on x86_64, ALLOW for the listed numbers (a chain of ranges, in
/// ascending order), ENOSYS for anything else — an x32 number, a foreign architecture and a
/// syscall a newer kernel adds included.
fn allow_program(allowed: &[i64]) -> Result<BpfProgram, FilterError> {
    if !cfg!(target_arch = "x86_64") {
        return Err(FilterError::AllowListArch);
    }
    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    let list: Vec<(String, i64)> = allowed.iter().map(|nr| (String::new(), *nr)).collect();
    let ranges = crate::policy::allow_list::ranges(&list);
    let n = ranges.len();
    // Layout: 3 head instructions, 2 per range, then RET ENOSYS, then RET ALLOW.
    let enosys_at = 3 + 2 * n;
    let allow_at = enosys_at + 1;
    let off = |from: usize, to: usize| {
        u8::try_from(to - from - 1).map_err(|_| FilterError::TooManyRanges(n))
    };
    let mut prog = vec![
        ins(LD_W_ABS, 0, 0, OFFSET_ARCH),
        ins(JMP_JEQ_K, 0, off(1, enosys_at)?, AUDIT_ARCH_X86_64),
        ins(LD_W_ABS, 0, 0, OFFSET_NR),
    ];
    for (i, (lo, hi)) in ranges.iter().enumerate() {
        let at = 3 + 2 * i;
        let lo = u32::try_from(*lo).map_err(|_| FilterError::Number(*lo))?;
        let hi = u32::try_from(*hi).map_err(|_| FilterError::Number(*hi))?;
        // Above this range: on to the next one.
        prog.push(ins(JMP_JGT_K, 1, 0, hi));
        // In it: allowed; below it (and above the previous one): refused.
        prog.push(ins(
            JMP_JGE_K,
            off(at + 1, allow_at)?,
            off(at + 1, enosys_at)?,
            lo,
        ));
    }
    prog.push(ins(RET_K, 0, 0, RET_ERRNO | libc::ENOSYS as u32));
    prog.push(ins(RET_K, 0, 0, RET_ALLOW));
    Ok(prog)
}

// Classic BPF opcodes and seccomp return values used by the prefix.
const LD_W_ABS: u16 = 0x20;
const JMP_JEQ_K: u16 = 0x15;
const JMP_JGE_K: u16 = 0x35;
const JMP_JGT_K: u16 = 0x25;
const RET_K: u16 = 0x06;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const OFFSET_NR: u32 = 0;
const OFFSET_ARCH: u32 = 4;

fn ins(code: u16, jt: u8, jf: u8, k: u32) -> seccompiler::sock_filter {
    seccompiler::sock_filter { code, jt, jf, k }
}

/// Checks that run before the rule program: every x32-ABI syscall number refused (x86_64: they
/// carry the native arch value and would bypass number-based rules), and the `enosys` syscalls
/// (`clone3`, `openat2`: arguments in memory seccomp cannot read, so libc falls back to the
/// older call whose arguments the rules check) answering ENOSYS. A foreign architecture skips
/// straight to the rule program, which kills it.
fn prefix(enosys: &[i64]) -> BpfProgram {
    let mut tail: BpfProgram = Vec::new();
    for nr in enosys {
        tail.push(ins(LD_W_ABS, 0, 0, OFFSET_NR));
        tail.push(ins(JMP_JEQ_K, 0, 1, *nr as u32));
        tail.push(ins(RET_K, 0, 0, RET_ERRNO | libc::ENOSYS as u32));
    }
    #[cfg(target_arch = "x86_64")]
    {
        const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
        const X32_SYSCALL_BIT: u32 = 0x4000_0000;
        let after = u8::try_from(3 + tail.len()).unwrap_or(u8::MAX);
        let mut head = vec![
            ins(LD_W_ABS, 0, 0, OFFSET_ARCH),
            ins(JMP_JEQ_K, 0, after, AUDIT_ARCH_X86_64),
            ins(LD_W_ABS, 0, 0, OFFSET_NR),
            ins(JMP_JGE_K, 0, 1, X32_SYSCALL_BIT),
            ins(RET_K, 0, 0, RET_ERRNO | libc::EPERM as u32),
        ];
        head.extend(tail);
        head
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        tail
    }
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
    use crate::policy::network::SocketFamily;

    /// seccomp_data as the kernel lays it out.
    struct Data {
        nr: i64,
        arch: u32,
        args: [u64; 6],
    }

    /// A classic-BPF interpreter for the instructions seccompiler and the prefix emit.
    fn run(prog: &BpfProgram, d: &Data) -> u32 {
        let word = |off: u32| -> u32 {
            match off {
                0 => d.nr as u32,
                4 => d.arch,
                8 => 0,
                12 => 0,
                o if (16..64).contains(&o) => {
                    let arg = d.args[((o - 16) / 8) as usize];
                    if (o - 16) % 8 == 0 {
                        arg as u32
                    } else {
                        (arg >> 32) as u32
                    }
                }
                o => panic!("load at {o}"),
            }
        };
        let (mut pc, mut a) = (0usize, 0u32);
        loop {
            let i = &prog[pc];
            pc += 1;
            match i.code {
                0x20 => a = word(i.k),
                0x54 => a &= i.k,
                0x05 => pc += i.k as usize,
                0x15 => pc += if a == i.k { i.jt } else { i.jf } as usize,
                0x25 => pc += if a > i.k { i.jt } else { i.jf } as usize,
                0x35 => pc += if a >= i.k { i.jt } else { i.jf } as usize,
                0x45 => pc += if a & i.k != 0 { i.jt } else { i.jf } as usize,
                0x06 => return i.k,
                c => panic!("opcode {c:#x} not modelled"),
            }
        }
    }

    fn plan(inet: bool) -> SeccompPlan {
        with_families(inet.then(|| vec![SocketFamily::Unix]))
    }

    fn with_families(socket_families: Option<Vec<SocketFamily>>) -> SeccompPlan {
        SeccompPlan {
            allow: None,
            deny: vec![
                ("ptrace".into(), libc::SYS_ptrace),
                ("io_uring_setup".into(), libc::SYS_io_uring_setup),
            ],
            socket_families,
            restrict_personality: true,
            deny_namespace_clone: true,
            guards: guards::Switches {
                deny_setid: true,
                deny_tty_injection: true,
                protect_init: true,
            },
        }
    }

    const X86_64: u32 = 0xc000_003e;
    const EPERM: u32 = RET_ERRNO | libc::EPERM as u32;

    fn verdict(p: &SeccompPlan, nr: i64, args: [u64; 6]) -> u32 {
        let prog = &build(p).unwrap()[0];
        run(
            prog,
            &Data {
                nr,
                arch: X86_64,
                args,
            },
        )
    }

    #[test]
    fn one_program_within_the_kernel_limit() {
        let progs = build(&plan(true)).unwrap();
        assert_eq!(progs.len(), 1);
        assert!(progs[0].len() < 4096);
    }

    #[test]
    fn denies_the_list_and_allows_the_rest() {
        let p = plan(true);
        assert_eq!(verdict(&p, libc::SYS_ptrace, [0; 6]), EPERM);
        assert_eq!(verdict(&p, libc::SYS_io_uring_setup, [0; 6]), EPERM);
        assert_eq!(verdict(&p, libc::SYS_read, [0; 6]), RET_ALLOW);
        assert_eq!(verdict(&p, libc::SYS_openat, [0; 6]), RET_ALLOW);
    }

    #[test]
    fn only_unix_sockets_without_network() {
        let p = plan(true);
        assert_eq!(
            verdict(&p, libc::SYS_socket, [libc::AF_INET as u64, 1, 0, 0, 0, 0]),
            EPERM
        );
        assert_eq!(
            verdict(&p, libc::SYS_socket, [libc::AF_INET6 as u64, 2, 0, 0, 0, 0]),
            EPERM
        );
        assert_eq!(
            verdict(
                &p,
                libc::SYS_socket,
                [libc::AF_NETLINK as u64, 3, 0, 0, 0, 0]
            ),
            EPERM
        );
        assert_eq!(
            verdict(&p, libc::SYS_socket, [libc::AF_UNIX as u64, 1, 0, 0, 0, 0]),
            RET_ALLOW
        );
        assert_eq!(
            verdict(
                &p,
                libc::SYS_socketpair,
                [libc::AF_UNIX as u64, 1, 0, 0, 0, 0]
            ),
            RET_ALLOW
        );
        assert_eq!(
            verdict(
                &plan(false),
                libc::SYS_socket,
                [libc::AF_INET as u64, 1, 0, 0, 0, 0]
            ),
            RET_ALLOW
        );
    }

    #[test]
    fn gateway_allows_ip_sockets_and_nothing_more() {
        let p = with_families(
            crate::policy::network::socket_families(crate::mode::Network::Gateway)
                .map(<[SocketFamily]>::to_vec),
        );
        let socket = |family: i32, ty: i32| {
            verdict(&p, libc::SYS_socket, [family as u64, ty as u64, 0, 0, 0, 0])
        };
        assert_eq!(socket(libc::AF_INET, libc::SOCK_STREAM), RET_ALLOW);
        assert_eq!(socket(libc::AF_INET, libc::SOCK_DGRAM), RET_ALLOW);
        assert_eq!(socket(libc::AF_INET6, libc::SOCK_STREAM), RET_ALLOW);
        assert_eq!(socket(libc::AF_UNIX, libc::SOCK_STREAM), RET_ALLOW);
        for family in [
            libc::AF_NETLINK,
            libc::AF_PACKET,
            libc::AF_VSOCK,
            libc::AF_BLUETOOTH,
            libc::AF_ALG,
        ] {
            assert_eq!(socket(family, libc::SOCK_STREAM), EPERM, "family {family}");
        }
        // Only the low 32 bits are the family: high garbage does not turn AF_NETLINK into
        // AF_INET, nor AF_INET into something refused.
        assert_eq!(
            verdict(
                &p,
                libc::SYS_socket,
                [(1 << 32) | libc::AF_INET as u64, 1, 0, 0, 0, 0]
            ),
            RET_ALLOW
        );
        assert_eq!(
            verdict(
                &p,
                libc::SYS_socketpair,
                [libc::AF_NETLINK as u64, 1, 0, 0, 0, 0]
            ),
            EPERM
        );
        // The rest of the filter is unchanged.
        assert_eq!(verdict(&p, libc::SYS_ptrace, [0; 6]), EPERM);
        // No family at all: every socket refused.
        let none = with_families(Some(Vec::new()));
        assert_eq!(
            verdict(
                &none,
                libc::SYS_socket,
                [libc::AF_UNIX as u64, 1, 0, 0, 0, 0]
            ),
            EPERM
        );
    }

    #[test]
    fn namespace_clones_personality_clone3_and_x32() {
        let p = plan(true);
        assert_eq!(
            verdict(&p, libc::SYS_clone, [libc::SIGCHLD as u64, 0, 0, 0, 0, 0]),
            RET_ALLOW
        );
        assert_eq!(
            verdict(
                &p,
                libc::SYS_clone,
                [(libc::CLONE_NEWUSER | libc::SIGCHLD) as u64, 0, 0, 0, 0, 0]
            ),
            EPERM
        );
        assert_eq!(
            verdict(
                &p,
                libc::SYS_clone,
                [libc::CLONE_NEWNET as u64, 0, 0, 0, 0, 0]
            ),
            EPERM
        );
        assert_eq!(
            verdict(&p, libc::SYS_clone3, [0; 6]),
            RET_ERRNO | libc::ENOSYS as u32
        );
        assert_eq!(
            verdict(&p, libc::SYS_personality, [0, 0, 0, 0, 0, 0]),
            RET_ALLOW
        );
        assert_eq!(
            verdict(&p, libc::SYS_personality, [0xffff_ffff, 0, 0, 0, 0, 0]),
            RET_ALLOW
        );
        assert_eq!(
            verdict(&p, libc::SYS_personality, [0x0040000, 0, 0, 0, 0, 0]),
            EPERM
        );
        // x32: read(2) with the x32 bit set.
        assert_eq!(verdict(&p, 0x4000_0000, [0; 6]), EPERM);
    }

    #[test]
    fn setid_bits_device_nodes_tty_injection_and_the_init_are_guarded() {
        let p = plan(true);
        let eperm = |nr, args| verdict(&p, nr, args) == EPERM;
        // chmod family: any set-id bit refused, plain modes allowed.
        assert!(eperm(libc::SYS_chmod, [0, 0o4755, 0, 0, 0, 0]));
        assert!(eperm(libc::SYS_fchmod, [3, 0o2755, 0, 0, 0, 0]));
        assert!(eperm(libc::SYS_fchmodat, [3, 0, 0o6755, 0, 0, 0]));
        assert!(eperm(libc::SYS_fchmodat2, [3, 0, 0o4000, 0, 0, 0]));
        assert!(!eperm(libc::SYS_chmod, [0, 0o755, 0, 0, 0, 0]));
        assert!(!eperm(libc::SYS_fchmodat, [3, 0, 0o1777, 0, 0, 0]));
        // A mode's high bits beyond 32 are not part of mode_t.
        assert!(!eperm(libc::SYS_chmod, [0, 0o4755 << 32, 0, 0, 0, 0]));
        // Creation with a set-id mode.
        let creat = (libc::O_CREAT | libc::O_WRONLY) as u64;
        assert!(eperm(libc::SYS_openat, [3, 0, creat, 0o4755, 0, 0]));
        assert!(eperm(libc::SYS_open, [0, creat, 0o2755, 0, 0, 0]));
        assert!(eperm(libc::SYS_creat, [0, 0o4755, 0, 0, 0, 0]));
        assert!(!eperm(libc::SYS_openat, [3, 0, creat, 0o644, 0, 0]));
        assert_eq!(
            verdict(&p, libc::SYS_openat2, [3, 0, 0, 24, 0, 0]),
            RET_ERRNO | libc::ENOSYS as u32
        );
        // Device nodes; FIFOs and sockets stay possible.
        assert!(eperm(
            libc::SYS_mknodat,
            [3, 0, (libc::S_IFCHR | 0o600) as u64, 0x0103, 0, 0]
        ));
        assert!(eperm(
            libc::SYS_mknod,
            [0, (libc::S_IFBLK | 0o600) as u64, 0x0800, 0, 0, 0]
        ));
        assert!(!eperm(
            libc::SYS_mknodat,
            [3, 0, (libc::S_IFIFO | 0o600) as u64, 0, 0, 0]
        ));
        assert!(!eperm(
            libc::SYS_mknodat,
            [3, 0, (libc::S_IFSOCK | 0o600) as u64, 0, 0, 0]
        ));
        // Terminal injection.
        assert!(eperm(libc::SYS_ioctl, [0, 0x5412, 0, 0, 0, 0]));
        assert!(eperm(libc::SYS_ioctl, [1, 0x541c, 0, 0, 0, 0]));
        assert!(!eperm(libc::SYS_ioctl, [1, libc::TIOCGWINSZ, 0, 0, 0, 0]));
        // The init: no limits set on another process, no signal to pid 1.
        assert!(eperm(
            libc::SYS_prlimit64,
            [1, libc::RLIMIT_NOFILE as u64, 0x7000, 0, 0, 0]
        ));
        assert!(!eperm(
            libc::SYS_prlimit64,
            [0, libc::RLIMIT_NOFILE as u64, 0x7000, 0, 0, 0]
        ));
        assert!(!eperm(
            libc::SYS_prlimit64,
            [1, libc::RLIMIT_NOFILE as u64, 0, 0x7000, 0, 0]
        ));
        assert!(eperm(libc::SYS_kill, [1, 9, 0, 0, 0, 0]));
        assert!(!eperm(libc::SYS_kill, [2, 9, 0, 0, 0, 0]));
        assert!(eperm(libc::SYS_pidfd_open, [1, 0, 0, 0, 0, 0]));
        // Its scheduling (issue 25): nice, policy, I/O priority of pid 1, group 1, a user.
        assert!(eperm(libc::SYS_setpriority, [0, 1, 19, 0, 0, 0]));
        assert!(eperm(libc::SYS_setpriority, [1, 1, 19, 0, 0, 0]));
        assert!(eperm(libc::SYS_setpriority, [2, 0, 19, 0, 0, 0]));
        assert!(!eperm(libc::SYS_setpriority, [0, 0, 19, 0, 0, 0]));
        assert!(eperm(libc::SYS_sched_setscheduler, [1, 5, 0, 0, 0, 0]));
        assert!(!eperm(libc::SYS_sched_setscheduler, [0, 5, 0, 0, 0, 0]));
        assert!(eperm(libc::SYS_sched_setattr, [1, 0, 0, 0, 0, 0]));
        assert!(eperm(libc::SYS_ioprio_set, [3, 0, 3 << 13, 0, 0, 0]));
        // A pidfd of /proc/1 cannot be told from another: pidfd_send_signal answers ENOSYS.
        assert_eq!(
            verdict(&p, libc::SYS_pidfd_send_signal, [3, 15, 0, 0, 0, 0]),
            RET_ERRNO | libc::ENOSYS as u32
        );
    }

    #[test]
    fn a_foreign_architecture_is_killed() {
        let prog = &build(&plan(true)).unwrap()[0];
        const AUDIT_ARCH_I386: u32 = 0x4000_0003;
        let v = run(
            prog,
            &Data {
                nr: 0,
                arch: AUDIT_ARCH_I386,
                args: [0; 6],
            },
        );
        assert!(v == 0 || v == 0x8000_0000, "expected a kill, got {v:#x}");
    }

    /// What the kernel answers with all `progs` installed in order: every program runs, the
    /// newest first; the strongest action wins, and among equals the first seen (the newest).
    fn combined(progs: &[BpfProgram], nr: i64, args: [u64; 6]) -> u32 {
        let d = Data {
            nr,
            arch: X86_64,
            args,
        };
        let rank = |v: u32| match v & 0xffff_0000 {
            0x7fff_0000 => 9, // ALLOW: weakest
            0x0005_0000 => 5, // ERRNO
            _ => 0,           // KILL and friends
        };
        let mut out = RET_ALLOW;
        for p in progs.iter().rev() {
            let v = run(p, &d);
            if rank(v) < rank(out) {
                out = v;
            }
        }
        out
    }

    #[test]
    fn the_allow_list_answers_enosys_and_the_deny_list_still_eperm() {
        let list = crate::policy::allow_list::embedded().unwrap();
        let mut p = plan(false);
        p.allow = Some(list.iter().map(|(_, nr)| *nr).collect());
        let progs = build(&p).unwrap();
        assert_eq!(progs.len(), 2);
        let enosys = RET_ERRNO | libc::ENOSYS as u32;
        for (_, nr) in list {
            let v = combined(&progs, *nr, [0; 6]);
            let denied = p.deny.iter().any(|(_, d)| d == nr);
            assert!(
                v == RET_ALLOW || denied || v == EPERM || v == enosys,
                "{nr}: {v:#x}"
            );
        }
        assert_eq!(combined(&progs, libc::SYS_read, [0; 6]), RET_ALLOW);
        assert_eq!(combined(&progs, libc::SYS_execve, [0; 6]), RET_ALLOW);
        for nr in [
            libc::SYS_move_pages,
            libc::SYS_mbind,
            libc::SYS_set_mempolicy,
            libc::SYS_kcmp,
            libc::SYS_get_mempolicy,
            libc::SYS_unshare,
            463,
            1000,
            0x3fff_ffff,
        ] {
            assert_eq!(combined(&progs, nr, [0; 6]), enosys, "{nr}");
        }
        // The deny list keeps its EPERM; the guards keep theirs.
        assert_eq!(combined(&progs, libc::SYS_ptrace, [0; 6]), EPERM);
        assert_eq!(combined(&progs, libc::SYS_io_uring_setup, [0; 6]), EPERM);
        assert_eq!(
            combined(&progs, libc::SYS_chmod, [0, 0o4755, 0, 0, 0, 0]),
            EPERM
        );
        assert_eq!(
            combined(&progs, libc::SYS_chmod, [0, 0o755, 0, 0, 0, 0]),
            RET_ALLOW
        );
        assert_eq!(
            combined(
                &progs,
                libc::SYS_clone,
                [libc::CLONE_NEWUSER as u64, 0, 0, 0, 0, 0]
            ),
            EPERM
        );
        assert_eq!(combined(&progs, libc::SYS_clone3, [0; 6]), enosys);
        assert_eq!(
            combined(&progs, libc::SYS_socket, [2, 1, 0, 0, 0, 0]),
            RET_ALLOW
        );
        assert_eq!(
            combined(
                &progs,
                libc::SYS_socket,
                [libc::AF_VSOCK as u64, 1, 0, 0, 0, 0]
            ),
            EPERM
        );
        // x32 numbers: the deny program's EPERM.
        assert_eq!(combined(&progs, 0x4000_0000, [0; 6]), EPERM);
        // The docker init's program: everything ralph's table knows passes, newer numbers do not.
        let newer = newer_syscalls_program().unwrap();
        let d = |nr| Data {
            nr,
            arch: X86_64,
            args: [0; 6],
        };
        assert_eq!(run(&newer, &d(libc::SYS_ptrace)), RET_ALLOW);
        assert_eq!(run(&newer, &d(libc::SYS_move_pages)), RET_ALLOW);
        assert_eq!(run(&newer, &d(450)), RET_ALLOW);
        assert_eq!(run(&newer, &d(451)), enosys);
        assert_eq!(run(&newer, &d(463)), enosys);
        // The embedded list is within one program's jump reach.
        assert!(progs[0].len() < 300, "{}", progs[0].len());
    }
}
