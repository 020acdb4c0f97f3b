//! A third-party chat service that embeds ctxsync's persistence, chat projection and
//! first-turn gate behind routes of its own (axum):
//!
//! - `POST /chats` with `{"agent": "<agent id>"}`: a chat bound to that agent;
//! - `POST /chats/{chat}/turns`: what the chat's next turn runs with: the tools the model
//!   may call, the note it is told while discovery is incomplete, and how the bounded
//!   wait for the agent's MCP discovery went.
//!
//! Every route needs `Authorization: Bearer $CHAT_SERVICE_TOKEN`. Run it on the database
//! of a `ctxsync server` (PostgreSQL, so that the server's commits wake its waits):
//!
//! ```text
//! CHAT_SERVICE_TOKEN=<a long random secret> \
//!   cargo run -p ctxsync-first-turn-gate --example chat_service -- \
//!   postgres://ctxsync@db.internal/ctxsync 127.0.0.1:8080
//! ```
//!
//! `axum::serve` bounds neither header reads nor connections: in production put it behind
//! a proxy that does, as for any axum service.

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use ctxsync_first_turn_gate::{GateConfig, StoreGate, TurnMode};
use ctxsync_persistence::{AgentId, ChatId, DatabaseConfig, Store, StoreError};
use serde_json::{Value, json};
use subtle::ConstantTimeEq;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(database_url), Some(listen)) = (args.next(), args.next()) else {
        return Err("usage: chat_service DATABASE_URL LISTEN_ADDRESS".into());
    };
    let token = std::env::var("CHAT_SERVICE_TOKEN")
        .map_err(|_| "set CHAT_SERVICE_TOKEN to the secret callers must present")?;
    let store = Store::open(DatabaseConfig::from_url(&database_url)?).await?;
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    axum::serve(listener, router(store, GateConfig::default(), token)).await?;
    Ok(())
}

#[derive(Clone)]
struct ChatService {
    store: Store,
    gate: StoreGate,
    token: Arc<str>,
}

/// The service's routes over `store`, accepting callers that present `token`.
pub(crate) fn router(store: Store, gate: GateConfig, token: String) -> Router {
    let service = ChatService {
        gate: StoreGate::over_store(store.clone(), gate),
        store,
        token: token.into(),
    };
    Router::new()
        .route("/chats", post(create_chat))
        .route("/chats/{chat}/turns", post(prepare_turn))
        .layer(DefaultBodyLimit::max(4 * 1024))
        .route_layer(middleware::from_fn_with_state(
            service.clone(),
            authenticate,
        ))
        .with_state(service)
}

async fn authenticate(
    State(service): State<ChatService>,
    request: Request,
    next: Next,
) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.as_bytes().strip_prefix(b"Bearer "));
    match presented {
        Some(token) if bool::from(token.ct_eq(service.token.as_bytes())) => next.run(request).await,
        _ => (StatusCode::UNAUTHORIZED, "a valid bearer token is required").into_response(),
    }
}

type Answer = Result<Json<Value>, (StatusCode, String)>;

async fn create_chat(State(service): State<ChatService>, Json(body): Json<Value>) -> Answer {
    let agent: AgentId = body["agent"]
        .as_str()
        .and_then(|id| id.parse().ok())
        .ok_or((
            StatusCode::BAD_REQUEST,
            "`agent` must be an agent id".to_owned(),
        ))?;
    let chat = service
        .store
        .create_chat(Some(agent))
        .await
        .map_err(store_error)?;
    Ok(Json(json!({ "chat": chat.id.to_string() })))
}

async fn prepare_turn(State(service): State<ChatService>, Path(chat): Path<String>) -> Answer {
    let chat: ChatId = chat
        .parse()
        .map_err(|_| (StatusCode::BAD_REQUEST, "not a chat id".to_owned()))?;
    if service
        .store
        .get_chat(chat)
        .await
        .map_err(store_error)?
        .is_none()
    {
        return Err((StatusCode::NOT_FOUND, format!("chat {chat} not found")));
    }
    // Waits (bounded) on the first turn of an agent process, never fails the turn.
    let turn = service.gate.prepare_turn(chat, TurnMode::Default).await;
    let tools: Vec<_> = turn
        .tools
        .iter()
        .map(|tool| tool.model_definition())
        .collect();
    Ok(Json(json!({
        "tools": tools,
        "note": turn.note,
        "discovery": turn.outcome,
        "inventory_error": turn.inventory_error,
    })))
}

/// Says what the caller can act on; database detail goes to the service's log only.
fn store_error(error: StoreError) -> (StatusCode, String) {
    match error {
        StoreError::AgentNotFound(_) => (StatusCode::NOT_FOUND, error.to_string()),
        error if error.is_transient() => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the database is unavailable; retry later".to_owned(),
        ),
        error => {
            eprintln!("chat_service: store error: {error}");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal error".to_owned(),
            )
        }
    }
}
