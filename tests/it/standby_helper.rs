//! The helper started ahead of its round (`native::standby`, issue 30 item 2), checked on the
//! host: while it waits it holds its streams and its order socket only, with the round helper's
//! command line and one environment variable; it serves exactly one round (the round's stdin,
//! hold and gateway hand-over reach it as they reach a helper started for the round, and it
//! keeps nothing a helper started for the round would not); one of another grace, or a dead
//! one, is never used; none is started unless the runner announces a run, and one announced for a
//! run that does not come is discarded, killed and reaped (an idle service holds none); and it
//! goes when its backend goes or its runner is killed.
//!
//! No root needed: run as root (`cargo test`) and as the unprivileged `ralph-ci` by `.ci/run`.

use std::path::PathBuf;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use ralph_sandbox::native::NativeBackend;
use ralph_sandbox::outcome::Termination;
use ralph_sandbox::policy::PolicySet;
use ralph_sandbox::{ExecSpec, Mode, Sandbox, SandboxRequest, StderrMode, StdinMode};
use tokio_util::sync::CancellationToken;

use crate::common::capture::io_with;
use crate::common::procs::{blocked_in, children, state};
use crate::common::server::{Server, job};
use crate::common::{complete_report, wait_until};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);
const GRACE: Duration = Duration::from_secs(1);

