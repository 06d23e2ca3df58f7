//! The built-in agent's tools: `shell`, `read_file`, `write_file`, `edit_file`. Each answers the
//! model with text, errors included (a bad call is the model's to fix, never a crash). Every
//! result is bounded. The sandbox around the round is the boundary: the tools add no access of
//! their own, they only resolve relative paths against the workspace.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncReadExt;

/// Bounds of the tools.
#[derive(Clone, Copy, Debug)]
pub struct ToolLimits {
    /// Wall-clock limit of one `shell` call.
    pub shell_timeout: Duration,
    /// Bytes of each of stdout and stderr kept (the tail).
    pub output_tail: usize,
    /// Bytes of a file `read_file` returns.
    pub read_cap: usize,
    /// Largest file `edit_file` edits.
    pub edit_cap: usize,
}

impl Default for ToolLimits {
    fn default() -> Self {
        Self {
            shell_timeout: Duration::from_secs(300),
            output_tail: 16 * 1024,
            read_cap: 64 * 1024,
            edit_cap: 8 << 20,
        }
    }
}

/// Runs one tool call and returns what the model is told.
pub async fn run(name: &str, arguments: &str, workspace: &Path, limits: &ToolLimits) -> String {
    let args: Value = match serde_json::from_str(arguments) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return "error: the arguments must be a JSON object".to_owned(),
        Err(e) => {
            return format!(
                "error: the arguments are not valid JSON ({e}); call the tool again with a JSON object"
            );
        }
    };
    let field = |key: &str| -> Result<&str, String> {
        args.get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("error: `{name}` needs the string argument `{key}`"))
    };
    let result = match name {
        "shell" => match field("command") {
            Ok(c) => Ok(shell(c, workspace, limits).await),
            Err(e) => Err(e),
        },
        "read_file" => field("path").map(|p| read_file(&resolve(workspace, p), limits)),
        "write_file" => field("path")
            .and_then(|p| field("content").map(|c| write_file(&resolve(workspace, p), c))),
        "edit_file" => field("path").and_then(|p| {
            let (old, new) = (field("old")?, field("new")?);
            Ok(edit_file(&resolve(workspace, p), old, new, limits))
        }),
        other => Err(format!(
            "error: there is no tool `{other}` (tools: shell, read_file, write_file, edit_file)"
        )),
    };
    result.unwrap_or_else(|e| e)
}

/// A path relative to the workspace, or as given when absolute.
fn resolve(workspace: &Path, path: &str) -> PathBuf {
    workspace.join(path)
}

/// Keeps the last `cap` bytes of a stream.
async fn tail<R: tokio::io::AsyncRead + Unpin>(mut r: R, cap: usize) -> (Vec<u8>, usize) {
    let mut kept: Vec<u8> = Vec::new();
    let mut total = 0usize;
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                total += n;
                kept.extend_from_slice(&buf[..n]);
                if kept.len() > 2 * cap {
                    kept.drain(..kept.len() - cap);
                }
            }
        }
    }
    if kept.len() > cap {
        kept.drain(..kept.len() - cap);
    }
    (kept, total)
}

fn shown(label: &str, (bytes, total): &(Vec<u8>, usize)) -> String {
    let text = String::from_utf8_lossy(bytes);
    if *total > bytes.len() {
        format!("{label} (last {} of {total} bytes):\n{text}", bytes.len())
    } else {
        format!("{label}:\n{text}")
    }
}

async fn shell(command: &str, workspace: &Path, limits: &ToolLimits) -> String {
    let mut cmd = tokio::process::Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(command)
        .current_dir(workspace)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return format!("error: failed to start /bin/sh: {e}"),
    };
    let pgid = child.id();
    let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
        return "error: failed to capture the command's output".to_owned();
    };
    let cap = limits.output_tail;
    let out = tokio::spawn(tail(out, cap));
    let err = tokio::spawn(tail(err, cap));
    let status = tokio::time::timeout(limits.shell_timeout, child.wait()).await;
    let kill_group = || {
        if let Some(pid) = pgid.and_then(|p| i32::try_from(p).ok()) {
            // The command's process group; the agent is its only owner.
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    };
    let head = match status {
        Ok(Ok(s)) => match s.code() {
            Some(c) => format!("exit status {c}"),
            None => format!("killed by {s}"),
        },
        Ok(Err(e)) => format!("error: failed to wait for the command: {e}"),
        Err(_) => {
            kill_group();
            let _ = child.wait().await;
            format!(
                "timed out after {}s and was killed",
                limits.shell_timeout.as_secs()
            )
        }
    };
    // Background processes may hold the pipes open: what they write later is not waited for.
    kill_group();
    let bound = Duration::from_secs(2);
    let out = tokio::time::timeout(bound, out)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    let err = tokio::time::timeout(bound, err)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    format!(
        "{head}\n{}\n{}",
        shown("stdout", &out),
        shown("stderr", &err)
    )
}

fn read_file(path: &Path, limits: &ToolLimits) -> String {
    use std::io::Read;
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => return format!("error: failed to open {}: {e}", path.display()),
    };
    let mut bytes = Vec::new();
    let cap = limits.read_cap;
    if let Err(e) = file.take(cap as u64 + 1).read_to_end(&mut bytes) {
        return format!("error: failed to read {}: {e}", path.display());
    }
    let cut = bytes.len() > cap;
    bytes.truncate(cap);
    let text = String::from_utf8_lossy(&bytes);
    if cut {
        format!(
            "{text}\n[cut: only the first {cap} bytes are shown; use `shell` with sed -n or grep for the rest]"
        )
    } else {
        text.into_owned()
    }
}

