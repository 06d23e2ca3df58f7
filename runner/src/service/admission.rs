//! Admission: what a submitter may ask of this service. Each refusal names the configuration
//! rule and the job key, so the client can say exactly why (HTTP 403).

use std::path::Path;

use ralph_sandbox::{BackendKind, Mode, Network};

use super::config::Limits;
use crate::gateway::AllowHost;
use crate::gateway::egress::allow::DEFAULT_PORTS;
use crate::job::JobSpec;
use crate::util::units::{ByteSize, HumanDuration};

/// A job the configuration does not allow.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("refused by the server's `{rule}` rule: {message}")]
pub struct Refusal {
    /// The configuration key (`limits.<rule>`).
    pub rule: &'static str,
    /// The job key.
    pub field: &'static str,
    /// Why.
    pub message: String,
}

fn rank(m: Mode) -> u8 {
    match m {
        Mode::ReadOnly => 0,
        Mode::WorkspaceWrite => 1,
        Mode::FullAccess => 2,
    }
}

fn under_any(p: &Path, roots: &[std::path::PathBuf]) -> bool {
    roots
        .iter()
        .any(|r| std::fs::canonicalize(r).is_ok_and(|r| p.starts_with(r)))
}

/// Which limits the submitter set explicitly (the others take the ceilings, not the defaults).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Asked {
    /// `round_timeout` was given.
    pub round_timeout: bool,
    /// `job_timeout` was given.
    pub job_timeout: bool,
    /// `max_rounds` was not given: the default is brought down to the ceiling (SPEC §11).
    pub default_rounds: bool,
}

impl Asked {
    /// What `req` sets.
    pub fn of(req: &crate::job::request::JobRequest) -> Self {
        Self {
            round_timeout: req.round_timeout.is_some(),
            job_timeout: req.job_timeout.is_some(),
            default_rounds: req.max_rounds.is_none(),
        }
    }
}

/// Whether `asked` (a job's `allow_host`) is covered by `allowed`: every destination it opens
/// is opened by the list too (`HOST` means ports 80 and 443, `HOST:PORT` that port only), and
/// `=private` (a name that may resolve to private addresses) only where the list's entries for
/// that host say `=private` too. Unparsable entries cover nothing.
fn host_allowed(asked: &str, allowed: &[String]) -> bool {
    let Ok(a) = asked.parse::<AllowHost>() else {
        return false;
    };
    let entries: Vec<AllowHost> = allowed
        .iter()
        .filter_map(|e| e.parse::<AllowHost>().ok())
        .collect();
    // Port by port: `HOST` may be covered by `HOST:80` and `HOST:443` together.
    let ports = a.port.map_or_else(|| DEFAULT_PORTS.to_vec(), |p| vec![p]);
    ports.into_iter().all(|p| {
        let one = AllowHost {
            port: Some(p),
            ..a.clone()
        };
        entries.iter().any(|e| e.covers(&one))
    })
}

/// Why `asked` is refused: its host allowed without `=private` says so.
fn host_refusal(asked: &str, allowed: &[String]) -> String {
    let listed = if allowed.is_empty() {
        "none".to_owned()
    } else {
        allowed.join(", ")
    };
    let without_private = asked.parse::<AllowHost>().is_ok_and(|a| {
        a.private
            && host_allowed(
                &AllowHost {
                    private: false,
                    ..a.clone()
                }
                .to_string(),
                allowed,
            )
    });
    if without_private {
        format!(
            "`{asked}` is not in this server's allowed hosts ({listed}): the host is allowed \
             without `=private`, so it may not resolve to private addresses here"
        )
    } else {
        format!("`{asked}` is not in this server's allowed hosts ({listed})")
    }
}

