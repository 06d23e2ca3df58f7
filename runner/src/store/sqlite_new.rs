//! A new state directory's database, made whole before it has a name.
//!
//! Creating `ralph.db` the ordinary way costs a new state directory eight flushes before its
//! first job: SQLite writes the first page through a rollback journal (the journal, the
//! directory, the journal's header, the database), then makes the WAL and syncs its header and
//! the directory, then commits the schema and the added indexes (issue 30: 3-4 ms of a CI job's
//! first `ralph run`).
//! Instead the schema is built in memory, its image (SQLite's own `sqlite3_serialize`) marked as
//! a WAL database (the file format's bytes 18 and 19, as `PRAGMA journal_mode=WAL` sets them),
//! written to an unnamed file in the state directory (`O_TMPFILE`), flushed once, and linked as
//! `ralph.db`: the name never shows a half-made database, and a crash leaves nothing behind.
//!
//! The name itself is made durable by SQLite's first flush of the WAL it then makes beside the
//! database: a WAL that is created is flushed with its directory (`unixSync`'s directory sync),
//! and nothing the runner calls durable (a round's start, an answered submission) is before
//! that flush. A filesystem without `O_TMPFILE`, or no `/proc`, leaves the database to be made
//! the ordinary way; a database made meanwhile by another runner is kept (`link` never
//! replaces).

use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rusqlite::{Connection, DatabaseName};

/// What [`create`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Made {
    /// `ralph.db` was linked, whole and flushed.
    Linked,
    /// Another runner's `ralph.db` was there first; it is used as it is.
    Exists,
    /// This filesystem or host cannot make it this way (the reason, for the log): the caller
    /// makes the database the ordinary way.
    Unsupported(String),
}

/// Why the image could not be made or written.
#[derive(Debug, thiserror::Error)]
pub enum NewDbError {
    #[error("building the schema in memory: {0}")]
    Schema(#[from] rusqlite::Error),
    #[error("SQLite's image of the new database has no header ({0} bytes)")]
    NoHeader(usize),
    #[error("{action} the new database in {dir}: {source}")]
    Io {
        action: &'static str,
        dir: String,
        #[source]
        source: std::io::Error,
    },
}

/// The offsets of the file format's write and read versions: 1 for a rollback journal, 2 for
/// WAL (<https://www.sqlite.org/fileformat.html>, "The Database Header").
const WRITE_VERSION: usize = 18;
const READ_VERSION: usize = 19;
const WAL: u8 = 2;
const MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// The image of a new database holding what `build` makes, marked as a WAL database.
pub fn image(
    build: impl FnOnce(&Connection) -> rusqlite::Result<()>,
) -> Result<Vec<u8>, NewDbError> {
    let conn = Connection::open_in_memory()?;
    build(&conn)?;
    let mut bytes = conn.serialize(DatabaseName::Main)?.to_vec();
    if bytes.len() < 100 || &bytes[..MAGIC.len()] != MAGIC {
        return Err(NewDbError::NoHeader(bytes.len()));
    }
    bytes[WRITE_VERSION] = WAL;
    bytes[READ_VERSION] = WAL;
    Ok(bytes)
}

/// Makes `db` (which must not exist) holding `image`, mode 0600: written unnamed in its
/// directory, flushed, then linked.
pub fn create(db: &Path, image: &[u8]) -> Result<Made, NewDbError> {
    let dir = db.parent().unwrap_or(Path::new("."));
    let io = |action: &'static str| {
        move |source| NewDbError::Io {
            action,
            dir: dir.display().to_string(),
            source,
        }
    };
    let c_dir = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|e| io("name")(std::io::Error::new(std::io::ErrorKind::InvalidInput, e)))?;
    // SAFETY: open(2) of a NUL-terminated path; the descriptor is owned at once.
    let raw = unsafe {
        libc::open(
            c_dir.as_ptr(),
            libc::O_TMPFILE | libc::O_RDWR | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        )
    };
    if raw < 0 {
        let e = std::io::Error::last_os_error();
        // The kernel's or the filesystem's answer for "no O_TMPFILE here".
        return match e.raw_os_error() {
            Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL | libc::ENOSYS) => Ok(
                Made::Unsupported(format!("O_TMPFILE in {}: {e}", dir.display())),
            ),
            _ => Err(io("create")(e)),
        };
    }
    // SAFETY: `raw` is a descriptor open(2) just returned, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut file = std::fs::File::from(fd);
    nix::sys::stat::fchmod(
        file.as_raw_fd(),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .map_err(|e| io("set mode 0600 on")(e.into()))?;
    file.write_all(image).map_err(io("write"))?;
    file.sync_data().map_err(io("flush"))?;
    let proc_path = format!("/proc/self/fd/{}", file.as_raw_fd());
    match nix::unistd::linkat(
        None,
        Path::new(&proc_path),
        None,
        db,
        nix::fcntl::AtFlags::AT_SYMLINK_FOLLOW,
    ) {
        Ok(()) => Ok(Made::Linked),
        Err(nix::errno::Errno::EEXIST) => Ok(Made::Exists),
        Err(e @ nix::errno::Errno::ENOENT) if !Path::new("/proc/self/fd").is_dir() => Ok(
            Made::Unsupported(format!("no /proc to link {proc_path}: {e}")),
        ),
        Err(e) => Err(io("link")(e.into())),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn schema(conn: &Connection) -> rusqlite::Result<()> {
        conn.execute_batch(
            "CREATE TABLE t(x TEXT PRIMARY KEY); INSERT INTO t VALUES ('kept'); \
             PRAGMA user_version = 7;",
        )
    }

    #[test]
    fn the_linked_database_is_a_wal_database_holding_what_was_built() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ralph.db");
        let image = image(schema).unwrap();
        assert_eq!(create(&db, &image).unwrap(), Made::Linked);
        let mode = std::fs::metadata(&db).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o600);
        // Nothing else was left in the directory: the file had no name until it was whole.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("ralph.db")]);
        let conn = Connection::open(&db).unwrap();
        // Already WAL: the pragma finds it so and writes no rollback journal.
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        let v: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(v, 7);
        conn.execute("INSERT INTO t VALUES ('added')", []).unwrap();
        let n: i64 = conn
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 2);
        let ok: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(ok, "ok");
        assert!(!dir.path().join("ralph.db-journal").exists());
    }

    #[test]
    fn a_database_made_meanwhile_is_kept_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ralph.db");
        std::fs::write(&db, b"another runner's").unwrap();
        assert_eq!(create(&db, &image(schema).unwrap()).unwrap(), Made::Exists);
        assert_eq!(std::fs::read(&db).unwrap(), b"another runner's");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_directory_that_is_not_there_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("gone").join("ralph.db");
        let e = create(&db, &image(schema).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("gone"), "{e}");
    }
}
