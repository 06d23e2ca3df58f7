//! The container's standard streams: its multiplexed output into the run's sinks, and this
//! process's own stdin into it (for `ralph sandbox exec`).

use std::io::Read;

use bollard::container::LogOutput;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

use crate::capture::OutputSink;
use crate::outcome::CaptureSummary;

/// Copies this process's stdin into the container (a thread reads it: a blocking read of a
/// terminal must not hold up the runtime).
pub async fn forward_own_stdin(mut input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>) {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
    let spawned = std::thread::Builder::new()
        .name("ralph-stdin".into())
        .spawn(move || {
            let mut stdin = std::io::stdin();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if tx.blocking_send(buf[..n].to_vec()).is_err() {
                            break;
                        }
                    }
                }
            }
        });
    if spawned.is_ok() {
        while let Some(chunk) = rx.recv().await {
            if input.write_all(&chunk).await.is_err() {
                return;
            }
        }
    }
    let _ = input.shutdown().await;
}

/// Copies the attached output into the sinks until the container's streams end.
pub async fn pump(
    mut output: std::pin::Pin<
        Box<dyn futures_util::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>,
    >,
    mut stdout: Box<dyn OutputSink>,
    mut stderr: Box<dyn OutputSink>,
    merged: bool,
) -> std::io::Result<(CaptureSummary, CaptureSummary)> {
    while let Some(item) = output.next().await {
        match item {
            Ok(LogOutput::StdOut { message } | LogOutput::Console { message }) => {
                stdout.write(&message)?;
            }
            Ok(LogOutput::StdErr { message }) if merged => stdout.write(&message)?,
            Ok(LogOutput::StdErr { message }) => stderr.write(&message)?,
            Ok(LogOutput::StdIn { .. }) => {}
            // The connection ended with the container.
            Err(_) => break,
        }
    }
    let out = stdout.finish()?;
    let err = stderr.finish()?;
    Ok((
        out,
        if merged {
            CaptureSummary::default()
        } else {
            err
        },
    ))
}
