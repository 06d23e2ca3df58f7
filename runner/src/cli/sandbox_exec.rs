//! `ralph sandbox exec`: one command run the way a round would, in this process (no runtime,
//! no threads), with its exit status passed through (69: no sandbox, 124: timeout, 130: cancel).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use clap::Args;
use ralph_runner::engine::{RunnerEnv, env};
use ralph_runner::job::paths::SandboxPaths;
use ralph_runner::util::units::HumanDuration;
use ralph_sandbox::native::{NativeBackend, exec_inline};
use ralph_sandbox::outcome::EndedBy;
use ralph_sandbox::outcome::git::GitCheck;
use ralph_sandbox::{
    BackendKind, ErrorClass, ExecSpec, Network, PrivateDirs, SandboxRequest, StderrMode, StdinMode,
};

use super::CliError;
use super::exit::Exit;
use super::sandbox_args::SandboxArgs;

/// `ralph sandbox exec` flags.
#[derive(Args, Debug)]
pub struct ExecArgs {
    /// The workspace (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// Wall-clock limit; the whole tree is killed when it passes (exit 124).
    #[arg(long, value_name = "DUR")]
    pub timeout: Option<HumanDuration>,
    /// Time between SIGTERM and SIGKILL when the tree is stopped.
    #[arg(long, value_name = "DUR", default_value = "2s")]
    pub kill_grace: HumanDuration,
    /// Run as root: the user the command runs as when the workspace is root's (NAME, UID or
    /// UID:GID; default ralph-agent, else nobody).
    #[arg(long, value_name = "USER")]
    pub agent_user: Option<String>,
    /// Pass this variable of the environment to the command; repeatable.
    #[arg(long = "env", value_name = "NAME")]
    pub env: Vec<String>,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD", value_parser = clap::value_parser!(std::ffi::OsString))]
    pub command: Vec<std::ffi::OsString>,
}

/// The command line as text (the sandbox takes a command's arguments as UTF-8); an argument
/// that is not is named, by position and with its bytes escaped.
fn command_text(command: Vec<std::ffi::OsString>) -> Result<Vec<String>, CliError> {
    command
        .into_iter()
        .enumerate()
        .map(|(i, a)| {
            a.into_string().map_err(|a| {
                CliError::usage(format!(
                    "CMD: argument {} of the command, {a:?}, is not UTF-8: the sandbox takes a command's arguments as text; pass the name through a glob or a variable the command expands itself, or rename it",
                    i + 1
                ))
            })
        })
        .collect()
}

/// One stderr line per git repository the git check made safe; their originals are moved out of
/// the private directory (removed when this command ends) into a kept one under the system's
/// temporary directory.
fn report_git(git: &mut GitCheck, private_dir: &Path) {
    let from = private_dir.join("sanitized");
    if git.counts.total() > 0 && from.is_dir() {
        match keep_originals(&from) {
            Ok(kept) => {
                for s in &mut git.sanitized {
                    if let Some(o) = &s.originals {
                        if let Ok(rest) = o.strip_prefix(&from) {
                            s.originals = Some(kept.join(rest));
                        }
                    }
                }
            }
            Err(e) => eprintln!(
                "ralph: warning: the originals of the sanitized git repositories could not be kept: {e}"
            ),
        }
    }
    for s in &git.sanitized {
        eprintln!(
            "ralph: a git repository the command created or changed was made safe for the host's git: {s}"
        );
    }
    let more = git.counts.total() as usize - git.sanitized.len().min(git.counts.total() as usize);
    if more > 0 {
        eprintln!("ralph: and {more} more git repositories were made safe");
    }
    if let Some(u) = &git.unchecked {
        eprintln!("ralph: warning: {u}");
    }
}

