//! The token endpoint: `POST /token` authenticates the client, then redeems an
//! authorization code (PKCE S256) or rotates a refresh token.

use std::{collections::HashMap, sync::Arc};

use axum::{
    extract::{Request, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use base64::Engine as _;
use sha2::Digest as _;

use super::{
    AuthServer, MAX_BODY_BYTES, OAuthError,
    authorize::is_pkce_value,
    form_params, is_our_resource, json_answer, split_scopes,
    state::{ClientAuth, TokenRequestRecord},
};

/// Who a token request says it is (no `Debug`: it holds the secret).
struct Caller {
    client_id: Option<String>,
    secret: Option<String>,
    method: ClientAuth,
}

/// `POST /token` (form): the token response, or an OAuth error (401 `invalid_client`,
/// 400 otherwise).
pub(super) async fn token(State(server): State<Arc<AuthServer>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        let error = OAuthError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request",
            "the request is too large",
        );
        return error.into_response();
    };
    let params = match form_params(&body) {
        Ok(params) => params,
        Err(error) => return error.into_response(),
    };
    let (caller, answer) = match caller(&parts.headers, &params) {
        Ok(caller) => {
            let answer = authenticate(&server, &caller)
                .and_then(|client_id| grant(&server, &client_id, &params));
            (caller, answer)
        }
        Err((method, error)) => {
            let caller = Caller {
                client_id: params.get("client_id").cloned(),
                secret: None,
                method,
            };
            (caller, Err(error))
        }
    };
    server.record_token_request(TokenRequestRecord {
        grant_type: params.get("grant_type").cloned(),
        client_id: caller.client_id,
        client_auth: caller.method,
        error: answer.as_ref().err().map(|error| error.error.to_owned()),
    });
    match answer {
        Ok(tokens) => {
            let mut response = json_answer(StatusCode::OK, &tokens);
            response
                .headers_mut()
                .insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
            response
        }
        Err(error)
            if error.status == StatusCode::UNAUTHORIZED
                && caller.method == ClientAuth::ClientSecretBasic =>
        {
            // RFC 6749 §5.2: a failed Basic authentication names the scheme it wants.
            let mut response = error.into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(r#"Basic realm="ctxsync-mcp-fixture""#),
            );
            response
        }
        Err(error) => error.into_response(),
    }
}

fn invalid_client(description: &str) -> OAuthError {
    OAuthError::new(StatusCode::UNAUTHORIZED, "invalid_client", description)
}

/// The client's credentials: HTTP Basic, or `client_id` (and `client_secret`) in the
/// form; never both kinds at once (RFC 6749 §2.3).
fn caller(
    headers: &HeaderMap,
    params: &HashMap<String, String>,
) -> Result<Caller, (ClientAuth, OAuthError)> {
    let form_id = params.get("client_id").cloned();
    let form_secret = params.get("client_secret").cloned();
    let Some(authorization) = headers.get(header::AUTHORIZATION) else {
        let method = match form_secret {
            Some(_) => ClientAuth::ClientSecretPost,
            None => ClientAuth::None,
        };
        return Ok(Caller {
            client_id: form_id,
            secret: form_secret,
            method,
        });
    };
    let basic = ClientAuth::ClientSecretBasic;
    let (id, secret) = basic_credentials(authorization.as_bytes())
        .ok_or_else(|| (basic, invalid_client("malformed Basic credentials")))?;
    if form_secret.is_some() {
        let error = OAuthError::bad("invalid_request", "more than one authentication method");
        return Err((basic, error));
    }
    if form_id.as_ref().is_some_and(|form_id| *form_id != id) {
        let error = OAuthError::bad("invalid_request", "client_id differs from the Basic user");
        return Err((basic, error));
    }
    Ok(Caller {
        client_id: Some(id),
        secret: Some(secret),
        method: basic,
    })
}

/// `Basic base64(urlencode(id):urlencode(secret))` (RFC 6749 §2.3.1).
fn basic_credentials(value: &[u8]) -> Option<(String, String)> {
    let value = std::str::from_utf8(value).ok()?;
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (id, secret) = decoded.split_once(':')?;
    Some((form_decode(id)?, form_decode(secret)?))
}

/// `application/x-www-form-urlencoded` decoding of one value: `+` is a space, `%XX` a byte.
fn form_decode(text: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut input = text.bytes();
    while let Some(byte) = input.next() {
        bytes.push(match byte {
            b'+' => b' ',
            b'%' => {
                let high = char::from(input.next()?).to_digit(16)?;
                let low = char::from(input.next()?).to_digit(16)?;
                u8::try_from(high * 16 + low).ok()?
            }
            other => other,
        });
    }
    String::from_utf8(bytes).ok()
}

