//! A person's authorization-code sign-in, in two steps the control plane relays: the start
//! (metadata from the server's challenge, a client, the authorization URL with PKCE) and
//! the code's exchange. What the exchange needs travels in `pending`, which the control
//! plane keeps sealed, so no sign-in lives in the agent's memory between the steps.

use ctxsync_mcp_model::{SignInCredential, SignInStart};
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationMetadata, AuthorizationRequest,
    AuthorizationSession, InMemoryStateStore, OAuthClientConfig, StateStore,
    StoredAuthorizationState,
};
use serde::{Deserialize, Serialize};
use url::Url;

use super::{
    Target, in_words,
    token::{self, Issued},
};
use crate::sanitize::{SecretSet, sanitize_diagnostic};

/// Longest `pending` made or accepted.
pub(crate) const MAX_PENDING_BYTES: usize = 16 * 1024;
/// The client name a dynamic registration gives.
const CLIENT_NAME: &str = "ctxsync";
/// The layout of `pending`; another is refused (the sign-in is started again).
const PENDING_VERSION: u32 = 1;
/// The one metadata field the exchange reads beyond the endpoints: how the client
/// authenticates at the token endpoint.
const AUTH_METHODS: &str = "token_endpoint_auth_methods_supported";
/// What the authorization server advertises when it takes a Client ID Metadata Document's
/// URL as a client id (SEP-991).
const CIMD_SUPPORTED: &str = "client_id_metadata_document_supported";

/// What `begin` hands the control plane for `finish`: the authorization request's PKCE
/// verifier and state, the client, and the endpoints, so the exchange discovers nothing.
#[derive(Serialize, Deserialize)]
struct Pending {
    version: u32,
    server_url: String,
    /// The `resource` (RFC 8707) the authorization request named, which the token request
    /// must name too.
    resource: String,
    redirect_uri: String,
    client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client_secret: Option<String>,
    authorization_endpoint: String,
    token_endpoint: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    issuer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    auth_methods: Option<serde_json::Value>,
    state: StoredAuthorizationState,
}

impl Pending {
    /// The metadata the exchange needs (not all the server published: `pending` stays
    /// small).
    fn metadata(&self) -> AuthorizationMetadata {
        let mut metadata = AuthorizationMetadata::default();
        metadata.authorization_endpoint = self.authorization_endpoint.clone();
        metadata.token_endpoint = self.token_endpoint.clone();
        metadata.issuer = self.issuer.clone();
        if let Some(methods) = &self.auth_methods {
            metadata
                .additional_fields
                .insert(AUTH_METHODS.to_owned(), methods.clone());
        }
        metadata
    }

    /// Who issues the tokens: the metadata's issuer, else the authorization endpoint's
    /// origin (a server from before RFC 8414 names none).
    fn issuer(&self) -> String {
        self.issuer
            .clone()
            .filter(|issuer| !issuer.is_empty())
            .unwrap_or_else(|| origin(&self.authorization_endpoint))
    }
}

/// The client a sign-in uses.
struct Client {
    id: String,
    secret: Option<String>,
}

