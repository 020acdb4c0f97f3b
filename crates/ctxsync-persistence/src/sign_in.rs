//! A person's sign-in to an agent's HTTP MCP server (issue 50), as stored: one
//! `mcp_sign_ins` row, the routed request between the HTTP handler that took it (any
//! replica) and the replica holding the agent's stream, each step a compare-and-set.
//!
//! `asking` (the handler inserted it) → the replica holding the stream claims it and has
//! the agent start it → `started` (the authorization URL; the agent's pending state
//! sealed; the OAuth `state` kept only as its sha256) → the person's browser comes back
//! to any replica with a code → `exchanging` (the code sealed with the pending state) →
//! the holder claims it again and has the agent exchange the code → `signed_in` (the
//! credential upserted in the same transaction), or `failed` with why at any step. A
//! claim older than [`SIGN_IN_CLAIM_TIMEOUT`] is a replica that died mid-way: another
//! may claim. A sign-in lasts [`SIGN_IN_LIFETIME`]; an agent is asked for at most
//! [`MAX_SIGN_INS_PER_WINDOW`] within [`SIGN_IN_RATE_WINDOW`], and its rows expired for
//! an hour are deleted when it is asked for the next.
//!
//! An agent's requests are counted under a lock on its row in a READ COMMITTED
//! transaction ([`committed_write`]), so a burst of them from several replicas waits in
//! turn rather than failing to serialize; every other step is one compare-and-set.
//!
//! Each step a person sees — asked for (`started` in the audit log), `signed_in`
//! (`completed`) and `failed` — appends its audit entry in the transaction that stores it
//! ([`crate::audit`]).
//!
//! Must never: keep a secret once the sign-in ended (a `failed` or `signed_in` row has no
//! sealed blob, as the table's CHECKs say); keep the authorization URL, which carries the
//! state, past `started`; store the state, the code, the pending state or a browser
//! binding in plaintext otherwise; accept a state twice.

mod callback;
mod records;
mod secret;

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use ctxsync_mcp_model::SignInStart;
use diesel::prelude::*;
use diesel::result::{DatabaseErrorKind, Error as DieselError};

pub use records::{
    CallbackOutcome, CallbackParams, ClaimedSignIn, NewSignIn, SignInRef, SignInStage,
    SignInStatus, SignInTask,
};
use secret::{Kept, hash_hex, open_kept, seal_kept, sealed_of};

use crate::audit::sign_in::{SignInEvent, record as audit_record};
use crate::audit::{AuditVia, SignInAuditStatus};
use crate::credentials::seal::Sealed;
use crate::credentials::{
    Keyring, McpCredential, check_credential, check_len, seal_credential, upsert_credential,
};
use crate::db::{PooledConn, Tx, on_backend};
use crate::error::StoreError;
use crate::ids::{AgentId, SignInId};
use crate::schema::{mcp_credentials, mcp_sign_in_steps, mcp_sign_ins, workspace_agents};
use crate::sql_types::DbTime;
use crate::store::Store;

/// How long a sign-in waits for the agent and the person's browser, from when it is
/// asked for.
pub const SIGN_IN_LIFETIME: Duration = Duration::from_secs(10 * 60);
/// A claim older than this is a replica that died mid-way: the sign-in is a task again.
pub const SIGN_IN_CLAIM_TIMEOUT: Duration = Duration::from_secs(30);
/// Most sign-ins one agent may be asked for within [`SIGN_IN_RATE_WINDOW`].
pub const MAX_SIGN_INS_PER_WINDOW: i64 = 20;
/// The window of [`MAX_SIGN_INS_PER_WINDOW`].
pub const SIGN_IN_RATE_WINDOW: Duration = Duration::from_secs(60);
/// An expired sign-in is kept this long (a late poll or browser still reads why), then
/// deleted when its agent is asked for another.
const KEEP_EXPIRED: Duration = Duration::from_secs(60 * 60);

