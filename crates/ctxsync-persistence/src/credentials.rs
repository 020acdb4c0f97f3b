//! MCP sign-in credentials, encrypted at rest: the OAuth tokens a person's sign-in to a
//! remote MCP server left, one row per agent, server URL and issuer
//! (`mcp_credentials`), and the dynamic client registrations reused per issuer and
//! redirect URI (`mcp_oauth_clients`).
//!
//! What a page may show (server, account, scopes, expiry, when and how the sign-in
//! happened) is plaintext; the access and refresh tokens, the token type, the client id
//! and any client secret exist in the database only sealed ([`seal`]: ChaCha20-Poly1305, a random nonce
//! per seal, associated data binding the ciphertext to its row and key id) under a
//! [`SecretsKey`] that is not in the database. Each operation is handed the
//! [`Keyring`]; the store keeps no key.
//!
//! Where the key comes from is the caller's choice: with a shared database (PostgreSQL,
//! replicas) every replica is given the same key file ([`SecretsKey::from_file`]); the
//! embedded default may generate one into its data directory
//! ([`SecretsKey::load_or_create`]).
//!
//! Rotation: make a new key file; give every replica a [`Keyring`] of the new key as
//! current and the old one as previous ([`Keyring::with_previous`]), so whatever either
//! sealed opens; call [`Store::rekey_credentials`] once, which reseals every row under
//! the current key; then drop the old key. A row the keyring cannot open is an error in
//! words ([`StoreError::CredentialsUnreadable`]) and is left exactly as it was.
//!
//! Deleting an agent deletes its credentials (the foreign key cascades on both backends);
//! rotating its token keeps them.
//!
//! Must never: write a secret other than sealed, print one (`Debug` of every type here
//! shows none), or lose a row it cannot open.

mod keys;
mod records;
pub(crate) mod seal;

use chrono::Utc;
use diesel::prelude::*;
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel::upsert::excluded;
use serde::{Deserialize, Serialize};

pub use keys::{
    KeyId, Keyring, SECRETS_KEY_BYTES, SECRETS_KEY_FILE_NAME, SecretsKey, SecretsKeyError,
};
pub use records::{CredentialSecrets, CredentialSummary, McpCredential, OAuthClient, SecretString};
use seal::{OpenError, Purpose, Sealed};

use crate::audit::sign_in::SignInEvent;
use crate::audit::{self, AuditVia, SignInAuditStatus};
use crate::db::{Tx, on_backend};
use crate::error::StoreError;
use crate::ids::AgentId;
use crate::schema::{mcp_credentials, mcp_oauth_clients};
use crate::sql_types::DbTime;
use crate::store::Store;

/// Longest server URL, issuer or redirect URI.
const MAX_URL_BYTES: usize = 2048;
/// Longest server name, account or client id.
const MAX_NAME_BYTES: usize = 1024;
/// Longest scope list.
const MAX_SCOPES_BYTES: usize = 4096;
/// Longest `signed_in_via`.
const MAX_VIA_BYTES: usize = 128;
/// Why the agent forgets a credential, as the audit log records it: the only reason it
/// does.
const REFUSED_REFRESH: &str = "the authorization server refused the refresh";
/// Longest sealed secret, its 16-byte tag included (the columns' CHECK).
pub(crate) const MAX_SEALED_BYTES: usize = 65536;
/// Bytes the AEAD adds to a plaintext.
pub(crate) const TAG_BYTES: usize = 16;

/// The sealed plaintext of a credential.
#[derive(Serialize, Deserialize)]
struct SecretsPlaintext {
    access_token: String,
    refresh_token: Option<String>,
    token_type: String,
    client_secret: Option<String>,
    /// Absent from rows sealed before the client id was kept.
    #[serde(default)]
    client_id: Option<String>,
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = mcp_credentials)]
#[cfg_attr(
    all(feature = "postgres", feature = "sqlite"),
    diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))
)]
struct SummaryRow {
    server_name: String,
    server_url: String,
    issuer: String,
    account: Option<String>,
    scopes: String,
    access_expires_at: Option<DbTime>,
    signed_in_at: DbTime,
    signed_in_via: String,
}

