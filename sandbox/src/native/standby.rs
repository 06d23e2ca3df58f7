//! A helper started ahead of its round (issue 30, item 2): the `execve` of the static `ralph`,
//! glibc's start and the binary's relocations (~0.9 ms) happen between rounds, not on the next
//! round's path. The backend starts one only when asked ([`crate::Sandbox::prepare`]): the
//! runner asks when a job starts, and when a run ended and it can tell another follows (the
//! next round, a retry, the verify: before it records the run's end, so the start overlaps that
//! record); never after a job's last run, so an idle runner keeps none. The standby waits,
//! blocked in `recvmsg`, for exactly one order on a socket only the runner holds the other end
//! of:
//!
//! ```text
//! runner ──posix_spawn──▶ standby (`ralph __sandbox-helper --kill-grace-ms=N`, env: STANDBY_ENV=fd)
//!    (or asks the slot's zygote to fork one: [`super::zygote`], [`Slot::start_standby`])
//!    │                        │ recvmsg (blocked; end-of-file = the runner is gone: exit 0)
//!    └── order ──────────────▶│ [flags][spec JSON] + SCM_RIGHTS: stdin, gateway end?, hold end?,
//!                             │   hand-back end?
//!                             │ dup2 stdin onto 0, closes the socket: never a second order
//!                             └─▶ the helper, as if started for that round
//! ```
//!
//! What stays as with a helper started for the round: the same program, command line (the
//! round's grace, which [`super::leftovers`] reads: a standby is used only by a round with the
//! grace it was started with), environment (one variable), process group, stdout and stderr
//! pipes (made when the standby started, read by the round that takes it), and the descriptors
//! it ends up with (its streams, then the order's, each checked and made close-on-exec). A
//! standby that cannot take its order (dead, killed, the socket refused) is dropped, killed and
//! reaped, and the round starts a helper of its own.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, IntoRawFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use super::inherit;
use super::protocol::{GRACE_ARG_PREFIX, HELPER_ARG, HelperSpec, MAX_SPEC_BYTES, STANDBY_ENV};
use super::spawn::{self, Started, Stdin};
use super::zygote::Zygote;
use crate::fd_pass;
use crate::posix_spawn::{open_null, pipe_pair};

/// The one standby of a backend, shared by its clones: the one waiting, and whether one is being
/// started (a round that finds one being started waits for it: that start is already under way,
/// and a helper of the round's own would do the same work again on a busy host).
#[derive(Debug, Default)]
pub struct Slot {
    state: Mutex<SlotState>,
    ready: tokio::sync::Notify,
    /// Signalled when a start ends (for [`Slot::discard`], which waits without a runtime).
    started: std::sync::Condvar,
    /// The zygote its standbys are forked from ([`super::zygote`]).
    zygote: Mutex<Zygotes>,
}

/// The slot's zygote.
#[derive(Debug, Default)]
struct Zygotes {
    running: Option<Zygote>,
    /// Zygotes in a row that could not fork their first standby (a kernel without `clone3`'s
    /// `CLONE_PIDFD`, a host that refuses it): at [`ZYGOTE_TRIES`], standbys are started with
    /// `posix_spawn` from then on.
    failed_fresh: u8,
}

/// How many zygotes in a row may fail their first fork before the slot stops starting them.
const ZYGOTE_TRIES: u8 = 3;

/// How long [`Slot::discard`] waits for a start under way to end (one `posix_spawn`: normally
/// well under a millisecond).
const DISCARD_WAIT: Duration = Duration::from_millis(200);

/// How long a standby stopped is waited for before it is left to be reaped off the thread (one
/// blocked in `recvmsg` dies at once).
const STOP_WAIT: Duration = Duration::from_millis(100);

#[derive(Debug, Default)]
struct SlotState {
    waiting: Option<Standby>,
    starting: bool,
    /// Discards so far ([`Slot::discard`]): a start that began before one is not kept.
    discards: u64,
}

