//! Small shared helpers: units and bounded text.

pub mod text;
pub mod units;