impl From<SummaryRow> for CredentialSummary {
    fn from(row: SummaryRow) -> Self {
        Self {
            server_name: row.server_name,
            server_url: row.server_url,
            issuer: row.issuer,
            account: row.account,
            scopes: row.scopes,
            access_expires_at: row.access_expires_at.map(|t| t.0),
            signed_in_at: row.signed_in_at.0,
            signed_in_via: row.signed_in_via,
        }
    }
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = mcp_credentials)]
#[cfg_attr(
    all(feature = "postgres", feature = "sqlite"),
    diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))
)]
struct SealedRow {
    key_id: String,
    nonce: Vec<u8>,
    ciphertext: Vec<u8>,
}

impl From<SealedRow> for Sealed {
    fn from(row: SealedRow) -> Self {
        Self {
            key_id: row.key_id,
            nonce: row.nonce,
            ciphertext: row.ciphertext,
        }
    }
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = mcp_oauth_clients)]
#[cfg_attr(
    all(feature = "postgres", feature = "sqlite"),
    diesel(check_for_backend(diesel::pg::Pg, diesel::sqlite::Sqlite))
)]
struct ClientRow {
    issuer: String,
    redirect_uri: String,
    client_id: String,
    key_id: Option<String>,
    nonce: Option<Vec<u8>>,
    client_secret_ciphertext: Option<Vec<u8>>,
    created_at: DbTime,
}

impl ClientRow {
    fn sealed(&self) -> Option<Sealed> {
        match (&self.key_id, &self.nonce, &self.client_secret_ciphertext) {
            (Some(key_id), Some(nonce), Some(ciphertext)) => Some(Sealed {
                key_id: key_id.clone(),
                nonce: nonce.clone(),
                ciphertext: ciphertext.clone(),
            }),
            _ => None,
        }
    }
}

/// The plaintext part of every credential `agent` holds, by server name, URL and issuer,
/// within `tx` (the agent's context reads them with its snapshot).
pub(crate) fn summaries_in(
    tx: &mut Tx<'_>,
    agent: AgentId,
) -> Result<Vec<CredentialSummary>, StoreError> {
    let rows: Vec<SummaryRow> = on_backend!(tx, |c| mcp_credentials::table
        .filter(mcp_credentials::agent_id.eq(agent))
        .order((
            mcp_credentials::server_name,
            mcp_credentials::server_url,
            mcp_credentials::issuer,
        ))
        .select(SummaryRow::as_select())
        .load(c))?;
    Ok(rows.into_iter().map(CredentialSummary::from).collect())
}

impl Store {
    /// Keeps `credential` for `agent`, sealed under the keyring's current key: a new row,
    /// or in place of the one with the same server URL and issuer (a refresh, a second
    /// sign-in). [`StoreError::AgentNotFound`] for an unknown agent;
    /// [`StoreError::InvalidInput`] for a field out of bounds, before any database work.
    pub async fn save_credential(
        &self,
        agent: AgentId,
        credential: &McpCredential,
        keyring: &Keyring,
    ) -> Result<(), StoreError> {
        let plaintext = check_credential(credential)?;
        let summary = credential.summary.clone();
        let sealed = seal_credential(keyring, agent, &summary, &plaintext)?;
        self.with_conn(move |conn, _| {
            conn.single_statement(|tx| upsert_credential(tx, agent, &summary, &sealed))
        })
        .await
    }

    /// The credentials `agent` holds for `server_url` through `issuer`, opened with
    /// `keyring`; `None` when there are none. [`StoreError::CredentialsUnreadable`] when
    /// the keyring cannot open them (the row is left as it is).
    pub async fn credential(
        &self,
        agent: AgentId,
        server_url: &str,
        issuer: &str,
        keyring: &Keyring,
    ) -> Result<Option<McpCredential>, StoreError> {
        let (url, iss) = (server_url.to_owned(), issuer.to_owned());
        let found = self
            .with_conn(move |conn, _| {
                conn.single_statement(|tx| {
                    // The selection is typed by its backend, so it is built in each arm.
                    Ok(on_backend!(tx, |c| mcp_credentials::table
                        .find((agent, &url, &iss))
                        .select((SummaryRow::as_select(), SealedRow::as_select()))
                        .first(c)
                        .optional())?)
                })
            })
            .await?;
        let Some((summary, sealed)) = found else {
            return Ok(None);
        };
        let summary = CredentialSummary::from(summary);
        let secrets = open_credential(keyring, agent, &summary, &sealed.into())?;
        Ok(Some(McpCredential { summary, secrets }))
    }

