//! `ralph token create|revoke|list`: the service's named API tokens (an `admin` token is needed).

use clap::{Args, Subcommand};
use serde_json::Value;

use super::CliError;
use super::client_cmds::{ServerArgs, client_error, runtime};
use super::exit::Exit;
use super::stdout::outln;

/// `ralph token ...`
#[derive(Subcommand, Debug)]
pub enum TokenCommand {
    /// Make a token with scopes; it is printed once (the server keeps only its hash).
    Create(CreateArgs),
    /// Revoke a token made with `ralph token create`.
    Revoke(NameArgs),
    /// List the tokens (names, scopes, where they come from; never the tokens).
    List(ListArgs),
}

/// `ralph token create` flags.
#[derive(Args, Debug)]
pub struct CreateArgs {
    /// The token's name (a-z, 0-9, `-`, `_`, `.`): recorded as `submitted_by` on its jobs.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// What it may do: read, submit, cancel, admin (repeatable, or comma-separated).
    #[arg(
        long = "scope",
        value_name = "SCOPE",
        value_delimiter = ',',
        required = true
    )]
    pub scopes: Vec<String>,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// `ralph token revoke` flags.
#[derive(Args, Debug)]
pub struct NameArgs {
    /// The token's name.
    #[arg(value_name = "NAME")]
    pub name: String,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// `ralph token list` flags.
#[derive(Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub server: ServerArgs,
}

fn scopes_of(v: &Value) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// Runs `ralph token ...`.
pub fn execute(cmd: TokenCommand) -> Result<Exit, CliError> {
    let rt = runtime()?;
    match cmd {
        TokenCommand::Create(a) => {
            for s in &a.scopes {
                s.parse::<ralph_runner::service::scope::Scope>()
                    .map_err(|e| CliError::usage(format!("--scope: {e}")))?;
            }
            let client = a.server.client()?;
            let r = rt
                .block_on(client.token_create(&a.name, &a.scopes))
                .map_err(client_error)?;
            if a.server.json {
                outln!("{r}");
            } else {
                eprintln!(
                    "token `{}` created with scopes {}; it is shown only now:",
                    a.name,
                    scopes_of(&r["scopes"])
                );
                outln!("{}", r["token"].as_str().unwrap_or(""));
            }
        }
        TokenCommand::Revoke(a) => {
            let client = a.server.client()?;
            let r = rt
                .block_on(client.token_revoke(&a.name))
                .map_err(client_error)?;
            if a.server.json {
                outln!("{r}");
            } else {
                outln!("token `{}` revoked", a.name);
            }
        }
        TokenCommand::List(a) => {
            let client = a.server.client()?;
            let r = rt.block_on(client.tokens()).map_err(client_error)?;
            if a.server.json {
                outln!("{r}");
            } else {
                outln!("{:<24} {:<28} SOURCE", "NAME", "SCOPES");
                for t in r["tokens"].as_array().into_iter().flatten() {
                    outln!(
                        "{:<24} {:<28} {}",
                        t["name"].as_str().unwrap_or("?"),
                        scopes_of(&t["scopes"]),
                        t["source"].as_str().unwrap_or("?")
                    );
                }
            }
        }
    }
    Ok(Exit::Complete)
}
