//! Durations and sizes: the parser lives in the sandbox crate (policies use it too).

pub use ralph_sandbox::units::{ByteSize, HumanDuration, UnitError};
