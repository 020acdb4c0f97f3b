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
use ctxsync_chat_projection::{ActiveTools, FindToolsRequest, plan_turn_tools};
use ctxsync_context_ui::{
    DiscoveryWords, build_chat_panel, render_fragment, render_json, render_text,
};
use ctxsync_first_turn_gate::TurnMode;
use ctxsync_persistence::{
    AgentContext, AgentId, ChatId, ChatTurnMode, NewTurn, ToolOrigin, TurnId, TurnOrigin,
};
use futures::{Stream, StreamExt};
use serde_json::json;

use super::api::{
    AgentContextBody, AgentList, AgentServersBody, AgentSummary, AgentWithToken, ChatBody,
    CreateAgent, CreateChat, ErrorBody, FindToolsBody, FoundTools, Health, HealthStatus, PageLink,
    RebindChat, StoredOutcome, TurnBody, TurnModeName, TurnRequest,
};
use super::{ApiError, AppState};

type ApiResult<T = Response> = Result<T, ApiError>;

pub(super) fn parse_id<T: FromStr>(raw: &str, what: &str) -> ApiResult<T> {
    raw.parse()
        .map_err(|_| ApiError::bad_request(format!("invalid {what} id {raw:?}: expected a UUID")))
}

/// Unwraps a JSON body, turning serde's message (which names the field) into a 400; a
/// body over the size limit keeps axum's 413 (it was answered 400 before the security
/// scan test).
pub(super) fn body<T>(json: Result<Json<T>, JsonRejection>) -> ApiResult<T> {
    json.map(|Json(value)| value).map_err(|rejection| {
        let status = rejection.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(status, rejection.body_text())
        } else {
            // serde's message names the field first; axum's preamble only hides it.
            let text = rejection.body_text();
            let named = text
                .strip_prefix("Failed to deserialize the JSON body into the target type: ")
                .unwrap_or(&text);
            ApiError::bad_request(named)
        }
    })
}

async fn loaded_chat(state: &AppState, raw_id: &str) -> ApiResult<(ChatId, LoadedChat)> {
    let chat: ChatId = parse_id(raw_id, "chat")?;
    Ok((chat, load_chat_by_id(state, chat).await?))
}

/// The chat's projection; 404 for an unknown chat.
async fn load_chat_by_id(state: &AppState, chat: ChatId) -> ApiResult<LoadedChat> {
    load_chat(&state.store, chat)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("chat {chat} not found")))
}

fn panel_of(chat: ChatId, loaded: &LoadedChat) -> ctxsync_context_ui::Panel {
    build_chat_panel(&chat.to_string(), &loaded.context, &loaded.binding)
}

fn chat_json(chat: ChatId, loaded: &LoadedChat) -> ChatBody {
    ChatBody {
        id: chat.to_string(),
        agent_id: loaded.chat.agent_id.map(|a| a.to_string()),
        mcp_discovery: DiscoveryWords::of(loaded.context.mcp()),
        context: panel_of(chat, loaded),
    }
}

/// The document describing this API (no token: it holds no data).
#[utoipa::path(get, path = "/api/openapi.json", tag = "operations",
    responses((status = 200, description = "This OpenAPI 3.1 document", content_type = "application/json", body = Object)))]
pub(super) async fn openapi_json() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        super::api::openapi_document(),
    )
        .into_response()
}

#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses(
        (status = 200, description = "The database answers", body = Health),
        (status = 503, description = "The database is unavailable", body = ErrorBody),
    ))]
pub(super) async fn healthz(State(state): State<AppState>) -> Response {
    if state.health.database_ok(&state.store).await {
        Json(Health {
            status: HealthStatus::Ok,
        })
        .into_response()
    } else {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "database unavailable").into_response()
    }
}

#[utoipa::path(post, path = "/api/agents", tag = "agents", request_body = CreateAgent,
    responses(
        (status = 201, description = "The agent, with its token (shown only here)", body = AgentWithToken),
        (status = 400, description = "The body is not a valid request (the message names the field)", body = ErrorBody),
        (status = 413, description = "The body is larger than 64 KiB", body = ErrorBody),
    ))]
