//! The chat's web page for a person's browser: the one-time link (a GET shows a button, a
//! same-origin form POST exchanges the token for a session bound to the chat), the page,
//! its script and stylesheet, what a session may reach, and the security headers every
//! response carries.

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use ctxsync_chat_projection::store::load_chat;
use ctxsync_context_ui::{
    PAGE_SCRIPT, PAGE_STYLE, PageAgent, PageShell, build_chat_panel, escape, render_page_with_calls,
};
use ctxsync_persistence::ChatId;
use serde::Deserialize;

use super::auth::Caller;
use super::{ApiError, AppState};

/// Everything the page needs comes from its own origin: one script file, one stylesheet,
/// the event stream and the refresh call; nothing inline, no frames, no other origin.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
    style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; \
    form-action 'self'; frame-ancestors 'none'";

/// The path of a chat's page with a one-time link token. Opening it shows a button; only
/// the button's POST uses the token up, so a link previewer's GET leaves it working.
pub fn page_path(chat: ChatId, token: &str) -> String {
    format!("/chats/{chat}?token={token}")
}

/// Where the link page's form posts the token.
fn exchange_path(chat: ChatId) -> String {
    format!("/chats/{chat}/session")
}

/// The chat a browser session may reach on this API route, given as its raw `{id}`; `None`
/// when a session may not use the route at all. A session opens its chat's page (checked
/// by [`page`] itself), that chat's event stream and its refresh action, nothing else.
pub(super) fn session_route_chat<'a>(method: &Method, path: &'a str) -> Option<&'a str> {
    let segments: Vec<&str> = path.strip_prefix('/')?.split('/').collect();
    match (method, segments.as_slice()) {
        (&Method::GET, ["api", "chats", chat, "context", "events"])
        | (&Method::PUT, ["api", "chats", chat, "context"]) => Some(chat),
        _ => None,
    }
}

/// Adds the security headers to every response: the CSP (it matters on HTML; elsewhere it
/// only forbids more), no MIME sniffing, no referrer (a link's token never leaks through
/// it), no framing, and `no-store` unless the handler chose its own caching, so nothing
/// private — tokens, links, chat context — lands in a cache.
pub(super) async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

pub(super) async fn script() -> Response {
    asset("text/javascript; charset=utf-8", PAGE_SCRIPT)
}

pub(super) async fn stylesheet() -> Response {
    asset("text/css; charset=utf-8", PAGE_STYLE)
}

/// A public, unchanging file: revalidated rather than stored forever, so an upgraded
/// server's page never runs an old script.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

#[derive(Debug, Deserialize)]
pub(super) struct PageQuery {
    token: Option<String>,
}

/// `GET /chats/{id}`: with `?token=` the link page (the token is only looked at); else the
/// page for the bearer token or a session bound to this chat.
pub(super) async fn page(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    Query(query): Query<PageQuery>,
    headers: HeaderMap,
) -> Response {
    let Ok(chat) = raw.parse::<ChatId>() else {
        return message(StatusCode::NOT_FOUND, "No such chat.");
    };
    if let Some(token) = query.token {
        match state.auth.link_chat(&token).await {
            Ok(Some(linked)) if linked == chat => {}
            Ok(_) => return expired_link(),
            Err(e) => return ApiError::from(e).into_response(),
        }
        return Html(link_page(chat, &token)).into_response();
    }
    let caller = match state.auth.caller(&headers).await {
        Ok(caller) => caller,
        Err(e) => return ApiError::from(e).into_response(),
    };
    match caller {
        Caller::Operator => {}
        Caller::Page(session_chat) if session_chat == chat => {}
        Caller::Page(_) => {
            return message(
                StatusCode::FORBIDDEN,
                "This browser's session is for another chat. Open this chat through its own link.",
            );
        }
        Caller::Anonymous => {
            return message(
                StatusCode::UNAUTHORIZED,
                &format!(
                    "Open this page through a one-time link: `ctxsync link --chat {chat}` prints one."
                ),
            );
        }
    }
    let loaded = match load_chat(&state.store, chat).await {
        Ok(Some(loaded)) => loaded,
        Ok(None) => return message(StatusCode::NOT_FOUND, "No such chat."),
        Err(e) => return ApiError::from(e).into_response(),
    };
    // The header's agent name: read once per page load (the panel below it updates live).
    let agent = match loaded.chat.agent_id {
        Some(agent) => match state.store.get_agent(agent).await {
            Ok(record) => record.map(|a| (agent.to_string(), a.name)),
            Err(e) => return ApiError::from(e).into_response(),
        },
        None => None,
    };
    // Read after the panel: the page's event stream starts with the calls' current state,
    // so one that changes in between is corrected as soon as the stream opens.
    let calls = match super::tool_call::events::recent_items(&state.store, chat).await {
        Ok(calls) => calls,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let panel = build_chat_panel(&chat.to_string(), &loaded.context, &loaded.binding);
    let agent = agent.as_ref().map(|(id, name)| PageAgent { id, name });
    Html(render_page_with_calls(&panel, agent, &calls)).into_response()
}

/// `POST /chats/{id}/session` (the link page's form, `token=…`): uses the token up, starts
/// a session bound to this chat in an HttpOnly cookie and sends the browser to the page.
pub(super) async fn exchange(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    form: String,
) -> Response {
    // Another site cannot plant a session in this browser (the form is same-origin).
    let cross_site = headers
        .get("sec-fetch-site")
        .is_some_and(|site| site.as_bytes() == b"cross-site");
    if cross_site {
        return message(
            StatusCode::FORBIDDEN,
            "This link must be opened directly, not from another site.",
        );
    }
    let Ok(chat) = raw.parse::<ChatId>() else {
        return expired_link();
    };
    let token = form
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(name, _)| *name == "token")
        .map(|(_, value)| value);
    let Some(token) = token else {
        return expired_link();
    };
    let session = match state.auth.exchange_link_token(chat, token).await {
        Ok(Some(session)) => session,
        Ok(None) => return expired_link(),
        Err(e) => return ApiError::from(e).into_response(),
    };
    let mut response = Redirect::to(&format!("/chats/{chat}")).into_response();
    let cookie = HeaderValue::from_str(&state.auth.session_cookie(&session))
        .expect("a session cookie is a valid header value");
    response.headers_mut().insert(header::SET_COOKIE, cookie);
    response
}

