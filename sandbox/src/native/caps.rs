//! Dropping every capability: bounding set, ambient set, then effective, permitted and
//! inheritable (`capset`). After this even uid 0 gains nothing from `execve`.

use super::step::{StepFailure, restriction};

/// Highest capability number the kernel knows.
fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63)
}

/// Drops all capabilities of the calling (single-threaded) process.
pub fn drop_all() -> Result<(), StepFailure> {
    drop_bounding_and_ambient()?;
    clear()
}

/// Empties the bounding and ambient sets (needs `CAP_SETPCAP`: done before any uid change).
pub fn drop_bounding_and_ambient() -> Result<(), StepFailure> {
    for cap in 0..=last_cap() {
        // SAFETY: PR_CAPBSET_DROP takes an integer capability number and touches no memory.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0) };
        if rc < 0 {
            let err = std::io::Error::last_os_error();
            // EINVAL: a capability number this kernel does not have.
            if err.raw_os_error() != Some(libc::EINVAL) {
                return Err(StepFailure::io(
                    restriction::CAPABILITIES,
                    "prctl(PR_CAPBSET_DROP)",
                    &format!("drop capability {cap} from the bounding set"),
                    &err,
                ));
            }
        }
    }
    // SAFETY: PR_CAP_AMBIENT_CLEAR_ALL takes no pointers.
    let rc = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    if rc < 0 {
        return Err(StepFailure::io(
            restriction::CAPABILITIES,
            "prctl(PR_CAP_AMBIENT_CLEAR_ALL)",
            "clear the ambient set",
            &std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Empties the effective, permitted and inheritable sets (`capset`; needs no privilege).
pub fn clear() -> Result<(), StepFailure> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset reads one header and two data structs (version 3 layout) that live for the
    // duration of the call.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) };
    if rc < 0 {
        return Err(StepFailure::io(
            restriction::CAPABILITIES,
            "capset",
            "empty the effective, permitted and inheritable sets",
            &std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}