    /// The plaintext part of every credential `agent` holds, by server name, URL and
    /// issuer; no secret is read. Empty for an agent without any (or unknown).
    pub async fn credential_summaries(
        &self,
        agent: AgentId,
    ) -> Result<Vec<CredentialSummary>, StoreError> {
        self.with_conn(move |conn, _| conn.single_statement(|tx| summaries_in(tx, agent)))
            .await
    }

    /// Every credential `agent` holds, opened with `keyring`, by server name, URL and
    /// issuer (what a restarted agent is handed back). Empty for an agent without any (or
    /// unknown). [`StoreError::CredentialsUnreadable`] when the keyring cannot open one of
    /// them: nothing is answered and every row is left as it is.
    pub async fn agent_credentials(
        &self,
        agent: AgentId,
        keyring: &Keyring,
    ) -> Result<Vec<McpCredential>, StoreError> {
        let rows: Vec<(SummaryRow, SealedRow)> = self
            .with_conn(move |conn, _| {
                conn.single_statement(|tx| {
                    Ok(on_backend!(tx, |c| mcp_credentials::table
                        .filter(mcp_credentials::agent_id.eq(agent))
                        .order((
                            mcp_credentials::server_name,
                            mcp_credentials::server_url,
                            mcp_credentials::issuer,
                        ))
                        .select((SummaryRow::as_select(), SealedRow::as_select()))
                        .load(c))?)
                })
            })
            .await?;
        rows.into_iter()
            .map(|(summary, sealed)| {
                let summary = CredentialSummary::from(summary);
                let secrets = open_credential(keyring, agent, &summary, &sealed.into())?;
                Ok(McpCredential { summary, secrets })
            })
            .collect()
    }

    /// Deletes every credential `agent` holds for the server it names `server_name`,
    /// whatever its URL or issuer (signing the server out), and answers how many. When
    /// there were any, the same transaction audits them `forgotten` as asked for `via`:
    /// `api_token`, `chat:<chat id>` (that chat's page), or `agent` (the agent lost the
    /// credential: the authorization server refused its refresh, the reason recorded).
    /// [`StoreError::InvalidInput`] for another `via`, before any database work.
    pub async fn forget_server_credentials(
        &self,
        agent: AgentId,
        server_name: &str,
        via: &str,
    ) -> Result<u64, StoreError> {
        let asked_via = AuditVia::parse(via).ok_or_else(|| {
            StoreError::InvalidInput(format!(
                "via must be api_token, chat:<chat id> or agent, not {via:?}"
            ))
        })?;
        let reason = (asked_via == AuditVia::Agent).then_some(REFUSED_REFRESH);
        let name = server_name.to_owned();
        self.with_conn(move |conn, _| {
            conn.write(|tx| {
                let delete = diesel::delete(
                    mcp_credentials::table
                        .filter(mcp_credentials::agent_id.eq(agent))
                        .filter(mcp_credentials::server_name.eq(&name)),
                );
                let forgotten = on_backend!(tx, |c| delete.execute(c))? as u64;
                if forgotten > 0 {
                    let event = SignInEvent {
                        agent,
                        sign_in: None,
                        server: &name,
                        status: SignInAuditStatus::Forgotten,
                        via: asked_via,
                        issuer: None,
                        reason,
                    };
                    audit::sign_in::record(tx, &event)?;
                }
                Ok(forgotten)
            })
        })
        .await
    }

    /// Deletes the credentials `agent` holds for `server_url` through `issuer` (signing
    /// out); false when there were none.
    pub async fn forget_credential(
        &self,
        agent: AgentId,
        server_url: &str,
        issuer: &str,
    ) -> Result<bool, StoreError> {
        let (url, iss) = (server_url.to_owned(), issuer.to_owned());
        self.with_conn(move |conn, _| {
            conn.single_statement(|tx| {
                let delete = diesel::delete(mcp_credentials::table.find((agent, &url, &iss)));
                Ok(on_backend!(tx, |c| delete.execute(c))? > 0)
            })
        })
        .await
    }

    /// Key rotation's last step: reseals, under the keyring's current key, every
    /// credential and client secret sealed under another key of the ring, in one
    /// transaction, and answers how many rows it resealed (both tables). A row the
    /// keyring cannot open fails the whole call with
    /// [`StoreError::CredentialsUnreadable`] naming it, and nothing is changed.
    pub async fn rekey_credentials(&self, keyring: &Keyring) -> Result<u64, StoreError> {
        let keyring = keyring.clone();
        self.with_conn(move |conn, _| conn.write(|tx| rekey(tx, &keyring)))
            .await
    }

