//! The command line: argument structs and dispatch. Each subcommand lives in its own file and
//! calls into the library; nothing here decides how a job runs.

pub mod abs_path;
pub mod agent_cmd;
pub mod batch_cmd;
pub mod ci_files;
pub mod ci_pause;
pub mod client_cmds;
pub mod completions;
pub mod diff;
pub mod doctor;
mod doctor_disk;
pub mod exit;
mod fast_parse;
pub mod follow;
pub mod job_args;
pub mod job_source;
pub mod live_output;
pub mod man;
pub mod progress;
pub mod prune;
pub mod round_view;
pub mod run;
pub mod sandbox_args;
pub mod sandbox_docker;
pub mod sandbox_exec;
pub mod sandbox_gateway;
pub mod serve;
pub mod state_dir;
pub mod stdout;
pub mod tls_cmd;
pub mod token_cmd;
pub mod upload;

use clap::{Parser, Subcommand};

use exit::Exit;

/// `ralph --version`: the version, the commit it was built from, and the sandbox backends built
/// in (what this host can use is `ralph doctor`'s answer).
const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\ncommit: ",
    env!("RALPH_BUILD_COMMIT"),
    " (",
    env!("RALPH_BUILD_DATE"),
    ")\nbackends: native (Landlock, seccomp, namespaces, cgroups), docker (Engine API 1.41+)",
    "\nstore: sqlite (embedded), postgresql",
);

/// ralph runs AI coding-agent work as fresh sandboxed processes on a shared workspace.
#[derive(Parser, Debug)]
#[command(
    name = "ralph",
    version,
    long_version = LONG_VERSION,
    about,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run one job in the foreground (for CI): rounds until complete, blocked or out of budget.
    Run(Box<run::RunArgs>),
    /// Sandbox tools.
    #[command(subcommand)]
    Sandbox(SandboxCommand),
    /// Check what this host supports (Landlock, seccomp, namespaces, cgroups, Docker).
    Doctor(doctor::DoctorArgs),
    /// Run the service: a job queue with an HTTP API.
    Serve(serve::ServeArgs),
    /// Submit jobs to a server (a job file with one or many jobs, or job flags).
    Submit(Box<client_cmds::SubmitArgs>),
    /// List a server's jobs (or a local store's, with --state-dir).
    Jobs(client_cmds::JobsArgs),
    /// Show one job.
    Show(client_cmds::ShowArgs),
    /// Print a provisioned job's result.patch (a job with `repo`).
    Diff(diff::DiffArgs),
    /// Print a job's journal (or a round's output with --round).
    Logs(client_cmds::LogsArgs),
    /// Cancel a job (a running round's processes are stopped).
    Cancel(client_cmds::JobRef),
    /// Re-arm an interrupted, cancelled, failed or errored job with its remaining budget, or a
    /// budget-limited one with the cap it ran out of raised (--max-rounds, --max-tokens,
    /// --job-timeout).
    Resume(client_cmds::ResumeArgs),
    /// Wait for a job and exit with its outcome code.
    Wait(client_cmds::WaitArgs),
    /// A batch (several jobs submitted at once): its summary, or its failed jobs run again.
    #[command(subcommand)]
    Batch(batch_cmd::BatchCommand),
    /// The service's API tokens: create one with scopes, revoke one, list them (admin).
    #[command(subcommand)]
    Token(token_cmd::TokenCommand),
    /// TLS for `ralph serve`: `ralph tls init` writes a CA, a server and client certificates.
    #[command(subcommand)]
    Tls(tls_cmd::TlsCommand),
    /// The agent presets (`--agent NAME`): list them, show what one runs.
    #[command(subcommand)]
    Agent(agent_cmd::AgentCommand),
    /// Remove the artifacts of jobs that finished more than --older-than ago (the journal stays).
    Prune(prune::PruneArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(completions::CompletionsArgs),
    /// Print the man page ralph(1), or write every page with --dir.
    Man(man::ManArgs),
}

/// `ralph sandbox ...`
#[derive(Subcommand, Debug)]
pub enum SandboxCommand {
    /// Run one command the way a round would; exits with its status (69: no sandbox, 124: timeout).
    Exec(Box<sandbox_exec::ExecArgs>),
}

/// A failure reported by a command, with its exit code.
#[derive(Debug)]
pub struct CliError {
    /// The exit code.
    pub exit: Exit,
    /// The message (printed after `ralph: `).
    pub message: String,
}

impl CliError {
    /// A usage or configuration error (64).
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            exit: Exit::Usage,
            message: message.into(),
        }
    }

    /// An internal error (70).
    pub fn internal(message: impl Into<String>) -> Self {
        Self {
            exit: Exit::Internal,
            message: message.into(),
        }
    }
}

/// Whether the command line asks for JSON output (`--json` before any `--`). Known before it
/// parses, so a usage error can be machine-readable too.
fn wants_json() -> bool {
    std::env::args_os()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json")
}

