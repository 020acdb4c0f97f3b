//! The audit log's sign-in entries (issue 50): a sign-in started, completed or failed,
//! and an agent's credentials for a server forgotten, one `sign_in_audit` row each,
//! appended by the sign-in and credential functions in the transaction of the change it
//! records.
//!
//! Must never: hold a token, code, state or verifier (the row has no column for one; a
//! reason is the stored error, in words), or tie a row to anything by a foreign key.

use chrono::{DateTime, SubsecRound, Utc};
use diesel::prelude::*;

use super::{AuditCursor, AuditQuery, PRUNE_BATCH};
use crate::db::{Tx, on_backend};
use crate::error::StoreError;
use crate::ids::{AgentId, AuditEntryId, ChatId, SignInId};
use crate::schema::sign_in_audit;
use crate::sql_types::DbTime;

/// Who asked for what an entry records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AuditVia {
    /// The API token.
    ApiToken,
    /// The page of this chat (its session).
    Page(ChatId),
    /// The agent itself (it lost a credential).
    Agent,
}

impl AuditVia {
    /// `via` as sign-ins store it, and as [`crate::Store::forget_server_credentials`]
    /// takes it: `api_token`, `chat:<chat id>` or `agent`.
    pub(crate) fn parse(via: &str) -> Option<Self> {
        match via {
            "api_token" => Some(Self::ApiToken),
            "agent" => Some(Self::Agent),
            _ => via.strip_prefix("chat:")?.parse().ok().map(Self::Page),
        }
    }

    /// The stored label (the chat is its own column).
    const fn label(self) -> &'static str {
        match self {
            Self::ApiToken => "api_token",
            Self::Page(_) => "page",
            Self::Agent => "agent",
        }
    }

    const fn chat(self) -> Option<ChatId> {
        match self {
            Self::Page(chat) => Some(chat),
            Self::ApiToken | Self::Agent => None,
        }
    }
}

/// What became of a sign-in, as the audit log records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SignInAuditStatus {
    /// A person asked for it.
    Started,
    /// The credential is stored.
    Completed,
    /// It ended without a credential (the reason says why).
    Failed,
    /// The server's credentials were forgotten: signed out.
    Forgotten,
}

impl SignInAuditStatus {
    /// The stored label, as the audit route answers it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Forgotten => "forgotten",
        }
    }

    fn parse(label: &str) -> Option<Self> {
        [
            Self::Started,
            Self::Completed,
            Self::Failed,
            Self::Forgotten,
        ]
        .into_iter()
        .find(|status| status.as_str() == label)
    }
}

/// A sign-in entry of the audit log: never a token, code, state or verifier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignInAuditRecord {
    /// The entry's own id.
    pub id: AuditEntryId,
    /// When the change was stored.
    pub at: DateTime<Utc>,
    /// The agent whose server it is (it may have been deleted since).
    pub agent_id: AgentId,
    /// Who asked.
    pub via: AuditVia,
    /// The server's name as the agent reports it.
    pub server: String,
    /// What became of the sign-in.
    pub status: SignInAuditStatus,
    /// The sign-in it is about; `None` for forgotten credentials.
    pub sign_in_id: Option<SignInId>,
    /// For `Completed`: the authorization server the credential came from.
    pub issuer: Option<String>,
    /// For `Failed`, and `Forgotten` by the agent: why, in words.
    pub reason: Option<String>,
}

/// A change of a sign-in or of an agent's credentials, for [`record`].
pub(crate) struct SignInEvent<'a> {
    pub(crate) agent: AgentId,
    pub(crate) sign_in: Option<SignInId>,
    pub(crate) server: &'a str,
    pub(crate) status: SignInAuditStatus,
    pub(crate) via: AuditVia,
    pub(crate) issuer: Option<&'a str>,
    pub(crate) reason: Option<&'a str>,
}

/// Appends `event`'s entry, stamped now, in the transaction that stored the change.
pub(crate) fn record(tx: &mut Tx<'_>, event: &SignInEvent<'_>) -> Result<(), StoreError> {
    use sign_in_audit::dsl as a;
    // Microseconds, as both backends keep them, so a cursor names the row exactly.
    let at = Utc::now().trunc_subsecs(6);
    let insert = diesel::insert_into(a::sign_in_audit).values((
        a::id.eq(AuditEntryId::new_random()),
        a::agent_id.eq(event.agent),
        a::sign_in_id.eq(event.sign_in),
        a::server.eq(event.server),
        a::status.eq(event.status.as_str()),
        a::via.eq(event.via.label()),
        a::chat_id.eq(event.via.chat()),
        a::issuer.eq(event.issuer),
        a::reason.eq(event.reason),
        a::recorded_at.eq(DbTime(at)),
    ));
    on_backend!(tx, |c| insert.execute(c))?;
    Ok(())
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = sign_in_audit)]
#[cfg_attr(
    all(feature = "postgres", feature = "sqlite"),
    diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))
)]
struct SignInAuditRow {
    id: AuditEntryId,
    agent_id: AgentId,
    sign_in_id: Option<SignInId>,
    server: String,
    status: String,
    via: String,
    chat_id: Option<ChatId>,
    issuer: Option<String>,
    reason: Option<String>,
    recorded_at: DbTime,
}

