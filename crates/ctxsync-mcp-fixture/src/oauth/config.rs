//! What the OAuth mode offers: flags of the binary and fields of the builder at once.

use std::time::Duration;

use clap::{ArgAction, Args};

/// The client authentication methods the token endpoint accepts unless told otherwise.
pub(crate) const DEFAULT_AUTH_METHODS: [&str; 3] =
    ["client_secret_basic", "client_secret_post", "none"];

/// Default access-token lifetime: long enough that no test sees one expire by accident.
const DEFAULT_TOKEN_TTL_SECS: &str = "3600";

/// How the fixture's authorization server behaves (with `--oauth`, or
/// [`FixtureConfig::oauth`](crate::FixtureConfig::oauth)).
///
/// `OAuthConfig::default()` is a server that registers clients dynamically, issues
/// one-hour access tokens with rotating refresh tokens, requires no scope and accepts
/// every client authentication method. Lifetimes run on tokio's clock, so a test that
/// pauses and advances it sees tokens expire without waiting.
#[derive(Debug, Clone, PartialEq, Eq, Args)]
pub struct OAuthConfig {
    /// OAuth mode: access tokens live this many seconds (`expires_in`; whole seconds).
    #[arg(
        id = "oauth_token_ttl",
        long = "oauth-token-ttl-secs",
        value_name = "SECS",
        value_parser = parse_secs,
        default_value = DEFAULT_TOKEN_TTL_SECS,
        requires = "oauth"
    )]
    pub token_ttl: Duration,
    /// OAuth mode: issue no refresh tokens (`--oauth-no-refresh` clears it).
    #[arg(
        id = "oauth_refresh",
        long = "oauth-no-refresh",
        action = ArgAction::SetFalse,
        requires = "oauth"
    )]
    pub refresh_tokens: bool,
    /// OAuth mode: offer dynamic client registration at `/register`
    /// (`--oauth-no-registration` clears it).
    #[arg(
        id = "oauth_registration",
        long = "oauth-no-registration",
        action = ArgAction::SetFalse,
        requires = "oauth"
    )]
    pub registration: bool,
    /// OAuth mode: advertise `client_id_metadata_document_supported` and accept any
    /// `https` URL as a client id (the document is not fetched).
    #[arg(id = "oauth_cimd", long = "oauth-cimd", requires = "oauth")]
    pub client_id_metadata_documents: bool,
    /// OAuth mode: a scope every MCP request's token must carry, named in the 401
    /// challenge and granted when a client asks for none (repeatable).
    #[arg(
        id = "oauth_required_scopes",
        long = "oauth-required-scope",
        value_name = "SCOPE",
        requires = "oauth"
    )]
    pub required_scopes: Vec<String>,
    /// OAuth mode: the `scopes_supported` of both metadata documents (repeatable); when
    /// any is given, a request for another scope (not required either) is refused.
    #[arg(
        id = "oauth_scopes_supported",
        long = "oauth-scope-supported",
        value_name = "SCOPE",
        requires = "oauth"
    )]
    pub scopes_supported: Vec<String>,
    /// OAuth mode: a client authentication method the token endpoint accepts and the
    /// metadata advertises: `client_secret_basic`, `client_secret_post` or `none`
    /// (repeatable; default all three).
    #[arg(
        id = "oauth_auth_methods",
        long = "oauth-auth-method",
        value_name = "METHOD",
        value_parser = ["client_secret_basic", "client_secret_post", "none"],
        default_values = DEFAULT_AUTH_METHODS,
        requires = "oauth"
    )]
    pub token_endpoint_auth_methods: Vec<String>,
    /// OAuth mode: a pre-registered client, `ID:SECRET` (confidential) or `ID` (public);
    /// it may use any redirect URI (repeatable).
    #[arg(
        id = "oauth_clients",
        long = "oauth-client",
        value_name = "ID[:SECRET]",
        value_parser = parse_client,
        requires = "oauth"
    )]
    pub clients: Vec<OAuthClient>,
    /// OAuth mode: the person refuses: `/authorize` redirects with `error=access_denied`.
    #[arg(id = "oauth_deny", long = "oauth-deny", requires = "oauth")]
    pub deny: bool,
    /// OAuth mode: put `iss` in the authorization response (RFC 9207) and advertise
    /// `authorization_response_iss_parameter_supported`.
    #[arg(id = "oauth_iss", long = "oauth-iss", requires = "oauth")]
    pub issuer_in_response: bool,
}

impl Default for OAuthConfig {
    fn default() -> Self {
        Self {
            token_ttl: Duration::from_secs(3600),
            refresh_tokens: true,
            registration: true,
            client_id_metadata_documents: false,
            required_scopes: Vec::new(),
            scopes_supported: Vec::new(),
            token_endpoint_auth_methods: DEFAULT_AUTH_METHODS.map(str::to_owned).to_vec(),
            clients: Vec::new(),
            deny: false,
            issuer_in_response: false,
        }
    }
}

impl OAuthConfig {
    /// The flags (after `--oauth`) that reproduce this configuration.
    pub(crate) fn push_args(&self, flag: &mut impl FnMut(&str, Option<String>)) {
        flag(
            "oauth-token-ttl-secs",
            Some(self.token_ttl.as_secs().to_string()),
        );
        if !self.refresh_tokens {
            flag("oauth-no-refresh", None);
        }
        if !self.registration {
            flag("oauth-no-registration", None);
        }
        if self.client_id_metadata_documents {
            flag("oauth-cimd", None);
        }
        for scope in &self.required_scopes {
            flag("oauth-required-scope", Some(scope.clone()));
        }
        for scope in &self.scopes_supported {
            flag("oauth-scope-supported", Some(scope.clone()));
        }
        for method in &self.token_endpoint_auth_methods {
            flag("oauth-auth-method", Some(method.clone()));
        }
        for client in &self.clients {
            let text = match &client.secret {
                Some(secret) => format!("{}:{secret}", client.id),
                None => client.id.clone(),
            };
            flag("oauth-client", Some(text));
        }
        if self.deny {
            flag("oauth-deny", None);
        }
        if self.issuer_in_response {
            flag("oauth-iss", None);
        }
    }
}

/// A client the authorization server knows without registration: the fixture's side of
/// what the control plane keeps as `ctxsync_persistence::OAuthClient` (a registration).
#[derive(Clone, PartialEq, Eq)]
pub struct OAuthClient {
    /// Its `client_id`.
    pub id: String,
    /// Its secret: `Some` for a confidential client (basic or post authentication),
    /// `None` for a public one (`none`).
    pub secret: Option<String>,
}

impl OAuthClient {
    /// A confidential client.
    pub fn confidential(id: impl Into<String>, secret: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            secret: Some(secret.into()),
        }
    }

    /// A public client (no secret; authenticates with `none`).
    pub fn public(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            secret: None,
        }
    }
}

impl std::fmt::Debug for OAuthClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthClient")
            .field("id", &self.id)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

fn parse_secs(text: &str) -> Result<Duration, String> {
    text.parse::<u64>()
        .map(Duration::from_secs)
        .map_err(|e| format!("expected whole seconds: {e}"))
}

fn parse_client(text: &str) -> Result<OAuthClient, String> {
    let (id, secret) = match text.split_once(':') {
        Some((id, secret)) => (id, Some(secret)),
        None => (text, None),
    };
    if id.is_empty() {
        return Err("empty client id".into());
    }
    if secret == Some("") {
        return Err("empty secret (give ID alone for a public client)".into());
    }
    Ok(OAuthClient {
        id: id.to_owned(),
        secret: secret.map(str::to_owned),
    })
}