/// A start marked under way ([`Slot::begin`]), to be run once ([`Begun::run`]). However it
/// ends — run, a panic in the start, or dropped unrun (a runtime shutting down drops the task
/// holding it) — the slot stops counting it as under way and the rounds waiting are woken.
#[derive(Debug)]
#[must_use = "a start begun and dropped unrun starts nothing"]
pub struct Begun {
    slot: Arc<Slot>,
    /// The slot's discards when it began: a discard after that means its run will not come.
    discards: u64,
}

impl Begun {
    /// Starts the standby with `start` and keeps it, unless the run it was started for was
    /// discarded since [`Slot::begin`] (then nothing is started, or what was is stopped).
    pub fn run(self, start: impl FnOnce() -> io::Result<Standby>) {
        if self.slot.lock().discards != self.discards {
            return;
        }
        if let Ok(standby) = start() {
            let mut state = self.slot.lock();
            if state.waiting.is_none() && state.discards == self.discards {
                state.waiting = Some(standby);
                return;
            }
            // Not kept (discarded meanwhile, or one waits already): killed and reaped once the
            // lock is released; a discard that came while this start ran (past its wait) may
            // have missed the zygote this start made: it goes too.
            let discarded = state.discards != self.discards;
            drop(state);
            standby.stop();
            if discarded {
                self.slot.stop_zygote();
            }
        }
    }
}

