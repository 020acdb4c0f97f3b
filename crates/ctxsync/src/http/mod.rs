//! The HTTP side of `ctxsync server`: the chat API (JSON, bearer token), server-sent
//! context and tool-call events, the chat's web page, `/healthz` and `/metrics`.

pub mod api;
pub mod api_token;
mod audit;
mod auth;
pub mod bounds;
mod handlers;
mod metrics;
mod page;
pub(crate) mod sign_in;
pub mod tool_call;

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use ctxsync_agent_api::{AgentApiMetrics, CallHub};
use ctxsync_first_turn_gate::store::StoreGate;
use ctxsync_persistence::{ChatId, Store};
use serde_json::json;

pub use auth::Auth;
use auth::Caller;
pub use page::{CONTENT_SECURITY_POLICY, page_path};

/// Largest JSON request body the API reads; everything it accepts is small.
const MAX_BODY_BYTES: usize = 64 * 1024;

/// What every handler shares.
#[derive(Clone, Debug)]
pub struct AppState {
    /// The database.
    pub store: Store,
    /// The first-turn gate over `store`.
    pub gate: StoreGate,
    /// Checks the bearer token and page sessions.
    pub auth: Arc<Auth>,
    /// The agent API's counters, for `/metrics`.
    pub agent_api: Arc<AgentApiMetrics>,
    /// Open context event streams, within their caps.
    pub event_streams: Arc<bounds::EventStreams>,
    /// `/healthz`'s cached database check.
    pub health: Arc<bounds::HealthCheck>,
    /// How often an open event stream re-reads its chat in case a notification was lost
    /// (raised to [`bounds::MIN_EVENT_RECHECK`]).
    pub event_recheck: std::time::Duration,
    /// A turn's budget for tool definitions; over it, tools are deferred behind
    /// find_tools.
    pub tool_budget: ctxsync_chat_projection::ToolBudget,
    /// Sends stored calls to their agents and waits for their ends.
    pub calls: Arc<CallHub>,
    /// The longest deadline a call may ask for (`--tool-call-max-ms`).
    pub tool_call_max: std::time::Duration,
    /// find_tools' indexes, one per distinct catalog searched (`--find-tools-cache-mib`).
    pub find_indexes: Arc<ctxsync_chat_projection::ToolIndexCache>,
    /// Where browsers reach this server, so page links are full URLs; `None` when
    /// neither `--public-url` nor a loopback listener says.
    pub public_url: Option<crate::public_url::PublicUrl>,
    /// Turns true when the server stops: event streams end so the drain can finish.
    pub stopping: tokio::sync::watch::Receiver<bool>,
}

