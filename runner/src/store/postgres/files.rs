//! The `job_files` table (schema version 4): a job's result files kept in the shared store
//! ([`crate::store::job_files`]), so that every host of a fleet answers for them.

use super::PgStore;
use crate::store::StoreError;
use crate::store::job_files::JobFile;

impl PgStore {
    /// Keeps `files` of job `job_id` (a file of the same name kept before is replaced), in one
    /// transaction.
    pub fn put_job_files(&self, job_id: &str, files: Vec<JobFile>) -> Result<(), StoreError> {
        let id = job_id.to_owned();
        self.conn.call("keep a job's files in", move |client, _| {
            let mut tx = client.transaction()?;
            for f in &files {
                let bytes = i64::try_from(f.bytes).unwrap_or(i64::MAX);
                tx.execute(
                    "INSERT INTO job_files (job_id, name, bytes, data) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (job_id, name) DO UPDATE SET bytes = EXCLUDED.bytes, data = EXCLUDED.data",
                    &[&id, &f.name, &bytes, &f.data],
                )?;
            }
            tx.commit()?;
            Ok(())
        })
    }

    /// The kept file `name` of job `job_id`, if the store has it.
    pub fn job_file(&self, job_id: &str, name: &str) -> Result<Option<JobFile>, StoreError> {
        let (id, name) = (job_id.to_owned(), name.to_owned());
        self.conn.call("read a job's file from", move |client, _| {
            let row = client.query_opt(
                "SELECT bytes, data FROM job_files WHERE job_id = $1 AND name = $2",
                &[&id, &name],
            )?;
            Ok(match row {
                Some(r) => Some(JobFile {
                    name: name.clone(),
                    bytes: u64::try_from(r.try_get::<_, i64>(0)?).unwrap_or(0),
                    data: r.try_get(1)?,
                }),
                None => None,
            })
        })
    }

    /// The kept files of job `job_id` by name, without their data (`data` is `Some(empty)` for
    /// a kept one, `None` for one only listed).
    pub fn job_file_list(&self, job_id: &str) -> Result<Vec<JobFile>, StoreError> {
        let id = job_id.to_owned();
        self.conn.call("list a job's files in", move |client, _| {
            let rows = client.query(
                "SELECT name, bytes, data IS NOT NULL FROM job_files WHERE job_id = $1 ORDER BY name",
                &[&id],
            )?;
            rows.iter()
                .map(|r| {
                    Ok(JobFile {
                        name: r.try_get(0)?,
                        bytes: u64::try_from(r.try_get::<_, i64>(1)?).unwrap_or(0),
                        data: r.try_get::<_, bool>(2)?.then(Vec::new),
                    })
                })
                .collect()
        })
    }

    /// Forgets the kept files of job `job_id` (its artifacts were pruned).
    pub fn drop_job_files(&self, job_id: &str) -> Result<(), StoreError> {
        let id = job_id.to_owned();
        self.conn
            .call("remove a job's files from", move |client, _| {
                client.execute("DELETE FROM job_files WHERE job_id = $1", &[&id])?;
                Ok(())
            })
    }
}
