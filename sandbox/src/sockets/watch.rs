//! Hearing of entries made, removed or moved in the scanned trees instead of looking at every
//! directory again (a root runner): a fanotify group marks the filesystem of each tree
//! (`FAN_MARK_FILESYSTEM`) for `FAN_CREATE | FAN_DELETE | FAN_MOVED_FROM | FAN_MOVED_TO`, files
//! and directories, and reports each with its directory's file handle (`FAN_REPORT_DFID_NAME`).
//! Before a scan the queue is drained and each directory named is resolved through the tree's
//! own mount (`open_by_handle_at`, then the descriptor's path): the ones inside a tree are
//! listed again ([`super::memo`]); the rest are someone else's.
//!
//! What cannot be heard makes the scan look again, stat by stat, as without a watch (the
//! watch's generation moves on): a queue that overflowed (the kernel keeps 16,384 events), a
//! read that failed, a mount made or removed at, above or inside a tree (a mount changes what a
//! path shows without an event; `/proc/self/mountinfo` is compared), a filesystem newly marked.
//! A directory on a filesystem that could not be marked is always looked at.
//!
//! The cost falls on the host: every entry made or removed on a marked filesystem queues an
//! event (a few dozen bytes, bounded by the queue) until the next scan drains it. And on the
//! process: closing the group waits out a grace period (about 20 ms), so a watch is made only
//! after a scan that looked at [`WORTH`] directories.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ffi::OsStr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The events heard.
const MASK: u64 = libc::FAN_CREATE
    | libc::FAN_DELETE
    | libc::FAN_MOVED_FROM
    | libc::FAN_MOVED_TO
    | libc::FAN_ONDIR;

/// Bytes of events read at once.
const READ_BUFFER: usize = 64 * 1024;

/// Trees covered at once, at most (each is opened at a drain that has events to resolve).
const MAX_TREES: usize = 64;

/// Events resolved per drain, at most: past it the drain gives up and the scan looks again.
const MAX_EVENTS: usize = 100_000;

/// This process's watch: made at a scan that follows one which looked at [`WORTH`] directories.
pub static PROCESS: std::sync::Mutex<State> = std::sync::Mutex::new(State::Untried);

/// The directories a scan must have looked at for the next one to make a watch. A watch is not
/// free: its marks are set up once, each drain resolves the directories named, and closing the
/// group at the process's end waits out a grace period of the kernel's (about 20 ms here). A
/// scan without one stats each directory (about 1.5 us each here), so a process whose scans look
/// at fewer directories (`--toolchain none`, small `--read` trees) would pay more for the watch
/// than it saves in any short job; the runner's toolchains (a rustup or pyenv install is tens of
/// thousands of directories) are worth it after two or three scans.
pub const WORTH: usize = 5_000;

/// Whether a process has a watch.
#[derive(Debug)]
pub enum State {
    /// No scan yet.
    Untried,
    /// Scans so far without one: the last looked at `dirs` directories. A process that scans
    /// once (`ralph sandbox exec`) or only small trees never pays for a watch it cannot use.
    Deferred {
        /// Directories the last scan looked at.
        dirs: usize,
    },
    /// Not possible here (no privilege, an old kernel), or turned off.
    Off,
    /// Heard from before each scan.
    On(Watch),
}

impl State {
    /// The watch for the scan about to start: made when the last scan looked at [`WORTH`]
    /// directories or more (and it can be made here).
    pub fn get(&mut self) -> Option<&mut Watch> {
        if matches!(self, State::Deferred { dirs } if *dirs >= WORTH) {
            *self = Watch::new().map_or(State::Off, State::On);
        }
        match self {
            State::On(w) => Some(w),
            _ => None,
        }
    }

    /// A scan without a watch looked at `dirs` directories.
    pub fn scanned(&mut self, dirs: usize) {
        if matches!(self, State::Untried | State::Deferred { .. }) {
            *self = State::Deferred { dirs };
        }
    }
}

/// The fanotify group of this process's scans.
#[derive(Debug)]
pub struct Watch {
    fd: OwnedFd,
    /// Devices whose filesystem is marked.
    marked: HashSet<u64>,
    /// Filesystems marked, by fsid.
    fsids: HashSet<[i32; 2]>,
    /// The trees covered, with their filesystem's fsid. Their roots are opened only while a
    /// drain resolves handles (a descriptor kept open would keep their filesystem from being
    /// unmounted).
    roots: HashMap<PathBuf, [i32; 2]>,
    /// Mount points seen at the last drain.
    mounts: BTreeSet<Vec<u8>>,
    /// Moves on whenever what was heard can no longer be trusted (module doc); never 0.
    pub generation: u64,
}

