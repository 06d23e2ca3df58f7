//! A run's output captured into shared buffers, and the `ExecIo` that feeds them.

use std::sync::{Arc, Mutex};

use ralph_sandbox::ExecIo;
use ralph_sandbox::outcome::CaptureSummary;

/// Captures into a shared buffer.
#[derive(Clone, Default)]
pub struct Buf(Arc<Mutex<Vec<u8>>>);

impl ralph_sandbox::capture::OutputSink for Buf {
    fn write(&mut self, chunk: &[u8]) -> std::io::Result<()> {
        self.0.lock().unwrap().extend_from_slice(chunk);
        Ok(())
    }
    fn finish(self: Box<Self>) -> std::io::Result<CaptureSummary> {
        Ok(CaptureSummary::default())
    }
}

impl Buf {
    /// What was captured, as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// A run's streams: `stdin` (if any) written to it, stdout and stderr into the two buffers.
pub fn io_with(stdin: Option<&[u8]>) -> (ExecIo, Buf, Buf) {
    let (out, err) = (Buf::default(), Buf::default());
    (
        ExecIo {
            stdin: stdin.map(<[u8]>::to_vec),
            stdout: Box::new(out.clone()),
            stderr: Box::new(err.clone()),
        },
        out,
        err,
    )
}
