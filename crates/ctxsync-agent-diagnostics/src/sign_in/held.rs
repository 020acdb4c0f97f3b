//! The sign-ins the engine holds: one credential per server, in memory only, shared by the
//! engine's handle (which holds and forgets them) and the connection tasks (which send and
//! renew them); and what a diagnostic must never show of them.

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use ctxsync_mcp_model::SignInCredential;
use tokio::sync::mpsc;

use crate::sanitize::SecretSet;

/// How many replaced or dropped credentials' secrets stay redacted: a late sentence about
/// a token just renewed stays clean, and the set stays bounded however often tokens are
/// renewed.
const RETIRED_SECRETS: usize = 16;

/// A refresh's result, for the control plane to keep: the new credential, or `None` when
/// the authorization server refused the refresh (the server needs a person again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignInUpdate {
    /// The server, as the report names it.
    pub server: String,
    /// The renewed credential; `None` when it could not be renewed and was dropped.
    pub credential: Option<SignInCredential>,
}

#[derive(Default)]
struct Held {
    credentials: BTreeMap<String, SignInCredential>,
    /// Servers whose credential was dropped because it could not be renewed, with why:
    /// their 401 says that a person must sign in again.
    lapsed: BTreeMap<String, String>,
    /// Secrets of credentials no longer held, newest last.
    retired: VecDeque<String>,
    /// One renewal at a time per server: a rotating refresh token used twice would be
    /// refused the second time.
    renewals: HashMap<String, Arc<tokio::sync::Mutex<()>>>,
}

impl Held {
    fn retire(&mut self, credential: SignInCredential) {
        let secrets = [
            Some(credential.access_token),
            credential.refresh_token,
            credential.client_secret,
        ];
        self.retired.extend(secrets.into_iter().flatten());
        while self.retired.len() > RETIRED_SECRETS {
            self.retired.pop_front();
        }
    }

    /// Holds `credential` for `server`, retiring the one it replaces.
    fn put(&mut self, server: &str, credential: SignInCredential) {
        self.lapsed.remove(server);
        if let Some(old) = self.credentials.insert(server.to_owned(), credential) {
            self.retire(old);
        }
    }

    /// The credential held for `server` when its access token is `access_token`.
    fn is_held(&self, server: &str, access_token: &str) -> bool {
        self.credentials
            .get(server)
            .is_some_and(|held| held.access_token == access_token)
    }
}

/// The credentials people's sign-ins gave, by server name. `Debug` counts them.
pub(crate) struct SignIns {
    held: Mutex<Held>,
    updates: Option<mpsc::UnboundedSender<SignInUpdate>>,
}

impl std::fmt::Debug for SignIns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignIns")
            .field("held", &self.lock().credentials.len())
            .finish_non_exhaustive()
    }
}