fn backend() -> NativeBackend {
    NativeBackend::new(env!("CARGO_BIN_EXE_ralph"), PolicySet::embedded().unwrap())
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

struct World {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl World {
    fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("ralph-standby-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let root = dir.path().canonicalize().unwrap();
        for d in ["ws", "home", "tmp", "control"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        Self { _dir: dir, root }
    }

    fn spec(&self, script: &str, stdin: StdinMode, grace: Duration) -> ExecSpec {
        let ws = self.root.join("ws");
        ExecSpec {
            argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
            cwd: ws.clone(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            stdin,
            stderr: StderrMode::Separate,
            timeout: Some(LIMIT),
            kill_grace: grace,
            sandbox: SandboxRequest::minimal(
                Mode::WorkspaceWrite,
                ws,
                self.root.join("home"),
                self.root.join("tmp"),
            ),
            control_dir: self.root.join("control"),
            listings: None,
            protected_copies: None,
            layers: None,
        }
    }
}

/// `pid`'s open descriptors as (number, what): `socket`, `pipe`, `anon_inode:...` or a path.
fn fds(pid: u32) -> Vec<(i32, String)> {
    let mut out: Vec<(i32, String)> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_str()?.parse().ok()?;
            let target = std::fs::read_link(e.path()).ok()?;
            let t = target.to_string_lossy().into_owned();
            let kind = t.split(":[").next().unwrap_or(&t).to_owned();
            Some((n, kind))
        })
        .collect();
    out.sort();
    out
}

/// The open flags of `pid`'s descriptor `n` (its `fdinfo`'s `flags:`), with the whole `fdinfo`.
fn fd_flags(pid: u32, n: i32) -> (u32, String) {
    let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{n}")).unwrap();
    let flags = info
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .map(|f| u32::from_str_radix(f.trim(), 8).unwrap())
        .unwrap();
    (flags, info)
}

/// The descriptors of this process without close-on-exec (above the standard streams): what
/// the test's own environment passes to every child.
fn inheritable_here() -> Vec<i32> {
    fds(std::process::id())
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| {
            let info =
                std::fs::read_to_string(format!("/proc/self/fdinfo/{n}")).unwrap_or_default();
            let flags = info
                .lines()
                .find_map(|l| l.strip_prefix("flags:"))
                .and_then(|f| u32::from_str_radix(f.trim(), 8).ok());
            *n > 2 && flags.is_some_and(|f| f & libc::O_CLOEXEC as u32 == 0)
        })
        .collect()
}

/// `pid`'s descriptors but those this test process leaks to every child it starts (a helper
/// started for the round has those too): the standard streams and what it made or was given.
fn held_fds(pid: u32) -> Vec<(i32, String)> {
    let leaked = inheritable_here();
    fds(pid)
        .into_iter()
        .filter(|(n, _)| *n <= 2 || !leaked.contains(n))
        .collect()
}

/// Asks `b` for the next round's standby (`Sandbox::prepare`) and waits until it waits for its
/// order: its pid.
fn next_standby(b: &NativeBackend) -> u32 {
    b.prepare(GRACE);
    wait_until("the next standby started", LIMIT, || {
        b.standby_pid().is_some()
    });
    let pid = b.standby_pid().unwrap();
    wait_until_waiting(pid);
    pid
}

/// Runs `echo word` through `b` (a standby if one waits), checks it exited 0 and printed `word`:
/// the pid of the helper that ran it.
async fn runs_echo(b: &NativeBackend, w: &World, word: &str) -> Option<u32> {
    let (io, out, _) = io_with(None);
    let run = b
        .spawn(&w.spec(&format!("echo {word}"), StdinMode::Null, GRACE), io)
        .await
        .unwrap();
    let pid = run.pid();
    let report = run.wait(CancellationToken::new()).await.unwrap();
    assert_eq!(report.outcome.termination, Termination::Exited { code: 0 });
    assert_eq!(out.text(), format!("{word}\n"));
    pid
}

/// Starts `b`'s standby with [`GRACE`] and waits until it waits for its order: its pid.
fn waiting_standby(b: &NativeBackend) -> u32 {
    b.prestart(GRACE);
    let pid = b.standby_pid().expect("a standby after prestart");
    wait_until_waiting(pid);
    pid
}

/// Waits until the standby `pid` is blocked in `recvmsg` (waiting for its order).
fn wait_until_waiting(pid: u32) {
    wait_until("the standby waits for its order", LIMIT, || {
        blocked_in(pid) == Some(libc::SYS_recvmsg)
    });
}

#[test]
fn a_waiting_standby_holds_its_streams_and_its_socket_only_and_serves_one_round() {
    let w = World::new();
    rt().block_on(async {
        let b = backend();
        let first = waiting_standby(&b);
        // As root it also makes its round's network namespace while it waits, on a thread that
        // may still be at it when the standby is already in recvmsg: waited for.
        let root = nix::unistd::geteuid().is_root();
        if root {
            wait_until("the standby holds the namespace it made", LIMIT, || {
                fds(first).iter().any(|(_, k)| k == "net")
            });
        }
        // What it holds while it waits: stdin (/dev/null), its two pipes, the order socket
        // (and whatever this test process itself leaks to every child it starts: a helper started
        // for the round has those too).
        let held = held_fds(first);
        // (The numbers of the socket and the namespace depend on which came first: a standby
        // forked from the zygote got its socket before it made the namespace.)
        let mut kinds: Vec<&str> = held.iter().map(|(_, k)| k.as_str()).collect();
        kinds.sort_unstable();
        // As root it also holds the network namespace it made for its round: a new one, not
        // the host's, close-on-exec.
        let expected: &[&str] = if root {
            &["/dev/null", "net", "pipe", "pipe", "socket"]
        } else {
            &["/dev/null", "pipe", "pipe", "socket"]
        };
        assert_eq!(kinds, expected, "the standby's descriptors: {held:?}");
        assert_eq!(
            held[..3].iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            [0, 1, 2],
            "its standard streams: {held:?}"
        );
        let numbered = |kind: &str| held.iter().find(|(_, k)| k == kind).map(|(n, _)| *n);
        let made_net = root.then(|| {
            let n = numbered("net").unwrap();
            let made = std::fs::read_link(format!("/proc/{first}/fd/{n}")).unwrap();
            let host = std::fs::read_link("/proc/self/ns/net").unwrap();
            assert_ne!(made, host, "the standby holds the host's network namespace");
            let (flags, info) = fd_flags(first, n);
            assert_ne!(
                flags & libc::O_CLOEXEC as u32,
                0,
                "not close-on-exec: {info}"
            );
            made.to_string_lossy().into_owned()
        });
        let sock = numbered("socket").unwrap();
        // Its whole environment: one variable. A standby forked from the zygote shows the
        // zygote's (the number its request socket had there: not held by the standby).
        let expected = match b.zygote_pid() {
            Some(z) => zygote_environ(z),
            None => format!("RALPH_SANDBOX_STANDBY={sock}\0").into_bytes(),
        };
        assert_eq!(
            std::fs::read(format!("/proc/{first}/environ")).unwrap(),
            expected,
            "its whole environment"
        );
        let cmdline = std::fs::read(format!("/proc/{first}/cmdline")).unwrap();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        assert_eq!(
            &args[1..3],
            [&b"__sandbox-helper"[..], b"--kill-grace-ms=1000"],
            "the command line of a helper with the round's grace"
        );

        // Its round: the round's stdin reaches the command through it; the command holds only
        // its streams (and ls's own directory).
        let spec = w.spec(
            "cat; ls /proc/self/fd | sort -n | tr '\\n' ' '; readlink /proc/self/ns/net >&2",
            StdinMode::Piped,
            GRACE,
        );
        let (io1, out, err) = io_with(Some(b"to the round\n"));
        let run = b.spawn(&spec, io1).await.unwrap();
        assert_eq!(run.pid(), Some(first), "the round took the standby");
        // None is started while a round sets up and runs; the next once it ended.
        assert_eq!(b.standby_pid(), None);
        let report = run.wait(CancellationToken::new()).await.unwrap();
        assert_eq!(
            report.outcome.termination,
            Termination::Exited { code: 0 },
            "stderr: {}",
            err.text()
        );
        assert_eq!(out.text(), "to the round\n0 1 2 3 ");
        if let Some(made) = made_net {
            assert_eq!(
                err.text().trim(),
                made,
                "the round runs in the namespace its standby made"
            );
        }
        wait_until("the used standby is reaped", LIMIT, || {
            state(first).is_none()
        });

        // The backend starts none by itself once a run ended: the runner says when another
        // follows (`Sandbox::prepare`). Then the next one is another process, and takes the
        // next round only.
        assert_eq!(b.standby_pid(), None, "started without being asked");
        let second = next_standby(&b);
        assert_ne!(second, first);
        let (io2, out2, _) = io_with(None);
        let spec2 = w.spec("cat; echo second", StdinMode::Null, GRACE);
        let run = b.spawn(&spec2, io2).await.unwrap();
        assert_eq!(run.pid(), Some(second));
        let report = run.wait(CancellationToken::new()).await.unwrap();
        assert_eq!(report.outcome.termination, Termination::Exited { code: 0 });
        assert_eq!(out2.text(), "second\n", "stdin /dev/null: cat read nothing");
    });
}

/// Waits until `helper` is held: blocked reading the release, its init blocked reading too.
fn wait_until_held(helper: u32) {
    wait_until("the run is held", LIMIT, || {
        let kids = children(helper);
        blocked_in(helper) == Some(libc::SYS_read)
            && kids.len() == 1
            && blocked_in(kids[0]) == Some(libc::SYS_read)
    });
}

#[test]
fn a_standby_that_took_its_round_holds_what_a_helper_started_for_it_holds() {
    // Held (the hold's pipe travels in the order): the helper's descriptors during the hold,
    // started ahead and started for the round, are as many of each kind (their numbers differ:
    // the order's arrive under new ones): nothing of the order (its socket) is left.
    let mut seen = Vec::new();
    for ahead in [false, true] {
        let w = World::new();
        let spec = w.spec("echo ran > ran", StdinMode::Null, GRACE);
        let held = rt().block_on(async {
            let b = backend();
            let standby = if ahead {
                b.prestart(GRACE);
                b.standby_pid()
            } else {
                None
            };
            let mut run = b.spawn_held(&spec, io_with(None).0).await.unwrap();
            let helper = run.pid().unwrap();
            if ahead {
                assert_eq!(Some(helper), standby, "the held round took the standby");
            }
            wait_until_held(helper);
            let mut held: Vec<String> = fds(helper).into_iter().map(|(_, k)| k).collect();
            held.sort();
            assert!(!w.root.join("ws/ran").exists(), "ran before its release");
            run.release();
            let report = run.wait(CancellationToken::new()).await.unwrap();
            assert_eq!(report.outcome.termination, Termination::Exited { code: 0 });
            assert!(w.root.join("ws/ran").exists(), "released, it ran");
            held
        });
        seen.push(held);
    }
    assert_eq!(
        seen[0], seen[1],
        "the helper's descriptors while held: started for the round, then ahead"
    );
}

/// The run's view (its mount namespace) is held by the helper while the command runs, to be
/// sent back to the runner at the end (`native::handback`): the last process leaving it no
/// longer tears it down on the round's path. Whether the helper was started ahead or for the
/// round, it holds the command's own view (not the host's), close-on-exec, and nothing of it
/// reaches the command (its descriptors are its streams only, checked above).
#[test]
fn the_helper_holds_the_commands_view_to_hand_it_back_started_ahead_or_not() {
    for ahead in [false, true] {
        let w = World::new();
        let ws = w.root.join("ws");
        let spec = w.spec(
            "readlink /proc/self/ns/mnt > ns.tmp && mv ns.tmp ns; \
             while [ ! -e go ]; do sleep 0.01; done",
            StdinMode::Null,
            GRACE,
        );
        rt().block_on(async {
            let b = backend();
            if ahead {
                waiting_standby(&b);
            }
            let (io, _, err) = io_with(None);
            let run = b.spawn(&spec, io).await.unwrap();
            let helper = run.pid().unwrap();
            wait_until("the command says its view", LIMIT, || {
                ws.join("ns").exists()
            });
            let view = std::fs::read_to_string(ws.join("ns")).unwrap();
            let view = view.trim();
            let host = std::fs::read_link("/proc/self/ns/mnt").unwrap();
            assert_ne!(
                std::path::Path::new(view),
                host,
                "the command runs in the host's view"
            );
            let mut held = None;
            wait_until("the helper holds the command's view", LIMIT, || {
                held = fds(helper).into_iter().find_map(|(n, _)| {
                    let link = std::fs::read_link(format!("/proc/{helper}/fd/{n}")).ok()?;
                    (link.to_str() == Some(view)).then_some(n)
                });
                held.is_some()
            });
            let n = held.unwrap();
            let (flags, info) = fd_flags(helper, n);
            assert_ne!(
                flags & libc::O_CLOEXEC as u32,
                0,
                "not close-on-exec: {info}"
            );
            std::fs::write(ws.join("go"), "").unwrap();
            let report = run.wait(CancellationToken::new()).await.unwrap();
            assert_eq!(
                report.outcome.termination,
                Termination::Exited { code: 0 },
                "ahead {ahead}: {}",
                err.text()
            );
        });
    }
}

#[test]
fn a_standby_of_another_grace_or_a_dead_one_is_never_used() {
    let w = World::new();
    rt().block_on(async {
        let b = backend();
        // Another grace: its command line would lie to a later start-up's sweep.
        b.prestart(Duration::from_secs(7));
        let other = b.standby_pid().unwrap();
        let (io1, _, _) = io_with(None);
        // Held, so that its helper is still there to be looked at.
        let mut run = b
            .spawn_held(&w.spec("true", StdinMode::Null, GRACE), io1)
            .await
            .unwrap();
        let helper = run.pid().unwrap();
        assert_ne!(helper, other, "the standby of another grace was used");
        // Read once the helper's exec has set its arguments up (posix_spawn returns as soon as
        // the exec has replaced the memory, before the new arguments are in place).
        let mut cmdline = Vec::new();
        wait_until("the helper's command line is readable", LIMIT, || {
            cmdline = std::fs::read(format!("/proc/{helper}/cmdline")).unwrap_or_default();
            !cmdline.is_empty()
        });
        assert!(
            cmdline.windows(20).any(|s| s == b"--kill-grace-ms=1000"),
            "{}",
            String::from_utf8_lossy(&cmdline)
        );
        run.release();
        run.wait(CancellationToken::new()).await.unwrap();
        wait_until("the unused standby is killed and reaped", LIMIT, || {
            state(other).is_none()
        });

        // A dead one (killed while it waited): the round starts its own helper and runs.
        let dead = next_standby(&b);
        kill(Pid::from_raw(dead as i32), Signal::SIGKILL).unwrap();
        wait_until("the standby is dead", LIMIT, || state(dead) == Some('Z'));
        assert_ne!(runs_echo(&b, &w, "alive").await, Some(dead));
        wait_until("the dead standby is reaped", LIMIT, || {
            state(dead).is_none()
        });
    });
}

#[test]
fn a_standby_started_before_its_backend_serves_the_backends_first_round() {
    // `ralph run` starts its first round's helper before it has opened its store.
    let w = World::new();
    let slot = ralph_sandbox::native::standby::Slot::start_early(
        std::path::Path::new(env!("CARGO_BIN_EXE_ralph")),
        GRACE,
    );
    let b = backend().with_standby(slot);
    let mut early = None;
    wait_until("the early standby waits", LIMIT, || {
        early = b.standby_pid();
        early.is_some()
    });
    let early = early.unwrap();
    wait_until_waiting(early);
    rt().block_on(async {
        let (io, out, _) = io_with(None);
        let run = b
            .spawn(&w.spec("echo first", StdinMode::Null, GRACE), io)
            .await
            .unwrap();
        assert_eq!(run.pid(), Some(early), "the round took the early standby");
        let report = run.wait(CancellationToken::new()).await.unwrap();
        assert_eq!(report.outcome.termination, Termination::Exited { code: 0 });
        assert_eq!(out.text(), "first\n");
    });
}

#[test]
fn a_round_with_the_network_on_never_gets_the_namespace_its_standby_made() {
    let w = World::new();
    rt().block_on(async {
        let b = backend();
        let pid = waiting_standby(&b);
        let mut spec = w.spec("readlink /proc/self/ns/net", StdinMode::Null, GRACE);
        spec.sandbox.network = Some(ralph_sandbox::Network::Full);
        let (io, out, err) = io_with(None);
        let run = b.spawn(&spec, io).await.unwrap();
        assert_eq!(run.pid(), Some(pid));
        let report = run.wait(CancellationToken::new()).await.unwrap();
        assert_eq!(
            report.outcome.termination,
            Termination::Exited { code: 0 },
            "stderr: {}",
            err.text()
        );
        let host = std::fs::read_link("/proc/self/ns/net").unwrap();
        assert_eq!(out.text().trim(), host.to_string_lossy(), "--network full");
    });
}

#[test]
fn a_standby_goes_with_its_backend() {
    let b = backend();
    let pid = waiting_standby(&b);
    let zygote = b.zygote_pid().expect("the zygote it was forked from");
    let clone = b.clone();
    drop(b);
    assert_eq!(
        state(pid).map(|s| s != 'Z'),
        Some(true),
        "a clone still holds it"
    );
    assert_eq!(
        state(zygote).map(|s| s != 'Z'),
        Some(true),
        "a clone still holds its zygote"
    );
    drop(clone);
    wait_until(
        "the standby and its zygote are killed and reaped",
        LIMIT,
        || state(pid).is_none() && state(zygote).is_none(),
    );
}

/// The children of `parent` that are sandbox helpers (by their command line).
fn helpers_of(parent: u32) -> Vec<u32> {
    children_named(parent, ralph_sandbox::native::HELPER_ARG)
}

/// The children of `parent` whose argv[1] is `arg`.
fn children_named(parent: u32, arg: &str) -> Vec<u32> {
    children(parent)
        .into_iter()
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .unwrap_or_default()
                .split(|b| *b == 0)
                .nth(1)
                == Some(arg.as_bytes())
        })
        .collect()
}

