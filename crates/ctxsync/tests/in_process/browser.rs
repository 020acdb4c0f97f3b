//! The context page in a real browser (Debian's chromium + chromedriver): the one-time
//! link shows a button whose POST opens the page; the page opens while discovery is
//! pending, updates in place when a push completes discovery (no reload, open sections
//! stay as the person left them), escapes hostile text, refreshes a changed context, and
//! shows the withheld banner when the agent restarts — all under the server's
//! Content-Security-Policy with no violation in the console. Screenshots land in
//! `target/test-artifacts/`.

use crate::support;

use std::time::Duration;

use ctxsync_protocol::{DiscoveryPhase, RunId, Snapshot, Startup};
use support::webdriver::{Browser, browser_available, browser_paths};
use support::*;

const WAIT: Duration = Duration::from_secs(15);

/// Opens the link (which only shows its button), presses the button and checks the page
/// opened while discovery is pending.
async fn open_pending_page(h: &Harness, browser: &Browser, chat: &str) {
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
}

/// The cookie is out of the script's reach; then starts recording CSP violations and
/// sets the marks that survive only without a reload.
async fn check_cookie_and_set_marks(browser: &Browser) {
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
}

/// A push completes discovery: the panel updates in place, the closed section stays
/// closed, and the hostile description renders as text without running.
async fn complete_discovery_in_place(
    h: &Harness,
    browser: &Browser,
    agent: ctxsync_persistence::AgentId,
    hostile: &str,
) {
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
}

/// The workspace's files change: the page offers a refresh, and its button re-pins the
/// chat through the session (the new panel arrives over the event stream).
async fn refresh_a_changed_context(
    h: &Harness,
    browser: &Browser,
    agent: ctxsync_persistence::AgentId,
    hostile: &str,
) {
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
        agent_run_id: RunId::new("run-1"),
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
}

/// A new agent process reports: the old process's tools are withheld.
async fn restart_withholds_tools(
    h: &Harness,
    browser: &Browser,
    agent: ctxsync_persistence::AgentId,
) {
    let restarted = Startup {
        version: "test".into(),
        expanded_directory: "/ws".into(),
        agent_run_id: RunId::new("run-2"),
        accepts_tool_calls: false,
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
}

/// No CSP violation, neither as the page saw it nor in the console.
async fn assert_no_csp_violation(browser: &Browser) {
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_updates_in_place_and_escapes_hostile_text() {
    // Heavy: one at a time in this binary (see ctxsync-test-support's `heavy`).
    let _heavy = ctxsync_test_support::heavy().await;
    if !browser_available() {
        return;
    }
    let h = Harness::start(TestBackend::Sqlite)
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
    open_pending_page(&h, &browser, &chat).await;
    check_cookie_and_set_marks(&browser).await;
    let hostile = "<script>window.__pwned = 1</script> reads files";
    complete_discovery_in_place(&h, &browser, agent, hostile).await;
    refresh_a_changed_context(&h, &browser, agent, hostile).await;
    restart_withholds_tools(&h, &browser, agent).await;
    assert_no_csp_violation(&browser).await;
    browser.close().await.unwrap();
}

/// Generous bound for a live update in the browser (one arrives well under a second).
pub(crate) const LIVE: Duration = Duration::from_secs(20);
/// The runs of the agent in the tests below: UUIDs, so the header shows their short form.
const RUN_1: &str = "7f3c9a1e-5b2d-4e8f-9a6c-1d2e3f4a5b6c";
const RUN_2: &str = "2b8d4f60-0c1a-4b7e-8d3f-5e6a7b8c9d0e";

/// Where the per-state screenshots land: `target/screenshots/panel-<state>.png`.
fn screenshot_path(state: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/screenshots")
        .join(format!("panel-{state}.png"))
}

pub(crate) async fn save_screenshot(browser: &Browser, state: &str) {
    let path = screenshot_path(state);
    browser.screenshot(&path).await.expect("screenshot");
    let path = std::fs::canonicalize(&path).unwrap_or(path);
    println!("screenshot of the {state} panel: {}", path.display());
}

/// axe-core as the test tools install it (`cargo xtask test-tools`).
pub(crate) fn axe_source() -> String {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/tools/node_modules/axe-core/axe.min.js");
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; the page's accessibility check needs axe-core (cargo xtask test-tools)",
            path.display()
        )
    })
}

