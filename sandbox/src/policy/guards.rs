//! The host-boundary syscall guards (SPEC §5 "The host boundary"), as pure data: refusals that
//! depend on a syscall's arguments, switched on by a mode's `[syscalls]` policy and translated by
//! each backend (the native filter with seccompiler, the docker profile as JSON). One list, so
//! the two backends refuse the same things for the same reasons.
//!
//! - **set-id bits**: no file the round makes can carry the set-user-ID or set-group-ID bit
//!   (`chmod` family, file creation with a mode, `mknod`); `openat2`, whose mode seccomp cannot
//!   read, answers ENOSYS so that libc falls back to `openat`. No device nodes either (`mknod`
//!   of a character or block device; without `CAP_MKNOD` the kernel refuses them anyway).
//! - **terminal injection**: `ioctl(TIOCSTI)` (push input into a terminal) and
//!   `ioctl(TIOCLINUX)` are refused on every descriptor.
//! - **the sandbox's init**: `prlimit64` may not set another process's limits, signals to
//!   pid 1 (the sandbox's init) are refused, and so are changes to its scheduling by any call
//!   that names it: its nice value (`setpriority` of pid 1, of process group 1 — the docker
//!   init's, which the command is never in — or of a whole user), its policy, parameters and
//!   CPU affinity (`sched_set*` of pid 1), its I/O priority (`ioprio_set`, the same three ways)
//!   and its memory placement (`migrate_pages`, `move_pages`). `pidfd_send_signal` answers
//!   ENOSYS: a pidfd can be had without `pidfd_open` (a descriptor of `/proc/1` is one), so the
//!   call is refused whole and libraries fall back to `kill`, whose pid the filter reads. The
//!   init itself acts only on signals sent from outside the sandbox (`crate::sys::from_outside`)
//!   and `/proc/1` is read-only, so what no filter can name (SIGIO to an owner set with
//!   `F_SETOWN`, a write to `/proc/1/oom_score_adj`) does not reach it either.

use serde::{Deserialize, Serialize};

use super::SyscallPolicy;

/// Which guards are on (a mode's `[syscalls]` switches, carried into the plan).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Switches {
    /// Set-id bits and device nodes.
    pub deny_setid: bool,
    /// Terminal injection.
    pub deny_tty_injection: bool,
    /// The sandbox's init.
    pub protect_init: bool,
}

impl SyscallPolicy {
    /// The guard switches of this policy.
    pub fn switches(&self) -> Switches {
        Switches {
            deny_setid: self.deny_setid,
            deny_tty_injection: self.deny_tty_injection,
            protect_init: self.protect_init,
        }
    }
}

/// How an argument is compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `arg == value`.
    Eq(u64),
    /// `arg != value`.
    Ne(u64),
    /// `arg & mask == value`.
    MaskedEq {
        /// The mask.
        mask: u64,
        /// The value the masked argument must equal.
        value: u64,
    },
}

/// Width of an argument as the kernel passes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Width {
    /// 32 bits (`int`, `mode_t`, `unsigned int`): only the low half is compared.
    Dword,
    /// 64 bits (pointers, `long`).
    Qword,
}

/// One condition on one argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cond {
    /// Argument index (0-based).
    pub arg: u8,
    /// The comparison.
    pub op: Op,
    /// The argument's width.
    pub width: Width,
}

/// `syscall` is refused with `errno` when all of `conds` hold (no conditions: always).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Guard {
    /// The syscall's name.
    pub syscall: &'static str,
    /// Conditions, at most one per argument (the docker profile format cannot AND two
    /// conditions on the same argument).
    pub conds: Vec<Cond>,
    /// The errno.
    pub errno: i32,
    /// Why, for docs and test messages.
    pub why: &'static str,
}

const SETUID: u64 = libc::S_ISUID as u64;
const SETGID: u64 = libc::S_ISGID as u64;
const IFMT: u64 = libc::S_IFMT as u64;
const TIOCSTI: u64 = 0x5412;
const TIOCLINUX: u64 = 0x541c;
/// `setpriority(2)`'s `which`.
const PRIO_PROCESS: u64 = 0;
const PRIO_PGRP: u64 = 1;
const PRIO_USER: u64 = 2;
/// `ioprio_set(2)`'s `which`.
const IOPRIO_WHO_PROCESS: u64 = 1;
const IOPRIO_WHO_PGRP: u64 = 2;
const IOPRIO_WHO_USER: u64 = 3;
/// The sandbox's init: pid 1 of its pid namespace, and (docker) the leader of process group 1.
const INIT: u64 = 1;

fn cond(arg: u8, op: Op, width: Width) -> Cond {
    Cond { arg, op, width }
}

