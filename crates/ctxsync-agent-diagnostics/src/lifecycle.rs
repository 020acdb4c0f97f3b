//! How a connection starts its MCP lifecycle: `server/discover` (2026-07-28) with a fallback
//! to `initialize` on the same connection, and the bounded probe that keeps a server which
//! ignores unknown methods from spending the first-turn budget, without starting a server
//! again only because it was slow: the probe's clock starts when a stdio server has read
//! the probe, a stdio server silent past it is asked for a `ping` (one that answers it
//! ignored the probe; one that does not is still busy with it), and a late answer that
//! shows 2026-07-28 still connects the session.

use std::{
    os::fd::OwnedFd,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use rmcp::{
    RoleClient,
    model::{
        ClientJsonRpcMessage, ClientNotification, ClientRequest, DiscoverResult, ErrorCode,
        ErrorData, Implementation, InitializeResult, JsonRpcMessage, PingRequest, ProtocolVersion,
        RequestId, ServerJsonRpcMessage, ServerResult,
    },
    service::{ClientInitializeError, ClientLifecycleMode},
    transport::Transport,
};
use tokio::time::Instant;

/// Default bound on waiting for an answer to `server/discover` before falling back to
/// `initialize`: a legacy server that ignores the probe costs this much, not rmcp's 10 s.
pub const DEFAULT_DISCOVER_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How often a stdio server's stdin is looked at while it has not read the probe yet.
const READ_POLL: Duration = Duration::from_millis(20);
/// The id of the `ping` a stdio server silent past the probe timeout is asked for (rmcp's
/// own ids are numbers, so it names no request of rmcp's).
const BUSY_PING_ID: &str = "ctxsync-discover-probe-ping";

/// Which MCP lifecycle the engine uses with every server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum McpLifecycle {
    /// `server/discover` for the 2026-07-28 revision; `initialize` (up to 2025-11-25) for a
    /// server that refuses or ignores it.
    #[default]
    Auto,
    /// Only the `initialize` handshake.
    Initialize,
    /// Only `server/discover`: a server without it fails.
    Discover,
}

impl McpLifecycle {
    pub(crate) fn mode(self) -> ClientLifecycleMode {
        let modern = vec![ProtocolVersion::V_2026_07_28];
        match self {
            McpLifecycle::Auto => ClientLifecycleMode::Auto {
                preferred_versions: modern,
                legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
            },
            McpLifecycle::Initialize => ClientLifecycleMode::Initialize,
            McpLifecycle::Discover => ClientLifecycleMode::Discover {
                preferred_versions: modern,
            },
        }
    }
}

/// What a [`ProbeDeadline`] saw of its probe. The connect path keeps a clone, since the
/// transport itself is gone once rmcp's handshake has failed.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProbeWatch(Arc<ProbeSeen>);

#[derive(Debug, Default)]
struct ProbeSeen {
    /// rmcp went on to `initialize` before the probe was answered.
    abandoned: AtomicBool,
    /// The server's own, late answer to that probe was a discover result offering
    /// 2026-07-28: it is a modern server that was slow, not a legacy one.
    answered_late: AtomicBool,
    /// Sending the held-back `initialize` failed; rmcp only sees the connection close.
    failed_send: Mutex<Option<Box<dyn std::error::Error + Send + Sync>>>,
    /// The server answered `initialize` with a revision ctxsync does not speak; what fails
    /// next (over HTTP, often the server refusing its own revision's header) says less.
    unknown_revision: Mutex<Option<ProtocolVersion>>,
}

impl ProbeWatch {
    /// Whether a failed handshake deserves one more attempt with [`McpLifecycle::Discover`]:
    /// the probe was given up on, and the server has since shown that it speaks 2026-07-28,
    /// by its late answer to the probe or by refusing the fallback `initialize` with
    /// "unsupported protocol version" naming 2026-07-28 (as servers on the Python SDK 2.x
    /// do). Only a server that serves 2026-07-28 alone and had already been sent the
    /// fallback gets here: it refuses that `initialize`, and may end the session with it.
    pub(crate) fn modern_after_all(&self, error: &ClientInitializeError) -> bool {
        self.0.abandoned.load(Ordering::SeqCst)
            && (self.0.answered_late.load(Ordering::SeqCst) || refuses_initialize_for_modern(error))
    }