pub(super) async fn create_agent(
    State(state): State<AppState>,
    json: Result<Json<CreateAgent>, JsonRejection>,
) -> ApiResult {
    let request = body(json)?;
    let name = request.name.trim();
    if name.is_empty() {
        return Err(ApiError::bad_request("name: must not be empty"));
    }
    let agent = state.store.create_agent(name).await?;
    let response = AgentWithToken {
        id: agent.id.to_string(),
        token: agent.token.expose().to_owned(),
    };
    Ok((StatusCode::CREATED, Json(response)).into_response())
}

/// Every agent, oldest first; never a token or its digest.
#[utoipa::path(get, path = "/api/agents", tag = "agents",
    responses((status = 200, description = "Every agent, oldest first", body = AgentList)))]
pub(super) async fn list_agents(State(state): State<AppState>) -> ApiResult {
    let agents = state.store.list_agents_with_connection().await?;
    let agents = agents
        .iter()
        .map(|(agent, connection)| AgentSummary::of(agent, *connection))
        .collect();
    Ok(Json(AgentList { agents }).into_response())
}

/// A new token for the agent, shown in this response only; the old one is refused from
/// now on, on every replica (authentication reads the store on every call).
#[utoipa::path(post, path = "/api/agents/{id}/token", tag = "agents",
    params(("id" = String, Path, format = Uuid, description = "The agent's id")),
    responses(
        (status = 200, description = "The agent's new token (shown only here)", body = AgentWithToken),
        (status = 400, description = "The id is not a UUID", body = ErrorBody),
        (status = 404, description = "No such agent", body = ErrorBody),
    ))]
pub(super) async fn rotate_agent_token(
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> ApiResult {
    let agent: AgentId = parse_id(&raw, "agent")?;
    let rotated = state.store.rotate_agent_token(agent).await?;
    let response = AgentWithToken {
        id: rotated.id.to_string(),
        token: rotated.token.expose().to_owned(),
    };
    Ok(Json(response).into_response())
}

/// Deletes the agent with its snapshot and resources; its token is refused from now on.
#[utoipa::path(delete, path = "/api/agents/{id}", tag = "agents",
    params(("id" = String, Path, format = Uuid, description = "The agent's id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "The id is not a UUID", body = ErrorBody),
        (status = 404, description = "No such agent", body = ErrorBody),
    ))]
pub(super) async fn delete_agent(
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> ApiResult {
    let agent: AgentId = parse_id(&raw, "agent")?;
    state.store.delete_agent(agent).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The agent's stored rows beside the projection's view of them (one read): phase and
/// freshness are the view's, as on every other surface.
#[utoipa::path(get, path = "/api/agents/{id}/context", tag = "agents",
    params(("id" = String, Path, format = Uuid, description = "The agent's id")),
    responses(
        (status = 200, description = "The agent's stored snapshot and resources with the projection's view", body = AgentContextBody),
        (status = 400, description = "The id is not a UUID", body = ErrorBody),
        (status = 404, description = "No such agent", body = ErrorBody),
    ))]
pub(super) async fn agent_context(
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> ApiResult {
    let (_, context, view) = agent_and_view(&state, &raw).await?;
    Ok(Json(AgentContextBody::of(context, &view)).into_response())
}

/// The agent `raw` names, its stored rows and the projection's view of them (one read);
/// 400 for an id that is no UUID, 404 for an unknown agent.
pub(super) async fn agent_and_view(
    state: &AppState,
    raw: &str,
) -> Result<(AgentId, AgentContext, ctxsync_chat_projection::View), ApiError> {
    let agent: AgentId = parse_id(raw, "agent")?;
    let (context, view) = load_agent_context(&state.store, agent)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("agent {agent} not found")))?;
    Ok((agent, context, view))
}

/// Each MCP server of the agent's stored snapshot with its sign-in state, from the same
/// read and projection as every other surface. Never a token.
#[utoipa::path(get, path = "/api/agents/{id}/mcp-servers", tag = "agents",
    params(("id" = String, Path, format = Uuid, description = "The agent's id")),
    responses(
        (status = 200, description = "The agent's MCP servers, sorted by name, each with its sign-in state", body = AgentServersBody),
        (status = 400, description = "The id is not a UUID", body = ErrorBody),
        (status = 404, description = "No such agent", body = ErrorBody),
    ))]