/// The gateway rules: a job names an upstream of the configuration (never a URL or a key
/// variable of the service), and reaches only the hosts `allowed_hosts` lists.
fn admit_model_access(spec: &JobSpec, limits: &Limits) -> Result<(), Refusal> {
    let a = &spec.model_access;
    if a.api_key_env.is_some() {
        return Err(Refusal {
            rule: "allowed_upstreams",
            field: "api_key_env",
            message: "the service reads keys from its own configuration: name an upstream with `upstream`, not a key variable".into(),
        });
    }
    if let Some(u) = &a.upstream {
        if u.contains("://") {
            return Err(Refusal {
                rule: "allowed_upstreams",
                field: "upstream",
                message: format!(
                    "`{u}`: name one of the server's configured upstreams ([gateway.upstreams.NAME]), not a URL"
                ),
            });
        }
    }
    if let Some(allowed) = &limits.allowed_upstreams {
        let name = a.upstream.clone().or_else(|| match &spec.agent {
            crate::job::AgentSpec::Preset { name } => Some(name.clone()),
            crate::job::AgentSpec::Command { .. } => None,
        });
        if let Some(name) = name {
            if !allowed.contains(&name) {
                return Err(Refusal {
                    rule: "allowed_upstreams",
                    field: "upstream",
                    message: format!(
                        "upstream `{name}` is not allowed here (allowed: {})",
                        if allowed.is_empty() {
                            "none".to_owned()
                        } else {
                            allowed.join(", ")
                        }
                    ),
                });
            }
        }
    }
    if let Some(h) = a
        .allow_hosts
        .iter()
        .find(|h| !host_allowed(h, &limits.allowed_hosts))
    {
        return Err(Refusal {
            rule: "allowed_hosts",
            field: "allow_host",
            message: host_refusal(h, &limits.allowed_hosts),
        });
    }
    Ok(())
}

/// A job's own webhook receiver (SPEC §13): an http(s) URL under `limits.allowed_notify`.
fn admit_notify_url(spec: &JobSpec, limits: &Limits) -> Result<(), Refusal> {
    let Some(url) = &spec.notify_url else {
        return Ok(());
    };
    let refuse = |message: String| Refusal {
        rule: "allowed_notify",
        field: "notify_url",
        message,
    };
    let parsed = crate::webhook::target::parse(url).map_err(|e| refuse(e.to_string()))?;
    if !crate::webhook::target::allowed(&parsed, &limits.allowed_notify) {
        // The query left out: it often holds the receiver's secret (the refusal is logged).
        return Err(refuse(format!(
            "`{}{}` is not under this server's allowed receivers ({})",
            crate::webhook::target::origin(&parsed),
            parsed.path(),
            if limits.allowed_notify.is_empty() {
                "none: set `limits.allowed_notify`".to_owned()
            } else {
                limits.allowed_notify.join(", ")
            }
        )));
    }
    Ok(())
}

