//! The container's create request, built from a [`ContainerPlan`] and an [`ExecSpec`] as pure
//! data: every hardening option in one place.

use std::collections::HashMap;

use bollard::models::{
    ContainerCreateBody, HostConfig, Mount, MountBindOptions, MountBindOptionsPropagationEnum,
    MountType, ResourcesUlimits,
};

use super::init::{ALIVE_PATH, INIT_PATH, InitSetup};
use super::plan::ContainerPlan;
use super::seccomp;
use crate::mode::Network;
use crate::spec::{ExecSpec, StdinMode};

/// Options of the private `/tmp`: world-writable with the sticky bit, whatever the image's
/// `/tmp` mode is (the engine otherwise copies it), no devices, no setuid.
pub const TMP_OPTIONS: &str = "rw,nosuid,nodev,mode=1777";

fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn ulimit(name: &str, v: u64) -> ResourcesUlimits {
    ResourcesUlimits {
        name: Some(name.to_owned()),
        soft: Some(i64_of(v)),
        hard: Some(i64_of(v)),
    }
}

/// The container's tmpfs mounts: `/tmp` (world-writable, sticky) and the private HOME and
/// TMPDIR (the command's own), each limited to the plan's scratch size; the report directory,
/// bounded in bytes and entries, without exec.
pub fn tmpfs(plan: &ContainerPlan) -> HashMap<String, String> {
    let size = plan.scratch_size;
    let mut out = HashMap::from([("/tmp".to_owned(), format!("{TMP_OPTIONS},size={size}"))]);
    for p in &plan.scratch {
        out.insert(
            p.display().to_string(),
            format!(
                "rw,nosuid,nodev,mode=0700,uid={},gid={},size={size}",
                plan.uid, plan.gid
            ),
        );
    }
    if let Some(r) = &plan.report_dir {
        out.insert(
            r.path.display().to_string(),
            format!(
                "rw,nosuid,nodev,noexec,{}",
                crate::report_dir::tmpfs_data(r, plan.uid, plan.gid)
            ),
        );
    }
    out
}

fn bind(source: &std::path::Path, target: &str, read_only: bool) -> Mount {
    Mount {
        target: Some(target.to_owned()),
        source: Some(source.display().to_string()),
        typ: Some(MountType::BIND),
        read_only: Some(read_only),
        bind_options: Some(MountBindOptions {
            propagation: Some(MountBindOptionsPropagationEnum::RPRIVATE),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The create request. With `init`, ralph's own init is pid 1 (mounted read-only with the
/// runner's liveness FIFO, see [`super::init`]); without, the engine's (tini). With
/// `idmapped`, a bind at or below an idmapped tree takes its source in its idmapped clone.
pub fn body(
    plan: &ContainerPlan,
    spec: &ExecSpec,
    labels: HashMap<String, String>,
    init: Option<&InitSetup>,
    idmapped: Option<&super::idmap::IdmappedTrees>,
) -> Result<ContainerCreateBody, String> {
    let mut mounts: Vec<Mount> = plan
        .mounts
        .iter()
        .map(|m| {
            let source = idmapped.map_or_else(|| m.path.clone(), |t| t.source_of(&m.path));
            bind(&source, &m.path.display().to_string(), m.read_only)
        })
        .collect();
    if let Some(i) = init {
        mounts.push(bind(&i.program, INIT_PATH, true));
        mounts.push(bind(&i.alive, ALIVE_PATH, true));
        mounts.push(bind(&i.status.path, super::init_status::STATUS_PATH, true));
        if let Some(g) = &i.gateway {
            mounts.push(bind(&g.path, super::gateway::GATEWAY_PATH, true));
        }
    }
    let mut ulimits = vec![ulimit("core", 0)];
    ulimits.extend(plan.open_files.map(|n| ulimit("nofile", n)));
    ulimits.extend(plan.file_size.map(|n| ulimit("fsize", n)));
    let host_config = HostConfig {
        mounts: Some(mounts),
        tmpfs: Some(tmpfs(plan)),
        readonly_rootfs: Some(true),
        cap_drop: Some(vec!["ALL".into()]),
        security_opt: Some(vec![
            "no-new-privileges".into(),
            seccomp::security_opt(&plan.seccomp)?,
        ]),
        network_mode: Some(
            match plan.network {
                // The gateway's listeners are made in this loopback-only namespace by the init.
                Network::None | Network::Gateway => "none",
                Network::Full => "bridge",
            }
            .into(),
        ),
        init: Some(init.is_none()),
        privileged: Some(false),
        memory: plan.memory.map(i64_of),
        memory_swap: plan.memory.map(i64_of),
        pids_limit: plan.pids.map(i64_of),
        nano_cpus: plan.cpu_millis.map(|m| i64_of(m.saturating_mul(1_000_000))),
        ulimits: Some(ulimits),
        ipc_mode: Some("private".into()),
        masked_paths: Some(plan.masked.clone()),
        readonly_paths: Some(plan.read_only.clone()),
        // With ralph's init the engine removes the container once it stops, whatever became of
        // the runner (a `kill -9` included: the init sees the runner go and stops); the init's
        // report says how the command ended. Without it the runner needs the engine's state.
        auto_remove: Some(init.is_some()),
        ..Default::default()
    };
    let stdin = spec.stdin != StdinMode::Null;
    Ok(ContainerCreateBody {
        image: Some(plan.image.clone()),
        cmd: Some(match init {
            Some(_) => super::init::command_line(
                spec.kill_grace,
                spec.timeout,
                plan.report_dir.as_ref().map(|r| r.path.as_path()),
                &plan.gateway_ports,
                &spec.argv,
            ),
            None => spec.argv.clone(),
        }),
        // The image's entrypoint would run before the command: none.
        entrypoint: Some(Vec::new()),
        env: Some(spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        working_dir: Some(spec.cwd.display().to_string()),
        user: Some(format!("{}:{}", plan.uid, plan.gid)),
        labels: Some(labels),
        attach_stdin: Some(stdin),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        open_stdin: Some(stdin),
        stdin_once: Some(stdin),
        tty: Some(false),
        host_config: Some(host_config),
        ..Default::default()
    })
}