/// Longest server name.
const MAX_SERVER_NAME_BYTES: usize = 1024;
/// Longest `via`.
const MAX_VIA_BYTES: usize = 128;
/// Longest browser binding a caller hands in (only its hash is stored).
const MAX_BROWSER_BYTES: usize = 1024;
/// Longest replica name.
const MAX_REPLICA_BYTES: usize = 256;
/// Longest authorization URL (its query included).
const MAX_AUTHORIZATION_URL_BYTES: usize = 8192;
/// Longest issuer or server URL.
const MAX_URL_BYTES: usize = 2048;
/// Longest OAuth `state` (the wire's bound); a longer one names no sign-in.
const MAX_STATE_BYTES: usize = 2048;
/// Longest stored error.
const MAX_ERROR_BYTES: usize = 2048;
/// Open tasks read per round (oldest first); more wait for the next round.
const MAX_OPEN_TASKS: i64 = 1000;

const ASKING: &str = SignInStage::Asking.as_str();
const STARTED: &str = SignInStage::Started.as_str();
const EXCHANGING: &str = SignInStage::Exchanging.as_str();
const SIGNED_IN: &str = SignInStage::SignedIn.as_str();
const FAILED: &str = SignInStage::Failed.as_str();

/// What a sign-in's step reads back from its row for the audit log: the agent, the
/// server's name and who asked (`via` as stored).
type StepRow = (AgentId, String, String);

/// A constant [`Duration`] as chrono's.
fn delta(duration: Duration) -> TimeDelta {
    TimeDelta::from_std(duration).expect("the module's durations are in range")
}

impl Store {
    /// Stores a person's request for a sign-in, `asking`, expiring after
    /// [`SIGN_IN_LIFETIME`], and answers its id; the replica holding the agent's stream
    /// finds it ([`Self::sign_in_tasks`]). The same transaction audits it `started` and
    /// deletes the agent's sign-ins expired for over an hour.
    /// [`StoreError::AgentNotFound`] for an unknown agent; [`StoreError::LimitReached`]
    /// when the agent was asked for [`MAX_SIGN_INS_PER_WINDOW`] within the last
    /// [`SIGN_IN_RATE_WINDOW`] already;
    /// [`StoreError::InvalidInput`], before any database work, for a field out of bounds
    /// or a `via` that is neither `api_token` nor `chat:<uuid>`.
    pub async fn request_sign_in(&self, request: &NewSignIn) -> Result<SignInId, StoreError> {
        check_request(request)?;
        let audit_via = stored_via(&request.via)?;
        let id = SignInId::new_random();
        let agent = request.agent;
        let (server_name, via) = (request.server_name.clone(), request.via.clone());
        let browser = request.browser.as_deref().map(hash_hex);
        self.with_conn(move |conn, _| {
            committed_write(conn, |tx| {
                lock_agent_requests(tx, agent)?;
                let now = Utc::now();
                admit_request(tx, agent, now)?;
                use mcp_sign_ins::dsl as s;
                let insert = diesel::insert_into(s::mcp_sign_ins).values((
                    s::id.eq(id),
                    s::agent_id.eq(agent),
                    s::server_name.eq(&server_name),
                    s::status.eq(ASKING),
                    s::via.eq(&via),
                    s::browser.eq(&browser),
                    s::created_at.eq(DbTime(now)),
                    s::expires_at.eq(DbTime(now + delta(SIGN_IN_LIFETIME))),
                    s::updated_at.eq(DbTime(now)),
                ));
                on_backend!(tx, |c| insert.execute(c))?;
                audit_record(
                    tx,
                    &SignInEvent {
                        agent,
                        sign_in: Some(id),
                        server: &server_name,
                        status: SignInAuditStatus::Started,
                        via: audit_via,
                        issuer: None,
                        reason: None,
                    },
                )
            })
        })
        .await?;
        Ok(id)
    }

