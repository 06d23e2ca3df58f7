//! Small shared helpers: units, bounded text, line splitting, terminal-safe text.

pub mod lines;
pub mod terminal;
pub mod text;
pub mod units;
