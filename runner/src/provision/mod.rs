//! Workspaces the runner provisions for a job (SPEC §11): safe unpacking of uploads.

pub mod untar;
