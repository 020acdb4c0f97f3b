//! OAuth 2.1 mode of the HTTP transport: the fixture is its own authorization server, on
//! the MCP endpoint's listener, and the MCP endpoint wants its bearer tokens.
//!
//! By role: [`config`] what the mode offers, [`state`] the server's memory and the test
//! handle, [`metadata`] the two discovery documents (RFC 9728, RFC 8414), [`register`]
//! dynamic registration (RFC 7591), [`authorize`] the person who always agrees (or
//! always refuses), [`token`] the code and refresh grants, and [`guard`] the bearer check
//! in front of the MCP endpoint.

mod authorize;
mod config;
mod guard;
mod metadata;
mod register;
mod state;
mod token;

use std::{collections::HashMap, sync::Arc};

use axum::{
    Router,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};

pub use config::{OAuthClient, OAuthConfig};
pub(crate) use guard::require_bearer;
pub(crate) use state::AuthServer;
pub use state::{AuthorizeRecord, ClientAuth, OAuthHandle, TokenRequestRecord};

/// Largest body `/register` and `/token` read.
const MAX_BODY_BYTES: usize = 64 * 1024;

/// The authorization server's routes (metadata, registration when on, authorize, token).
pub(crate) fn router(server: Arc<AuthServer>, mcp_path: &str) -> Router {
    let resource_metadata = format!("/.well-known/oauth-protected-resource{mcp_path}");
    let mut router = Router::new()
        .route(&resource_metadata, get(metadata::protected_resource))
        .route(
            "/.well-known/oauth-protected-resource",
            get(metadata::protected_resource),
        )
        .route(
            "/.well-known/oauth-authorization-server",
            get(metadata::authorization_server),
        )
        .route("/authorize", get(authorize::authorize))
        .route("/token", post(token::token));
    if server.config.registration {
        router = router.route("/register", post(register::register));
    }
    router.with_state(server)
}

/// An OAuth error answer (RFC 6749 §5.2): a status and a JSON body.
#[derive(Debug)]
struct OAuthError {
    status: StatusCode,
    error: &'static str,
    description: String,
}

impl OAuthError {
    fn new(status: StatusCode, error: &'static str, description: impl Into<String>) -> Self {
        Self {
            status,
            error,
            description: description.into(),
        }
    }

    /// 400 with `error`.
    fn bad(error: &'static str, description: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, error, description)
    }
}

impl IntoResponse for OAuthError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "error": self.error,
            "error_description": self.description,
        });
        json_answer(self.status, &body)
    }
}

/// A JSON answer that no cache keeps (tokens and credentials are in such answers).
fn json_answer(status: StatusCode, body: &serde_json::Value) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body.to_string(),
    )
        .into_response()
}

/// The parameters of a query string or form body; a repeated name is an error
/// (RFC 6749 §3.1: "parameters MUST NOT be included more than once").
fn form_params(encoded: &[u8]) -> Result<HashMap<String, String>, OAuthError> {
    let mut params = HashMap::new();
    for (name, value) in url::form_urlencoded::parse(encoded) {
        if params
            .insert(name.to_string(), value.into_owned())
            .is_some()
        {
            return Err(OAuthError::bad(
                "invalid_request",
                format!("parameter {name} is repeated"),
            ));
        }
    }
    Ok(params)
}

/// Space-separated scopes, without empties.
fn split_scopes(scope: Option<&String>) -> Vec<String> {
    scope
        .map(|scope| scope.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Whether a `resource` parameter (RFC 8707) names this fixture's MCP endpoint.
fn is_our_resource(server: &AuthServer, resource: &str) -> bool {
    resource.trim_end_matches('/') == server.resource
}
