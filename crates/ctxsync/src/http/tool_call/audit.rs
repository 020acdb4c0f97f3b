//! `GET /api/tool-calls` (issue 37): the tool-call audit log, newest first, a page at a
//! time, for the API token alone (a page session is no credential here).
//!
//! Owns: the query's parsing (each bad value a 400 naming its parameter) and a call's
//! entry as answered, both also `GET /api/audit`'s (`http::audit`). Must never: answer a
//! call's arguments or result (the store keeps neither in the log).

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use ctxsync_persistence::{
    AuditCursor, AuditQuery, AuditRecord, DEFAULT_AUDIT_PAGE, MAX_AUDIT_PAGE,
};

use crate::http::api::{ErrorBody, ToolCallAuditEntry, ToolCallAuditPage, ToolCallAuditParams};
use crate::http::{ApiError, AppState};

/// A page of the tool-call audit log: one row per call end, newest first.
#[utoipa::path(get, path = "/api/tool-calls", tag = "tool calls",
    params(ToolCallAuditParams),
    responses(
        (status = 200, description = "A page of call ends, newest first; `next_cursor` continues it", body = ToolCallAuditPage),
        (status = 400, description = "A query value is not valid (the message names the parameter)", body = ErrorBody),
    ))]
pub(crate) async fn list_calls(
    State(state): State<AppState>,
    query: Result<Query<ToolCallAuditParams>, QueryRejection>,
) -> Result<Json<ToolCallAuditPage>, ApiError> {
    let Query(params) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let query = parse(params)?;
    let page = state.store.list_tool_call_audit(&query).await?;
    Ok(Json(ToolCallAuditPage {
        calls: page.rows.iter().map(entry).collect(),
        next_cursor: page.next_cursor.map(|c| c.to_string()),
    }))
}

/// The query's filters, page size and cursor; a bad value is a 400 naming its parameter.
pub(crate) fn parse(params: ToolCallAuditParams) -> Result<AuditQuery, ApiError> {
    fn uuid<T: std::str::FromStr>(name: &str, raw: Option<String>) -> Result<Option<T>, ApiError> {
        raw.map(|raw| {
            raw.parse()
                .map_err(|_| ApiError::bad_request(format!("{name}: {raw:?} is not a UUID")))
        })
        .transpose()
    }
    let since = params
        .since
        .map(|raw| {
            chrono::DateTime::parse_from_rfc3339(&raw)
                .map(|t| t.to_utc())
                .map_err(|e| {
                    ApiError::bad_request(format!("since: {raw:?} is not an RFC 3339 time: {e}"))
                })
        })
        .transpose()?;
    let limit = params
        .limit
        .map(|raw| {
            raw.parse::<u32>()
                .ok()
                .filter(|n| (1..=MAX_AUDIT_PAGE).contains(n))
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "limit: {raw:?} is not a whole number from 1 to {MAX_AUDIT_PAGE} \
                         (default {DEFAULT_AUDIT_PAGE})"
                    ))
                })
        })
        .transpose()?;
    let cursor = params
        .cursor
        .map(|raw| raw.parse::<AuditCursor>())
        .transpose()
        .map_err(|_| ApiError::bad_request("cursor: not a `next_cursor` this server answered"))?;
    Ok(AuditQuery {
        agent: uuid("agent", params.agent)?,
        chat: uuid("chat", params.chat)?,
        since,
        limit,
        cursor,
    })
}

/// A call's end as the API answers it.
pub(crate) fn entry(row: &AuditRecord) -> ToolCallAuditEntry {
    ToolCallAuditEntry {
        tool_call_id: row.tool_call_id.to_string(),
        agent_id: row.agent_id.map(|id| id.to_string()),
        chat_id: row.chat_id.to_string(),
        turn_id: row.turn_id.to_string(),
        call_id: row.call_id.clone(),
        name: row.name.clone(),
        server: row.server.clone(),
        tool: row.tool.clone(),
        status: row.status,
        reason: row.reason,
        error_code: row.error_code,
        duration_ms: row.duration_ms,
        arguments_digest: row.arguments_digest.clone(),
        arguments_size: row.arguments_size,
        result_size: row.result_size,
        truncated: row.truncated,
        ended_at: row.ended_at.to_rfc3339(),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    fn params(pairs: &[(&str, &str)]) -> ToolCallAuditParams {
        let get = |key: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| (*v).to_owned())
        };
        ToolCallAuditParams {
            agent: get("agent"),
            chat: get("chat"),
            since: get("since"),
            limit: get("limit"),
            cursor: get("cursor"),
        }
    }

    #[test]
    fn each_bad_value_is_a_400_naming_its_parameter() {
        for (key, value) in [
            ("agent", "x"),
            ("chat", "00000000-0000"),
            ("since", "yesterday"),
            ("since", "2026-01-01"),
            ("limit", "0"),
            ("limit", "501"),
            ("limit", "-1"),
            ("limit", "ten"),
            ("cursor", "nope"),
        ] {
            let error = parse(params(&[(key, value)])).unwrap_err();
            assert_eq!(error.status(), StatusCode::BAD_REQUEST);
            assert!(
                error.message().starts_with(&format!("{key}:")),
                "{key}={value}: {}",
                error.message()
            );
        }
    }

    #[test]
    fn good_values_become_the_query() {
        let agent = "6f1c1a52-6a43-4c39-9b59-0b8b1d0e0a01";
        let query = parse(params(&[
            ("agent", agent),
            ("since", "2026-12-06T10:00:00+02:00"),
            ("limit", "500"),
        ]))
        .unwrap();
        assert_eq!(query.agent.unwrap().to_string(), agent);
        assert_eq!(
            query.since.unwrap().to_rfc3339(),
            "2026-12-06T08:00:00+00:00"
        );
        assert_eq!(
            (query.limit, query.chat, query.cursor),
            (Some(500), None, None)
        );
        assert_eq!(parse(params(&[])).unwrap(), AuditQuery::default());
    }
}