    /// The revision ctxsync does not speak that the server answered `initialize` with.
    pub(crate) fn unknown_revision(&self) -> Option<ProtocolVersion> {
        self.0
            .unknown_revision
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The error of a held-back `initialize` whose sending failed, if any.
    pub(crate) fn take_failed_send(&self) -> Option<Box<dyn std::error::Error + Send + Sync>> {
        self.0
            .failed_send
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

/// Whether `error` (or the `initialize` fallback inside it) was refused with -32022 by a
/// server whose supported versions include 2026-07-28.
fn refuses_initialize_for_modern(error: &ClientInitializeError) -> bool {
    let ClientInitializeError::LegacyFallbackFailed { fallback, .. } = error else {
        return false;
    };
    let ClientInitializeError::JsonRpcError(error) = fallback.as_ref() else {
        return false;
    };
    refusal_names_modern(error)
}

fn refusal_names_modern(error: &ErrorData) -> bool {
    error.code == ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
        && supported_in(error).is_some_and(|supported| {
            supported
                .iter()
                .any(|v| *v == ProtocolVersion::V_2026_07_28.as_str())
        })
}

/// The versions a -32022 error lists as supported.
fn supported_in(error: &ErrorData) -> Option<Vec<&str>> {
    let supported = error.data.as_ref()?.get("supported")?.as_array()?;
    Some(
        supported
            .iter()
            .filter_map(serde_json::Value::as_str)
            .collect(),
    )
}

/// The answer's discover result, when it offers 2026-07-28.
fn modern_discover_result(message: &ServerJsonRpcMessage) -> Option<&DiscoverResult> {
    match message {
        JsonRpcMessage::Response(response) => match &response.result {
            ServerResult::DiscoverResult(result)
                if result
                    .supported_versions
                    .contains(&ProtocolVersion::V_2026_07_28) =>
            {
                Some(result)
            }
            _ => None,
        },
        _ => None,
    }
}

/// The probe's answer as rmcp should see it while it still waits for it: an answer that
/// is not a discover result offering 2026-07-28 (a lenient server's `{}`, or a refusal
/// listing older versions only) becomes "method not found", so rmcp falls back to
/// `initialize` on the same connection instead of failing the handshake.
fn as_probe_answer(message: ServerJsonRpcMessage, probe: RequestId) -> ServerJsonRpcMessage {
    let usable = match &message {
        JsonRpcMessage::Response(_) => modern_discover_result(&message).is_some(),
        JsonRpcMessage::Error(error) => {
            error.error.code != ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
                || refusal_names_modern(&error.error)
        }
        JsonRpcMessage::Request(_) | JsonRpcMessage::Notification(_) => true,
    };
    if usable {
        return message;
    }
    ServerJsonRpcMessage::error(
        ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            "the answer to server/discover offers no 2026-07-28 lifecycle; using initialize",
            None,
        ),
        Some(probe),
    )
}

/// A discover result standing in for the server's answer to the fallback `initialize`:
/// rmcp takes an `initialize` result naming 2026-07-28 as a session without a handshake,
/// which is what `server/discover` would have given it.
fn initialize_answer(result: &DiscoverResult, id: RequestId) -> ServerJsonRpcMessage {
    let server_info = result
        .server_info()
        .unwrap_or_else(|| Implementation::new("", ""));
    let mut answer =
        InitializeResult::new(result.capabilities.clone()).with_server_info(server_info);
    answer.protocol_version = ProtocolVersion::V_2026_07_28;
    answer.instructions = result.instructions.clone();
    answer.meta = result.meta.clone();
    ServerJsonRpcMessage::response(ServerResult::InitializeResult(answer), id)
}

/// The fallback `initialize` rmcp sent while the probe was unanswered.
struct Fallback {
    id: RequestId,
    /// The request itself while it is held back (not yet sent to the server).
    held: Option<ClientJsonRpcMessage>,
    /// The server answered it (and the answer went to rmcp, or is kept as `refusal`).
    answered: bool,
}

/// A client transport around rmcp's automatic lifecycle (see the module). It answers its
/// own `server/discover` request with "method not found" when the server has said nothing
/// within the probe timeout, counted for a stdio server from when it has read the probe
/// (one that is still starting has not), so rmcp falls back to `initialize` at once. When
/// the server's own answer comes later and offers 2026-07-28, it stands in for the answer
/// to that `initialize` (which is then dropped), so the session is a 2026-07-28 one on the
/// same connection; over HTTP the fallback is held back until the probe is answered, so it
/// is never sent to a server that speaks 2026-07-28. Without a timeout it only passes
/// messages through.
pub(crate) struct ProbeDeadline<T> {
    inner: T,
    timeout: Option<Duration>,
    /// stdio: a duplicate of our end of the server's stdin, to see whether the server has
    /// read the probe yet; dropped once it has.
    stdin: Option<OwnedFd>,
    /// stdio: at the probe timeout, ask for a `ping` before falling back.
    ping_first: bool,
    /// The `ping` sent, until its answer comes (which is never handed to rmcp).
    ping: Option<RequestId>,
    /// Hold the fallback back until the probe is answered (HTTP, whose transport sends
    /// nothing before that answer anyway).
    hold_fallback: bool,
    /// The probe, while unanswered.
    probe: Option<RequestId>,
    /// When the probe is given up; none while a stdio server has not read it.
    deadline: Option<Instant>,
    /// rmcp went on to `initialize` (after our answer, or its own timeout).
    gave_up: bool,
    fallback: Option<Fallback>,
    /// A -32022 refusal of the fallback, kept while the probe's answer may still show the
    /// server speaks 2026-07-28.
    refusal: Option<ServerJsonRpcMessage>,
    /// The fallback whose own answer is dropped: the probe's late answer stood in for it.
    replaced: Option<RequestId>,
    /// The replaced fallback was never sent, so `notifications/initialized` is not either.
    skip_initialized: bool,
    watch: ProbeWatch,
    /// Where an HTTP server's refusal of a request for want of credentials goes (a 403
    /// `insufficient_scope` to a tool call ends the connection; only this says why).
    refusals: Option<Refusals>,
}

/// The last refusal for want of credentials a connection's requests met, and a wake-up
/// for the connection's task when one comes (rmcp's HTTP transport fails that request
/// alone and keeps the connection).
pub(crate) type Refusals = Arc<RefusalCell>;

/// See [`Refusals`].
#[derive(Debug, Default)]
pub(crate) struct RefusalCell {
    refused: Mutex<Option<crate::failure::AccessRefused>>,
    noticed: tokio::sync::Notify,
}

impl RefusalCell {
    fn record(&self, refused: crate::failure::AccessRefused) {
        *self.refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(refused);
        self.noticed.notify_one();
    }

    /// The last refusal, if any.
    pub(crate) fn last(&self) -> Option<crate::failure::AccessRefused> {
        self.refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Resolves when a refusal is recorded (at once for one recorded before the wait).
    pub(crate) async fn noticed(&self) {
        self.noticed.notified().await;
    }
}

impl<T> ProbeDeadline<T> {
    pub(crate) fn new(inner: T, timeout: Option<Duration>, watch: ProbeWatch) -> Self {
        Self {
            inner,
            timeout,
            stdin: None,
            ping_first: false,
            ping: None,
            hold_fallback: false,
            probe: None,
            deadline: None,
            gave_up: false,
            fallback: None,
            refusal: None,
            replaced: None,
            skip_initialized: false,
            watch,
            refusals: None,
        }
    }

    /// Keeps in `refusals` a send the server refused for want of credentials.
    pub(crate) fn recording_refusals(mut self, refusals: Refusals) -> Self {
        self.refusals = Some(refusals);
        self
    }

    /// Starts the probe's clock only once the server has read the probe from `stdin` (a
    /// duplicate of our end of its stdin pipe). Without a probe to time, the copy is not
    /// kept: it would hold the pipe open after the transport closes it.
    pub(crate) fn reading(mut self, stdin: Option<OwnedFd>) -> Self {
        self.stdin = stdin.filter(|_| self.timeout.is_some());
        self.ping_first = true;
        self
    }

    /// Holds a fallback `initialize` back until the probe is answered.
    pub(crate) fn holding_fallback(mut self) -> Self {
        self.hold_fallback = true;
        self
    }

    /// Whether the server has not read everything written to its stdin yet.
    fn probe_unread(&self) -> bool {
        self.stdin
            .as_ref()
            .is_some_and(|fd| rustix::io::ioctl_fionread(fd).is_ok_and(|bytes| bytes > 0))
    }
}

/// Whether two ids name the same request (a server may echo a number as a string).
fn same_id(a: &RequestId, b: &RequestId) -> bool {
    a == b || a.to_string() == b.to_string()
}

fn answered_id(message: &ServerJsonRpcMessage) -> Option<&RequestId> {
    match message {
        JsonRpcMessage::Response(response) => Some(&response.id),
        JsonRpcMessage::Error(error) => error.id.as_ref(),
        JsonRpcMessage::Request(_) | JsonRpcMessage::Notification(_) => None,
    }
}

fn is_initialized(item: &ClientJsonRpcMessage) -> bool {
    matches!(
        item,
        JsonRpcMessage::Notification(notification)
            if matches!(notification.notification, ClientNotification::InitializedNotification(_))
    )
}

/// What woke a waiting receive.
#[expect(
    clippy::large_enum_variant,
    reason = "lives only until the next line matches it; boxing would cost every message"
)]
enum Wake {
    Message(Option<ServerJsonRpcMessage>),
    Deadline,
    Poll,
}

impl<T: Transport<RoleClient>> ProbeDeadline<T> {
    /// Sends a held-back fallback now; a failure is kept for the connect path, and the
    /// connection is then over.
    async fn release_fallback(&mut self) -> Result<(), ()> {
        let Some(held) = self.fallback.as_mut().and_then(|f| f.held.take()) else {
            return Ok(());
        };
        if let Err(error) = self.inner.send(held).await {
            *self
                .watch
                .0
                .failed_send
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(Box::new(error));
            return Err(());
        }
        Ok(())
    }