pub(super) async fn agent_mcp_servers(
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> ApiResult {
    let (agent, _, view) = agent_and_view(&state, &raw).await?;
    let credentials = state.store.credential_summaries(agent).await?;
    let failures: Vec<(String, String)> = state
        .store
        .latest_sign_in_failures(agent)
        .await?
        .into_iter()
        .map(|(server, error, _)| (server, error))
        .collect();
    Ok(Json(AgentServersBody::of(agent, &view, &credentials, &failures)).into_response())
}

#[utoipa::path(post, path = "/api/chats", tag = "chats", request_body = CreateChat,
    responses(
        (status = 201, description = "The new chat, bound to the agent", body = ChatBody),
        (status = 400, description = "The body is not a valid request (the message names the field)", body = ErrorBody),
        (status = 404, description = "No such agent", body = ErrorBody),
        (status = 413, description = "The body is larger than 64 KiB", body = ErrorBody),
    ))]
pub(super) async fn create_chat(
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
    let loaded = load_chat_by_id(&state, chat.id).await?;
    Ok((StatusCode::CREATED, Json(chat_json(chat.id, &loaded))).into_response())
}

#[utoipa::path(get, path = "/api/chats/{id}", tag = "chats",
    params(("id" = String, Path, format = Uuid, description = "The chat's id")),
    responses(
        (status = 200, description = "The chat", body = ChatBody),
        (status = 400, description = "The id is not a UUID", body = ErrorBody),
        (status = 404, description = "No such chat", body = ErrorBody),
    ))]
pub(super) async fn get_chat(State(state): State<AppState>, Path(raw): Path<String>) -> ApiResult {
    let (chat, loaded) = loaded_chat(&state, &raw).await?;
    Ok(Json(chat_json(chat, &loaded)).into_response())
}

/// Prepares a turn through the gate (a default turn waits for the bound agent's current
/// run), stores it with what this answer says, and answers it with its `turn_id`. A new
/// turn has nothing activated. When the turn cannot be stored the turn still proceeds
/// (as the gate never fails one): `turn_id` is null and `turn_error` says why.
#[utoipa::path(post, path = "/api/chats/{id}/turns", tag = "chats", request_body = TurnRequest,
    params(("id" = String, Path, format = Uuid, description = "The chat's id")),
    responses(
        (status = 200, description = "What the turn runs with", body = TurnBody),
        (status = 400, description = "The id is not a UUID or the body is not a valid request", body = ErrorBody),
        (status = 404, description = "No such chat", body = ErrorBody),
        (status = 413, description = "The body is larger than 64 KiB", body = ErrorBody),
    ))]
pub(super) async fn turn(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    json: Result<Json<TurnRequest>, JsonRejection>,
) -> ApiResult {
    let request = body(json)?;
    let (mode, stored_mode) = match request.mode.unwrap_or(TurnModeName::Default) {
        TurnModeName::Default => (TurnMode::Default, ChatTurnMode::Default),
        TurnModeName::Plan => (TurnMode::Plan, ChatTurnMode::Plan),
    };
    let chat: ChatId = parse_id(&raw, "chat")?;
    // The turn's one read of its chat: the gate waits for, and the inventory reads, the
    // agent bound now.
    let Some(record) = state.store.get_chat(chat).await? else {
        return Err(ApiError::not_found(format!("chat {chat} not found")));
    };
    let started = std::time::Instant::now();
    let context = state
        .gate
        .prepare_bound_turn(chat, record.agent_id, mode)
        .await;
    // The projection's model-facing shape: name, description and input schema, plus the
    // title, output schema and `annotations_untrusted` when the server gave them; over
    // the budget, the tools that stay loaded and find_tools (a new turn activated none).
    let planned = plan_turn_tools(&context.tools, &state.tool_budget, &ActiveTools::new());
    let tools = planned.definitions();
    let tool_count = tools.len();
    let outcome = serde_json::to_value(StoredOutcome {
        note: &context.note,
        mcp_discovery: &context.outcome,
        inventory_error: &context.inventory_error,
        tool_deferral: &planned.deferral,
    })
    .expect("an outcome serializes");
    let new_turn = NewTurn {
        mode: stored_mode,
        outcome,
        tools: serde_json::to_value(&tools).expect("tools serialize"),
        origin: turn_origin(&state, record.agent_id, &planned.tools).await,
    };
    let response = match state.store.record_turn(chat, &new_turn).await {
        Ok(recorded) => {
            // Calls of turns this one pruned were cancelled in the store; their agents
            // still run them until told.
            state.calls.canceled_by_store(&recorded.canceled_calls);
            TurnBody::of(&recorded)
        }
        Err(error) => {
            // The cause goes to the log (by ApiError); the answer names the problem only.
            let refusal = ApiError::from(error);
            TurnBody {
                turn_id: None,
                mode: stored_mode.into(),
                note: context.note,
                mcp_discovery: serde_json::to_value(&context.outcome)
                    .expect("an outcome serializes"),
                inventory_error: context.inventory_error,
                tools: new_turn.tools,
                active_tools: Vec::new(),
                tool_deferral: serde_json::to_value(&planned.deferral)
                    .expect("a deferral serializes"),
                turn_error: Some(format!(
                    "the turn was not stored ({}): find-tools cannot name it",
                    refusal.message
                )),
            }
        }
    };
    tracing::info!(%chat, ?mode, tools = tool_count, waited_ms = started.elapsed().as_millis() as u64, turn = ?response.turn_id, "turn prepared");
    Ok(Json(response).into_response())
}

