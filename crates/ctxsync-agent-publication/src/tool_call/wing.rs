//! The call wing's stream: opening `ToolCalls` on each registration, `Hello`, heartbeats,
//! the server's silence limit and reopening with backoff; admitting each call (run id,
//! `--no-tool-calls`, the policy, the runner's listing, the running and waiting limits,
//! each call id once per run), running it through the [`CallRunner`] with its deadline,
//! cancellation and progress, and sending its end; and the sign-ins the server routes the
//! same way (begun and finished by the runner, kept credentials handed to it, refreshed
//! ones sent back).

use std::collections::{HashMap, HashSet, VecDeque};
use std::convert::Infallible;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use ctxsync_mcp_model::{CallEnd, CallProgress, CallReason, CallSpec, CallStatus};
use ctxsync_protocol::sign_in::SignInOutcome;
use ctxsync_protocol::tool_call::{AgentCall, CallRequest, ServerCall, ToolCallId};
use ctxsync_protocol::{RunId, v1};
use serde_json::{Map, Value};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::time::{Instant, MissedTickBehavior, interval_at, sleep, sleep_until};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tonic::Code;
use tracing::{debug, info, warn};

use crate::backoff::{Backoff, BackoffPolicy};
use crate::connection::Client;

use super::config::{MAX_RUNNING_CALLS, MAX_WAITING_CALLS, REMEMBERED_CALL_IDS, ToolCallConfig};
use super::runner::CallRunner;

/// Messages waiting to go out on one stream; a progress report finding it full is dropped
/// (the server keeps only the latest anyway), every other message waits for room.
const OUTGOING_CAPACITY: usize = 64;
/// Progress reports of one call waiting to be relayed.
const PROGRESS_CAPACITY: usize = 4;

/// A connection the publisher registered on; `generation` grows with each registration.
#[derive(Clone, Debug)]
pub(crate) struct Registered {
    pub generation: u64,
    pub client: Client,
}

/// The publisher's current registration (`None` between connections).
pub(crate) type Registrations = watch::Receiver<Option<Registered>>;

type WingFuture = Pin<Box<dyn Future<Output = Infallible> + Send>>;

/// The call wing with its runner's type erased, so the publisher stays non-generic.
pub(crate) struct CallWing {
    start: Box<dyn FnOnce(Registrations, BackoffPolicy) -> WingFuture + Send>,
}

impl std::fmt::Debug for CallWing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallWing")
    }
}

impl CallWing {
    pub(crate) fn new<R: CallRunner>(runner: R, config: ToolCallConfig, run_id: RunId) -> Self {
        Self {
            start: Box::new(move |registrations, backoff| {
                let wing = Wing {
                    runner,
                    config,
                    run_id,
                    permits: Arc::new(Semaphore::new(MAX_RUNNING_CALLS)),
                    ledger: Arc::default(),
                };
                Box::pin(wing.run(registrations, backoff))
            }),
        }
    }

    /// Opens the stream on every registration and keeps it open; never returns.
    pub(crate) fn run(self, registrations: Registrations, backoff: BackoffPolicy) -> WingFuture {
        (self.start)(registrations, backoff)
    }
}

/// Which call ids this run has seen, and the ones it holds (waiting or running).
#[derive(Debug, Default)]
struct Ledger {
    recent: VecDeque<ToolCallId>,
    recent_set: HashSet<ToolCallId>,
    held: HashMap<ToolCallId, CancellationToken>,
}

impl Ledger {
    fn seen(&self, id: &ToolCallId) -> bool {
        self.recent_set.contains(id) || self.held.contains_key(id)
    }

    fn remember(&mut self, id: &ToolCallId) {
        if self.recent_set.insert(*id) {
            self.recent.push_back(*id);
            if self.recent.len() > REMEMBERED_CALL_IDS
                && let Some(oldest) = self.recent.pop_front()
            {
                self.recent_set.remove(&oldest);
            }
        }
    }
}

/// Whether a response's headers say gRPC (`application/grpc`, with or without a
/// subtype).
fn is_grpc(metadata: &tonic::metadata::MetadataMap) -> bool {
    metadata
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/grpc"))
}

fn lock(ledger: &Mutex<Ledger>) -> std::sync::MutexGuard<'_, Ledger> {
    // The ledger stays consistent across a panic (each change is one insert or remove).
    ledger.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Wing<R> {
    runner: R,
    config: ToolCallConfig,
    run_id: RunId,
    permits: Arc<Semaphore>,
    ledger: Arc<Mutex<Ledger>>,
}

/// How one stream ended.
enum StreamEnd {
    /// The server refused it in a way only a new registration can change (an older
    /// server, a run that is no longer current, a refused token).
    Refused,
    /// It failed or ended; `heard` when the server had sent something on it.
    Lost { heard: bool },
}