    /// Keeps a client registration, its secret sealed under the keyring's current key, in
    /// place of any other for the same issuer and redirect URI (the newest registration
    /// is the one reused). [`StoreError::InvalidInput`] for a field out of bounds.
    pub async fn save_oauth_client(
        &self,
        client: &OAuthClient,
        keyring: &Keyring,
    ) -> Result<(), StoreError> {
        check_client(client)?;
        let sealed = client
            .client_secret
            .as_ref()
            .map(|secret| {
                seal::seal(
                    keyring,
                    Purpose::OAuthClientSecret,
                    &client_row(&client.issuer, &client.redirect_uri, &client.client_id),
                    secret.expose().as_bytes(),
                )
            })
            .transpose()?;
        let row = ClientRow {
            issuer: client.issuer.clone(),
            redirect_uri: client.redirect_uri.clone(),
            client_id: client.client_id.clone(),
            key_id: sealed.as_ref().map(|s| s.key_id.clone()),
            nonce: sealed.as_ref().map(|s| s.nonce.clone()),
            client_secret_ciphertext: sealed.map(|s| s.ciphertext),
            created_at: DbTime(client.created_at),
        };
        self.with_conn(move |conn, _| conn.single_statement(|tx| upsert_client(tx, &row)))
            .await
    }

    /// The client registered with `issuer` for `redirect_uri`, its secret opened with
    /// `keyring`; `None` when there is none. [`StoreError::CredentialsUnreadable`] when
    /// the keyring cannot open the secret (the row is left as it is).
    pub async fn oauth_client(
        &self,
        issuer: &str,
        redirect_uri: &str,
        keyring: &Keyring,
    ) -> Result<Option<OAuthClient>, StoreError> {
        let (iss, uri) = (issuer.to_owned(), redirect_uri.to_owned());
        let found = self
            .with_conn(move |conn, _| {
                conn.single_statement(|tx| {
                    Ok(on_backend!(tx, |c| mcp_oauth_clients::table
                        .find((&iss, &uri))
                        .select(ClientRow::as_select())
                        .first(c)
                        .optional())?)
                })
            })
            .await?;
        let Some(row) = found else {
            return Ok(None);
        };
        let client_secret = row
            .sealed()
            .map(|sealed| open_client_secret(keyring, &row, &sealed))
            .transpose()?;
        Ok(Some(OAuthClient {
            issuer: row.issuer,
            redirect_uri: row.redirect_uri,
            client_id: row.client_id,
            client_secret,
            created_at: row.created_at.0,
        }))
    }
}

/// Writes `agent`'s credential (sealed by [`seal_credential`]) in place of the one with
/// the same server URL and issuer, if any. [`StoreError::AgentNotFound`] for an unknown
/// agent.
pub(crate) fn upsert_credential(
    tx: &mut Tx<'_>,
    agent: AgentId,
    summary: &CredentialSummary,
    sealed: &Sealed,
) -> Result<(), StoreError> {
    use mcp_credentials::dsl as m;
    let upsert = diesel::insert_into(m::mcp_credentials)
        .values((
            m::agent_id.eq(agent),
            m::server_name.eq(&summary.server_name),
            m::server_url.eq(&summary.server_url),
            m::issuer.eq(&summary.issuer),
            m::account.eq(&summary.account),
            m::scopes.eq(&summary.scopes),
            m::access_expires_at.eq(summary.access_expires_at.map(DbTime)),
            m::signed_in_at.eq(DbTime(summary.signed_in_at)),
            m::signed_in_via.eq(&summary.signed_in_via),
            m::updated_at.eq(DbTime(Utc::now())),
            m::key_id.eq(&sealed.key_id),
            m::nonce.eq(&sealed.nonce),
            m::ciphertext.eq(&sealed.ciphertext),
        ))
        .on_conflict((m::agent_id, m::server_url, m::issuer))
        .do_update()
        .set((
            m::server_name.eq(excluded(m::server_name)),
            m::account.eq(excluded(m::account)),
            m::scopes.eq(excluded(m::scopes)),
            m::access_expires_at.eq(excluded(m::access_expires_at)),
            m::signed_in_at.eq(excluded(m::signed_in_at)),
            m::signed_in_via.eq(excluded(m::signed_in_via)),
            m::updated_at.eq(excluded(m::updated_at)),
            m::key_id.eq(excluded(m::key_id)),
            m::nonce.eq(excluded(m::nonce)),
            m::ciphertext.eq(excluded(m::ciphertext)),
        ));
    match on_backend!(tx, |c| upsert.execute(c)) {
        Ok(_) => Ok(()),
        Err(DieselError::DatabaseError(DatabaseErrorKind::ForeignKeyViolation, _)) => {
            Err(StoreError::AgentNotFound(agent))
        }
        Err(other) => Err(other.into()),
    }
}

