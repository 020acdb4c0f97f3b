//! The gRPC agent API (`ctxsync.agent.v1.Agent`): the only module of this crate that
//! knows gRPC. Authenticates the bearer token, validates with `ctxsync-protocol` before
//! any database access, and maps store outcomes and errors to gRPC.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ctxsync_protocol::limits::{
    MAX_ERROR_BYTES, MAX_HASH_BYTES, MAX_RESOURCES, MAX_SOURCE_BYTES, MAX_TOTAL_BODY_BYTES,
};
use ctxsync_protocol::v1::agent_server::{Agent, AgentServer};
use ctxsync_protocol::v1::{
    PushContextStateRequest, PushContextStateResponse, UpdateStartupRequest,
};
use ctxsync_protocol::{Snapshot, Startup, v1};
use tonic::{Request, Response, Status};

use crate::error::StoreError;
use crate::ids::AgentId;
use crate::model::PushOutcome;
use crate::store::Store;

/// Largest request the server decodes: every wire limit at its maximum fits, so an
/// oversized field is refused by validation (naming the field), not by the transport.
pub const MAX_REQUEST_BYTES: usize = MAX_TOTAL_BODY_BYTES
    + MAX_RESOURCES * (2 * MAX_SOURCE_BYTES + MAX_HASH_BYTES + MAX_ERROR_BYTES + 64)
    + 64 * 1024;

/// The message an UpdateStartup from a superseded process receives.
pub const SUPERSEDED_MESSAGE: &str = "superseded by a newer agent process";

/// Counters a `/metrics` endpoint can read. Monotonic; relaxed ordering is enough for
/// independent counters.
#[derive(Debug, Default)]
pub struct AgentApiMetrics {
    startups_accepted: AtomicU64,
    startups_superseded: AtomicU64,
    pushes_accepted: AtomicU64,
    pushes_dropped_stale_run: AtomicU64,
    pushes_dropped_stale_version: AtomicU64,
    requests_invalid: AtomicU64,
    requests_unauthenticated: AtomicU64,
    requests_unavailable: AtomicU64,
    requests_failed: AtomicU64,
}

/// A point-in-time copy of [`AgentApiMetrics`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AgentApiCounters {
    pub startups_accepted: u64,
    pub startups_superseded: u64,
    pub pushes_accepted: u64,
    pub pushes_dropped_stale_run: u64,
    pub pushes_dropped_stale_version: u64,
    /// Refused by wire validation (`InvalidArgument`).
    pub requests_invalid: u64,
    pub requests_unauthenticated: u64,
    /// The database was unavailable or kept conflicting (`Unavailable`/`Aborted`).
    pub requests_unavailable: u64,
    /// Any other failure (`Internal`).
    pub requests_failed: u64,
}