/// Starts a sign-in to `target`'s server: discovers its authorization server (from the
/// challenge of its last refusal when there is one: RFC 9728, then RFC 8414 or OpenID
/// Connect, then the 2025-03-26 default endpoints), picks the client (the entry's
/// pre-registered one, else the Client ID Metadata Document `client_metadata_url` when
/// the server takes one, else a dynamic registration), the scopes (the entry's, else the
/// challenge's, else the protected resource's, else none) and builds the authorization
/// URL. Unsanitized: the engine cleans the sentence.
pub(crate) async fn begin(
    target: &Target,
    redirect_uri: &str,
    client_metadata_url: Option<&str>,
) -> Result<SignInStart, String> {
    let (url, preregistered) = target.http()?;
    let words = |error: AuthError| {
        format!(
            "starting a sign-in to the server at {url} failed: {}",
            in_words(&error)
        )
    };
    // The workspace's servers may well be private; metadata may then name private hosts
    // too (rmcp still refuses link-local and reserved ones).
    let mut manager = AuthorizationManager::new_allowing_private_addresses(url)
        .await
        .map_err(words)?;
    let metadata = match manager
        .resolve_metadata_from_challenge(target.challenge.as_deref())
        .await
    {
        Ok(resolution) => resolution.metadata,
        Err(AuthError::AuthorizationServerMismatch {
            expected_issuer, ..
        }) if expected_issuer.trim_end_matches('/') == origin(url) => {
            march_2025_metadata(url).await.map_err(|error| {
                format!("starting a sign-in to the server at {url} failed: {error}")
            })?
        }
        Err(error) => return Err(words(error)),
    };
    manager.set_metadata(metadata.clone());
    let states = InMemoryStateStore::new();
    manager.set_state_store(states.clone());
    let scopes = match preregistered.filter(|client| !client.scopes.is_empty()) {
        Some(client) => client.scopes.clone(),
        None => manager.select_initial_scopes(&[]).await,
    };
    let mut request = AuthorizationRequest::new(redirect_uri)
        .with_scopes(scopes.clone())
        .with_initial_scope_selection();
    let client = match (preregistered, client_metadata_url) {
        (Some(client), _) => Client {
            id: client.client_id.clone(),
            secret: client.client_secret.clone(),
        },
        (None, Some(document)) if takes_metadata_documents(&metadata) => {
            request = request.with_client_metadata_url(document);
            Client {
                id: document.to_owned(),
                secret: None,
            }
        }
        (None, _) => {
            // Registered here rather than by the session, which keeps a secret the
            // server may issue out of reach; the exchange needs it.
            let scope_refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
            let registered = manager
                .register_client(CLIENT_NAME, redirect_uri, &scope_refs)
                .await
                .map_err(words)?;
            Client {
                id: registered.client_id,
                secret: registered.client_secret,
            }
        }
    };
    if request.client_metadata_url.is_none() {
        request = request.with_preregistered_client(client.id.clone());
        if let Some(secret) = &client.secret {
            request = request.with_client_secret(secret.clone());
        }
    }
    let session = AuthorizationSession::new(manager, request)
        .await
        .map_err(|(_, error)| words(error))?;
    let authorization_url = session.get_authorization_url().to_owned();
    let (state, resource) = request_parameters(&authorization_url, url)?;
    let stored = states
        .load(&state)
        .await
        .ok()
        .flatten()
        .ok_or_else(|| "the sign-in's state was not kept; try again".to_owned())?;
    let pending = Pending {
        version: PENDING_VERSION,
        server_url: url.to_owned(),
        resource,
        redirect_uri: redirect_uri.to_owned(),
        client_id: client.id,
        client_secret: client.secret,
        authorization_endpoint: metadata.authorization_endpoint.clone(),
        token_endpoint: metadata.token_endpoint.clone(),
        issuer: metadata.issuer.clone(),
        auth_methods: metadata.additional_fields.get(AUTH_METHODS).cloned(),
        state: stored,
    };
    let pending = serde_json::to_string(&pending)
        .map_err(|_| "the sign-in's state cannot be written down".to_owned())?;
    if pending.len() > MAX_PENDING_BYTES {
        return Err(format!(
            "the sign-in's state is larger than {} KiB (the authorization server's endpoints or client id are unusually long)",
            MAX_PENDING_BYTES / 1024
        ));
    }
    Ok(SignInStart {
        authorization_url,
        state,
        issuer: metadata.issuer.filter(|issuer| !issuer.is_empty()),
        server_url: url.to_owned(),
        pending,
    })
}

/// Exchanges `code` (with the authorization response's `iss`, when it named one) for the
/// tokens of the sign-in `pending` describes, for the server at `url`. A sentence is
/// cleaned of the code, the verifier and the client secret; the engine cleans it of its
/// own secrets.
pub(crate) async fn finish(
    url: &str,
    pending: &str,
    code: &str,
    iss: Option<&str>,
) -> Result<SignInCredential, String> {
    if pending.len() > MAX_PENDING_BYTES {
        return Err(format!(
            "the sign-in's state is larger than {} KiB; start the sign-in again",
            MAX_PENDING_BYTES / 1024
        ));
    }
    let pending: Pending = serde_json::from_str(pending)
        .ok()
        .filter(|pending: &Pending| pending.version == PENDING_VERSION)
        .ok_or_else(|| {
            "the sign-in's state cannot be read (it comes from another version of the agent); start the sign-in again".to_owned()
        })?;
    if pending.server_url != url {
        return Err(format!(
            "the sign-in was started for {}, but the server's entry now names {url}; start the sign-in again",
            pending.server_url
        ));
    }
    // What the exchange handles and the authorization server might echo: not for a
    // sentence.
    let mut own = SecretSet::new();
    own.insert(code);
    own.insert(&pending.state.pkce_verifier);
    if let Some(secret) = &pending.client_secret {
        own.insert(secret);
    }
    exchange(url, &pending, code, iss)
        .await
        .map_err(|error| sanitize_diagnostic(&error, &own))
}

/// The token request of [`finish`].
async fn exchange(
    url: &str,
    pending: &Pending,
    code: &str,
    iss: Option<&str>,
) -> Result<SignInCredential, String> {
    let words = |error: AuthError| {
        format!(
            "exchanging the sign-in's code with the authorization server of the server at {url} failed: {}",
            in_words(&error)
        )
    };
    // The token request names the resource the authorization request named: rmcp names
    // its base URL when it discovered nothing, and nothing is discovered here.
    let mut manager =
        AuthorizationManager::new_allowing_private_addresses(pending.resource.as_str())
            .await
            .map_err(words)?;
    manager.set_metadata(pending.metadata());
    let mut client =
        OAuthClientConfig::new(pending.client_id.clone(), pending.redirect_uri.clone())
            .with_scopes(pending.state.requested_scopes.clone());
    if let Some(secret) = &pending.client_secret {
        client = client.with_client_secret(secret.clone());
    }
    manager.configure_client(client).map_err(words)?;
    let states = InMemoryStateStore::new();
    let csrf = pending.state.csrf_token.clone();
    states
        .save(&csrf, pending.state.clone())
        .await
        .map_err(words)?;
    manager.set_state_store(states);
    let response = manager
        .exchange_code_for_token_with_issuer(code, &csrf, iss)
        .await
        .map_err(words)?;
    let issuer = pending.issuer();
    token::credential(
        &response,
        &Issued {
            server_url: url,
            issuer: &issuer,
            client_id: &pending.client_id,
            client_secret: pending.client_secret.as_deref(),
            scopes: &pending.state.requested_scopes,
        },
    )
}

