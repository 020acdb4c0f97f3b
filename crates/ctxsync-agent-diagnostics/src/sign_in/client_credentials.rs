//! The client-credentials grant of an entry's `oauth` block (the MCP client-credentials
//! extension): a token on every connect with the client's id and secret, no person
//! involved; kept in memory only.

use rmcp::transport::auth::{AuthError, AuthorizationManager, ClientCredentialsConfig};

use super::in_words;
use crate::config::PreregisteredClient;

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
