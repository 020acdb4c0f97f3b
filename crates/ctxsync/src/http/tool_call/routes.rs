//! The tool-call routes (issue 36): `POST`, `GET` and `DELETE`
//! `/api/chats/{id}/turns/{turn}/tool-calls[/{call_id}]`. Validates the request and
//! starts the call through the hub ([`ctxsync_agent_api::CallHub::start`]: admitted
//! against the turn's recorded origin, sent to its agent, waited for, bounded), and
//! answers ctxsync's own find_tools itself.
//!
//! Owns: the request's bounds and the call's JSON. Must never: log or answer a call's
//! arguments, decide what a call resolves to (the store does), or run a call twice (a
//! repeated `call_id` is the store's `Existing`, only waited for).

use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use ctxsync_agent_api::CallStart;
use ctxsync_mcp_model::{CallEnd, CallStatus, model_text};
use ctxsync_persistence::{
    ChatId, FIND_TOOLS_NAME, MAX_CALLS_PER_TURN, NewToolCall, StoreError, ToolCallRecord, TurnId,
};
use ctxsync_protocol::Problem;
use ctxsync_protocol::tool_call::{CallArguments, MAX_CALL_ARGUMENTS_BYTES};
use serde_json::{Value, json};

use crate::http::api::{ErrorBody, ToolCallBody, ToolCallRequest, ToolCallWait};
use crate::http::handlers::{body, parse_id, search_and_activate};
use crate::http::{ApiError, AppState};
use crate::limits::MAX_TOOL_CALL_WAIT;

/// The call route's body limit: the largest arguments plus the envelope around them.
pub(crate) const MAX_CALL_BODY_BYTES: usize = MAX_CALL_ARGUMENTS_BYTES + 64 * 1024;
/// A call's deadline when the request names none.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a request waits for the call's end when it names no `wait_ms`.
pub(crate) const DEFAULT_WAIT: Duration = Duration::from_secs(30);
/// The most `model_text` carries (the agent's default result cap).
pub(crate) const MODEL_TEXT_MAX_BYTES: usize = 256 * 1024;
/// Longest `call_id`.
const MAX_CALL_ID_CHARS: usize = 128;

type ApiResult<T = Response> = Result<T, ApiError>;

/// The call's JSON as every route answers it.
fn call_body(call: &ToolCallRecord) -> ToolCallBody {
    ToolCallBody {
        call_id: call.call_id.clone(),
        turn_id: call.turn_id.to_string(),
        name: call.name.clone(),
        server: call.server.clone(),
        tool: call.tool.clone(),
        status: call.status,
        reason: call.reason,
        error: call.error.clone(),
        result: match call.status {
            CallStatus::Complete => call.result.clone(),
            _ => None,
        },
        truncated: call.truncated,
        progress: call.progress.clone(),
        model_text: model_text(
            call.status,
            call.reason,
            call.error.as_ref(),
            call.result.as_ref(),
            MODEL_TEXT_MAX_BYTES,
        ),
        agent_run_id: call.agent_run_id.as_ref().map(|r| r.as_str().to_owned()),
        duration_ms: call.duration_ms,
        started_at: call.started_at.to_rfc3339(),
        ended_at: call.ended_at.map(|t| t.to_rfc3339()),
    }
}

/// 200 for an ended call, 202 for a running one (the POST's answer).
fn answer(call: &ToolCallRecord) -> Response {
    let status = if call.status.is_end() {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    (status, Json(call_body(call))).into_response()
}

/// `[A-Za-z0-9_.:-]`, 1–128 characters.
fn check_call_id(call_id: &str) -> ApiResult<()> {
    let valid = !call_id.is_empty()
        && call_id.len() <= MAX_CALL_ID_CHARS
        && call_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "call_id: must be 1 to {MAX_CALL_ID_CHARS} characters of [A-Za-z0-9_.:-]"
        )))
    }
}

fn check_wait(wait_ms: Option<u64>, default: Duration) -> ApiResult<Duration> {
    let max = MAX_TOOL_CALL_WAIT.as_millis() as u64;
    match wait_ms {
        None => Ok(default),
        Some(ms) if ms <= max => Ok(Duration::from_millis(ms)),
        Some(ms) => Err(ApiError::bad_request(format!(
            "wait_ms: {ms} is above the most a request waits, {max}"
        ))),
    }
}