/// Longest authorization server metadata document read.
const MAX_METADATA_BYTES: usize = 256 * 1024;
/// How long fetching that document may take.
const METADATA_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The 2025-03-26 layout: a server without protected-resource metadata whose own origin
/// serves the authorization server's metadata, naming an issuer of another path (that
/// revision had no issuer rule; RFC 8414's is for metadata a resource pointed to). rmcp
/// refuses the mismatch, so the document is read here, from the server's origin only.
async fn march_2025_metadata(url: &str) -> Result<AuthorizationMetadata, String> {
    let document = format!("{}/.well-known/oauth-authorization-server", origin(url));
    let client = reqwest::Client::builder()
        .timeout(METADATA_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|_| "no HTTP client could be made".to_owned())?;
    let mut response = client
        .get(&document)
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|error| {
            format!(
                "reading {document} failed: {}",
                crate::failure::innermost(&error)
            )
        })?;
    if !response.status().is_success() {
        return Err(format!("{document} answered {}", response.status()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|error| {
        format!(
            "reading {document} failed: {}",
            crate::failure::innermost(&error)
        )
    })? {
        if body.len() + chunk.len() > MAX_METADATA_BYTES {
            return Err(format!(
                "{document} is larger than {} KiB",
                MAX_METADATA_BYTES / 1024
            ));
        }
        body.extend_from_slice(&chunk);
    }
    // rmcp checks the rest (PKCE S256 on offer) when the client is configured.
    serde_json::from_slice(&body)
        .map_err(|_| format!("{document} is not authorization server metadata (JSON)"))
}

/// Whether the authorization server takes a Client ID Metadata Document's URL as a client
/// id.
fn takes_metadata_documents(metadata: &AuthorizationMetadata) -> bool {
    metadata
        .additional_fields
        .get(CIMD_SUPPORTED)
        .and_then(serde_json::Value::as_bool)
        .unwrap_or(false)
}

/// The authorization URL's `state`, and its `resource` (the server's URL when it names
/// none).
fn request_parameters(authorization_url: &str, url: &str) -> Result<(String, String), String> {
    let parsed = Url::parse(authorization_url).map_err(|_| {
        "the authorization URL is not a URL; check the authorization server's metadata".to_owned()
    })?;
    let parameter = |name: &str| {
        parsed
            .query_pairs()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.into_owned())
            .filter(|value| !value.is_empty())
    };
    let state = parameter("state")
        .ok_or_else(|| "the authorization URL carries no state; try again".to_owned())?;
    let resource = parameter("resource").unwrap_or_else(|| url.to_owned());
    Ok((state, resource))
}

/// `url`'s origin (`https://as.example`), or `url` itself when it does not parse.
fn origin(url: &str) -> String {
    Url::parse(url)
        .ok()
        .map(|parsed| parsed.origin().ascii_serialization())
        .filter(|origin| origin != "null")
        .unwrap_or_else(|| url.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_parameters_come_from_the_authorization_url() {
        let (state, resource) = request_parameters(
            "https://as.example/authorize?client_id=c&state=s-1&resource=https%3A%2F%2Fmcp.example%2Fmcp",
            "https://other.example/mcp",
        )
        .expect("parameters");
        assert_eq!(state, "s-1");
        assert_eq!(resource, "https://mcp.example/mcp");
        let (_, resource) =
            request_parameters("https://as.example/authorize?state=s", "https://m/mcp")
                .expect("parameters");
        assert_eq!(resource, "https://m/mcp");
        assert!(request_parameters("https://as.example/authorize", "https://m/mcp").is_err());
    }

    #[test]
    fn an_issuer_is_never_empty() {
        assert_eq!(
            origin("https://as.example:8443/oauth/authorize"),
            "https://as.example:8443"
        );
        assert_eq!(origin("not a url"), "not a url");
    }

    #[tokio::test]
    async fn pending_from_another_server_or_version_is_refused_in_words() {
        for (pending, expect) in [
            ("{}".to_owned(), "cannot be read"),
            ("x".repeat(MAX_PENDING_BYTES + 1), "larger than 16 KiB"),
        ] {
            let error = finish("https://m/mcp", &pending, "code", None)
                .await
                .expect_err("refused");
            assert!(error.contains(expect), "{error}");
        }
    }
}