fn guard(syscall: &'static str, conds: Vec<Cond>, why: &'static str) -> Guard {
    Guard {
        syscall,
        conds,
        errno: libc::EPERM,
        why,
    }
}

/// One guard per set-id bit on the mode argument `arg` of `syscall`.
fn no_setid(out: &mut Vec<Guard>, syscall: &'static str, arg: u8) {
    for bit in [SETUID, SETGID] {
        out.push(guard(
            syscall,
            vec![cond(
                arg,
                Op::MaskedEq {
                    mask: bit,
                    value: bit,
                },
                Width::Dword,
            )],
            "no set-user-ID or set-group-ID bit on a file the round makes",
        ));
    }
}

/// The guards `sys` switches on.
pub fn guards(sys: Switches) -> Vec<Guard> {
    let mut out = Vec::new();
    if sys.deny_setid {
        for (syscall, mode_arg) in [
            ("chmod", 1),
            ("fchmod", 1),
            ("fchmodat", 2),
            ("fchmodat2", 2),
            ("creat", 1),
            ("open", 2),
            ("openat", 3),
            ("mknod", 1),
            ("mknodat", 2),
        ] {
            no_setid(&mut out, syscall, mode_arg);
        }
        for (syscall, mode_arg) in [("mknod", 1), ("mknodat", 2)] {
            for kind in [libc::S_IFCHR, libc::S_IFBLK] {
                out.push(guard(
                    syscall,
                    vec![cond(
                        mode_arg,
                        Op::MaskedEq {
                            mask: IFMT,
                            value: u64::from(kind),
                        },
                        Width::Dword,
                    )],
                    "no device nodes",
                ));
            }
        }
        out.push(Guard {
            syscall: "openat2",
            conds: Vec::new(),
            errno: libc::ENOSYS,
            why: "openat2's mode is out of seccomp's reach; libc falls back to openat",
        });
    }
    if sys.deny_tty_injection {
        for request in [TIOCSTI, TIOCLINUX] {
            out.push(guard(
                "ioctl",
                vec![cond(1, Op::Eq(request), Width::Dword)],
                "no input pushed into a terminal",
            ));
        }
    }
    if sys.protect_init {
        out.push(guard(
            "prlimit64",
            vec![
                cond(0, Op::Ne(0), Width::Dword),
                cond(2, Op::Ne(0), Width::Qword),
            ],
            "no limits set on another process (the sandbox's init)",
        ));
        for (syscall, pid_arg) in [
            ("kill", 0),
            ("tkill", 0),
            ("tgkill", 0),
            ("rt_sigqueueinfo", 0),
            ("rt_tgsigqueueinfo", 0),
            ("pidfd_open", 0),
        ] {
            out.push(guard(
                syscall,
                vec![cond(pid_arg, Op::Eq(INIT), Width::Dword)],
                "no signal to the sandbox's init",
            ));
        }
        out.push(Guard {
            syscall: "pidfd_send_signal",
            conds: Vec::new(),
            errno: libc::ENOSYS,
            why: "a pidfd of the init can be had from /proc/1, and the filter cannot tell whose it is; libraries fall back to kill",
        });
        init_scheduling(&mut out);
    }
    out
}