/// The arguments' canonical text; over the size bound is 413 as a body over the route's
/// limit is (the bound is the same), anything else 400 naming the field.
fn canonical(arguments: Option<Value>) -> ApiResult<String> {
    let arguments = arguments.unwrap_or_else(|| json!({}));
    let canonical = CallArguments::new(&arguments).map(CallArguments::into_string);
    canonical.map_err(|e| match e.problem {
        Problem::TooLong { .. } => ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, e.to_string()),
        _ => ApiError::bad_request(e.to_string()),
    })
}

fn ids(raw_chat: &str, raw_turn: &str) -> ApiResult<(ChatId, TurnId)> {
    Ok((parse_id(raw_chat, "chat")?, parse_id(raw_turn, "turn")?))
}

/// 404 naming what is missing: the chat, or its turn.
async fn not_found(state: &AppState, chat: ChatId, turn: TurnId) -> ApiError {
    match state.store.get_chat(chat).await {
        Ok(None) => ApiError::not_found(format!("chat {chat} not found")),
        Ok(Some(_)) => ApiError::not_found(format!("turn {turn} of chat {chat} not found")),
        Err(e) => e.into(),
    }
}

fn call_not_found(turn: TurnId, call_id: &str) -> ApiError {
    ApiError::not_found(format!("turn {turn} has no call {call_id:?}"))
}

/// Calls one of the turn's tools and waits (bounded) for its end.
#[utoipa::path(post, path = "/api/chats/{id}/turns/{turn}/tool-calls", tag = "tool calls",
    request_body = ToolCallRequest,
    params(
        ("id" = String, Path, format = Uuid, description = "The chat's id"),
        ("turn" = String, Path, format = Uuid, description = "The turn's id"),
    ),
    responses(
        (status = 200, description = "The call has ended (a name the turn does not carry is `refused` with `not_in_turn`); a repeated `call_id` with the same name and arguments answers the recorded call", body = ToolCallBody),
        (status = 202, description = "The call is still running after `wait_ms`: read it later with GET", body = ToolCallBody),
        (status = 400, description = "An id is not a UUID, the body is not a valid request (the message names the field), or the turn already holds 256 calls", body = ErrorBody),
        (status = 404, description = "No such chat, or no such turn of it", body = ErrorBody),
        (status = 409, description = "The turn already holds this `call_id` with another name or other arguments", body = ErrorBody),
        (status = 413, description = "The body is larger than the arguments' 1 MiB plus 64 KiB, or the arguments are over 1 MiB", body = ErrorBody),
    ))]
pub(crate) async fn start_call(
    State(state): State<AppState>,
    Path((raw_chat, raw_turn)): Path<(String, String)>,
    json: Result<Json<ToolCallRequest>, JsonRejection>,
) -> ApiResult {
    let (chat, turn) = ids(&raw_chat, &raw_turn)?;
    let request = body(json)?;
    check_call_id(&request.call_id)?;
    if request.name.is_empty() {
        return Err(ApiError::bad_request("name: must not be empty"));
    }
    let arguments = canonical(request.arguments)?;
    let max_ms = state.tool_call_max.as_millis() as u64;
    let timeout_ms = match request.timeout_ms {
        None => DEFAULT_TIMEOUT.as_millis() as u64,
        Some(ms) if (1..=max_ms).contains(&ms) => ms,
        Some(ms) => {
            return Err(ApiError::bad_request(format!(
                "timeout_ms: {ms} is outside 1..={max_ms} (the server's --tool-call-max-ms)"
            )));
        }
    };
    let wait = check_wait(request.wait_ms, DEFAULT_WAIT)?;
    let call = NewToolCall {
        chat,
        turn,
        call_id: request.call_id,
        name: request.name,
        arguments,
        timeout_ms,
    };
    let started = match state.calls.start(&call, wait).await {
        Ok(started) => started,
        Err(StoreError::LimitReached(_)) => {
            return Err(ApiError::bad_request(format!(
                "turn {turn} already holds {MAX_CALLS_PER_TURN} calls, the most a turn takes"
            )));
        }
        Err(e) => return Err(e.into()),
    };
    match started {
        CallStart::NoTurn => Err(not_found(&state, chat, turn).await),
        CallStart::Conflict(existing) => Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "call_id {:?} of turn {turn} was already called with another name or other arguments",
                existing.call_id
            ),
        )),
        CallStart::Own(call) => Ok(answer(&own_find_tools(&state, call).await?)),
        CallStart::Call(call) => Ok(answer(&call)),
        CallStart::Gone(call) => Err(call_not_found(call.turn_id, &call.call_id)),
    }
}

