//! One attempt's way out of its sandbox (SPEC §9): the model gateway and the egress proxy the
//! runner serves, for this attempt only, on listeners the sandbox created inside the attempt's
//! private network namespace. The runner's own steps (set-up, verify: [`super::runner_step`])
//! get the egress proxy alone ([`GatewayPlan::egress_only`]): the rounds' allow list, never the
//! model gateway, so no step but a round's agent ever reaches the model. What they report comes back over a channel and is journalled by
//! the attempt (`model_request`, `egress`); refusals past the first ones are summed into
//! `model_refusals` at a bounded rate (see [`RefusalLog`]), so a round pipelining refused
//! requests cannot grow the journal; a token budget crossed at the wire stops the round.
//!
//! ```text
//! plan (before spawn): ports, RALPH_GATEWAY_URL, HTTP(S)_PROXY ─▶ spawn (listeners made inside)
//!   ─▶ start: serve both on the listeners ─▶ events ─▶ journal / metrics
//!   ─▶ stop (after the attempt): servers cut, last events drained
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::upstream::ResolvedUpstream;
use crate::gateway::model::refusals::{Disposition, RefusalLog};
use crate::gateway::{
    AllowHost, BytePool, EgressConfig, EgressDecision, GatewaySink, ModelGatewayConfig,
    ModelLimits, ModelRequest, RefusalSummary, Secret, TokenBudget, Upstream, proxy_env,
    serve_egress, serve_model,
};
use crate::job::JobSpec;

/// The model gateway's port on the round's private loopback. The namespace is the round's own,
/// so a fixed port cannot collide with anything of the host's.
pub const MODEL_PORT: u16 = 41410;
/// The egress proxy's port on the round's private loopback.
pub const EGRESS_PORT: u16 = 41411;

/// How long the servers may take to wind down after the attempt before they are left behind.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// What the gateway of an attempt reported.
#[derive(Debug)]
pub enum GatewayEvent {
    /// A model request ended.
    Model(ModelRequest),
    /// The egress proxy decided.
    Egress(EgressDecision),
    /// Refusals summed (past the first ones of the attempt).
    Refusals(RefusalSummary),
}

/// The gateway of one attempt, before its listeners exist.
#[derive(Debug)]
pub struct GatewayPlan {
    model: Option<Arc<ModelGatewayConfig>>,
    egress: Option<Arc<EgressConfig>>,
    budget: Arc<TokenBudget>,
}

/// The gateway cannot be set up for this job (a configuration error: exit 64).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct GatewaySetupError {
    /// What is wrong.
    pub message: String,
}

fn setup_error(message: impl Into<String>) -> GatewaySetupError {
    GatewaySetupError {
        message: message.into(),
    }
}

/// The job's `--allow-host` list, parsed.
fn allow_list(spec: &JobSpec) -> Result<Vec<AllowHost>, GatewaySetupError> {
    spec.model_access
        .allow_hosts
        .iter()
        .map(|h| {
            h.parse::<AllowHost>()
                .map_err(|e| setup_error(format!("`--allow-host {h}`: {e}")))
        })
        .collect()
}

impl GatewayPlan {
    /// The plan of an attempt of `spec`, whose job has used `used_before` tokens; its request
    /// bodies also take their bytes from `process_pool` (the bound of all the gateways of this
    /// process). `None` when the job uses neither the model gateway nor the egress proxy.
    pub fn new(
        spec: &JobSpec,
        upstream: Option<&ResolvedUpstream>,
        used_before: u64,
        process_pool: &Arc<BytePool>,
    ) -> Result<Option<Self>, GatewaySetupError> {
        let allow = allow_list(spec)?;
        if upstream.is_none() && allow.is_empty() {
            return Ok(None);
        }
        let budget = Arc::new(TokenBudget::new(spec.max_tokens, used_before));
        let model = match upstream {
            Some(u) => {
                let cfg = ModelGatewayConfig::new(
                    Upstream {
                        url: u.url.clone(),
                        api: u.api,
                        key: Secret::new(u.key.clone()),
                    },
                    ModelLimits::default(),
                    budget.clone(),
                )
                .map_err(|e| setup_error(format!("`--upstream`: {e}")))?
                .with_shared_pool(Arc::clone(process_pool));
                Some(Arc::new(cfg))
            }
            None => None,
        };
        let egress = (!allow.is_empty()).then(|| Arc::new(EgressConfig::new(allow)));
        Ok(Some(Self {
            model,
            egress,
            budget,
        }))
    }

    /// The plan of a runner step (set-up, verify) of `spec`: the egress proxy with the job's
    /// `--allow-host` list, and no model gateway (SPEC §12: the rounds' network, never more;
    /// a step needs no model, so it gets no way to one). `None` when the job allows no host.
    pub fn egress_only(spec: &JobSpec) -> Result<Option<Self>, GatewaySetupError> {
        let allow = allow_list(spec)?;
        if allow.is_empty() {
            return Ok(None);
        }
        Ok(Some(Self {
            model: None,
            egress: Some(Arc::new(EgressConfig::new(allow))),
            // No model request can reach this plan: the budget is never consulted.
            budget: Arc::new(TokenBudget::new(None, 0)),
        }))
    }

    /// The loopback ports the sandbox must open inside the round.
    pub fn ports(&self) -> Vec<u16> {
        let mut ports = Vec::new();
        if self.model.is_some() {
            ports.push(MODEL_PORT);
        }
        if self.egress.is_some() {
            ports.push(EGRESS_PORT);
        }
        ports
    }

