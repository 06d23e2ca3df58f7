//! Syscall names a policy may list, and their numbers on this architecture. The table is closed:
//! a name that is not here is a policy error, never silently ignored.

macro_rules! table {
    ($($name:ident),* $(,)?) => {
        /// (name, number) of every syscall a policy may name.
        pub const SYSCALLS: &[(&str, i64)] = &[$((stringify!($name), paste_sys!($name))),*];
    };
}

macro_rules! paste_sys {
    (ptrace) => {
        libc::SYS_ptrace
    };
    (process_vm_readv) => {
        libc::SYS_process_vm_readv
    };
    (process_vm_writev) => {
        libc::SYS_process_vm_writev
    };
    (pidfd_getfd) => {
        libc::SYS_pidfd_getfd
    };
    (io_uring_setup) => {
        libc::SYS_io_uring_setup
    };
    (io_uring_enter) => {
        libc::SYS_io_uring_enter
    };
    (io_uring_register) => {
        libc::SYS_io_uring_register
    };
    (bpf) => {
        libc::SYS_bpf
    };
    (perf_event_open) => {
        libc::SYS_perf_event_open
    };
    (userfaultfd) => {
        libc::SYS_userfaultfd
    };
    (kexec_load) => {
        libc::SYS_kexec_load
    };
    (kexec_file_load) => {
        libc::SYS_kexec_file_load
    };
    (init_module) => {
        libc::SYS_init_module
    };
    (finit_module) => {
        libc::SYS_finit_module
    };
    (delete_module) => {
        libc::SYS_delete_module
    };
    (keyctl) => {
        libc::SYS_keyctl
    };
    (add_key) => {
        libc::SYS_add_key
    };
    (request_key) => {
        libc::SYS_request_key
    };
    (mount) => {
        libc::SYS_mount
    };
    (umount2) => {
        libc::SYS_umount2
    };
    (pivot_root) => {
        libc::SYS_pivot_root
    };
    (chroot) => {
        libc::SYS_chroot
    };
    (unshare) => {
        libc::SYS_unshare
    };
    (setns) => {
        libc::SYS_setns
    };
    (fsopen) => {
        libc::SYS_fsopen
    };
    (fsconfig) => {
        libc::SYS_fsconfig
    };
    (fsmount) => {
        libc::SYS_fsmount
    };
    (fspick) => {
        libc::SYS_fspick
    };
    (move_mount) => {
        libc::SYS_move_mount
    };
    (open_tree) => {
        libc::SYS_open_tree
    };
    (mount_setattr) => {
        libc::SYS_mount_setattr
    };
    (open_by_handle_at) => {
        libc::SYS_open_by_handle_at
    };
    (name_to_handle_at) => {
        libc::SYS_name_to_handle_at
    };
    (swapon) => {
        libc::SYS_swapon
    };
    (swapoff) => {
        libc::SYS_swapoff
    };
    (reboot) => {
        libc::SYS_reboot
    };
    (acct) => {
        libc::SYS_acct
    };
    (syslog) => {
        libc::SYS_syslog
    };
    (quotactl) => {
        libc::SYS_quotactl
    };
    (vhangup) => {
        libc::SYS_vhangup
    };
    (personality) => {
        libc::SYS_personality
    };
    (mknodat) => {
        libc::SYS_mknodat
    };
    (setdomainname) => {
        libc::SYS_setdomainname
    };
    (sethostname) => {
        libc::SYS_sethostname
    };
    (chmod) => {
        libc::SYS_chmod
    };
    (fchmod) => {
        libc::SYS_fchmod
    };
    (fchmodat) => {
        libc::SYS_fchmodat
    };
    (fchmodat2) => {
        libc::SYS_fchmodat2
    };
    (creat) => {
        libc::SYS_creat
    };
    (open) => {
        libc::SYS_open
    };
    (openat) => {
        libc::SYS_openat
    };
    (openat2) => {
        libc::SYS_openat2
    };
    (mknod) => {
        libc::SYS_mknod
    };
    (ioctl) => {
        libc::SYS_ioctl
    };
    (prlimit64) => {
        libc::SYS_prlimit64
    };
    (kill) => {
        libc::SYS_kill
    };
    (tkill) => {
        libc::SYS_tkill
    };
    (tgkill) => {
        libc::SYS_tgkill
    };
    (rt_sigqueueinfo) => {
        libc::SYS_rt_sigqueueinfo
    };
    (rt_tgsigqueueinfo) => {
        libc::SYS_rt_tgsigqueueinfo
    };
    (pidfd_open) => {
        libc::SYS_pidfd_open
    };
    (pidfd_send_signal) => {
        libc::SYS_pidfd_send_signal
    };
    (setpriority) => {
        libc::SYS_setpriority
    };
    (ioprio_set) => {
        libc::SYS_ioprio_set
    };
    (sched_setscheduler) => {
        libc::SYS_sched_setscheduler
    };
    (sched_setparam) => {
        libc::SYS_sched_setparam
    };
    (sched_setattr) => {
        libc::SYS_sched_setattr
    };
    (sched_setaffinity) => {
        libc::SYS_sched_setaffinity
    };
    (migrate_pages) => {
        libc::SYS_migrate_pages
    };
    (move_pages) => {
        libc::SYS_move_pages
    };
    (process_madvise) => {
        libc::SYS_process_madvise
    };
    (process_mrelease) => {
        libc::SYS_process_mrelease
    };
}

table!(
    ptrace,
    process_vm_readv,
    process_vm_writev,
    pidfd_getfd,
    io_uring_setup,
    io_uring_enter,
    io_uring_register,
    bpf,
    perf_event_open,
    userfaultfd,
    kexec_load,
    kexec_file_load,
    init_module,
    finit_module,
    delete_module,
    keyctl,
    add_key,
    request_key,
    mount,
    umount2,
    pivot_root,
    chroot,
    unshare,
    setns,
    fsopen,
    fsconfig,
    fsmount,
    fspick,
    move_mount,
    open_tree,
    mount_setattr,
    open_by_handle_at,
    name_to_handle_at,
    swapon,
    swapoff,
    reboot,
    acct,
    syslog,
    quotactl,
    vhangup,
    personality,
    mknodat,
    setdomainname,
    sethostname,
    chmod,
    fchmod,
    fchmodat,
    fchmodat2,
    creat,
    open,
    openat,
    openat2,
    mknod,
    ioctl,
    prlimit64,
    kill,
    tkill,
    tgkill,
    rt_sigqueueinfo,
    rt_tgsigqueueinfo,
    pidfd_open,
    pidfd_send_signal,
    setpriority,
    ioprio_set,
    sched_setscheduler,
    sched_setparam,
    sched_setattr,
    sched_setaffinity,
    migrate_pages,
    move_pages,
    process_madvise,
    process_mrelease,
);

/// The number of syscall `name`, if the table knows it.
pub fn number(name: &str) -> Option<i64> {
    SYSCALLS.iter().find(|(n, _)| *n == name).map(|(_, nr)| *nr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_and_are_unique() {
        assert_eq!(number("ptrace"), Some(libc::SYS_ptrace));
        assert_eq!(number("nope"), None);
        let mut nrs: Vec<i64> = SYSCALLS.iter().map(|(_, n)| *n).collect();
        nrs.sort_unstable();
        nrs.dedup();
        assert_eq!(nrs.len(), SYSCALLS.len());
    }
}
