//! A browser's way into one chat's page, kept in the store so every replica honours it
//! and a restart forgets nothing (SPEC §11): one-time page links, and the sessions they
//! are exchanged for. Both are random secrets handed out once; only their sha256 is
//! stored, so the tables open nothing by themselves.
//!
//! A link is used up by the statement that deletes its row, so of two replicas
//! exchanging the same link at once exactly one gets a session. Expired rows are swept
//! a bounded batch at a time whenever a link is minted or exchanged, and the live rows of
//! each table are capped, so neither table grows without bound.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{TimeDelta, Utc};
use diesel::prelude::*;
use diesel::result::{DatabaseErrorKind, Error as DieselError};

use crate::db::{PooledConn, Tx, on_backend};
use crate::error::StoreError;
use crate::ids::ChatId;
use crate::schema::{page_links, page_sessions};
use crate::sql_types::DbTime;
use crate::store::Store;
use crate::token::digest;

/// Most unexpired page links at once; minting past it is refused
/// ([`StoreError::LimitReached`]) until some are used or expire.
pub const MAX_LIVE_PAGE_LINKS: i64 = 100_000;
/// Most unexpired page sessions at once; exchanging a link past it is refused (the link
/// stays usable) until some expire.
pub const MAX_LIVE_PAGE_SESSIONS: i64 = 100_000;
/// Random bytes in a link token or a session id.
const SECRET_BYTES: usize = 32;
/// A presented token or session id longer than this cannot be one we issued: refused
/// without touching the database.
const MAX_PRESENTED_BYTES: usize = 128;
/// Expired rows deleted per table per sweep: enough to outpace one insert per sweep,
/// small enough that a sweep stays one short statement.
const SWEEP_BATCH: i64 = 1_000;

impl Store {
    /// Mints a one-time link token for `chat`'s page, usable until `ttl` has passed.
    /// The token is returned once; only its digest is stored.
    /// [`StoreError::ChatNotFound`] for an unknown chat, [`StoreError::LimitReached`]
    /// past [`MAX_LIVE_PAGE_LINKS`].
    pub async fn mint_page_link(&self, chat: ChatId, ttl: Duration) -> Result<String, StoreError> {
        let ttl = time_delta(ttl)?;
        let token = random_secret()?;
        let token_digest = digest(&token);
        self.with_conn(move |conn, _| {
            let now = Utc::now();
            sweep(conn, DbTime(now))?;
            statement(conn, |tx| {
                let live = live_links(tx, DbTime(now))?;
                if live >= MAX_LIVE_PAGE_LINKS {
                    return Err(StoreError::LimitReached(format!(
                        "{live} page links are open (at most {MAX_LIVE_PAGE_LINKS}); \
                         wait for some to be used or to expire"
                    )));
                }
                let insert = diesel::insert_into(page_links::table).values((
                    page_links::token_digest.eq(&token_digest[..]),
                    page_links::chat_id.eq(chat),
                    page_links::expires_at.eq(DbTime(now + ttl)),
                    page_links::created_at.eq(DbTime(now)),
                ));
                on_backend!(tx, |c| insert.execute(c))
                    .map(drop)
                    .map_err(|e| missing_chat(e, chat))
            })
        })
        .await?;
        Ok(token)
    }

    /// The chat an unexpired, unused link token opens, without using it up.
    pub async fn page_link_chat(&self, token: &str) -> Result<Option<ChatId>, StoreError> {
        if !plausible(token) {
            return Ok(None);
        }
        let token_digest = digest(token);
        self.with_conn(move |conn, _| {
            let now = DbTime(Utc::now());
            conn.read(|tx| {
                let query = page_links::table
                    .filter(page_links::token_digest.eq(&token_digest[..]))
                    .filter(page_links::expires_at.gt(now))
                    .select(page_links::chat_id);
                Ok(on_backend!(tx, |c| query.first(c).optional())?)
            })
        })
        .await
    }

    /// Uses up a link token for `chat` and starts a session bound to that chat, lasting
    /// `session_ttl`; returns the session id (once; only its digest is stored). `None`,
    /// with nothing changed, when the token is unknown, used, expired or for another
    /// chat. The link is deleted in the transaction that creates the session, so of two
    /// replicas exchanging one link at once only one succeeds.
    /// [`StoreError::LimitReached`] past [`MAX_LIVE_PAGE_SESSIONS`] (the link is kept).
    pub async fn exchange_page_link(
        &self,
        chat: ChatId,
        token: &str,
        session_ttl: Duration,
    ) -> Result<Option<String>, StoreError> {
        if !plausible(token) {
            return Ok(None);
        }
        let session_ttl = time_delta(session_ttl)?;
        let token_digest = digest(token);
        let session = random_secret()?;
        let session_digest = digest(&session);
        let started = self
            .with_conn(move |conn, _| {
                let now = Utc::now();
                sweep(conn, DbTime(now))?;
                conn.write(|tx| {
                    let used = diesel::delete(
                        page_links::table
                            .filter(page_links::token_digest.eq(&token_digest[..]))
                            .filter(page_links::chat_id.eq(chat))
                            .filter(page_links::expires_at.gt(DbTime(now))),
                    )
                    .returning(page_links::chat_id);
                    let used: Option<ChatId> = on_backend!(tx, |c| used.get_result(c).optional())?;
                    if used.is_none() {
                        return Ok(false);
                    }
                    let live = live_sessions(tx, DbTime(now))?;
                    if live >= MAX_LIVE_PAGE_SESSIONS {
                        // Rolls the deletion back: the link still works later.
                        return Err(StoreError::LimitReached(format!(
                            "{live} page sessions are open (at most {MAX_LIVE_PAGE_SESSIONS}); \
                             wait for some to expire"
                        )));
                    }
                    let insert = diesel::insert_into(page_sessions::table).values((
                        page_sessions::session_digest.eq(&session_digest[..]),
                        page_sessions::chat_id.eq(chat),
                        page_sessions::expires_at.eq(DbTime(now + session_ttl)),
                        page_sessions::created_at.eq(DbTime(now)),
                    ));
                    on_backend!(tx, |c| insert.execute(c))?;
                    Ok(true)
                })
            })
            .await?;
        Ok(started.then_some(session))
    }

