//! Browser sessions bound to one chat, through real HTTP on loopback: a session reaches
//! its chat's page, events and refresh and nothing else; a link survives any number of
//! GETs (link previewers) and is used up by one POST; HTML carries a strict CSP and the
//! other security headers; token-carrying responses are never cached; the cookie's
//! attributes with and without TLS.

use crate::support;

use ctxsync::server::ServerConfig;
use ctxsync::tls::TlsFiles;
use reqwest::{Method, StatusCode};
use serde_json::json;
use support::*;

async fn harness() -> Harness {
    Harness::start(TestBackend::Sqlite)
        .await
        .expect("SQLite always starts")
}

/// A client that shows redirects instead of following them.
fn browser_like() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// A fresh link to `chat`'s page: (path with the token, the token).
async fn link(h: &Harness, chat: &str) -> (String, String) {
    let (status, body) = h
        .call(Method::POST, &format!("/api/chats/{chat}/link"), None)
        .await;
    assert_eq!(status, 200, "{body}");
    let path = body["url"].as_str().unwrap().to_owned();
    let token = path.split_once("?token=").unwrap().1.to_owned();
    (path, token)
}

/// Posts the link page's form for `chat`.
async fn exchange(
    client: &reqwest::Client,
    base: &str,
    chat: &str,
    token: &str,
) -> reqwest::Response {
    client
        .post(format!("{base}/chats/{chat}/session"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await
        .unwrap()
}

/// Opens a link the way the browser does (the button's POST) and returns the `cookie`
/// request header value of the new session.
async fn session_for(h: &Harness, chat: &str) -> String {
    let (_, token) = link(h, chat).await;
    let response = exchange(&browser_like(), &h.server.http_url(), chat, &token).await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    let cookie = response.headers()["set-cookie"].to_str().unwrap();
    cookie.split(';').next().unwrap().to_owned()
}

async fn with_session(h: &Harness, method: Method, path: &str, session: &str) -> reqwest::Response {
    browser_like()
        .request(method, h.url(path))
        .header("cookie", session)
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_reaches_only_its_chats_page_events_and_refresh() {
    let h = harness().await;
    let agent = h.new_agent().await;
    let chat = h.new_chat(agent).await;
    let other = h.new_chat(agent).await;
    let session = session_for(&h, &chat).await;

    for (method, path) in [
        (Method::GET, format!("/chats/{chat}")),
        (Method::GET, format!("/api/chats/{chat}/context/events")),
        (Method::PUT, format!("/api/chats/{chat}/context")),
    ] {
        let response = with_session(&h, method.clone(), &path, &session).await;
        assert_eq!(response.status(), 200, "{method} {path}");
    }

    // Nothing of the operator's API: no agents, no links, no other reads of the chat.
    for (method, path) in [
        (Method::POST, "/api/agents".to_owned()),
        (Method::GET, "/api/agents".to_owned()),
        (Method::POST, format!("/api/agents/{agent}/token")),
        (Method::DELETE, format!("/api/agents/{agent}")),
        (Method::GET, format!("/api/agents/{agent}/context")),
        (Method::POST, "/api/chats".to_owned()),
        (Method::GET, format!("/api/chats/{chat}")),
        (Method::POST, format!("/api/chats/{chat}/link")),
        (Method::POST, format!("/api/chats/{chat}/turns")),
        (Method::POST, format!("/api/chats/{chat}/find-tools")),
        (Method::GET, format!("/api/chats/{chat}/context")),
        (Method::GET, "/api/tool-calls".to_owned()),
        (Method::GET, "/metrics".to_owned()),
    ] {
        let response = with_session(&h, method.clone(), &path, &session).await;
        assert_eq!(response.status(), 401, "{method} {path} with a session");
    }
    let request = browser_like()
        .post(h.url("/api/agents"))
        .header("cookie", &session)
        .json(&json!({ "name": "planted" }));
    assert_eq!(request.send().await.unwrap().status(), 401);
    let (_, agents) = h.call(Method::GET, "/api/agents", None).await;
    assert_eq!(
        agents["agents"].as_array().unwrap().len(),
        1,
        "the session created no agent and deleted none: {agents}"
    );

    // Not another chat's page, events or refresh.
    for (method, path) in [
        (Method::GET, format!("/chats/{other}")),
        (Method::GET, format!("/api/chats/{other}/context/events")),
        (Method::PUT, format!("/api/chats/{other}/context")),
    ] {
        let response = with_session(&h, method.clone(), &path, &session).await;
        assert_eq!(response.status(), 403, "{method} {path}: another chat");
    }

    // A forged or foreign cookie is no session.
    let forged = with_session(
        &h,
        Method::PUT,
        &format!("/api/chats/{chat}/context"),
        "ctxsync_session=0123abcd",
    )
    .await;
    assert_eq!(forged.status(), 401);
    // The bearer token still opens everything.
    let (status, _) = h
        .call(Method::PUT, &format!("/api/chats/{other}/context"), None)
        .await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_survives_previews_and_works_once_for_its_chat() {
    let h = harness().await;
    let agent = h.new_agent().await;
    let chat = h.new_chat(agent).await;
    let other = h.new_chat(agent).await;
    let client = browser_like();
    let base = h.server.http_url();
    let (path, token) = link(&h, &chat).await;

    // A previewer fetching the link, twice, leaves it usable.
    for _ in 0..2 {
        let shown = client.get(h.url(&path)).send().await.unwrap();
        assert_eq!(shown.status(), 200);
        let html = shown.text().await.unwrap();
        assert!(
            html.contains(r#"<form class="link-form" method="post""#),
            "{html}"
        );
        assert!(html.contains(&format!(r#"value="{token}""#)), "{html}");
        assert!(html.contains("<button type=\"submit\">"), "{html}");
    }
    // Another chat's exchange, or a cross-site form, does not use it up either.
    assert_eq!(
        exchange(&client, &base, &other, &token).await.status(),
        401,
        "a link opens only its own chat"
    );
    let cross_site = client
        .post(format!("{base}/chats/{chat}/session"))
        .header("sec-fetch-site", "cross-site")
        .body(format!("token={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(cross_site.status(), 403);

    let first = exchange(&client, &base, &chat, &token).await;
    assert_eq!(first.status(), 303);
    assert!(first.headers().contains_key("set-cookie"));
    let second = exchange(&client, &base, &chat, &token).await;
    assert_eq!(second.status(), 401, "the POST works once");
    assert!(!second.headers().contains_key("set-cookie"));
    let shown = client.get(h.url(&path)).send().await.unwrap();
    assert_eq!(shown.status(), 401, "a used link says so");

    for body in ["", "token=", "token=unknown", "other=1"] {
        let response = client
            .post(format!("{base}/chats/{chat}/session"))
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "{body:?}");
    }

    // The server's own page_link is bound to its chat too.
    let printed = h.server.page_link(chat.parse().unwrap()).await.unwrap();
    let printed = printed.split_once("?token=").unwrap().1;
    assert_eq!(
        exchange(&client, &base, &other, printed).await.status(),
        401
    );
    assert_eq!(exchange(&client, &base, &chat, printed).await.status(), 303);
}

fn header<'a>(response: &'a reqwest::Response, name: &str) -> &'a str {
    response
        .headers()
        .get(name)
        .unwrap_or_else(|| panic!("no {name} on {}", response.url()))
        .to_str()
        .unwrap()
}

/// Every kind of HTML response a browser can get, each with what it is.
async fn html_responses(
    h: &Harness,
    client: &reqwest::Client,
    path: &str,
    chat: &str,
    other: &str,
    session: &str,
) -> [(&'static str, reqwest::Response); 5] {
    [
        (
            "the link page",
            client.get(h.url(path)).send().await.unwrap(),
        ),
        (
            "the page",
            with_session(h, Method::GET, &format!("/chats/{chat}"), session).await,
        ),
        (
            "another chat's page",
            with_session(h, Method::GET, &format!("/chats/{other}"), session).await,
        ),
        (
            "the page without a session",
            client
                .get(h.url(&format!("/chats/{chat}")))
                .send()
                .await
                .unwrap(),
        ),
        (
            "a used link",
            client
                .post(h.url(&format!("/chats/{chat}/session")))
                .body("token=used")
                .send()
                .await
                .unwrap(),
        ),
    ]
}

/// An HTML response carries a strict CSP, the other security headers and nothing inline.
async fn check_html_headers(what: &str, response: reqwest::Response) {
    assert!(
        header(&response, "content-type").starts_with("text/html"),
        "{what}"
    );
    let csp = header(&response, "content-security-policy");
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(directive), "{what}: {directive} in {csp}");
    }
    assert!(
        !csp.contains("unsafe") && !csp.contains('*'),
        "{what}: {csp}"
    );
    assert_eq!(header(&response, "x-content-type-options"), "nosniff");
    assert_eq!(header(&response, "referrer-policy"), "no-referrer");
    assert_eq!(header(&response, "cache-control"), "no-store", "{what}");
    let html = response.text().await.unwrap();
    assert!(
        !html.contains("<script>") && !html.contains("<style") && !html.contains(" style="),
        "{what}: nothing inline for the CSP to forbid"
    );
}

/// The page's script and stylesheet are same-origin files anyone may fetch.
async fn check_page_assets(h: &Harness, client: &reqwest::Client, chat: &str, session: &str) {
    let page = with_session(h, Method::GET, &format!("/chats/{chat}"), session)
        .await
        .text()
        .await
        .unwrap();
    for (path, content_type) in [
        (ctxsync_context_ui::PAGE_SCRIPT_PATH, "text/javascript"),
        (ctxsync_context_ui::PAGE_STYLE_PATH, "text/css"),
    ] {
        assert!(
            page.contains(&format!(r#"="{path}""#)),
            "{path} in the page"
        );
        let response = client.get(h.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
        assert!(header(&response, "content-type").starts_with(content_type));
        assert_eq!(header(&response, "x-content-type-options"), "nosniff");
    }
}

/// Every response that carries a token or starts a session is never stored.
async fn check_token_responses_not_cached(
    h: &Harness,
    client: &reqwest::Client,
    chat: &str,
    agent: ctxsync_persistence::AgentId,
) {
    let api = h.server.api_token.clone();
    let token_responses = [
        client
            .post(h.url(&format!("/api/chats/{chat}/link")))
            .bearer_auth(&api)
            .send()
            .await
            .unwrap(),
        client
            .post(h.url("/api/agents"))
            .bearer_auth(&api)
            .json(&json!({ "name": "laptop" }))
            .send()
            .await
            .unwrap(),
        client
            .post(h.url(&format!("/api/agents/{agent}/token")))
            .bearer_auth(&api)
            .send()
            .await
            .unwrap(),
        {
            let (_, token) = link(h, chat).await;
            exchange(client, &h.server.http_url(), chat, &token).await
        },
    ];
    for response in token_responses {
        assert!(response.status().is_success() || response.status() == 303);
        assert_eq!(
            header(&response, "cache-control"),
            "no-store",
            "{}",
            response.url()
        );
        assert_eq!(header(&response, "referrer-policy"), "no-referrer");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn html_carries_a_strict_csp_and_tokens_are_never_cached() {
    let h = harness().await;
    let agent = h.new_agent().await;
    let chat = h.new_chat(agent).await;
    let other = h.new_chat(agent).await;
    let client = browser_like();
    let (path, _) = link(&h, &chat).await;
    let session = session_for(&h, &chat).await;

    for (what, response) in html_responses(&h, &client, &path, &chat, &other, &session).await {
        check_html_headers(what, response).await;
    }
    check_page_assets(&h, &client, &chat, &session).await;
    check_token_responses_not_cached(&h, &client, &chat, agent).await;
}

/// A certificate authority made for one test, and a server certificate it signed.
fn write_test_certificate(dir: &std::path::Path) -> (TlsFiles, reqwest::Certificate) {
    let ca = ctxsync_test_support::TestCa::new("sessions test CA");
    let (cert, key) = ca.server_cert(&["127.0.0.1"]);
    let files = TlsFiles {
        cert: dir.join("server.pem"),
        key: dir.join("server.key"),
    };
    std::fs::write(&files.cert, cert).unwrap();
    std::fs::write(&files.key, key).unwrap();
    let trusted = reqwest::Certificate::from_pem(ca.pem().as_bytes()).unwrap();
    (files, trusted)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cookie_is_host_only_and_secure_under_tls() {
    // Plain HTTP: no `Secure` (the browser would drop it), still HttpOnly and Strict.
    let h = harness().await;
    let chat = h.new_chat(h.new_agent().await).await;
    let (_, token) = link(&h, &chat).await;
    let response = exchange(&browser_like(), &h.server.http_url(), &chat, &token).await;
    let cookie = header(&response, "set-cookie");
    let attributes: Vec<&str> = cookie.split("; ").collect();
    assert!(attributes[0].starts_with("ctxsync_session="), "{cookie}");
    assert_eq!(
        attributes[1..],
        ["HttpOnly", "SameSite=Strict", "Path=/"],
        "{cookie}"
    );

    // TLS: the `__Host-` name, which browsers accept only when Secure, Path=/, no Domain.
    let dir = tempfile::tempdir().unwrap();
    let (files, trusted) = write_test_certificate(dir.path());
    let server = ctxsync::server::start(ServerConfig {
        api_token: Some("tls-session-api-token-0123456789".into()),
        tls: Some(files),
        ..ServerConfig::ephemeral(dir.path())
    })
    .await
    .expect("a TLS server starts");
    let base = server.http_url();
    assert!(base.starts_with("https://"), "{base}");
    let client = reqwest::Client::builder()
        .tls_certs_only([trusted])
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let agent = server.store.create_agent("agent").await.unwrap().id;
    let chat = server.store.create_chat(Some(agent)).await.unwrap().id;
    let link = server.page_link(chat).await.unwrap();
    let token = link.split_once("?token=").unwrap().1;
    let shown = client.get(&link).send().await.unwrap();
    assert_eq!(shown.status(), 200);
    let response = exchange(&client, &base, &chat.to_string(), token).await;
    assert_eq!(response.status(), 303);
    let cookie = header(&response, "set-cookie").to_owned();
    let attributes: Vec<&str> = cookie.split("; ").collect();
    assert!(
        attributes[0].starts_with("__Host-ctxsync_session="),
        "{cookie}"
    );
    assert_eq!(
        attributes[1..],
        ["HttpOnly", "SameSite=Strict", "Path=/", "Secure"],
        "{cookie}"
    );
    assert!(!cookie.contains("Domain"), "{cookie}");
    let page = client
        .get(format!("{base}/chats/{chat}"))
        .header("cookie", attributes[0])
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    // The plain-HTTP name means nothing here.
    let session = attributes[0].split_once('=').unwrap().1;
    let plain_name = client
        .get(format!("{base}/chats/{chat}"))
        .header("cookie", format!("ctxsync_session={session}"))
        .send()
        .await
        .unwrap();
    assert_eq!(plain_name.status(), 401);
    server.shutdown().await;
}
