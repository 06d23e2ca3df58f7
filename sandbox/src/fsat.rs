//! The one layer of descriptor-relative file operations that never follow a symlink. Everything
//! the host does inside a tree an agent could write (the workspace, a `--write` root, an
//! uploaded workspace being unpacked, a git directory a round left) goes through here: a
//! directory is reached one component at a time from a descriptor, and the last component is
//! acted on with the `*at` call on its parent's descriptor.
//!
//! The discipline is applied here once, not by each caller: every `openat` carries `O_NOFOLLOW
//! | O_CLOEXEC`, every `fstatat` `AT_SYMLINK_NOFOLLOW`, `linkat` never `AT_SYMLINK_FOLLOW`, a new
//! file is created with `O_CREAT | O_EXCL` (a name already taken, a symlink included, fails).
//! Only a tree's root, a path the caller trusts, is opened by path ([`open_root`]).
//!
//! - `sys` (private): the raw system calls, the only `unsafe` code of the layer.
//! - [`error`]: [`FsError`], naming the call and the path of every failure.
//! - [`stat`]: [`Kind`] and [`Stat`] of a name, never following it.
//! - [`open`]: opening a tree's root, a directory, a regular file; creating a file; walking
//!   down a list of directories.
//! - [`names`]: making, removing, linking and renaming names, reading a symlink's target,
//!   handing a file to an owner.
//! - [`list`]: listing a directory with `getdents64`, kinds from `d_type`.
//!
//! The functions take the directory's descriptor and a name in it (one component: the kernel
//! would follow a symlink before a `/` in it); an error names that name
//! (or nothing, for a call on a descriptor alone) and the caller, who knows where the directory
//! is, anchors it ([`FsError::under`], [`FsError::at`]).

pub mod error;
pub mod list;
pub mod names;
pub mod open;
pub mod stat;
mod sys;

pub use error::FsError;
pub use list::{Entry, Listing, RawEntry, entries};
pub use names::{chown, hard_link, mkdir, read_link, rename_noreplace, rmdir, symlink, unlink};
pub use open::{
    Access, Create, create_new, open_dir, open_path, open_regular, open_root, open_root_nofollow,
    read_regular, walk,
};
pub use stat::{Kind, Stat, fstat, lstat};

#[cfg(test)]
mod tests;