impl<R: CallRunner> Wing<R> {
    async fn run(self, mut registrations: Registrations, policy: BackoffPolicy) -> Infallible {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.run_id.hash(&mut hasher);
        let mut backoff = Backoff::new(policy, hasher.finish());
        loop {
            let Some(Registered { generation, client }) = registrations
                .wait_for(Option::is_some)
                .await
                .ok()
                .and_then(|registered| registered.clone())
            else {
                // The publisher is gone, and with it everything this wing could serve.
                return std::future::pending().await;
            };
            let end = self.serve(client).await;
            let newer =
                |r: &Option<Registered>| r.as_ref().is_none_or(|r| r.generation != generation);
            match end {
                StreamEnd::Refused => {
                    let _ = registrations.wait_for(newer).await;
                }
                StreamEnd::Lost { heard } => {
                    if heard {
                        backoff.reset();
                    }
                    let delay = backoff.next_delay();
                    debug!(retry_in = ?delay, "reopening the tool call stream");
                    // A new connection needs no wait: it was just registered.
                    tokio::select! {
                        () = sleep(delay) => {}
                        _ = registrations.wait_for(|r| r.as_ref().is_some_and(|r| r.generation != generation)) => {}
                    }
                }
            }
        }
    }

    /// One stream: `Hello`, then calls until the stream ends, fails or falls silent. Every
    /// call it holds is cancelled when it returns.
    async fn serve(&self, mut client: Client) -> StreamEnd {
        let stream = CancellationToken::new();
        let _cancel_held = stream.clone().drop_guard();
        let (tx, rx) = mpsc::channel(OUTGOING_CAPACITY);
        let out = Outgoing {
            tx,
            sent: Arc::default(),
        };
        let hello = AgentCall::Hello {
            agent_run_id: self.run_id.clone(),
        };
        if out.tx.try_send(hello.into()).is_err() {
            unreachable!("a new channel has room");
        }
        let outbound = Outbound {
            rx,
            closed: Box::pin(stream.clone().cancelled_owned()),
        };
        let mut inbound = match client.tool_calls(outbound).await {
            // A proxy's own error page (no replica up, a timed-out hello) is an HTTP
            // answer that tonic lets through until its body is read: not a stream.
            Ok(response) if !is_grpc(response.metadata()) => {
                let content_type = response
                    .metadata()
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("none")
                    .to_owned();
                warn!(%content_type, "cannot open the tool call stream: the answer is not gRPC (a proxy's error?)");
                return StreamEnd::Lost { heard: false };
            }
            Ok(response) => response.into_inner(),
            Err(status) => {
                return match status.code() {
                    Code::Unimplemented => {
                        warn!(
                            "the server does not implement tool calls (an older server); waiting for the next connection"
                        );
                        StreamEnd::Refused
                    }
                    Code::FailedPrecondition | Code::Unauthenticated | Code::PermissionDenied => {
                        warn!(error = %status.message(), code = ?status.code(), "the server refused the tool call stream; waiting for the next registration");
                        StreamEnd::Refused
                    }
                    code => {
                        warn!(error = %status.message(), ?code, "cannot open the tool call stream");
                        StreamEnd::Lost { heard: false }
                    }
                };
            }
        };
        info!(run_id = %self.run_id.as_str(), deny = self.config.deny, allow = %self.config.policy, "the tool call stream is open");
        let mut heard = false;
        let beat = self.config.heartbeat;
        let mut heartbeat = interval_at(Instant::now() + beat, beat);
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let silence = sleep(self.config.silence_limit);
        tokio::pin!(silence);
        loop {
            tokio::select! {
                message = inbound.message() => match message {
                    Ok(Some(message)) => {
                        heard = true;
                        silence.as_mut().reset(Instant::now() + self.config.silence_limit);
                        self.receive(message, &out, &stream).await;
                    }
                    Ok(None) => {
                        info!("the server ended the tool call stream; cancelling the calls it held");
                        return StreamEnd::Lost { heard };
                    }
                    Err(status) => {
                        warn!(error = %status.message(), code = ?status.code(), "the tool call stream failed; cancelling the calls it held");
                        return StreamEnd::Lost { heard };
                    }
                },
                _ = heartbeat.tick() => {
                    if !out.sent.swap(false, Ordering::Relaxed) {
                        // Full means messages are queued: the stream is not idle.
                        let _ = out.tx.try_send(AgentCall::Heartbeat.into());
                    }
                }
                () = &mut silence => {
                    warn!(silent_for = ?self.config.silence_limit, "the server went silent on the tool call stream; cancelling the calls it held");
                    return StreamEnd::Lost { heard };
                }
                // A refresh made while no stream was open waits in the runner for this one.
                update = self.runner.next_sign_in_update() => {
                    out.send(AgentCall::Credential(update)).await;
                }
            }
        }
    }