/// What a scan must not take from earlier listings.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Forget {
    /// Nothing heard can be trusted (the generation has moved on).
    pub all: bool,
    /// Directories whose entries changed.
    pub dirs: Vec<PathBuf>,
    /// Trees and mount points: everything at or below them.
    pub under: Vec<PathBuf>,
}

/// What a drain heard.
#[derive(Debug, PartialEq, Eq)]
enum Heard {
    /// The directories inside the trees whose entries changed.
    Dirs(Vec<PathBuf>),
    /// Something could not be heard: look at everything again.
    Lost,
}

impl Watch {
    /// A new group, or `None` where fanotify cannot report directory handles (no privilege, an
    /// old kernel).
    pub fn new() -> Option<Watch> {
        // SAFETY: plain flags; the result is a new descriptor or -1.
        let fd = unsafe {
            libc::fanotify_init(
                libc::FAN_CLASS_NOTIF
                    | libc::FAN_CLOEXEC
                    | libc::FAN_NONBLOCK
                    | libc::FAN_REPORT_DFID_NAME,
                (libc::O_RDONLY | libc::O_CLOEXEC) as libc::c_uint,
            )
        };
        if fd < 0 {
            return None;
        }
        Some(Watch {
            // SAFETY: `fd` was just returned to us and is owned by nothing else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            marked: HashSet::new(),
            fsids: HashSet::new(),
            roots: HashMap::new(),
            mounts: mount_points().unwrap_or_default(),
            generation: 1,
        })
    }

    /// Whether directories on device `dev` are heard.
    pub fn hears(&self, dev: u64) -> bool {
        self.marked.contains(&dev)
    }

    /// Whether changes in `tree` are heard (it is covered).
    pub fn covers(&self, tree: &Path) -> bool {
        self.roots.contains_key(tree)
    }

    /// Covers `trees` (marking the filesystems not yet marked) and drains the queue: what the
    /// scan about to look at `trees` must not take from earlier listings ([`Forget`]).
    pub fn prepare(&mut self, trees: &[PathBuf]) -> Forget {
        let mut forget = Forget::default();
        self.cover(trees, &mut forget);
        match self.read_events() {
            Heard::Dirs(dirs) => forget.dirs = dirs,
            Heard::Lost => {
                self.generation += 1;
                forget.all = true;
            }
        }
        // A mount changes what a path shows without an event: everything at or below the
        // mount point in a covered tree (the whole tree for a mount at or above its root).
        match mount_points() {
            Some(now) => {
                for m in now.symmetric_difference(&self.mounts) {
                    let point = unescape(m);
                    for t in self.roots.keys() {
                        if t.starts_with(&point) {
                            forget.under.push(t.clone());
                        } else if point.starts_with(t) {
                            forget.under.push(point.clone());
                        }
                    }
                }
                self.mounts = now;
            }
            None => {
                self.generation += 1;
                forget.all = true;
            }
        }
        forget
    }

