//! The context page in a real browser (Debian's chromium + chromedriver): the one-time
//! link shows a button whose POST opens the page; the page opens while discovery is
//! pending, updates in place when a push completes discovery (no reload, open sections
//! stay as the person left them), escapes hostile text, refreshes a changed context, and
//! shows the withheld banner when the agent restarts — all under the server's
//! Content-Security-Policy with no violation in the console. Screenshots land in
//! `target/test-artifacts/`.

mod support;

use std::time::Duration;

use ctxsync_protocol::{DiscoveryPhase, Snapshot, Startup};
use support::webdriver::{Browser, browser_available, browser_paths};
use support::*;

const WAIT: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_updates_in_place_and_escapes_hostile_text() {
    if !browser_available() {
        return;
    }
    let h = Harness::start(Backend::Sqlite)
        .await
        .expect("SQLite always starts");
    let agent = h.new_agent().await;
    h.push(
        agent,
        "run-1",
        1,
        DiscoveryPhase::Pending,
        vec![file("AGENTS.md", "Be brief.")],
    )
    .await;
    let chat = h.new_chat(agent).await;

    let (chromium, chromedriver) = browser_paths();
    let browser = Browser::start(&chromium, &chromedriver)
        .await
        .expect("browser starts");
    let link = h.server.page_link(chat.parse().unwrap()).await.unwrap();
    browser.goto(&link).await.unwrap();
    assert_eq!(
        browser.current_url().await.unwrap(),
        link,
        "opening the link only shows its button"
    );
    browser
        .click("form.link-form button[type=submit]")
        .await
        .expect("the link page has its button");
    browser
        .wait_for(
            "return document.readyState === 'complete' && !!document.getElementById('context-panel')",
            WAIT,
        )
        .await
        .expect("the button opens the page");
    let url = browser.current_url().await.unwrap();
    assert!(
        url.ends_with(&format!("/chats/{chat}")),
        "the one-time token is gone from the address bar: {url}"
    );
    let banner = browser.text(".banner").await.unwrap().unwrap_or_default();
    assert!(banner.contains("still initializing"), "{banner}");
    assert!(
        browser
            .text(".servers-unavailable")
            .await
            .unwrap()
            .is_some(),
        "no empty server list while pending"
    );

    assert_eq!(
        browser.eval("return document.cookie").await.unwrap(),
        "",
        "the session cookie is out of the page script's reach"
    );
    // CSP violations from here on, as the page sees them (WebDriver's script is exempt).
    browser
        .eval(
            "window.__cspViolations = []; document.addEventListener('securitypolicyviolation', \
             e => window.__cspViolations.push(e.violatedDirective + ' ' + e.blockedURI));",
        )
        .await
        .unwrap();

    // Marks that survive only without a reload: a page variable, and a section the person closed.
    browser
        .eval("window.__noReload = 42; document.getElementById('section-files').open = false;")
        .await
        .unwrap();

    let hostile = "<script>window.__pwned = 1</script> reads files";
    h.push(
        agent,
        "run-1",
        2,
        DiscoveryPhase::Complete,
        vec![
            file("AGENTS.md", "Be brief."),
            server("fs", &[("read", hostile)]),
            server("empty", &[]),
        ],
    )
    .await;
    browser
        .wait_for(
            "return document.getElementById('context-panel').dataset.discovery === 'complete'",
            WAIT,
        )
        .await
        .expect("the panel updates when discovery completes");
    assert_eq!(
        browser.eval("return window.__noReload").await.unwrap(),
        42,
        "the page was not reloaded"
    );
    assert_eq!(
        browser
            .eval("return document.getElementById('section-files').open")
            .await
            .unwrap(),
        false,
        "a closed section stays closed"
    );
    assert_eq!(
        browser
            .eval("return document.getElementById('section-mcp').open")
            .await
            .unwrap(),
        true
    );
    let tools = browser.text("ul.tools").await.unwrap().unwrap_or_default();
    assert!(
        tools.contains(hostile),
        "the description renders as text: {tools}"
    );
    assert_eq!(
        browser
            .eval("return window.__pwned === undefined")
            .await
            .unwrap(),
        true,
        "no injected script ran"
    );
    assert_eq!(
        browser
            .eval("return document.querySelectorAll('#panel-root script').length")
            .await
            .unwrap(),
        0
    );
    let empty = browser
        .text(".server-no-tools")
        .await
        .unwrap()
        .unwrap_or_default();
    assert!(empty.contains("no tools"), "{empty}");
    browser
        .screenshot(&artifact_dir().join("context-panel-complete.png"))
        .await
        .unwrap();

    // The workspace's files change: the page offers a refresh, and its button re-pins the
    // chat through the session (the new panel arrives over the event stream).
    let mut changed = file("AGENTS.md", "Be briefer.");
    changed.content_hash = "changed".into();
    let changed = Snapshot {
        version: 3,
        aggregate_hash: "agg-changed".into(),
        resources: vec![
            changed,
            server("fs", &[("read", hostile)]),
            server("empty", &[]),
        ],
        initial: false,
        snapshot_error: None,
        agent_run_id: Some("run-1".into()),
        phase: DiscoveryPhase::Complete,
        ..Default::default()
    };
    h.server
        .store
        .push_context_state(agent, changed)
        .await
        .unwrap();
    browser
        .wait_for(
            "return !!document.querySelector('.dirty button.refresh')",
            WAIT,
        )
        .await
        .expect("the page offers a refresh");
    browser.click(".dirty button.refresh").await.unwrap();
    browser
        .wait_for("return document.querySelector('.dirty') === null", WAIT)
        .await
        .expect("the refresh re-pins the context and the page shows it");
    assert_eq!(
        browser.eval("return window.__noReload").await.unwrap(),
        42,
        "the refresh did not reload the page"
    );

    // A new agent process reports: the old process's tools are withheld.
    let restarted = Startup {
        version: "test".into(),
        expanded_directory: "/ws".into(),
        agent_run_id: Some("run-2".into()),
    };
    h.server
        .store
        .update_startup(agent, restarted)
        .await
        .unwrap();
    browser
        .wait_for(
            "return document.getElementById('context-panel').dataset.discovery === 'stale'",
            WAIT,
        )
        .await
        .expect("the panel shows the stale state");
    let banner = browser.text(".banner").await.unwrap().unwrap_or_default();
    assert!(banner.contains("withheld"), "{banner}");
    assert!(
        browser.text("ul.tools").await.unwrap().is_none(),
        "no tools from the previous process are listed"
    );
    browser
        .screenshot(&artifact_dir().join("context-panel-stale.png"))
        .await
        .unwrap();

    assert_eq!(
        browser.eval("return window.__cspViolations").await.unwrap(),
        serde_json::json!([]),
        "the page ran under its CSP without a violation"
    );
    let console = browser.console_log().await.unwrap();
    let violations: Vec<&String> = console
        .iter()
        .filter(|line| line.contains("Content Security Policy") || line.contains("Refused to"))
        .collect();
    assert!(
        violations.is_empty(),
        "CSP violations in the console: {violations:#?}"
    );
    browser.close().await.unwrap();
}
