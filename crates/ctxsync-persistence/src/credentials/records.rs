//! The records of a sign-in as callers see them: the plaintext summary a page may show,
//! the secrets (only ever sealed in the database), and a client registration.
//!
//! Must never: show a secret in `Debug` ([`SecretString`] prints `<redacted>`).

use std::fmt;

use chrono::{DateTime, Utc};

/// Text that must never print: `Debug` shows `SecretString(<redacted>)`, there is no
/// `Display` and no `Serialize`; [`Self::expose`] hands it out where it is used.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretString(String);

impl SecretString {
    /// Wraps `text`.
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The secret text.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretString(<redacted>)")
    }
}

impl From<String> for SecretString {
    fn from(text: String) -> Self {
        Self(text)
    }
}

impl From<&str> for SecretString {
    fn from(text: &str) -> Self {
        Self(text.to_owned())
    }
}

/// The secret part of a sign-in, stored only sealed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredentialSecrets {
    /// The OAuth access token.
    pub access_token: SecretString,
    /// The refresh token, when the server issued one.
    pub refresh_token: Option<SecretString>,
    /// The token type the server named (`Bearer`, `DPoP`).
    pub token_type: String,
    /// The client secret the tokens were obtained with, when the client has one.
    pub client_secret: Option<SecretString>,
    /// The OAuth client id the tokens were issued to (a refresh needs it); `None` for
    /// credentials kept before the client id was.
    pub client_id: Option<String>,
}

/// The plaintext part of a sign-in: what a page or an API answer may show. Holds no
/// secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CredentialSummary {
    /// The MCP server's name in the agent's configuration.
    pub server_name: String,
    /// The MCP server's URL (part of the credential's identity).
    pub server_url: String,
    /// The authorization server that issued the tokens (part of the identity).
    pub issuer: String,
    /// The account signed in as, when the server said.
    pub account: Option<String>,
    /// The granted scopes, space-separated.
    pub scopes: String,
    /// When the access token expires, when the server said.
    pub access_expires_at: Option<DateTime<Utc>>,
    /// When the person signed in.
    pub signed_in_at: DateTime<Utc>,
    /// How the sign-in was asked for: `api_token`, or the chat it came from.
    pub signed_in_via: String,
}

/// One sign-in's credentials: what [`crate::Store::save_credential`] keeps and
/// [`crate::Store::credential`] answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpCredential {
    /// The plaintext part.
    pub summary: CredentialSummary,
    /// The sealed part.
    pub secrets: CredentialSecrets,
}

/// A dynamic client registration (RFC 7591) with an authorization server, reused for
/// every sign-in through that issuer and redirect URI. (`ctxsync_mcp_fixture::OAuthClient`
/// is another thing: a client the test authorization server knows.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OAuthClient {
    /// The authorization server (part of the identity).
    pub issuer: String,
    /// The redirect URI registered (part of the identity).
    pub redirect_uri: String,
    /// The client id the server assigned.
    pub client_id: String,
    /// The client secret the server assigned, if any; stored only sealed.
    pub client_secret: Option<SecretString>,
    /// When the client was registered.
    pub created_at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_strings_never_print() {
        let secrets = CredentialSecrets {
            access_token: "canary-access".into(),
            refresh_token: Some("canary-refresh".into()),
            token_type: "Bearer".into(),
            client_secret: Some(SecretString::new("canary-client")),
            client_id: Some("visible-client".into()),
        };
        let debug = format!("{secrets:?} {:#?}", secrets);
        assert!(!debug.contains("canary"), "{debug}");
        assert!(debug.contains("SecretString(<redacted>)"), "{debug}");
        // The client id is no secret: it shows.
        assert!(debug.contains("visible-client"), "{debug}");
        assert_eq!(secrets.access_token.expose(), "canary-access");
    }
}