/// Where a turn's listed tools came from: the agent, the run and each tool's server and
/// own name. The gate's context does not carry its view's run, so the agent's view is read
/// again here; it must still list every tool the same way (else the run changed between
/// the reads and the turn's run is unknown: no origin, its calls are refused). `None`
/// for an unbound chat, an agent without a run, or a failed read.
async fn turn_origin(
    state: &AppState,
    agent: Option<AgentId>,
    listed: &[ctxsync_chat_projection::EligibleTool],
) -> Option<TurnOrigin> {
    let agent = agent?;
    let view = match ctxsync_chat_projection::store::load_agent_view(&state.store, agent).await {
        Ok(view) => view,
        Err(e) => {
            tracing::warn!(%agent, error = %e, "reading the turn's run failed; its calls will be refused");
            return None;
        }
    };
    let run = view.current_run()?.clone();
    let mut tools = std::collections::BTreeMap::new();
    // find_tools (no server) is ctxsync's own: the store resolves it by name.
    for tool in listed.iter().filter(|t| !t.server.is_empty()) {
        let same = view
            .tools()
            .get(&tool.name)
            .is_some_and(|now| now.server == tool.server && now.tool == tool.tool);
        if !same {
            return None;
        }
        tools.insert(tool.name.clone(), origin_of(tool));
    }
    Some(TurnOrigin {
        agent_id: agent,
        agent_run_id: run,
        tools,
    })
}

/// What a call of `tool` reaches: its server and its own name there.
fn origin_of(tool: &ctxsync_chat_projection::EligibleTool) -> ToolOrigin {
    ToolOrigin {
        server: tool.server.clone(),
        tool: tool.tool.clone(),
    }
}

/// A turn of this chat as stored, from any replica: 404 for an unknown turn, one of
/// another chat, or one past the last 32 a chat keeps (`MAX_TURNS_PER_CHAT`).
#[utoipa::path(get, path = "/api/chats/{id}/turns/{turn}", tag = "chats",
    params(
        ("id" = String, Path, format = Uuid, description = "The chat's id"),
        ("turn" = String, Path, format = Uuid, description = "The turn's id"),
    ),
    responses(
        (status = 200, description = "The turn as stored", body = TurnBody),
        (status = 400, description = "An id is not a UUID", body = ErrorBody),
        (status = 404, description = "No such chat, or no such turn of it", body = ErrorBody),
    ))]
pub(super) async fn get_turn(
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
    let mut body = TurnBody::of(&recorded);
    if !recorded.activated.is_empty() {
        // Activated tools join the turn, defined from the live catalog: a tool that is no
        // longer eligible (the view turned stale, the server went away) is not offered.
        let (_, loaded) = loaded_chat(&state, &raw_chat).await?;
        let active: ActiveTools = recorded.activated.iter().cloned().collect();
        append_definitions(&mut body.tools, &active.tools(loaded.context.mcp().tools()));
    }
    Ok(Json(body).into_response())
}

