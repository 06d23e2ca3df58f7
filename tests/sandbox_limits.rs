//! The sandbox escape matrix (being written).
