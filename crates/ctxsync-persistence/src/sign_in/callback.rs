//! The person's browser back at the redirect URI, on any replica: the sign-in is found by
//! its state's sha256 and, in the same transaction, either keeps the code for the agent
//! (`exchanging`) or fails with the authorization server's refusal (audited, with it).
//! The state is single use: only a `started` sign-in takes a callback.

use chrono::{DateTime, Utc};
use diesel::prelude::*;

use super::secret::{Kept, MAX_SECRET_BYTES, bounded_text, open_kept, same_browser, seal_kept};
use super::{
    CallbackOutcome, CallbackParams, EXCHANGING, MAX_ERROR_BYTES, MAX_STATE_BYTES, MAX_URL_BYTES,
    STARTED, SignInRef, audit_step, fail, hash_hex, release_claim, sealed_state,
};
use crate::audit::SignInAuditStatus;
use crate::credentials::{Keyring, SecretString, check_len};
use crate::db::{Tx, on_backend};
use crate::error::StoreError;
use crate::ids::{AgentId, SignInId};
use crate::schema::{mcp_sign_in_steps, mcp_sign_ins};
use crate::sql_types::DbTime;
use crate::store::Store;

/// Longest `error` parameter kept (OAuth's are short ASCII codes).
const MAX_OAUTH_ERROR_BYTES: usize = 256;
/// Longest `error_description` kept.
const MAX_DESCRIPTION_BYTES: usize = 1024;

/// What the callback stores, once the sign-in is found and may take it.
enum Answer {
    Code {
        code: SecretString,
        iss: Option<String>,
    },
    Refused(String),
}

impl Store {
    /// Takes the person's browser back at the redirect URI with the OAuth `state` and
    /// what the authorization server sent (`params`), in one transaction: the sign-in
    /// whose state it is must be `started` (else [`CallbackOutcome::Used`]: a state is
    /// good once), unexpired ([`CallbackOutcome::Expired`]), and when a browser asked for
    /// it, `browser` must be that browser's binding ([`CallbackOutcome::OtherBrowser`]);
    /// these and [`CallbackOutcome::Unknown`] store nothing. A code is then sealed with
    /// the pending state under the keyring's current key and the sign-in is `exchanging`
    /// ([`CallbackOutcome::Accepted`]), for the replica holding the agent's stream to
    /// finish; a refusal ends it `failed` with the server's error, bounded and on one line
    /// ([`CallbackOutcome::Refused`]). [`StoreError::InvalidInput`] for a code over 16 KiB
    /// or an `iss` over 2048 bytes, before any database work;
    /// [`StoreError::CredentialsUnreadable`] when the keyring cannot open the pending
    /// state (nothing stored).
    pub async fn sign_in_callback(
        &self,
        state: &str,
        browser: Option<&str>,
        params: CallbackParams,
        keyring: &Keyring,
    ) -> Result<CallbackOutcome, StoreError> {
        if state.is_empty() || state.len() > MAX_STATE_BYTES {
            return Ok(CallbackOutcome::Unknown);
        }
        let answer = match params {
            CallbackParams::Code { code, iss } => {
                // Its length only: the message never shows the code.
                check_len("code", code.expose(), 1..=MAX_SECRET_BYTES)?;
                if let Some(iss) = &iss {
                    check_len("iss", iss, 1..=MAX_URL_BYTES)?;
                }
                Answer::Code { code, iss }
            }
            CallbackParams::Error { error, description } => {
                Answer::Refused(refusal(&error, description.as_deref()))
            }
        };
        let state_hash = hash_hex(state);
        let browser = browser.map(str::to_owned);
        let keyring = keyring.clone();
        self.with_conn(move |conn, _| {
            conn.write(|tx| {
                take_callback(
                    tx,
                    &state_hash,
                    browser.as_deref(),
                    &answer,
                    &keyring,
                    Utc::now(),
                )
            })
        })
        .await
    }
}

/// The error a refusal stores: the server's `error` and `description`, each bounded and
/// on one line.
fn refusal(error: &str, description: Option<&str>) -> String {
    let mut text = "the authorization server refused the sign-in".to_owned();
    for part in [
        Some((error, MAX_OAUTH_ERROR_BYTES)),
        description.map(|d| (d, MAX_DESCRIPTION_BYTES)),
    ]
    .into_iter()
    .flatten()
    {
        let part = bounded_text(part.0, part.1);
        if !part.is_empty() {
            text.push_str(": ");
            text.push_str(&part);
        }
    }
    bounded_text(&text, MAX_ERROR_BYTES)
}

