//! `ralph logs JOB --round K --follow`: a round's captured output printed as it is written,
//! until that attempt (or the verify run) ends; a round not started yet is waited for.

use ralph_runner::client::{Client, ClientError};

/// Prints the followed log on stdout (as captured, like `ralph logs --round` without
/// `--follow`) and returns when it has ended.
pub async fn round_logs(
    client: &Client,
    id: &str,
    round: u32,
    attempt: u32,
    stream: &str,
) -> Result<(), ClientError> {
    client
        .logs_follow(id, round, attempt, stream, |chunk| {
            super::stdout::write_bytes(chunk);
        })
        .await
}
