//! HTTP authentication: the API's bearer token, and for a person's browser (which cannot
//! send a bearer header) a one-time link token exchanged for an HttpOnly session cookie.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use subtle::ConstantTimeEq;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "ctxsync_session";
/// How long a printed page link stays usable.
const LINK_TOKEN_TTL: Duration = Duration::from_secs(15 * 60);
/// How long a browser session lasts.
const SESSION_TTL: Duration = Duration::from_secs(12 * 60 * 60);
/// Bound on outstanding link tokens and sessions, so minting cannot grow memory unbounded.
const MAX_ENTRIES: usize = 10_000;

/// Who may call the API, and the browser sessions of this server process. Its `Debug`
/// shows no token, link or session.
pub struct Auth {
    api_token: String,
    links: Mutex<HashMap<String, Instant>>,
    sessions: Mutex<HashMap<String, Instant>>,
    /// The page is served over TLS: the session cookie is marked `Secure`.
    secure_cookies: bool,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let count =
            |table: &Mutex<HashMap<String, Instant>>| table.lock().map_or(0, |table| table.len());
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

    /// The `Set-Cookie` value that starts a browser session.
    pub fn session_cookie(&self, session: &str) -> String {
        let secure = if self.secure_cookies { "; Secure" } else { "" };
        format!("{SESSION_COOKIE}={session}; HttpOnly; SameSite=Strict; Path=/{secure}")
    }

    /// True when the request carries the API token as a bearer header, or a live session
    /// cookie.
    pub fn allows(&self, headers: &HeaderMap) -> bool {
        if let Some(token) = bearer(headers) {
            return bool::from(token.as_bytes().ct_eq(self.api_token.as_bytes()));
        }
        cookie(headers, SESSION_COOKIE).is_some_and(|session| self.session_is_live(session))
    }

    /// Mints a one-time token for a page link.
    pub fn mint_link_token(&self) -> String {
        let token = super::api_token::random_token();
        insert_bounded(&self.links, token.clone(), Instant::now() + LINK_TOKEN_TTL);
        token
    }

    /// Consumes a link token and returns a new session id, or `None` when the token is
    /// unknown, used or expired.
    pub fn exchange_link_token(&self, token: &str) -> Option<String> {
        let expires = self.links.lock().expect("link table lock").remove(token)?;
        if expires < Instant::now() {
            return None;
        }
        let session = super::api_token::random_token();
        insert_bounded(
            &self.sessions,
            session.clone(),
            Instant::now() + SESSION_TTL,
        );
        Some(session)
    }

    fn session_is_live(&self, session: &str) -> bool {
        self.sessions
            .lock()
            .expect("session table lock")
            .get(session)
            .is_some_and(|expires| *expires > Instant::now())
    }
}

fn insert_bounded(table: &Mutex<HashMap<String, Instant>>, key: String, expires: Instant) {
    let mut table = table.lock().expect("token table lock");
    let now = Instant::now();
    table.retain(|_, e| *e > now);
    if table.len() >= MAX_ENTRIES {
        // Drop the entry closest to expiry rather than refusing the newest.
        if let Some(oldest) = table
            .iter()
            .min_by_key(|(_, e)| **e)
            .map(|(k, _)| k.clone())
        {
            table.remove(&oldest);
        }
    }
    table.insert(key, expires);
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
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
    fn bearer_and_session_cookie() {
        let auth = Auth::new("s3cret-token-0123456789".into(), false);
        assert!(auth.allows(&headers(&[(
            "authorization",
            "Bearer s3cret-token-0123456789"
        )])));
        assert!(auth.allows(&headers(&[(
            "authorization",
            "bearer s3cret-token-0123456789"
        )])));
        assert!(!auth.allows(&headers(&[("authorization", "Bearer wrong")])));
        assert!(!auth.allows(&headers(&[])));

        let link = auth.mint_link_token();
        let session = auth
            .exchange_link_token(&link)
            .expect("a fresh link works once");
        assert_eq!(
            auth.exchange_link_token(&link),
            None,
            "a link token is single-use"
        );
        let cookie = format!("other=1; {SESSION_COOKIE}={session}");
        assert!(auth.allows(&headers(&[("cookie", &cookie)])));
        assert!(!auth.allows(&headers(&[("cookie", "ctxsync_session=forged")])));
    }
}
