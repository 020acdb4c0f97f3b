//! The authorization endpoint: `GET /authorize` checks the request, then plays a person
//! who always agrees (or, with `deny`, always refuses) and redirects at once.

use std::{collections::HashMap, sync::Arc, sync::atomic::Ordering};

use axum::{
    extract::{Request, State},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};
use url::Url;

use super::{
    AuthServer, OAuthError, form_params, is_our_resource, split_scopes,
    state::{AuthorizeRecord, CodeGrant},
};

/// How `/authorize` answers.
#[derive(Debug)]
enum Answer {
    /// The client or its redirect URI could not be verified: nothing is redirected.
    Refused(OAuthError),
    /// 302 to the client's redirect URI, with a code or an error.
    Redirect {
        to: Url,
        error: Option<&'static str>,
    },
}

/// `GET /authorize`.
pub(super) async fn authorize(State(server): State<Arc<AuthServer>>, request: Request) -> Response {
    let query = request.uri().query().unwrap_or_default().as_bytes();
    let params = match form_params(query) {
        Ok(params) => params,
        Err(error) => return error.into_response(),
    };
    let answer = decide(&server, &params);
    server.record_authorize(AuthorizeRecord {
        client_id: params.get("client_id").cloned(),
        redirect_uri: params.get("redirect_uri").cloned(),
        scope: params.get("scope").cloned(),
        resource: params.get("resource").cloned(),
        error: match &answer {
            Answer::Refused(error) => Some(error.error.to_owned()),
            Answer::Redirect { error, .. } => error.map(str::to_owned),
        },
    });
    match answer {
        Answer::Refused(error) => error.into_response(),
        Answer::Redirect { to, .. } => {
            (StatusCode::FOUND, [(header::LOCATION, to.to_string())]).into_response()
        }
    }
}

/// Verifies the client and its redirect URI first (RFC 6749 §4.1.2.1: without both,
/// no redirect), then everything else, answered at the redirect URI.
fn decide(server: &AuthServer, params: &HashMap<String, String>) -> Answer {
    let (client_id, redirect_uri) = match verified_redirect(server, params) {
        Ok(verified) => verified,
        Err(error) => return Answer::Refused(error),
    };
    let mut to = redirect_uri.clone();
    {
        let mut query = to.query_pairs_mut();
        if let Some(state) = params.get("state") {
            query.append_pair("state", state);
        }
        if server.config.issuer_in_response {
            query.append_pair("iss", &server.issuer);
        }
    }
    let grant = match grant(server, params) {
        Ok(scopes) => CodeGrant {
            client_id,
            // RFC 6749 §4.1.3: the token request repeats it when the request named it.
            redirect_uri: params.get("redirect_uri").cloned(),
            code_challenge: params.get("code_challenge").cloned().unwrap_or_default(),
            scopes,
            expires_at: AuthServer::code_expiry(),
        },
        Err((error, description)) => {
            to.query_pairs_mut()
                .append_pair("error", error)
                .append_pair("error_description", description);
            return Answer::Redirect {
                to,
                error: Some(error),
            };
        }
    };
    let code = server.issue_code(grant);
    to.query_pairs_mut().append_pair("code", &code);
    Answer::Redirect { to, error: None }
}

/// The client id and the redirect URI it may be sent to.
fn verified_redirect(
    server: &AuthServer,
    params: &HashMap<String, String>,
) -> Result<(String, Url), OAuthError> {
    let Some(client_id) = params.get("client_id") else {
        return Err(OAuthError::bad("invalid_request", "client_id is missing"));
    };
    let Some(client) = server.client(client_id) else {
        return Err(OAuthError::bad("invalid_client", "unknown client_id"));
    };
    let redirect_uri = match (params.get("redirect_uri"), &client.redirect_uris) {
        (Some(uri), Some(registered)) if registered.contains(uri) => uri,
        (Some(uri), None) => uri,
        (None, Some(registered)) if registered.len() == 1 => &registered[0],
        (None, _) => {
            return Err(OAuthError::bad(
                "invalid_request",
                "redirect_uri is missing",
            ));
        }
        (Some(_), Some(_)) => {
            return Err(OAuthError::bad(
                "invalid_request",
                "redirect_uri is not one the client registered",
            ));
        }
    };
    match Url::parse(redirect_uri) {
        Ok(url) if url.fragment().is_none() => Ok((client_id.clone(), url)),
        _ => Err(OAuthError::bad(
            "invalid_request",
            "redirect_uri is not an absolute URL without a fragment",
        )),
    }
}

/// The scopes the person grants, or the error (and why) the redirect carries.
fn grant(
    server: &AuthServer,
    params: &HashMap<String, String>,
) -> Result<Vec<String>, (&'static str, &'static str)> {
    if params.get("response_type").map(String::as_str) != Some("code") {
        return Err(("unsupported_response_type", "response_type must be code"));
    }
    match params.get("code_challenge") {
        Some(challenge) if is_pkce_value(challenge) => {}
        Some(_) => return Err(("invalid_request", "code_challenge is malformed")),
        None => return Err(("invalid_request", "code_challenge is required (PKCE)")),
    }
    if params.get("code_challenge_method").map(String::as_str) != Some("S256") {
        return Err(("invalid_request", "code_challenge_method must be S256"));
    }
    if let Some(resource) = params.get("resource")
        && !is_our_resource(server, resource)
    {
        return Err((
            "invalid_target",
            "resource is not this server's MCP endpoint",
        ));
    }
    let requested = split_scopes(params.get("scope"));
    let advertised = server.advertised_scopes();
    let limited = !server.config.scopes_supported.is_empty();
    if limited && requested.iter().any(|scope| !advertised.contains(scope)) {
        return Err(("invalid_scope", "a requested scope is not supported"));
    }
    if server.deny.load(Ordering::SeqCst) {
        return Err(("access_denied", "the person refused"));
    }
    // RFC 6749 §3.3: a request without scope gets the server's default.
    Ok(if requested.is_empty() {
        server.config.required_scopes.clone()
    } else {
        requested
    })
}

/// A PKCE challenge or verifier: 43 to 128 unreserved characters (RFC 7636 §4.1).
pub(super) fn is_pkce_value(text: &str) -> bool {
    (43..=128).contains(&text.len())
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'))
}