    async fn receive(
        &self,
        wire: v1::ServerCallMessage,
        out: &Outgoing,
        stream: &CancellationToken,
    ) {
        match ServerCall::try_from(wire) {
            Ok(ServerCall::Heartbeat) => {}
            Ok(ServerCall::Cancel { id }) => {
                if let Some(token) = lock(&self.ledger).held.get(&id) {
                    debug!(call = %id, "the server cancelled a call");
                    token.cancel();
                }
            }
            Ok(ServerCall::BeginSignIn(begin)) => {
                info!(server = %begin.server, "starting a sign-in the server asked for");
                let (runner, out, id) = (self.runner.clone(), out.clone(), begin.id);
                // OAuth requests take network time: the stream goes on meanwhile.
                tokio::spawn(async move {
                    let outcome = match runner.begin_sign_in(begin).await {
                        Ok(start) => SignInOutcome::Started(start),
                        Err(error) => SignInOutcome::Failed(error),
                    };
                    out.send(AgentCall::SignIn { id, outcome }).await;
                });
            }
            Ok(ServerCall::ExchangeSignIn(exchange)) => {
                info!(server = %exchange.server, "finishing a sign-in with the person's code");
                let (runner, out, id) = (self.runner.clone(), out.clone(), exchange.id);
                tokio::spawn(async move {
                    let outcome = match runner.finish_sign_in(exchange).await {
                        Ok(credential) => SignInOutcome::SignedIn(credential),
                        Err(error) => SignInOutcome::Failed(error),
                    };
                    out.send(AgentCall::SignIn { id, outcome }).await;
                });
            }
            Ok(ServerCall::Credential(stored)) => {
                debug!(server = %stored.server, kept = stored.credential.is_some(), "the server sent a kept credential");
                self.runner.restore_sign_in(stored);
            }
            // The one parse of the arguments: a call whose arguments are not an object is
            // as malformed as any other bad field.
            Ok(ServerCall::Call(request)) => match request.arguments.parse() {
                Ok(arguments) => self.admit(request, arguments, out, stream).await,
                Err(error) => warn!(%error, "ignoring a malformed message on the tool call stream"),
            },
            // The error names the field and the problem, never a value.
            Err(error) => warn!(%error, "ignoring a malformed message on the tool call stream"),
        }
    }

    /// Answers a new call (`Accepted`, then a refusal or, later, its end) or ignores a
    /// call id this run has already seen.
    async fn admit(
        &self,
        request: CallRequest,
        arguments: Map<String, Value>,
        out: &Outgoing,
        stream: &CancellationToken,
    ) {
        let received = Instant::now();
        let refusal = if request.agent_run_id != self.run_id {
            Some(CallReason::StaleRun)
        } else if self.config.deny || !self.config.policy.allows(&request.server, &request.tool) {
            Some(CallReason::Denied)
        } else if !self.runner.lists(&request.server, &request.tool) {
            Some(CallReason::ToolGone)
        } else {
            None
        };
        let token = stream.child_token();
        let refusal = {
            let mut ledger = lock(&self.ledger);
            if ledger.seen(&request.id) {
                debug!(call = %request.id, "ignoring a call id this run has already seen");
                return;
            }
            let refusal = refusal.or_else(|| {
                (ledger.held.len() >= MAX_RUNNING_CALLS + MAX_WAITING_CALLS)
                    .then_some(CallReason::Busy)
            });
            match refusal {
                // The server lets a retry with this call id run again: not remembered.
                Some(CallReason::Busy) => {}
                Some(_) => ledger.remember(&request.id),
                None => {
                    ledger.remember(&request.id);
                    ledger.held.insert(request.id, token.clone());
                }
            }
            refusal
        };
        let id = request.id;
        if let Some(reason) = refusal {
            info!(call = %id, server = %request.server, tool = %request.tool, reason = reason.as_str(), "refused a tool call");
            out.send(AgentCall::Accepted { id }).await;
            let end = CallEnd::with_reason(CallStatus::Refused, reason);
            out.end(id, end, Duration::ZERO).await;
            return;
        }
        info!(call = %id, server = %request.server, tool = %request.tool, timeout = ?request.timeout, "running a tool call");
        let held = Held {
            ledger: self.ledger.clone(),
            id,
        };
        out.send(AgentCall::Accepted { id }).await;
        let call = run_call(
            self.runner.clone(),
            self.permits.clone(),
            self.config.max_result_bytes,
            request,
            arguments,
            received,
            token,
            out.clone(),
            held,
        );
        tokio::spawn(call);
    }
}

/// Removes a call from the ledger's held calls when its task ends (or never starts).
struct Held {
    ledger: Arc<Mutex<Ledger>>,
    id: ToolCallId,
}

impl Drop for Held {
    fn drop(&mut self) {
        lock(&self.ledger).held.remove(&self.id);
    }
}