impl Drop for Begun {
    fn drop(&mut self) {
        self.slot.lock().starting = false;
        self.slot.started.notify_all();
        self.slot.ready.notify_waiters();
    }
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, SlotState> {
        // A poisoned lock still holds a usable slot.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a standby with `start` (on this thread) unless one waits or is being started
    /// already (then `start` is not called). The lock is not held while `start` runs. A failed
    /// start leaves the slot empty: the next round starts a helper of its own.
    pub fn fill(self: &Arc<Self>, start: impl FnOnce() -> io::Result<Standby>) {
        if let Some(begun) = self.begin() {
            begun.run(start);
        }
    }

    /// Marks a start as under way now, unless one waits or is being started already: from here
    /// on a round that asks for the standby waits for this start ([`Slot::take`]) instead of
    /// starting a helper of its own, even before the thread that runs it ([`Begun::run`]) is
    /// scheduled. (Marked only once that thread ran, the runner's next round, on a busy
    /// 2-CPU host, often came first, found no start under way and started its own helper: one
    /// round in five of a `ralph run` here, a cold helper on the round's path.)
    pub fn begin(self: &Arc<Self>) -> Option<Begun> {
        let mut state = self.lock();
        if state.waiting.is_some() || state.starting {
            return None;
        }
        state.starting = true;
        Some(Begun {
            slot: self.clone(),
            discards: state.discards,
        })
    }

    /// The run a standby was started for will not come: the waiting one is dropped (killed,
    /// reaped), and one being started is dropped by its start as it ends ([`Slot::fill`]), which
    /// this waits for (at most [`DISCARD_WAIT`]): when it returns, no standby of this slot is
    /// left (a runner that says a job ended holds none).
    pub fn discard(&self) {
        let deadline = std::time::Instant::now() + DISCARD_WAIT;
        let mut state = self.lock();
        state.discards += 1;
        let waiting = state.waiting.take();
        while state.starting {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            state = self
                .started
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        drop(state);
        if let Some(standby) = waiting {
            standby.stop();
        }
        // The zygote goes with the job's standbys (an idle runner keeps no helper process).
        self.stop_zygote();
    }

    /// Stops the slot's zygote, if one runs (its standbys live on).
    fn stop_zygote(&self) {
        let zygote = self.zygotes().running.take();
        if let Some(z) = zygote {
            z.stop();
        }
    }

    fn zygotes(&self) -> MutexGuard<'_, Zygotes> {
        // A poisoned lock still holds a usable zygote (or none).
        self.zygote.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a standby of `helper_exe` for rounds whose kill grace is `grace`: forked from the
    /// slot's zygote, started first when there is none (or it is of another grace); with
    /// `posix_spawn` ([`Standby::start`]) when the zygote fails (then let go) or cannot be used.
    pub fn start_standby(&self, helper_exe: &Path, grace: Duration) -> io::Result<Standby> {
        let mut zygotes = self.zygotes();
        if let Some(other) = zygotes.running.take_if(|z| !z.fits(grace)) {
            other.stop();
        }
        let fresh = zygotes.running.is_none();
        if fresh && zygotes.failed_fresh < ZYGOTE_TRIES {
            zygotes.running = Zygote::start(helper_exe, grace).ok();
        }
        if let Some(z) = &zygotes.running {
            match z.fork() {
                Ok((orders, started)) => {
                    zygotes.failed_fresh = 0;
                    return Ok(Standby {
                        grace_ms: grace.as_millis(),
                        orders,
                        started,
                    });
                }
                Err(_) => {
                    if fresh {
                        zygotes.failed_fresh += 1;
                    }
                    if let Some(z) = zygotes.running.take() {
                        z.stop();
                    }
                }
            }
        }
        drop(zygotes);
        Standby::start(helper_exe, grace)
    }

    /// The pid of the slot's zygote, if one runs.
    pub fn zygote_pid(&self) -> Option<u32> {
        self.zygotes().running.as_ref().map(Zygote::id)
    }

    /// A slot whose standby is started now, on a thread of its own (no runtime needed), for a
    /// runner that knows a run with kill grace `grace` is coming before it has its backend (`ralph
    /// run`: the helper starts while the store opens and the job is journalled). Hand it to the
    /// backend with [`super::NativeBackend::with_standby`].
    pub fn start_early(helper_exe: &Path, grace: Duration) -> Arc<Self> {
        let slot = Arc::new(Self::default());
        let (s, exe) = (slot.clone(), helper_exe.to_owned());
        // A thread that cannot be made leaves the slot empty: the round starts its own helper.
        let _ = std::thread::Builder::new()
            .name("ralph-standby".into())
            .spawn(move || s.fill(|| s.start_standby(&exe, grace)));
        slot
    }

    /// Takes the waiting standby; when one is being started, waits for it (at most `limit`).
    pub async fn take(&self, limit: Duration) -> Option<Standby> {
        self.wait_while_starting(limit, |state| state.waiting.take())
            .await
            .flatten()
    }

    /// Waits (at most `limit`) until no start is under way: the standby it was making waits
    /// (or the start failed, or was discarded). Takes nothing.
    pub async fn settled(&self, limit: Duration) {
        self.wait_while_starting(limit, |_| None::<()>).await;
    }

    /// Waits (at most `limit`) until `look` finds something in the state (`Some(Some(r))`) or
    /// no start is under way (`Some(look's None)`); `None` when the limit passed first.
    async fn wait_while_starting<R>(
        &self,
        limit: Duration,
        mut look: impl FnMut(&mut SlotState) -> Option<R>,
    ) -> Option<Option<R>> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let ready = self.ready.notified();
            tokio::pin!(ready);
            // Registered before the state is read: a start that ends in between still wakes us.
            ready.as_mut().enable();
            {
                let mut state = self.lock();
                if let Some(found) = look(&mut state) {
                    return Some(Some(found));
                }
                if !state.starting {
                    return Some(None);
                }
            }
            if tokio::time::timeout_at(deadline, ready).await.is_err() {
                return None;
            }
        }
    }

    /// The pid of the standby waiting, if one does.
    pub fn waiting_pid(&self) -> Option<u32> {
        self.lock().waiting.as_ref().map(Standby::id)
    }
}

/// The order carries the gateway hand-over's helper end.
const HAS_GATEWAY: u8 = 1;
/// The order carries the hold's read end.
const HAS_HOLD: u8 = 2;
/// The order carries the helper end of the view's hand-back ([`super::handback`]).
const HAS_HANDBACK: u8 = 4;

