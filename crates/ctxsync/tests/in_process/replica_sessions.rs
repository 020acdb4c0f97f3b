//! Page links and browser sessions are shared by every replica through the store: a link
//! minted on one replica opens on another and works once across them all, a session
//! started on one is honoured by the others, and a session outlives the restart of the
//! replica that started it (PostgreSQL with two in-process servers; SQLite with one
//! server restarted on the same file).

use ctxsync::server::{RunningServer, ServerConfig};
use ctxsync_persistence::test_support::TestDatabase;
use ctxsync_persistence::{ChatId, DatabaseConfig};
use reqwest::StatusCode;

const API_TOKEN: &str = "replica-sessions-api-token-0123456789";

async fn start(database: DatabaseConfig, data_dir: &std::path::Path) -> RunningServer {
    ctxsync::server::start(ServerConfig {
        database,
        api_token: Some(API_TOKEN.into()),
        ..ServerConfig::ephemeral(data_dir)
    })
    .await
    .expect("a replica starts")
}

/// A client that shows redirects instead of following them, and keeps no cookies.
fn browser_like() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// A chat with an agent, created through `server`'s store.
async fn new_chat(server: &RunningServer) -> ChatId {
    let agent = server.store.create_agent("agent").await.unwrap().id;
    server.store.create_chat(Some(agent)).await.unwrap().id
}