    /// Gives up on the probe: "method not found" in its name, so rmcp falls back.
    fn give_up(&mut self) -> Option<ServerJsonRpcMessage> {
        self.gave_up = true;
        self.watch.0.abandoned.store(true, Ordering::SeqCst);
        let probe = self.probe.clone()?;
        let message = format!(
            "no answer to server/discover within {} ms; using initialize",
            self.timeout.unwrap_or_default().as_millis()
        );
        Some(ServerJsonRpcMessage::error(
            ErrorData::new(ErrorCode::METHOD_NOT_FOUND, message, None),
            Some(probe),
        ))
    }

    /// The probe's answer after rmcp went on to `initialize`: `None` to wait for more,
    /// `Some` with what to hand to rmcp (`Some(None)`: the connection is over).
    async fn late_probe_answer(
        &mut self,
        message: ServerJsonRpcMessage,
    ) -> Option<Option<ServerJsonRpcMessage>> {
        let Some(result) = modern_discover_result(&message) else {
            // A legacy server after all: the fallback stands.
            if let Some(refusal) = self.refusal.take() {
                return Some(Some(refusal));
            }
            if self.release_fallback().await.is_err() {
                return Some(None);
            }
            return None;
        };
        let serves_initialize = result.supported_versions.iter().any(|v| v.has_initialize());
        let fallback = self
            .fallback
            .as_mut()
            .filter(|f| !f.answered || self.refusal.is_some());
        let Some(fallback) = fallback else {
            // The `initialize` handshake already finished; that session stands.
            return None;
        };
        let unsent = fallback.held.is_some();
        if unsent || (serves_initialize && self.refusal.is_none()) {
            // The server never saw the fallback, or will answer it without ending the
            // session: the discover result is the session's start.
            fallback.held = None;
            let id = fallback.id.clone();
            self.replaced = Some(id.clone());
            self.skip_initialized = unsent;
            return Some(Some(initialize_answer(result, id)));
        }
        // It refuses `initialize`, which it has been sent: the connect path starts it
        // again with `server/discover` alone.
        self.watch.0.answered_late.store(true, Ordering::SeqCst);
        self.refusal.take().map(Some)
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for ProbeDeadline<T> {
    type Error = T::Error;

    fn name() -> std::borrow::Cow<'static, str> {
        "MCP connection".into()
    }

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let mut item = Some(item);
        if let Some(timeout) = self.timeout
            && let Some(JsonRpcMessage::Request(request)) = &item
        {
            match &request.request {
                ClientRequest::DiscoverRequest(_) => {
                    self.probe = Some(request.id.clone());
                    // The clock starts at the send, or for stdio once the server read it.
                    self.deadline = self.stdin.is_none().then(|| Instant::now() + timeout);
                }
                ClientRequest::InitializeRequest(_) if self.probe.is_some() => {
                    self.gave_up = true;
                    self.watch.0.abandoned.store(true, Ordering::SeqCst);
                    let id = request.id.clone();
                    // Nothing is sent to a server still reading its way to the probe, or
                    // still busy with it (rmcp's own timeout is shorter than a slow start).
                    let hold = self.hold_fallback
                        || self.stdin.is_some()
                        || self.deadline.is_some()
                        || self.ping.is_some();
                    let held = if hold { item.take() } else { None };
                    self.fallback = Some(Fallback {
                        id,
                        held,
                        answered: false,
                    });
                }
                _ => {}
            }
        }
        if self.skip_initialized && item.as_ref().is_some_and(is_initialized) {
            self.skip_initialized = false;
            item = None;
        }
        let send = item.map(|item| self.inner.send(item));
        let refusals = self.refusals.clone();
        async move {
            let sent = match send {
                Some(send) => send.await,
                None => Ok(()),
            };
            if let (Err(error), Some(refusals)) = (&sent, refusals)
                && let Some(refused) = crate::failure::refusal_in(error)
            {
                refusals.record(refused);
            }
            sent
        }
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        loop {
            let waiting = self.probe.is_some();
            let deadline = self.deadline.filter(|_| waiting);
            let polling = waiting && self.deadline.is_none() && self.stdin.is_some();
            let wake = tokio::select! {
                message = self.inner.receive() => Wake::Message(message),
                () = sleep_until_some(deadline) => Wake::Deadline,
                () = tokio::time::sleep(READ_POLL), if polling => Wake::Poll,
            };
            let message = match wake {
                Wake::Message(message) => message?,
                Wake::Poll => {
                    if !self.probe_unread() {
                        self.stdin = None;
                        self.deadline = self.timeout.map(|timeout| Instant::now() + timeout);
                    }
                    continue;
                }
                Wake::Deadline => {
                    self.deadline = None;
                    if self.ping_first {
                        // Silent so far: is it ignoring the probe, or busy with it? Its
                        // answer to a ping decides (see the ping's arm below).
                        let id = RequestId::String(BUSY_PING_ID.into());
                        let ping = ClientRequest::PingRequest(PingRequest::default());
                        let ping = ClientJsonRpcMessage::request(ping, id.clone());
                        if self.inner.send(ping).await.is_err() {
                            return None;
                        }
                        self.ping = Some(id);
                        continue;
                    }
                    if self.gave_up {
                        // rmcp gave up on its own first; over HTTP the fallback still
                        // waits for the probe's answer.
                        if !self.hold_fallback && self.release_fallback().await.is_err() {
                            return None;
                        }
                        continue;
                    }
                    return self.give_up();
                }
            };
            if let JsonRpcMessage::Response(response) = &message
                && let ServerResult::InitializeResult(result) = &response.result
                && !crate::failure::speaks(&result.protocol_version)
            {
                *self
                    .watch
                    .0
                    .unknown_revision
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some(result.protocol_version.clone());
            }
            let Some(answered) = answered_id(&message).cloned() else {
                return Some(message);
            };
            if self
                .ping
                .as_ref()
                .is_some_and(|ping| same_id(&answered, ping))
            {
                self.ping = None;
                if self.probe.is_some() && !self.gave_up {
                    // It answers, but not the probe: it ignores methods it does not know.
                    return self.give_up();
                }
                if self.probe.is_some() && self.release_fallback().await.is_err() {
                    return None;
                }
                continue;
            }
            if let Some(probe) = self.probe.clone()
                && same_id(&answered, &probe)
            {
                self.probe = None;
                self.deadline = None;
                self.stdin = None;
                if !self.gave_up {
                    return Some(as_probe_answer(message, probe));
                }
                match self.late_probe_answer(message).await {
                    Some(message) => return message,
                    None => continue,
                }
            }
            if self
                .replaced
                .as_ref()
                .is_some_and(|id| same_id(&answered, id))
            {
                // The probe's answer already stood in for this one.
                self.replaced = None;
                continue;
            }
            if let Some(fallback) = self.fallback.as_mut()
                && same_id(&answered, &fallback.id)
            {
                fallback.answered = true;
                let refuses = matches!(&message, JsonRpcMessage::Error(error) if refusal_names_modern(&error.error));
                if self.probe.is_some() && refuses {
                    // The probe's answer may yet arrive and start the session.
                    self.refusal = Some(message);
                    continue;
                }
            }
            return Some(message);
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // The server must see its stdin end when the transport closes it.
        self.stdin = None;
        self.inner.close().await
    }
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{EmptyResult, ServerCapabilities, ServerConfig};

    use super::*;

    fn id() -> RequestId {
        RequestId::Number(0)
    }

    fn code(message: &ServerJsonRpcMessage) -> Option<ErrorCode> {
        match message {
            JsonRpcMessage::Error(error) => Some(error.error.code),
            _ => None,
        }
    }

    fn refusal(supported: &[&str]) -> ServerJsonRpcMessage {
        let data = serde_json::json!({"supported": supported});
        let error = ErrorData::new(ErrorCode::UNSUPPORTED_PROTOCOL_VERSION, "no", Some(data));
        ServerJsonRpcMessage::error(error, Some(id()))
    }

    fn discover_result(versions: Vec<ProtocolVersion>) -> DiscoverResult {
        let config = ServerConfig::new(ServerCapabilities::default())
            .with_server_info(Implementation::new("srv", "1.0"))
            .with_instructions("use it");
        DiscoverResult::from_server_info(versions, config)
    }

    #[test]
    fn answers_that_offer_no_2026_07_28_lifecycle_fall_back() {
        let empty = ServerJsonRpcMessage::response(ServerResult::EmptyResult(EmptyResult {}), id());
        assert_eq!(
            code(&as_probe_answer(empty, id())),
            Some(ErrorCode::METHOD_NOT_FOUND)
        );
        let old_only = refusal(&["2025-06-18", "2025-11-25"]);
        assert_eq!(
            code(&as_probe_answer(old_only, id())),
            Some(ErrorCode::METHOD_NOT_FOUND)
        );
        let old_discover =
            ServerResult::DiscoverResult(discover_result(vec![ProtocolVersion::V_2025_11_25]));
        let old_discover = ServerJsonRpcMessage::response(old_discover, id());
        assert_eq!(
            code(&as_probe_answer(old_discover, id())),
            Some(ErrorCode::METHOD_NOT_FOUND)
        );
    }

    #[test]
    fn answers_rmcp_can_use_pass_unchanged() {
        let modern = refusal(&["2026-07-28"]);
        assert_eq!(
            code(&as_probe_answer(modern, id())),
            Some(ErrorCode::UNSUPPORTED_PROTOCOL_VERSION)
        );
        let legacy = ServerJsonRpcMessage::error(ErrorData::internal_error("x", None), Some(id()));
        assert_eq!(
            code(&as_probe_answer(legacy, id())),
            Some(ErrorCode::INTERNAL_ERROR)
        );
        let result = discover_result(vec![ProtocolVersion::V_2026_07_28]);
        let answer = ServerJsonRpcMessage::response(ServerResult::DiscoverResult(result), id());
        assert!(modern_discover_result(&as_probe_answer(answer, id())).is_some());
    }

    #[test]
    fn a_discover_result_stands_in_for_an_initialize_answer() {
        let result = discover_result(ProtocolVersion::KNOWN_VERSIONS.to_vec());
        let answer = initialize_answer(&result, RequestId::Number(7));
        let JsonRpcMessage::Response(response) = answer else {
            panic!("a response");
        };
        assert_eq!(response.id, RequestId::Number(7));
        let ServerResult::InitializeResult(init) = response.result else {
            panic!("an initialize result");
        };
        assert_eq!(init.protocol_version, ProtocolVersion::V_2026_07_28);
        assert!(!init.protocol_version.has_initialize());
        assert_eq!(init.server_info.name, "srv");
        assert_eq!(init.instructions.as_deref(), Some("use it"));
    }
}
