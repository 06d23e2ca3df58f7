//! `ralph serve`: the long-running service (see `ralph_runner::service`).

use std::path::PathBuf;

use clap::Args;
use ralph_runner::service::{ServeOptions, Service, config};

use super::CliError;
use super::exit::Exit;

/// `ralph serve` flags.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Configuration file (default /etc/ralph/config.toml; missing means defaults).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// TCP address to listen on (overrides `listen`; "" for the unix socket only).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// State directory (overrides `state_dir`; default /var/lib/ralph).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// The log on stderr: text (a line per event) or json (an object per line); overrides
    /// `log_format`. RUST_LOG sets the levels (default info).
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<ralph_runner::logging::LogFormat>,
    /// Print the commented default configuration and exit.
    #[arg(long)]
    pub print_default_config: bool,
}

/// Runs `ralph serve`.
pub fn execute(args: ServeArgs) -> Result<Exit, CliError> {
    if args.print_default_config {
        super::stdout::write(config::DEFAULT_CONFIG);
        return Ok(Exit::Complete);
    }
    let explicit = args.config.is_some();
    let config_path = args
        .config
        .unwrap_or_else(|| PathBuf::from(config::DEFAULT_PATH));
    let policy_dir = std::env::var_os("RALPH_CONFIG_DIR")
        .map(PathBuf::from)
        .or_else(|| config_path.parent().map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/etc/ralph"));
    let format = match args.log_format {
        Some(f) => f,
        None => {
            config::ServiceConfig::load(&config_path, explicit)
                .map_err(|e| CliError::usage(e.to_string()))?
                .log_format
        }
    };
    ralph_runner::logging::init(format).map_err(|e| CliError::usage(e.to_string()))?;
    let options = ServeOptions {
        config_path,
        explicit_config: explicit,
        listen: args.listen,
        state_dir: args.state_dir,
        policy_dir,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::internal(format!("failed to start the runtime: {e}")))?;
    rt.block_on(async {
        let svc = Service::start(options).map_err(|e| CliError::usage(e.to_string()))?;
        svc.serve()
            .await
            .map_err(|e| CliError::internal(e.to_string()))
    })?;
    Ok(Exit::Complete)
}
