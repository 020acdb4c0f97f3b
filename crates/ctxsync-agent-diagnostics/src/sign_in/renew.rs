//! Keeping a held sign-in working: its access token refreshed (rmcp's refresh) shortly
//! before it expires — before a connect sends it, and on a live connection, which then
//! connects anew — and once after the server refuses it. A refresh the authorization
//! server refuses drops the credential: the server needs a person again. Each result goes
//! to the control plane ([`SignIns`] tells it).

use std::time::Duration;

use ctxsync_mcp_model::SignInCredential;
use rmcp::transport::auth::{
    AuthError, AuthorizationManager, CredentialStore, InMemoryCredentialStore, OAuthClientConfig,
    StoredCredentials,
};
use tokio::time::Instant;

use super::{
    SignIns, in_words,
    token::{self, Issued},
    unix_now,
};

/// A token that expires within this long is refreshed before it is sent.
pub(crate) const RENEW_BEFORE: Duration = Duration::from_secs(60);
/// After a refresh that failed for a reason that may pass (the network, the authorization
/// server), the next try waits this long.
const RENEW_RETRY: Duration = Duration::from_secs(30);

/// What one refresh came to.
enum Refresh {
    Renewed(Box<SignInCredential>),
    /// It will not be renewed (why): the authorization server refused the refresh token,
    /// issued none, or is no longer the one that issued it.
    Refused(String),
    /// It may work later (why, unsanitized).
    Failed(String),
}

/// Refreshes `credential` at its server's authorization server, discovered anew (from
/// `challenge`, the server's refusal, when there is one).
async fn refresh(credential: &SignInCredential, challenge: Option<&str>) -> Refresh {
    if credential.refresh_token.is_none() {
        return Refresh::Refused("the authorization server issued no refresh token".to_owned());
    }
    let url = credential.server_url.as_str();
    let failed = |error: AuthError| {
        Refresh::Failed(format!(
            "renewing the sign-in to the server at {url} failed: {}",
            in_words(&error)
        ))
    };
    let mut manager = match AuthorizationManager::new_allowing_private_addresses(url).await {
        Ok(manager) => manager,
        Err(error) => return failed(error),
    };
    let metadata = match manager.resolve_metadata_from_challenge(challenge).await {
        Ok(resolution) => resolution.metadata,
        Err(error) => return failed(error),
    };
    let same = |a: &str, b: &str| a.trim_end_matches('/') == b.trim_end_matches('/');
    if let Some(issuer) = metadata
        .issuer
        .as_deref()
        .filter(|issuer| !issuer.is_empty())
        && !same(issuer, &credential.issuer)
    {
        return Refresh::Refused(format!(
            "the server's authorization server is now {issuer}, not {}, which issued it",
            credential.issuer
        ));
    }
    manager.set_metadata(metadata);
    let mut client = OAuthClientConfig::new(credential.client_id.clone(), url);
    if let Some(secret) = &credential.client_secret {
        client = client.with_client_secret(secret.clone());
    }
    if let Err(error) = manager.configure_client(client) {
        return failed(error);
    }
    let response = match token::response_for_refresh(credential) {
        Ok(response) => response,
        Err(words) => return Refresh::Failed(words),
    };
    // rmcp refreshes what its credential store holds: a store holding just this one.
    let store = InMemoryCredentialStore::new();
    let stored = StoredCredentials::new(
        credential.client_id.clone(),
        Some(response),
        credential.scopes.clone(),
        None,
    )
    .with_issuer(Some(credential.issuer.clone()));
    if let Err(error) = store.save(stored).await {
        return failed(error);
    }
    manager.set_credential_store(store);
    match manager.refresh_token().await {
        Ok(response) => {
            let issued = Issued {
                server_url: url,
                issuer: &credential.issuer,
                client_id: &credential.client_id,
                client_secret: credential.client_secret.as_deref(),
                scopes: &credential.scopes,
            };
            match token::credential(&response, &issued) {
                Ok(renewed) => Refresh::Renewed(Box::new(renewed)),
                Err(words) => Refresh::Failed(words),
            }
        }
        Err(AuthError::TokenRefreshRejected(_) | AuthError::AuthorizationRequired) => {
            Refresh::Refused("the authorization server refused to renew it".to_owned())
        }
        Err(error) => failed(error),
    }
}

