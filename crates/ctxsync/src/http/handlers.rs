//! The HTTP handlers. Each reads committed state through the projection (or the gate for
//! a turn) and answers JSON; errors are `{"error": …}` naming the problem.

use std::convert::Infallible;
use std::str::FromStr;

use axum::Json;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use ctxsync_chat_projection::store::{LoadedChat, load_agent_context, load_chat};
use ctxsync_chat_projection::{ActiveTools, FindToolsRequest};
use ctxsync_context_ui::{build_chat_panel, render_fragment, render_json, render_text};
use ctxsync_first_turn_gate::TurnMode;
use ctxsync_persistence::{AgentId, ChatId, ChatTurnMode, NewTurn, TurnId, TurnRecord};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, AppState};

type ApiResult<T = Response> = Result<T, ApiError>;

fn parse_id<T: FromStr>(raw: &str, what: &str) -> ApiResult<T> {
    raw.parse()
        .map_err(|_| ApiError::bad_request(format!("invalid {what} id {raw:?}: expected a UUID")))
}

/// Unwraps a JSON body, turning serde's message (which names the field) into a 400; a
/// body over the size limit keeps axum's 413 (it was answered 400 before the security
/// scan test).
fn body<T>(json: Result<Json<T>, JsonRejection>) -> ApiResult<T> {
    json.map(|Json(value)| value).map_err(|rejection| {
        let status = rejection.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(status, rejection.body_text())
        } else {
            ApiError::bad_request(rejection.body_text())
        }
    })
}

async fn loaded_chat(state: &AppState, raw_id: &str) -> ApiResult<(ChatId, LoadedChat)> {
    let chat: ChatId = parse_id(raw_id, "chat")?;
    let loaded = load_chat(&state.store, chat)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("chat {chat} not found")))?;
    Ok((chat, loaded))
}

fn panel_of(chat: ChatId, loaded: &LoadedChat) -> ctxsync_context_ui::Panel {
    build_chat_panel(&chat.to_string(), &loaded.context, &loaded.binding)
}

/// The projection's phase and freshness, in the words every surface uses; while pending,
/// also `pending_servers`: the servers still connecting, by name, each with how long it
/// has been at it (`elapsed_ms`, and whole seconds as `elapsed_s`). The key is left out
/// when nobody is named, so earlier answers keep their exact shape.
fn discovery_words(view: &ctxsync_chat_projection::View) -> Value {
    let mut words = json!({ "phase": view.phase().as_str(), "stale": view.is_stale() });
    let pending: Vec<Value> = view
        .pending_servers()
        .iter()
        .map(|s| json!({ "name": s.name, "elapsed_ms": s.elapsed_ms, "elapsed_s": s.elapsed_ms / 1000 }))
        .collect();
    if !pending.is_empty() {
        words["pending_servers"] = Value::Array(pending);
    }
    words
}

fn chat_json(chat: ChatId, loaded: &LoadedChat) -> Value {
    let view = loaded.context.mcp();
    json!({
        "id": chat.to_string(),
        "agent_id": loaded.chat.agent_id.map(|a| a.to_string()),
        "mcp_discovery": discovery_words(view),
        "context": render_json(&panel_of(chat, loaded)),
    })
}

