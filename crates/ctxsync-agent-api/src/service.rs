//! The gRPC agent API service (`ctxsync.agent.v1.Agent`). Authenticates the bearer
//! token from the headers before the body is read ([`Authenticated`]), validates with
//! `ctxsync-protocol` before any other database access, and maps store outcomes and
//! errors to gRPC; `ToolCalls` streams go to the tool-call hub.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use ctxsync_persistence::{AgentId, PresentedToken, PushOutcome, Store, StoreError, TokenDigest};
use ctxsync_protocol::limits::{
    MAX_ERROR_BYTES, MAX_HASH_BYTES, MAX_RESOURCES, MAX_SOURCE_BYTES, MAX_TOTAL_BODY_BYTES,
};
use ctxsync_protocol::tool_call::{AgentCall, MAX_CALL_MESSAGE_BYTES};
use ctxsync_protocol::v1::agent_server::{Agent, AgentServer};
use ctxsync_protocol::v1::{
    PushContextStateRequest, PushContextStateResponse, UpdateStartupRequest,
};
use ctxsync_protocol::{BODY_DIGEST_BYTES, DELTA_DIGEST_SCHEME};
use ctxsync_protocol::{Push, RunId, Startup, v1};
use tokio_stream::StreamExt;
use tonic::codegen::{BoxFuture, Service, http};
use tonic::server::NamedService;
use tonic::{Request, Response, Status};

use crate::metrics::{AgentApiMetrics, PushResult, bump};
use crate::tool_call::CallHub;

/// Largest request the server decodes: every wire limit at its maximum fits, so an
/// oversized field is refused by validation (naming the field), not by the transport.
pub const MAX_REQUEST_BYTES: usize = MAX_TOTAL_BODY_BYTES
    + MAX_RESOURCES
        * (2 * MAX_SOURCE_BYTES + MAX_HASH_BYTES + MAX_ERROR_BYTES + BODY_DIGEST_BYTES + 64)
    + 64 * 1024;

// A call result at its cap, with its envelope, decodes under the one limit the Agent
// server sets for every method.
const _: () = assert!(MAX_REQUEST_BYTES >= MAX_CALL_MESSAGE_BYTES);

/// The message a ToolCalls stream opened by a run other than the agent's current one
/// receives (`FAILED_PRECONDITION`).
pub const STALE_CALL_RUN_MESSAGE: &str = "the call stream's run is not the agent's current one";

/// The message an UpdateStartup from a superseded process receives.
pub const SUPERSEDED_MESSAGE: &str = "superseded by a newer agent process";

/// The `Agent` service implementation. Serve it through [`AgentApi::into_server`], which
/// puts token authentication in front of decoding.
#[derive(Clone, Debug)]
pub struct AgentApi {
    store: Store,
    metrics: Arc<AgentApiMetrics>,
    /// Whether `UpdateStartup` answers offer delta pushes (on unless turned off).
    offer_deltas: bool,
    /// Serves `ToolCalls` streams; without it, they are refused `UNIMPLEMENTED`.
    calls: Option<Arc<CallHub>>,
    /// Shared with [`Authenticated`]: a push refused for its token forgets it here.
    pushers: Arc<PusherTokens>,
}

/// The gRPC path of `PushContextState`, the one method whose token [`Authenticated`] may
/// accept from [`PusherTokens`]: the push checks it against the database itself.
const PUSH_PATH: &str = "/ctxsync.agent.v1.Agent/PushContextState";

/// Most agents [`PusherTokens`] remembers; past it, it starts over (each agent's next
/// push then authenticates against the database once more).
const MAX_REMEMBERED_PUSHERS: usize = 1 << 17;

/// Per agent, the digest of the last token the database accepted from it, so its
/// pushes skip a separate lookup before their transaction. Not a cache that can outlive
/// a revocation: it only decides whether a push's body is decoded, and the push's
/// transaction compares the digest with the agent row before writing anything (a
/// rotated token is refused there, and forgotten here).
#[derive(Default)]
struct PusherTokens(std::sync::Mutex<std::collections::HashMap<AgentId, TokenDigest>>);

impl PusherTokens {
    fn knows(&self, token: &PresentedToken) -> bool {
        let known = self.lock();
        known
            .get(&token.claimed_agent())
            .is_some_and(|stored| stored.matches(&token.digest()))
    }

    fn remember(&self, agent: AgentId, digest: TokenDigest) {
        let mut known = self.lock();
        if known.len() >= MAX_REMEMBERED_PUSHERS && !known.contains_key(&agent) {
            known.clear();
        }
        known.insert(agent, digest);
    }