fn upsert_client(tx: &mut Tx<'_>, row: &ClientRow) -> Result<(), StoreError> {
    use mcp_oauth_clients::dsl as o;
    let upsert = diesel::insert_into(o::mcp_oauth_clients)
        .values((
            o::issuer.eq(&row.issuer),
            o::redirect_uri.eq(&row.redirect_uri),
            o::client_id.eq(&row.client_id),
            o::key_id.eq(&row.key_id),
            o::nonce.eq(&row.nonce),
            o::client_secret_ciphertext.eq(&row.client_secret_ciphertext),
            o::created_at.eq(row.created_at),
        ))
        .on_conflict((o::issuer, o::redirect_uri))
        .do_update()
        .set((
            o::client_id.eq(excluded(o::client_id)),
            o::key_id.eq(excluded(o::key_id)),
            o::nonce.eq(excluded(o::nonce)),
            o::client_secret_ciphertext.eq(excluded(o::client_secret_ciphertext)),
            o::created_at.eq(excluded(o::created_at)),
        ));
    on_backend!(tx, |c| upsert.execute(c))?;
    Ok(())
}

/// Reseals every row of both tables sealed under a key other than the current one.
fn rekey(tx: &mut Tx<'_>, keyring: &Keyring) -> Result<u64, StoreError> {
    let current = keyring.current().id().to_string();
    let mut resealed = 0;

    use mcp_credentials::dsl as m;
    let rows: Vec<(AgentId, SummaryRow, SealedRow)> = on_backend!(tx, |c| m::mcp_credentials
        .filter(m::key_id.ne(&current))
        .select((m::agent_id, SummaryRow::as_select(), SealedRow::as_select(),))
        .load(c))?;
    for (agent, summary, sealed) in rows {
        let summary = CredentialSummary::from(summary);
        let secrets = open_credential(keyring, agent, &summary, &sealed.into())?;
        let fresh = seal_credential(keyring, agent, &summary, &plaintext(&secrets)?)?;
        let update =
            diesel::update(m::mcp_credentials.find((agent, &summary.server_url, &summary.issuer)))
                .set((
                    m::key_id.eq(&fresh.key_id),
                    m::nonce.eq(&fresh.nonce),
                    m::ciphertext.eq(&fresh.ciphertext),
                ));
        resealed += on_backend!(tx, |c| update.execute(c))? as u64;
    }

    use mcp_oauth_clients::dsl as o;
    let rows: Vec<ClientRow> = on_backend!(tx, |c| o::mcp_oauth_clients
        .filter(o::key_id.ne(&current))
        .select(ClientRow::as_select())
        .load(c))?;
    for row in rows {
        let Some(sealed) = row.sealed() else {
            continue;
        };
        let secret = open_client_secret(keyring, &row, &sealed)?;
        let fresh = seal::seal(
            keyring,
            Purpose::OAuthClientSecret,
            &client_row(&row.issuer, &row.redirect_uri, &row.client_id),
            secret.expose().as_bytes(),
        )?;
        let update = diesel::update(o::mcp_oauth_clients.find((&row.issuer, &row.redirect_uri)))
            .set((
                o::key_id.eq(&fresh.key_id),
                o::nonce.eq(&fresh.nonce),
                o::client_secret_ciphertext.eq(&fresh.ciphertext),
            ));
        resealed += on_backend!(tx, |c| update.execute(c))? as u64;
    }
    Ok(resealed)
}

/// The row a client secret is sealed for.
fn client_row<'a>(issuer: &'a str, redirect_uri: &'a str, client_id: &'a str) -> [&'a str; 3] {
    [issuer, redirect_uri, client_id]
}