/// Runs ctxsync's own find_tools for the call's turn (as `POST …/find-tools` does) and
/// records its answer as the call's end: the matches as `structuredContent` with a text
/// summary. A search that is not valid is the tool's error (`isError: true`), as MCP
/// reports a tool's input errors, not a failed request.
async fn own_find_tools(state: &AppState, call: ToolCallRecord) -> ApiResult<ToolCallRecord> {
    debug_assert_eq!(call.name, FIND_TOOLS_NAME);
    let started = Instant::now();
    let arguments: Value = call
        .arguments
        .as_deref()
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_else(|| json!({}));
    let result = match serde_json::from_value(arguments) {
        Err(e) => tool_error(&format!("find_tools: {e}")),
        Ok(search) => {
            match search_and_activate(state, call.chat_id, Some(call.turn_id), search).await {
                Ok(found) => {
                    let summary = summary(&found);
                    json!({
                        "content": [{ "type": "text", "text": summary }],
                        "structuredContent": found,
                        "isError": false,
                    })
                }
                // A search find_tools refuses: the model reads why.
                Err(e) if e.status() == StatusCode::BAD_REQUEST => tool_error(e.message()),
                // The turn went away, or the store failed: the call ends (never left
                // running with nothing to end it) with the answer's words, which name no
                // internal cause.
                Err(e) => {
                    return end_own(state, &call, CallEnd::error(0, e.message()), started).await;
                }
            }
        }
    };
    end_own(state, &call, CallEnd::complete(result, false), started).await
}

/// Records the end of a call this replica answered itself.
async fn end_own(
    state: &AppState,
    call: &ToolCallRecord,
    end: CallEnd,
    started: Instant,
) -> ApiResult<ToolCallRecord> {
    let duration = started.elapsed().as_millis() as u64;
    state
        .calls
        .end(call.id, &end, Some(duration))
        .await?
        .ok_or_else(|| call_not_found(call.turn_id, &call.call_id))
}

fn tool_error(message: &str) -> Value {
    json!({
        "content": [{ "type": "text", "text": message }],
        "isError": true,
    })
}

/// One line per match, then what was activated and what did not resolve.
fn summary(found: &Value) -> String {
    let names = |key: &str| -> Vec<String> {
        found[key]
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .filter_map(|item| item.as_str().or_else(|| item["name"].as_str()))
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut lines = Vec::new();
    let matches = found["matches"].as_array().cloned().unwrap_or_default();
    if matches.is_empty() {
        lines.push("No tool matched.".to_owned());
    } else {
        lines.push(format!(
            "{} of {} matching tools:",
            matches.len(),
            found["total"].as_u64().unwrap_or(matches.len() as u64)
        ));
        for item in &matches {
            lines.push(format!(
                "- {}: {}",
                item["name"].as_str().unwrap_or(""),
                item["description"].as_str().unwrap_or("")
            ));
        }
    }
    let activated = names("activated");
    if !activated.is_empty() {
        lines.push(format!(
            "Activated for this turn: {}.",
            activated.join(", ")
        ));
    }
    let unresolved = names("unresolved");
    if !unresolved.is_empty() {
        lines.push(format!("Not resolved: {}.", unresolved.join(", ")));
    }
    lines.join("\n")
}

/// A call as stored; with `wait_ms`, waits (bounded) for a running call's end.
#[utoipa::path(get, path = "/api/chats/{id}/turns/{turn}/tool-calls/{call_id}", tag = "tool calls",
    params(
        ("id" = String, Path, format = Uuid, description = "The chat's id"),
        ("turn" = String, Path, format = Uuid, description = "The turn's id"),
        ("call_id" = String, Path, description = "The caller's id for the call"),
        ToolCallWait,
    ),
    responses(
        (status = 200, description = "The call, ended or still running", body = ToolCallBody),
        (status = 400, description = "An id is not valid, or `wait_ms` is above 55000", body = ErrorBody),
        (status = 404, description = "No such chat, turn of it, or call of the turn", body = ErrorBody),
    ))]
