//! The agent's side of signing in to an HTTP MCP server (OAuth 2.1, through rmcp's `auth`
//! feature). Two ways: an entry's `oauth` block with `"grant": "client_credentials"` signs
//! in on every connect with no person ([`client_credentials`]); otherwise a person signs
//! in with the authorization code, which the control plane relays: the agent makes every
//! OAuth request — the start ([`authorize::begin`]), the code's exchange
//! ([`authorize::finish`]) and each refresh ([`renew`]) — and holds the credential in
//! memory only ([`SignIns`]); the control plane keeps it sealed and hands it back after a
//! restart.
//!
//! Must never: put a secret or token into a sentence or a log (every sentence is sanitized
//! with the engine's secrets, which include each held credential's tokens and client
//! secret), write a credential to disk, or follow metadata to a link-local or reserved
//! address (rmcp refuses those).

pub(crate) mod authorize;
mod client_credentials;
mod held;
mod renew;
mod token;

use std::sync::Arc;

use rmcp::transport::auth::AuthError;

pub(crate) use client_credentials::client_credentials_token;
pub use held::SignInUpdate;
pub(crate) use held::SignIns;
pub(crate) use renew::{
    AfterRefusal, LiveRenewal, after_refusal, renew_live, renewal_at, token_for_connect,
};

use crate::{
    config::{OAuthGrant, PreregisteredClient, ServerEntry, TransportConfig, quote_name},
    failure,
    sanitize::{SecretSet, sanitize_diagnostic},
};

/// What the engine knows of a server a person signs in to: its entry as the file holds it
/// now, the challenge of its last refusal, and the secrets its sentences are cleaned of.
/// (No `Debug`: the entry holds secrets.)
pub(crate) struct Target {
    pub entry: ServerEntry,
    pub challenge: Option<String>,
    pub secrets: Arc<SecretSet>,
}

impl Target {
    /// The server's URL and the pre-registered client of its `oauth` block, when it is an
    /// HTTP server a person signs in to; else why not, in words.
    pub(crate) fn http(&self) -> Result<(&str, Option<&PreregisteredClient>), String> {
        let name = quote_name(&self.entry.name);
        match &self.entry.transport {
            TransportConfig::Stdio { .. } => Err(format!(
                "the server {name} runs as a process on stdio; only an HTTP server can be signed in to"
            )),
            TransportConfig::Http { oauth, .. }
                if oauth
                    .as_ref()
                    .is_some_and(|client| client.grant == OAuthGrant::ClientCredentials) =>
            {
                Err(format!(
                    "the server {name} signs in with the client credentials in its \"oauth\" block; no person needs to sign in"
                ))
            }
            TransportConfig::Http { url, oauth, .. } => Ok((url, oauth.as_ref())),
        }
    }

    /// `text` as it may leave the engine: without the engine's secrets or a held token.
    pub(crate) fn sanitize(&self, text: &str, sign_ins: &SignIns) -> String {
        let mut secrets = (*self.secrets).clone();
        secrets.extend(&sign_ins.secrets());
        sanitize_diagnostic(text, &secrets)
    }
}

/// Whether a held sign-in is sent to `entry`'s server: an HTTP entry that neither signs in
/// with client credentials nor sends its own `Authorization` header.
pub(crate) fn applies(entry: &ServerEntry) -> bool {
    match &entry.transport {
        TransportConfig::Stdio { .. } => false,
        TransportConfig::Http { headers, oauth, .. } => {
            !oauth
                .as_ref()
                .is_some_and(|client| client.grant == OAuthGrant::ClientCredentials)
                && !headers
                    .keys()
                    .any(|name| name.eq_ignore_ascii_case("authorization"))
        }
    }
}

/// The sentence for a server whose held sign-in could not be renewed and was dropped: the
/// server needs a person again.
pub(crate) fn lapsed_words(url: &str, why: &str) -> String {
    format!(
        "the server at {url} answered 401 Unauthorized and its sign-in could not be renewed ({why}): a person must sign in again (the Sign in button on the chat's page, or the chat API's sign-in route)"
    )
}

/// rmcp's error as a person reads it: its own sentence, and the innermost cause of a
/// failed request (which says what the network did).
fn in_words(error: &AuthError) -> String {
    let mut text = error.to_string();
    let cause = failure::innermost(error);
    if !text.contains(&cause) {
        text.push_str(": ");
        text.push_str(&cause);
    }
    text
}

/// Now, in Unix seconds (what credentials' expiry is written in).
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX)
        })
}