/// Appends the definitions of `tools` that `listed` (a turn's stored tool list) lacks.
fn append_definitions(
    listed: &mut serde_json::Value,
    tools: &[&ctxsync_chat_projection::EligibleTool],
) {
    let Some(list) = listed.as_array_mut() else {
        return;
    };
    let present: std::collections::HashSet<String> = list
        .iter()
        .filter_map(|t| t.get("name").and_then(serde_json::Value::as_str))
        .map(str::to_owned)
        .collect();
    for tool in tools {
        if !present.contains(&tool.name) {
            list.push(serde_json::to_value(tool.model_definition()).expect("a tool serializes"));
        }
    }
}

fn turn_not_found(chat: ChatId, turn: TurnId) -> ApiError {
    ApiError::not_found(format!("turn {turn} of chat {chat} not found"))
}

/// Searches the chat's live catalog and stores what it activates for the turn, so any
/// replica continues where another left off. Answers the projection's find_tools shape
/// plus the `turn_id` it activated for.
#[utoipa::path(post, path = "/api/chats/{id}/find-tools", tag = "chats", request_body = FindToolsBody,
    params(("id" = String, Path, format = Uuid, description = "The chat's id")),
    responses(
        (status = 200, description = "The matches, and what this call activated", body = FoundTools<'static>),
        (status = 400, description = "An id is not a UUID, the chat has no turn yet, or the search is not valid", body = ErrorBody),
        (status = 404, description = "No such chat, or no such turn of it", body = ErrorBody),
        (status = 413, description = "The body is larger than 64 KiB", body = ErrorBody),
    ))]
pub(super) async fn find_tools(
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
    let chat: ChatId = parse_id(&raw, "chat")?;
    let search = FindToolsRequest {
        queries: request.queries,
        names: request.names,
    };
    Ok(Json(search_and_activate(&state, chat, turn, search).await?).into_response())
}

/// find_tools for `turn` of `chat` (its latest when `None`), as `POST …/find-tools` and a
/// `find_tools` call run it: searches the chat's live catalog and stores what it
/// activates, each with its origin in the turn's run while that run is the catalog's
/// (else none, and a call of it is refused). Answers [`FoundTools`] as JSON.
pub(super) async fn search_and_activate(
    state: &AppState,
    chat: ChatId,
    turn: Option<TurnId>,
    search: FindToolsRequest,
) -> ApiResult<serde_json::Value> {
    let loaded = load_chat_by_id(state, chat).await?;
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
    let view = loaded.context.mcp();
    let catalog = view.tools();
    let index = state.find_indexes.index(catalog);
    let found = ctxsync_chat_projection::find_tools_in(&index, catalog, &search, &mut active)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let definitions = found
        .activated
        .iter()
        .filter_map(|name| catalog.get(name))
        .map(|t| t.model_definition())
        .collect();
    if !found.activated.is_empty() {
        // Origins only from the run the turn was built from: a turn whose run is no
        // longer current activates names its calls cannot reach.
        let origin = state
            .store
            .get_turn(chat, stored.turn_id)
            .await?
            .and_then(|t| t.origin);
        let same_run = origin.is_some_and(|o| {
            Some(o.agent_id) == loaded.chat.agent_id && Some(&o.agent_run_id) == view.current_run()
        });
        let activations = found
            .activated
            .iter()
            .map(|name| {
                let origin = catalog.get(name).filter(|_| same_run).map(origin_of);
                (name.clone(), origin)
            })
            .collect();
        if !state
            .store
            .activate_tools(chat, stored.turn_id, activations)
            .await?
        {
            // The turn was deleted meanwhile as one of the chat's oldest.
            return Err(turn_not_found(chat, stored.turn_id));
        }
    }
    Ok(serde_json::to_value(FoundTools {
        found,
        turn_id: stored.turn_id.to_string(),
        definitions,
    })
    .expect("find_tools' answer serializes"))
}

/// Binds the chat to another agent (pinning that agent's current files and skills). The
/// chat's next default turn waits on that agent's current run as a first turn does: the
/// gate keys its wait by (chat, agent, run).
#[utoipa::path(put, path = "/api/chats/{id}/agent", tag = "chats", request_body = RebindChat,
    params(("id" = String, Path, format = Uuid, description = "The chat's id")),
    responses(
        (status = 200, description = "The chat, bound to the agent", body = ChatBody),
        (status = 400, description = "An id is not a UUID or the body is not a valid request", body = ErrorBody),
        (status = 404, description = "No such chat or agent", body = ErrorBody),
        (status = 413, description = "The body is larger than 64 KiB", body = ErrorBody),
    ))]