    /// The sign-ins of `agents` a replica has work for: `asking` (to start) or
    /// `exchanging` (to finish), unexpired, and unclaimed or claimed over
    /// [`SIGN_IN_CLAIM_TIMEOUT`] ago; oldest first (at most 1000 a call). Each still has
    /// to be claimed ([`Self::claim_sign_in`]).
    pub async fn sign_in_tasks(&self, agents: &[AgentId]) -> Result<Vec<SignInId>, StoreError> {
        if agents.is_empty() {
            return Ok(Vec::new());
        }
        let wanted: std::collections::HashSet<AgentId> = agents.iter().copied().collect();
        self.with_conn(move |conn, _| {
            let now = Utc::now();
            let stale = DbTime(now - delta(SIGN_IN_CLAIM_TIMEOUT));
            conn.read(|tx| {
                use mcp_sign_ins::dsl as s;
                // Every open task at once, then this replica's agents among them: one
                // statement a round however many streams the replica holds (open tasks
                // are few: each is a person waiting).
                let query = s::mcp_sign_ins
                    .filter(s::status.eq_any([ASKING, EXCHANGING]))
                    .filter(s::expires_at.gt(DbTime(now)))
                    .filter(s::claimed_at.is_null().or(s::claimed_at.lt(stale)))
                    .order((s::created_at, s::id))
                    .limit(MAX_OPEN_TASKS)
                    .select((s::id, s::agent_id));
                let open: Vec<(SignInId, AgentId)> = on_backend!(tx, |c| query.load(c))?;
                Ok(open
                    .into_iter()
                    .filter(|(_, agent)| wanted.contains(agent))
                    .map(|(id, _)| id)
                    .collect())
            })
        })
        .await
    }

    /// Claims sign-in `id` for `replica` (compare-and-set): it must still be a task (see
    /// [`Self::sign_in_tasks`]), so of two replicas claiming at once one gets it. `None`
    /// when another holds it or it moved on. For an `exchanging` one the sealed pending
    /// state and code are opened with `keyring`; one it cannot open is
    /// [`StoreError::CredentialsUnreadable`] and nothing is claimed (the caller may end it
    /// with [`Self::sign_in_failed`]).
    pub async fn claim_sign_in(
        &self,
        id: SignInId,
        replica: &str,
        keyring: &Keyring,
    ) -> Result<Option<ClaimedSignIn>, StoreError> {
        check_len("replica", replica, 1..=MAX_REPLICA_BYTES)?;
        let (replica, keyring) = (replica.to_owned(), keyring.clone());
        self.with_conn(move |conn, _| conn.write(|tx| claim(tx, id, &replica, &keyring)))
            .await
    }

