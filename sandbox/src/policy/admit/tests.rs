//! Admission without a host: every refusal with its field and text, and what is admitted.

use std::path::{Path, PathBuf};

use super::*;
use crate::mode::Mode;
use crate::policy::PolicySet;
use crate::spec::{ReportDir, ReportFile};

/// A request whose paths need not exist: admission never looks at them.
fn req(mode: Mode) -> SandboxRequest {
    SandboxRequest::minimal(
        mode,
        PathBuf::from("/nonexistent/ws"),
        PathBuf::from("/nonexistent/state/home"),
        PathBuf::from("/nonexistent/state/tmp"),
    )
}

fn policy(mode: Mode) -> Policy {
    PolicySet::embedded().unwrap().get(mode).unwrap().clone()
}

const BACKENDS: [BackendKind; 2] = [BackendKind::Native, BackendKind::Docker];

fn refusal(p: &Policy, r: &SandboxRequest, b: BackendKind) -> (String, String) {
    match admit(p, r, b) {
        Err(SandboxError::InvalidRequest { field, message }) => (field, message),
        other => panic!("expected InvalidRequest, got {other:?}"),
    }
}

#[test]
fn the_network_is_the_jobs_else_the_policys() {
    for b in BACKENDS {
        let a = admit(&policy(Mode::WorkspaceWrite), &req(Mode::WorkspaceWrite), b).unwrap();
        assert_eq!(a.network, Network::None);
        assert_eq!(a.socket_families, Some(&[SocketFamily::Unix][..]));
        let a = admit(&policy(Mode::FullAccess), &req(Mode::FullAccess), b).unwrap();
        assert_eq!((a.network, a.socket_families), (Network::Full, None));
        let mut r = req(Mode::ReadOnly);
        r.network = Some(Network::Gateway);
        let a = admit(&policy(Mode::ReadOnly), &r, b).unwrap();
        assert_eq!(a.network, Network::Gateway);
    }
}

#[test]
fn full_network_is_refused_where_the_mode_does_not_allow_it() {
    for b in BACKENDS {
        let mut r = req(Mode::ReadOnly);
        r.network = Some(Network::Full);
        let (field, message) = refusal(&policy(Mode::ReadOnly), &r, b);
        assert_eq!(field, "network");
        assert_eq!(message, "mode `read-only` does not allow `--network full`");
        for mode in [Mode::WorkspaceWrite, Mode::FullAccess] {
            r.mode = mode;
            assert!(admit(&policy(mode), &r, b).is_ok(), "{mode}");
        }
    }
}

#[test]
fn gateway_ports_need_the_gateway() {
    for b in BACKENDS {
        let mut r = req(Mode::WorkspaceWrite);
        r.gateway_ports = vec![8080];
        let (field, message) = refusal(&policy(Mode::WorkspaceWrite), &r, b);
        assert_eq!(field, "gateway_ports");
        assert!(
            message.contains("only allowed with `--network gateway`"),
            "{message}"
        );
        r.network = Some(Network::Gateway);
        assert!(admit(&policy(Mode::WorkspaceWrite), &r, b).is_ok());
    }
}

#[test]
fn extra_writable_directories_only_where_the_mode_allows_them() {
    for b in BACKENDS {
        let mut r = req(Mode::ReadOnly);
        r.write = vec![PathBuf::from("/nonexistent/w")];
        let (field, message) = refusal(&policy(Mode::ReadOnly), &r, b);
        assert_eq!(field, "write");
        assert_eq!(
            message,
            "mode `read-only` does not allow extra writable directories"
        );
        r.mode = Mode::WorkspaceWrite;
        assert!(admit(&policy(Mode::WorkspaceWrite), &r, b).is_ok());
    }
}

#[test]
fn an_unrestricted_mode_without_extra_write_differs_by_backend() {
    let mut p = policy(Mode::FullAccess);
    p.filesystem.extra_write = false;
    let mut r = req(Mode::FullAccess);
    r.write = vec![PathBuf::from("/nonexistent/w")];
    // Natively nothing is bound: the host's view already holds the tree.
    assert!(admit(&p, &r, BackendKind::Native).is_ok());
    // Docker binds it, so the policy's word counts.
    let (field, _) = refusal(&p, &r, BackendKind::Docker);
    assert_eq!(field, "write");
}

#[test]
fn protected_paths_need_a_filesystem_sandbox() {
    for b in BACKENDS {
        let mut r = req(Mode::FullAccess);
        r.protect = vec![PathBuf::from("tests")];
        let (field, message) = refusal(&policy(Mode::FullAccess), &r, b);
        assert_eq!(field, "protect");
        assert_eq!(
            message,
            "protected paths need a filesystem sandbox; mode `full-access` has none"
        );
        r.mode = Mode::WorkspaceWrite;
        assert!(admit(&policy(Mode::WorkspaceWrite), &r, b).is_ok());
    }
}

#[test]
fn a_report_dir_is_checked() {
    for b in BACKENDS {
        let mut r = req(Mode::WorkspaceWrite);
        r.private.report = Some(ReportDir {
            path: PathBuf::from("/nonexistent/state/out"),
            bytes: 1 << 20,
            entries: 8,
            files: vec![ReportFile {
                name: "a/b".into(),
                max_bytes: 10,
            }],
        });
        let (field, _) = refusal(&policy(Mode::WorkspaceWrite), &r, b);
        assert_eq!(field, "report_dir");
        if let Some(d) = r.private.report.as_mut() {
            d.files[0].name = "report.json".into();
        }
        assert!(admit(&policy(Mode::WorkspaceWrite), &r, b).is_ok());
    }
}

#[test]
fn refusals_come_in_a_fixed_order() {
    // Everything wrong at once: the network is named first, then the ports, the extra write.
    let mut r = req(Mode::ReadOnly);
    r.network = Some(Network::Full);
    r.gateway_ports = vec![0];
    r.write = vec![PathBuf::from("/nonexistent/w")];
    let p = policy(Mode::ReadOnly);
    assert_eq!(refusal(&p, &r, BackendKind::Docker).0, "network");
    r.network = None;
    assert_eq!(refusal(&p, &r, BackendKind::Docker).0, "gateway_ports");
    r.gateway_ports.clear();
    assert_eq!(refusal(&p, &r, BackendKind::Docker).0, "write");
}

#[test]
fn the_scratch_size_is_the_jobs_then_the_policys_then_the_default() {
    let mut p = policy(Mode::WorkspaceWrite);
    p.limits.tmp_size = None;
    let mut r = req(Mode::WorkspaceWrite);
    let size =
        |p: &Policy, r: &SandboxRequest| admit(p, r, BackendKind::Native).unwrap().scratch_size;
    assert_eq!(size(&p, &r), DEFAULT_SCRATCH_SIZE);
    p.limits.tmp_size = Some(crate::units::ByteSize(2 << 20));
    assert_eq!(size(&p, &r), 2 << 20);
    r.limits.tmp_bytes = Some(3 << 20);
    assert_eq!(size(&p, &r), 3 << 20);
}

#[test]
fn the_state_refusal_names_both_paths() {
    let e = state_visible(Path::new("/var/lib/ralph"), Path::new("/var"));
    assert_eq!(
        e.to_string(),
        SandboxError::invalid(
            "state-dir",
            "the runner's state `/var/lib/ralph` lies inside the sandbox-visible path `/var`; move the state directory elsewhere"
        )
        .to_string()
    );
}