impl AgentApiMetrics {
    pub fn snapshot(&self) -> AgentApiCounters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        AgentApiCounters {
            startups_accepted: get(&self.startups_accepted),
            startups_superseded: get(&self.startups_superseded),
            pushes_accepted: get(&self.pushes_accepted),
            pushes_dropped_stale_run: get(&self.pushes_dropped_stale_run),
            pushes_dropped_stale_version: get(&self.pushes_dropped_stale_version),
            requests_invalid: get(&self.requests_invalid),
            requests_unauthenticated: get(&self.requests_unauthenticated),
            requests_unavailable: get(&self.requests_unavailable),
            requests_failed: get(&self.requests_failed),
        }
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// The `Agent` service implementation.
#[derive(Clone, Debug)]
pub struct AgentApi {
    store: Store,
    metrics: Arc<AgentApiMetrics>,
}

impl AgentApi {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            metrics: Arc::default(),
        }
    }

    pub fn metrics(&self) -> Arc<AgentApiMetrics> {
        Arc::clone(&self.metrics)
    }

    /// The tonic service, with a decoding limit that lets validation see every request
    /// within the wire limits.
    pub fn into_server(self) -> AgentServer<Self> {
        AgentServer::new(self).max_decoding_message_size(MAX_REQUEST_BYTES)
    }

    /// The bearer token from `authorization` metadata, before any database access.
    fn bearer<T>(&self, request: &Request<T>) -> Result<String, Status> {
        let token = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty());
        match token {
            Some(token) => Ok(token.to_owned()),
            None => {
                bump(&self.metrics.requests_unauthenticated);
                Err(Status::unauthenticated(
                    "missing `authorization: Bearer <agent token>`",
                ))
            }
        }
    }

    async fn authenticate(&self, token: &str) -> Result<AgentId, Status> {
        self.store
            .authenticate(token)
            .await
            .map_err(|e| self.status(e))
    }

    /// Maps a store error to gRPC and counts it.
    fn status(&self, error: StoreError) -> Status {
        match error {
            StoreError::InvalidToken | StoreError::AgentNotFound(_) => {
                bump(&self.metrics.requests_unauthenticated);
                Status::unauthenticated("unknown agent token")
            }
            StoreError::SupersededRun { .. } => {
                bump(&self.metrics.startups_superseded);
                Status::failed_precondition(SUPERSEDED_MESSAGE)
            }
            StoreError::InvalidInput(reason) => {
                bump(&self.metrics.requests_invalid);
                Status::invalid_argument(reason)
            }
            StoreError::Unavailable(reason) => {
                bump(&self.metrics.requests_unavailable);
                tracing::warn!(%reason, "database unavailable");
                Status::unavailable("database unavailable; retry later")
            }
            StoreError::Conflict(reason) => {
                bump(&self.metrics.requests_unavailable);
                tracing::warn!(%reason, "write conflict after retries");
                Status::aborted("concurrent update; retry")
            }
            other => {
                bump(&self.metrics.requests_failed);
                tracing::error!(error = %other, "agent API request failed");
                Status::internal("internal error")
            }
        }
    }

    fn invalid(&self, error: ctxsync_protocol::WireError) -> Status {
        bump(&self.metrics.requests_invalid);
        error.into()
    }
}

#[tonic::async_trait]
impl Agent for AgentApi {
    async fn update_startup(
        &self,
        request: Request<UpdateStartupRequest>,
    ) -> Result<Response<v1::Startup>, Status> {
        let token = self.bearer(&request)?;
        let startup = Startup::try_from(request.into_inner()).map_err(|e| self.invalid(e))?;
        let agent = self.authenticate(&token).await?;
        let outcome = self
            .store
            .update_startup(agent, startup)
            .await
            .map_err(|e| self.status(e))?;
        bump(&self.metrics.startups_accepted);
        Ok(Response::new(v1::Startup {
            version: outcome.startup_version,
            expanded_directory: outcome.expanded_directory,
            agent_run_id: outcome.agent_run_id,
        }))
    }

    async fn push_context_state(
        &self,
        request: Request<PushContextStateRequest>,
    ) -> Result<Response<PushContextStateResponse>, Status> {
        let token = self.bearer(&request)?;
        let snapshot = Snapshot::try_from(request.into_inner()).map_err(|e| self.invalid(e))?;
        let agent = self.authenticate(&token).await?;
        let outcome = self
            .store
            .push_context_state(agent, snapshot)
            .await
            .map_err(|e| self.status(e))?;
        let accepted = match outcome {
            PushOutcome::Accepted(_) => {
                bump(&self.metrics.pushes_accepted);
                true
            }
            PushOutcome::DroppedStaleRun => {
                bump(&self.metrics.pushes_dropped_stale_run);
                false
            }
            PushOutcome::DroppedStaleVersion { .. } => {
                bump(&self.metrics.pushes_dropped_stale_version);
                false
            }
        };
        Ok(Response::new(PushContextStateResponse { accepted }))
    }
}