fn take_callback(
    tx: &mut Tx<'_>,
    state_hash: &str,
    browser: Option<&str>,
    answer: &Answer,
    keyring: &Keyring,
    now: DateTime<Utc>,
) -> Result<CallbackOutcome, StoreError> {
    type Row = (
        SignInId,
        AgentId,
        String,
        String,
        DbTime,
        Option<String>,
        String,
    );
    let query = mcp_sign_ins::table
        .filter(mcp_sign_ins::state_hash.eq(state_hash))
        .select((
            mcp_sign_ins::id,
            mcp_sign_ins::agent_id,
            mcp_sign_ins::server_name,
            mcp_sign_ins::status,
            mcp_sign_ins::expires_at,
            mcp_sign_ins::browser,
            mcp_sign_ins::via,
        ));
    let row: Option<Row> = on_backend!(tx, |c| query.first(c).optional())?;
    let Some((id, agent, server_name, status, expires_at, bound, via)) = row else {
        return Ok(CallbackOutcome::Unknown);
    };
    if status != STARTED {
        return Ok(CallbackOutcome::Used);
    }
    if expires_at.0 <= now {
        return Ok(CallbackOutcome::Expired);
    }
    if bound.is_some_and(|bound| !same_browser(&bound, browser)) {
        return Ok(CallbackOutcome::OtherBrowser);
    }
    use mcp_sign_in_steps::dsl as s;
    let started = s::mcp_sign_in_steps.find(id).filter(s::status.eq(STARTED));
    let changed = match answer {
        Answer::Code { code, iss } => {
            let kept = Kept {
                pending: open_kept(keyring, id, &sealed_state(tx, id)?)?.pending,
                code: Some(code.clone()),
                iss: iss.clone(),
            };
            let fresh = seal_kept(keyring, id, &kept)?;
            let update = diesel::update(started).set((
                s::status.eq(EXCHANGING),
                s::authorization_url.eq(None::<String>),
                s::key_id.eq(Some(&fresh.key_id)),
                s::nonce.eq(Some(&fresh.nonce)),
                s::ciphertext.eq(Some(&fresh.ciphertext)),
                release_claim(),
                s::updated_at.eq(DbTime(now)),
            ));
            on_backend!(tx, |c| update.execute(c))?
        }
        Answer::Refused(error) => {
            let update = diesel::update(started).set(fail(error, now));
            on_backend!(tx, |c| update.execute(c))?
        }
    };
    // The row was read `started` in this transaction; a concurrent callback that changed
    // it makes this one fail to serialize and be retried (PostgreSQL) or wait (SQLite).
    if changed == 0 {
        return Ok(CallbackOutcome::Used);
    }
    if let Answer::Refused(error) = answer {
        let row = (agent, server_name.clone(), via);
        audit_step(tx, id, &row, SignInAuditStatus::Failed, None, Some(error))?;
    }
    let sign_in = SignInRef {
        id,
        agent,
        server_name,
    };
    Ok(match answer {
        Answer::Code { .. } => CallbackOutcome::Accepted(sign_in),
        Answer::Refused(_) => CallbackOutcome::Refused(sign_in),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_bounded_and_on_one_line() {
        assert_eq!(
            refusal("access_denied", Some("The user\ndeclined.\u{7}")),
            "the authorization server refused the sign-in: access_denied: The user declined."
        );
        assert_eq!(
            refusal("", None),
            "the authorization server refused the sign-in"
        );
        let long = refusal(&"e".repeat(5000), Some(&"d".repeat(5000)));
        assert!(long.len() <= MAX_ERROR_BYTES, "{}", long.len());
        assert!(long.contains(&"e".repeat(MAX_OAUTH_ERROR_BYTES)));
        assert!(!long.contains(&"e".repeat(MAX_OAUTH_ERROR_BYTES + 1)));
        assert!(long.ends_with(&"d".repeat(MAX_DESCRIPTION_BYTES)));
    }
}