/// A link minted through `server`'s API: the link's token.
async fn mint_over_http(server: &RunningServer, chat: ChatId) -> String {
    let response = browser_like()
        .post(format!("{}/api/chats/{chat}/link", server.http_url()))
        .bearer_auth(API_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    let url = body["url"].as_str().unwrap();
    url.split_once("?token=").unwrap().1.to_owned()
}

/// The link page on `server`: its status, and whether it shows the button.
async fn show_link(server: &RunningServer, chat: ChatId, token: &str) -> (StatusCode, bool) {
    let response = browser_like()
        .get(format!("{}/chats/{chat}?token={token}", server.http_url()))
        .send()
        .await
        .unwrap();
    let status = response.status();
    let html = response.text().await.unwrap();
    let button = html.contains(r#"<form class="link-form" method="post""#)
        && html.contains(&format!(r#"value="{token}""#));
    (status, button)
}

/// The link page's form POST on `server`: the status, and the `cookie` request header
/// value of the session it started.
async fn exchange(
    server: &RunningServer,
    chat: ChatId,
    token: &str,
) -> (StatusCode, Option<String>) {
    let response = browser_like()
        .post(format!("{}/chats/{chat}/session", server.http_url()))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await
        .unwrap();
    let cookie = response.headers().get("set-cookie").map(|value| {
        let value = value.to_str().unwrap();
        assert!(
            value.contains("HttpOnly; SameSite=Strict; Path=/"),
            "{value}"
        );
        value.split(';').next().unwrap().to_owned()
    });
    (response.status(), cookie)
}

/// Opens the chat's page on `server` with the session cookie.
async fn open_page(server: &RunningServer, chat: ChatId, cookie: &str) -> StatusCode {
    browser_like()
        .get(format!("{}/chats/{chat}", server.http_url()))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
        .status()
}

/// The page's refresh, which goes through the API's authentication rather than the page's.
async fn refresh(server: &RunningServer, chat: ChatId, cookie: &str) -> StatusCode {
    browser_like()
        .put(format!("{}/api/chats/{chat}/context", server.http_url()))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_and_sessions_work_on_every_replica_and_survive_a_restart() {
    // Heavy: one at a time in this binary (see ctxsync-test-support's `heavy`).
    let _heavy = ctxsync_test_support::heavy().await;
    let Some(database) = tokio::task::spawn_blocking(TestDatabase::create)
        .await
        .unwrap()
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = start(database.config(), &dir.path().join("a")).await;
    let b = start(database.config(), &dir.path().join("b")).await;
    let chat = new_chat(&a).await;
    let other = new_chat(&b).await;

    // A link printed by A opens on B: the GET shows the button, the POST starts a session.
    let link = a.page_link(chat).await.unwrap();
    assert!(link.starts_with(&a.http_url()), "{link}");
    let token = link.split_once("?token=").unwrap().1.to_owned();
    assert_eq!(show_link(&b, chat, &token).await, (StatusCode::OK, true));
    assert_eq!(
        exchange(&b, other, &token).await,
        (StatusCode::UNAUTHORIZED, None),
        "another chat's exchange on B leaves it"
    );
    let (status, cookie) = exchange(&b, chat, &token).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let cookie = cookie.expect("B started a session");
    // Used up everywhere: neither replica shows or exchanges it again.
    for replica in [&a, &b] {
        assert_eq!(
            show_link(replica, chat, &token).await,
            (StatusCode::UNAUTHORIZED, false)
        );
        assert_eq!(
            exchange(replica, chat, &token).await,
            (StatusCode::UNAUTHORIZED, None)
        );
    }

    // B's session works on A (page and refresh), and only for its chat.
    for replica in [&a, &b] {
        assert_eq!(open_page(replica, chat, &cookie).await, StatusCode::OK);
        assert_eq!(refresh(replica, chat, &cookie).await, StatusCode::OK);
        assert_eq!(
            open_page(replica, other, &cookie).await,
            StatusCode::FORBIDDEN
        );
    }

    // Two replicas exchanging one link at once: exactly one session.
    let token = mint_over_http(&b, chat).await;
    let (on_a, on_b) = tokio::join!(exchange(&a, chat, &token), exchange(&b, chat, &token));
    let mut statuses = [on_a.0, on_b.0];
    statuses.sort();
    assert_eq!(statuses, [StatusCode::SEE_OTHER, StatusCode::UNAUTHORIZED]);

    // B, which started the session, restarts; the session and an unused link minted on
    // it before the restart still work on its successor and on A.
    let pending = mint_over_http(&b, chat).await;
    b.shutdown().await;
    let successor = start(database.config(), &dir.path().join("b2")).await;
    assert_eq!(open_page(&successor, chat, &cookie).await, StatusCode::OK);
    assert_eq!(open_page(&a, chat, &cookie).await, StatusCode::OK);
    assert_eq!(
        show_link(&successor, chat, &pending).await,
        (StatusCode::OK, true)
    );
    let (status, second) = exchange(&successor, chat, &pending).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(open_page(&a, chat, &second.unwrap()).await, StatusCode::OK);

    // A forged cookie is nobody, on every replica.
    for replica in [&a, &successor] {
        assert_eq!(
            open_page(replica, chat, "ctxsync_session=forged").await,
            StatusCode::UNAUTHORIZED
        );
    }
    a.shutdown().await;
    successor.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_session_survives_a_server_restart() {
    // Heavy: one at a time in this binary (see ctxsync-test-support's `heavy`).
    let _heavy = ctxsync_test_support::heavy().await;
    let dir = tempfile::tempdir().unwrap();
    let database = DatabaseConfig::sqlite_in(dir.path());
    let first = start(database.clone(), dir.path()).await;
    let chat = new_chat(&first).await;
    let token = mint_over_http(&first, chat).await;
    let (status, cookie) = exchange(&first, chat, &token).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let cookie = cookie.unwrap();
    let pending = mint_over_http(&first, chat).await;
    first.shutdown().await;

    let restarted = start(database, dir.path()).await;
    assert_eq!(open_page(&restarted, chat, &cookie).await, StatusCode::OK);
    assert_eq!(refresh(&restarted, chat, &cookie).await, StatusCode::OK);
    assert_eq!(
        exchange(&restarted, chat, &token).await,
        (StatusCode::UNAUTHORIZED, None),
        "a used link stays used"
    );
    assert_eq!(
        show_link(&restarted, chat, &pending).await,
        (StatusCode::OK, true),
        "an unused link survives too"
    );
    restarted.shutdown().await;
}
