//! The labels every ralph container carries, so that leftovers can be found and told apart from
//! the containers of a runner that is still alive: which runner host made it, for which job and
//! round, and which process (pid + start time + boot) owns it.

use std::collections::HashMap;

use crate::spec::ExecSpec;

/// The runner (host) that created the container.
pub const RUNNER: &str = "io.ralph.runner";
/// The job id (`RALPH_JOB_ID` of the round), or `none` outside a job.
pub const JOB: &str = "io.ralph.job";
/// The round (`RALPH_ROUND`), or `none` outside a job.
pub const ROUND: &str = "io.ralph.round";
/// The owning process: `<pid>:<start ticks>:<boot id>`.
pub const OWNER: &str = "io.ralph.owner";

/// The owner of a container: a process on one boot of one host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// Its pid.
    pub pid: u32,
    /// Its start time in clock ticks after boot (`/proc/PID/stat` field 22).
    pub start_ticks: u64,
    /// The kernel's boot id.
    pub boot_id: String,
}

impl Owner {
    /// This process.
    pub fn current() -> Self {
        let pid = std::process::id();
        Self {
            pid,
            start_ticks: start_ticks(pid).unwrap_or(0),
            boot_id: boot_id(),
        }
    }

    /// The label value.
    pub fn encode(&self) -> String {
        format!("{}:{}:{}", self.pid, self.start_ticks, self.boot_id)
    }

    /// Parses a label value.
    pub fn decode(s: &str) -> Option<Self> {
        let mut it = s.splitn(3, ':');
        Some(Self {
            pid: it.next()?.parse().ok()?,
            start_ticks: it.next()?.parse().ok()?,
            boot_id: it.next()?.to_owned(),
        })
    }

    /// Whether the owner still runs (same boot, same pid with the same start time).
    pub fn is_alive(&self) -> bool {
        self.boot_id == boot_id() && start_ticks(self.pid).is_some_and(|t| t == self.start_ticks)
    }
}

fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// This runner's id: `$RALPH_RUNNER_ID`, else the host name.
pub fn runner_id() -> String {
    if let Ok(id) = std::env::var("RALPH_RUNNER_ID") {
        if !id.trim().is_empty() {
            return id.trim().to_owned();
        }
    }
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

fn env_of<'a>(spec: &'a ExecSpec, name: &str) -> Option<&'a str> {
    spec.env
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// The labels of the container that runs `spec`.
pub fn for_spec(spec: &ExecSpec, runner: &str, owner: &Owner) -> HashMap<String, String> {
    HashMap::from([
        (RUNNER.to_owned(), runner.to_owned()),
        (
            JOB.to_owned(),
            env_of(spec, "RALPH_JOB_ID").unwrap_or("none").to_owned(),
        ),
        (
            ROUND.to_owned(),
            env_of(spec, "RALPH_ROUND").unwrap_or("none").to_owned(),
        ),
        (OWNER.to_owned(), owner.encode()),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_round_trips_and_this_process_is_alive() {
        let me = Owner::current();
        assert!(me.start_ticks > 0);
        assert_eq!(Owner::decode(&me.encode()), Some(me.clone()));
        assert!(me.is_alive());
        let reused = Owner {
            start_ticks: me.start_ticks + 1,
            ..me.clone()
        };
        assert!(!reused.is_alive(), "a reused pid must not count as alive");
        let other_boot = Owner {
            boot_id: "x".into(),
            ..me
        };
        assert!(!other_boot.is_alive());
        assert_eq!(Owner::decode("12:x:b"), None);
    }
}