/// The authenticated client's id: a method this server accepts, a known client, and the
/// right secret (confidential) or none at all (public).
fn authenticate(server: &AuthServer, caller: &Caller) -> Result<String, OAuthError> {
    let method = caller.method.as_str();
    if !server
        .config
        .token_endpoint_auth_methods
        .iter()
        .any(|m| m == method)
    {
        return Err(invalid_client(&format!("{method} is not accepted here")));
    }
    let Some(client_id) = &caller.client_id else {
        return Err(invalid_client("no client identified"));
    };
    let Some(client) = server.client(client_id) else {
        return Err(invalid_client("unknown client"));
    };
    match (&client.secret, &caller.secret) {
        (Some(expected), Some(given)) if expected == given => Ok(client_id.clone()),
        (None, None) => Ok(client_id.clone()),
        (Some(_), Some(_)) => Err(invalid_client("wrong client secret")),
        (Some(_), None) => Err(invalid_client(
            "this client must authenticate with its secret",
        )),
        (None, Some(_)) => Err(invalid_client("this public client has no secret")),
    }
}

/// Dispatches on `grant_type`.
fn grant(
    server: &AuthServer,
    client_id: &str,
    params: &HashMap<String, String>,
) -> Result<serde_json::Value, OAuthError> {
    if let Some(resource) = params.get("resource")
        && !is_our_resource(server, resource)
    {
        return Err(OAuthError::bad(
            "invalid_target",
            "resource is not this server's MCP endpoint",
        ));
    }
    match params.get("grant_type").map(String::as_str) {
        Some("authorization_code") => redeem_code(server, client_id, params),
        Some("refresh_token") if server.config.refresh_tokens => refresh(server, client_id, params),
        Some(_) => Err(OAuthError::bad(
            "unsupported_grant_type",
            "grant_type is not supported",
        )),
        None => Err(OAuthError::bad("invalid_request", "grant_type is missing")),
    }
}

/// The `authorization_code` grant. A code is used up by its successful exchange only,
/// so a test may retry a refused exchange (wrong verifier) with the same code.
fn redeem_code(
    server: &AuthServer,
    client_id: &str,
    params: &HashMap<String, String>,
) -> Result<serde_json::Value, OAuthError> {
    let required = |name: &str| {
        params
            .get(name)
            .ok_or_else(|| OAuthError::bad("invalid_request", format!("{name} is missing")))
    };
    let code = required("code")?;
    let verifier = required("code_verifier")?;
    let invalid_grant = |description: &str| OAuthError::bad("invalid_grant", description);
    let Some(grant) = server.code(code) else {
        return Err(invalid_grant("unknown, used or expired code"));
    };
    if grant.client_id != client_id {
        return Err(invalid_grant("the code was issued to another client"));
    }
    if let Some(expected) = &grant.redirect_uri
        && params.get("redirect_uri") != Some(expected)
    {
        return Err(invalid_grant(
            "redirect_uri differs from the authorization request's",
        ));
    }
    if !is_pkce_value(verifier) || s256(verifier) != grant.code_challenge {
        return Err(invalid_grant(
            "code_verifier does not match the code_challenge",
        ));
    }
    if !server.redeem_code(code) {
        return Err(invalid_grant("the code was used meanwhile"));
    }
    Ok(server.issue_tokens(client_id, grant.scopes.clone(), grant.scopes))
}

/// `BASE64URL(SHA256(verifier))`, unpadded (RFC 7636 §4.2).
fn s256(verifier: &str) -> String {
    let digest = sha2::Sha256::digest(verifier.as_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest)
}

/// The `refresh_token` grant: the token is used up and a new one issued (rotation); a
/// narrower `scope` narrows the access token only (RFC 6749 §6).
fn refresh(
    server: &AuthServer,
    client_id: &str,
    params: &HashMap<String, String>,
) -> Result<serde_json::Value, OAuthError> {
    let Some(token) = params.get("refresh_token") else {
        return Err(OAuthError::bad(
            "invalid_request",
            "refresh_token is missing",
        ));
    };
    let invalid_grant = |description: &str| OAuthError::bad("invalid_grant", description);
    let Some(grant) = server.refresh_grant(token) else {
        return Err(invalid_grant("unknown, used or revoked refresh token"));
    };
    if grant.client_id != client_id {
        return Err(invalid_grant(
            "the refresh token was issued to another client",
        ));
    }
    let requested = split_scopes(params.get("scope"));
    if requested.iter().any(|scope| !grant.scopes.contains(scope)) {
        return Err(OAuthError::bad(
            "invalid_scope",
            "scope exceeds the original grant",
        ));
    }
    if !server.rotate_refresh(token) {
        return Err(invalid_grant("the refresh token was used meanwhile"));
    }
    let access_scopes = if requested.is_empty() {
        grant.scopes.clone()
    } else {
        requested
    };
    Ok(server.issue_tokens(client_id, access_scopes, grant.scopes))
}
