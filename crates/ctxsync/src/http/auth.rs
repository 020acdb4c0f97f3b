//! HTTP authentication: the API's bearer token, and for a person's browser (which cannot
//! send a bearer header) a one-time link token bound to one chat, exchanged for a session
//! bound to that chat whose id travels in an HttpOnly cookie.
//!
//! The bearer token is checked in memory; link tokens and sessions live in the store
//! (only their digests), so any replica honours a link or a session another minted, and a
//! restart logs no browser out.

use std::time::Duration;

use axum::http::HeaderMap;
use ctxsync_persistence::{ChatId, Store, StoreError};
use subtle::ConstantTimeEq;

/// The session cookie's name over plain HTTP.
pub(super) const SESSION_COOKIE: &str = "ctxsync_session";
/// The session cookie's name over TLS: the `__Host-` prefix makes the browser refuse it
/// unless it is `Secure`, `Path=/` and has no `Domain`, so no other host can set it.
pub(super) const SECURE_SESSION_COOKIE: &str = "__Host-ctxsync_session";
/// The cookie binding a page's sign-in to its browser (see [`Auth::sign_in_cookie`]).
const SIGN_IN_COOKIE: &str = "ctxsync_sign_in";
/// How long a printed page link stays usable.
const LINK_TOKEN_TTL: Duration = Duration::from_secs(15 * 60);
/// How long a browser session lasts.
const SESSION_TTL: Duration = Duration::from_secs(12 * 60 * 60);
/// Session cookies of one request looked up at most (a browser sends one per server on
/// the host under the same name): a request cannot buy unbounded store reads.
const MAX_SESSION_COOKIES: usize = 8;

/// Who is calling, from the request's credentials alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    /// The API's bearer token: everything is allowed.
    Operator,
    /// A browser session: only this chat's page, its events and its refresh.
    Page(ChatId),
    /// No credentials, a wrong bearer token, or an unknown or expired session.
    Anonymous,
}

/// Who may call the API, and the browser sessions every replica shares through the
/// store. Its `Debug` shows no token, link or session.
pub struct Auth {
    api_token: String,
    store: Store,
    /// The page is served over TLS: the session cookie is `Secure` with the `__Host-` name.
    secure_cookies: bool,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("api_token", &"[redacted]")
            .field("secure_cookies", &self.secure_cookies)
            .finish_non_exhaustive()
    }
}

impl Auth {
    /// Accepts `api_token` as the bearer token and keeps page links and sessions in `store`;
    /// `secure_cookies` when the page is served over TLS.
    pub fn new(api_token: String, store: Store, secure_cookies: bool) -> Self {
        Self {
            api_token,
            store,
            secure_cookies,
        }
    }

    /// The session cookie's name on this server.
    pub fn cookie_name(&self) -> &'static str {
        if self.secure_cookies {
            SECURE_SESSION_COOKIE
        } else {
            SESSION_COOKIE
        }
    }

    /// The `Set-Cookie` value that starts a browser session: the id only, never sent to
    /// script or cross-site, on this host (no `Domain`).
    pub fn session_cookie(&self, session: &str) -> String {
        let secure = if self.secure_cookies { "; Secure" } else { "" };
        format!(
            "{}={session}; HttpOnly; SameSite=Strict; Path=/{secure}",
            self.cookie_name()
        )
    }

    /// Who the request's credentials name. A bearer header decides alone (a wrong one is
    /// anonymous even with a session cookie beside it) without touching the store.
    pub async fn caller(&self, headers: &HeaderMap) -> Result<Caller, StoreError> {
        if let Some(token) = bearer(headers) {
            return Ok(
                if bool::from(token.as_bytes().ct_eq(self.api_token.as_bytes())) {
                    Caller::Operator
                } else {
                    Caller::Anonymous
                },
            );
        }
        Ok(match self.page_session(headers).await? {
            Some(chat) => Caller::Page(chat),
            None => Caller::Anonymous,
        })
    }

    /// Mints a one-time token for a link to `chat`'s page. [`StoreError::LimitReached`]
    /// while too many links are open.
    pub async fn mint_link_token(&self, chat: ChatId) -> Result<String, StoreError> {
        self.store.mint_page_link(chat, LINK_TOKEN_TTL).await
    }

    /// The chat a live link token opens, without consuming it.
    pub async fn link_chat(&self, token: &str) -> Result<Option<ChatId>, StoreError> {
        self.store.page_link_chat(token).await
    }

    /// Consumes a link token for `chat` and returns a new session id bound to that chat,
    /// or `None` when the token is unknown, used, expired or for another chat (a token
    /// for another chat is left as it was).
    pub async fn exchange_link_token(
        &self,
        chat: ChatId,
        token: &str,
    ) -> Result<Option<String>, StoreError> {
        self.store
            .exchange_page_link(chat, token, SESSION_TTL)
            .await
    }

    /// The `Set-Cookie` value binding a sign-in a page started to this browser: sent back
    /// on the authorization server's redirect to the callback (`SameSite=Lax`, which a
    /// top-level navigation from another site carries; the page's own session cookie is
    /// `Strict` and would not be), for the callback only, for the state's 10 minutes.
    pub fn sign_in_cookie(&self, binding: &str) -> String {
        let secure = if self.secure_cookies { "; Secure" } else { "" };
        format!(
            "{SIGN_IN_COOKIE}={binding}; HttpOnly; SameSite=Lax; Path=/oauth/callback; Max-Age=600{secure}"
        )
    }

    /// The sign-in bindings the request carries (at most a few).
    pub fn sign_in_bindings<'a>(&self, headers: &'a HeaderMap) -> Vec<&'a str> {
        cookies(headers, SIGN_IN_COOKIE)
            .take(MAX_SESSION_COOKIES)
            .collect()
    }

    /// The chat of the page session the request's cookie names, if one is live. Browsers
    /// send every cookie of the host, including those of other servers on other ports
    /// under the same name: the first live session wins.
    pub async fn page_session(&self, headers: &HeaderMap) -> Result<Option<ChatId>, StoreError> {
        for session in cookies(headers, self.cookie_name()).take(MAX_SESSION_COOKIES) {
            if let Some(chat) = self.session_chat(session).await? {
                return Ok(Some(chat));
            }
        }
        Ok(None)
    }

    /// The chat a live session is bound to.
    pub async fn session_chat(&self, session: &str) -> Result<Option<ChatId>, StoreError> {
        self.store.page_session_chat(session).await
    }
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Every value of the cookie `name` in the request, in order.
fn cookies<'a>(headers: &'a HeaderMap, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(move |(key, _)| *key == name)
        .map(|(_, value)| value)
}

