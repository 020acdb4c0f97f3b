//! Streamable HTTP serving on a loopback port, optionally guarded by a required header or
//! by OAuth bearer tokens (with the fixture's own authorization server beside it).

use std::{
    io,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
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
    oauth::{self, AuthServer, OAuthHandle},
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
    /// What `--close-stream-once` has seen.
    cut: Arc<CutStream>,
    /// The authorization server in OAuth mode.
    oauth: Option<Arc<AuthServer>>,
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

    /// How long after `--close-stream-once` closed its stream the client resumed it with
    /// the stream's last event id (`None` until it has).
    pub fn resumed_after(&self) -> Option<Duration> {
        *self
            .cut
            .resumed_after
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// In OAuth mode ([`FixtureConfig::oauth`]), what its authorization server has seen and
    /// the levers tests pull on it; `None` otherwise.
    pub fn oauth(&self) -> Option<OAuthHandle> {
        self.oauth.clone().map(OAuthHandle::new)
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
    let cut = Arc::new(CutStream {
        armed: AtomicBool::new(config.closes_stream_once()),
        ..CutStream::default()
    });
    let oauth = config.oauth_value().map(|settings| {
        Arc::new(AuthServer::new(
            settings.clone(),
            format!("http://{addr}"),
            MCP_PATH,
        ))
    });
    let router = axum::Router::new()
        .nest_service(MCP_PATH, service)
        .layer(axum::middleware::from_fn_with_state(
            cut.clone(),
            close_stream_once,
        ))
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
        ))
        .layer(axum::middleware::from_fn_with_state(
            oauth.clone(),
            oauth::require_bearer,
        ));
    // Added after the layers: the authorization server's own routes need no token.
    let router = match &oauth {
        Some(server) => router.merge(oauth::router(server.clone(), MCP_PATH)),
        None => router,
    };

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
        cut,
        oauth,
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

/// The last event id of the stream `--close-stream-once` cuts.
const CUT_EVENT_ID: &str = "fixture-cut-1";
/// The `retry` (milliseconds) the cut stream asks the client to wait.
const CUT_RETRY_MS: u64 = 300;

/// `--close-stream-once`: the answer kept back when the stream was cut, and what the
/// client did about it.
#[derive(Debug, Default)]
struct CutStream {
    /// Still to cut the first `tools/list` stream.
    armed: AtomicBool,
    /// The `data` of the kept-back answer, and when the stream was closed.
    kept: Mutex<Option<(String, Instant)>>,
    resumed_after: Mutex<Option<Duration>>,
}

/// The JSON-RPC answer in an event-stream body (the `data` of an event with a result or an
/// error).
fn answer_in(body: &str) -> Option<String> {
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim)
        .find(|data| data.contains("\"result\"") || data.contains("\"error\""))
        .map(str::to_owned)
}

/// With `--close-stream-once`: the first `tools/list` is answered by the MCP service as
/// usual, but the client gets only a priming event (an id and a `retry`) before a graceful
/// close; the `GET` that resumes with that id gets the answer.
async fn close_stream_once(
    State(cut): State<Arc<CutStream>>,
    request: Request,
    next: Next,
) -> Response {
    let resumes = request
        .headers()
        .get("last-event-id")
        .is_some_and(|id| id.as_bytes() == CUT_EVENT_ID.as_bytes());
    if request.method() == "GET" && resumes {
        let kept = cut.kept.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((answer, closed_at)) = kept {
            *cut.resumed_after.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(closed_at.elapsed());
            let body = format!("id: fixture-cut-2\ndata: {answer}\n\n");
            return ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response();
        }
    }
    if !cut.armed.load(Ordering::SeqCst) || request.method() != "POST" {
        return next.run(request).await;
    }
    let (message, request) = match read_json(request).await {
        Ok(read) => read,
        Err(response) => return response,
    };
    if message["method"] != "tools/list" || !cut.armed.swap(false, Ordering::SeqCst) {
        return next.run(request).await;
    }
    let response = next.run(request).await;
    let Ok(body) = axum::body::to_bytes(response.into_body(), MAX_PROBED_BODY_BYTES).await else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "answer too large").into_response();
    };
    let Some(answer) = answer_in(&String::from_utf8_lossy(&body)) else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "no answer to cut").into_response();
    };
    *cut.kept.lock().unwrap_or_else(|e| e.into_inner()) = Some((answer, Instant::now()));
    let priming = format!("id: {CUT_EVENT_ID}\nretry: {CUT_RETRY_MS}\ndata:\n\n");
    ([(header::CONTENT_TYPE, "text/event-stream")], priming).into_response()
}
