//! HTTP authentication: the API's bearer token, and for a person's browser (which cannot
//! send a bearer header) a one-time link token bound to one chat, exchanged for a session
//! bound to that chat whose id travels in an HttpOnly cookie.
//!
//! Link tokens and sessions live in this process's memory for now; the interface stays
//! narrow (mint, peek, exchange, look up) so they can move to the store.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use ctxsync_persistence::ChatId;
use subtle::ConstantTimeEq;

/// The session cookie's name over plain HTTP.
pub const SESSION_COOKIE: &str = "ctxsync_session";
/// The session cookie's name over TLS: the `__Host-` prefix makes the browser refuse it
/// unless it is `Secure`, `Path=/` and has no `Domain`, so no other host can set it.
pub const SECURE_SESSION_COOKIE: &str = "__Host-ctxsync_session";
/// How long a printed page link stays usable.
const LINK_TOKEN_TTL: Duration = Duration::from_secs(15 * 60);
/// How long a browser session lasts.
const SESSION_TTL: Duration = Duration::from_secs(12 * 60 * 60);
/// Bound on outstanding link tokens and sessions, so minting cannot grow memory unbounded.
const MAX_ENTRIES: usize = 10_000;

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

/// A link token's or a session's chat and end of life.
#[derive(Clone, Copy, Debug)]
struct Grant {
    chat: ChatId,
    expires: Instant,
}

impl Grant {
    fn for_chat(chat: ChatId, ttl: Duration) -> Self {
        Self {
            chat,
            expires: Instant::now() + ttl,
        }
    }

    fn is_live(&self) -> bool {
        self.expires > Instant::now()
    }
}

type Grants = Mutex<HashMap<String, Grant>>;

/// Who may call the API, and the browser sessions of this server process. Its `Debug`
/// shows no token, link or session.
pub struct Auth {
    api_token: String,
    links: Grants,
    sessions: Grants,
    /// The page is served over TLS: the session cookie is `Secure` with the `__Host-` name.
    secure_cookies: bool,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let count = |table: &Grants| table.lock().map_or(0, |table| table.len());
        f.debug_struct("Auth")
            .field("api_token", &"[redacted]")
            .field("links", &count(&self.links))
            .field("sessions", &count(&self.sessions))
            .field("secure_cookies", &self.secure_cookies)
            .finish()
    }
}