    /// Keeps what the agent's start of sign-in `id` made: `asking` becomes `started`, with
    /// the authorization URL, issuer and server URL, the state's sha256 (the callback
    /// finds the sign-in by it) and `pending` sealed under the keyring's current key; the
    /// claim is released. False, with nothing changed, when it was not `asking`.
    /// [`StoreError::InvalidInput`] for a field out of bounds (before any database work),
    /// or a state another sign-in already has.
    pub async fn sign_in_started(
        &self,
        id: SignInId,
        start: &SignInStart,
        keyring: &Keyring,
    ) -> Result<bool, StoreError> {
        check_start(start)?;
        let kept = Kept {
            pending: start.pending.as_str().into(),
            code: None,
            iss: None,
        };
        let sealed = seal_kept(keyring, id, &kept)?;
        let state_hash = hash_hex(&start.state);
        let url = start.authorization_url.clone();
        let (issuer, server_url) = (start.issuer.clone(), start.server_url.clone());
        self.with_conn(move |conn, _| {
            conn.single_statement(|tx| {
                use mcp_sign_in_steps::dsl as s;
                let update = diesel::update(
                    s::mcp_sign_in_steps.find(id).filter(s::status.eq(ASKING)),
                )
                .set((
                    s::status.eq(STARTED),
                    s::state_hash.eq(Some(&state_hash)),
                    s::authorization_url.eq(Some(&url)),
                    s::issuer.eq(&issuer),
                    s::server_url.eq(Some(&server_url)),
                    s::key_id.eq(Some(&sealed.key_id)),
                    s::nonce.eq(Some(&sealed.nonce)),
                    s::ciphertext.eq(Some(&sealed.ciphertext)),
                    s::claimed_by.eq(None::<String>),
                    s::claimed_at.eq(None::<DbTime>),
                    s::updated_at.eq(DbTime(Utc::now())),
                ));
                match on_backend!(tx, |c| update.execute(c)) {
                    Ok(changed) => Ok(changed > 0),
                    Err(DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, _)) => {
                        Err(StoreError::InvalidInput(
                            "the sign-in's state is another sign-in's already: each sign-in \
                             needs a state of its own"
                                .into(),
                        ))
                    }
                    Err(other) => Err(other.into()),
                }
            })
        })
        .await
    }

    /// Ends sign-in `id` `failed` with `reason` (on one line, cut to 2048 bytes): from
    /// `asking`, `started` or `exchanging`; its sealed state is dropped, its claim
    /// released, and the failure audited with the reason. False, with nothing changed,
    /// when it had ended already.
    pub async fn sign_in_failed(&self, id: SignInId, reason: &str) -> Result<bool, StoreError> {
        let error = error_text(reason);
        self.with_conn(move |conn, _| {
            conn.write(|tx| {
                use mcp_sign_in_steps::dsl as s;
                let update = diesel::update(
                    s::mcp_sign_in_steps
                        .find(id)
                        .filter(s::status.eq_any([ASKING, STARTED, EXCHANGING])),
                )
                .set(fail(&error, Utc::now()))
                .returning((s::agent_id, s::server_name, s::via));
                let found: Option<StepRow> = on_backend!(tx, |c| update.get_result(c).optional())?;
                let Some(row) = found else {
                    return Ok(false);
                };
                audit_step(tx, id, &row, SignInAuditStatus::Failed, None, Some(&error))?;
                Ok(true)
            })
        })
        .await
    }

    /// Finishes sign-in `id` with the `credential` the agent's exchange gave, in one
    /// transaction: `exchanging` becomes `signed_in` (its sealed state dropped, its claim
    /// released) and the credential is kept for the sign-in's agent, sealed under the
    /// keyring's current key, in place of any it held for the same server name (another
    /// URL or issuer included), and the completion audited with the credential's issuer.
    /// False, with nothing changed, when it was not `exchanging`.
    /// [`StoreError::InvalidInput`] for a credential out of bounds (before any database
    /// work) or one for another server than the sign-in's.
    pub async fn sign_in_completed(
        &self,
        id: SignInId,
        credential: &McpCredential,
        keyring: &Keyring,
    ) -> Result<bool, StoreError> {
        let plaintext = check_credential(credential)?;
        let summary = credential.summary.clone();
        let keyring = keyring.clone();
        self.with_conn(move |conn, _| {
            conn.write(|tx| {
                let now = Utc::now();
                use mcp_sign_in_steps::dsl as s;
                let update = diesel::update(
                    s::mcp_sign_in_steps
                        .find(id)
                        .filter(s::status.eq(EXCHANGING)),
                )
                .set((
                    s::status.eq(SIGNED_IN),
                    drop_secret(),
                    release_claim(),
                    s::updated_at.eq(DbTime(now)),
                ))
                .returning((s::agent_id, s::server_name, s::via));
                let found: Option<StepRow> = on_backend!(tx, |c| update.get_result(c).optional())?;
                let Some(row) = found else {
                    return Ok(false);
                };
                let (agent, server_name) = (row.0, &row.1);
                if *server_name != summary.server_name {
                    return Err(StoreError::InvalidInput(format!(
                        "the credential is for server {:?}, but sign-in {id} is for {server_name:?}",
                        summary.server_name
                    )));
                }
                use mcp_credentials::dsl as m;
                let others = diesel::delete(
                    m::mcp_credentials
                        .filter(m::agent_id.eq(agent))
                        .filter(m::server_name.eq(server_name))
                        .filter(
                            m::server_url
                                .ne(&summary.server_url)
                                .or(m::issuer.ne(&summary.issuer)),
                        ),
                );
                on_backend!(tx, |c| others.execute(c))?;
                let sealed = seal_credential(&keyring, agent, &summary, &plaintext)?;
                upsert_credential(tx, agent, &summary, &sealed)?;
                let issuer = Some(summary.issuer.as_str());
                audit_step(tx, id, &row, SignInAuditStatus::Completed, issuer, None)?;
                Ok(true)
            })
        })
        .await
    }

    /// Sign-in `id` as the HTTP handler polls it; `None` for an unknown one (or one deleted
    /// with its agent or by the hourly clean-up).
    pub async fn sign_in_status(&self, id: SignInId) -> Result<Option<SignInStatus>, StoreError> {
        type Row = (
            AgentId,
            String,
            String,
            Option<String>,
            DbTime,
            Option<String>,
        );
        let row: Option<Row> = self
            .with_conn(move |conn, _| {
                conn.single_statement(|tx| {
                    use mcp_sign_ins::dsl as s;
                    let query = s::mcp_sign_ins.find(id).select((
                        s::agent_id,
                        s::server_name,
                        s::status,
                        s::authorization_url,
                        s::expires_at,
                        s::error,
                    ));
                    Ok(on_backend!(tx, |c| query.first(c).optional())?)
                })
            })
            .await?;
        row.map(
            |(agent, server_name, status, authorization_url, expires_at, error)| {
                Ok(SignInStatus {
                    agent,
                    server_name,
                    stage: stage(&status)?,
                    authorization_url,
                    expires_at: expires_at.0,
                    error,
                })
            },
        )
        .transpose()
    }

    /// For each server of `agent` whose newest sign-in failed: the server's name, why, and
    /// when; by server name. A server whose newest sign-in succeeded, is under way or
    /// expired unfinished is not named.
    pub async fn latest_sign_in_failures(
        &self,
        agent: AgentId,
    ) -> Result<Vec<(String, String, DateTime<Utc>)>, StoreError> {
        let rows: Vec<(String, String, Option<String>, DbTime)> = self
            .with_conn(move |conn, _| {
                conn.single_statement(|tx| {
                    use mcp_sign_ins::dsl as s;
                    // Few rows: the rate limit and the clean-up bound an agent's.
                    let query = s::mcp_sign_ins
                        .filter(s::agent_id.eq(agent))
                        .order((s::server_name, s::created_at.desc(), s::id.desc()))
                        .select((s::server_name, s::status, s::error, s::updated_at));
                    Ok(on_backend!(tx, |c| query.load(c))?)
                })
            })
            .await?;
        let mut failures: Vec<(String, String, DateTime<Utc>)> = Vec::new();
        let mut previous: Option<String> = None;
        for (server_name, status, error, updated_at) in rows {
            if previous.as_ref() == Some(&server_name) {
                continue;
            }
            previous = Some(server_name.clone());
            if status == FAILED {
                let error = error.unwrap_or_else(|| error_text(""));
                failures.push((server_name, error, updated_at.0));
            }
        }
        Ok(failures)
    }
}

