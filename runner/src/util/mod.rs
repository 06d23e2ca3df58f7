//! Small shared helpers: units, bounded text, line splitting.

pub mod lines;
pub mod text;
pub mod units;