/// Runs axe-core over the page as it stands; prints every violation found and answers
/// them with how many rules passed.
async fn axe_violations(
    browser: &Browser,
    axe: &str,
    state: &str,
) -> (Vec<serde_json::Value>, u64) {
    // Injected once per document, through WebDriver (exempt from the page's CSP).
    let loaded = browser
        .eval("return typeof window.axe === 'object'")
        .await
        .unwrap();
    if loaded != serde_json::Value::Bool(true) {
        browser
            .eval(&format!("{axe}\n;return typeof window.axe;"))
            .await
            .expect("axe-core loads");
    }
    let violations = browser
        .eval_async(
            "const done = arguments[arguments.length - 1];
             window.axe.run(document, { resultTypes: ['violations'] }).then(
               r => done({ passes: r.passes.length, violations: r.violations.map(v => ({
                 id: v.id, impact: v.impact, help: v.help,
                 nodes: v.nodes.slice(0, 5).map(n => n.target.join(' ')) })) }),
               e => done({ error: String(e) }));",
            Duration::from_secs(60),
        )
        .await
        .expect("axe-core runs");
    let list = violations["violations"]
        .as_array()
        .unwrap_or_else(|| panic!("axe-core failed on the {state} page: {violations}"));
    let passes = violations["passes"].as_u64().unwrap_or(0);
    assert!(
        passes > 0,
        "axe-core checked nothing on the {state} page: {violations}"
    );
    for v in list {
        eprintln!(
            "axe ({state}): {} [{}] {} at {}",
            v["id"], v["impact"], v["help"], v["nodes"]
        );
    }
    (list.clone(), passes)
}

/// Runs axe-core over the page as it stands and fails on any serious or critical
/// violation, printing every violation found.
async fn assert_accessible(browser: &Browser, axe: &str, state: &str) {
    let (list, _) = axe_violations(browser, axe, state).await;
    let serious: Vec<&serde_json::Value> = list
        .iter()
        .filter(|v| matches!(v["impact"].as_str(), Some("serious" | "critical")))
        .collect();
    assert!(
        serious.is_empty(),
        "serious or critical accessibility violations on the {state} panel: {serious:#?}"
    );
}

/// Runs axe-core over the page as it stands and fails on any violation at all, whatever
/// its impact.
pub(crate) async fn assert_axe_clean(browser: &Browser, axe: &str, state: &str) {
    let (list, passes) = axe_violations(browser, axe, state).await;
    assert!(
        list.is_empty(),
        "accessibility violations on the {state} page: {list:#?}"
    );
    println!("axe ({state}): {passes} rules pass, no violation");
}

/// Reports `run` started and pushes its snapshot, with the servers still connecting.
async fn publish(
    h: &Harness,
    agent: ctxsync_persistence::AgentId,
    run: &str,
    version: u64,
    phase: DiscoveryPhase,
    resources: Vec<ctxsync_protocol::Resource>,
    connecting: &[(&str, u64)],
) {
    let store = &h.server.store;
    let startup = Startup {
        version: "test".into(),
        expanded_directory: "/ws".into(),
        agent_run_id: RunId::new(run),
        accepts_tool_calls: false,
    };
    store.update_startup(agent, startup).await.expect("startup");
    let snapshot = Snapshot {
        version,
        aggregate_hash: "agg".into(),
        resources,
        initial: true,
        snapshot_error: None,
        agent_run_id: RunId::new(run),
        phase,
        pending_servers: connecting
            .iter()
            .map(|(name, ms)| ctxsync_protocol::SnapshotPendingServer {
                server_name: (*name).into(),
                elapsed_ms: *ms,
            })
            .collect(),
    };
    store
        .push_context_state(agent, snapshot)
        .await
        .expect("push");
}

/// A discovered server as a real agent reports it: revision, implementation, timings.
fn timed_server(name: &str, tools: &[(&str, &str)]) -> ctxsync_protocol::Resource {
    let mut resource = server(name, tools);
    if let ctxsync_protocol::ResourceBody::McpServer(body) = &mut resource.body {
        body.protocol_version = "2026-07-28".into();
        body.server_info = Some(ctxsync_protocol::McpServerInfo {
            name: format!("{name}-mcp"),
            version: "1.4.2".into(),
            ..Default::default()
        });
        body.timings = Some(ctxsync_protocol::McpConnectTimings {
            start_ms: Some(120),
            handshake_ms: 35,
            tools_ms: 4,
        });
    }
    resource
}

fn workspace(servers: Vec<ctxsync_protocol::Resource>) -> Vec<ctxsync_protocol::Resource> {
    let mut resources = vec![file("AGENTS.md", "Be brief."), config_file()];
    resources.extend(servers);
    resources
}

fn complete_servers() -> Vec<ctxsync_protocol::Resource> {
    vec![
        timed_server(
            "github",
            &[
                ("create_issue", "Open an issue in a repository"),
                ("search_code", "Search code across repositories"),
            ],
        ),
        timed_server("docs", &[("lookup", "Find a page of the team handbook")]),
        timed_server("empty", &[]),
    ]
}

