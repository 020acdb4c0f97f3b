//! The discovery documents: protected-resource metadata (RFC 9728) and authorization
//! server metadata (RFC 8414), both naming the fixture's own origin.

use std::sync::Arc;

use axum::{extract::State, http::StatusCode, response::Response};
use serde_json::json;

use super::{AuthServer, json_answer};

impl AuthServer {
    /// The scopes both documents advertise: the supported ones, then any required one
    /// not among them.
    pub(super) fn advertised_scopes(&self) -> Vec<String> {
        let mut scopes = self.config.scopes_supported.clone();
        for scope in &self.config.required_scopes {
            if !scopes.contains(scope) {
                scopes.push(scope.clone());
            }
        }
        scopes
    }
}

/// `GET /.well-known/oauth-protected-resource[/mcp]`.
pub(super) async fn protected_resource(State(server): State<Arc<AuthServer>>) -> Response {
    let mut document = json!({
        "resource": server.resource,
        "authorization_servers": [server.issuer],
        "bearer_methods_supported": ["header"],
    });
    let scopes = server.advertised_scopes();
    if !scopes.is_empty() {
        document["scopes_supported"] = scopes.into();
    }
    json_answer(StatusCode::OK, &document)
}

/// `GET /.well-known/oauth-authorization-server`.
pub(super) async fn authorization_server(State(server): State<Arc<AuthServer>>) -> Response {
    let issuer = &server.issuer;
    let config = &server.config;
    let mut grant_types = vec!["authorization_code"];
    if config.refresh_tokens {
        grant_types.push("refresh_token");
    }
    let mut document = json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/authorize"),
        "token_endpoint": format!("{issuer}/token"),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": grant_types,
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": config.token_endpoint_auth_methods,
        "client_id_metadata_document_supported": config.client_id_metadata_documents,
    });
    if config.registration {
        document["registration_endpoint"] = format!("{issuer}/register").into();
    }
    if config.issuer_in_response {
        document["authorization_response_iss_parameter_supported"] = true.into();
    }
    let scopes = server.advertised_scopes();
    if !scopes.is_empty() {
        document["scopes_supported"] = scopes.into();
    }
    json_answer(StatusCode::OK, &document)
}