    fn forget(&self, agent: AgentId) {
        self.lock().remove(&agent);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<AgentId, TokenDigest>> {
        // The map holds no invariant a panic could break.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl std::fmt::Debug for PusherTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PusherTokens({} agents)", self.lock().len())
    }
}

/// The agent a request's bearer token belongs to, put in the request's extensions by
/// [`Authenticated`] before the body is read.
#[derive(Clone, Copy)]
struct AuthenticatedAgent {
    agent: AgentId,
    /// When the call arrived, before the token lookup: where push durations start.
    received: Instant,
    /// The SHA-256 of the token presented, which a push checks again in its transaction.
    token_digest: TokenDigest,
}

impl AgentApi {
    /// The service on `store`, with fresh metrics and delta pushes offered.
    pub fn new(store: Store) -> Self {
        Self {
            store,
            metrics: Arc::default(),
            offer_deltas: true,
            calls: None,
            pushers: Arc::default(),
        }
    }

    /// Serves agents' `ToolCalls` streams through `hub` (the one the HTTP layer sends
    /// calls through).
    pub fn with_calls(mut self, hub: Arc<CallHub>) -> Self {
        self.calls = Some(hub);
        self
    }

    /// Whether `UpdateStartup` answers offer delta pushes. Off, the server answers as one
    /// that predates them, and agents send only full pushes; a delta sent anyway is still
    /// applied or refused by its base, never read as a full push.
    pub fn offer_deltas(mut self, offer: bool) -> Self {
        self.offer_deltas = offer;
        self
    }