#[cfg(test)]
mod tests {
    use ctxsync_persistence::test_support::TestStore;

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        map
    }

    async fn auth(secure_cookies: bool) -> (Auth, TestStore) {
        let db = TestStore::sqlite().await;
        let auth = Auth::new(
            "s3cret-token-0123456789".into(),
            db.store().clone(),
            secure_cookies,
        );
        (auth, db)
    }

    async fn chat(db: &TestStore) -> ChatId {
        db.create_chat(None).await.unwrap().id
    }

    #[tokio::test]
    async fn bearer_token_is_the_operator() {
        let (auth, _db) = auth(false).await;
        for value in [
            "Bearer s3cret-token-0123456789",
            "bearer s3cret-token-0123456789",
        ] {
            assert_eq!(
                auth.caller(&headers(&[("authorization", value)]))
                    .await
                    .unwrap(),
                Caller::Operator
            );
        }
        assert_eq!(
            auth.caller(&headers(&[("authorization", "Bearer wrong")]))
                .await
                .unwrap(),
            Caller::Anonymous
        );
        assert_eq!(auth.caller(&headers(&[])).await.unwrap(), Caller::Anonymous);
    }

    #[tokio::test]
    async fn a_link_opens_one_session_bound_to_its_chat() {
        let (auth, db) = auth(false).await;
        let (chat, other) = (chat(&db).await, chat(&db).await);
        let link = auth.mint_link_token(chat).await.unwrap();
        assert_eq!(
            auth.link_chat(&link).await.unwrap(),
            Some(chat),
            "peeking keeps the link"
        );
        assert_eq!(
            auth.exchange_link_token(other, &link).await.unwrap(),
            None,
            "a link opens only its own chat"
        );
        let session = auth
            .exchange_link_token(chat, &link)
            .await
            .unwrap()
            .expect("a fresh link works once");
        assert_eq!(
            auth.exchange_link_token(chat, &link).await.unwrap(),
            None,
            "a link token is single-use"
        );
        assert_eq!(auth.link_chat(&link).await.unwrap(), None);

        let cookie = format!("other=1; {SESSION_COOKIE}=stale; {SESSION_COOKIE}={session}");
        let good = headers(&[("cookie", &cookie)]);
        assert_eq!(auth.caller(&good).await.unwrap(), Caller::Page(chat));
        let forged = headers(&[("cookie", "ctxsync_session=forged")]);
        assert_eq!(auth.caller(&forged).await.unwrap(), Caller::Anonymous);
        // A wrong bearer header is not rescued by a good cookie.
        let both = headers(&[("cookie", &cookie), ("authorization", "Bearer wrong")]);
        assert_eq!(auth.caller(&both).await.unwrap(), Caller::Anonymous);
    }

    #[tokio::test]
    async fn cookie_attributes_follow_tls() {
        let (plain, _db) = auth(false).await;
        assert_eq!(
            plain.session_cookie("abc"),
            "ctxsync_session=abc; HttpOnly; SameSite=Strict; Path=/"
        );
        let (secure, db) = auth(true).await;
        assert_eq!(
            secure.session_cookie("abc"),
            "__Host-ctxsync_session=abc; HttpOnly; SameSite=Strict; Path=/; Secure"
        );
        // Over TLS only the `__Host-` cookie counts.
        let chat = chat(&db).await;
        let link = secure.mint_link_token(chat).await.unwrap();
        let session = secure
            .exchange_link_token(chat, &link)
            .await
            .unwrap()
            .unwrap();
        let plain_name = format!("ctxsync_session={session}");
        assert_eq!(
            secure
                .caller(&headers(&[("cookie", &plain_name)]))
                .await
                .unwrap(),
            Caller::Anonymous
        );
        let host_name = format!("__Host-ctxsync_session={session}");
        assert_eq!(
            secure
                .caller(&headers(&[("cookie", &host_name)]))
                .await
                .unwrap(),
            Caller::Page(chat)
        );
    }
}