/// A started helper waiting for its round.
#[derive(Debug)]
pub struct Standby {
    grace_ms: u128,
    /// The runner's end of the order socket.
    orders: OwnedFd,
    started: Started,
}

/// The helper's command line for a round whose grace is `grace`.
pub fn helper_args(grace: Duration) -> Vec<std::ffi::OsString> {
    args_with_grace(HELPER_ARG, grace)
}

/// `[first, --kill-grace-ms=N]`: the command line of a helper (or the zygote) for `grace`.
pub(super) fn args_with_grace(first: &str, grace: Duration) -> Vec<std::ffi::OsString> {
    vec![
        first.into(),
        format!("{GRACE_ARG_PREFIX}{}", grace.as_millis()).into(),
    ]
}

/// Starts `program` with `args` and one environment variable, `env_name`, naming the descriptor
/// of its end of a new socket (inherited; stdin /dev/null): our end of that socket and the
/// started process. Ours is the only other end, so the child sees end-of-file once it is closed.
pub(super) fn start_on_socket(
    program: &Path,
    args: Vec<std::ffi::OsString>,
    env_name: &str,
) -> io::Result<(OwnedFd, Started)> {
    let (ours, theirs) = fd_pass::channel()?;
    let started = spawn::start(&spawn::Spec {
        program,
        args,
        env: vec![format!("{env_name}={}", theirs.as_raw_fd()).into()],
        stdin: Stdin::Null,
        keep: vec![theirs.as_raw_fd()],
    })?;
    // The child holds its end now; ours must go, or its end-of-file would never come.
    drop(theirs);
    Ok((ours, started))
}

impl Standby {
    /// Starts `helper_exe` as a standby for rounds whose kill grace is `grace`.
    pub fn start(helper_exe: &Path, grace: Duration) -> io::Result<Self> {
        let (orders, started) = start_on_socket(helper_exe, helper_args(grace), STANDBY_ENV)?;
        Ok(Self {
            grace_ms: grace.as_millis(),
            orders,
            started,
        })
    }

    /// Whether a round whose kill grace is `grace` may take it (its command line names that grace).
    pub fn fits(&self, grace: Duration) -> bool {
        self.grace_ms == grace.as_millis()
    }

    /// Its pid.
    pub fn id(&self) -> u32 {
        self.started.child.id()
    }

    /// Kills and reaps it ([`spawn::Pending::stop`]): its run will not come.
    pub fn stop(self) {
        self.started.child.stop(STOP_WAIT);
    }

    /// Hands it its round: `spec` (encoded), its standard input made as `stdin` says, and the
    /// helper ends of the gateway hand-over, of the hold and of the view's hand-back. Returns
    /// the started helper of the round; on an error the standby is dropped (killed and reaped)
    /// and nothing of the round reached a process.
    pub fn order(
        self,
        spec: &[u8],
        stdin: Stdin,
        gateway: Option<BorrowedFd<'_>>,
        hold: Option<BorrowedFd<'_>>,
        handback: Option<BorrowedFd<'_>>,
    ) -> io::Result<Started> {
        if self.started.child.exited() {
            return Err(io::Error::other("the standby helper is gone"));
        }
        let (theirs, ours) = match stdin {
            Stdin::Null => (open_null()?, None),
            Stdin::Piped => {
                let (r, w) = pipe_pair()?;
                (r, Some(w))
            }
            Stdin::Inherit => (io::stdin().as_fd().try_clone_to_owned()?, None),
        };
        let flags = if gateway.is_some() { HAS_GATEWAY } else { 0 }
            | if hold.is_some() { HAS_HOLD } else { 0 }
            | if handback.is_some() { HAS_HANDBACK } else { 0 };
        let mut payload = Vec::with_capacity(spec.len() + 1);
        payload.push(flags);
        payload.extend_from_slice(spec);
        let fds: Vec<BorrowedFd<'_>> = std::iter::once(theirs.as_fd())
            .chain(gateway)
            .chain(hold)
            .chain(handback)
            .collect();
        fd_pass::send(self.orders.as_fd(), &payload, &fds)?;
        let Self { started, .. } = self;
        Ok(Started {
            stdin: ours,
            ..started
        })
    }
}