    /// Marks the filesystem of each of `trees` not yet marked (a tree that is not a directory, or
    /// on a filesystem that cannot be marked, stays uncovered: its listings are never trusted).
    fn cover(&mut self, trees: &[PathBuf], forget: &mut Forget) {
        if trees.iter().any(|t| !self.roots.contains_key(t))
            && self.roots.len() + trees.len() > MAX_TREES
        {
            // Trees not scanned now are dropped, and what was kept of them with them: their
            // changes are not heard any more.
            let dropped: Vec<PathBuf> = self
                .roots
                .keys()
                .filter(|t| !trees.contains(t))
                .cloned()
                .collect();
            for t in dropped {
                self.roots.remove(&t);
                forget.under.push(t);
            }
        }
        for tree in trees {
            if self.roots.contains_key(tree) {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(tree) else {
                continue;
            };
            if !meta.is_dir() {
                continue;
            }
            let Some(fd) = open_dir(tree) else { continue };
            let Some(fsid) = fsid(&fd) else { continue };
            drop(fd);
            if !self.fsids.contains(&fsid) {
                let Ok(c) = std::ffi::CString::new(tree.as_os_str().as_bytes()) else {
                    continue;
                };
                // SAFETY: our group's descriptor, plain flags and mask, a NUL-terminated path.
                let r = unsafe {
                    libc::fanotify_mark(
                        self.fd.as_raw_fd(),
                        libc::FAN_MARK_ADD | libc::FAN_MARK_FILESYSTEM,
                        MASK,
                        libc::AT_FDCWD,
                        c.as_ptr(),
                    )
                };
                if r != 0 {
                    continue;
                }
                self.fsids.insert(fsid);
            }
            self.marked.insert(meta.dev());
            self.roots.insert(tree.clone(), fsid);
        }
    }

    fn read_events(&mut self) -> Heard {
        let mut dirs = BTreeSet::new();
        // Each covered tree's root, open for reading (`open_by_handle_at` refuses an `O_PATH`
        // descriptor), once an event needs it.
        let mut mounts: Option<Vec<(OwnedFd, [i32; 2])>> = None;
        // Many events name the same directory: each is resolved once per drain.
        let mut resolved: HashSet<([i32; 2], Vec<u8>)> = HashSet::new();
        let mut buf = vec![0u8; READ_BUFFER];
        let mut events = 0usize;
        loop {
            // SAFETY: our descriptor and a buffer of `buf.len()` writable bytes.
            let n = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast::<libc::c_void>(),
                    buf.len(),
                )
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EAGAIN) {
                    break;
                }
                return Heard::Lost;
            }
            if n == 0 {
                break;
            }
            let Ok(n) = usize::try_from(n) else {
                return Heard::Lost;
            };
            for event in Events::new(&buf[..n]) {
                events += 1;
                let Some(event) = event else {
                    return Heard::Lost;
                };
                if event.mask & libc::FAN_Q_OVERFLOW != 0 || events > MAX_EVENTS {
                    return Heard::Lost;
                }
                if let Some((fsid, handle)) = event.dir
                    && resolved.insert((fsid, handle.to_vec()))
                {
                    if mounts.is_none() {
                        // A tree whose root cannot be opened could not have its events named:
                        // it is dropped (covered again when scanned again), and nothing heard
                        // so far is trusted.
                        let mut opened = Vec::new();
                        let mut gone = Vec::new();
                        for (t, f) in &self.roots {
                            match open_dir(t) {
                                Some(fd) => opened.push((fd, *f)),
                                None => gone.push(t.clone()),
                            }
                        }
                        if !gone.is_empty() {
                            for t in gone {
                                self.roots.remove(&t);
                            }
                            return Heard::Lost;
                        }
                        mounts = Some(opened);
                    }
                    let mounts = mounts.as_deref().unwrap_or_default();
                    // Every covered tree, not only the ones scanned now: a listing of a tree
                    // scanned later must not outlive a change heard now.
                    for dir in resolve(mounts, fsid, handle) {
                        if self.roots.keys().any(|t| dir.starts_with(t)) {
                            dirs.insert(dir);
                        }
                    }
                }
            }
        }
        Heard::Dirs(dirs.into_iter().collect())
    }
}

/// The paths of the directory `handle` names, through each tree's mount on its filesystem
/// (none: gone since, or on no tree's filesystem).
fn resolve(mounts: &[(OwnedFd, [i32; 2])], fsid: [i32; 2], handle: &[u8]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    // `struct file_handle` is `u32 handle_bytes, i32 handle_type, bytes`: the event holds it
    // as such; copied into a buffer aligned for it.
    let mut h = vec![0u32; handle.len().div_ceil(4)];
    // SAFETY: `h` has at least `handle.len()` bytes; the regions do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping(handle.as_ptr(), h.as_mut_ptr().cast::<u8>(), handle.len());
    }
    for (mount, _) in mounts.iter().filter(|(_, f)| *f == fsid) {
        // SAFETY: a descriptor of ours, a well-formed handle (the kernel's own bytes, its
        // length checked by the parser), plain flags.
        let fd = unsafe {
            libc::open_by_handle_at(
                mount.as_raw_fd(),
                h.as_mut_ptr().cast::<libc::file_handle>(),
                libc::O_PATH | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            continue;
        }
        // SAFETY: just returned to us, owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        if let Ok(p) = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())) {
            out.push(p);
        }
    }
    out
}

/// One event: its mask and, for an event on a directory's entry, the directory's fsid and
/// `struct file_handle` bytes.
struct Event<'a> {
    mask: u64,
    dir: Option<([i32; 2], &'a [u8])>,
}

/// The events in a buffer the kernel filled; `None` for one that does not parse.
struct Events<'a> {
    buf: &'a [u8],
}