/// Refuses a request out of bounds, before any database work.
fn check_request(request: &NewSignIn) -> Result<(), StoreError> {
    check_len(
        "server_name",
        &request.server_name,
        1..=MAX_SERVER_NAME_BYTES,
    )?;
    check_len("via", &request.via, 1..=MAX_VIA_BYTES)?;
    let chat = |via: &str| via.strip_prefix("chat:").map(uuid::Uuid::parse_str);
    if request.via != "api_token" && !matches!(chat(&request.via), Some(Ok(_))) {
        return Err(StoreError::InvalidInput(format!(
            "via must be api_token or chat:<chat id>, not {:?}",
            request.via
        )));
    }
    if let Some(browser) = &request.browser {
        // Its length only: the message never shows the binding.
        check_len("browser", browser, 1..=MAX_BROWSER_BYTES)?;
    }
    Ok(())
}

fn check_start(start: &SignInStart) -> Result<(), StoreError> {
    check_len(
        "authorization_url",
        &start.authorization_url,
        1..=MAX_AUTHORIZATION_URL_BYTES,
    )?;
    if start.state.is_empty() || start.state.len() > MAX_STATE_BYTES {
        // Its length only: the message never shows the state.
        return Err(StoreError::InvalidInput(format!(
            "state must be 1..={MAX_STATE_BYTES} bytes, not {}",
            start.state.len()
        )));
    }
    if let Some(issuer) = &start.issuer {
        check_len("issuer", issuer, 1..=MAX_URL_BYTES)?;
    }
    check_len("server_url", &start.server_url, 1..=MAX_URL_BYTES)
}