/// In the standby (the helper started with [`STANDBY_ENV`] set to `fd`): waits for its one order
/// and returns the round's spec, its standard input in place and the order's descriptors adopted
/// (`gateway_fd`/`hold_fd` name them, whatever the JSON said); `None` when the runner closed the
/// socket without an order (it is gone or let the standby go). The socket is closed on return.
pub fn receive(fd: &str) -> Result<Option<HelperSpec>, String> {
    receive_on(adopt_orders(fd)?)
}

/// The order socket named by [`STANDBY_ENV`]'s value `fd`, checked and made close-on-exec.
pub fn adopt_orders(fd: &str) -> Result<OwnedFd, String> {
    let fd: i32 = fd
        .parse()
        .map_err(|_| format!("{STANDBY_ENV} is not a descriptor number: `{fd}`"))?;
    inherit::adopt(fd, inherit::Kind::Socket)
}

/// [`receive`] on the order socket `orders` (close-on-exec), closed on return.
pub fn receive_on(orders: OwnedFd) -> Result<Option<HelperSpec>, String> {
    let mut buf = vec![0u8; MAX_SPEC_BYTES + 2];
    let got = loop {
        match fd_pass::recv(orders.as_fd(), &mut buf, 4, 0) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("failed to read the order: {e}")),
            Ok(got) => break got,
        }
    };
    drop(orders);
    if got.len == 0 && got.fds.is_empty() {
        return Ok(None);
    }
    if got.len == 0 {
        return Err("the order is empty".into());
    }
    if got.truncated || got.len > MAX_SPEC_BYTES + 1 {
        return Err("the order did not fit (truncated)".into());
    }
    let flags = buf[0];
    if flags & !(HAS_GATEWAY | HAS_HOLD | HAS_HANDBACK) != 0 {
        return Err(format!("the order's flags are unknown: {flags:#x}"));
    }
    let want = 1
        + usize::from(flags & HAS_GATEWAY != 0)
        + usize::from(flags & HAS_HOLD != 0)
        + usize::from(flags & HAS_HANDBACK != 0);
    if got.fds.len() != want {
        return Err(format!(
            "the order came with {} descriptors, expected {want}",
            got.fds.len()
        ));
    }
    let mut spec: HelperSpec =
        serde_json::from_slice(&buf[1..got.len]).map_err(|e| format!("invalid order: {e}"))?;
    let mut fds = got.fds.into_iter();
    let stdin = fds.next().ok_or("the order came without its stdin")?;
    if stdin.as_raw_fd() == 0 {
        // Already in place (0 was closed): kept open, made inheritable.
        let fd = stdin.into_raw_fd();
        // SAFETY: fcntl on descriptor 0, which is ours.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } < 0 {
            return Err(format!(
                "failed to make the order's stdin inheritable: {}",
                io::Error::last_os_error()
            ));
        }
    } else {
        // SAFETY: dup2 onto 0 of a descriptor we own; the new 0 is not close-on-exec.
        if unsafe { libc::dup2(stdin.as_raw_fd(), 0) } < 0 {
            return Err(format!(
                "failed to make the order's stdin descriptor 0: {}",
                io::Error::last_os_error()
            ));
        }
        drop(stdin);
    }
    // Numbers the helper adopts as if inherited (kind checked there, close-on-exec already).
    spec.gateway_fd = (flags & HAS_GATEWAY != 0)
        .then(|| fds.next().map(IntoRawFd::into_raw_fd))
        .flatten();
    spec.hold_fd = (flags & HAS_HOLD != 0)
        .then(|| fds.next().map(IntoRawFd::into_raw_fd))
        .flatten();
    spec.handback_fd = (flags & HAS_HANDBACK != 0)
        .then(|| fds.next().map(IntoRawFd::into_raw_fd))
        .flatten();
    Ok(Some(spec))
}

#[cfg(test)]
mod tests;