    /// The metrics this service and its [`Authenticated`] wrapper count into (shared,
    /// not a copy).
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
            pushers: Arc::clone(&self.pushers),
            inner: AgentServer::new(self).max_decoding_message_size(MAX_REQUEST_BYTES),
        }
    }

    /// The agent [`Authenticated`] found for this request.
    fn agent<T>(&self, request: &Request<T>) -> Result<AgentId, Status> {
        self.authenticated(request).map(|a| a.agent)
    }

    fn authenticated<T>(&self, request: &Request<T>) -> Result<AuthenticatedAgent, Status> {
        match request.extensions().get::<AuthenticatedAgent>() {
            Some(authenticated) => Ok(*authenticated),
            // Only reachable when the service is served without `into_server`.
            None => Err(unauthenticated(&self.metrics, MISSING_TOKEN)),
        }
    }

    fn status(&self, error: StoreError) -> Status {
        status(&self.metrics, error)
    }

    /// When [`Authenticated`] received the call (now, served without it).
    fn received<T>(&self, request: &Request<T>) -> Instant {
        request
            .extensions()
            .get::<AuthenticatedAgent>()
            .map_or_else(Instant::now, |authenticated| authenticated.received)
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
    pushers: Arc<PusherTokens>,
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
        let received = Instant::now();
        let token = bearer(request.headers()).map(str::to_owned);
        let is_push = path == PUSH_PATH;
        let store = self.store.clone();
        let metrics = Arc::clone(&self.metrics);
        let pushers = Arc::clone(&self.pushers);
        Box::pin(async move {
            let Some(token) = token else {
                return Ok(unauthenticated(&metrics, MISSING_TOKEN).into_http());
            };
            // Parsed and hashed once, whichever way it is checked.
            let authenticated = match PresentedToken::parse(&token) {
                // A push by a token the database accepted before skips the lookup: its
                // own transaction checks the token against the row it locks.
                Ok(presented) if is_push && pushers.knows(&presented) => {
                    Ok((presented.claimed_agent(), presented.digest()))
                }
                Ok(presented) => store
                    .authenticate_presented(&presented)
                    .await
                    .inspect(|agent| {
                        if is_push {
                            pushers.remember(*agent, presented.digest());
                        }
                    })
                    .map(|agent| (agent, presented.digest())),
                Err(error) => Err(error),
            };
            match authenticated {
                Ok((agent, token_digest)) => {
                    request.extensions_mut().insert(AuthenticatedAgent {
                        agent,
                        received,
                        token_digest,
                    });
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

impl AgentApi {
    async fn push(
        &self,
        request: Request<PushContextStateRequest>,
    ) -> Result<(PushResult, PushContextStateResponse), Status> {
        let AuthenticatedAgent {
            agent,
            token_digest,
            ..
        } = self.authenticated(&request)?;
        let push = Push::try_from(request.into_inner()).map_err(Status::from)?;
        if push.delta {
            bump(&self.metrics.pushes_delta);
        }
        let outcome = self
            .store
            .push_with_token(agent, token_digest, push)
            .await
            .map_err(|e| {
                if matches!(e, StoreError::InvalidToken | StoreError::AgentNotFound(_)) {
                    self.pushers.forget(agent);
                }
                self.status(e)
            })?;
        let result = match outcome {
            PushOutcome::Accepted(changes) => {
                bump(&self.metrics.pushes_accepted);
                // Committed: the store reports each server's connect once (see its push).
                for timings in &changes.server_timings {
                    self.metrics.server_connected(timings);
                }
                PushResult::Accepted
            }
            PushOutcome::DroppedStaleRun => {
                bump(&self.metrics.pushes_dropped_stale_run);
                PushResult::DroppedStaleRun
            }
            PushOutcome::DroppedStaleVersion { .. } => {
                bump(&self.metrics.pushes_dropped_stale_version);
                PushResult::DroppedStaleVersion
            }
            PushOutcome::DeltaBaseMissing => {
                bump(&self.metrics.pushes_delta_base_missing);
                PushResult::DeltaBaseMissing
            }
        };
        let response = PushContextStateResponse {
            accepted: result == PushResult::Accepted,
            delta_base_missing: result == PushResult::DeltaBaseMissing,
        };
        Ok((result, response))
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
        if let Some(hub) = &self.calls
            && outcome.run_id_changed()
        {
            // The old process is gone: what it held may or may not have run. The startup
            // is stored either way; a failure here leaves those calls to their deadlines.
            if let Err(error) = hub
                .agent_restarted(agent, outcome.agent_run_id.as_ref())
                .await
            {
                tracing::warn!(%agent, %error, "ending a restarted agent's calls failed");
            }
        }
        Ok(Response::new(v1::Startup {
            version: outcome.startup_version,
            expanded_directory: outcome.expanded_directory,
            agent_run_id: outcome
                .agent_run_id
                .map(RunId::into_string)
                .unwrap_or_default(),
            delta_digest_scheme: if self.offer_deltas {
                DELTA_DIGEST_SCHEME
            } else {
                0
            },
            // Tells the agent this server serves ToolCalls.
            accepts_tool_calls: self.calls.is_some(),
        }))
    }

    type ToolCallsStream = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = Result<v1::ServerCallMessage, Status>> + Send>,
    >;

    async fn tool_calls(
        &self,
        request: Request<tonic::Streaming<v1::AgentCallMessage>>,
    ) -> Result<Response<Self::ToolCallsStream>, Status> {
        let agent = self.agent(&request)?;
        let Some(hub) = &self.calls else {
            return Err(Status::unimplemented("this server does not run tool calls"));
        };
        let mut inbound = request.into_inner();
        // The handler answers (and the server's request timeout stops counting) only
        // after the hello: bounded like any silence.
        let first = match tokio::time::timeout(hub.config().silence_limit, inbound.message()).await
        {
            Err(_) => return Err(Status::deadline_exceeded("no hello on the call stream")),
            Ok(Err(status)) => return Err(status),
            Ok(Ok(None)) => {
                return Err(Status::invalid_argument(
                    "the call stream ended before its hello",
                ));
            }
            Ok(Ok(Some(first))) => first,
        };
        let AgentCall::Hello { agent_run_id } = AgentCall::try_from(first)? else {
            return Err(Status::invalid_argument(
                "the call stream's first message must be a hello",
            ));
        };
        let row = self
            .store
            .get_agent(agent)
            .await
            .map_err(|e| self.status(e))?
            .ok_or_else(|| unauthenticated(&self.metrics, "unknown agent token"))?;
        if row.agent_run_id.as_ref() != Some(&agent_run_id) {
            return Err(Status::failed_precondition(STALE_CALL_RUN_MESSAGE));
        }
        let inbound = inbound.map_while(move |item| match item {
            Ok(message) => Some(AgentCall::try_from(message).map_err(|e| e.to_string())),
            Err(status) => {
                tracing::debug!(%agent, code = ?status.code(), "call stream failed");
                None
            }
        });
        let outbound = hub
            .open(agent, agent_run_id, Box::pin(inbound))
            .await
            .map_err(|e| self.status(e))?
            .ok_or_else(|| Status::failed_precondition(STALE_CALL_RUN_MESSAGE))?
            .map(|call| Ok(v1::ServerCallMessage::from(*call)));
        Ok(Response::new(Box::pin(outbound)))
    }

    async fn push_context_state(
        &self,
        request: Request<PushContextStateRequest>,
    ) -> Result<Response<PushContextStateResponse>, Status> {
        let received = self.received(&request);
        let answer = self.push(request).await;
        let result = match &answer {
            Ok((result, _)) => *result,
            Err(_) => PushResult::Error,
        };
        self.metrics.push_finished(result, received);
        answer.map(|(_, response)| Response::new(response))
    }
}