fn expired_link() -> Response {
    message(
        StatusCode::UNAUTHORIZED,
        "This link has expired or was already used. Ask for a new one.",
    )
}

/// The link page: one button whose POST carries the token.
fn link_page(chat: ChatId, token: &str) -> String {
    document(&format!(
        r#"<p>This one-time link opens the context of chat <code>{chat}</code> in this browser.</p>
<form class="link-form" method="post" action="{action}">
<input type="hidden" name="token" value="{token}">
<button type="submit">Open the chat's context</button>
</form>"#,
        action = escape(&exchange_path(chat)),
        token = escape(token),
    ))
}

fn message(status: StatusCode, text: &str) -> Response {
    (status, Html(document(&format!("<p>{}</p>", escape(text))))).into_response()
}

/// A page of this module in the chat page's shell, without its script.
fn document(body: &str) -> String {
    let shell = PageShell {
        title: "ctxsync · chat context",
        sub: None,
        script: false,
    };
    shell.render(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_reaches_only_its_events_and_refresh() {
        let id = "00000000-0000-4000-8000-000000000000";
        let events = format!("/api/chats/{id}/context/events");
        let context = format!("/api/chats/{id}/context");
        assert_eq!(session_route_chat(&Method::GET, &events), Some(id));
        assert_eq!(session_route_chat(&Method::PUT, &context), Some(id));
        for (method, path) in [
            (Method::GET, context.as_str()),
            (Method::POST, events.as_str()),
            (Method::GET, "/api/agents"),
            (Method::POST, "/api/agents"),
            (Method::POST, &format!("/api/chats/{id}/link")),
            (Method::POST, &format!("/api/chats/{id}/turns")),
            (Method::GET, &format!("/api/chats/{id}")),
            (Method::GET, &format!("/api/chats/{id}/context/events/")),
            (Method::GET, "/metrics"),
            // The stream carries the calls' safe fields; the calls themselves stay the
            // API token's.
            (
                Method::GET,
                &format!("/api/chats/{id}/turns/{id}/tool-calls/c1"),
            ),
            (
                Method::POST,
                &format!("/api/chats/{id}/turns/{id}/tool-calls"),
            ),
        ] {
            assert_eq!(session_route_chat(&method, path), None, "{method} {path}");
        }
    }

    /// The link and error pages keep the bytes they had before they shared the chat
    /// page's shell.
    #[test]
    fn the_link_page_keeps_its_bytes_in_the_shared_shell() {
        let chat: ChatId = "00000000-0000-4000-8000-000000000000".parse().unwrap();
        let page = link_page(chat, "t<k>");
        assert_eq!(
            page,
            r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ctxsync · chat context</title>
<link rel="stylesheet" href="/static/page.css">
</head>
<body>
<header class="page-header">
<h1>Chat context</h1>
</header>
<main>
<p>This one-time link opens the context of chat <code>00000000-0000-4000-8000-000000000000</code> in this browser.</p>
<form class="link-form" method="post" action="/chats/00000000-0000-4000-8000-000000000000/session">
<input type="hidden" name="token" value="t&lt;k&gt;">
<button type="submit">Open the chat's context</button>
</form>
</main>
</body>
</html>
"#
        );
    }
}
