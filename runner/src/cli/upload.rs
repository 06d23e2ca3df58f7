//! `ralph submit --upload DIR`: the directory packed ([`ralph_runner::provision::untar::pack`],
//! `.git` included, symlinks as links) and streamed to `POST /v1/uploads`, then every job of
//! the submission named after the upload (`upload = ID`). A job that names its own
//! `workspace`, `repo` or `upload` is refused before anything is sent.

use std::path::Path;

use ralph_runner::client::Client;
use ralph_runner::job::request::JobRequest;
use serde_json::Value;

use super::CliError;
use super::client_cmds::{client_error, runtime};

/// A size for people: bytes, KiB, MiB or GiB with one decimal.
fn size(bytes: u64) -> String {
    const UNITS: [&str; 3] = ["KiB", "MiB", "GiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = UNITS[0];
    for u in UNITS.iter().skip(1) {
        if value < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = u;
    }
    format!("{value:.1} {unit}")
}

/// Judges what the jobs ask against the server's ceilings (`GET /v1/limits`) before anything
/// is uploaded (SPEC §11): a refusal then costs no upload. A default is never sent (the server
/// brings its default down to its ceiling); a server without the endpoint judges on submit.
fn within_limits(client: &Client, requests: &[JobRequest]) -> Result<(), CliError> {
    let Some(limits) = runtime()?.block_on(client.limits()).map_err(client_error)? else {
        return Ok(());
    };
    for (i, r) in requests.iter().enumerate() {
        let checks = [
            (
                "max_rounds",
                r.max_rounds.map(u64::from),
                limits["max_rounds"].as_u64(),
            ),
            (
                "handoff_cap",
                r.handoff_cap.map(|b| b.0),
                limits["max_handoff_cap"].as_u64(),
            ),
        ];
        for (field, asked, ceiling) in checks {
            if let (Some(asked), Some(ceiling)) = (asked, ceiling)
                && asked > ceiling
            {
                return Err(CliError::usage(format!(
                    "job[{i}].{field}: {asked} is over the server's ceiling of {ceiling}; nothing was uploaded"
                )));
            }
        }
    }
    Ok(())
}

/// Checks that no job names its own workspace, uploads `dir` (relative to `cwd`) and names the
/// upload in every job; returns the server's answer about the upload.
pub(super) fn upload(
    client: &Client,
    dir: &Path,
    cwd: &Path,
    requests: &mut [JobRequest],
) -> Result<Value, CliError> {
    for (i, r) in requests.iter().enumerate() {
        let field = if r.workspace.is_some() {
            "workspace"
        } else if r.repo.is_some() {
            "repo"
        } else if r.upload.is_some() {
            "upload"
        } else {
            continue;
        };
        return Err(CliError::usage(format!(
            "job[{i}].{field}: --upload gives every job of the submission its workspace; remove `{field}` from the job or drop --upload"
        )));
    }
    let dir = super::abs_path::absolute(cwd, dir);
    match std::fs::metadata(&dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(CliError::usage(format!(
                "--upload `{}`: expected a directory",
                dir.display()
            )));
        }
        Err(e) => {
            return Err(CliError::usage(format!(
                "--upload `{}`: {e}",
                dir.display()
            )));
        }
    }
    within_limits(client, requests)?;
    let answer = runtime()?
        .block_on(client.upload(&dir))
        .map_err(client_error)?;
    let Some(id) = answer["upload"].as_str() else {
        return Err(CliError::internal(format!(
            "unreadable answer from the server: no upload id in {answer}"
        )));
    };
    eprintln!(
        "{}",
        ralph_runner::util::terminal::line(&format!(
            "ralph: uploaded `{}`: {} entries, {} (upload {id})",
            dir.display(),
            answer["files"].as_u64().unwrap_or(0),
            size(answer["bytes"].as_u64().unwrap_or(0)),
        ))
    );
    for r in requests.iter_mut() {
        r.upload = Some(id.to_owned());
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_like_people_write_them() {
        assert_eq!(size(10), "10 bytes");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(3 << 30), "3.0 GiB");
    }
}