impl SignIns {
    /// Renewals and lapses are told to `updates`, when given.
    pub(crate) fn new(updates: Option<mpsc::UnboundedSender<SignInUpdate>>) -> Self {
        Self {
            held: Mutex::default(),
            updates,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        // Every change is a single insert or remove: a panic elsewhere leaves no half state.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn tell(&self, server: &str, credential: Option<SignInCredential>) {
        if let Some(updates) = &self.updates {
            // Nobody listening means nobody keeps credentials; the engine works without.
            let _ = updates.send(SignInUpdate {
                server: server.to_owned(),
                credential,
            });
        }
    }

    /// Holds the credential a person's sign-in just gave.
    pub(crate) fn hold(&self, server: &str, credential: SignInCredential) {
        self.lock().put(server, credential);
    }

    /// Holds a credential the control plane kept, unless the one held already is a newer
    /// renewal of it (the control plane may not have stored that yet); whether what is
    /// held changed.
    pub(crate) fn restore(&self, server: &str, credential: SignInCredential) -> bool {
        let mut held = self.lock();
        if let Some(current) = held.credentials.get(server) {
            let same_grant = current.server_url == credential.server_url
                && current.client_id == credential.client_id
                && current.issuer == credential.issuer;
            let newer = matches!(
                (current.expires_at, credential.expires_at),
                (Some(current), Some(restored)) if current > restored
            );
            if *current == credential || (same_grant && newer) {
                return false;
            }
        }
        held.put(server, credential);
        true
    }

    /// Drops what is held for `server`; whether anything was.
    pub(crate) fn forget(&self, server: &str) -> bool {
        let mut held = self.lock();
        held.lapsed.remove(server);
        match held.credentials.remove(server) {
            Some(old) => {
                held.retire(old);
                true
            }
            None => false,
        }
    }

    /// The credential held for `server` when it was given for `url` (an entry whose URL
    /// changed does not get a token meant for another server).
    pub(crate) fn current(&self, server: &str, url: &str) -> Option<SignInCredential> {
        self.lock()
            .credentials
            .get(server)
            .filter(|credential| credential.server_url == url)
            .cloned()
    }

    /// Why `server`'s credential was dropped, when it could not be renewed.
    pub(crate) fn lapsed(&self, server: &str) -> Option<String> {
        self.lock().lapsed.get(server).cloned()
    }

    /// The tokens and client secrets held now and recently: no sentence may show them.
    pub(crate) fn secrets(&self) -> SecretSet {
        let held = self.lock();
        let mut secrets = SecretSet::new();
        for credential in held.credentials.values() {
            secrets.insert(&credential.access_token);
            for secret in [&credential.refresh_token, &credential.client_secret]
                .into_iter()
                .flatten()
            {
                secrets.insert(secret);
            }
        }
        for secret in &held.retired {
            secrets.insert(secret);
        }
        secrets
    }

    /// The lock one renewal of `server`'s credential holds.
    pub(crate) fn renewal_lock(&self, server: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.lock()
            .renewals
            .entry(server.to_owned())
            .or_default()
            .clone()
    }

    /// Replaces the credential whose access token is `old` with its renewal, when it is
    /// still the one held, and tells the control plane; whether it was.
    pub(crate) fn renewed(&self, server: &str, old: &str, renewed: SignInCredential) -> bool {
        {
            let mut held = self.lock();
            if !held.is_held(server, old) {
                return false;
            }
            held.put(server, renewed.clone());
        }
        self.tell(server, Some(renewed));
        true
    }

    /// Drops the credential whose access token is `old`, when it is still the one held,
    /// because it could not be renewed (`why`), and tells the control plane; whether it
    /// was.
    pub(crate) fn lapse(&self, server: &str, old: &str, why: &str) -> bool {
        {
            let mut held = self.lock();
            if !held.is_held(server, old) {
                return false;
            }
            if let Some(dropped) = held.credentials.remove(server) {
                held.retire(dropped);
            }
            held.lapsed.insert(server.to_owned(), why.to_owned());
        }
        self.tell(server, None);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credential(access: &str, expires_at: i64) -> SignInCredential {
        SignInCredential {
            server_url: "http://127.0.0.1:9/mcp".into(),
            issuer: "http://127.0.0.1:9".into(),
            client_id: "client".into(),
            client_secret: Some("client-secret-1".into()),
            access_token: access.into(),
            refresh_token: Some(format!("refresh-{access}")),
            token_type: "Bearer".into(),
            expires_at: Some(expires_at),
            scopes: Vec::new(),
            account: None,
        }
    }

    #[test]
    fn a_restore_never_replaces_a_newer_renewal() {
        let sign_ins = SignIns::new(None);
        assert!(sign_ins.restore("s", credential("access-1", 100)));
        assert!(!sign_ins.restore("s", credential("access-1", 100)), "same");
        assert!(sign_ins.renewed("s", "access-1", credential("access-2", 200)));
        assert!(!sign_ins.restore("s", credential("access-1", 100)), "older");
        assert!(sign_ins.restore("s", credential("access-3", 300)));
        let url = "http://127.0.0.1:9/mcp";
        assert_eq!(
            sign_ins.current("s", url).map(|c| c.access_token),
            Some("access-3".to_owned())
        );
        assert_eq!(sign_ins.current("s", "http://127.0.0.1:9/other"), None);
    }

    #[test]
    fn a_stale_renewal_or_lapse_changes_nothing() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let sign_ins = SignIns::new(Some(tx));
        sign_ins.hold("s", credential("access-1", 100));
        assert!(!sign_ins.renewed("s", "access-0", credential("access-2", 200)));
        assert!(!sign_ins.lapse("s", "access-0", "refused"));
        assert!(rx.try_recv().is_err());
        assert!(sign_ins.lapse("s", "access-1", "refused"));
        assert_eq!(sign_ins.lapsed("s").as_deref(), Some("refused"));
        let update = rx.try_recv().expect("told");
        assert_eq!((update.server.as_str(), update.credential), ("s", None));
        sign_ins.hold("s", credential("access-4", 400));
        assert_eq!(sign_ins.lapsed("s"), None, "a new sign-in clears it");
    }

    #[test]
    fn held_and_recent_secrets_are_redacted_and_bounded() {
        let sign_ins = SignIns::new(None);
        sign_ins.hold("s", credential("access-first", 1));
        for n in 0..40 {
            sign_ins.hold("s", credential(&format!("access-{n}"), n));
        }
        let text = crate::sanitize::sanitize_diagnostic(
            "access-39 refresh-access-38 client-secret-1",
            &sign_ins.secrets(),
        );
        assert!(!text.contains("access-3"), "{text}");
        assert!(!text.contains("client-secret-1"), "{text}");
        let held = sign_ins.lock();
        assert!(held.retired.len() <= RETIRED_SECRETS);
        assert!(!held.retired.iter().any(|s| s == "access-first"));
    }
}