/// Nothing that names the init may change how it is scheduled.
fn init_scheduling(out: &mut Vec<Guard>) {
    const WHY: &str = "no change to the scheduling of the sandbox's init";
    let which_who = |which: u64, who: u64| {
        vec![
            cond(0, Op::Eq(which), Width::Dword),
            cond(1, Op::Eq(who), Width::Dword),
        ]
    };
    for (syscall, process, pgrp, user) in [
        ("setpriority", PRIO_PROCESS, PRIO_PGRP, PRIO_USER),
        (
            "ioprio_set",
            IOPRIO_WHO_PROCESS,
            IOPRIO_WHO_PGRP,
            IOPRIO_WHO_USER,
        ),
    ] {
        out.push(guard(syscall, which_who(process, INIT), WHY));
        out.push(guard(syscall, which_who(pgrp, INIT), WHY));
        // Every process of a user: the docker init runs as the command's user.
        out.push(guard(
            syscall,
            vec![cond(0, Op::Eq(user), Width::Dword)],
            WHY,
        ));
    }
    for syscall in [
        "sched_setscheduler",
        "sched_setparam",
        "sched_setattr",
        "sched_setaffinity",
        "migrate_pages",
        "move_pages",
    ] {
        out.push(guard(
            syscall,
            vec![cond(0, Op::Eq(INIT), Width::Dword)],
            WHY,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mode::Mode;
    use crate::policy::PolicySet;

    #[test]
    fn the_confined_modes_switch_every_guard_on_and_full_access_none() {
        let set = PolicySet::embedded().unwrap();
        for mode in [Mode::ReadOnly, Mode::WorkspaceWrite] {
            let g = guards(set.get(mode).unwrap().syscalls.switches());
            for name in [
                "chmod",
                "fchmodat2",
                "openat",
                "openat2",
                "ioctl",
                "prlimit64",
                "kill",
            ] {
                assert!(g.iter().any(|x| x.syscall == name), "{mode}: {name}");
            }
        }
        assert!(guards(set.get(Mode::FullAccess).unwrap().syscalls.switches()).is_empty());
    }

    /// Whether `g` refuses `syscall` with these arguments (compared on their kernel width).
    fn refuses(g: &[Guard], syscall: &str, args: [u64; 6]) -> Option<i32> {
        g.iter()
            .filter(|x| x.syscall == syscall)
            .find(|x| {
                x.conds.iter().all(|c| {
                    let v = match c.width {
                        Width::Dword => args[usize::from(c.arg)] & 0xffff_ffff,
                        Width::Qword => args[usize::from(c.arg)],
                    };
                    match c.op {
                        Op::Eq(x) => v == x,
                        Op::Ne(x) => v != x,
                        Op::MaskedEq { mask, value } => v & mask == value,
                    }
                })
            })
            .map(|x| x.errno)
    }

    /// Issue 25: every call that names the init and changes its scheduling is refused; the
    /// command's own (pid 0, its own group 0) is not.
    #[test]
    fn nothing_that_names_the_init_changes_its_scheduling() {
        let set = PolicySet::embedded().unwrap();
        let g = guards(set.get(Mode::WorkspaceWrite).unwrap().syscalls.switches());
        let eperm = Some(libc::EPERM);
        for (syscall, refused, allowed) in [
            // setpriority(which, who, prio): the init, its group (1), a whole user.
            (
                "setpriority",
                vec![[0, 1, 19], [1, 1, 19], [2, 0, 19], [2, 1000, 19]],
                vec![[0, 0, 19], [1, 0, 19], [0, 7, 19]],
            ),
            // ioprio_set(which, who, ioprio): the same three ways.
            (
                "ioprio_set",
                vec![[1, 1, 3 << 13], [2, 1, 3 << 13], [3, 0, 3 << 13]],
                vec![[1, 0, 3 << 13], [2, 0, 3 << 13]],
            ),
            (
                "sched_setscheduler",
                vec![[1, 5, 0]],
                vec![[0, 5, 0], [9, 5, 0]],
            ),
            ("sched_setparam", vec![[1, 0, 0]], vec![[0, 0, 0]]),
            ("sched_setattr", vec![[1, 0, 0]], vec![[0, 0, 0]]),
            ("sched_setaffinity", vec![[1, 8, 0]], vec![[0, 8, 0]]),
            ("migrate_pages", vec![[1, 8, 0]], vec![[0, 8, 0]]),
            ("move_pages", vec![[1, 8, 0]], vec![[0, 8, 0]]),
        ] {
            for a in refused {
                let args = [a[0], a[1], a[2], 0, 0, 0];
                assert_eq!(refuses(&g, syscall, args), eperm, "{syscall}{a:?}");
                // Garbage in the upper half of a 32-bit argument changes nothing.
                let high = [a[0] | 1 << 40, a[1] | 1 << 33, a[2], 0, 0, 0];
                assert_eq!(
                    refuses(&g, syscall, high),
                    eperm,
                    "{syscall}{a:?} (high bits)"
                );
            }
            for a in allowed {
                assert_eq!(
                    refuses(&g, syscall, [a[0], a[1], a[2], 0, 0, 0]),
                    None,
                    "{syscall}{a:?}"
                );
            }
        }
        // A descriptor of /proc/1 is a pidfd: pidfd_send_signal is refused whole, with ENOSYS.
        assert_eq!(
            refuses(&g, "pidfd_send_signal", [3, 15, 0, 0, 0, 0]),
            Some(libc::ENOSYS)
        );
    }

    #[test]
    fn every_guard_names_a_known_syscall_and_one_condition_per_argument() {
        let set = PolicySet::embedded().unwrap();
        for g in guards(set.get(Mode::WorkspaceWrite).unwrap().syscalls.switches()) {
            assert!(
                crate::policy::syscalls::number(g.syscall).is_some(),
                "{}",
                g.syscall
            );
            let mut args: Vec<u8> = g.conds.iter().map(|c| c.arg).collect();
            args.sort_unstable();
            args.dedup();
            assert_eq!(args.len(), g.conds.len(), "{g:?}");
        }
    }
}