/// Opens the chat's page through a one-time link and waits for the panel.
pub(crate) async fn open_page(h: &Harness, browser: &Browser, chat: &str) {
    let link = h.server.page_link(chat.parse().unwrap()).await.unwrap();
    browser.goto(&link).await.unwrap();
    browser
        .click("form.link-form button[type=submit]")
        .await
        .expect("the link page has its button");
    browser
        .wait_for(
            "return document.readyState === 'complete' && !!document.getElementById('context-panel')",
            LIVE,
        )
        .await
        .expect("the button opens the page");
    // Marks that survive only without a reload, and CSP violations as the page sees them.
    browser
        .eval(
            "window.__noReload = 42; window.__cspViolations = []; \
             document.addEventListener('securitypolicyviolation', \
             e => window.__cspViolations.push(e.violatedDirective + ' ' + e.blockedURI));",
        )
        .await
        .unwrap();
}

async fn discovery_state(browser: &Browser, state: &str) {
    browser
        .wait_for(
            &format!(
                "return document.getElementById('context-panel').dataset.discovery === '{state}'"
            ),
            LIVE,
        )
        .await
        .unwrap_or_else(|e| panic!("the panel reaches {state}: {e}"));
}

/// The text of the server row named `name`.
async fn server_row(browser: &Browser, name: &str) -> String {
    let script = format!(
        "const row = Array.from(document.querySelectorAll('li.server'))
           .find(s => s.querySelector('.server-name').textContent === {});
         return row ? row.innerText : null;",
        serde_json::to_string(name).unwrap()
    );
    let text = browser.eval(&script).await.unwrap();
    text.as_str()
        .unwrap_or_else(|| panic!("no server row {name}"))
        .to_owned()
}

/// Visible tool names, in page order.
async fn visible_tools(browser: &Browser) -> serde_json::Value {
    browser
        .eval(
            "return Array.from(document.querySelectorAll('li.tool'))
               .filter(t => t.offsetParent !== null)
               .map(t => t.querySelector('.tool-name').textContent);",
        )
        .await
        .unwrap()
}

pub(crate) async fn assert_no_reload_and_no_csp_violation(browser: &Browser) {
    assert_eq!(
        browser.eval("return window.__noReload").await.unwrap(),
        42,
        "the page was not reloaded"
    );
    assert_eq!(
        browser.eval("return window.__cspViolations").await.unwrap(),
        serde_json::json!([]),
        "the page ran under its CSP without a violation"
    );
    let console = browser.console_log().await.unwrap();
    let refused: Vec<&String> = console
        .iter()
        .filter(|line| line.contains("Content Security Policy") || line.contains("Refused to"))
        .collect();
    assert!(
        refused.is_empty(),
        "CSP violations in the console: {refused:#?}"
    );
}

/// Pending: the header names the agent and the short run id, the banner names the
/// server it waits for, and the snapshot's age and jira's wait count on.
async fn check_pending_panel(browser: &Browser, axe: &str) {
    let header = browser
        .text(".page-header")
        .await
        .unwrap()
        .unwrap_or_default();
    assert!(header.contains("build-box"), "the agent's name: {header}");
    let run = browser
        .text(".fact-run dd")
        .await
        .unwrap()
        .unwrap_or_default();
    assert_eq!(run, "7f3c9a1e", "the run id in short form");
    let banner = browser.text(".banner").await.unwrap().unwrap_or_default();
    assert!(banner.contains("still initializing"), "{banner}");
    assert!(
        banner.contains("jira ("),
        "names the server it waits for: {banner}"
    );
    // The snapshot's age and jira's wait count on in the browser.
    let age = browser
        .wait_for(
            "const t = document.querySelector('.fact-snapshot time.relative'); \
             return t && /^(just now|\\d+ s ago)$/.test(t.textContent) ? t.textContent : null;",
            LIVE,
        )
        .await
        .expect("the snapshot's age is shown relative");
    let first_wait = browser
        .text(".waiting-server .elapsed")
        .await
        .unwrap()
        .unwrap_or_default();
    browser
        .wait_for(
            &format!(
                "return document.querySelector('.waiting-server .elapsed').textContent !== {}",
                serde_json::to_string(&first_wait).unwrap()
            ),
            LIVE,
        )
        .await
        .expect("the pending wait counts on");
    browser
        .wait_for(
            &format!(
                "return document.querySelector('.fact-snapshot time.relative').textContent !== {age}"
            ),
            LIVE,
        )
        .await
        .expect("the snapshot's age is kept current");
    assert_accessible(browser, axe, "pending").await;
    save_screenshot(browser, "pending").await;
}

