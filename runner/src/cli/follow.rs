//! `ralph logs JOB --round K --follow`: a round's captured output given to the caller as it is
//! written, until that attempt (or the verify run) ends; a round not started yet is waited for.

use ralph_runner::client::{Client, ClientError};

/// Gives `each` the followed log's chunks as they arrive and returns when it has ended.
pub async fn round_logs(
    client: &Client,
    id: &str,
    round: u32,
    attempt: u32,
    stream: &str,
    each: &mut dyn FnMut(&[u8]),
) -> Result<(), ClientError> {
    client
        .logs_follow(id, round, attempt, stream, |chunk| each(chunk))
        .await
}