/// `credential` checked to fit its row, and its secrets' sealed plaintext: everything
/// that can refuse it before any database work.
pub(crate) fn check_credential(credential: &McpCredential) -> Result<Vec<u8>, StoreError> {
    check_summary(&credential.summary)?;
    plaintext(&credential.secrets)
}

/// Seals a credential's `plaintext` ([`check_credential`]) for `agent`'s row of `summary`
/// under the keyring's current key.
pub(crate) fn seal_credential(
    keyring: &Keyring,
    agent: AgentId,
    summary: &CredentialSummary,
    plaintext: &[u8],
) -> Result<Sealed, StoreError> {
    let agent_text = agent.to_string();
    let row = [agent_text.as_str(), &summary.server_url, &summary.issuer];
    seal::seal(keyring, Purpose::Credential, &row, plaintext)
}

/// The sealed plaintext of `secrets`, checked to fit the column.
fn plaintext(secrets: &CredentialSecrets) -> Result<Vec<u8>, StoreError> {
    if secrets.access_token.expose().is_empty() || secrets.token_type.is_empty() {
        return Err(StoreError::InvalidInput(
            "a credential needs an access token and a token type".into(),
        ));
    }
    if let Some(client_id) = &secrets.client_id {
        check_len("client_id", client_id, 1..=MAX_NAME_BYTES)?;
    }
    let json = serde_json::to_vec(&SecretsPlaintext {
        access_token: secrets.access_token.expose().to_owned(),
        refresh_token: secrets
            .refresh_token
            .as_ref()
            .map(|t| t.expose().to_owned()),
        token_type: secrets.token_type.clone(),
        client_secret: secrets
            .client_secret
            .as_ref()
            .map(|s| s.expose().to_owned()),
        client_id: secrets.client_id.clone(),
    })
    .expect("strings serialize");
    if json.len() + TAG_BYTES > MAX_SEALED_BYTES {
        return Err(StoreError::InvalidInput(format!(
            "a credential's tokens and secrets take {} bytes; at most {} fit",
            json.len(),
            MAX_SEALED_BYTES - TAG_BYTES
        )));
    }
    Ok(json)
}

fn open_credential(
    keyring: &Keyring,
    agent: AgentId,
    summary: &CredentialSummary,
    sealed: &Sealed,
) -> Result<CredentialSecrets, StoreError> {
    let subject = || {
        format!(
            "agent {agent} at {} (issuer {})",
            summary.server_url, summary.issuer
        )
    };
    let agent_text = agent.to_string();
    let row = [agent_text.as_str(), &summary.server_url, &summary.issuer];
    let plaintext = seal::open(keyring, Purpose::Credential, &row, sealed)
        .map_err(|e| unreadable(subject(), keyring, sealed, e))?;
    let parsed: SecretsPlaintext = serde_json::from_slice(&plaintext).map_err(|e| {
        // serde_json's message names a position and a kind, never the input.
        StoreError::Corrupt(format!(
            "the sealed credentials for {} are not what was sealed: {e}",
            subject()
        ))
    })?;
    Ok(CredentialSecrets {
        access_token: parsed.access_token.into(),
        refresh_token: parsed.refresh_token.map(SecretString::from),
        token_type: parsed.token_type,
        client_secret: parsed.client_secret.map(SecretString::from),
        client_id: parsed.client_id,
    })
}

fn open_client_secret(
    keyring: &Keyring,
    row: &ClientRow,
    sealed: &Sealed,
) -> Result<SecretString, StoreError> {
    let subject = || {
        format!(
            "the OAuth client {} of {} (redirect URI {})",
            row.client_id, row.issuer, row.redirect_uri
        )
    };
    let plaintext = seal::open(
        keyring,
        Purpose::OAuthClientSecret,
        &client_row(&row.issuer, &row.redirect_uri, &row.client_id),
        sealed,
    )
    .map_err(|e| unreadable(subject(), keyring, sealed, e))?;
    String::from_utf8(plaintext)
        .map(SecretString::from)
        .map_err(|_| {
            StoreError::Corrupt(format!(
                "the sealed client secret of {} is not text",
                subject()
            ))
        })
}