impl SignInAuditRow {
    fn into_record(self) -> Result<SignInAuditRecord, StoreError> {
        let id = self.id;
        let corrupt = |what: &str, value: &str| {
            StoreError::Corrupt(format!(
                "sign-in audit entry {id}: unknown {what} {value:?}"
            ))
        };
        let via = match (self.via.as_str(), self.chat_id) {
            ("page", Some(chat)) => AuditVia::Page(chat),
            ("api_token", None) => AuditVia::ApiToken,
            ("agent", None) => AuditVia::Agent,
            (other, _) => return Err(corrupt("via", other)),
        };
        let status = SignInAuditStatus::parse(&self.status)
            .ok_or_else(|| corrupt("status", &self.status))?;
        Ok(SignInAuditRecord {
            id,
            at: self.recorded_at.0,
            agent_id: self.agent_id,
            via,
            server: self.server,
            status,
            sign_in_id: self.sign_in_id,
            issuer: self.issuer,
            reason: self.reason,
        })
    }
}

/// Up to `fetch` sign-in entries `query` finds (its limit aside), newest first.
pub(super) fn rows(
    tx: &mut Tx<'_>,
    query: &AuditQuery,
    fetch: i64,
) -> Result<Vec<SignInAuditRecord>, StoreError> {
    use sign_in_audit::dsl as a;
    let rows: Vec<SignInAuditRow> = on_backend!(tx, |c| {
        let mut select = a::sign_in_audit
            .select(SignInAuditRow::as_select())
            .order((a::recorded_at.desc(), a::id.desc()))
            .limit(fetch)
            .into_boxed();
        if let Some(agent) = query.agent {
            select = select.filter(a::agent_id.eq(agent));
        }
        if let Some(chat) = query.chat {
            select = select.filter(a::chat_id.eq(chat));
        }
        if let Some(since) = query.since {
            select = select.filter(a::recorded_at.ge(DbTime(since)));
        }
        if let Some(AuditCursor { at, id }) = query.cursor {
            let (at, id) = (DbTime(at), AuditEntryId::from_uuid(id));
            select = select.filter(
                a::recorded_at
                    .lt(at)
                    .or(a::recorded_at.eq(at).and(a::id.lt(id))),
            );
        }
        select.load(c)
    })?;
    rows.into_iter().map(SignInAuditRow::into_record).collect()
}

/// Deletes up to [`PRUNE_BATCH`] entries recorded before `older_than`, oldest first (over
/// an alias, as the tool-call log's prune).
pub(super) fn prune_batch(tx: &mut Tx<'_>, older_than: DateTime<Utc>) -> Result<usize, StoreError> {
    let old = diesel::alias!(sign_in_audit as old);
    let batch = old
        .filter(old.field(sign_in_audit::recorded_at).lt(DbTime(older_than)))
        .order(old.field(sign_in_audit::recorded_at))
        .select(old.field(sign_in_audit::id))
        .limit(PRUNE_BATCH);
    let delete = diesel::delete(sign_in_audit::table.filter(sign_in_audit::id.eq_any(batch)));
    Ok(on_backend!(tx, |c| delete.execute(c))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn via_reads_the_stored_forms_and_nothing_else() {
        let chat = ChatId::new_random();
        assert_eq!(AuditVia::parse("api_token"), Some(AuditVia::ApiToken));
        assert_eq!(AuditVia::parse("agent"), Some(AuditVia::Agent));
        assert_eq!(
            AuditVia::parse(&format!("chat:{chat}")),
            Some(AuditVia::Page(chat))
        );
        for bad in ["", "page", "chat:", "chat:42", "API_TOKEN", "agent "] {
            assert_eq!(AuditVia::parse(bad), None, "{bad:?}");
        }
        assert_eq!(
            (AuditVia::Page(chat).label(), AuditVia::Page(chat).chat()),
            ("page", Some(chat))
        );
    }

    #[test]
    fn statuses_round_trip_their_labels() {
        for status in [
            SignInAuditStatus::Started,
            SignInAuditStatus::Completed,
            SignInAuditStatus::Failed,
            SignInAuditStatus::Forgotten,
        ] {
            assert_eq!(SignInAuditStatus::parse(status.as_str()), Some(status));
        }
        assert_eq!(SignInAuditStatus::parse("signed_in"), None);
    }
}