impl Auth {
    pub fn new(api_token: String, secure_cookies: bool) -> Self {
        Self {
            api_token,
            links: Mutex::default(),
            sessions: Mutex::default(),
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
    /// anonymous even with a session cookie beside it).
    pub fn caller(&self, headers: &HeaderMap) -> Caller {
        if let Some(token) = bearer(headers) {
            return if bool::from(token.as_bytes().ct_eq(self.api_token.as_bytes())) {
                Caller::Operator
            } else {
                Caller::Anonymous
            };
        }
        // Browsers send every cookie of the host, including those of other servers on
        // other ports under the same name: the first live session wins.
        cookies(headers, self.cookie_name())
            .find_map(|session| self.session_chat(session))
            .map_or(Caller::Anonymous, Caller::Page)
    }

    /// Mints a one-time token for a link to `chat`'s page.
    pub fn mint_link_token(&self, chat: ChatId) -> String {
        let token = super::api_token::random_token();
        insert_bounded(
            &self.links,
            token.clone(),
            Grant::for_chat(chat, LINK_TOKEN_TTL),
        );
        token
    }

    /// The chat a live link token opens, without consuming it.
    pub fn link_chat(&self, token: &str) -> Option<ChatId> {
        live_chat(&self.links, token)
    }

    /// Consumes a link token for `chat` and returns a new session id bound to that chat,
    /// or `None` when the token is unknown, used, expired or for another chat (a token
    /// for another chat is left as it was).
    pub fn exchange_link_token(&self, chat: ChatId, token: &str) -> Option<String> {
        let grant = {
            let mut links = self.links.lock().expect("link table lock");
            match links.get(token) {
                Some(grant) if grant.chat == chat => links.remove(token)?,
                _ => return None,
            }
        };
        if !grant.is_live() {
            return None;
        }
        let session = super::api_token::random_token();
        insert_bounded(
            &self.sessions,
            session.clone(),
            Grant::for_chat(chat, SESSION_TTL),
        );
        Some(session)
    }

    /// The chat a live session is bound to.
    pub fn session_chat(&self, session: &str) -> Option<ChatId> {
        live_chat(&self.sessions, session)
    }
}

fn live_chat(table: &Grants, key: &str) -> Option<ChatId> {
    table
        .lock()
        .expect("token table lock")
        .get(key)
        .filter(|grant| grant.is_live())
        .map(|grant| grant.chat)
}

fn insert_bounded(table: &Grants, key: String, grant: Grant) {
    let mut table = table.lock().expect("token table lock");
    table.retain(|_, grant| grant.is_live());
    if table.len() >= MAX_ENTRIES {
        // Drop the entry closest to expiry rather than refusing the newest.
        if let Some(oldest) = table
            .iter()
            .min_by_key(|(_, grant)| grant.expires)
            .map(|(key, _)| key.clone())
        {
            table.remove(&oldest);
        }
    }
    table.insert(key, grant);
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

    #[test]
    fn bearer_token_is_the_operator() {
        let auth = Auth::new("s3cret-token-0123456789".into(), false);
        for value in [
            "Bearer s3cret-token-0123456789",
            "bearer s3cret-token-0123456789",
        ] {
            assert_eq!(
                auth.caller(&headers(&[("authorization", value)])),
                Caller::Operator
            );
        }
        assert_eq!(
            auth.caller(&headers(&[("authorization", "Bearer wrong")])),
            Caller::Anonymous
        );
        assert_eq!(auth.caller(&headers(&[])), Caller::Anonymous);
    }

    #[test]
    fn a_link_opens_one_session_bound_to_its_chat() {
        let auth = Auth::new("s3cret-token-0123456789".into(), false);
        let (chat, other) = (ChatId::new_random(), ChatId::new_random());
        let link = auth.mint_link_token(chat);
        assert_eq!(auth.link_chat(&link), Some(chat), "peeking keeps the link");
        assert_eq!(
            auth.exchange_link_token(other, &link),
            None,
            "a link opens only its own chat"
        );
        let session = auth
            .exchange_link_token(chat, &link)
            .expect("a fresh link works once");
        assert_eq!(
            auth.exchange_link_token(chat, &link),
            None,
            "a link token is single-use"
        );
        assert_eq!(auth.link_chat(&link), None);

        let cookie = format!("other=1; {SESSION_COOKIE}=stale; {SESSION_COOKIE}={session}");
        assert_eq!(
            auth.caller(&headers(&[("cookie", &cookie)])),
            Caller::Page(chat)
        );
        assert_eq!(
            auth.caller(&headers(&[("cookie", "ctxsync_session=forged")])),
            Caller::Anonymous
        );
        // A wrong bearer header is not rescued by a good cookie.
        assert_eq!(
            auth.caller(&headers(&[
                ("cookie", &cookie),
                ("authorization", "Bearer wrong")
            ])),
            Caller::Anonymous
        );
    }

    #[test]
    fn cookie_attributes_follow_tls() {
        let plain = Auth::new("t".into(), false).session_cookie("abc");
        assert_eq!(
            plain,
            "ctxsync_session=abc; HttpOnly; SameSite=Strict; Path=/"
        );
        let secure = Auth::new("t".into(), true);
        assert_eq!(
            secure.session_cookie("abc"),
            "__Host-ctxsync_session=abc; HttpOnly; SameSite=Strict; Path=/; Secure"
        );
        // Over TLS only the `__Host-` cookie counts.
        let chat = ChatId::new_random();
        let session = secure
            .exchange_link_token(chat, &secure.mint_link_token(chat))
            .unwrap();
        assert_eq!(
            secure.caller(&headers(&[(
                "cookie",
                &format!("ctxsync_session={session}")
            )])),
            Caller::Anonymous
        );
        assert_eq!(
            secure.caller(&headers(&[(
                "cookie",
                &format!("__Host-ctxsync_session={session}")
            )])),
            Caller::Page(chat)
        );
    }
}