fn write_file(path: &Path, content: &str) -> String {
    if let Some(parent) = path.parent()
        && let Err(e) = std::fs::create_dir_all(parent)
    {
        return format!("error: failed to create {}: {e}", parent.display());
    }
    match std::fs::write(path, content) {
        Ok(()) => format!("wrote {} bytes to {}", content.len(), path.display()),
        Err(e) => format!("error: failed to write {}: {e}", path.display()),
    }
}

fn edit_file(path: &Path, old: &str, new: &str, limits: &ToolLimits) -> String {
    if old.is_empty() {
        return "error: `old` is empty; give the exact text to replace".to_owned();
    }
    match std::fs::metadata(path) {
        Ok(m) if m.len() > limits.edit_cap as u64 => {
            return format!(
                "error: {} is larger than {} bytes; edit it with `shell`",
                path.display(),
                limits.edit_cap
            );
        }
        Ok(_) => {}
        Err(e) => return format!("error: failed to open {}: {e}", path.display()),
    }
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => return format!("error: failed to read {} as text: {e}", path.display()),
    };
    match text.matches(old).count() {
        0 => format!(
            "error: `old` does not occur in {}; nothing changed (read the file and copy the text exactly)",
            path.display()
        ),
        1 => match std::fs::write(path, text.replacen(old, new, 1)) {
            Ok(()) => format!("edited {}", path.display()),
            Err(e) => format!("error: failed to write {}: {e}", path.display()),
        },
        n => format!(
            "error: `old` occurs {n} times in {}; nothing changed (include more surrounding text so it occurs once)",
            path.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ToolLimits {
        ToolLimits {
            shell_timeout: Duration::from_secs(20),
            output_tail: 64,
            read_cap: 16,
            edit_cap: 1024,
        }
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn bad_calls_are_answered_not_crashed() {
        let ws = tempfile::tempdir().unwrap();
        let l = limits();
        rt().block_on(async {
            let r = run("shell", "{\"command\": ", ws.path(), &l).await;
            assert!(
                r.starts_with("error: the arguments are not valid JSON"),
                "{r}"
            );
            let r = run("shell", "[1]", ws.path(), &l).await;
            assert!(r.contains("JSON object"), "{r}");
            let r = run("shell", "{}", ws.path(), &l).await;
            assert!(r.contains("`command`"), "{r}");
            let r = run("rm_rf", "{}", ws.path(), &l).await;
            assert!(r.contains("no tool `rm_rf`"), "{r}");
        });
    }

    #[test]
    fn shell_reports_status_and_a_bounded_tail() {
        let ws = tempfile::tempdir().unwrap();
        let l = limits();
        rt().block_on(async {
            let r = run(
                "shell",
                r#"{"command":"pwd; i=0; while [ $i -lt 100 ]; do echo line$i; i=$((i+1)); done; echo oops >&2; exit 3"}"#,
                ws.path(),
                &l,
            )
            .await;
            assert!(r.starts_with("exit status 3"), "{r}");
            assert!(r.contains("line99") && !r.contains("line1\n"), "{r}");
            assert!(r.contains("stderr:\noops"), "{r}");
            let r = run("shell", r#"{"command":"pwd"}"#, ws.path(), &l).await;
            assert!(r.contains(&ws.path().display().to_string()), "{r}");
        });
    }

    #[test]
    fn shell_times_out_and_kills_its_group() {
        let ws = tempfile::tempdir().unwrap();
        let l = ToolLimits {
            shell_timeout: Duration::from_millis(300),
            ..limits()
        };
        rt().block_on(async {
            let r = run(
                "shell",
                r#"{"command":"sleep 30 & echo $! > bg.pid; sleep 30"}"#,
                ws.path(),
                &l,
            )
            .await;
            assert!(r.starts_with("timed out"), "{r}");
        });
        // The background sleeper was in the command's group: it is killed too.
        let pid = std::fs::read_to_string(ws.path().join("bg.pid")).unwrap();
        let proc_dir = format!("/proc/{}", pid.trim());
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while std::path::Path::new(&proc_dir).exists()
            && std::fs::read_to_string(format!("{proc_dir}/stat"))
                .is_ok_and(|s| !s.contains(") Z "))
        {
            assert!(
                std::time::Instant::now() < deadline,
                "{proc_dir} still runs"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn files_are_read_bounded_written_and_edited_once() {
        let ws = tempfile::tempdir().unwrap();
        let l = limits();
        rt().block_on(async {
            let r = run(
                "write_file",
                r#"{"path":"a/b.txt","content":"one two two three four five"}"#,
                ws.path(),
                &l,
            )
            .await;
            assert!(r.starts_with("wrote"), "{r}");
            let r = run("read_file", r#"{"path":"a/b.txt"}"#, ws.path(), &l).await;
            assert!(
                r.starts_with("one two two thre") && r.contains("[cut"),
                "{r}"
            );
            let r = run(
                "edit_file",
                r#"{"path":"a/b.txt","old":"two","new":"2"}"#,
                ws.path(),
                &l,
            )
            .await;
            assert!(r.contains("occurs 2 times"), "{r}");
            let r = run(
                "edit_file",
                r#"{"path":"a/b.txt","old":"nine","new":"9"}"#,
                ws.path(),
                &l,
            )
            .await;
            assert!(r.contains("does not occur"), "{r}");
            let r = run(
                "edit_file",
                r#"{"path":"a/b.txt","old":"three","new":"3"}"#,
                ws.path(),
                &l,
            )
            .await;
            assert!(r.starts_with("edited"), "{r}");
        });
        assert_eq!(
            std::fs::read_to_string(ws.path().join("a/b.txt")).unwrap(),
            "one two two 3 four five"
        );
    }
}
