//! [`FsError`], the one error of [`crate::fsat`]: which call failed on which path, and why.

use std::ffi::{CString, OsStr};
use std::fmt;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A failure of a descriptor-relative file operation.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// A system call failed.
    #[error("failed to {call} `{}`: {source}", path.display())]
    Os {
        /// The call (`openat`, `fstatat`, `mkdirat`, ...).
        call: &'static str,
        /// The path it was made on: a name in the directory the call was given until the caller
        /// anchors it ([`FsError::under`], [`FsError::at`]); empty for a call on a descriptor.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// A name holds a NUL byte, so no system call can take it.
    #[error("failed to encode `{}`: the path contains a NUL byte", path.display())]
    Nul {
        /// The name (or path, once anchored).
        path: PathBuf,
    },
    /// What was given as one name in a directory is empty or holds a `/`: the kernel would
    /// resolve, and follow symlinks in, the components before the last.
    #[error("`{}` is not a single file name", path.display())]
    NotAName {
        /// The name.
        path: PathBuf,
    },
    /// What must be a regular file is something else (a FIFO, a device, a directory).
    #[error("`{}` is not a regular file", path.display())]
    NotRegular {
        /// The name (or path, once anchored).
        path: PathBuf,
    },
}

impl FsError {
    pub(super) fn os(call: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        FsError::Os {
            call,
            path: path.into(),
            source,
        }
    }

    /// The path the error names.
    pub fn path(&self) -> &Path {
        match self {
            FsError::Os { path, .. }
            | FsError::Nul { path }
            | FsError::NotAName { path }
            | FsError::NotRegular { path } => path,
        }
    }

    fn path_mut(&mut self) -> &mut PathBuf {
        match self {
            FsError::Os { path, .. }
            | FsError::Nul { path }
            | FsError::NotAName { path }
            | FsError::NotRegular { path } => path,
        }
    }

    /// The same error naming `path` instead (a caller that knows where the call was made).
    #[must_use]
    pub fn at(mut self, path: impl Into<PathBuf>) -> Self {
        *self.path_mut() = path.into();
        self
    }

    /// The same error with its path taken as relative to `dir` (the directory whose
    /// descriptor the call was given).
    #[must_use]
    pub fn under(mut self, dir: &Path) -> Self {
        let p = self.path_mut();
        *p = if p.as_os_str().is_empty() {
            dir.to_owned()
        } else {
            dir.join(&*p)
        };
        self
    }

    /// The OS error number, when a system call failed.
    pub fn errno(&self) -> Option<i32> {
        match self {
            FsError::Os { source, .. } => source.raw_os_error(),
            FsError::Nul { .. } | FsError::NotAName { .. } | FsError::NotRegular { .. } => None,
        }
    }

    /// Whether a system call failed with `errno`.
    pub fn is(&self, errno: i32) -> bool {
        self.errno() == Some(errno)
    }

    /// Why, in the OS's words, without the call and the path (for a message that names the
    /// path itself).
    pub fn cause(&self) -> Cause<'_> {
        Cause(self)
    }

    /// Why, as an [`io::Error`] without the call and the path.
    pub fn into_io(self) -> io::Error {
        match self {
            FsError::Os { source, .. } => source,
            e @ (FsError::Nul { .. } | FsError::NotAName { .. } | FsError::NotRegular { .. }) => {
                io::Error::new(io::ErrorKind::InvalidInput, e.cause().to_string())
            }
        }
    }
}

/// [`FsError::cause`].
#[derive(Debug)]
pub struct Cause<'a>(&'a FsError);

impl fmt::Display for Cause<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            FsError::Os { source, .. } => write!(f, "{source}"),
            FsError::Nul { .. } => write!(f, "a NUL byte in a name"),
            FsError::NotAName { .. } => write!(f, "not a single file name"),
            FsError::NotRegular { .. } => write!(f, "not a regular file"),
        }
    }
}

/// `name` as a C string for a system call.
pub(super) fn c_name(name: &OsStr) -> Result<CString, FsError> {
    CString::new(name.as_bytes()).map_err(|_| FsError::Nul { path: name.into() })
}

/// `name`, one name in a directory, as a C string for a `*at` call: a `/` in it is refused
/// ([`FsError::NotAName`]), since `O_NOFOLLOW` and `AT_SYMLINK_NOFOLLOW` hold for the last
/// component only.
pub(super) fn c_component(name: &OsStr) -> Result<CString, FsError> {
    if name.is_empty() || name.as_bytes().contains(&b'/') {
        return Err(FsError::NotAName { path: name.into() });
    }
    c_name(name)
}