pub(super) async fn rebind_chat(
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
#[utoipa::path(get, path = "/api/chats/{id}/context", tag = "chats",
    params(("id" = String, Path, format = Uuid, description = "The chat's id")),
    responses(
        (status = 200, description = "The chat's context panel: JSON by default, plain text or an HTML fragment when `Accept` asks", content(
            (ctxsync_context_ui::Panel = "application/json"),
            (String = "text/plain"),
            (String = "text/html"),
        )),
        (status = 400, description = "The id is not a UUID", body = ErrorBody),
        (status = 404, description = "No such chat", body = ErrorBody),
    ))]
pub(super) async fn chat_panel(
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

/// Re-pins the chat to its agent's current files and skills.
#[utoipa::path(put, path = "/api/chats/{id}/context", tag = "chats",
    params(("id" = String, Path, format = Uuid, description = "The chat's id")),
    responses(
        (status = 200, description = "The chat, re-pinned", body = ChatBody),
        (status = 400, description = "The id is not a UUID", body = ErrorBody),
        (status = 404, description = "No such chat", body = ErrorBody),
    ))]
pub(super) async fn refresh_context(
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> ApiResult {
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
///
/// Beside them, `tool_call` events: the chat's recent calls at once, then each call as it
/// starts, progresses (a few times a second at most) and ends. A page session reads this
/// stream, so these carry only what a person may see of a call, never what it was given
/// or answered; the call routes themselves stay the API token's.
#[utoipa::path(get, path = "/api/chats/{id}/context/events", tag = "chats",
    params(("id" = String, Path, format = Uuid, description = "The chat's id")),
    responses(
        (status = 200, description = "Server-sent events. `panel`: `{\"html\": fragment, \"panel\": panel JSON}`, the current panel first, then each change. `tool_call`: `{\"id\", \"turn\", \"name\", \"status\", \"progress\": {\"progress\", \"total\"} or null, \"duration_ms\", \"truncated\", \"phase\": \"started\" | \"progress\" | \"ended\"}`, the chat's recent calls first (oldest first), then each call as it starts, progresses (a few times a second at most) and ends; never a call's arguments, result, error or model text", content_type = "text/event-stream", body = String),
        (status = 400, description = "The id is not a UUID", body = ErrorBody),
        (status = 403, description = "A page session for another chat", body = ErrorBody),
        (status = 404, description = "No such chat", body = ErrorBody),
    ))]
pub(super) async fn context_events(
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    let chat: ChatId = parse_id(&raw, "chat")?;
    let slot = state.event_streams.open(chat)?;
    let subscription = state.store.subscribe_chat(chat).await?;
    let calls = state.store.subscribe_chat_calls(chat);
    // Read after subscribing, so a change between the two is never missed.
    let (_, loaded) = loaded_chat(&state, &raw).await?;
    let first = panel_of(chat, &loaded);
    let every = state.event_recheck.max(super::bounds::MIN_EVENT_RECHECK);
    let calls =
        super::tool_call::events::call_events(state.store.clone(), chat, calls, every).map(Ok);
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
    let stream = futures::stream::select(stream, calls)
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
#[utoipa::path(post, path = "/api/chats/{id}/link", tag = "chats",
    params(("id" = String, Path, format = Uuid, description = "The chat's id")),
    responses(
        (status = 200, description = "A one-time link to the chat's page", body = PageLink),
        (status = 400, description = "The id is not a UUID", body = ErrorBody),
        (status = 404, description = "No such chat", body = ErrorBody),
    ))]
pub(super) async fn page_link(State(state): State<AppState>, Path(raw): Path<String>) -> ApiResult {
    let chat: ChatId = parse_id(&raw, "chat")?;
    if state.store.get_chat(chat).await?.is_none() {
        return Err(ApiError::not_found(format!("chat {chat} not found")));
    }
    let url = super::page_path(chat, &state.auth.mint_link_token(chat).await?);
    let link = state.public_url.as_ref().map(|public| public.join(&url));
    Ok(Json(PageLink { url, link }).into_response())
}
