//! Small shared helpers: units, bounded text, line splitting, terminal-safe text and what a CI
//! log makes of output.

pub mod ci_log;
pub mod flock_holder;
pub mod lines;
pub mod terminal;
pub mod text;
pub mod units;