impl<'a> Events<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Events { buf }
    }
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn i32_at(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// `struct fanotify_event_metadata`: `event_len` u32, `vers` u8, reserved u8, `metadata_len`
/// u16, `mask` u64, `fd` i32, `pid` i32.
const METADATA: usize = 24;

impl<'a> Iterator for Events<'a> {
    type Item = Option<Event<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.buf.is_empty() {
            return None;
        }
        let parsed = (|| {
            let len = usize::try_from(u32_at(self.buf, 0)?).ok()?;
            let meta_len = usize::from(u16_at(self.buf, 6)?);
            if len < METADATA || meta_len < METADATA || meta_len > len || len > self.buf.len() {
                return None;
            }
            if *self.buf.get(4)? != libc::FANOTIFY_METADATA_VERSION {
                return None;
            }
            let mask = u64_at(self.buf, 8)?;
            let fd = i32_at(self.buf, 16)?;
            if fd >= 0 {
                // Never asked for (a FID group reports none), but never leaked.
                // SAFETY: a descriptor the kernel installed for us.
                drop(unsafe { OwnedFd::from_raw_fd(fd) });
            }
            let event = &self.buf[..len];
            let mut dir = None;
            let mut at = meta_len;
            // Info records: `info_type` u8, pad u8, `len` u16, then for a DFID(_NAME) record
            // the fsid (2 x i32) and `struct file_handle` (u32 bytes, i32 type, bytes), a name.
            while at + 4 <= len {
                let kind = event[at];
                let rec_len = usize::from(u16_at(event, at + 2)?);
                if rec_len < 4 || at + rec_len > len {
                    return None;
                }
                if kind == libc::FAN_EVENT_INFO_TYPE_DFID_NAME
                    || kind == libc::FAN_EVENT_INFO_TYPE_DFID
                {
                    let rec = &event[at..at + rec_len];
                    let fsid = [i32_at(rec, 4)?, i32_at(rec, 8)?];
                    let bytes = usize::try_from(u32_at(rec, 12)?).ok()?;
                    let handle = rec.get(12..20 + bytes)?;
                    dir = Some((fsid, handle));
                }
                at += rec_len;
            }
            Some((len, Event { mask, dir }))
        })();
        match parsed {
            Some((len, event)) => {
                self.buf = &self.buf[len..];
                Some(Some(event))
            }
            None => {
                self.buf = &[];
                Some(None)
            }
        }
    }
}

/// The directory `path` open for reading.
fn open_dir(path: &Path) -> Option<OwnedFd> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: a NUL-terminated path and plain flags.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    // SAFETY: just returned to us, owned by nothing else.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The fsid of the filesystem holding `fd` (what fanotify reports).
fn fsid(fd: &OwnedFd) -> Option<[i32; 2]> {
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: our descriptor and a buffer of the right size.
    if unsafe { libc::fstatfs(fd.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: filled by a successful fstatfs.
    let st = unsafe { st.assume_init() };
    // `fsid_t` is two ints; libc keeps them private, so it is read as bytes.
    // SAFETY: `f_fsid` is 8 bytes of plain data.
    let raw: [i32; 2] = unsafe { std::mem::transmute(st.f_fsid) };
    Some(raw)
}

/// The mount points of this process's mount namespace (as `/proc/self/mountinfo` escapes them).
fn mount_points() -> Option<BTreeSet<Vec<u8>>> {
    let text = std::fs::read("/proc/self/mountinfo").ok()?;
    Some(
        text.split(|b| *b == b'\n')
            .filter_map(|line| line.split(|b| *b == b' ').nth(4))
            .map(<[u8]>::to_vec)
            .collect(),
    )
}

/// A mount point as a path (a mountinfo field: octal escapes for space, tab, newline and
/// backslash).
fn unescape(escaped: &[u8]) -> PathBuf {
    let mut point = Vec::with_capacity(escaped.len());
    let mut i = 0;
    while i < escaped.len() {
        if escaped[i] == b'\\'
            && let Some(oct) = escaped.get(i + 1..i + 4)
            && let Ok(s) = std::str::from_utf8(oct)
            && let Ok(v) = u8::from_str_radix(s, 8)
        {
            point.push(v);
            i += 4;
            continue;
        }
        point.push(escaped[i]);
        i += 1;
    }
    PathBuf::from(OsStr::from_bytes(&point))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_are_unescaped() {
        assert_eq!(
            unescape(b"/home/a\\040b/x\\134y\\012"),
            PathBuf::from("/home/a b/x\\y\n")
        );
        assert_eq!(unescape(b"/plain\\9"), PathBuf::from("/plain\\9"));
    }

    #[test]
    fn events_that_do_not_parse_end_the_drain() {
        assert!(matches!(Events::new(&[1, 2, 3]).next(), Some(None)));
        let mut short = [0u8; METADATA];
        short[..4].copy_from_slice(&(METADATA as u32 + 8).to_ne_bytes());
        assert!(matches!(Events::new(&short).next(), Some(None)));
    }
}