/// Complete: tools listed with counts and per-server timing.
async fn check_complete_panel(
    h: &Harness,
    browser: &Browser,
    axe: &str,
    agent: ctxsync_persistence::AgentId,
) {
    publish(
        h,
        agent,
        RUN_1,
        2,
        DiscoveryPhase::Complete,
        workspace(complete_servers()),
        &[],
    )
    .await;
    discovery_state(browser, "complete").await;
    let tools = browser
        .text(".fact-tools dd")
        .await
        .unwrap()
        .unwrap_or_default();
    assert_eq!(tools, "3 tools from 3 servers (1 with no tools)");
    let github = server_row(browser, "github").await;
    assert!(
        github.contains("2 tools") && github.contains("ready in 159 ms"),
        "{github}"
    );
    assert_eq!(
        visible_tools(browser).await,
        serde_json::json!(["lookup", "create_issue", "search_code"]),
        "servers by name: docs, empty, github"
    );
    assert_accessible(browser, axe, "complete").await;
    save_screenshot(browser, "complete").await;
}

/// Empties the tool filter the way typing would.
const CLEAR_FILTER: &str = "document.getElementById('tool-filter').value = ''; document.getElementById('tool-filter').dispatchEvent(new Event('input', { bubbles: true }));";

/// The filter hides what does not match, by name or description, in any case; leaves
/// "handbook" typed in.
async fn check_tool_filter(browser: &Browser) {
    browser.type_into("#tool-filter", "SEARCH").await.unwrap();
    browser
        .wait_for(
            "return document.querySelectorAll('li.tool[hidden]').length === 2",
            LIVE,
        )
        .await
        .expect("the filter hides the other tools");
    assert_eq!(
        visible_tools(browser).await,
        serde_json::json!(["search_code"])
    );
    assert_eq!(
        browser
            .eval("return Array.from(document.querySelectorAll('li.server')).filter(s => !s.hidden).length")
            .await
            .unwrap(),
        1,
        "servers without a match are hidden"
    );
    let count = browser
        .text("#tool-filter-count")
        .await
        .unwrap()
        .unwrap_or_default();
    assert_eq!(count, "1 of 3 tools match");
    browser.eval(CLEAR_FILTER).await.unwrap();
    browser.type_into("#tool-filter", "handbook").await.unwrap();
    browser
        .wait_for(
            "return document.querySelectorAll('li.tool:not([hidden])').length === 1",
            LIVE,
        )
        .await
        .expect("descriptions match too");
    assert_eq!(visible_tools(browser).await, serde_json::json!(["lookup"]));
}

/// The filter stays applied when a live update replaces the panel (here: jira fails);
/// then it is emptied again.
async fn filter_survives_a_live_update(
    h: &Harness,
    browser: &Browser,
    agent: ctxsync_persistence::AgentId,
) {
    let mut servers = complete_servers();
    servers.push(failed_server(
        "jira",
        "command not found: mcp-jira (check that it is installed and on PATH)",
    ));
    publish(
        h,
        agent,
        RUN_1,
        3,
        DiscoveryPhase::Complete,
        workspace(servers),
        &[],
    )
    .await;
    browser
        .wait_for("return !!document.querySelector('.server-failed')", LIVE)
        .await
        .expect("the failed server arrives");
    assert_eq!(
        browser
            .eval("return document.getElementById('tool-filter').value")
            .await
            .unwrap(),
        "handbook",
        "the filter keeps its text"
    );
    assert_eq!(visible_tools(browser).await, serde_json::json!(["lookup"]));
    browser.eval(CLEAR_FILTER).await.unwrap();
    browser
        .wait_for(
            "return document.querySelectorAll('li.tool[hidden]').length === 0",
            LIVE,
        )
        .await
        .expect("an empty filter shows every tool");
}

/// Failed: its sanitized error shows on its row and under Issues.
async fn check_failed_panel(browser: &Browser, axe: &str) {
    let failed = server_row(browser, "jira").await;
    assert!(
        failed.contains("failed") && failed.contains("command not found: mcp-jira"),
        "{failed}"
    );
    let banner = browser.text(".banner").await.unwrap().unwrap_or_default();
    assert!(banner.contains("1 of 4 servers failed"), "{banner}");
    let issues = browser
        .text("#section-issues")
        .await
        .unwrap()
        .unwrap_or_default();
    assert!(issues.contains("command not found: mcp-jira"), "{issues}");
    assert_eq!(
        browser
            .eval("return document.getElementById('context-panel').dataset.tone")
            .await
            .unwrap(),
        "error"
    );
    assert_accessible(browser, axe, "failed").await;
    save_screenshot(browser, "failed").await;
}

