//! The gRPC agent API (`ctxsync.agent.v1.Agent`): the only module of this crate that
//! knows gRPC. Authenticates the bearer token from the headers before the body is read
//! ([`Authenticated`]), validates with `ctxsync-protocol` before any other database
//! access, and maps store outcomes and errors to gRPC.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use ctxsync_protocol::limits::{
    MAX_ERROR_BYTES, MAX_HASH_BYTES, MAX_RESOURCES, MAX_SOURCE_BYTES, MAX_TOTAL_BODY_BYTES,
};
use ctxsync_protocol::v1::agent_server::{Agent, AgentServer};
use ctxsync_protocol::v1::{
    PushContextStateRequest, PushContextStateResponse, UpdateStartupRequest,
};
use ctxsync_protocol::{BODY_DIGEST_BYTES, DELTA_DIGEST_SCHEME};
use ctxsync_protocol::{Push, Startup, v1};
use tonic::codegen::{BoxFuture, Service, http};
use tonic::server::NamedService;
use tonic::{Request, Response, Status};

use crate::error::StoreError;
use crate::ids::AgentId;
use crate::model::PushOutcome;
use crate::store::Store;

/// Largest request the server decodes: every wire limit at its maximum fits, so an
/// oversized field is refused by validation (naming the field), not by the transport.
pub const MAX_REQUEST_BYTES: usize = MAX_TOTAL_BODY_BYTES
    + MAX_RESOURCES
        * (2 * MAX_SOURCE_BYTES + MAX_HASH_BYTES + MAX_ERROR_BYTES + BODY_DIGEST_BYTES + 64)
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
    pushes_delta: AtomicU64,
    pushes_delta_base_missing: AtomicU64,
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
    /// Delta pushes received (counted in the results above, or as base-missing).
    pub pushes_delta: u64,
    /// Delta pushes refused because their base was not stored.
    pub pushes_delta_base_missing: u64,
    /// Refused for its content: `InvalidArgument` (wire validation, the codec's counting
    /// limits) or `ResourceExhausted` (the codec's decoded-size bound).
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
            pushes_delta: get(&self.pushes_delta),
            pushes_delta_base_missing: get(&self.pushes_delta_base_missing),
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

/// The `Agent` service implementation. Serve it through [`AgentApi::into_server`], which
/// puts token authentication in front of decoding.
#[derive(Clone, Debug)]
pub struct AgentApi {
    store: Store,
    metrics: Arc<AgentApiMetrics>,
    /// Whether `UpdateStartup` answers offer delta pushes (on unless turned off).
    offer_deltas: bool,
}

/// The agent a request's bearer token belongs to, put in the request's extensions by
/// [`Authenticated`] before the body is read.
#[derive(Clone, Copy, Debug)]
struct AuthenticatedAgent(AgentId);

impl AgentApi {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            metrics: Arc::default(),
            offer_deltas: true,
        }
    }

    /// Whether `UpdateStartup` answers offer delta pushes. Off, the server answers as one
    /// that predates them, and agents send only full pushes; a delta sent anyway is still
    /// applied or refused by its base, never read as a full push.
    pub fn offer_deltas(mut self, offer: bool) -> Self {
        self.offer_deltas = offer;
        self
    }

    pub fn metrics(&self) -> Arc<AgentApiMetrics> {
        Arc::clone(&self.metrics)
    }

    /// The tonic service behind token authentication: a request without a valid agent
    /// token is answered `Unauthenticated` from its headers alone, before its body is read
    /// or decoded. The decoding limit lets validation see every request within the wire
    /// limits; counting limits are checked on the encoded bytes (see
    /// [`ctxsync_protocol::codec`]).
    pub fn into_server(self) -> Authenticated<AgentServer<Self>> {
        Authenticated {
            store: self.store.clone(),
            metrics: Arc::clone(&self.metrics),
            inner: AgentServer::new(self).max_decoding_message_size(MAX_REQUEST_BYTES),
        }
    }

    /// The agent [`Authenticated`] found for this request.
    fn agent<T>(&self, request: &Request<T>) -> Result<AgentId, Status> {
        match request.extensions().get::<AuthenticatedAgent>() {
            Some(AuthenticatedAgent(agent)) => Ok(*agent),
            // Only reachable when the service is served without `into_server`.
            None => Err(unauthenticated(&self.metrics, MISSING_TOKEN)),
        }
    }

    fn status(&self, error: StoreError) -> Status {
        status(&self.metrics, error)
    }
}

const MISSING_TOKEN: &str = "missing `authorization: Bearer <agent token>`";

/// gRPC services that answer without a token: Kubernetes probes and `grpcurl` send none.
const OPEN_SERVICES: &[&str] = &[
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1.ServerReflection/",
    "/grpc.reflection.v1alpha.ServerReflection/",
];

