//! How a connection starts its MCP lifecycle: `server/discover` (2026-07-28) with a fallback
//! to `initialize`, and the bounded probe that keeps a server which ignores unknown methods
//! from spending the first-turn budget.

use std::time::Duration;

use rmcp::{
    RoleClient,
    model::{
        ClientJsonRpcMessage, ClientRequest, ErrorCode, ErrorData, JsonRpcMessage, ProtocolVersion,
        RequestId, ServerJsonRpcMessage,
    },
    service::ClientLifecycleMode,
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

/// A client transport that answers its own `server/discover` request with "method not
/// found" when the server has said nothing to it within the probe timeout, so that rmcp's
/// automatic lifecycle falls back to `initialize` at once. A late answer to the probe is
/// dropped: rmcp would take it for a wrong answer to `initialize`.
pub(crate) struct ProbeDeadline<T> {
    inner: T,
    timeout: Duration,
    /// The probe waiting for an answer, and until when.
    pending: Option<(RequestId, Instant)>,
    /// A probe this transport answered itself.
    abandoned: Option<RequestId>,
}

impl<T> ProbeDeadline<T> {
    pub(crate) fn new(inner: T, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            pending: None,
            abandoned: None,
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
        {
            // The clock starts at the send: a probe the transport cannot deliver fails
            // through the send itself.
            self.pending = Some((request.id.clone(), Instant::now() + self.timeout));
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
                            let message = format!(
                                "no answer to server/discover within {} ms; using initialize",
                                self.timeout.as_millis()
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
                continue;
            }
            return Some(message);
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.inner.close().await
    }
}
