//! Streamable HTTP serving on a loopback port, optionally guarded by a required header.

use std::{
    io,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

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

use crate::{
    config::{FixtureConfig, FixtureLifecycle},
    server::FixtureServer,
};

/// The path the MCP endpoint is served on.
const MCP_PATH: &str = "/mcp";

/// A running in-process HTTP fixture; stops when dropped or shut down.
#[derive(Debug)]
pub struct HttpFixture {
    addr: SocketAddr,
    nonce: String,
    /// Whether `--forget-session-once` has answered a request with 404.
    forgot: Arc<AtomicBool>,
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

    /// Whether the server has lost a session (`--forget-session-once`) yet.
    pub fn forgot_a_session(&self) -> bool {
        self.forgot.load(Ordering::SeqCst)
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
    let discover = DiscoverScript {
        status: config
            .discover_http_status_value()
            .and_then(|code| StatusCode::from_u16(code).ok()),
        empty: config.lifecycle_value() == FixtureLifecycle::Lenient,
    };
    let forgot = Arc::new(AtomicBool::new(false));
    // Already "forgotten" when not scripted, so the layer passes everything.
    let forget = Arc::new(AtomicBool::new(!config.forgets_session_once()));
    let router = axum::Router::new()
        .nest_service(MCP_PATH, service)
        .layer(axum::middleware::from_fn_with_state(
            (forget, forgot.clone()),
            forget_session_once,
        ))
        .layer(axum::middleware::from_fn_with_state(
            discover,
            script_discover,
        ))
        .layer(axum::middleware::from_fn_with_state(
            required,
            require_header,
        ))
        .layer(axum::middleware::from_fn_with_state(
            config
                .deny_status_value()
                .and_then(|code| StatusCode::from_u16(code).ok()),
            deny,
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
        forgot,
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

/// With `--deny-status`: every request gets that status and a bearer challenge.
async fn deny(State(status): State<Option<StatusCode>>, request: Request, next: Next) -> Response {
    let Some(status) = status else {
        return next.run(request).await;
    };
    let challenge = match status {
        StatusCode::FORBIDDEN => r#"Bearer error="insufficient_scope", scope="tools""#,
        _ => r#"Bearer realm="ctxsync-mcp-fixture""#,
    };
    (
        status,
        [(header::WWW_AUTHENTICATE, challenge)],
        status.canonical_reason().unwrap_or("denied"),
    )
        .into_response()
}

/// Largest request body the scripted layers read to find the method.
const MAX_PROBED_BODY_BYTES: usize = 1 << 20;

/// What the HTTP front does with a `server/discover` POST instead of passing it on.
#[derive(Debug, Clone, Copy)]
struct DiscoverScript {
    /// `--discover-http-status`: this status and a plain-text body.
    status: Option<StatusCode>,
    /// The lenient lifecycle: an empty result, `{}`.
    empty: bool,
}

/// Reads a request's body to parse it, and the request rebuilt for passing on.
async fn read_json(request: Request) -> Result<(serde_json::Value, Request), Response> {
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_PROBED_BODY_BYTES).await else {
        return Err((StatusCode::PAYLOAD_TOO_LARGE, "request too large").into_response());
    };
    let message = serde_json::from_slice(&bytes).unwrap_or_default();
    Ok((
        message,
        Request::from_parts(parts, axum::body::Body::from(bytes)),
    ))
}

/// A `server/discover` POST gets what the script says, never reaching the MCP service;
/// everything else passes through.
async fn script_discover(
    State(script): State<DiscoverScript>,
    request: Request,
    next: Next,
) -> Response {
    if script.status.is_none() && !script.empty {
        return next.run(request).await;
    }
    let (message, request) = match read_json(request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    if message["method"] != "server/discover" {
        return next.run(request).await;
    }
    if let Some(status) = script.status {
        let reason = status.canonical_reason().unwrap_or("refused");
        return (
            status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            reason,
        )
            .into_response();
    }
    let answer = serde_json::json!({"jsonrpc": "2.0", "id": message["id"], "result": {}});
    (
        [(header::CONTENT_TYPE, "application/json")],
        answer.to_string(),
    )
        .into_response()
}

/// With `--forget-session-once`: the first JSON-RPC request POSTed with a session id gets
/// 404, as from a server that no longer knows the session; every later one passes.
async fn forget_session_once(
    State((forgotten, forgot)): State<(Arc<AtomicBool>, Arc<AtomicBool>)>,
    request: Request,
    next: Next,
) -> Response {
    let names_session = request.headers().contains_key("mcp-session-id");
    if forgotten.load(Ordering::SeqCst) || request.method() != "POST" || !names_session {
        return next.run(request).await;
    }
    let (message, request) = match read_json(request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    let is_request = message.get("id").is_some() && message.get("method").is_some();
    if is_request && !forgotten.swap(true, Ordering::SeqCst) {
        forgot.store(true, Ordering::SeqCst);
        return (StatusCode::NOT_FOUND, "session not found").into_response();
    }
    next.run(request).await
}
