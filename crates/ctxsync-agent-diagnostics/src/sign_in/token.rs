//! A token response as the credential both wings keep: checked (a bearer token the agent
//! can send), bounded, and read without naming oauth2's types (through its JSON).

use ctxsync_mcp_model::SignInCredential;
use rmcp::transport::auth::OAuthTokenResponse;
use serde_json::Value;

use super::unix_now;

/// Longest access or refresh token kept: far above what authorization servers issue (a
/// large JWT is a few KiB), small enough for the control plane to store and resend.
pub(crate) const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// Longest account name kept; a longer one is left out.
const MAX_ACCOUNT_BYTES: usize = 256;
/// Token-response fields that may name the account signed in as, in order of preference
/// (none is standard; providers use one of these).
const ACCOUNT_FIELDS: [&str; 4] = ["account", "username", "email", "sub"];

/// What a credential keeps beside the token response: whom it is for and from.
pub(crate) struct Issued<'a> {
    pub server_url: &'a str,
    pub issuer: &'a str,
    pub client_id: &'a str,
    pub client_secret: Option<&'a str>,
    /// Granted when the response does not say (RFC 6749 §5.1: then the grant is what was
    /// asked for).
    pub scopes: &'a [String],
}

/// The credential `response` gives, or why it cannot be used, in words.
pub(crate) fn credential(
    response: &OAuthTokenResponse,
    issued: &Issued<'_>,
) -> Result<SignInCredential, String> {
    let value = serde_json::to_value(response)
        .map_err(|_| "the authorization server's token response cannot be read".to_owned())?;
    let field = |name: &str| value.get(name).and_then(Value::as_str);
    let access_token = field("access_token").unwrap_or_default();
    check_token(access_token, "access token")?;
    let refresh_token = field("refresh_token");
    if let Some(refresh_token) = refresh_token {
        check_token(refresh_token, "refresh token")?;
    }
    let token_type = field("token_type").unwrap_or("bearer");
    if !token_type.eq_ignore_ascii_case("bearer") {
        return Err(format!(
            "the authorization server issued a token of type \"{}\"; only bearer tokens can be sent",
            token_type.escape_debug().take(32).collect::<String>()
        ));
    }
    let expires_at = value
        .get("expires_in")
        .and_then(Value::as_u64)
        .map(|seconds| unix_now().saturating_add(i64::try_from(seconds).unwrap_or(i64::MAX)));
    let scopes = match field("scope") {
        Some(scope) => scope.split_whitespace().map(str::to_owned).collect(),
        None => issued.scopes.to_vec(),
    };
    let account = ACCOUNT_FIELDS
        .iter()
        .find_map(|name| field(name))
        .filter(|account| {
            !account.is_empty()
                && account.len() <= MAX_ACCOUNT_BYTES
                && !account.chars().any(char::is_control)
        })
        .map(str::to_owned);
    Ok(SignInCredential {
        server_url: issued.server_url.to_owned(),
        issuer: issued.issuer.to_owned(),
        client_id: issued.client_id.to_owned(),
        client_secret: issued.client_secret.map(str::to_owned),
        access_token: access_token.to_owned(),
        refresh_token: refresh_token.map(str::to_owned),
        token_type: "Bearer".to_owned(),
        expires_at,
        scopes,
        account,
    })
}

/// A token the agent can keep and send in a header (RFC 6750's characters), within
/// [`MAX_TOKEN_BYTES`]; what is wrong names the token, never its value.
fn check_token(token: &str, what: &str) -> Result<(), String> {
    if token.is_empty() {
        return Err(format!("the authorization server issued an empty {what}"));
    }
    if token.len() > MAX_TOKEN_BYTES {
        return Err(format!(
            "the {what} the authorization server issued is longer than {} KiB",
            MAX_TOKEN_BYTES / 1024
        ));
    }
    if !token.bytes().all(|byte| byte.is_ascii_graphic()) {
        return Err(format!(
            "the {what} the authorization server issued cannot be sent in a header"
        ));
    }
    Ok(())
}

/// The JSON of a token response that holds `access_token` and `refresh_token`, as rmcp's
/// refresh reads it back from a credential store.
pub(crate) fn response_for_refresh(
    credential: &SignInCredential,
) -> Result<OAuthTokenResponse, String> {
    let mut response = serde_json::json!({
        "access_token": credential.access_token,
        "token_type": "bearer",
    });
    if let Some(refresh_token) = &credential.refresh_token {
        response["refresh_token"] = Value::String(refresh_token.clone());
    }
    if !credential.scopes.is_empty() {
        response["scope"] = Value::String(credential.scopes.join(" "));
    }
    serde_json::from_value(response)
        .map_err(|_| "the held sign-in cannot be put into a token request".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issued() -> Issued<'static> {
        Issued {
            server_url: "http://127.0.0.1:9/mcp",
            issuer: "http://127.0.0.1:9",
            client_id: "client",
            client_secret: None,
            scopes: &[],
        }
    }

    fn check(response: Value) -> Result<SignInCredential, String> {
        let response: OAuthTokenResponse = serde_json::from_value(response).expect("parses");
        credential(&response, &issued())
    }

    #[test]
    fn a_token_response_becomes_a_credential() {
        let credential = check(serde_json::json!({
            "access_token": "at-1", "token_type": "Bearer", "expires_in": 3600,
            "refresh_token": "rt-1", "scope": "read write", "email": "a@example.com",
            "sub": "user-1",
        }))
        .expect("usable");
        assert_eq!(credential.access_token, "at-1");
        assert_eq!(credential.refresh_token.as_deref(), Some("rt-1"));
        assert_eq!(credential.token_type, "Bearer");
        assert_eq!(credential.scopes, ["read", "write"]);
        assert_eq!(credential.account.as_deref(), Some("a@example.com"));
        let left = credential.expires_at.expect("expiry") - unix_now();
        assert!((3590..=3600).contains(&left), "{left}");
    }

    #[test]
    fn tokens_that_cannot_be_sent_are_refused_without_showing_them() {
        for (response, expect) in [
            (
                serde_json::json!({"access_token": "at 1", "token_type": "bearer"}),
                "cannot be sent in a header",
            ),
            (
                serde_json::json!({"access_token": "x".repeat(MAX_TOKEN_BYTES + 1), "token_type": "bearer"}),
                "longer than 16 KiB",
            ),
            (
                serde_json::json!({"access_token": "at-1", "token_type": "mac"}),
                "only bearer tokens",
            ),
        ] {
            let error = check(response).expect_err("refused");
            assert!(error.contains(expect), "{error}");
            assert!(
                !error.contains("at 1") && !error.contains("xxxx"),
                "{error}"
            );
        }
    }

    #[test]
    fn a_held_credential_reads_back_as_a_token_response() {
        let mut credential = check(serde_json::json!({
            "access_token": "at-1", "token_type": "bearer", "refresh_token": "rt-1",
        }))
        .expect("usable");
        credential.scopes = vec!["read".into()];
        let response = response_for_refresh(&credential).expect("builds");
        let value = serde_json::to_value(response).expect("serializes");
        assert_eq!(value["refresh_token"], "rt-1");
        assert_eq!(value["scope"], "read");
    }
}
