//! Runner leases (SPEC §8): each process that runs jobs on the PostgreSQL store holds a row of
//! `runner_leases` whose `expires_at` (the database's clock: `now() + lease_timeout`) a
//! heartbeat thread renews; the jobs it claims name it in `jobs.lease_id`, and their
//! heartbeat (the monotonic time they ran) is kept in `jobs.heartbeat`. A job whose lease
//! expired is taken over by a surviving host (a compare-and-set of `lease_id` to its own live
//! lease, under the job row's lock: one taker), which closes it as `interrupted`. A lease whose
//! holder ran on this host and is provably gone (pid, boot id, start time) counts as lapsed at
//! once: a host restarted after a kill closes its own jobs without waiting.
//!
//! The lease is a row, not only an advisory lock: a dead host's TCP session can linger for
//! minutes, and its session locks with it; `expires_at` does not.

use std::time::Duration;

use super::PgStore;
use crate::store::StoreError;
use crate::store::event::RunnerInfo;
use crate::store::hold::{Heartbeat, Probe};

/// One row of `runner_leases`, as the dashboard shows a fleet's hosts.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LeaseRow {
    /// The host's name.
    pub host: String,
    /// The runner's pid there.
    pub pid: u32,
    /// `serve` or `run`.
    pub role: String,
    /// When the lease lapses unless renewed (RFC 3339, the database's clock).
    pub expires_at: String,
    /// Whether it has not lapsed yet (by the database's clock).
    pub live: bool,
    /// Jobs running under it.
    pub running: u64,
}

impl PgStore {
    /// Every runner lease, live ones first, then by host, with the jobs running under each.
    pub fn leases(&self) -> Result<Vec<LeaseRow>, StoreError> {
        self.conn.call("list the runner leases in", move |client, _| {
            let rows = client.query(
                "SELECT l.host, l.pid, l.role,
                        to_char(l.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'),
                        l.expires_at > now(),
                        (SELECT count(*) FROM jobs AS j WHERE j.lease_id = l.id AND j.state = 'running')
                 FROM runner_leases AS l
                 ORDER BY l.expires_at > now() DESC, l.host, l.pid
                 LIMIT 1000",
                &[],
            )?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                let pid: i64 = r.try_get(1)?;
                let running: i64 = r.try_get(5)?;
                out.push(LeaseRow {
                    host: r.try_get(0)?,
                    pid: u32::try_from(pid).unwrap_or(0),
                    role: r.try_get(2)?,
                    expires_at: r.try_get(3)?,
                    live: r.try_get(4)?,
                    running: u64::try_from(running).unwrap_or(0),
                });
            }
            Ok(out)
        })
    }

    /// Creates this process's lease (`id`), valid for `timeout` from now by the database's
    /// clock, and makes the jobs this store claims from now on name it.
    pub fn create_lease(
        &self,
        id: &str,
        runner: &RunnerInfo,
        timeout: Duration,
    ) -> Result<(), StoreError> {
        let lease_id = id.to_owned();
        let (id, host, role) = (id.to_owned(), runner.host.clone(), runner.role.clone());
        let pid = i64::from(runner.pid);
        let boot = runner.boot_id.clone();
        let ticks = i64::try_from(runner.start_ticks).unwrap_or(i64::MAX);
        let secs = timeout.as_secs_f64();
        self.conn
            .call("create a runner lease in", move |client, _| {
                client.execute(
                    "INSERT INTO runner_leases (id, host, pid, role, boot_id, start_ticks, expires_at)
                     VALUES ($1, $2, $3, $4, $5, $6, now() + make_interval(secs => $7))
                     ON CONFLICT (id) DO UPDATE SET expires_at = EXCLUDED.expires_at",
                    &[&id, &host, &pid, &role, &boot, &ticks, &secs],
                )?;
                Ok(())
            })?;
        if let Ok(mut l) = self.lease.lock() {
            *l = Some(lease_id);
        }
        Ok(())
    }

    /// Renews the lease `id` for `timeout` from now (re-creating it if it is gone).
    pub fn renew_lease(&self, id: &str, timeout: Duration) -> Result<bool, StoreError> {
        let id = id.to_owned();
        let secs = timeout.as_secs_f64();
        self.conn.call("renew a runner lease in", move |client, _| {
            let n = client.execute(
                "UPDATE runner_leases SET expires_at = now() + make_interval(secs => $2)
                 WHERE id = $1",
                &[&id, &secs],
            )?;
            Ok(n == 1)
        })
    }

    /// Ends the lease `id` (a clean exit: its jobs have finished).
    pub fn end_lease(&self, id: &str) -> Result<(), StoreError> {
        let id = id.to_owned();
        if let Ok(mut l) = self.lease.lock()
            && l.as_deref() == Some(id.as_str())
        {
            *l = None;
        }
        self.conn.call("end a runner lease in", move |client, _| {
            client.execute("DELETE FROM runner_leases WHERE id = $1", &[&id])?;
            Ok(())
        })
    }