/// The helpers this test process started with kill grace `grace` (by their command line: the
/// tests of this module run side by side, each with graces of its own where it counts helpers).
fn helpers_with_grace(grace: Duration) -> Vec<u32> {
    started_with(ralph_sandbox::native::standby::helper_args(grace))
}

/// The zygotes this test process started for kill grace `grace`.
fn zygotes_with_grace(grace: Duration) -> Vec<u32> {
    started_with(ralph_sandbox::native::zygote::zygote_args(grace))
}

/// This test process's children whose arguments after the program are `args`.
fn started_with(args: Vec<std::ffi::OsString>) -> Vec<u32> {
    let want: Vec<Vec<u8>> = args.into_iter().map(|a| a.into_encoded_bytes()).collect();
    children(std::process::id())
        .into_iter()
        .filter(|p| {
            let cmdline = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).skip(1).take(2).collect();
            args == want.iter().map(Vec::as_slice).collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn a_discarded_standby_is_killed_and_reaped_before_the_discard_returns() {
    // A run announced that will not come (the job was cancelled before it): the standby
    // waiting for it is gone, reaped, when `discard` returns.
    let grace = Duration::from_millis(1234);
    let b = backend();
    b.prestart(grace);
    let pid = b.standby_pid().expect("a standby after prestart");
    wait_until_waiting(pid);
    Sandbox::discard(&b);
    assert_eq!(state(pid), None, "not reaped");
    assert_eq!(b.standby_pid(), None);
    assert!(helpers_with_grace(grace).is_empty());
}

#[test]
fn a_standby_discarded_while_it_is_being_started_is_never_kept() {
    // Announced on a blocking thread and discarded at once, in every interleaving this host
    // gives: the start had not begun (it never starts), was under way (the discard waits for it
    // and stops it), or had ended (stopped). Nothing is left, then or later.
    let grace = Duration::from_millis(1235);
    let b = backend();
    rt().block_on(async {
        for _ in 0..20 {
            Sandbox::prepare(&b, grace);
            Sandbox::discard(&b);
            assert_eq!(b.standby_pid(), None);
            assert_eq!(helpers_with_grace(grace), Vec::<u32>::new());
        }
    });
    // The blocking threads are done with the runtime: a start that came late started nothing,
    // and left no zygote either.
    assert_eq!(b.standby_pid(), None);
    assert_eq!(helpers_with_grace(grace), Vec::<u32>::new());
    assert_eq!(b.zygote_pid(), None);
    wait_until("no zygote of the discarded runs is left", LIMIT, || {
        zygotes_with_grace(grace).is_empty()
    });
    // And the slot still serves: the next announcement starts one.
    b.prestart(grace);
    let pid = b.standby_pid().expect("a standby after a later prestart");
    wait_until_waiting(pid);
}

#[test]
fn a_service_keeps_no_helper_waiting_after_a_jobs_last_run() {
    // The runner announces a run only when one follows: a job's last round is followed by
    // nothing, so an idle service holds no helper.
    let s = Server::new("");
    let runner = s.child.as_ref().unwrap().id();
    let ws = s.workspace("ws");
    let agent = s.agent(
        "done.sh",
        &format!(
            "echo '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("done")
        ),
    );
    let id = s.submit(job(&ws, &agent, json!({})));
    let j = s.wait_finished(&id, LIMIT);
    assert_eq!(j["outcome"], "complete", "{j}");
    // An absence: watched for a while (a helper started after the last round would stay).
    no_helper_for(runner, Duration::from_secs(2));
}

/// Asserts that the service `runner` has no helper now and none appears for `watched`.
fn no_helper_for(runner: u32, watched: Duration) {
    let watch = std::time::Instant::now();
    loop {
        let helpers = helpers_of(runner);
        assert!(
            helpers.is_empty(),
            "helpers of an idle service: {helpers:?}"
        );
        if watch.elapsed() >= watched {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Submits to `s` a job whose round fails with a retry left after a 10-minute backoff: the
/// retry's helper is started ahead and waits through the backoff.
fn job_in_a_retrys_backoff(s: &Server) -> String {
    let ws = s.workspace("ws");
    let agent = s.agent("fail.sh", "exit 3");
    s.submit(job(
        &ws,
        &agent,
        json!({ "round_retries": 1, "retry_backoff": "10m" }),
    ))
}

#[test]
fn a_service_keeps_no_helper_for_a_run_that_a_cancel_stopped() {
    // A failed round with a retry left: the retry is announced (its helper started ahead), then
    // the job is cancelled during the backoff: the retry never comes, and its helper is
    // discarded when the job ends, not left waiting in the idle service.
    let s = Server::new("");
    let runner = s.child.as_ref().unwrap().id();
    let id = job_in_a_retrys_backoff(&s);
    wait_until("the first attempt failed", LIMIT, || {
        !s.events_of(&id, "round_finished").is_empty()
    });
    // The retry's helper was started ahead (the standby started when the failure was known).
    wait_until("the retry's helper waits", LIMIT, || {
        !helpers_of(runner).is_empty()
    });
    let (code, c) = s.api("POST", &format!("/v1/jobs/{id}/cancel"), None);
    assert!(code == 200 || code == 202, "{code} {c}");
    let j = s.wait_finished(&id, LIMIT);
    assert_eq!(j["outcome"], "cancelled", "{j}");
    // Gone when the job is: killed and reaped by the discard, before the job's end was told.
    no_helper_for(runner, Duration::from_secs(1));
}

#[test]
fn a_standby_goes_when_its_runner_is_killed() {
    // A round that failed with a retry left: the retry's helper waits through the backoff.
    let mut s = Server::new("");
    let runner = s.child.as_ref().unwrap().id();
    job_in_a_retrys_backoff(&s);
    let mut standby = Vec::new();
    wait_until("the retry's standby helper waits", LIMIT, || {
        standby = helpers_of(runner);
        standby.len() == 1 && blocked_in(standby[0]) == Some(libc::SYS_recvmsg)
    });
    let standby = standby[0];
    assert!(children(standby).is_empty(), "a standby runs nothing");
    // The zygote it was forked from waits beside it.
    let zygotes = children_named(runner, ralph_sandbox::native::protocol::ZYGOTE_ARG);
    assert_eq!(zygotes.len(), 1, "the runner's zygote");
    s.kill9();
    // Nobody will send its order: it ends by itself (a zombie of whoever inherited it, or gone);
    // and nobody will ask the zygote for another: it ends too.
    wait_until(
        "the standby and the zygote ended with their runner",
        LIMIT,
        || {
            matches!(state(standby), None | Some('Z'))
                && matches!(state(zygotes[0]), None | Some('Z'))
        },
    );
}

/// The zygote `pid`'s whole environment, checked to be its one variable: the number of its
/// request socket.
fn zygote_environ(pid: u32) -> Vec<u8> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let text = String::from_utf8(environ.clone()).unwrap();
    let n: i32 = text
        .strip_prefix("RALPH_SANDBOX_ZYGOTE=")
        .and_then(|v| v.strip_suffix('\0'))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("the zygote's environment: {text:?}"));
    assert_eq!(
        fds(pid)
            .iter()
            .find(|(m, _)| *m == n)
            .map(|(_, k)| k.as_str()),
        Some("socket"),
        "the zygote's variable names its request socket"
    );
    environ
}

/// `pid`'s parent (`/proc/PID/stat`'s fourth field).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[test]
fn standbys_are_forked_from_one_zygote_as_the_runner_s_children_and_it_keeps_nothing_of_them() {
    let w = World::new();
    rt().block_on(async {
        let b = backend();
        let first = waiting_standby(&b);
        let zygote = b.zygote_pid().expect("a zygote once a standby was started");
        // The zygote: its own command line, and it holds its streams and its request socket
        // only (nothing of the standby it forked: not its order socket, not its streams).
        let cmdline = std::fs::read(format!("/proc/{zygote}/cmdline")).unwrap();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        assert_eq!(
            &args[1..3],
            [&b"__sandbox-zygote"[..], b"--kill-grace-ms=1000"],
            "the zygote's command line"
        );
        // Looked at once it waits for its next request (until then it may still hold the pidfd
        // of the standby it just answered with).
        wait_until("the zygote waits for its next request", LIMIT, || {
            blocked_in(zygote) == Some(libc::SYS_recvmsg)
        });
        let kinds: Vec<String> = held_fds(zygote).into_iter().map(|(_, k)| k).collect();
        assert_eq!(
            kinds,
            ["/dev/null", "pipe", "pipe", "socket"],
            "the zygote's descriptors"
        );
        zygote_environ(zygote);
        // The standby is this process's child (it waits for it and reaps it), not the zygote's,
        // and runs nothing of the zygote's: the zygote has no child at all.
        assert_eq!(parent_of(first), Some(std::process::id()));
        assert!(children(zygote).is_empty(), "the zygote's children");
        assert_eq!(runs_echo(&b, &w, "one").await, Some(first));
        // Reaped by this process (a zombie otherwise: its parent is this process).
        wait_until("the used standby is reaped", LIMIT, || {
            state(first).is_none()
        });
        // The next standby comes from the same zygote.
        let second = next_standby(&b);
        assert_eq!(b.zygote_pid(), Some(zygote), "another zygote was started");
        assert_eq!(parent_of(second), Some(std::process::id()));
        // A job's end lets the zygote go with its standby: an idle backend keeps no process.
        Sandbox::discard(&b);
        assert_eq!(b.zygote_pid(), None);
        assert_eq!(state(zygote), None, "the zygote is not reaped");
        assert_eq!(state(second), None, "the standby is not reaped");
    });
}

/// Starts `ralph __sandbox-zygote` by hand with its request socket: the test's end and the
/// child.
fn raw_zygote() -> (std::os::fd::OwnedFd, std::process::Child) {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let (ours, theirs) = nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::SeqPacket,
        None,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    )
    .unwrap();
    let n = theirs.as_raw_fd();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ralph"));
    cmd.args(ralph_sandbox::native::zygote::zygote_args(GRACE))
        .env_clear()
        .env(ralph_sandbox::native::protocol::ZYGOTE_ENV, n.to_string());
    // SAFETY: fcntl on a descriptor number between fork and exec (async-signal-safe).
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(n, libc::F_SETFD, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().unwrap();
    drop(theirs);
    (ours, child)
}

#[test]
fn a_zygote_given_anything_but_a_well_formed_request_forks_nothing_and_exits() {
    use std::os::fd::AsFd;
    let null = std::fs::File::open("/dev/null").unwrap();
    // Close-on-exec, as every descriptor of this process must be: the tests beside this one start
    // helpers whose descriptors they count.
    let (r, _w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    let cases: Vec<(&str, Vec<u8>, Vec<std::os::fd::BorrowedFd<'_>>)> = vec![
        ("no descriptors", vec![1], vec![]),
        (
            "an unknown request",
            vec![2],
            vec![null.as_fd(), r.as_fd(), r.as_fd()],
        ),
        (
            "a file where the order socket goes",
            vec![1],
            vec![null.as_fd(), r.as_fd(), r.as_fd()],
        ),
        ("too few descriptors", vec![1], vec![r.as_fd()]),
    ];
    for (what, payload, fds) in cases {
        let (sock, mut child) = raw_zygote();
        let pid = child.id();
        if fds.is_empty() {
            nix::sys::socket::send(
                std::os::fd::AsRawFd::as_raw_fd(&sock),
                &payload,
                nix::sys::socket::MsgFlags::empty(),
            )
            .unwrap();
        } else {
            ralph_sandbox::fd_pass::send(sock.as_fd(), &payload, &fds).unwrap();
        }
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(70), "{what}: {status}");
        assert!(children(pid).is_empty(), "{what}: forked");
        // No answer came: no pidfd, no pid.
        let mut buf = [0u8; 8];
        let got =
            ralph_sandbox::fd_pass::recv(sock.as_fd(), &mut buf, 1, libc::MSG_DONTWAIT).unwrap();
        assert!(got.len == 0 && got.fds.is_empty(), "{what}: answered");
    }
    // And one whose runner goes without a request ends quietly.
    let (sock, mut child) = raw_zygote();
    drop(sock);
    assert_eq!(child.wait().unwrap().code(), Some(0));
}