/// Checks `spec` against `limits`, and fills the limits a job left unset with the ceilings.
pub fn admit(spec: &mut JobSpec, limits: &Limits, asked: &Asked) -> Result<(), Refusal> {
    let refuse = |rule, field, message: String| {
        Err(Refusal {
            rule,
            field,
            message,
        })
    };
    // A provisioned workspace is the runner's own (under its state dir), not the submitter's.
    super::repo_admission::admit_source(spec, limits)?;
    let provisioned = spec.source.is_some();
    if limits.workspace_roots.is_empty() && !provisioned {
        return refuse(
            "workspace_roots",
            "workspace",
            "this server allows no workspace (set `limits.workspace_roots`)".into(),
        );
    }
    if !provisioned && !under_any(&spec.workspace, &limits.workspace_roots) {
        let roots: Vec<String> = limits
            .workspace_roots
            .iter()
            .map(|r| r.display().to_string())
            .collect();
        return refuse(
            "workspace_roots",
            "workspace",
            format!(
                "`{}` is not under {}",
                spec.workspace.display(),
                roots.join(", ")
            ),
        );
    }
    let s = &mut spec.sandbox;
    if rank(s.mode) > rank(limits.max_mode) {
        return refuse(
            "max_mode",
            "mode",
            format!(
                "mode `{}` is above this server's `{}`",
                s.mode, limits.max_mode
            ),
        );
    }
    if s.network == Some(Network::Full) && !limits.allow_network_full {
        return refuse(
            "allow_network_full",
            "network",
            "this server does not allow `network = \"full\"`".into(),
        );
    }
    admit_model_access(spec, limits)?;
    admit_notify_url(spec, limits)?;
    let s = &mut spec.sandbox;
    let roots = limits.path_roots();
    for (field, paths) in [
        ("read", &s.read),
        ("write", &s.write),
        ("socket", &s.sockets),
    ] {
        if let Some(p) = paths.iter().find(|p| !under_any(p, &roots)) {
            return refuse(
                "read_roots",
                field,
                format!(
                    "`{}` is not under a workspace root or a read root",
                    p.display()
                ),
            );
        }
    }
    if asked.default_rounds {
        spec.max_rounds = spec.max_rounds.min(limits.max_rounds);
    }
    if spec.max_rounds > limits.max_rounds {
        return refuse(
            "max_rounds",
            "max_rounds",
            format!(
                "{} is over this server's ceiling of {}",
                spec.max_rounds, limits.max_rounds
            ),
        );
    }
    if spec.handoff_cap as u64 > limits.max_handoff_cap.0 {
        return refuse(
            "max_handoff_cap",
            "handoff_cap",
            format!(
                "{} is over this server's ceiling of {}",
                spec.handoff_cap, limits.max_handoff_cap
            ),
        );
    }
    let s = &mut spec.sandbox;
    if let Some(max) = limits.max_memory {
        match s.memory {
            Some(m) if m > max => {
                return refuse(
                    "max_memory",
                    "memory",
                    format!("{m} is over this server's ceiling of {max}"),
                );
            }
            Some(_) => {}
            None => s.memory = Some(ByteSize(max.0)),
        }
    }
    if let Some(max) = limits.max_pids {
        match s.pids {
            Some(p) if p > max => {
                return refuse(
                    "max_pids",
                    "pids",
                    format!("{p} is over this server's ceiling of {max}"),
                );
            }
            Some(_) => {}
            None => s.pids = Some(max),
        }
    }
    if let Some(max) = limits.max_cpus {
        match s.cpus {
            Some(c) if c.0 > max.0 => {
                return refuse(
                    "max_cpus",
                    "cpus",
                    format!("{c} is over this server's ceiling of {max}"),
                );
            }
            Some(_) => {}
            None => s.cpus = Some(max),
        }
    }
    if s.backend == BackendKind::Docker {
        // A docker job without an image runs the default one, which must be allowed too.
        let img = s
            .image
            .as_deref()
            .unwrap_or(ralph_sandbox::docker::DEFAULT_IMAGE);
        if !limits.allowed_images.iter().any(|a| a == img) {
            return refuse(
                "allowed_images",
                "image",
                format!("image `{img}` is not in this server's allowed images"),
            );
        }
    }
    if let Some(name) = spec.env.iter().find(|n| !limits.allowed_env.contains(n)) {
        return refuse(
            "allowed_env",
            "env",
            format!("`{name}` is not in this server's allowed environment variables"),
        );
    }
    if let Some(name) = spec
        .setup
        .iter()
        .flat_map(|s| &s.env)
        .find(|n| !limits.allowed_setup_env.contains(n))
    {
        return refuse(
            "allowed_setup_env",
            "setup_env",
            format!("`{name}` is not in this server's allowed set-up variables"),
        );
    }
    let cap = |value: &mut Option<HumanDuration>,
               explicit: bool,
               max: Option<HumanDuration>,
               rule,
               field|
     -> Result<(), Refusal> {
        let Some(max) = max else { return Ok(()) };
        if !explicit {
            // A default above the ceiling becomes the ceiling.
            if value.is_none_or(|v| v > max) {
                *value = Some(max);
            }
            return Ok(());
        }
        match value {
            Some(t) if *t > max => Err(Refusal {
                rule,
                field,
                message: format!("{t} is over this server's ceiling of {max}"),
            }),
            Some(_) => Ok(()),
            None => {
                *value = Some(max);
                Ok(())
            }
        }
    };
    cap(
        &mut spec.round_timeout,
        asked.round_timeout,
        limits.max_round_timeout,
        "max_round_timeout",
        "round_timeout",
    )?;
    cap(
        &mut spec.job_timeout,
        asked.job_timeout,
        limits.max_job_timeout,
        "max_job_timeout",
        "job_timeout",
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::AgentSpec;

    fn setup() -> (tempfile::TempDir, JobSpec, Limits) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        let spec = JobSpec::new(
            "x",
            ws.canonicalize().unwrap(),
            AgentSpec::Command {
                command: "true".into(),
            },
        );
        let limits = Limits {
            workspace_roots: vec![dir.path().to_path_buf()],
            ..Limits::default()
        };
        (dir, spec, limits)
    }

    #[test]
    fn each_rule_is_named() {
        let (_d, spec, limits) = setup();
        let check = |f: &dyn Fn(&mut JobSpec, &mut Limits), rule: &str, field: &str| {
            let (mut s, mut l) = (spec.clone(), limits.clone());
            f(&mut s, &mut l);
            let r = admit(&mut s, &l, &Asked::default()).unwrap_err();
            assert_eq!((r.rule, r.field), (rule, field), "{r}");
        };
        check(
            &|_, l| l.workspace_roots.clear(),
            "workspace_roots",
            "workspace",
        );
        check(
            &|_, l| l.workspace_roots = vec!["/srv".into()],
            "workspace_roots",
            "workspace",
        );
        check(
            &|s, _| s.sandbox.mode = Mode::FullAccess,
            "max_mode",
            "mode",
        );
        check(
            &|s, l| {
                s.sandbox.network = Some(Network::Full);
                l.allow_network_full = false;
            },
            "allow_network_full",
            "network",
        );
        check(
            &|s, _| s.sandbox.read = vec!["/etc".into()],
            "read_roots",
            "read",
        );
        check(
            &|s, l| {
                s.max_rounds = 50;
                l.max_rounds = 10;
            },
            "max_rounds",
            "max_rounds",
        );
        // A default above the ceiling is brought down to it; one asked for is refused.
        let (mut s, mut l) = (spec.clone(), limits.clone());
        s.max_rounds = 20;
        l.max_rounds = 10;
        let defaulted = Asked {
            default_rounds: true,
            ..Asked::default()
        };
        admit(&mut s, &l, &defaulted).unwrap();
        assert_eq!(s.max_rounds, 10);
        check(
            &|s, l| {
                s.sandbox.memory = Some(ByteSize(4 << 30));
                l.max_memory = Some(ByteSize(1 << 30));
            },
            "max_memory",
            "memory",
        );
        check(
            &|s, _| s.env = vec!["OPENAI_API_KEY".into()],
            "allowed_env",
            "env",
        );
    }

    #[test]
    fn docker_images_must_be_allowed_the_default_one_too() {
        let (_d, mut spec, mut limits) = setup();
        spec.sandbox.backend = ralph_sandbox::BackendKind::Docker;
        let r = admit(&mut spec.clone(), &limits, &Asked::default()).unwrap_err();
        assert_eq!((r.rule, r.field), ("allowed_images", "image"), "{r}");
        assert!(r.to_string().contains("ralph-agent-base:latest"), "{r}");
        limits.allowed_images = vec!["ralph-agent-base:latest".into()];
        admit(&mut spec.clone(), &limits, &Asked::default()).unwrap();
        spec.sandbox.image = Some("other:1".into());
        let r = admit(&mut spec, &limits, &Asked::default()).unwrap_err();
        assert_eq!(r.rule, "allowed_images", "{r}");
    }

    #[test]
    fn unset_limits_get_the_ceilings() {
        let (_d, mut spec, mut limits) = setup();
        limits.max_memory = Some(ByteSize(1 << 30));
        limits.max_pids = Some(256);
        limits.max_job_timeout = Some(HumanDuration(std::time::Duration::from_secs(600)));
        admit(&mut spec, &limits, &Asked::default()).unwrap();
        assert_eq!(spec.sandbox.memory, Some(ByteSize(1 << 30)));
        assert_eq!(spec.sandbox.pids, Some(256));
        assert_eq!(spec.job_timeout.map(|t| t.0.as_secs()), Some(600));
    }

    #[test]
    fn the_gateway_rules_are_named() {
        let (_d, spec, limits) = setup();
        let check = |f: &dyn Fn(&mut JobSpec, &mut Limits), rule: &str, field: &str| {
            let (mut s, mut l) = (spec.clone(), limits.clone());
            f(&mut s, &mut l);
            let r = admit(&mut s, &l, &Asked::default()).unwrap_err();
            assert_eq!((r.rule, r.field), (rule, field), "{r}");
        };
        check(
            &|s, _| s.model_access.api_key_env = Some("OPENAI_API_KEY".into()),
            "allowed_upstreams",
            "api_key_env",
        );
        check(
            &|s, _| s.model_access.upstream = Some("https://evil.example/v1".into()),
            "allowed_upstreams",
            "upstream",
        );
        check(
            &|s, l| {
                s.model_access.upstream = Some("b".into());
                l.allowed_upstreams = Some(vec!["a".into()]);
            },
            "allowed_upstreams",
            "upstream",
        );
        check(
            &|s, _| s.model_access.allow_hosts = vec!["example.com".into()],
            "allowed_hosts",
            "allow_host",
        );
        // `HOST` in the limits opens 80 and 443, not another port.
        check(
            &|s, l| {
                s.model_access.allow_hosts = vec!["example.com:22".into()];
                l.allowed_hosts = vec!["example.com".into()];
            },
            "allowed_hosts",
            "allow_host",
        );
        let (mut s, mut l) = (spec.clone(), limits.clone());
        s.model_access.allow_hosts = vec!["Example.com:443".into(), "pypi.org".into()];
        s.model_access.upstream = Some("a".into());
        l.allowed_hosts = vec![
            "example.com".into(),
            "pypi.org:80".into(),
            "pypi.org:443".into(),
        ];
        l.allowed_upstreams = Some(vec!["a".into()]);
        admit(&mut s, &l, &Asked::default()).unwrap();
    }

    /// Issue 26: a service job's set-up reads only the service variables `allowed_setup_env`
    /// lists; `allowed_env` (what rounds may get) does not open them.
    #[test]
    fn a_setup_env_name_must_be_allowed_for_set_ups() {
        let (_d, spec, limits) = setup();
        let (mut s, mut l) = (spec.clone(), limits.clone());
        let mut setup = crate::job::SetupSpec::new("npm ci");
        setup.env = vec!["NPM_TOKEN".into()];
        s.setup = Some(setup);
        l.allowed_env = vec!["NPM_TOKEN".into()];
        let r = admit(&mut s.clone(), &l, &Asked::default()).unwrap_err();
        assert_eq!((r.rule, r.field), ("allowed_setup_env", "setup_env"), "{r}");
        assert!(r.message.contains("`NPM_TOKEN`"), "{r}");
        l.allowed_setup_env = vec!["NPM_TOKEN".into()];
        admit(&mut s, &l, &Asked::default()).unwrap();
    }

    #[test]
    fn a_job_opts_into_private_addresses_only_where_the_server_does() {
        let (_d, spec, limits) = setup();
        let run = |asked: &[&str], allowed: &[&str]| {
            let (mut s, mut l) = (spec.clone(), limits.clone());
            s.model_access.allow_hosts = asked.iter().map(|h| (*h).to_owned()).collect();
            l.allowed_hosts = allowed.iter().map(|h| (*h).to_owned()).collect();
            admit(&mut s, &l, &Asked::default())
        };
        let r = run(&["pypi.corp=private"], &["pypi.corp"]).unwrap_err();
        assert_eq!((r.rule, r.field), ("allowed_hosts", "allow_host"));
        assert!(
            r.message.contains("`pypi.corp=private`")
                && r.message.contains("allowed without `=private`"),
            "{r}"
        );
        let r = run(&["pypi.corp:443=private"], &["pypi.corp:80=private"]).unwrap_err();
        assert!(!r.message.contains("without `=private`"), "{r}");
        run(&["pypi.corp=private"], &["PyPI.corp=private"]).unwrap();
        run(&["pypi.corp:443=private"], &["pypi.corp=private"]).unwrap();
        // A job may ask for less than the server allows.
        run(&["pypi.corp"], &["pypi.corp=private"]).unwrap();
        // An address allowed by number is its own entry, whatever a name's opt-in.
        assert!(run(&["10.1.2.3:3141"], &["pypi.corp:3141=private"]).is_err());
        run(&["10.1.2.3:3141"], &["10.1.2.3:3141"]).unwrap();
    }
}