/// None declared: the workspace has no .mcp.json servers.
async fn check_none_declared_panel(
    h: &Harness,
    browser: &Browser,
    axe: &str,
    agent: ctxsync_persistence::AgentId,
) {
    publish(
        h,
        agent,
        RUN_1,
        4,
        DiscoveryPhase::Complete,
        vec![file("AGENTS.md", "Be brief.")],
        &[],
    )
    .await;
    discovery_state(browser, "complete-no-servers").await;
    let banner = browser.text(".banner").await.unwrap().unwrap_or_default();
    assert!(banner.contains("no MCP servers are declared"), "{banner}");
    assert!(
        browser
            .eval("return document.getElementById('tool-filter') === null")
            .await
            .unwrap()
            == true
    );
    assert_accessible(browser, axe, "none").await;
    save_screenshot(browser, "none").await;
}

/// Stale: the agent restarted; the old process's tools are withheld, and the banner
/// says why and what to do.
async fn check_stale_panel(
    h: &Harness,
    browser: &Browser,
    axe: &str,
    agent: ctxsync_persistence::AgentId,
) {
    publish(
        h,
        agent,
        RUN_1,
        5,
        DiscoveryPhase::Complete,
        workspace(complete_servers()),
        &[],
    )
    .await;
    discovery_state(browser, "complete").await;
    let restarted = Startup {
        version: "test".into(),
        expanded_directory: "/ws".into(),
        agent_run_id: RunId::new(RUN_2),
        accepts_tool_calls: false,
    };
    h.server
        .store
        .update_startup(agent, restarted)
        .await
        .unwrap();
    discovery_state(browser, "stale").await;
    let banner = browser.text(".banner").await.unwrap().unwrap_or_default();
    assert!(banner.contains("withheld"), "{banner}");
    assert!(
        banner.contains("earlier agent process (run 7f3c9a1e)") && banner.contains("run 2b8d4f60"),
        "why, naming both runs: {banner}"
    );
    assert!(
        banner.contains("What to do:") && banner.contains("restart it"),
        "{banner}"
    );
    assert!(
        browser.text("ul.tools").await.unwrap().is_none(),
        "no withheld tool is listed"
    );
    assert_eq!(
        browser.text(".fact-run dd").await.unwrap().as_deref(),
        Some("2b8d4f60")
    );
    assert_accessible(browser, axe, "stale").await;
    save_screenshot(browser, "stale").await;
}

/// The panel in each state a person meets — pending, complete, failed, none declared,
/// stale — reads at a glance (header with the agent's name, short run id and a snapshot
/// age that counts on; the banner; counts; per-server timing), its tool filter works and
/// survives live updates, axe-core finds nothing serious, and a screenshot of each state
/// is saved in `target/screenshots/`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_state_reads_at_a_glance_and_passes_axe() {
    // Heavy: one at a time in this binary (see ctxsync-test-support's `heavy`).
    let _heavy = ctxsync_test_support::heavy().await;
    if !browser_available() {
        return;
    }
    let axe = axe_source();
    let h = Harness::start(TestBackend::Sqlite)
        .await
        .expect("SQLite always starts");
    let agent = h
        .server
        .store
        .create_agent("build-box")
        .await
        .expect("agent")
        .id;
    // Pending: github is done, jira still connecting for 4 s.
    publish(
        &h,
        agent,
        RUN_1,
        1,
        DiscoveryPhase::Pending,
        workspace(vec![timed_server(
            "github",
            &[("create_issue", "Open an issue")],
        )]),
        &[("jira", 4_000)],
    )
    .await;
    let chat = h.new_chat(agent).await;
    let (chromium, chromedriver) = browser_paths();
    let browser = Browser::start(&chromium, &chromedriver)
        .await
        .expect("browser starts");
    open_page(&h, &browser, &chat).await;

    check_pending_panel(&browser, &axe).await;
    check_complete_panel(&h, &browser, &axe, agent).await;
    check_tool_filter(&browser).await;
    filter_survives_a_live_update(&h, &browser, agent).await;
    check_failed_panel(&browser, &axe).await;
    check_none_declared_panel(&h, &browser, &axe, agent).await;
    check_stale_panel(&h, &browser, &axe, agent).await;

    assert_no_reload_and_no_csp_violation(&browser).await;
    browser.close().await.unwrap();
}