/// Waits for a running slot (the wait counts against the deadline), runs the call,
/// relays its progress and sends its end.
#[allow(clippy::too_many_arguments)]
async fn run_call<R: CallRunner>(
    runner: R,
    permits: Arc<Semaphore>,
    max_result_bytes: usize,
    request: CallRequest,
    arguments: Map<String, Value>,
    received: Instant,
    cancel: CancellationToken,
    out: Outgoing,
    _held: Held,
) {
    let CallRequest {
        id,
        server,
        tool,
        timeout,
        ..
    } = request;
    let deadline = received + timeout;
    let permit = tokio::select! {
        biased;
        () = cancel.cancelled() => {
            return out.end(id, CallEnd::bare(CallStatus::Canceled), Duration::ZERO).await;
        }
        () = sleep_until(deadline) => {
            return out.end(id, CallEnd::bare(CallStatus::TimedOut), Duration::ZERO).await;
        }
        permit = permits.acquire_owned() => match permit {
            Ok(permit) => permit,
            Err(_) => unreachable!("the semaphore is never closed"),
        },
    };
    let started = Instant::now();
    let (progress_tx, mut progress_rx) = mpsc::channel(PROGRESS_CAPACITY);
    let spec = CallSpec {
        server,
        tool,
        arguments,
        timeout: deadline.saturating_duration_since(started),
        max_result_bytes,
    };
    let call = runner.call(spec, progress_tx, cancel);
    tokio::pin!(call);
    let mut end = loop {
        tokio::select! {
            end = &mut call => break end,
            Some(progress) = progress_rx.recv() => out.progress(id, progress),
        }
    };
    drop(permit);
    if !end.status.is_end() || end.status == CallStatus::Unknown {
        // Only the server decides `unknown`, and `running` is no end.
        end = CallEnd::error(0, "the engine reported no end for the call");
    }
    debug!(call = %id, status = end.status.as_str(), "a tool call ended");
    out.end(id, end, started.elapsed()).await;
}

/// The sending side of one stream.
#[derive(Clone)]
struct Outgoing {
    tx: mpsc::Sender<v1::AgentCallMessage>,
    /// Something was sent since the last heartbeat tick.
    sent: Arc<AtomicBool>,
}

impl Outgoing {
    /// Waits for room: acceptances and ends are never dropped while the stream lives.
    async fn send(&self, message: AgentCall) {
        self.sent.store(true, Ordering::Relaxed);
        // An error means the stream is gone, and the server accounts for its calls.
        let _ = self.tx.send(message.into()).await;
    }

    async fn end(&self, id: ToolCallId, end: CallEnd, duration: Duration) {
        self.send(AgentCall::Ended { id, end, duration }).await;
    }

    /// Dropped when the channel is full: a later report or the end supersedes it.
    fn progress(&self, id: ToolCallId, progress: CallProgress) {
        let message = AgentCall::Progress { id, progress };
        if self.tx.try_send(message.into()).is_ok() {
            self.sent.store(true, Ordering::Relaxed);
        }
    }
}

/// The request stream tonic sends: the outgoing channel until the stream ends, so a
/// stream whose calls were cancelled closes at once instead of when the last task ends.
struct Outbound {
    rx: mpsc::Receiver<v1::AgentCallMessage>,
    closed: Pin<Box<WaitForCancellationFutureOwned>>,
}

impl tokio_stream::Stream for Outbound {
    type Item = v1::AgentCallMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.closed.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        self.rx.poll_recv(cx)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_a_grpc_content_type_opens_a_stream() {
        let with = |value: Option<&'static str>| {
            let mut metadata = tonic::metadata::MetadataMap::new();
            if let Some(value) = value {
                metadata.insert("content-type", value.parse().unwrap());
            }
            is_grpc(&metadata)
        };
        assert!(with(Some("application/grpc")));
        assert!(with(Some("application/grpc+proto")));
        assert!(!with(Some("text/html")), "a proxy's error page");
        assert!(!with(None));
    }

    use super::*;

    #[test]
    fn the_ledger_forgets_only_the_oldest_ended_ids() {
        let id = |n: usize| ToolCallId::from_uuid(uuid::Uuid::from_u128(n as u128));
        let mut ledger = Ledger::default();
        let held = ToolCallId::new_random();
        ledger.held.insert(held, CancellationToken::new());
        for n in 0..=REMEMBERED_CALL_IDS {
            ledger.remember(&id(n));
        }
        assert!(!ledger.seen(&id(0)), "the oldest id is forgotten");
        assert!(ledger.seen(&id(1)) && ledger.seen(&id(REMEMBERED_CALL_IDS)));
        assert!(ledger.seen(&held), "a held call is always known");
        assert_eq!(ledger.recent.len(), REMEMBERED_CALL_IDS);
    }
}
