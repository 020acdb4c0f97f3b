//! How a connection starts its MCP lifecycle: `server/discover` (2026-07-28) with a fallback
//! to `initialize`, and the bounded probe that keeps a server which ignores unknown methods
//! from spending the first-turn budget; and how a modern server that was only slow to
//! answer the probe is recognised, so that it is connected again with `server/discover`.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use rmcp::{
    RoleClient,
    model::{
        ClientJsonRpcMessage, ClientRequest, ErrorCode, ErrorData, JsonRpcMessage, ProtocolVersion,
        RequestId, ServerJsonRpcMessage, ServerResult,
    },
    service::{ClientInitializeError, ClientLifecycleMode},
    transport::Transport,
};
use tokio::time::Instant;

/// Default bound on waiting for an answer to `server/discover` before falling back to
/// `initialize`: a legacy server that ignores the probe costs this much, not rmcp's 10 s.
pub const DEFAULT_DISCOVER_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

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
    /// The transport answered a probe itself ("method not found") after the timeout.
    abandoned: AtomicBool,
    /// The server's own, late answer to that probe was a discover result offering
    /// 2026-07-28: it is a modern server that was slow, not a legacy one.
    answered_late: AtomicBool,
}

impl ProbeWatch {
    /// Whether a failed handshake deserves one more attempt with [`McpLifecycle::Discover`]:
    /// the probe was given up on, and the server has since shown that it speaks 2026-07-28,
    /// by its late answer to the probe or by refusing the fallback `initialize` with
    /// "unsupported protocol version" naming 2026-07-28 (as servers on the Python SDK 2.x
    /// do; over HTTP that refusal may arrive before the late answer).
    pub(crate) fn modern_after_all(&self, error: &ClientInitializeError) -> bool {
        self.0.abandoned.load(Ordering::SeqCst)
            && (self.0.answered_late.load(Ordering::SeqCst) || refuses_initialize_for_modern(error))
    }
}

/// Whether the `initialize` fallback was refused with -32022 by a server whose supported
/// versions include 2026-07-28.
fn refuses_initialize_for_modern(error: &ClientInitializeError) -> bool {
    let ClientInitializeError::LegacyFallbackFailed { fallback, .. } = error else {
        return false;
    };
    let ClientInitializeError::JsonRpcError(error) = fallback.as_ref() else {
        return false;
    };
    error.code == ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
        && error
            .data
            .as_ref()
            .and_then(|data| data.get("supported"))
            .and_then(serde_json::Value::as_array)
            .is_some_and(|supported| {
                let modern = ProtocolVersion::V_2026_07_28;
                supported
                    .iter()
                    .any(|v| v.as_str() == Some(modern.as_str()))
            })
}

/// Whether a late answer to the probe says the server speaks 2026-07-28.
fn is_modern_discover_result(message: &ServerJsonRpcMessage) -> bool {
    matches!(
        message,
        JsonRpcMessage::Response(response)
            if matches!(
                &response.result,
                ServerResult::DiscoverResult(result)
                    if result.supported_versions.contains(&ProtocolVersion::V_2026_07_28)
            )
    )
}

/// A client transport that answers its own `server/discover` request with "method not
/// found" when the server has said nothing to it within the probe timeout, so that rmcp's
/// automatic lifecycle falls back to `initialize` at once. A late answer to the probe is
/// dropped (rmcp would take it for a wrong answer to `initialize`), but noted in the
/// [`ProbeWatch`] when it is a discover result. Without a timeout it only passes messages
/// through.
pub(crate) struct ProbeDeadline<T> {
    inner: T,
    timeout: Option<Duration>,
    /// The probe waiting for an answer, and until when.
    pending: Option<(RequestId, Instant)>,
    /// A probe this transport answered itself.
    abandoned: Option<RequestId>,
    watch: ProbeWatch,
}

impl<T> ProbeDeadline<T> {
    pub(crate) fn new(inner: T, timeout: Option<Duration>, watch: ProbeWatch) -> Self {
        Self {
            inner,
            timeout,
            pending: None,
            abandoned: None,
            watch,
        }
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

impl<T: Transport<RoleClient>> Transport<RoleClient> for ProbeDeadline<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let JsonRpcMessage::Request(request) = &item
            && matches!(request.request, ClientRequest::DiscoverRequest(_))
            && let Some(timeout) = self.timeout
        {
            // The clock starts at the send: a probe the transport cannot deliver fails
            // through the send itself.
            self.pending = Some((request.id.clone(), Instant::now() + timeout));
        }
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        loop {
            let message = match &self.pending {
                None => self.inner.receive().await?,
                Some((id, deadline)) => {
                    let deadline = *deadline;
                    tokio::select! {
                        message = self.inner.receive() => message?,
                        () = tokio::time::sleep_until(deadline) => {
                            let id = id.clone();
                            self.pending = None;
                            self.abandoned = Some(id.clone());
                            self.watch.0.abandoned.store(true, Ordering::SeqCst);
                            let message = format!(
                                "no answer to server/discover within {} ms; using initialize",
                                self.timeout.unwrap_or_default().as_millis()
                            );
                            return Some(ServerJsonRpcMessage::error(
                                ErrorData::new(ErrorCode::METHOD_NOT_FOUND, message, None),
                                Some(id),
                            ));
                        }
                    }
                }
            };
            let answered = answered_id(&message);
            if let (Some(answered), Some((probe, _))) = (answered, &self.pending)
                && same_id(answered, probe)
            {
                self.pending = None;
            }
            if let (Some(answered), Some(abandoned)) = (answered, &self.abandoned)
                && same_id(answered, abandoned)
            {
                self.abandoned = None;
                if is_modern_discover_result(&message) {
                    self.watch.0.answered_late.store(true, Ordering::SeqCst);
                }
                continue;
            }
            return Some(message);
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.inner.close().await
    }
}