/// What renewing a held credential came to.
enum Renewal {
    /// The renewed credential is held and the control plane told.
    Renewed(SignInCredential),
    /// What is held changed while this one waited its turn (another connection renewed
    /// it, or it was restored or forgotten): what is held now.
    Superseded(Option<SignInCredential>),
    /// Dropped, and the control plane told: a person must sign in again (why).
    Lapsed(String),
    /// It may work later (why, unsanitized).
    Failed(String),
}

/// Renews `held`, `server`'s credential, one renewal per server at a time.
async fn renew(
    sign_ins: &SignIns,
    server: &str,
    held: &SignInCredential,
    challenge: Option<&str>,
) -> Renewal {
    let lock = sign_ins.renewal_lock(server);
    let _renewing = lock.lock().await;
    let url = &held.server_url;
    match sign_ins.current(server, url) {
        Some(current) if current.access_token == held.access_token => {}
        current => return Renewal::Superseded(current),
    }
    match refresh(held, challenge).await {
        Refresh::Renewed(renewed) => {
            if sign_ins.renewed(server, &held.access_token, (*renewed).clone()) {
                Renewal::Renewed(*renewed)
            } else {
                Renewal::Superseded(sign_ins.current(server, url))
            }
        }
        Refresh::Refused(why) => {
            if sign_ins.lapse(server, &held.access_token, &why) {
                Renewal::Lapsed(why)
            } else {
                Renewal::Superseded(sign_ins.current(server, url))
            }
        }
        Refresh::Failed(words) => Renewal::Failed(words),
    }
}

/// Whether `credential`'s access token expires within `within` (never, when it did not
/// say when).
fn expires_within(credential: &SignInCredential, within: Duration) -> bool {
    let within = i64::try_from(within.as_secs()).unwrap_or(i64::MAX);
    credential
        .expires_at
        .is_some_and(|expires_at| expires_at.saturating_sub(unix_now()) <= within)
}

/// The access token a connect to `server` at `url` sends: the held one, refreshed first
/// when it expires within [`RENEW_BEFORE`]; none when nothing is held or it was just
/// dropped. A refresh that fails for now is logged (through `clean`) and the token sent
/// as it is: the server decides.
pub(crate) async fn token_for_connect(
    sign_ins: &SignIns,
    server: &str,
    url: &str,
    clean: impl Fn(&str) -> String,
) -> Option<String> {
    let held = sign_ins.current(server, url)?;
    if held.refresh_token.is_none() || !expires_within(&held, RENEW_BEFORE) {
        return Some(held.access_token);
    }
    match renew(sign_ins, server, &held, None).await {
        Renewal::Renewed(renewed) => Some(renewed.access_token),
        Renewal::Superseded(current) => current.map(|current| current.access_token),
        Renewal::Lapsed(_) => None,
        Renewal::Failed(words) => {
            tracing::warn!(server, error = %clean(&words), "the sign-in could not be renewed before it expires; connecting with it as it is");
            Some(held.access_token)
        }
    }
}

/// What to do after the server refused the access token a connect sent.
pub(crate) enum AfterRefusal {
    /// Connect again with this token (renewed, or renewed meanwhile by another).
    Retry(String),
    /// The credential was dropped: a person must sign in again (why).
    Lapsed(String),
    /// It could not be renewed for now (why, unsanitized): try again later.
    Failed(String),
    /// Nothing is held any more: the refusal stands as it is.
    NotHeld,
}

/// Renews `server`'s credential once after the server at `url` refused its access token
/// `sent` with `challenge`.
pub(crate) async fn after_refusal(
    sign_ins: &SignIns,
    server: &str,
    url: &str,
    sent: &str,
    challenge: Option<&str>,
) -> AfterRefusal {
    let Some(held) = sign_ins.current(server, url) else {
        return AfterRefusal::NotHeld;
    };
    if held.access_token != sent {
        return AfterRefusal::Retry(held.access_token);
    }
    match renew(sign_ins, server, &held, challenge).await {
        Renewal::Renewed(current) | Renewal::Superseded(Some(current)) => {
            AfterRefusal::Retry(current.access_token)
        }
        Renewal::Superseded(None) => AfterRefusal::NotHeld,
        Renewal::Lapsed(why) => AfterRefusal::Lapsed(why),
        Renewal::Failed(words) => AfterRefusal::Failed(words),
    }
}