pub async fn healthz(State(state): State<AppState>) -> Response {
    if state.health.database_ok(&state.store).await {
        Json(json!({ "status": "ok" })).into_response()
    } else {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "database unavailable").into_response()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateAgent {
    name: String,
}

pub async fn create_agent(
    State(state): State<AppState>,
    json: Result<Json<CreateAgent>, JsonRejection>,
) -> ApiResult {
    let request = body(json)?;
    let name = request.name.trim();
    if name.is_empty() {
        return Err(ApiError::bad_request("name: must not be empty"));
    }
    let agent = state.store.create_agent(name).await?;
    let response = json!({ "id": agent.id.to_string(), "token": agent.token.expose() });
    Ok((StatusCode::CREATED, Json(response)).into_response())
}

/// Every agent, oldest first; never a token or its digest.
pub async fn list_agents(State(state): State<AppState>) -> ApiResult {
    let agents = state.store.list_agents().await?;
    let rows: Vec<Value> = agents.iter().map(crate::agents::agent_json).collect();
    Ok(Json(json!({ "agents": rows })).into_response())
}

/// A new token for the agent, shown in this response only; the old one is refused from
/// now on, on every replica (authentication reads the store on every call).
pub async fn rotate_agent_token(
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> ApiResult {
    let agent: AgentId = parse_id(&raw, "agent")?;
    let rotated = state.store.rotate_agent_token(agent).await?;
    let response = json!({ "id": rotated.id.to_string(), "token": rotated.token.expose() });
    Ok(Json(response).into_response())
}

/// Deletes the agent with its snapshot and resources; its token is refused from now on.
pub async fn delete_agent(State(state): State<AppState>, Path(raw): Path<String>) -> ApiResult {
    let agent: AgentId = parse_id(&raw, "agent")?;
    state.store.delete_agent(agent).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The agent's stored rows beside the projection's view of them (one read): phase and
/// freshness are the view's, as on every other surface.
pub async fn agent_context(State(state): State<AppState>, Path(raw): Path<String>) -> ApiResult {
    let agent: AgentId = parse_id(&raw, "agent")?;
    let (context, view) = load_agent_context(&state.store, agent)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("agent {agent} not found")))?;
    let snapshot = context.snapshot.as_ref().map(|s| {
        json!({
            "agent_run_id": s.agent_run_id,
            "phase": view.phase().as_str(),
            "version": s.version,
            "aggregate_hash": s.aggregate_hash,
            "snapshot_error": s.snapshot_error,
            "received_at": s.received_at.to_rfc3339(),
            // As the agent reported them, undated: `mcp_discovery` adds the time since.
            "pending_servers": s.pending_servers.iter().map(|p| json!({
                "name": p.server_name,
                "elapsed_ms": p.elapsed_ms,
            })).collect::<Vec<_>>(),
        })
    });
    let resources: Vec<Value> = context
        .resources
        .iter()
        .map(|r| {
            let kind = r.body.kind();
            let mut row = json!({
                "source": r.source,
                "source_path": r.source_path,
                "kind": kind.as_str(),
                "status": r.status.as_str(),
                "error": r.error,
                "content_hash": r.content_hash,
                "size_bytes": r.size_bytes,
            });
            // A config file's body never leaves the agent; the others are shown as stored.
            if kind != ctxsync_protocol::BodyKind::McpConfig {
                row["body"] = r.body.to_json();
            }
            row
        })
        .collect();
    Ok(Json(json!({
        "agent_id": agent.to_string(),
        "name": context.agent.name,
        "agent_run_id": context.agent.agent_run_id,
        "mcp_discovery": discovery_words(&view),
        "stale": view.is_stale(),
        "snapshot": snapshot,
        "resources": resources,
    }))
    .into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateChat {
    agent_id: String,
}

pub async fn create_chat(
    State(state): State<AppState>,
    json: Result<Json<CreateChat>, JsonRejection>,
) -> ApiResult {
    let request = body(json)?;
    let agent: AgentId = request.agent_id.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "agent_id: invalid agent id {:?}: expected a UUID",
            request.agent_id
        ))
    })?;
    if state.store.get_agent(agent).await?.is_none() {
        return Err(ApiError::not_found(format!("agent {agent} not found")));
    }
    let chat = state.store.create_chat(Some(agent)).await?;
    let (id, loaded) = loaded_chat(&state, &chat.id.to_string()).await?;
    Ok((StatusCode::CREATED, Json(chat_json(id, &loaded))).into_response())
}

pub async fn get_chat(State(state): State<AppState>, Path(raw): Path<String>) -> ApiResult {
    let (chat, loaded) = loaded_chat(&state, &raw).await?;
    Ok(Json(chat_json(chat, &loaded)).into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnRequest {
    mode: Option<String>,
}

/// Prepares a turn through the gate (a default turn waits for the bound agent's current
/// run), stores it with what this answer says, and answers it with its `turn_id`. A new
/// turn has nothing activated. When the turn cannot be stored the turn still proceeds
/// (as the gate never fails one): `turn_id` is null and `turn_error` says why.
pub async fn turn(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    json: Result<Json<TurnRequest>, JsonRejection>,
) -> ApiResult {
    let request = body(json)?;
    let (mode, stored_mode) = match request.mode.as_deref() {
        None | Some("default") => (TurnMode::Default, ChatTurnMode::Default),
        Some("plan") => (TurnMode::Plan, ChatTurnMode::Plan),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "mode: expected \"default\" or \"plan\", got {other:?}"
            )));
        }
    };
    let chat: ChatId = parse_id(&raw, "chat")?;
    if state.store.get_chat(chat).await?.is_none() {
        return Err(ApiError::not_found(format!("chat {chat} not found")));
    }
    let started = std::time::Instant::now();
    let context = state.gate.prepare_turn(chat, mode).await;
    // The projection's model-facing shape: name, description and input schema, plus the
    // title, output schema and `annotations_untrusted` when the server gave them.
    let tools: Vec<Value> = context
        .tools
        .iter()
        .map(|t| serde_json::to_value(t.model_definition()).expect("a tool serializes"))
        .collect();
    let tool_count = tools.len();
    let outcome = json!({
        "note": context.note,
        "mcp_discovery": context.outcome,
        "inventory_error": context.inventory_error,
    });
    let new_turn = NewTurn {
        mode: stored_mode,
        outcome,
        tools: Value::Array(tools),
    };
    let response = match state.store.record_turn(chat, &new_turn).await {
        Ok(recorded) => turn_json(&recorded),
        Err(error) => {
            // The cause goes to the log (by ApiError); the answer names the problem only.
            let refusal = ApiError::from(error);
            let mut response = new_turn.outcome;
            response["turn_id"] = Value::Null;
            response["mode"] = json!(stored_mode.as_str());
            response["tools"] = new_turn.tools;
            response["active_tools"] = json!([]);
            response["turn_error"] = json!(format!(
                "the turn was not stored ({}): find-tools cannot name it",
                refusal.message
            ));
            response
        }
    };
    tracing::info!(%chat, ?mode, tools = tool_count, waited_ms = started.elapsed().as_millis() as u64, turn = %response["turn_id"], "turn prepared");
    Ok(Json(response).into_response())
}