    /// The model gateway's URL as the round reaches it.
    pub fn gateway_url(&self) -> Option<String> {
        self.model.as_ref().map(|m| m.agent_base_url(MODEL_PORT))
    }

    /// Variables the round gets: `RALPH_GATEWAY_URL` and the proxy variables.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = Vec::new();
        if let Some(url) = self.gateway_url() {
            env.push(("RALPH_GATEWAY_URL".to_owned(), url));
        }
        if let Some(e) = &self.egress {
            env.extend(proxy_env(EGRESS_PORT, &e.allow));
        }
        env
    }

    /// The budget shared by this attempt's requests.
    pub fn budget(&self) -> &Arc<TokenBudget> {
        &self.budget
    }

    /// Serves the plan on the listeners the sandbox handed over. `round_stop` is cancelled
    /// (and `crossed` set) when the token budget is crossed at the wire.
    pub fn start(
        self,
        listeners: Vec<(u16, std::net::TcpListener)>,
        round_stop: CancellationToken,
        crossed: Arc<AtomicBool>,
    ) -> Result<RunningGateway, GatewaySetupError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let channel = Arc::new(ChannelSink {
            tx,
            round_stop,
            crossed,
            refusals: Mutex::new(RefusalLog::new(Instant::now())),
        });
        let sink: Arc<dyn GatewaySink> = channel.clone();
        let stop = CancellationToken::new();
        let mut tasks = Vec::new();
        for want in self.ports() {
            let Some((_, listener)) = listeners.iter().find(|(p, _)| *p == want) else {
                return Err(setup_error(format!(
                    "the sandbox did not hand over the listener of port {want}"
                )));
            };
            let std_listener = listener.try_clone().map_err(|e| {
                setup_error(format!("failed to take the listener of port {want}: {e}"))
            })?;
            std_listener.set_nonblocking(true).map_err(|e| {
                setup_error(format!(
                    "failed to make the listener of port {want} non-blocking: {e}"
                ))
            })?;
            let listener = tokio::net::TcpListener::from_std(std_listener).map_err(|e| {
                setup_error(format!("failed to serve the listener of port {want}: {e}"))
            })?;
            let (sink, stop) = (sink.clone(), stop.clone());
            let task = match (want, &self.model, &self.egress) {
                (MODEL_PORT, Some(m), _) => {
                    let m = m.clone();
                    tokio::spawn(async move {
                        let _ = serve_model(listener, m, sink, stop).await;
                    })
                }
                (_, _, Some(e)) => {
                    let e = e.clone();
                    tokio::spawn(async move {
                        let _ = serve_egress(listener, e, sink, stop).await;
                    })
                }
                _ => continue,
            };
            tasks.push(task);
        }
        Ok(RunningGateway {
            stop,
            tasks,
            rx,
            sink: channel,
        })
    }
}

/// The servers of an attempt, running.
#[derive(Debug)]
pub struct RunningGateway {
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    rx: mpsc::UnboundedReceiver<GatewayEvent>,
    sink: Arc<ChannelSink>,
}

impl RunningGateway {
    /// The next event; waits. `None` once the servers are gone.
    pub async fn next(&mut self) -> Option<GatewayEvent> {
        self.rx.recv().await
    }

    /// Stops the servers (open responses are cut and reported) and returns what is left to
    /// journal.
    pub async fn stop(mut self) -> Vec<GatewayEvent> {
        self.stop.cancel();
        for t in self.tasks.drain(..) {
            let abort = t.abort_handle();
            if tokio::time::timeout(STOP_WAIT, t).await.is_err() {
                abort.abort();
            }
        }
        let mut rest = Vec::new();
        while let Ok(ev) = self.rx.try_recv() {
            rest.push(ev);
        }
        // Refusals still held: their summary comes last.
        if let Some(s) = self.sink.refusals.lock().ok().and_then(|mut l| l.flush()) {
            rest.push(GatewayEvent::Refusals(s));
        }
        rest
    }
}

struct ChannelSink {
    tx: mpsc::UnboundedSender<GatewayEvent>,
    round_stop: CancellationToken,
    crossed: Arc<AtomicBool>,
    refusals: Mutex<RefusalLog>,
}

impl std::fmt::Debug for ChannelSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelSink").finish_non_exhaustive()
    }
}

impl GatewaySink for ChannelSink {
    fn model_request(&self, r: &ModelRequest) {
        let ev = match r.refusal {
            None => Some(GatewayEvent::Model(r.clone())),
            Some(reason) => match self.refusals.lock() {
                Ok(mut log) => match log.refused(r, reason, Instant::now()) {
                    Disposition::Journal => Some(GatewayEvent::Model(r.clone())),
                    Disposition::Held => None,
                    Disposition::Summary(s) => Some(GatewayEvent::Refusals(s)),
                },
                // A poisoned log: journal the refusal rather than lose it.
                Err(_) => Some(GatewayEvent::Model(r.clone())),
            },
        };
        if let Some(ev) = ev {
            let _ = self.tx.send(ev);
        }
    }

    fn egress(&self, e: &EgressDecision) {
        let _ = self.tx.send(GatewayEvent::Egress(e.clone()));
    }

    fn budget_crossed(&self, _used: u64, _max: u64) {
        self.crossed.store(true, Ordering::SeqCst);
        self.round_stop.cancel();
    }
}