/// Runs `f` in one transaction whose every statement reads what committed before it:
/// PostgreSQL READ COMMITTED, so a request that waited for another's lock on the agent
/// counts that one's row, rather than failing to serialize (a burst of requests would
/// exhaust the retries of REPEATABLE READ); SQLite IMMEDIATE, one writer at a time.
fn committed_write<T>(
    conn: &mut PooledConn,
    f: impl FnOnce(&mut Tx<'_>) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    match conn {
        #[cfg(feature = "postgres")]
        PooledConn::Postgres(c) => c
            .build_transaction()
            .read_committed()
            .run(|c| f(&mut Tx::Postgres(c))),
        #[cfg(feature = "sqlite")]
        PooledConn::Sqlite(c) => c.immediate_transaction(|c| f(&mut Tx::Sqlite(c))),
    }
}

/// Orders `agent`'s concurrent requests (PostgreSQL; SQLite's transaction already holds
/// the write lock) without blocking the rows that refer to the agent;
/// [`StoreError::AgentNotFound`] for an unknown agent.
fn lock_agent_requests(tx: &mut Tx<'_>, agent: AgentId) -> Result<(), StoreError> {
    let query = workspace_agents::table
        .find(agent)
        .select(workspace_agents::id);
    let found: Option<AgentId> = match tx {
        #[cfg(feature = "postgres")]
        Tx::Postgres(c) => query.for_no_key_update().first(*c).optional()?,
        #[cfg(feature = "sqlite")]
        Tx::Sqlite(c) => query.first(*c).optional()?,
    };
    found.map(drop).ok_or(StoreError::AgentNotFound(agent))
}

/// Before a request is stored (the agent locked): deletes the agent's sign-ins expired
/// for over an hour, and applies the rate limit.
fn admit_request(tx: &mut Tx<'_>, agent: AgentId, now: DateTime<Utc>) -> Result<(), StoreError> {
    use mcp_sign_ins::dsl as s;
    let expired = diesel::delete(
        s::mcp_sign_ins
            .filter(s::agent_id.eq(agent))
            .filter(s::expires_at.lt(DbTime(now - delta(KEEP_EXPIRED)))),
    );
    on_backend!(tx, |c| expired.execute(c))?;
    let recent = s::mcp_sign_ins
        .filter(s::agent_id.eq(agent))
        .filter(s::created_at.gt(DbTime(now - delta(SIGN_IN_RATE_WINDOW))))
        .count();
    let recent: i64 = on_backend!(tx, |c| recent.get_result(c))?;
    if recent >= MAX_SIGN_INS_PER_WINDOW {
        return Err(StoreError::LimitReached(format!(
            "agent {agent} was asked for {recent} sign-ins within the last {} seconds (at \
             most {MAX_SIGN_INS_PER_WINDOW}); wait a minute and ask again",
            SIGN_IN_RATE_WINDOW.as_secs()
        )));
    }
    Ok(())
}

/// The claim's compare-and-set, and the task it hands out.
fn claim(
    tx: &mut Tx<'_>,
    id: SignInId,
    replica: &str,
    keyring: &Keyring,
) -> Result<Option<ClaimedSignIn>, StoreError> {
    use mcp_sign_ins::dsl as s;
    let now = Utc::now();
    let stale = DbTime(now - delta(SIGN_IN_CLAIM_TIMEOUT));
    let update = diesel::update(
        s::mcp_sign_ins
            .find(id)
            .filter(s::status.eq_any([ASKING, EXCHANGING]))
            .filter(s::expires_at.gt(DbTime(now)))
            .filter(s::claimed_at.is_null().or(s::claimed_at.lt(stale))),
    )
    .set((
        s::claimed_by.eq(Some(replica)),
        s::claimed_at.eq(Some(DbTime(now))),
        s::updated_at.eq(DbTime(now)),
    ))
    .returning((s::agent_id, s::server_name, s::via, s::status));
    let row: Option<(AgentId, String, String, String)> =
        on_backend!(tx, |c| update.get_result(c).optional())?;
    let Some((agent, server_name, via, status)) = row else {
        return Ok(None);
    };
    let task = if status == ASKING {
        SignInTask::Begin
    } else {
        let kept = open_kept(keyring, id, &sealed_state(tx, id)?)?;
        SignInTask::Exchange {
            pending: kept.pending,
            code: kept.code.ok_or_else(|| {
                StoreError::Corrupt(format!("sign-in {id} is exchanging without a code"))
            })?,
            iss: kept.iss,
        }
    };
    Ok(Some(ClaimedSignIn {
        id,
        agent,
        server_name,
        via,
        task,
    }))
}

