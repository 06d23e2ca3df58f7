//! Writing to stdout for commands whose output others read (`ralph jobs | head -1`). A reader
//! that goes away early ends the command the way it ends `cat`: by SIGPIPE, quietly — not with a
//! `failed printing to stdout` panic (exit 101). Any other write error is an internal error
//! (70) with a message on stderr.

use std::io::Write;

use super::exit::Exit;

/// Writes `text` and flushes.
pub fn write(text: &str) {
    write_bytes(text.as_bytes());
}

/// Writes `bytes` as they are (a captured log) and flushes.
pub fn write_bytes(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(bytes).and_then(|()| out.flush()) {
        failed(&e);
    }
}

/// Writes one line (the `outln!` macro).
pub fn line(args: std::fmt::Arguments<'_>) {
    write(&format!("{args}\n"));
}

fn failed(e: &std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        // SAFETY: signal(2) with SIG_DFL and raise(3) take plain integers; restoring the default
        // action of SIGPIPE (Rust ignores it) and raising it ends this process by the signal.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            libc::raise(libc::SIGPIPE);
        }
    }
    eprintln!("ralph: failed to write to stdout: {e}");
    std::process::exit(i32::from(Exit::Internal.code()));
}

/// `println!` for command output: see the module doc.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::stdout::line(format_args!($($arg)*))
    };
}
pub(crate) use outln;
