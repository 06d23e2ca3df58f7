//! `ralph completions SHELL`: a completion script for bash, zsh, fish, elvish or PowerShell on
//! stdout, generated from the same clap definitions the parser uses (so it never drifts).

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use super::exit::Exit;
use super::{Cli, CliError};

/// `ralph completions` flags.
#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_name = "SHELL")]
    pub shell: Shell,
}

/// Prints the script.
pub fn execute(args: &CompletionsArgs) -> Result<Exit, CliError> {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "ralph", &mut out);
    super::stdout::write(&String::from_utf8_lossy(&out));
    Ok(Exit::Complete)
}