/// The sealed state of sign-in `id`, which is under way.
fn sealed_state(tx: &mut Tx<'_>, id: SignInId) -> Result<Sealed, StoreError> {
    use mcp_sign_in_steps::dsl as s;
    let query = s::mcp_sign_in_steps
        .find(id)
        .select((s::key_id, s::nonce, s::ciphertext));
    type Columns = (Option<String>, Option<Vec<u8>>, Option<Vec<u8>>);
    let row: Option<Columns> = on_backend!(tx, |c| query.first(c).optional())?;
    row.and_then(|(key_id, nonce, ciphertext)| sealed_of(key_id, nonce, ciphertext))
        .ok_or_else(|| StoreError::Corrupt(format!("sign-in {id} is under way without its state")))
}

/// `via` as a sign-in row stores it, for the audit log.
fn stored_via(via: &str) -> Result<AuditVia, StoreError> {
    AuditVia::parse(via)
        .ok_or_else(|| StoreError::Corrupt(format!("a sign-in asked for via {via:?}")))
}

/// Appends the audit entry of sign-in `id`'s step `status`, whose `row` the step read
/// back, in the step's transaction.
fn audit_step(
    tx: &mut Tx<'_>,
    id: SignInId,
    row: &StepRow,
    status: SignInAuditStatus,
    issuer: Option<&str>,
    reason: Option<&str>,
) -> Result<(), StoreError> {
    let (agent, server, via) = row;
    audit_record(
        tx,
        &SignInEvent {
            agent: *agent,
            sign_in: Some(id),
            server,
            status,
            via: stored_via(via)?,
            issuer,
            reason,
        },
    )
}

/// The stored stage `label`.
fn stage(label: &str) -> Result<SignInStage, StoreError> {
    SignInStage::parse(label)
        .ok_or_else(|| StoreError::Corrupt(format!("unknown sign-in status {label:?}")))
}

/// `reason` as a stored error: on one line, bounded, never empty.
fn error_text(reason: &str) -> String {
    let text = secret::bounded_text(reason, MAX_ERROR_BYTES);
    if text.is_empty() {
        "the sign-in failed".to_owned()
    } else {
        text
    }
}

type DropSecret = (
    diesel::dsl::Eq<mcp_sign_in_steps::key_id, Option<String>>,
    diesel::dsl::Eq<mcp_sign_in_steps::nonce, Option<Vec<u8>>>,
    diesel::dsl::Eq<mcp_sign_in_steps::ciphertext, Option<Vec<u8>>>,
);

/// The assignments that drop a sign-in's sealed state.
fn drop_secret() -> DropSecret {
    (
        mcp_sign_in_steps::key_id.eq(None),
        mcp_sign_in_steps::nonce.eq(None),
        mcp_sign_in_steps::ciphertext.eq(None),
    )
}

type ReleaseClaim = (
    diesel::dsl::Eq<mcp_sign_in_steps::claimed_by, Option<String>>,
    diesel::dsl::Eq<mcp_sign_in_steps::claimed_at, Option<DbTime>>,
);

/// The assignments that release a sign-in's claim.
fn release_claim() -> ReleaseClaim {
    (
        mcp_sign_in_steps::claimed_by.eq(None),
        mcp_sign_in_steps::claimed_at.eq(None),
    )
}

type Fail<'a> = (
    diesel::dsl::Eq<mcp_sign_in_steps::status, &'static str>,
    diesel::dsl::Eq<mcp_sign_in_steps::error, Option<&'a str>>,
    diesel::dsl::Eq<mcp_sign_in_steps::authorization_url, Option<String>>,
    DropSecret,
    ReleaseClaim,
    diesel::dsl::Eq<mcp_sign_in_steps::updated_at, DbTime>,
);

/// The assignments that end a sign-in `failed` with `error`.
fn fail(error: &str, now: DateTime<Utc>) -> Fail<'_> {
    (
        mcp_sign_in_steps::status.eq(FAILED),
        mcp_sign_in_steps::error.eq(Some(error)),
        mcp_sign_in_steps::authorization_url.eq(None),
        drop_secret(),
        release_claim(),
        mcp_sign_in_steps::updated_at.eq(DbTime(now)),
    )
}
