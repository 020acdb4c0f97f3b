//! The agent's side of signing in to an HTTP MCP server (OAuth 2.1, through rmcp's `auth`
//! feature): today the client-credentials grant of an entry's `oauth` block, which needs no
//! person. The metadata, the token request and the token itself stay on the agent's network
//! and in its memory; nothing is written to disk.
//!
//! Must never: put a secret or token into a sentence (the engine sanitizes with the
//! entry's secrets, which include the client secret), or follow metadata to a link-local
//! or reserved address (rmcp refuses those).

use rmcp::transport::auth::{AuthError, AuthorizationManager, ClientCredentialsConfig};

use crate::config::PreregisteredClient;
use crate::failure;

/// An access token for the server at `url`, from its authorization server by the
/// client-credentials grant with `client`'s id and secret; or why not, in words.
pub(crate) async fn client_credentials_token(
    url: &str,
    client: &PreregisteredClient,
) -> Result<String, String> {
    let words = |error: AuthError| {
        format!(
            "signing in to the server at {url} with the client credentials in its \"oauth\" block failed: {}",
            in_words(&error)
        )
    };
    let secret = client
        .client_secret
        .clone()
        .ok_or_else(|| "the \"oauth\" block has no \"clientSecret\"".to_owned())?;
    // The workspace's servers may well be private; metadata may then name private hosts
    // too (rmcp still refuses link-local and reserved ones).
    let mut manager = AuthorizationManager::new_allowing_private_addresses(url)
        .await
        .map_err(words)?;
    let resolution = manager.resolve_metadata().await.map_err(words)?;
    manager.set_metadata(resolution.metadata);
    let config = ClientCredentialsConfig::ClientSecret {
        client_id: client.client_id.clone(),
        client_secret: secret,
        scopes: client.scopes.clone(),
        // RFC 8707: the token is for this server.
        resource: Some(url.to_owned()),
    };
    manager
        .validate_client_credentials_metadata(&config)
        .map_err(words)?;
    manager
        .configure_client_credentials(&config)
        .map_err(words)?;
    manager
        .exchange_client_credentials(&config)
        .await
        .map_err(words)?;
    // The manager keeps the token it was given (in memory only) and hands it out.
    manager.get_access_token().await.map_err(words)
}

/// rmcp's error as a person reads it: its own sentence, and the innermost cause of a
/// failed request (which says what the network did).
fn in_words(error: &AuthError) -> String {
    let mut text = error.to_string();
    let cause = failure::innermost(error);
    if !text.contains(&cause) {
        text.push_str(": ");
        text.push_str(&cause);
    }
    text
}
