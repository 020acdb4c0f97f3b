//! Streamable HTTP serving on a loopback port, optionally guarded by a required header.

use std::{io, net::SocketAddr, sync::Arc};

use axum::{
    extract::{Request, State},
    http::{StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use tokio_util::sync::CancellationToken;

use crate::{config::FixtureConfig, server::FixtureServer};

/// The path the MCP endpoint is served on.
const MCP_PATH: &str = "/mcp";

/// A running in-process HTTP fixture; stops when dropped or shut down.
#[derive(Debug)]
pub struct HttpFixture {
    addr: SocketAddr,
    nonce: String,
    cancel: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl HttpFixture {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The MCP endpoint URL, e.g. `http://127.0.0.1:41234/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}{MCP_PATH}", self.addr)
    }

    /// The nonce every session of this instance reports.
    pub fn nonce(&self) -> &str {
        &self.nonce
    }

    /// Stops serving and waits for the server task.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        if let Some(task) = self.task.take() {
            // A panicked server task has nothing left to clean up.
            let _ = task.await;
        }
    }
}

impl Drop for HttpFixture {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Serves `config` over streamable HTTP in this process (scripted process exits are ignored).
pub async fn serve_http(config: FixtureConfig) -> io::Result<HttpFixture> {
    serve(FixtureServer::new(config)).await
}

pub(crate) async fn serve(server: FixtureServer) -> io::Result<HttpFixture> {
    let config = server.config().clone();
    let listener = tokio::net::TcpListener::bind(config.listen_addr()).await?;
    let addr = listener.local_addr()?;
    let cancel = CancellationToken::new();
    let nonce = server.nonce().to_owned();

    let service: StreamableHttpService<FixtureServer, LocalSessionManager> =
        StreamableHttpService::new(
            move || Ok(server.clone()),
            Arc::default(),
            StreamableHttpServerConfig::default()
                .with_sse_keep_alive(None)
                .with_cancellation_token(cancel.child_token()),
        );
    let required = Arc::new(config.required_header().cloned());
    let router = axum::Router::new()
        .nest_service(MCP_PATH, service)
        .layer(axum::middleware::from_fn_with_state(
            config.discover_http_status_value(),
            refuse_discover,
        ))
        .layer(axum::middleware::from_fn_with_state(
            required,
            require_header,
        ));

    let task = tokio::spawn({
        let cancel = cancel.clone();
        async move {
            let serving = axum::serve(listener, router)
                .with_graceful_shutdown(async move { cancel.cancelled_owned().await });
            if let Err(error) = serving.await {
                eprintln!("ctxsync-mcp-fixture: http server failed: {error}");
            }
        }
    });
    Ok(HttpFixture {
        addr,
        nonce,
        cancel,
        task: Some(task),
    })
}

async fn require_header(
    State(required): State<Arc<Option<(String, String)>>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some((name, value)) = required.as_ref() {
        let present = request
            .headers()
            .get(name.as_str())
            .is_some_and(|got| got.as_bytes() == value.as_bytes());
        if !present {
            return (StatusCode::UNAUTHORIZED, "missing or wrong required header").into_response();
        }
    }
    next.run(request).await
}

/// Largest request body `--discover-http-status` reads to find the method.
const MAX_PROBED_BODY_BYTES: usize = 1 << 20;

/// With `--discover-http-status`: a `server/discover` POST gets that status and a
/// plain-text body, never reaching the MCP service; everything else passes through.
async fn refuse_discover(
    State(status): State<Option<u16>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(status) = status.and_then(|code| StatusCode::from_u16(code).ok()) else {
        return next.run(request).await;
    };
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_PROBED_BODY_BYTES).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "request too large").into_response();
    };
    let is_discover = serde_json::from_slice::<serde_json::Value>(&bytes)
        .is_ok_and(|message| message["method"] == "server/discover");
    if is_discover {
        let reason = status.canonical_reason().unwrap_or("refused");
        return (
            status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            reason,
        )
            .into_response();
    }
    next.run(Request::from_parts(parts, axum::body::Body::from(bytes)))
        .await
}
