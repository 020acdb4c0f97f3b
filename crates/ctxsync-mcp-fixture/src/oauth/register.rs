//! Dynamic client registration (RFC 7591): `POST /register` with the client's metadata.

use std::{
    sync::Arc,
    time::{SystemTime, UNIX_EPOCH},
};

use axum::{
    extract::{Request, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde_json::{Value, json};

use super::{
    AuthServer, MAX_BODY_BYTES, OAuthError, json_answer,
    state::{RegisteredClient, random_token},
};

/// The grant and response types a client may register for.
const GRANT_TYPES: [&str; 2] = ["authorization_code", "refresh_token"];
const RESPONSE_TYPES: [&str; 1] = ["code"];

/// `POST /register`: 201 with the client id (and a secret unless the client asked for
/// `none`), or 400 with `invalid_redirect_uri` or `invalid_client_metadata`.
pub(super) async fn register(State(server): State<Arc<AuthServer>>, request: Request) -> Response {
    let Ok(body) = axum::body::to_bytes(request.into_body(), MAX_BODY_BYTES).await else {
        return OAuthError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_client_metadata",
            "the metadata is too large",
        )
        .into_response();
    };
    let metadata = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(metadata)) => metadata,
        _ => return metadata_error("the body is not a JSON object").into_response(),
    };
    match registration(&server, &metadata) {
        Ok(answer) => json_answer(StatusCode::CREATED, &answer),
        Err(error) => error.into_response(),
    }
}

fn metadata_error(description: &str) -> OAuthError {
    OAuthError::bad("invalid_client_metadata", description)
}

/// Checks the metadata, registers the client and answers its information (RFC 7591 §3.2.1).
fn registration(
    server: &AuthServer,
    metadata: &serde_json::Map<String, Value>,
) -> Result<Value, OAuthError> {
    let redirect_uris = redirect_uris(metadata)?;
    // RFC 7591 §2: absent means `client_secret_basic`.
    let auth_method = match metadata.get("token_endpoint_auth_method") {
        None => "client_secret_basic",
        Some(Value::String(method)) => method.as_str(),
        Some(_) => {
            return Err(metadata_error(
                "token_endpoint_auth_method must be a string",
            ));
        }
    };
    if !server
        .config
        .token_endpoint_auth_methods
        .iter()
        .any(|m| m == auth_method)
    {
        return Err(metadata_error(&format!(
            "token_endpoint_auth_method {auth_method} is not supported"
        )));
    }
    let grant_types = names_within(metadata, "grant_types", &GRANT_TYPES, "authorization_code")?;
    let response_types = names_within(metadata, "response_types", &RESPONSE_TYPES, "code")?;
    let secret = (auth_method != "none").then(|| random_token("fxsecret"));
    let client_id = server.register(RegisteredClient {
        secret: secret.clone(),
        redirect_uris: redirect_uris.clone(),
    });
    let issued_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let mut answer = json!({
        "client_id": client_id,
        "client_id_issued_at": issued_at,
        "redirect_uris": redirect_uris,
        "token_endpoint_auth_method": auth_method,
        "grant_types": grant_types,
        "response_types": response_types,
    });
    if let Some(secret) = secret {
        answer["client_secret"] = secret.into();
        answer["client_secret_expires_at"] = 0.into();
    }
    for echoed in ["client_name", "scope", "client_uri"] {
        if let Some(value) = metadata.get(echoed) {
            answer[echoed] = value.clone();
        }
    }
    Ok(answer)
}

/// `redirect_uris`: at least one, each an absolute URL without a fragment.
fn redirect_uris(metadata: &serde_json::Map<String, Value>) -> Result<Vec<String>, OAuthError> {
    let invalid = |description: &str| OAuthError::bad("invalid_redirect_uri", description);
    let Some(Value::Array(uris)) = metadata.get("redirect_uris") else {
        return Err(invalid("redirect_uris must be a list"));
    };
    if uris.is_empty() {
        return Err(invalid("redirect_uris is empty"));
    }
    uris.iter()
        .map(|uri| {
            let text = uri
                .as_str()
                .ok_or_else(|| invalid("a redirect URI is not a string"))?;
            match url::Url::parse(text) {
                Ok(url) if url.fragment().is_none() => Ok(text.to_owned()),
                _ => Err(invalid(&format!(
                    "{text} is not an absolute URL without a fragment"
                ))),
            }
        })
        .collect()
}

/// A list of names from `allowed` (absent: just `default`).
fn names_within(
    metadata: &serde_json::Map<String, Value>,
    field: &str,
    allowed: &[&str],
    default: &str,
) -> Result<Vec<String>, OAuthError> {
    let Some(value) = metadata.get(field) else {
        return Ok(vec![default.to_owned()]);
    };
    let names: Option<Vec<String>> = value.as_array().and_then(|names| {
        names
            .iter()
            .map(|name| name.as_str().map(str::to_owned))
            .collect()
    });
    match names {
        Some(names) if names.iter().all(|name| allowed.contains(&name.as_str())) => Ok(names),
        _ => Err(metadata_error(&format!(
            "{field} must be a list of {}",
            allowed.join(", ")
        ))),
    }
}