    /// The chat an unexpired session is bound to; `None` for an unknown, expired or
    /// malformed session id, or one whose chat was deleted.
    pub async fn page_session_chat(&self, session: &str) -> Result<Option<ChatId>, StoreError> {
        if !plausible(session) {
            return Ok(None);
        }
        let session_digest = digest(session);
        self.with_conn(move |conn, _| {
            let now = DbTime(Utc::now());
            conn.read(|tx| {
                let query = page_sessions::table
                    .filter(page_sessions::session_digest.eq(&session_digest[..]))
                    .filter(page_sessions::expires_at.gt(now))
                    .select(page_sessions::chat_id);
                Ok(on_backend!(tx, |c| query.first(c).optional())?)
            })
        })
        .await
    }
}

/// A fresh secret: [`SECRET_BYTES`] random bytes, base64url without padding (safe in a
/// URL, a form body and a cookie as it is).
fn random_secret() -> Result<String, StoreError> {
    let mut secret = [0u8; SECRET_BYTES];
    getrandom::fill(&mut secret)
        .map_err(|e| StoreError::Unavailable(format!("no randomness for a page secret: {e}")))?;
    Ok(URL_SAFE_NO_PAD.encode(secret))
}

/// Whether a presented token or session id is worth a database look-up at all.
fn plausible(presented: &str) -> bool {
    !presented.is_empty() && presented.len() <= MAX_PRESENTED_BYTES
}

fn time_delta(ttl: Duration) -> Result<TimeDelta, StoreError> {
    TimeDelta::from_std(ttl)
        .map_err(|_| StoreError::InvalidInput(format!("lifetime {ttl:?} is out of range")))
}

/// A foreign-key failure on insert means the chat does not exist (or was just deleted).
fn missing_chat(error: DieselError, chat: ChatId) -> StoreError {
    match error {
        DieselError::DatabaseError(DatabaseErrorKind::ForeignKeyViolation, _) => {
            StoreError::ChatNotFound(chat)
        }
        other => other.into(),
    }
}

/// Runs `f` outside any explicit transaction: each statement commits on its own, at the
/// backend's default isolation. Used where a statement stands alone, so that replicas
/// sweeping or minting together wait for each other's row locks rather than failing
/// with serialization errors.
fn statement<T>(
    conn: &mut PooledConn,
    f: impl FnOnce(&mut Tx<'_>) -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    match conn {
        #[cfg(feature = "postgres")]
        PooledConn::Postgres(c) => f(&mut Tx::Postgres(c)),
        #[cfg(feature = "sqlite")]
        PooledConn::Sqlite(c) => f(&mut Tx::Sqlite(c)),
    }
}

/// Deletes up to [`SWEEP_BATCH`] expired links and as many expired sessions. The batch
/// is chosen by a subquery over an alias of the table (diesel refuses a subquery over the
/// very table a DELETE targets).
fn sweep(conn: &mut PooledConn, now: DbTime) -> Result<(), StoreError> {
    let (expired_link, expired_session) =
        diesel::alias!(page_links as expired_link, page_sessions as expired_session);
    statement(conn, |tx| {
        let batch = expired_link
            .filter(expired_link.field(page_links::expires_at).le(now))
            .select(expired_link.field(page_links::token_digest))
            .limit(SWEEP_BATCH);
        let links =
            diesel::delete(page_links::table.filter(page_links::token_digest.eq_any(batch)));
        on_backend!(tx, |c| links.execute(c))?;
        let batch = expired_session
            .filter(expired_session.field(page_sessions::expires_at).le(now))
            .select(expired_session.field(page_sessions::session_digest))
            .limit(SWEEP_BATCH);
        let sessions = diesel::delete(
            page_sessions::table.filter(page_sessions::session_digest.eq_any(batch)),
        );
        on_backend!(tx, |c| sessions.execute(c))?;
        Ok(())
    })
}

fn live_links(tx: &mut Tx<'_>, now: DbTime) -> Result<i64, StoreError> {
    let query = page_links::table
        .filter(page_links::expires_at.gt(now))
        .count();
    Ok(on_backend!(tx, |c| query.get_result(c))?)
}

fn live_sessions(tx: &mut Tx<'_>, now: DbTime) -> Result<i64, StoreError> {
    let query = page_sessions::table
        .filter(page_sessions::expires_at.gt(now))
        .count();
    Ok(on_backend!(tx, |c| query.get_result(c))?)
}
