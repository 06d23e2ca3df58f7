//! `ralph tls init`: a private CA, the server's certificate and client certificates for mutual
//! TLS, written into one directory (the library's [`ralph_runner::service::tls_init`]), and the
//! configuration lines that use them.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use ralph_runner::service::tls_init::{self, Request, TlsInitError};

use super::CliError;
use super::exit::Exit;
use super::stdout::outln;

/// `ralph tls ...`
#[derive(Subcommand, Debug)]
pub enum TlsCommand {
    /// Write a CA, a server certificate and client certificates (mutual TLS) into --dir.
    Init(InitArgs),
}

/// `ralph tls init` flags.
#[derive(Args, Debug)]
pub struct InitArgs {
    /// The directory to write into (made with mode 0700; no file in it may exist yet).
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// A host name or IP address clients reach the server by (repeatable, or comma-separated).
    #[arg(
        long = "name",
        value_name = "HOST",
        value_delimiter = ',',
        required = true
    )]
    pub names: Vec<String>,
    /// A client certificate to make, written as NAME.pem and NAME-key.pem (repeatable).
    #[arg(long = "client", value_name = "NAME", default_value = "client")]
    pub clients: Vec<String>,
    /// Days the server and client certificates are valid (the CA: 3650).
    #[arg(long, value_name = "N", default_value_t = 825)]
    pub days: u32,
}

fn shown(p: &Path) -> String {
    ralph_runner::util::terminal::line(&p.display().to_string())
}

/// Runs `ralph tls ...`.
pub fn execute(cmd: TlsCommand) -> Result<Exit, CliError> {
    let TlsCommand::Init(a) = cmd;
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::internal(format!("failed to read the current directory: {e}")))?;
    let dir = super::abs_path::absolute(&cwd, &a.dir);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let request = Request {
        names: a.names,
        clients: a.clients,
        days: a.days,
        now,
    };
    let fail = |e: TlsInitError| match e {
        TlsInitError::Generate { .. } | TlsInitError::Write { .. } => {
            CliError::internal(e.to_string())
        }
        TlsInitError::NoName
        | TlsInitError::BadName { .. }
        | TlsInitError::BadClient { .. }
        | TlsInitError::BadDays { .. }
        | TlsInitError::Exists { .. } => CliError::usage(e.to_string()),
    };
    let pki = tls_init::generate(&request).map_err(fail)?;
    let written = tls_init::write(&dir, &pki).map_err(fail)?;
    eprintln!(
        "ralph: wrote a CA, a server certificate for {} and {} client certificate(s) into `{}`:",
        request.names.join(", "),
        request.clients.len(),
        shown(&dir)
    );
    for p in &written {
        eprintln!("  {}", shown(p));
    }
    let f = |name: &str| shown(&dir.join(name));
    outln!(
        "# In the service config (mutual TLS: drop client_ca to accept clients without a certificate):"
    );
    outln!("tls_cert = \"{}\"", f("server.pem"));
    outln!("tls_key = \"{}\"", f("server-key.pem"));
    outln!("client_ca = \"{}\"", f("ca.pem"));
    for c in &request.clients {
        outln!(
            "# Client `{c}`: --ca-file {} --client-cert {} --client-key {}",
            f("ca.pem"),
            f(&format!("{c}.pem")),
            f(&format!("{c}-key.pem"))
        );
    }
    outln!(
        "# Keep ca-key.pem offline: it signs more client certificates (docs/operations.md, TLS)."
    );
    Ok(Exit::Complete)
}