/// A stored turn as the API shows it: what its POST answered, with its id, mode and the
/// names find_tools has activated for it so far.
fn turn_json(turn: &TurnRecord) -> Value {
    let mut response = match &turn.outcome {
        Value::Object(outcome) => Value::Object(outcome.clone()),
        _ => json!({}),
    };
    response["turn_id"] = json!(turn.id.to_string());
    response["mode"] = json!(turn.mode.as_str());
    response["tools"] = turn.tools.clone();
    response["active_tools"] = json!(turn.activated);
    response
}

/// A turn of this chat as stored, from any replica: 404 for an unknown turn, one of
/// another chat, or one past the last [`ctxsync_persistence::MAX_TURNS_PER_CHAT`].
pub async fn get_turn(
    State(state): State<AppState>,
    Path((raw_chat, raw_turn)): Path<(String, String)>,
) -> ApiResult {
    let chat: ChatId = parse_id(&raw_chat, "chat")?;
    let turn: TurnId = parse_id(&raw_turn, "turn")?;
    if state.store.get_chat(chat).await?.is_none() {
        return Err(ApiError::not_found(format!("chat {chat} not found")));
    }
    let recorded = state
        .store
        .get_turn(chat, turn)
        .await?
        .ok_or_else(|| turn_not_found(chat, turn))?;
    Ok(Json(turn_json(&recorded)).into_response())
}

fn turn_not_found(chat: ChatId, turn: TurnId) -> ApiError {
    ApiError::not_found(format!("turn {turn} of chat {chat} not found"))
}

/// A find_tools call for one turn: `turn_id` names it; without one, the chat's latest
/// turn (a chat with no turn yet is a 400).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FindToolsBody {
    turn_id: Option<String>,
    queries: Option<Vec<String>>,
    names: Option<Vec<String>>,
}

/// Searches the chat's live catalog and stores what it activates for the turn, so any
/// replica continues where another left off. Answers the projection's find_tools shape
/// plus the `turn_id` it activated for.
pub async fn find_tools(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    json: Result<Json<FindToolsBody>, JsonRejection>,
) -> ApiResult {
    let request = body(json)?;
    let turn = match request.turn_id.as_deref() {
        Some(raw_turn) => Some(raw_turn.parse::<TurnId>().map_err(|_| {
            ApiError::bad_request(format!(
                "turn_id: invalid turn id {raw_turn:?}: expected a UUID"
            ))
        })?),
        None => None,
    };
    let (chat, loaded) = loaded_chat(&state, &raw).await?;
    let stored = state
        .store
        .turn_activations(chat, turn)
        .await?
        .ok_or_else(|| match turn {
            Some(turn) => turn_not_found(chat, turn),
            None => ApiError::bad_request(format!(
                "turn_id: chat {chat} has no turn yet; start one with POST /api/chats/{chat}/turns"
            )),
        })?;
    let mut active: ActiveTools = stored.activated.into_iter().collect();
    let search = FindToolsRequest {
        queries: request.queries,
        names: request.names,
    };
    let found =
        ctxsync_chat_projection::find_tools(loaded.context.mcp().tools(), &search, &mut active)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
    if !found.activated.is_empty()
        && !state
            .store
            .activate_tools(chat, stored.turn_id, found.activated.clone())
            .await?
    {
        // The turn was deleted meanwhile as one of the chat's oldest.
        return Err(turn_not_found(chat, stored.turn_id));
    }
    let mut response = json!(found);
    response["turn_id"] = json!(stored.turn_id.to_string());
    Ok(Json(response).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RebindChat {
    agent_id: String,
}

/// Binds the chat to another agent (pinning that agent's current files and skills). The
/// chat's next default turn waits on that agent's current run as a first turn does: the
/// gate keys its wait by (chat, agent, run).
pub async fn rebind_chat(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    json: Result<Json<RebindChat>, JsonRejection>,
) -> ApiResult {
    let request = body(json)?;
    let chat: ChatId = parse_id(&raw, "chat")?;
    let agent: AgentId = request.agent_id.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "agent_id: invalid agent id {:?}: expected a UUID",
            request.agent_id
        ))
    })?;
    // Unknown chat or agent: the store's 404 names which.
    state.store.bind_chat(chat, Some(agent)).await?;
    let (chat, loaded) = loaded_chat(&state, &raw).await?;
    tracing::info!(%chat, %agent, "chat rebound");
    Ok(Json(chat_json(chat, &loaded)).into_response())
}

