//! Telling the server's two listeners apart from the outside, so a command pointed at the
//! wrong one says so instead of a transport error: the agent API speaks only gRPC (HTTP/2),
//! the chat API only HTTP/1.1, and each answers a probe the other cannot.
//!
//! Only plain `http://` addresses are probed. Over TLS each listener offers only its own
//! protocol in the handshake (ALPN), so an HTTP/1.1 client at the agent API's port is
//! refused there with `no_application_protocol`, which is what tells that case apart.

use std::time::Duration;

use ctxsync_agent_publication::{ConnectionState, PublisherStatus};
use tokio::sync::watch;

/// How long one probe may take; a listener that answers at all answers in milliseconds.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether a chat command's failed request went to the agent API's port: over TLS, the
/// handshake refused HTTP/1.1 (that listener offers only HTTP/2); in plain text, the
/// address answers a gRPC health check.
pub async fn is_agent_api(base: &str, error: &reqwest::Error) -> bool {
    if base.starts_with("https://") {
        let mut source: Option<&dyn std::error::Error> = Some(error);
        while let Some(cause) = source {
            // rustls names the alert so; no type of its reaches this crate's API.
            if cause.to_string().contains("NoApplicationProtocol") {
                return true;
            }
            source = cause.source();
        }
        return false;
    }
    answers_grpc(base).await
}

/// Whether `base` answers a gRPC health check: the agent API's port (its health service
/// needs no token).
async fn answers_grpc(base: &str) -> bool {
    if !base.starts_with("http://") {
        return false;
    }
    let Ok(endpoint) = tonic::transport::Endpoint::from_shared(base.to_owned()) else {
        return false;
    };
    let probe = async {
        let channel = endpoint
            .connect_timeout(PROBE_TIMEOUT)
            .timeout(PROBE_TIMEOUT)
            .connect()
            .await
            .ok()?;
        tonic_health::pb::health_client::HealthClient::new(channel)
            .check(tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            })
            .await
            .ok()
    };
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, probe).await,
        Ok(Some(_))
    )
}

/// Whether `base` answers `GET /healthz` over HTTP/1.1 as the chat API does (its health
/// check needs no token): the agent API's port never answers HTTP/1.1.
async fn answers_chat_health(base: &str) -> bool {
    if !base.starts_with("http://") {
        return false;
    }
    let Ok(client) = reqwest::Client::builder().timeout(PROBE_TIMEOUT).build() else {
        return false;
    };
    let url = format!("{}/healthz", base.trim_end_matches('/'));
    let Ok(response) = client.get(url).send().await else {
        return false;
    };
    let Ok(body) = response.json::<serde_json::Value>().await else {
        return false;
    };
    // `{"status":"ok"}`, or `{"error":"database unavailable"}` while the database is down.
    body["status"] == "ok" || body["error"] == "database unavailable"
}

/// How often, and how many times, the agent probes its `--server` until it answers one
/// way or the other (the server may start after the agent).
const AGENT_PROBE_INTERVAL: Duration = Duration::from_secs(5);
const AGENT_PROBES: u32 = 12;

/// Run beside the agent: when its `--server` turns out to be the chat API's port, logs
/// once that the agent needs the gRPC one. Nothing is probed until registering has
/// failed (`status` says so), so an agent that registers costs the server no extra
/// connection. Answering gRPC is checked first, so a balancer that serves both on one
/// port is never taken for the wrong one; the agent itself keeps retrying as it does for
/// any unreachable server. Plain `http://` only: over TLS the publisher's own log names
/// the refused handshake.
pub async fn check_agent_url(url: String, mut status: watch::Receiver<PublisherStatus>) {
    loop {
        match status.borrow_and_update().connection {
            ConnectionState::Connecting => {}
            ConnectionState::WaitingToRetry => break,
            ConnectionState::Ready
            | ConnectionState::PushesUnsupported
            | ConnectionState::TokenRefused => return,
        }
        if status.changed().await.is_err() {
            return;
        }
    }
    for _ in 0..AGENT_PROBES {
        if answers_grpc(&url).await {
            return;
        }
        if answers_chat_health(&url).await {
            tracing::error!("{}", agent_hint(&url));
            return;
        }
        tokio::time::sleep(AGENT_PROBE_INTERVAL).await;
    }
}

/// What the agent logs when its `--server` is the chat API's port.
fn agent_hint(url: &str) -> String {
    format!(
        "the agent API at {url} answered as ctxsync's chat API: this looks like the HTTP port; \
         the agent needs the gRPC one, `agent API (gRPC)` in `ctxsync server`'s output \
         (127.0.0.1:4770 by default)"
    )
}