/// Copies the originals at `from` (a tree of plain files and directories the git check wrote)
/// into a new directory that outlives this command.
fn keep_originals(from: &Path) -> std::io::Result<PathBuf> {
    let to = tempfile::Builder::new()
        .prefix("ralph-sanitized-")
        .tempdir()?
        .keep();
    copy_tree(from, &to)?;
    Ok(to)
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let kind = e.file_type()?;
        if kind.is_dir() {
            std::fs::DirBuilder::new().mode(0o700).create(&dst)?;
            copy_tree(&src, &dst)?;
        } else if kind.is_file() {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}

/// Runs `ralph sandbox exec`.
pub fn execute(args: ExecArgs) -> Result<Exit, CliError> {
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::internal(format!("failed to read the current directory: {e}")))?;
    let SandboxPaths {
        workspace,
        read,
        write,
        sockets,
    } = args
        .sandbox
        .resolved_paths(args.workspace.as_deref().unwrap_or(&cwd), &cwd)?;
    let mode = args
        .sandbox
        .mode
        .unwrap_or(ralph_sandbox::Mode::WorkspaceWrite);
    // The trees the command may write, marked for the path rule of later runs (no store here).
    if mode != ralph_sandbox::Mode::ReadOnly {
        ralph_runner::job::tree_mark::mark_all(
            std::iter::once(workspace.as_path()).chain(write.iter().map(PathBuf::as_path)),
        );
    }
    let backend = args.sandbox.backend.unwrap_or_default();
    // The private HOME and TMPDIR live only as long as the command: on tmpfs when there is one
    // (natively; a container gets them under the host's TMPDIR, mounted at the same path).
    let shm = std::path::Path::new("/dev/shm");
    let scratch = [shm, &std::env::temp_dir()]
        .into_iter()
        .filter(|d| backend == BackendKind::Native || *d != shm)
        .find(|d| nix::unistd::access(*d, nix::unistd::AccessFlags::W_OK).is_ok())
        .map(std::path::Path::to_path_buf)
        .unwrap_or_else(std::env::temp_dir);
    let private = tempfile::Builder::new()
        .prefix("ralph-sandbox-")
        .tempdir_in(&scratch)
        .map_err(|e| CliError::internal(format!("failed to create a private directory: {e}")))?;
    // Canonical: the docker backend refuses to mount a path that runs through a symlink.
    let private_dir = std::fs::canonicalize(private.path()).map_err(|e| {
        CliError::internal(format!(
            "failed to resolve `{}`: {e}",
            private.path().display()
        ))
    })?;
    let (home, tmp) = (private_dir.join("home"), private_dir.join("tmp"));
    for d in [&home, &tmp] {
        std::fs::create_dir(d)
            .map_err(|e| CliError::internal(format!("failed to create `{}`: {e}", d.display())))?;
    }
    // `--allow-host`: the gateway network, with the egress proxy this process serves.
    let allow = args
        .sandbox
        .allow_host
        .iter()
        .map(|h| {
            h.parse::<ralph_runner::gateway::AllowHost>()
                .map_err(|e| CliError::usage(format!("--allow-host: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let network = match (args.sandbox.network, allow.is_empty()) {
        (None, false) => Some(Network::Gateway),
        (Some(n), false) if n != Network::Gateway => {
            return Err(CliError::usage(format!(
                "--allow-host works through the runner's egress proxy: use --network gateway (the default with --allow-host), not --network {n}"
            )));
        }
        (n, _) => n,
    };
    let argv = command_text(args.command)?;
    // A round's environment is text: a workspace whose path is not is left unnamed rather than
    // named wrongly.
    let vars: Vec<(&str, String)> = match workspace.to_str() {
        Some(w) => vec![("RALPH_WORKSPACE", w.to_owned())],
        None => {
            eprintln!(
                "ralph: RALPH_WORKSPACE is not set: the workspace {workspace:?} is not UTF-8"
            );
            Vec::new()
        }
    };
    let proxy: Vec<(String, String)> = if allow.is_empty() {
        Vec::new()
    } else {
        ralph_runner::gateway::proxy_env(super::sandbox_gateway::EGRESS_PORT, &allow)
    };
    let env = env::build_with(&RunnerEnv::capture(), &home, &tmp, &args.env, &vars, &proxy)
        .map_err(|e| CliError::usage(e.to_string()))?;
    let cwd = if cwd.starts_with(&workspace) {
        cwd
    } else {
        workspace.clone()
    };
    let limits = args.sandbox.limits();
    let spec = ExecSpec {
        argv,
        cwd,
        env,
        // Never a terminal: a command holding one could push input into it (TIOCSTI is refused
        // by the filter as well) or read what the user types next.
        stdin: if std::io::stdin().is_terminal() {
            StdinMode::Null
        } else {
            StdinMode::Inherit
        },
        stderr: StderrMode::Separate,
        timeout: args.timeout.map(|t| t.0),
        kill_grace: args.kill_grace.0,
        sandbox: SandboxRequest {
            mode,
            network,
            workspace,
            protect: args.sandbox.protect,
            read,
            write,
            sockets,
            private: PrivateDirs {
                home,
                tmp,
                readable: Vec::new(),
                writable: Vec::new(),
                report: None,
            },
            limits,
            image: args.sandbox.image,
            forbidden: Vec::new(),
            agent_user: args.agent_user,
            gateway_ports: if allow.is_empty() {
                Vec::new()
            } else {
                vec![super::sandbox_gateway::EGRESS_PORT]
            },
        },
        control_dir: private_dir.clone(),
        listings: None,
        protected_copies: None,
        layers: None,
    };
    // One command, one mode: only that mode's policy is read.
    let policies = ralph_sandbox::policy::PolicySet::lazy(Some(&super::sandbox_args::config_dir()));
    let result = match backend {
        BackendKind::Native if !allow.is_empty() => super::sandbox_gateway::exec(
            &NativeBackend::new("/proc/self/exe", policies),
            &spec,
            allow,
        ),
        BackendKind::Native => exec_inline(&NativeBackend::new("/proc/self/exe", policies), &spec),
        BackendKind::Docker => super::sandbox_docker::exec(policies, &spec),
    };
    let mut result = result;
    if let Ok(outcome) = &mut result {
        for v in &outcome.violations {
            eprintln!("ralph: the command left what the sandbox forbids (undone): {v}");
        }
        report_git(&mut outcome.git, &private_dir);
    }
    match result {
        Ok(outcome) => Ok(match outcome.ended_by {
            EndedBy::Timeout => Exit::Timeout,
            EndedBy::Cancel | EndedBy::RunnerGone => Exit::Cancelled,
            EndedBy::Exit | EndedBy::MemoryLimit => {
                return Ok(Exit::Raw(
                    u8::try_from(outcome.termination.shell_code()).unwrap_or(255),
                ));
            }
        }),
        Err(e) => Err(CliError {
            exit: match e.class() {
                ErrorClass::Unavailable => Exit::SandboxUnavailable,
                ErrorClass::Usage => Exit::Usage,
                ErrorClass::Internal => Exit::Internal,
            },
            message: e.to_string(),
        }),
    }
}
