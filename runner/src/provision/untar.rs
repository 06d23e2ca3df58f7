//! Safe packing and unpacking of an uploaded workspace (stub: the real module replaces this at
//! merge; until then every call fails).

/// Limits of one unpack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnpackLimits {
    /// Most bytes of file content.
    pub max_bytes: u64,
    /// Most entries.
    pub max_files: u64,
}

/// What an unpack or pack handled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnpackSummary {
    /// Entries.
    pub files: u64,
    /// Bytes of file content.
    pub bytes: u64,
}

/// A refused or failed unpack.
#[derive(Debug, thiserror::Error)]
pub enum UntarError {
    /// Not built in.
    #[error("failed to unpack: uploads are not supported by this build")]
    Unsupported,
}

/// Unpacks a tar stream into `dest` (an existing empty directory).
pub fn unpack(
    reader: impl std::io::Read,
    dest: &std::path::Path,
    limits: &UnpackLimits,
) -> Result<UnpackSummary, UntarError> {
    let _ = (reader, dest, limits);
    Err(UntarError::Unsupported)
}

/// Packs `dir` as a tar stream.
pub fn pack(
    dir: &std::path::Path,
    writer: impl std::io::Write,
) -> Result<UnpackSummary, UntarError> {
    let _ = (dir, writer);
    Err(UntarError::Unsupported)
}
