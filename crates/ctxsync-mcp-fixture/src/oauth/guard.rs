//! The bearer check in front of the MCP endpoint: a live access token this server issued,
//! or a challenge that leads the client to the metadata (RFC 6750 §3, RFC 9728 §5.1).

use std::sync::Arc;

use axum::{
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};

use super::{AuthServer, state::BearerRefusal};

/// Passes a request with a live, sufficient bearer token; otherwise 401 (no token, or an
/// unknown, expired or revoked one) or 403 (too few scopes) with a `Bearer` challenge.
/// Without OAuth mode (`None`) everything passes.
pub(crate) async fn require_bearer(
    State(server): State<Option<Arc<AuthServer>>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(server) = server else {
        return next.run(request).await;
    };
    let token = bearer_token(request.headers());
    let refusal = match server.check_bearer(token) {
        Ok(()) => return next.run(request).await,
        Err(refusal) => refusal,
    };
    let mut challenge = String::from("Bearer");
    let status = match (refusal, token) {
        (BearerRefusal::InsufficientScope, _) => {
            challenge.push_str(r#" error="insufficient_scope","#);
            StatusCode::FORBIDDEN
        }
        (BearerRefusal::InvalidToken, Some(_)) => {
            challenge.push_str(r#" error="invalid_token","#);
            StatusCode::UNAUTHORIZED
        }
        // RFC 6750 §3.1: a request without credentials gets no error code.
        (BearerRefusal::InvalidToken, None) => StatusCode::UNAUTHORIZED,
    };
    challenge.push_str(&format!(
        r#" resource_metadata="{}""#,
        server.resource_metadata_url
    ));
    let scopes = &server.config.required_scopes;
    if !scopes.is_empty() {
        challenge.push_str(&format!(r#", scope="{}""#, scopes.join(" ")));
    }
    let mut response = (status, status.canonical_reason().unwrap_or("refused")).into_response();
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

/// The token of the one `Authorization: Bearer …` header; `None` when absent, repeated
/// or of another scheme.
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    let (scheme, token) = value.to_str().ok()?.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}