/// The panel alone: JSON by default, plain text or an HTML fragment by `Accept`.
pub async fn chat_panel(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    headers: HeaderMap,
) -> ApiResult {
    let (chat, loaded) = loaded_chat(&state, &raw).await?;
    let panel = panel_of(chat, &loaded);
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    Ok(if accept.contains("text/plain") {
        (
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            render_text(&panel),
        )
            .into_response()
    } else if accept.contains("text/html") {
        Html(render_fragment(&panel)).into_response()
    } else {
        Json(render_json(&panel)).into_response()
    })
}

pub async fn refresh_context(State(state): State<AppState>, Path(raw): Path<String>) -> ApiResult {
    let chat: ChatId = parse_id(&raw, "chat")?;
    state.store.refresh_chat(chat).await?;
    let (chat, loaded) = loaded_chat(&state, &raw).await?;
    Ok(Json(chat_json(chat, &loaded)).into_response())
}

/// Server-sent `panel` events: the current panel at once, then a new one whenever the
/// chat's view changes (a push through any replica reaches it via the store's
/// notifications, and a slow re-check covers a lost one). Unchanged panels are not
/// re-sent; while the banner names servers still connecting, their whole seconds move
/// on, so a re-check then re-sends the panel with the new waits.
pub async fn context_events(
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    let chat: ChatId = parse_id(&raw, "chat")?;
    let slot = state.event_streams.open(chat)?;
    let subscription = state.store.subscribe_chat(chat).await?;
    // Read after subscribing, so a change between the two is never missed.
    let (_, loaded) = loaded_chat(&state, &raw).await?;
    let first = panel_of(chat, &loaded);
    let every = state.event_recheck.max(super::bounds::MIN_EVENT_RECHECK);
    let mut recheck = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stopping = state.stopping.clone();
    let stream = futures::stream::unfold(
        (
            state,
            subscription,
            recheck,
            chat,
            Some(first),
            String::new(),
        ),
        |(state, mut subscription, mut recheck, chat, mut pending, mut last)| async move {
            loop {
                let panel = match pending.take() {
                    Some(panel) => panel,
                    None => {
                        // A notification, or the re-check in case one was lost: either
                        // way only a re-read, whose unchanged panel is not re-sent.
                        tokio::select! {
                            event = subscription.next() => {
                                event?;
                            }
                            _ = recheck.tick() => {}
                        }
                        match load_chat(&state.store, chat).await {
                            Ok(Some(loaded)) => panel_of(chat, &loaded),
                            Ok(None) => return None,
                            Err(e) => {
                                tracing::warn!(%chat, error = %e, "context event read failed; waiting for the next change");
                                continue;
                            }
                        }
                    }
                };
                let html = render_fragment(&panel);
                if html == last {
                    continue;
                }
                last.clone_from(&html);
                let data = json!({ "html": html, "panel": render_json(&panel) });
                let event = Event::default().event("panel").data(data.to_string());
                return Some((Ok(event), (state, subscription, recheck, chat, None, last)));
            }
        },
    );
    // The stream ends when the server stops (the client reconnects elsewhere); the slot
    // is freed when it ends or its client goes away.
    let stream = stream
        .take_until(async move {
            let _ = stopping.wait_for(|stop| *stop).await;
        })
        .map(move |event| {
            let _ = &slot;
            event
        });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// A one-time link to the chat's page, bound to that chat (the response carries the token,
/// so it is never cached: see `page::security_headers`).
pub async fn page_link(State(state): State<AppState>, Path(raw): Path<String>) -> ApiResult {
    let chat: ChatId = parse_id(&raw, "chat")?;
    if state.store.get_chat(chat).await?.is_none() {
        return Err(ApiError::not_found(format!("chat {chat} not found")));
    }
    let url = super::page_path(chat, &state.auth.mint_link_token(chat).await?);
    Ok(Json(json!({ "url": url })).into_response())
}
