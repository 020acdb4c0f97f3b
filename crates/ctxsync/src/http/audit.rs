//! `GET /api/audit` (issue 50): the audit log, one for every kind — tool calls' ends and
//! sign-ins' steps — newest first, a page at a time, for the API token alone (a page
//! session is no credential here).
//!
//! Owns: the `kind` parameter and each kind's entry as answered (its types are `api`'s);
//! the filters, the page size and the cursor are parsed as `GET /api/tool-calls` parses
//! them, and a tool call's entry is that route's, with `kind`, `at` and `via`. Must never: answer a call's
//! arguments or result, or a sign-in's token, code, state or verifier (the log keeps none
//! of them).

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use ctxsync_persistence::{AuditEntry, AuditLogQuery, SignInAuditRecord, SignInAuditStatus};

use crate::http::api::{
    AuditEntryPage, AuditEntryVia, AuditLogEntry, AuditParams, ErrorBody, SignInLogEntry,
    SignInLogStatus, ToolCallAuditParams, ToolCallLogEntry,
};
use crate::http::tool_call::audit as tool_call_audit;
use crate::http::{ApiError, AppState};

/// A page of the audit log: every kind (tool calls' ends, sign-ins' steps), newest first.
#[utoipa::path(get, path = "/api/audit", tag = "audit",
    params(AuditParams),
    responses(
        (status = 200, description = "A page of entries, newest first; `next_cursor` continues it", body = AuditEntryPage),
        (status = 400, description = "A query value is not valid (the message names the parameter; for `kind`, the kinds there are)", body = ErrorBody),
        (status = 401, description = "No API token (a page session is no credential here)", body = ErrorBody),
    ))]
pub(crate) async fn list_entries(
    State(state): State<AppState>,
    query: Result<Query<AuditParams>, QueryRejection>,
) -> Result<Json<AuditEntryPage>, ApiError> {
    let Query(params) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let query = parse(params)?;
    let page = state.store.list_audit_log(&query).await?;
    Ok(Json(AuditEntryPage {
        entries: page.entries.iter().map(entry).collect(),
        next_cursor: page.next_cursor.map(|c| c.to_string()),
    }))
}

fn parse(params: AuditParams) -> Result<AuditLogQuery, ApiError> {
    use ctxsync_persistence::AuditKind as Kind;
    let AuditParams {
        kind,
        agent,
        chat,
        since,
        limit,
        cursor,
    } = params;
    let kind = kind
        .map(|raw| {
            Kind::parse(&raw).ok_or_else(|| {
                let kinds: Vec<&str> = Kind::ALL.iter().map(|k| k.as_str()).collect();
                ApiError::bad_request(format!(
                    "kind: {raw:?} is not a kind of entry; the kinds are {}",
                    kinds.join(", ")
                ))
            })
        })
        .transpose()?;
    let filter = tool_call_audit::parse(ToolCallAuditParams {
        agent,
        chat,
        since,
        limit,
        cursor,
    })?;
    Ok(AuditLogQuery { kind, filter })
}

fn entry(entry: &AuditEntry) -> AuditLogEntry {
    match entry {
        AuditEntry::ToolCall(row) => AuditLogEntry::ToolCall(ToolCallLogEntry {
            at: row.ended_at.to_rfc3339(),
            via: AuditEntryVia::ApiToken,
            call: tool_call_audit::entry(row),
        }),
        AuditEntry::SignIn(row) => AuditLogEntry::SignIn(sign_in_entry(row)),
    }
}

fn sign_in_entry(row: &SignInAuditRecord) -> SignInLogEntry {
    use ctxsync_persistence::AuditVia as Via;
    let (via, chat) = match row.via {
        Via::ApiToken => (AuditEntryVia::ApiToken, None),
        Via::Page(chat) => (AuditEntryVia::Page, Some(chat.to_string())),
        Via::Agent => (AuditEntryVia::Agent, None),
    };
    SignInLogEntry {
        at: row.at.to_rfc3339(),
        agent_id: row.agent_id.to_string(),
        chat_id: chat,
        via,
        server: row.server.clone(),
        status: match row.status {
            SignInAuditStatus::Started => SignInLogStatus::Started,
            SignInAuditStatus::Completed => SignInLogStatus::Completed,
            SignInAuditStatus::Failed => SignInLogStatus::Failed,
            SignInAuditStatus::Forgotten => SignInLogStatus::Forgotten,
        },
        sign_in_id: row.sign_in_id.map(|id| id.to_string()),
        issuer: row.issuer.clone(),
        reason: row.reason.clone(),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    fn params(pairs: &[(&str, &str)]) -> AuditParams {
        let get = |key: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| (*v).to_owned())
        };
        AuditParams {
            kind: get("kind"),
            agent: get("agent"),
            chat: get("chat"),
            since: get("since"),
            limit: get("limit"),
            cursor: get("cursor"),
        }
    }

    #[test]
    fn an_unknown_kind_is_a_400_naming_the_kinds() {
        for bad in ["", "tool_calls", "SIGN_IN", "audit"] {
            let error = parse(params(&[("kind", bad)])).unwrap_err();
            assert_eq!(error.status(), StatusCode::BAD_REQUEST);
            assert!(error.message().starts_with("kind:"), "{}", error.message());
            assert!(
                error
                    .message()
                    .ends_with("the kinds are tool_call, sign_in"),
                "{}",
                error.message()
            );
        }
    }

    #[test]
    fn the_other_parameters_are_parsed_as_the_tool_call_log_parses_them() {
        for (key, value) in [("agent", "x"), ("since", "yesterday"), ("limit", "0")] {
            let error = parse(params(&[("kind", "sign_in"), (key, value)])).unwrap_err();
            assert!(
                error.message().starts_with(&format!("{key}:")),
                "{}",
                error.message()
            );
        }
        let query = parse(params(&[("kind", "sign_in"), ("limit", "7")])).unwrap();
        assert_eq!(query.kind, Some(ctxsync_persistence::AuditKind::SignIn));
        assert_eq!(query.filter.limit, Some(7));
        assert_eq!(parse(params(&[])).unwrap(), AuditLogQuery::default());
    }

    #[test]
    fn a_sign_in_entry_says_who_asked_and_omits_what_does_not_apply() {
        let chat = ctxsync_persistence::ChatId::new_random();
        let row = SignInAuditRecord {
            id: ctxsync_persistence::AuditEntryId::new_random(),
            at: chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
            agent_id: ctxsync_persistence::AgentId::new_random(),
            via: ctxsync_persistence::AuditVia::Page(chat),
            server: "docs".into(),
            status: SignInAuditStatus::Forgotten,
            sign_in_id: None,
            issuer: None,
            reason: None,
        };
        let json = serde_json::to_value(entry(&AuditEntry::SignIn(row.clone()))).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "kind": "sign_in",
                "at": "2027-01-15T08:00:00+00:00",
                "agent_id": row.agent_id.to_string(),
                "chat_id": chat.to_string(),
                "via": "page",
                "server": "docs",
                "status": "forgotten",
            })
        );
    }
}
