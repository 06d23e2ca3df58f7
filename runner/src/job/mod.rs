//! Jobs: the immutable request ([`spec`]), how a request's host paths are resolved
//! ([`resolve`]) and how a job ends ([`outcome`]).

pub mod caps;
pub mod labels;
pub mod model_access;
pub mod outcome;
pub mod paths;
pub mod request;
pub mod resolve;
pub mod source;
pub mod spec;
pub mod tree_lookup;
pub mod tree_mark;

pub use caps::RaisedCaps;
pub use model_access::ModelAccess;
pub use outcome::{FinishReason, JobResult, Outcome, RoundFailure};
pub use source::WorkspaceSource;
pub use spec::{
    AgentSpec, AttemptOf, Ceilings, DEFAULT_KILL_GRACE, JobKind, JobSpec, MAX_ATTEMPTS,
    SandboxSettings, SetupSpec, SpecError,
};

/// A job's identifier (a UUIDv7: sortable by creation time).
pub type JobId = String;

/// A new job id.
pub fn new_job_id() -> JobId {
    uuid::Uuid::now_v7().to_string()
}
