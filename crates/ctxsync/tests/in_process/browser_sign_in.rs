//! A person's sign-in from the chat's page in a real browser (issue 50): a real `ctxsync
//! agent` whose workspace declares the fixture as a remote MCP server behind its own OAuth
//! authorization server. The page shows the server waiting for a sign-in, with its
//! button; pressing it takes the browser to the authorization server and back to this
//! server's callback page, and the page then lists the server's tools. A person who
//! refuses ends on a callback page that says so. axe-core finds no violation at all on
//! any of these pages, and a screenshot of each lands in `target/screenshots/`.

use std::process::Stdio;
use std::time::Duration;

use ctxsync_mcp_fixture::{FixtureConfig, OAuthConfig, OAuthHandle, serve_http};
use reqwest::Method;
use serde_json::{Value, json};

use crate::browser::{
    LIVE, assert_axe_clean, assert_no_reload_and_no_csp_violation, axe_source, open_page,
    save_screenshot,
};
use crate::support::webdriver::{Browser, browser_available, browser_paths};
use crate::support::{Harness, TestBackend};

/// The `ctxsync` binary, run as the agent.
const CTXSYNC: &str = env!("CARGO_BIN_EXE_ctxsync");
/// The remote server's name in the workspace.
const REMOTE: &str = "remote";
/// The fixture's tools (its default count).
const REMOTE_TOOLS: usize = 2;
/// Bound for the button's round trip: starting waits up to 15 s for the agent's URL and
/// the callback up to 20 s for its exchange (each takes well under a second here).
const ROUND_TRIP: Duration = Duration::from_secs(45);

/// A real `ctxsync agent` whose workspace declares one remote MCP server, [`REMOTE`] at
/// `url`; killed on drop.
struct RemoteAgent {
    _process: tokio::process::Child,
    _workspace: tempfile::TempDir,
}

impl RemoteAgent {
    fn start(h: &Harness, token: &str, url: &str) -> Self {
        let workspace = tempfile::tempdir().expect("workspace");
        let servers = json!({ "mcpServers": { REMOTE: { "type": "http", "url": url } } });
        std::fs::write(workspace.path().join(".mcp.json"), servers.to_string()).unwrap();
        let process = tokio::process::Command::new(CTXSYNC)
            .args(["agent", "--server", &h.server.agent_url(), "--workspace"])
            .arg(workspace.path())
            .env("CTXSYNC_AGENT_TOKEN", token)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the agent starts");
        Self {
            _process: process,
            _workspace: workspace,
        }
    }
}

/// Where the browser landed: the HTTP status of its last navigation, its heading and text.
struct Landing {
    status: u64,
    heading: String,
    text: String,
}

/// Presses the remote server's **Sign in** button and waits until the browser, sent on
/// by the authorization server, shows this server's callback page.
async fn press_sign_in(h: &Harness, browser: &Browser, oauth: &OAuthHandle) -> Landing {
    let asked_before = oauth.authorize_requests().len();
    browser
        .click(&format!("button.sign-in[data-server='{REMOTE}']"))
        .await
        .expect("the page has the server's Sign in button");
    let landed = browser
        .wait_for(
            "if (location.pathname !== '/oauth/callback' || document.readyState !== 'complete') \
               return null; \
             const h1 = document.querySelector('h2.sign-in-result'); \
             return { status: performance.getEntriesByType('navigation')[0].responseStatus, \
                      heading: h1 ? h1.textContent : '', text: document.body.innerText };",
            ROUND_TRIP,
        )
        .await
        .expect("the button leads through the authorization server to the callback page");
    let asked = oauth.authorize_requests();
    assert_eq!(
        asked.len(),
        asked_before + 1,
        "the browser went to the authorization server once"
    );
    let redirect = asked.last().and_then(|r| r.redirect_uri.clone());
    assert_eq!(redirect, Some(h.url("/oauth/callback")), "{asked:?}");
    let text = |key: &str| landed[key].as_str().unwrap_or_default().to_owned();
    Landing {
        status: landed["status"].as_u64().unwrap_or_default(),
        heading: text("heading"),
        text: text("text"),
    }
}

