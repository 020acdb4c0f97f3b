//! One listing of the audit log's entries of every kind, newest first, a page at a time:
//! each kind's table is read for its newest entries past the cursor, in one snapshot, and
//! the lists are merged by the order they share (time, then id).

use super::sign_in::{self, SignInAuditRecord};
use super::{AuditCursor, AuditQuery, AuditRecord, fetch, page_limit, paged, tool_call_rows};
use crate::error::StoreError;
use crate::store::Store;

/// A kind of entry the audit log holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AuditKind {
    /// A tool call's end.
    ToolCall,
    /// A step of a sign-in to an agent's MCP server, or its credentials forgotten.
    SignIn,
}

impl AuditKind {
    /// Every kind, in the order messages name them.
    pub const ALL: [Self; 2] = [Self::ToolCall, Self::SignIn];

    /// The kind's name, as the audit route answers and takes it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::ToolCall => "tool_call",
            Self::SignIn => "sign_in",
        }
    }

    /// The kind named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == name)
    }
}

/// Which entries to list: every filter given must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditLogQuery {
    /// Only entries of this kind; `None`: every kind.
    pub kind: Option<AuditKind>,
    /// The filters every kind shares, the page size and the cursor.
    pub filter: AuditQuery,
}

impl AuditLogQuery {
    fn includes(&self, kind: AuditKind) -> bool {
        self.kind.is_none_or(|only| only == kind)
    }
}

/// An entry of the audit log.
#[derive(Clone, Debug, PartialEq)]
pub enum AuditEntry {
    /// A tool call's end.
    ToolCall(AuditRecord),
    /// A sign-in's step, or credentials forgotten.
    SignIn(SignInAuditRecord),
}

impl AuditEntry {
    /// The entry's kind.
    pub fn kind(&self) -> AuditKind {
        match self {
            Self::ToolCall(_) => AuditKind::ToolCall,
            Self::SignIn(_) => AuditKind::SignIn,
        }
    }

    /// The entry's place in the log's order.
    fn position(&self) -> AuditCursor {
        match self {
            Self::ToolCall(record) => record.position(),
            Self::SignIn(record) => AuditCursor {
                at: record.at,
                id: record.id.as_uuid(),
            },
        }
    }
}

/// One page of the audit log, every kind together.
#[derive(Clone, Debug, PartialEq)]
pub struct AuditLogPage {
    /// Newest first: by time (a call's end), then by id.
    pub entries: Vec<AuditEntry>,
    /// Where the next page starts; `None` when this page is the last.
    pub next_cursor: Option<AuditCursor>,
}

impl Store {
    /// A page of the audit log's entries of every kind (or `query.kind`'s), newest first.
    /// [`StoreError::InvalidInput`] naming `limit` for a limit outside
    /// 1..=[`super::MAX_AUDIT_PAGE`].
    pub async fn list_audit_log(&self, query: &AuditLogQuery) -> Result<AuditLogPage, StoreError> {
        let limit = page_limit(&query.filter)?;
        let query = query.clone();
        let fetch = fetch(limit);
        let mut entries = self
            .with_conn(move |conn, _| {
                conn.read(|tx| {
                    let mut entries = Vec::new();
                    if query.includes(AuditKind::ToolCall) {
                        let rows = tool_call_rows(tx, &query.filter, fetch)?;
                        entries.extend(rows.into_iter().map(AuditEntry::ToolCall));
                    }
                    if query.includes(AuditKind::SignIn) {
                        let rows = sign_in::rows(tx, &query.filter, fetch)?;
                        entries.extend(rows.into_iter().map(AuditEntry::SignIn));
                    }
                    Ok(entries)
                })
            })
            .await?;
        // Each kind's newest `fetch` past the cursor hold the newest `fetch` of all.
        entries.sort_by_key(|entry| std::cmp::Reverse(entry.position()));
        let (entries, next_cursor) = paged(entries, limit, AuditEntry::position);
        Ok(AuditLogPage {
            entries,
            next_cursor,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_their_names() {
        for kind in AuditKind::ALL {
            assert_eq!(AuditKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(AuditKind::parse("tool_calls"), None);
        assert_eq!(AuditKind::parse(""), None);
    }
}