fn unauthenticated(metrics: &AgentApiMetrics, message: &'static str) -> Status {
    bump(&metrics.requests_unauthenticated);
    Status::unauthenticated(message)
}

/// Maps a store error to gRPC and counts it.
fn status(metrics: &AgentApiMetrics, error: StoreError) -> Status {
    match error {
        StoreError::InvalidToken | StoreError::AgentNotFound(_) => {
            unauthenticated(metrics, "unknown agent token")
        }
        StoreError::SupersededRun { .. } => {
            bump(&metrics.startups_superseded);
            Status::failed_precondition(SUPERSEDED_MESSAGE)
        }
        // Counted by `Authenticated` from the answer, with the codec's refusals.
        StoreError::InvalidInput(reason) => Status::invalid_argument(reason),
        StoreError::Unavailable(reason) => {
            bump(&metrics.requests_unavailable);
            tracing::warn!(%reason, "database unavailable");
            Status::unavailable("database unavailable; retry later")
        }
        StoreError::Conflict(reason) => {
            bump(&metrics.requests_unavailable);
            tracing::warn!(%reason, "write conflict after retries");
            Status::aborted("concurrent update; retry")
        }
        other => {
            bump(&metrics.requests_failed);
            tracing::error!(error = %other, "agent API request failed");
            Status::internal("internal error")
        }
    }
}

/// The answer refuses the request's content: `InvalidArgument` from validation or the
/// codec, or `ResourceExhausted` from the codec's decoded-size bound.
fn is_refused_as_invalid(headers: &http::HeaderMap) -> bool {
    let code = headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok());
    matches!(
        code.map(tonic::Code::from_i32),
        Some(tonic::Code::InvalidArgument | tonic::Code::ResourceExhausted)
    )
}

/// The bearer token of `authorization` metadata.
fn bearer(headers: &http::HeaderMap) -> Option<&str> {
    headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// Authenticates each call from its headers before the wrapped service sees it, so an
/// unauthenticated caller costs a header parse and one indexed lookup, never a decode:
/// its body is dropped unread (HTTP/2 resets the stream and returns the window).
#[derive(Clone, Debug)]
pub struct Authenticated<S> {
    inner: S,
    store: Store,
    metrics: Arc<AgentApiMetrics>,
}

impl<S: NamedService> NamedService for Authenticated<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> Service<http::Request<B>> for Authenticated<S>
where
    S: Service<http::Request<B>, Response = http::Response<tonic::body::Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // tonic's generated server is always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let mut inner = self.inner.clone();
        let path = request.uri().path();
        if OPEN_SERVICES.iter().any(|open| path.starts_with(open)) {
            return Box::pin(inner.call(request));
        }
        let token = bearer(request.headers()).map(str::to_owned);
        let store = self.store.clone();
        let metrics = Arc::clone(&self.metrics);
        Box::pin(async move {
            let Some(token) = token else {
                return Ok(unauthenticated(&metrics, MISSING_TOKEN).into_http());
            };
            match store.authenticate(&token).await {
                Ok(agent) => {
                    request.extensions_mut().insert(AuthenticatedAgent(agent));
                    let response = inner.call(request).await?;
                    // Counted here, not in the handlers: the codec refuses over-limit
                    // requests before a handler runs (a trailers-only answer).
                    if is_refused_as_invalid(response.headers()) {
                        bump(&metrics.requests_invalid);
                    }
                    Ok(response)
                }
                Err(error) => Ok(status(&metrics, error).into_http()),
            }
        })
    }
}

#[tonic::async_trait]
impl Agent for AgentApi {
    async fn update_startup(
        &self,
        request: Request<UpdateStartupRequest>,
    ) -> Result<Response<v1::Startup>, Status> {
        let agent = self.agent(&request)?;
        let startup = Startup::try_from(request.into_inner()).map_err(Status::from)?;
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
            delta_digest_scheme: if self.offer_deltas {
                DELTA_DIGEST_SCHEME
            } else {
                0
            },
        }))
    }

    async fn push_context_state(
        &self,
        request: Request<PushContextStateRequest>,
    ) -> Result<Response<PushContextStateResponse>, Status> {
        let agent = self.agent(&request)?;
        let push = Push::try_from(request.into_inner()).map_err(Status::from)?;
        if push.delta {
            bump(&self.metrics.pushes_delta);
        }
        let outcome = self
            .store
            .push_context_state(agent, push)
            .await
            .map_err(|e| self.status(e))?;
        let mut delta_base_missing = false;
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
            PushOutcome::DeltaBaseMissing => {
                bump(&self.metrics.pushes_delta_base_missing);
                delta_base_missing = true;
                false
            }
        };
        Ok(Response::new(PushContextStateResponse {
            accepted,
            delta_base_missing,
        }))
    }
}