/// Prints a failure as `{"error":{…}}` on stdout (SPEC §6: `--json` reports usage errors too).
fn print_json_error(exit: Exit, message: &str) {
    let v = serde_json::json!({
        "error": {
            "kind": exit.name(),
            "exit_code": exit.code(),
            "message": message,
        }
    });
    stdout::line(format_args!(
        "{}",
        ralph_runner::util::terminal::json(&v, false)
    ));
}

/// Whether `command` prints job data (a job's messages, reports, output, or errors quoting
/// them), around which GitHub Actions' workflow commands are paused ([`ci_pause`]).
fn prints_job_text(command: &Command) -> bool {
    match command {
        Command::Run(_)
        | Command::Submit(_)
        | Command::Jobs(_)
        | Command::Show(_)
        | Command::Diff(_)
        | Command::Logs(_)
        | Command::Cancel(_)
        | Command::Resume(_)
        | Command::Batch(_)
        | Command::Wait(_) => true,
        Command::Sandbox(_)
        | Command::Doctor(_)
        | Command::Serve(_)
        | Command::Token(_)
        | Command::Tls(_)
        | Command::Agent(_)
        | Command::Prune(_)
        | Command::Completions(_)
        | Command::Man(_) => false,
    }
}

/// What the parser words as "invalid UTF-8 was detected in one or more arguments", naming the
/// argument: the first one that is not UTF-8, by position, with its bytes escaped, and the
/// argument before it (the flag it is most likely the value of).
fn not_utf8_argument(args: &[std::ffi::OsString]) -> Option<String> {
    let (i, bad) = args
        .iter()
        .enumerate()
        .skip(1)
        .find(|(_, a)| a.to_str().is_none())?;
    let after = args
        .get(i - 1)
        .filter(|_| i > 1)
        .and_then(|p| p.to_str())
        .map(|p| format!(" (after `{}`)", p.escape_debug()))
        .unwrap_or_default();
    Some(format!(
        "argument {i}, {bad:?}{after}, is not UTF-8: ralph takes it as text; give it in UTF-8"
    ))
}

/// Parses the command line and runs the command.
pub fn main() -> std::process::ExitCode {
    let json = wants_json();
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let parsed = match fast_parse::parse(&args) {
        Some(command) => Ok(Cli { command }),
        None => Cli::try_parse_from(&args),
    };
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            let code = match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    Exit::Complete
                }
                _ => Exit::Usage,
            };
            if e.kind() == clap::error::ErrorKind::InvalidUtf8
                && let Some(message) = not_utf8_argument(&args)
            {
                if json {
                    print_json_error(code, &message);
                }
                eprintln!("ralph: {message}");
                return code.into();
            }
            if json && code == Exit::Usage {
                let text = e.render().to_string();
                let message = text
                    .lines()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("usage error")
                    .trim_start_matches("error: ")
                    .to_owned();
                print_json_error(code, &message);
            }
            let _ = e.print();
            return code.into();
        }
    };
    if !matches!(cli.command, Command::Serve(_)) {
        // Library events reach stderr only when RUST_LOG asks (`ralph serve` sets up its own).
        if let Err(e) = ralph_runner::logging::init_if_asked() {
            eprintln!("ralph: warning: {e}; no log");
        }
    }
    let paused = ci_pause::Paused::start(
        prints_job_text(&cli.command),
        ralph_runner::util::ci_log::CiEnv::current(),
    );
    let result = match cli.command {
        Command::Run(args) => run::execute(*args),
        Command::Sandbox(SandboxCommand::Exec(args)) => sandbox_exec::execute(*args),
        Command::Doctor(args) => doctor::execute(args),
        Command::Serve(args) => serve::execute(args),
        Command::Submit(args) => client_cmds::submit(*args),
        Command::Jobs(args) => client_cmds::jobs(args),
        Command::Show(args) => client_cmds::show(args),
        Command::Diff(args) => diff::execute(args),
        Command::Logs(args) => client_cmds::logs(args),
        Command::Cancel(args) => client_cmds::cancel(args),
        Command::Resume(args) => client_cmds::resume(args),
        Command::Wait(args) => client_cmds::wait(args),
        Command::Batch(cmd) => batch_cmd::execute(cmd),
        Command::Token(cmd) => token_cmd::execute(cmd),
        Command::Tls(cmd) => tls_cmd::execute(cmd),
        Command::Agent(cmd) => agent_cmd::execute(&cmd),
        Command::Prune(args) => prune::execute(args),
        Command::Completions(args) => completions::execute(&args),
        Command::Man(args) => man::execute(&args),
    };
    let code = match result {
        Ok(exit) => exit.into(),
        Err(e) => {
            if json {
                print_json_error(e.exit, &e.message);
            }
            // Errors quote what they failed on: a job's message, a server's answer, a path.
            eprintln!(
                "{}",
                ralph_runner::util::terminal::line(&format!("ralph: {}", e.message))
            );
            e.exit.into()
        }
    };
    drop(paused);
    code
}

#[cfg(test)]
mod output_tests;