    /// Notes that this process holds (`true`) or no longer holds the running job `job_id`.
    pub(crate) fn note_held(&self, job_id: &str, held: bool) {
        if let Ok(mut h) = self.held.lock() {
            if held {
                h.insert(job_id.to_owned());
            } else {
                h.remove(job_id);
            }
        }
    }

    /// The lease of this process, if it has one.
    pub fn lease_id(&self) -> Option<String> {
        self.lease.lock().ok().and_then(|l| l.clone())
    }

    /// Stores the heartbeat of job `job_id` while it runs under this process's lease.
    pub fn write_heartbeat(&self, job_id: &str, beat: &Heartbeat) -> Result<(), StoreError> {
        let Some(lease) = self.lease_id() else {
            return Ok(());
        };
        let data = serde_json::to_string(beat).map_err(StoreError::Encode)?;
        let id = job_id.to_owned();
        self.conn.call("write a heartbeat to", move |client, _| {
            client.execute(
                "UPDATE jobs SET heartbeat = $2 WHERE id = $1 AND lease_id = $3",
                &[&id, &data, &lease],
            )?;
            Ok(())
        })
    }

    /// Whether the running job `job_id` is held by a live lease; one whose lease expired is
    /// taken over by this process's lease ([`Probe::Free`]) in the same transaction. A job of
    /// this process's own lease that it no longer holds (given up after a store outage) is free
    /// too.
    pub fn probe_lease(&self, job_id: &str) -> Result<Probe, StoreError> {
        let mine = self.lease_id();
        let id = job_id.to_owned();
        let held = self.held.clone();
        self.conn
            .call("check the lease of a job in", move |client, _| {
                let mut tx = client.transaction()?;
                let Some(row) = tx.query_opt(
                    "SELECT j.lease_id, j.heartbeat, l.host, l.pid, l.role,
                        (l.id IS NULL OR l.expires_at < now()) AS expired, l.boot_id, l.start_ticks
                 FROM jobs j LEFT JOIN runner_leases l ON l.id = j.lease_id
                 WHERE j.id = $1 AND j.state = 'running'
                 FOR UPDATE OF j",
                    &[&id],
                )?
                else {
                    return Ok(Probe::Gone);
                };
                let lease: Option<String> = row.try_get(0)?;
                let Some(lease) = lease else {
                    return Ok(Probe::Missing);
                };
                let heartbeat: Option<String> = row.try_get(1)?;
                let (host, pid, role): (Option<String>, Option<i64>, Option<String>) =
                    (row.try_get(2)?, row.try_get(3)?, row.try_get(4)?);
                let mut expired: bool = row.try_get(5)?;
                let (boot_id, ticks): (Option<String>, Option<i64>) =
                    (row.try_get(6)?, row.try_get(7)?);
                let who = match (&host, pid, &role) {
                    (Some(h), Some(p), Some(r)) => format!("`ralph {r}` (pid {p} on {h})"),
                    _ => format!("the runner of lease `{lease}`"),
                };
                // A holder of this host that is provably gone (a restart after a kill) need
                // not wait for its lease to lapse.
                if let (Some(host), Some(pid), Some(role), Some(boot_id), Some(ticks)) =
                    (host, pid, role, boot_id, ticks)
                {
                    let holder = RunnerInfo {
                        host,
                        pid: u32::try_from(pid).unwrap_or(0),
                        version: String::new(),
                        role,
                        boot_id,
                        start_ticks: u64::try_from(ticks).unwrap_or(0),
                        state_dir: None,
                    };
                    expired |= holder.is_alive() == Some(false);
                }
                if mine.as_deref() == Some(lease.as_str()) {
                    // Read under the row's lock: a claim of ours holds the job before it
                    // takes the row, so a job claimed meanwhile is seen held.
                    let held_by_me = held.lock().map(|h| h.contains(&id)).unwrap_or(true);
                    if held_by_me {
                        return Ok(Probe::Held { holder: who });
                    }
                    let last = heartbeat.and_then(|h| serde_json::from_str(&h).ok());
                    return Ok(Probe::Free {
                        who: format!("{who}, which gave the job up after a store error,"),
                        last,
                        guard: None,
                    });
                }
                if !expired {
                    return Ok(Probe::Held { holder: who });
                }
                let Some(mine) = mine.clone() else {
                    return Ok(Probe::Held {
                        holder: format!(
                            "{who} (its lease expired; this process has none to take it over)"
                        ),
                    });
                };
                tx.execute(
                    "UPDATE jobs SET lease_id = $2 WHERE id = $1 AND lease_id = $3",
                    &[&id, &mine, &lease],
                )?;
                tx.commit()?;
                let last = heartbeat.and_then(|h| serde_json::from_str(&h).ok());
                Ok(Probe::Free {
                    who: format!("{who}, whose lease lapsed,"),
                    last,
                    guard: None,
                })
            })
    }
}