/// A page opened on a stale panel (tools withheld after the agent restarted) clears in
/// place when the new run publishes: the banner goes, the tools appear, no reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_banner_clears_live_when_the_fresh_run_publishes() {
    // Heavy: one at a time in this binary (see ctxsync-test-support's `heavy`).
    let _heavy = ctxsync_test_support::heavy().await;
    if !browser_available() {
        return;
    }
    let h = Harness::start(TestBackend::Sqlite)
        .await
        .expect("SQLite always starts");
    let agent = h.new_agent().await;
    publish(
        &h,
        agent,
        RUN_1,
        1,
        DiscoveryPhase::Complete,
        workspace(complete_servers()),
        &[],
    )
    .await;
    let chat = h.new_chat(agent).await;
    let restarted = Startup {
        version: "test".into(),
        expanded_directory: "/ws".into(),
        agent_run_id: RunId::new(RUN_2),
        accepts_tool_calls: false,
    };
    h.server
        .store
        .update_startup(agent, restarted)
        .await
        .unwrap();

    let (chromium, chromedriver) = browser_paths();
    let browser = Browser::start(&chromium, &chromedriver)
        .await
        .expect("browser starts");
    open_page(&h, &browser, &chat).await;
    assert_eq!(
        browser
            .eval("return document.getElementById('context-panel').dataset.discovery")
            .await
            .unwrap(),
        "stale",
        "the page opens withheld"
    );
    assert!(browser.text(".banner-stale").await.unwrap().is_some());
    assert!(browser.text("ul.tools").await.unwrap().is_none());

    // The new process publishes its own complete snapshot.
    publish(
        &h,
        agent,
        RUN_2,
        1,
        DiscoveryPhase::Complete,
        workspace(complete_servers()),
        &[],
    )
    .await;
    browser
        .wait_for(
            "return document.querySelector('.banner-stale') === null \
             && document.querySelectorAll('li.tool').length === 3",
            LIVE,
        )
        .await
        .expect("the stale banner clears and the tools appear without a reload");
    let banner = browser.text(".banner").await.unwrap().unwrap_or_default();
    assert!(banner.contains("complete"), "{banner}");
    assert!(!banner.contains("withheld"), "{banner}");
    assert!(browser.text(".fact-snapshot-run").await.unwrap().is_none());
    assert_eq!(
        browser.text(".fact-run dd").await.unwrap().as_deref(),
        Some("2b8d4f60")
    );
    assert_no_reload_and_no_csp_violation(&browser).await;
    browser.close().await.unwrap();
}

/// The `ctxsync` binary: the agent and the fixture MCP server of the calls test.
const CTXSYNC: &str = env!("CARGO_BIN_EXE_ctxsync");
/// The agent's result cap in the calls test: small, so one call comes back truncated.
const RESULT_CAP_BYTES: usize = 1024;

/// A real `ctxsync agent` whose workspace declares the fixture `calls` with its call
/// tools (slow ones with progress among them), killed on drop with its children.
struct CallingAgent {
    _process: tokio::process::Child,
    _workspace: tempfile::TempDir,
}

impl CallingAgent {
    fn start(h: &Harness, token: &str) -> Self {
        let workspace = tempfile::tempdir().expect("workspace");
        let mut args = vec!["mcp-fixture".to_owned()];
        args.extend(
            ctxsync_mcp_fixture::FixtureConfig::new()
                .tools(0)
                .call_tools()
                .to_args(),
        );
        let servers =
            serde_json::json!({ "mcpServers": { "calls": { "command": CTXSYNC, "args": args } } });
        std::fs::write(workspace.path().join(".mcp.json"), servers.to_string()).unwrap();
        let process = tokio::process::Command::new(CTXSYNC)
            .args(["agent", "--server", &h.server.agent_url(), "--workspace"])
            .arg(workspace.path())
            .args(["--mcp-timeout-ms", "20000"])
            .args(["--tool-result-max-bytes", &RESULT_CAP_BYTES.to_string()])
            .env("CTXSYNC_AGENT_TOKEN", token)
            .env("RUST_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the agent starts");
        Self {
            _process: process,
            _workspace: workspace,
        }
    }
}