/// The router: `/healthz`, the page's files and its link exchange are open; the page checks
/// its own credentials; everything else needs the bearer token, or for the few routes a
/// page uses, a session bound to that chat.
pub fn router(state: AppState) -> Router {
    let protected = Router::new()
        .route(
            "/api/agents",
            post(handlers::create_agent).get(handlers::list_agents),
        )
        .route("/api/agents/{id}", delete(handlers::delete_agent))
        .route("/api/agents/{id}/token", post(handlers::rotate_agent_token))
        .route("/api/agents/{id}/context", get(handlers::agent_context))
        .route(
            "/api/agents/{id}/mcp-servers",
            get(handlers::agent_mcp_servers),
        )
        .route("/api/chats", post(handlers::create_chat))
        .route("/api/chats/{id}", get(handlers::get_chat))
        .route("/api/chats/{id}/agent", put(handlers::rebind_chat))
        .route("/api/chats/{id}/turns", post(handlers::turn))
        .route("/api/chats/{id}/turns/{turn}", get(handlers::get_turn))
        .route("/api/chats/{id}/find-tools", post(handlers::find_tools))
        // Its own body limit: a call's arguments may be 1 MiB.
        .route(
            "/api/chats/{id}/turns/{turn}/tool-calls",
            post(tool_call::routes::start_call).layer(DefaultBodyLimit::max(
                tool_call::routes::MAX_CALL_BODY_BYTES,
            )),
        )
        .route(
            "/api/chats/{id}/turns/{turn}/tool-calls/{call_id}",
            get(tool_call::routes::get_call).delete(tool_call::routes::cancel_call),
        )
        .route("/api/tool-calls", get(tool_call::audit::list_calls))
        .route("/api/audit", get(audit::list_entries))
        .route(
            "/api/chats/{id}/context",
            get(handlers::chat_panel).put(handlers::refresh_context),
        )
        .route(
            "/api/chats/{id}/context/events",
            get(handlers::context_events),
        )
        .route("/api/chats/{id}/link", post(handlers::page_link))
        .route("/metrics", get(metrics::metrics))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            require_auth,
        ));
    Router::new()
        .route("/healthz", get(handlers::healthz))
        .route(api::OPENAPI_PATH, get(handlers::openapi_json))
        // Sign-in checks its own callers (the API token, or a page session of a chat of
        // that agent); the callback is the person's browser coming back, with no credential.
        .route(
            "/api/agents/{id}/mcp-servers/{name}/authorization",
            post(sign_in::start).delete(sign_in::forget),
        )
        .route(sign_in::CALLBACK_PATH, get(sign_in::callback))
        .route(sign_in::CLIENT_METADATA_PATH, get(sign_in::client_metadata))
        // The page authenticates itself: a one-time link token becomes a session cookie.
        .route("/chats/{id}", get(page::page))
        .route("/chats/{id}/session", post(page::exchange))
        .route(ctxsync_context_ui::PAGE_SCRIPT_PATH, get(page::script))
        .route(ctxsync_context_ui::PAGE_STYLE_PATH, get(page::stylesheet))
        .merge(protected)
        .fallback(|| async { ApiError::not_found("no such route") })
        .layer(axum::middleware::map_response(page::security_headers))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// The bearer token opens every route; a page session only its own chat's event stream
/// and refresh (a session on any other route is no credential: 401; on another chat's: 403).
async fn require_auth(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let caller = match state.auth.caller(request.headers()).await {
        Ok(caller) => caller,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let allowed = match caller {
        Caller::Operator => Ok(()),
        Caller::Page(chat) => {
            match page::session_route_chat(request.method(), request.uri().path()) {
                Some(raw) if raw.parse::<ChatId>().is_ok_and(|target| target == chat) => Ok(()),
                Some(_) => Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "this page session is for another chat",
                )),
                None => Err(unauthorized()),
            }
        }
        Caller::Anonymous => Err(unauthorized()),
    };
    match allowed {
        Ok(()) => next.run(request).await,
        Err(refusal) => refusal.into_response(),
    }
}

fn unauthorized() -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "missing or invalid bearer token")
}

/// A JSON error `{"error": message}` with its status.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    /// An error answered with `status`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    /// A 400 answer.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// A 404 answer.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }

    /// The status it is answered with.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The message it is answered with.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<ctxsync_persistence::StoreError> for ApiError {
    fn from(error: ctxsync_persistence::StoreError) -> Self {
        use ctxsync_persistence::StoreError as E;
        match &error {
            E::AgentNotFound(_) | E::ChatNotFound(_) => Self::not_found(error.to_string()),
            E::InvalidInput(_) => Self::bad_request(error.to_string()),
            // A bounded table is full (e.g. open page links): say which, and that it passes.
            E::LimitReached(_) => Self::new(StatusCode::SERVICE_UNAVAILABLE, error.to_string()),
            E::Unavailable(_) => Self::new(StatusCode::SERVICE_UNAVAILABLE, "database unavailable"),
            _ => {
                // The cause goes to the log only: it may name tables, hosts or values.
                tracing::error!(error = %error, "request failed in the store");
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(json!({ "error": self.message }))).into_response()
    }
}
