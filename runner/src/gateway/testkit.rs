//! Test support shared by the gateway's tests: a recording [`GatewaySink`] whose events can be
//! awaited with a deadline.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;

use super::sink::{EgressDecision, GatewaySink, ModelRequest};

/// How long a test waits for a condition.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// Records every event.
#[derive(Debug, Default)]
pub struct RecordingSink {
    pub requests: Mutex<Vec<ModelRequest>>,
    pub egress: Mutex<Vec<EgressDecision>>,
    pub crossed: Mutex<Vec<(u64, u64)>>,
    changed: Notify,
}

impl RecordingSink {
    /// Waits until `cond` holds for the sink (checked after every event), or panics.
    pub async fn wait_for(&self, what: &str, cond: impl Fn(&RecordingSink) -> bool) {
        let waiting = async {
            loop {
                let notified = self.changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if cond(self) {
                    return;
                }
                notified.await;
            }
        };
        if tokio::time::timeout(DEADLINE, waiting).await.is_err() {
            panic!("timed out waiting for {what}: {self:?}");
        }
    }

    /// Waits for `n` model requests and returns them.
    pub async fn requests(&self, n: usize) -> Vec<ModelRequest> {
        self.wait_for("model requests", |s| s.requests.lock().unwrap().len() >= n)
            .await;
        self.requests.lock().unwrap().clone()
    }
}

impl GatewaySink for RecordingSink {
    fn model_request(&self, r: &ModelRequest) {
        self.requests.lock().unwrap().push(r.clone());
        self.changed.notify_waiters();
    }
    fn egress(&self, e: &EgressDecision) {
        self.egress.lock().unwrap().push(e.clone());
        self.changed.notify_waiters();
    }
    fn budget_crossed(&self, used: u64, max: u64) {
        self.crossed.lock().unwrap().push((used, max));
        self.changed.notify_waiters();
    }
}