/// A turn of `chat` that lists the fixture's call tools (the first turn waits for the
/// agent's discovery; a turn built before its tools arrived is followed by another).
async fn turn_with_call_tools(h: &Harness, chat: &str) -> String {
    let deadline = std::time::Instant::now() + LIVE;
    loop {
        let (status, turn) = h
            .call(
                reqwest::Method::POST,
                &format!("/api/chats/{chat}/turns"),
                Some(serde_json::json!({})),
            )
            .await;
        assert_eq!(status, 200, "{turn}");
        let listed = turn["tools"]
            .as_array()
            .is_some_and(|tools| tools.iter().any(|t| t["name"] == "calls__progress"));
        if listed {
            return turn["turn_id"].as_str().expect("a stored turn").to_owned();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the agent's call tools never reached a turn: {turn}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Calls `name` in `turn` without waiting for its end; answers the call's JSON.
async fn start_call(
    h: &Harness,
    chat: &str,
    turn: &str,
    call_id: &str,
    name: &str,
    arguments: serde_json::Value,
) -> serde_json::Value {
    let (status, call) = h
        .call(
            reqwest::Method::POST,
            &format!("/api/chats/{chat}/turns/{turn}/tool-calls"),
            Some(serde_json::json!({
                "call_id": call_id, "name": name, "arguments": arguments, "wait_ms": 0,
            })),
        )
        .await;
    assert!(matches!(status, 200 | 202), "{status}: {call}");
    call
}

/// The selector of call `call_id`'s row.
fn call_row(call_id: &str) -> String {
    format!("#tool-call-list li.call[data-key$='/{call_id}']")
}

/// Waits until call `call_id`'s row shows `status`; answers the row's text.
async fn call_row_with_status(browser: &Browser, call_id: &str, status: &str) -> String {
    let row = call_row(call_id);
    browser
        .wait_for(
            &format!(
                "const row = document.querySelector(\"{row}\"); \
                 return row && row.dataset.status === '{status}' ? row.innerText : null;"
            ),
            LIVE,
        )
        .await
        .unwrap_or_else(|e| panic!("call {call_id} shows {status}: {e}"))
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Scrolls the calls list into view, checks it with axe-core and saves its screenshot.
async fn check_calls_state(browser: &Browser, axe: &str, state: &str) {
    browser
        .eval("document.getElementById('tool-calls').scrollIntoView(); return true;")
        .await
        .unwrap();
    assert_accessible(browser, axe, state).await;
    save_screenshot(browser, state).await;
}

/// Running: a real agent runs the fixture's `progress` tool; its row says "running" in
/// words, with a labelled progress bar that fills as the tool reports.
async fn check_running_call(h: &Harness, browser: &Browser, axe: &str, chat: &str, turn: &str) {
    assert!(
        browser
            .text("#calls-empty")
            .await
            .unwrap()
            .is_some_and(|t| t == "No tool calls yet."),
        "the empty list says so"
    );
    let call = start_call(
        h,
        chat,
        turn,
        "slow-1",
        "calls__progress",
        serde_json::json!({ "steps": 8, "interval_ms": 500 }),
    )
    .await;
    assert_eq!(call["status"], "running", "{call}");
    let row = call_row("slow-1");
    let text = browser
        .wait_for(
            &format!(
                "const row = document.querySelector(\"{row}\"); \
                 const bar = row && row.querySelector('progress[value]'); \
                 return bar && Number(bar.value) >= 2 ? row.innerText : null;"
            ),
            LIVE,
        )
        .await
        .expect("the running call's bar shows its progress")
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        text.contains("calls__progress") && text.contains("running"),
        "{text}"
    );
    assert!(text.contains(" of 8"), "the progress in words: {text}");
    assert_eq!(
        browser
            .eval(&format!(
                "const bar = document.querySelector(\"{row} progress\"); \
                 return [bar.getAttribute('aria-label'), bar.max];"
            ))
            .await
            .unwrap(),
        serde_json::json!(["Progress of calls__progress", 8])
    );
    assert_eq!(
        browser
            .eval("return document.getElementById('calls-empty').hidden")
            .await
            .unwrap(),
        true
    );
    check_calls_state(browser, axe, "calls-running").await;
}

/// Complete: the bar goes, the duration shows; a result over the agent's cap is marked
/// truncated.
async fn check_complete_calls(h: &Harness, browser: &Browser, axe: &str, chat: &str, turn: &str) {
    let text = call_row_with_status(browser, "slow-1", "complete").await;
    assert!(
        text.contains("complete") && (text.contains(" s") || text.contains(" ms")),
        "status and duration: {text}"
    );
    assert_eq!(
        browser
            .eval(&format!(
                "return document.querySelectorAll(\"{} progress\").length",
                call_row("slow-1")
            ))
            .await
            .unwrap(),
        0,
        "no bar once it ended"
    );
    start_call(
        h,
        chat,
        turn,
        "big-1",
        "calls__sized_result",
        serde_json::json!({ "bytes": RESULT_CAP_BYTES * 4 }),
    )
    .await;
    let big = call_row_with_status(browser, "big-1", "complete").await;
    assert!(big.contains("truncated"), "{big}");
    let order = browser
        .eval(
            "return Array.from(document.querySelectorAll('#tool-call-list li.call'))
               .map(li => li.dataset.key.split('/')[1]);",
        )
        .await
        .unwrap();
    assert_eq!(
        order,
        serde_json::json!(["big-1", "slow-1"]),
        "newest first"
    );
    check_calls_state(browser, axe, "calls-complete").await;
}

/// Error and refused: a tool's JSON-RPC error and a name the turn lacks, each said in
/// words; the status line announced the last end.
async fn check_failed_calls(h: &Harness, browser: &Browser, axe: &str, chat: &str, turn: &str) {
    start_call(
        h,
        chat,
        turn,
        "fail-1",
        "calls__fail",
        serde_json::json!({ "mode": "rpc", "message": "the index is offline" }),
    )
    .await;
    let failed = call_row_with_status(browser, "fail-1", "error").await;
    assert!(failed.contains("error"), "{failed}");
    assert!(
        !failed.contains("the index is offline"),
        "the error's text stays with the API: {failed}"
    );
    start_call(h, chat, turn, "nope-1", "not_a_tool", serde_json::json!({})).await;
    let refused = call_row_with_status(browser, "nope-1", "refused").await;
    assert!(refused.contains("refused"), "{refused}");
    let live = browser
        .wait_for(
            "const t = document.getElementById('calls-live').textContent; \
             return t.includes('not_a_tool') ? t : null;",
            LIVE,
        )
        .await
        .expect("the end is announced");
    assert_eq!(live, "Tool call not_a_tool: refused in 0 ms.");
    check_calls_state(browser, axe, "calls-error").await;
}

/// The rows the script built equal the ones the server writes for the same calls (read
/// through the page's own session), and a phone-sized window keeps the list inside it.
async fn check_script_rows_match_and_narrow_layout(browser: &Browser, axe: &str) {
    let compared = browser
        .eval_async(
            "const done = arguments[arguments.length - 1];
             const rows = d => Array.from(d.querySelectorAll('#tool-call-list li.call')).map(li => li.outerHTML);
             fetch(location.href, { credentials: 'same-origin' }).then(r => r.text()).then(html => {
               const served = new DOMParser().parseFromString(html, 'text/html');
               done({ live: rows(document), served: rows(served) });
             }, e => done({ error: String(e) }));",
            LIVE,
        )
        .await
        .expect("the page is fetched again");
    assert_eq!(
        compared["live"].as_array().map(Vec::len),
        Some(4),
        "{compared}"
    );
    assert_eq!(
        compared["live"], compared["served"],
        "script and server write the same rows"
    );
    browser.set_window_size(360, 800).await.unwrap();
    browser
        .wait_for("return window.innerWidth <= 400", LIVE)
        .await
        .expect("the window narrows");
    let overflow = browser
        .eval(
            "return Array.from(document.querySelectorAll('#tool-calls, #tool-calls *'))
               .filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
               .map(e => e.className || e.tagName);",
        )
        .await
        .unwrap();
    assert_eq!(
        overflow,
        serde_json::json!([]),
        "nothing sticks out of a narrow window"
    );
    check_calls_state(browser, axe, "calls-narrow").await;
}

/// The chat's tool calls on its page (issue 37): a real agent runs the fixture's tools
/// through the chat API while the page is open; the list shows each call live — running
/// with a labelled progress bar, complete with its duration, truncated, error and
/// refused in words — without a reload, axe-core finds nothing serious in any state, and
/// a screenshot of each lands in `target/screenshots/`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_lists_the_chats_tool_calls_live() {
    // Heavy: one at a time in this binary (see ctxsync-test-support's `heavy`).
    let _heavy = ctxsync_test_support::heavy().await;
    if !browser_available() {
        return;
    }
    let axe = axe_source();
    let h = Harness::start(TestBackend::Sqlite)
        .await
        .expect("SQLite always starts");
    let created = h
        .server
        .store
        .create_agent("build-box")
        .await
        .expect("agent");
    let _agent = CallingAgent::start(&h, created.token.expose());
    let chat = h.new_chat(created.id).await;
    let turn = turn_with_call_tools(&h, &chat).await;

    let (chromium, chromedriver) = browser_paths();
    let browser = Browser::start(&chromium, &chromedriver)
        .await
        .expect("browser starts");
    open_page(&h, &browser, &chat).await;
    check_running_call(&h, &browser, &axe, &chat, &turn).await;
    check_complete_calls(&h, &browser, &axe, &chat, &turn).await;
    check_failed_calls(&h, &browser, &axe, &chat, &turn).await;
    assert_no_reload_and_no_csp_violation(&browser).await;
    check_script_rows_match_and_narrow_layout(&browser, &axe).await;
    browser.close().await.unwrap();
}