pub(crate) async fn get_call(
    State(state): State<AppState>,
    Path((raw_chat, raw_turn, call_id)): Path<(String, String, String)>,
    query: Result<Query<ToolCallWait>, QueryRejection>,
) -> ApiResult {
    let (chat, turn) = ids(&raw_chat, &raw_turn)?;
    check_call_id(&call_id)?;
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let wait = check_wait(query.wait_ms, Duration::ZERO)?;
    let call = state
        .store
        .get_tool_call(chat, turn, &call_id)
        .await?
        .ok_or_else(|| call_not_found(turn, &call_id))?;
    let call = if call.status.is_end() || wait.is_zero() {
        call
    } else {
        state
            .calls
            .wait(call.id, wait)
            .await?
            .ok_or_else(|| call_not_found(turn, &call_id))?
    };
    Ok(Json(call_body(&call)).into_response())
}

/// Cancels a running call (its MCP server is sent `notifications/cancelled`) and answers
/// it as it ended; an ended call is answered unchanged.
#[utoipa::path(delete, path = "/api/chats/{id}/turns/{turn}/tool-calls/{call_id}", tag = "tool calls",
    params(
        ("id" = String, Path, format = Uuid, description = "The chat's id"),
        ("turn" = String, Path, format = Uuid, description = "The turn's id"),
        ("call_id" = String, Path, description = "The caller's id for the call"),
    ),
    responses(
        (status = 200, description = "The call as it ended (or as it was, when it had ended already)", body = ToolCallBody),
        (status = 400, description = "An id is not valid", body = ErrorBody),
        (status = 404, description = "No such chat, turn of it, or call of the turn", body = ErrorBody),
    ))]
pub(crate) async fn cancel_call(
    State(state): State<AppState>,
    Path((raw_chat, raw_turn, call_id)): Path<(String, String, String)>,
) -> ApiResult {
    let (chat, turn) = ids(&raw_chat, &raw_turn)?;
    check_call_id(&call_id)?;
    let call = state
        .store
        .get_tool_call(chat, turn, &call_id)
        .await?
        .ok_or_else(|| call_not_found(turn, &call_id))?;
    let call = if call.status.is_end() {
        call
    } else {
        state
            .calls
            .cancel(call.id)
            .await?
            .ok_or_else(|| call_not_found(turn, &call_id))?
    };
    Ok(Json(call_body(&call)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_ids_are_checked() {
        for good in ["a", "toolu_01A.b:c-d", &"x".repeat(128)] {
            assert!(check_call_id(good).is_ok(), "{good}");
        }
        for bad in ["", "a b", "é", "a/b", &"x".repeat(129)] {
            let error = check_call_id(bad).unwrap_err();
            assert_eq!(error.status(), StatusCode::BAD_REQUEST);
            assert!(
                error.message().starts_with("call_id:"),
                "{}",
                error.message()
            );
        }
    }

    #[test]
    fn arguments_default_to_an_object_and_are_bounded() {
        assert_eq!(canonical(None).unwrap(), "{}");
        assert_eq!(
            canonical(Some(json!({"b": 1, "a": [1]}))).unwrap(),
            r#"{"a":[1],"b":1}"#
        );
        let not_object = canonical(Some(json!([1]))).unwrap_err();
        assert_eq!(not_object.status(), StatusCode::BAD_REQUEST);
        assert!(
            not_object.message().contains("arguments"),
            "{}",
            not_object.message()
        );
        let big =
            canonical(Some(json!({ "x": "y".repeat(MAX_CALL_ARGUMENTS_BYTES) }))).unwrap_err();
        assert_eq!(big.status(), StatusCode::PAYLOAD_TOO_LARGE);
    }

    #[test]
    fn waits_are_bounded() {
        assert_eq!(check_wait(None, DEFAULT_WAIT).unwrap(), DEFAULT_WAIT);
        assert_eq!(
            check_wait(Some(55_000), DEFAULT_WAIT).unwrap(),
            MAX_TOOL_CALL_WAIT
        );
        assert!(
            check_wait(Some(55_001), DEFAULT_WAIT)
                .unwrap_err()
                .message()
                .starts_with("wait_ms:")
        );
    }

    #[test]
    fn the_summary_names_matches_and_activations() {
        let found = json!({
            "matches": [{ "name": "docs_search", "description": "Search the docs" }],
            "activated": ["docs_search"],
            "total": 1,
            "unresolved": [{ "name": "nope", "candidates": [] }],
        });
        assert_eq!(
            summary(&found),
            "1 of 1 matching tools:\n- docs_search: Search the docs\n\
             Activated for this turn: docs_search.\nNot resolved: nope."
        );
    }
}
