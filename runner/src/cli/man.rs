//! `ralph man`: roff man pages generated from the same clap definitions the parser uses, so they
//! never drift from the CLI. Without `--dir` it prints `ralph(1)`; with `--dir DIR` it writes
//! `ralph.1` and one page per command (`ralph-run.1`, `ralph-sandbox-exec.1`, …) into DIR.

use std::path::{Path, PathBuf};

use clap::{Args, CommandFactory};

use super::exit::Exit;
use super::{Cli, CliError};

/// `ralph man` flags.
#[derive(Args, Debug)]
pub struct ManArgs {
    /// Write every page into this directory (created if missing) instead of printing ralph(1).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Renders one page.
fn render(cmd: clap::Command) -> Result<Vec<u8>, CliError> {
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut out)
        .map_err(|e| CliError::internal(format!("failed to render a man page: {e}")))?;
    Ok(out)
}

/// Every page: `ralph` and, recursively, each visible subcommand. A built command names its
/// subcommands `ralph-run`, `ralph-sandbox-exec` (display name) and `ralph run` (bin name).
fn pages(cmd: &clap::Command, out: &mut Vec<(String, clap::Command)>) {
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        pages(sub, out);
    }
    let name = cmd
        .get_display_name()
        .unwrap_or_else(|| cmd.get_name())
        .to_owned();
    out.push((name, cmd.clone()));
}

fn write_pages(dir: &Path) -> Result<usize, CliError> {
    std::fs::create_dir_all(dir).map_err(|e| {
        CliError::usage(format!(
            "failed to create the man page directory {}: {e}",
            dir.display()
        ))
    })?;
    let mut all = Vec::new();
    let mut root = Cli::command();
    root.build();
    pages(&root, &mut all);
    for (name, cmd) in &all {
        let path = dir.join(format!("{name}.1"));
        let page = render(cmd.clone())?;
        std::fs::write(&path, page)
            .map_err(|e| CliError::usage(format!("failed to write {}: {e}", path.display())))?;
    }
    Ok(all.len())
}

/// Prints ralph(1), or writes every page.
pub fn execute(args: &ManArgs) -> Result<Exit, CliError> {
    match &args.dir {
        Some(dir) => {
            let n = write_pages(dir)?;
            eprintln!("ralph: wrote {n} man pages to {}", dir.display());
        }
        None => {
            let page = render(Cli::command())?;
            super::stdout::write(&String::from_utf8_lossy(&page));
        }
    }
    Ok(Exit::Complete)
}
