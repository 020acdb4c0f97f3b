//! A person's sign-in to an HTTP MCP server (OAuth 2.1 authorization code) as both wings
//! see it: the start the agent makes ([`SignInStart`]) and the credential the exchange
//! gives ([`SignInCredential`]). The agent makes every OAuth request; the control plane
//! keeps what these records carry, sealed where it is secret.
//!
//! `Debug` of either shows no token, secret, verifier or URL query.

use std::fmt;

/// The start of an authorization-code sign-in, made by the agent for one server.
#[derive(Clone, PartialEq, Eq)]
pub struct SignInStart {
    /// Where the person signs in: the authorization server's URL with the request's
    /// parameters (`client_id`, `redirect_uri`, `state`, PKCE S256, `resource`, `scope`).
    pub authorization_url: String,
    /// The request's `state` parameter: the callback names the sign-in by it.
    pub state: String,
    /// The authorization server's issuer, when its metadata named one.
    pub issuer: Option<String>,
    /// The MCP server's URL (the token's resource).
    pub server_url: String,
    /// What the agent needs back with the code (the PKCE verifier, the client): opaque
    /// to the control plane, which keeps it sealed and hands it back unchanged.
    pub pending: String,
}

impl fmt::Debug for SignInStart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SignInStart")
            .field("issuer", &self.issuer)
            .field("server_url", &self.server_url)
            .finish_non_exhaustive()
    }
}

/// The tokens one sign-in gave for one HTTP MCP server, and the client they were issued
/// to (a refresh needs it). On the agent's stream it travels as the generated
/// `ctxsync_protocol::v1::SignInCredential`.
#[derive(Clone, PartialEq, Eq)]
pub struct SignInCredential {
    /// The MCP server's URL.
    pub server_url: String,
    /// The authorization server that issued the tokens.
    pub issuer: String,
    /// The OAuth client id the tokens were issued to.
    pub client_id: String,
    /// That client's secret, when it has one.
    pub client_secret: Option<String>,
    /// The access token, sent as the bearer.
    pub access_token: String,
    /// The refresh token, when the server issued one.
    pub refresh_token: Option<String>,
    /// The token type the server named (`Bearer`).
    pub token_type: String,
    /// When the access token expires (Unix seconds), when the server said.
    pub expires_at: Option<i64>,
    /// The scopes granted.
    pub scopes: Vec<String>,
    /// The account signed in as, when the token response named one.
    pub account: Option<String>,
}

impl fmt::Debug for SignInCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SignInCredential")
            .field("server_url", &self.server_url)
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("token_type", &self.token_type)
            .field("expires_at", &self.expires_at)
            .field("scopes", &self.scopes)
            .field("account", &self.account)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_no_secret() {
        let credential = SignInCredential {
            server_url: "https://mcp.example/mcp".into(),
            issuer: "https://as.example".into(),
            client_id: "client".into(),
            client_secret: Some("canary-secret".into()),
            access_token: "canary-access".into(),
            refresh_token: Some("canary-refresh".into()),
            token_type: "Bearer".into(),
            expires_at: Some(1),
            scopes: vec!["read".into()],
            account: None,
        };
        let start = SignInStart {
            authorization_url: "https://as.example/authorize?state=canary-state".into(),
            state: "canary-state".into(),
            issuer: None,
            server_url: "https://mcp.example/mcp".into(),
            pending: "canary-verifier".into(),
        };
        let debug = format!("{credential:?} {start:#?}");
        assert!(!debug.contains("canary"), "{debug}");
        assert!(debug.contains("https://as.example"), "{debug}");
    }
}