/// The error for a sealed row `keyring` cannot open, saying which key sealed it.
pub(crate) fn unreadable(
    subject: String,
    keyring: &Keyring,
    sealed: &Sealed,
    error: OpenError,
) -> StoreError {
    let detail = match error {
        OpenError::UnknownKey => format!(
            "they were sealed under key {}, and the keys given are {}",
            sealed.key_id,
            keyring.describe()
        ),
        OpenError::Rejected => format!(
            "they do not open under key {}: the row was altered or copied from another row",
            sealed.key_id
        ),
    };
    StoreError::CredentialsUnreadable { subject, detail }
}

/// `text`'s length is within `range`, else [`StoreError::InvalidInput`] naming `field`.
pub(crate) fn check_len(
    field: &str,
    text: &str,
    range: std::ops::RangeInclusive<usize>,
) -> Result<(), StoreError> {
    if range.contains(&text.len()) {
        return Ok(());
    }
    Err(StoreError::InvalidInput(format!(
        "{field} must be {}..={} bytes, not {}",
        range.start(),
        range.end(),
        text.len()
    )))
}

fn check_summary(summary: &CredentialSummary) -> Result<(), StoreError> {
    check_len("server_name", &summary.server_name, 1..=MAX_NAME_BYTES)?;
    check_len("server_url", &summary.server_url, 1..=MAX_URL_BYTES)?;
    check_len("issuer", &summary.issuer, 1..=MAX_URL_BYTES)?;
    if let Some(account) = &summary.account {
        check_len("account", account, 0..=MAX_NAME_BYTES)?;
    }
    check_len("scopes", &summary.scopes, 0..=MAX_SCOPES_BYTES)?;
    check_len("signed_in_via", &summary.signed_in_via, 1..=MAX_VIA_BYTES)
}

fn check_client(client: &OAuthClient) -> Result<(), StoreError> {
    check_len("issuer", &client.issuer, 1..=MAX_URL_BYTES)?;
    check_len("redirect_uri", &client.redirect_uri, 1..=MAX_URL_BYTES)?;
    check_len("client_id", &client.client_id, 1..=MAX_NAME_BYTES)?;
    if let Some(secret) = &client.client_secret {
        // Its length only: the message never shows the secret.
        check_len(
            "client_secret",
            secret.expose(),
            1..=MAX_SEALED_BYTES - TAG_BYTES,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plaintext_is_bounded_and_needs_a_token() {
        let secrets = |access: &str| CredentialSecrets {
            access_token: access.into(),
            refresh_token: None,
            token_type: "Bearer".into(),
            client_secret: None,
            client_id: Some("client".into()),
        };
        assert!(plaintext(&secrets("t")).is_ok());
        let error = plaintext(&secrets("")).unwrap_err();
        assert!(matches!(error, StoreError::InvalidInput(_)), "{error:?}");
        let huge = "x".repeat(MAX_SEALED_BYTES);
        let error = plaintext(&secrets(&huge)).unwrap_err().to_string();
        assert!(error.contains("at most"), "{error}");
        assert!(!error.contains("xxxx"), "{error}");
        let mut empty_client = secrets("t");
        empty_client.client_id = Some(String::new());
        let error = plaintext(&empty_client).unwrap_err().to_string();
        assert!(error.contains("client_id"), "{error}");
    }

    #[test]
    fn secrets_sealed_before_the_client_id_was_kept_still_open() {
        let keyring = Keyring::new(SecretsKey::from_bytes([7; SECRETS_KEY_BYTES]));
        let agent = AgentId::new_random();
        let summary = CredentialSummary {
            server_name: "docs".into(),
            server_url: "https://mcp.example/".into(),
            issuer: "https://as.example/".into(),
            account: None,
            scopes: String::new(),
            access_expires_at: None,
            signed_in_at: Utc::now(),
            signed_in_via: "api_token".into(),
        };
        let old = br#"{"access_token":"a","refresh_token":null,"token_type":"Bearer","client_secret":null}"#;
        let sealed = seal_credential(&keyring, agent, &summary, old).unwrap();
        let opened = open_credential(&keyring, agent, &summary, &sealed).unwrap();
        assert_eq!(opened.access_token.expose(), "a");
        assert_eq!(opened.client_id, None);

        let mut current = opened.clone();
        current.client_id = Some("client-1".into());
        let sealed = seal_credential(&keyring, agent, &summary, &plaintext(&current).unwrap());
        let reopened = open_credential(&keyring, agent, &summary, &sealed.unwrap()).unwrap();
        assert_eq!(reopened, current);
    }
}