/// The text of the remote server's row once `done` (a script on `row`, the row's
/// element) holds.
async fn remote_row_once(browser: &Browser, done: &str) -> String {
    let script = format!(
        "const row = Array.from(document.querySelectorAll('li.server'))
           .find(s => s.querySelector('.server-name').textContent === '{REMOTE}');
         return row && ({done}) ? row.innerText : null;"
    );
    browser
        .wait_for(&script, LIVE)
        .await
        .unwrap_or_else(|e| panic!("the remote server's row: `{done}`: {e}"))
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The agent met the server's 401: the row says it needs a sign-in and offers a button
/// named for the server, with an empty status line beside it.
async fn check_needs_sign_in(browser: &Browser, axe: &str) {
    let row = remote_row_once(browser, "!!row.querySelector('button.sign-in')").await;
    assert!(row.contains("needs sign-in"), "{row}");
    let button = browser
        .eval(
            "const b = document.querySelector('button.sign-in');
             const status = b.nextElementSibling;
             return [b.type, b.textContent, b.getAttribute('aria-label'), b.disabled,
                     status.getAttribute('role'), status.textContent];",
        )
        .await
        .unwrap();
    assert_eq!(
        button,
        json!([
            "button",
            "Sign in",
            "Sign in to remote",
            false,
            "status",
            ""
        ])
    );
    browser
        .eval("document.querySelector('button.sign-in').scrollIntoView(); return true;")
        .await
        .unwrap();
    assert_axe_clean(browser, axe, "needs-sign-in").await;
    save_screenshot(browser, "needs-sign-in").await;
}

/// The person refuses at the authorization server: the callback page says so with a
/// 4xx, and nothing was stored.
async fn check_refused_sign_in(h: &Harness, browser: &Browser, axe: &str, oauth: &OAuthHandle) {
    oauth.set_deny(true);
    let landing = press_sign_in(h, browser, oauth).await;
    oauth.set_deny(false);
    assert_eq!(
        oauth
            .authorize_requests()
            .last()
            .and_then(|r| r.error.clone()),
        Some("access_denied".to_owned())
    );
    assert!(
        (400..500).contains(&landing.status),
        "{}: {}",
        landing.status,
        landing.text
    );
    assert_eq!(landing.heading, "Sign-in to remote failed");
    assert!(
        landing
            .text
            .contains("the authorization server refused the sign-in"),
        "{}",
        landing.text
    );
    assert_axe_clean(browser, axe, "sign-in-refused").await;
    save_screenshot(browser, "sign-in-refused").await;
}

/// The person agrees: the callback page says the server is signed in, the chat's page
/// (opened again) lists the server's tools once the agent reconnects, and the API names
/// this chat's page as the one that signed in.
async fn check_signed_in(
    h: &Harness,
    browser: &Browser,
    axe: &str,
    oauth: &OAuthHandle,
    agent: ctxsync_persistence::AgentId,
    chat: &str,
) {
    let landing = press_sign_in(h, browser, oauth).await;
    assert_eq!(landing.status, 200, "{}", landing.text);
    assert_eq!(landing.heading, "Signed in to remote");
    assert!(
        landing.text.contains("go back to the chat"),
        "{}",
        landing.text
    );
    assert_axe_clean(browser, axe, "sign-in-callback").await;
    save_screenshot(browser, "sign-in-callback").await;

    open_page(h, browser, chat).await;
    let tools = format!("{REMOTE_TOOLS} tools");
    let row = remote_row_once(
        browser,
        &format!("row.querySelector('.badge-tools')?.textContent === '{tools}'"),
    )
    .await;
    assert!(!row.contains("needs sign-in"), "{row}");
    assert_eq!(
        browser
            .eval("return document.querySelectorAll('button.sign-in').length")
            .await
            .unwrap(),
        0,
        "no Sign in button once signed in"
    );
    assert_axe_clean(browser, axe, "signed-in").await;
    save_screenshot(browser, "signed-in").await;

    let (status, servers) = h
        .call(
            Method::GET,
            &format!("/api/agents/{agent}/mcp-servers"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{servers}");
    let remote = servers["servers"]
        .as_array()
        .and_then(|list| list.iter().find(|s| s["name"] == REMOTE))
        .cloned()
        .unwrap_or(Value::Null);
    assert_eq!(remote["sign_in"], "signed_in", "{remote}");
    assert_eq!(remote["signed_in"]["signed_in_via"], "page", "{remote}");
    assert_eq!(remote["signed_in"]["signed_in_chat_id"], chat, "{remote}");
}

/// The chat's page signs a person in to a remote MCP server (issue 50): its needs-sign-in
/// state and button, the refused and the successful callback pages and the signed-in
/// panel are each axe-clean (no violation of any impact), run under the page's CSP, and
/// are saved as screenshots in `target/screenshots/`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_signs_in_from_the_chat_page() {
    // Heavy: one at a time in this binary (see ctxsync-test-support's `heavy`).
    let _heavy = ctxsync_test_support::heavy().await;
    if !browser_available() {
        return;
    }
    let axe = axe_source();
    let h = Harness::start(TestBackend::Sqlite)
        .await
        .expect("SQLite always starts");
    let fixture = serve_http(FixtureConfig::new().http().oauth(OAuthConfig::default()))
        .await
        .expect("the OAuth fixture starts");
    let oauth = fixture.oauth().expect("the fixture speaks OAuth");
    let created = h
        .server
        .store
        .create_agent("remote-box")
        .await
        .expect("agent");
    let _agent = RemoteAgent::start(&h, created.token.expose(), &fixture.url());
    let chat = h.new_chat(created.id).await;

    let (chromium, chromedriver) = browser_paths();
    let browser = Browser::start(&chromium, &chromedriver)
        .await
        .expect("browser starts");
    open_page(&h, &browser, &chat).await;
    check_needs_sign_in(&browser, &axe).await;
    check_refused_sign_in(&h, &browser, &axe, &oauth).await;
    // A refusal changes nothing: the page (opened again) still offers the button.
    open_page(&h, &browser, &chat).await;
    let row = remote_row_once(&browser, "!!row.querySelector('button.sign-in')").await;
    assert!(row.contains("needs sign-in"), "{row}");
    check_signed_in(&h, &browser, &axe, &oauth, created.id, &chat).await;
    // The tools arrived on the page opened last without a reload; no page along the way
    // (the chat's, the callback's) broke the CSP.
    assert_no_reload_and_no_csp_violation(&browser).await;
    browser.close().await.unwrap();
}