/// When a live connection that sent `credential` renews it: [`RENEW_BEFORE`] its expiry,
/// but not sooner than a retry's wait; never for a credential that cannot be renewed or
/// does not expire.
pub(crate) fn renewal_at(credential: &SignInCredential) -> Option<Instant> {
    credential.refresh_token.as_ref()?;
    let expires_at = credential.expires_at?;
    let before = i64::try_from(RENEW_BEFORE.as_secs()).unwrap_or(i64::MAX);
    let left = expires_at.saturating_sub(unix_now()).saturating_sub(before);
    let wait = Duration::from_secs(u64::try_from(left).unwrap_or(0)).max(RENEW_RETRY);
    Some(Instant::now() + wait)
}

/// What a live connection does when its renewal is due.
pub(crate) enum LiveRenewal {
    /// Its credential was renewed or dropped: the server connects anew.
    Reconnect,
    /// Try again then.
    RetryAt(Instant),
    /// Nothing: what is held is no longer what it sent (whoever changed it reconnects).
    Done,
}

/// Renews the credential a live connection to `server` at `url` sent (`sent`), when it is
/// still the one held; a failure is logged through `clean`.
pub(crate) async fn renew_live(
    sign_ins: &SignIns,
    server: &str,
    url: &str,
    sent: &str,
    clean: impl Fn(&str) -> String,
) -> LiveRenewal {
    let Some(held) = sign_ins
        .current(server, url)
        .filter(|held| held.access_token == sent)
    else {
        return LiveRenewal::Done;
    };
    match renew(sign_ins, server, &held, None).await {
        Renewal::Renewed(_) | Renewal::Lapsed(_) => LiveRenewal::Reconnect,
        Renewal::Superseded(_) => LiveRenewal::Done,
        Renewal::Failed(words) => {
            tracing::warn!(server, error = %clean(&words), "the sign-in could not be renewed; trying again soon");
            LiveRenewal::RetryAt(Instant::now() + RENEW_RETRY)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credential(expires_in: Option<i64>, refresh: bool) -> SignInCredential {
        SignInCredential {
            server_url: "http://127.0.0.1:9/mcp".into(),
            issuer: "http://127.0.0.1:9".into(),
            client_id: "client".into(),
            client_secret: None,
            access_token: "at-1".into(),
            refresh_token: refresh.then(|| "rt-1".into()),
            token_type: "Bearer".into(),
            expires_at: expires_in.map(|seconds| unix_now() + seconds),
            scopes: Vec::new(),
            account: None,
        }
    }

    #[test]
    fn renewals_are_due_a_minute_before_expiry_and_never_in_a_loop() {
        let now = Instant::now();
        let at = renewal_at(&credential(Some(3600), true)).expect("due");
        let wait = at - now;
        assert!(
            wait >= Duration::from_secs(3530) && wait <= Duration::from_secs(3541),
            "{wait:?}"
        );
        let soon = renewal_at(&credential(Some(10), true)).expect("due") - now;
        assert!(soon >= RENEW_RETRY, "{soon:?}");
        assert_eq!(renewal_at(&credential(Some(3600), false)), None);
        assert_eq!(renewal_at(&credential(None, true)), None);
        assert!(expires_within(&credential(Some(30), true), RENEW_BEFORE));
        assert!(!expires_within(&credential(Some(120), true), RENEW_BEFORE));
        assert!(!expires_within(&credential(None, true), RENEW_BEFORE));
    }

    #[tokio::test]
    async fn a_credential_without_a_refresh_token_lapses_at_once() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let sign_ins = SignIns::new(Some(tx));
        let held = credential(Some(3600), false);
        sign_ins.hold("s", held.clone());
        let outcome = after_refusal(&sign_ins, "s", &held.server_url, "at-1", None).await;
        assert!(
            matches!(outcome, AfterRefusal::Lapsed(ref why) if why.contains("no refresh token"))
        );
        assert_eq!(sign_ins.current("s", &held.server_url), None);
        assert_eq!(rx.try_recv().expect("told").credential, None);
        let outcome = after_refusal(&sign_ins, "s", &held.server_url, "at-1", None).await;
        assert!(matches!(outcome, AfterRefusal::NotHeld));
    }
}
