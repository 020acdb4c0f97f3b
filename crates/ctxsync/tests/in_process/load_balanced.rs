//! The end-to-end scenarios through a real load balancer: HAProxy, round-robin with health
//! checks and redispatch, in front of two `ctxsync server` replicas on one PostgreSQL
//! database, with consecutive requests landing on different replicas — a first turn
//! released by a real agent's push, a plan turn, find-tools and then the turn's tools, a
//! context refresh, the page link → page → live events in a real browser; and a replica
//! killed under an open page, whose event stream comes back on the survivor.

use crate::support;

use std::path::Path;
use std::time::Duration;

use ctxsync_mcp_fixture::{FixtureConfig, ToolSpec};
use reqwest::Method;
use serde_json::{Value, json};
use support::artifact_dir;
use support::haproxy::{LoadBalanced, haproxy_available};
use support::webdriver::{Browser, browser_available, browser_paths};

const CTXSYNC: &str = env!("CARGO_BIN_EXE_ctxsync");
/// Bound on anything a test waits for: each step takes well under a tenth of it here.
pub(crate) const WAIT: Duration = Duration::from_secs(60);
/// The replicas' gate budget: far above a release's latency, far below [`WAIT`].
const REPLICA_FLAGS: &[&str] = &["--discovery-budget-ms", "20000"];
/// Polls of HAProxy's statistics that must agree before a test trusts what they show.
const STABLE_POLLS: usize = 10;

/// Both replicas and HAProxy, or `None` when a prerequisite may be skipped locally.
async fn balanced() -> Option<LoadBalanced> {
    if !haproxy_available() {
        return None;
    }
    LoadBalanced::start(REPLICA_FLAGS).await
}

/// An agent (its id and token) and a chat bound to it, created through the balancer.
pub(crate) async fn agent_and_chat(lb: &LoadBalanced) -> (String, String, String) {
    let agent = lb
        .call(Method::POST, "/api/agents", Some(json!({ "name": "lb" })))
        .await;
    assert_eq!(agent.status, 201, "{agent:?}");
    let id = agent.body["id"].as_str().unwrap().to_owned();
    let chat = lb
        .call(Method::POST, "/api/chats", Some(json!({ "agent_id": id })))
        .await;
    assert_eq!(chat.status, 201, "{chat:?}");
    (
        id,
        agent.body["token"].as_str().unwrap().to_owned(),
        chat.body["id"].as_str().unwrap().to_owned(),
    )
}

/// A workspace whose `.mcp.json` declares `servers` (name → fixture), with an `AGENTS.md`.
pub(crate) fn workspace(servers: &[(&str, FixtureConfig)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut declared = serde_json::Map::new();
    for (name, config) in servers {
        let mut args = vec!["mcp-fixture".to_owned()];
        args.extend(config.clone().tools(0).to_args());
        declared.insert(
            (*name).to_owned(),
            json!({ "command": CTXSYNC, "args": args }),
        );
    }
    let mcp = json!({ "mcpServers": declared });
    std::fs::write(dir.path().join(".mcp.json"), mcp.to_string()).unwrap();
    std::fs::write(dir.path().join("AGENTS.md"), "Be brief.\n").unwrap();
    dir
}

/// A server whose tools appear only after `delay`, so a first turn has something to wait for.
fn slow_server(delay: Duration, tool: &str) -> FixtureConfig {
    FixtureConfig::new()
        .init_delay(delay)
        .tool(ToolSpec::new(tool, "Run a query"))
}

/// Polls the chat through the balancer until `done` holds (bounded by [`WAIT`]).
pub(crate) async fn wait_for_chat(
    lb: &LoadBalanced,
    chat: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) {
    let done = &done;
    let path = format!("/api/chats/{chat}");
    let path = path.as_str();
    ctxsync_test_support::poll(what)
        .within(WAIT)
        .every(Duration::from_millis(50))
        .explain(|| lb.logs())
        .until(move || async move {
            let answer = lb.call(Method::GET, path, None).await;
            assert_eq!(answer.status, 200, "{answer:?}");
            if done(&answer.body) {
                Ok(())
            } else {
                Err(answer.body)
            }
        })
        .await;
}

fn tool_names(tools: &Value) -> Vec<String> {
    tools
        .as_array()
        .unwrap_or_else(|| panic!("a tool list: {tools}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_turn_and_a_plan_turn_through_the_balancer() {
    // Heavy: one at a time in this binary (see ctxsync-test-support's `heavy`).
    let _heavy = ctxsync_test_support::heavy().await;
    let Some(lb) = balanced().await else { return };
    let (_, token, chat) = agent_and_chat(&lb).await;
    let workspace = workspace(&[("slow", slow_server(Duration::from_millis(1500), "query"))]);
    let _agent = lb.start_agent("a", &token, workspace.path());

    wait_for_chat(&lb, &chat, "a pending snapshot", |c| {
        c["mcp_discovery"]["phase"] == "pending"
    })
    .await;
    // Released by the agent's push to replica a, on whichever replica took the turn.
    let turn = lb
        .call(
            Method::POST,
            &format!("/api/chats/{chat}/turns"),
            Some(json!({ "mode": "default" })),
        )
        .await;
    assert_eq!(turn.status, 200, "{turn:?}");
    assert_eq!(turn.body["mcp_discovery"]["phase"], "complete", "{turn:?}");
    assert_eq!(turn.body["mcp_discovery"]["wait_timed_out"], false);
    assert_eq!(tool_names(&turn.body["tools"]), ["slow__query"]);

    let plan = lb
        .call(
            Method::POST,
            &format!("/api/chats/{chat}/turns"),
            Some(json!({ "mode": "plan" })),
        )
        .await;
    assert_eq!(plan.status, 200, "{plan:?}");
    assert_eq!(
        plan.body["mcp_discovery"],
        Value::Null,
        "plan mode neither waits nor reports an outcome: {plan:?}"
    );
    lb.assert_calls_alternated();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn find_tools_activates_for_a_turn_that_any_replica_serves() {
    // Heavy: one at a time in this binary (see ctxsync-test-support's `heavy`).
    let _heavy = ctxsync_test_support::heavy().await;
    let Some(lb) = balanced().await else { return };
    let (_, token, chat) = agent_and_chat(&lb).await;
    let docs = FixtureConfig::new()
        .tool(ToolSpec::new("search", "Search the docs"))
        .tool(ToolSpec::new("fetch", "Fetch a page"));
    let workspace = workspace(&[("docs", docs)]);
    let _agent = lb.start_agent("b", &token, workspace.path());
    wait_for_chat(&lb, &chat, "complete discovery", |c| {
        c["mcp_discovery"]["phase"] == "complete"
    })
    .await;

    let turn = lb
        .call(
            Method::POST,
            &format!("/api/chats/{chat}/turns"),
            Some(json!({ "mode": "default" })),
        )
        .await;
    assert_eq!(turn.status, 200, "{turn:?}");
    let turn_id = turn.body["turn_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a turn has an id: {turn:?}"))
        .to_owned();
    let found = lb
        .call(
            Method::POST,
            &format!("/api/chats/{chat}/find-tools"),
            Some(json!({ "turn_id": turn_id, "names": ["docs__search"] })),
        )
        .await;
    assert_eq!(found.status, 200, "{found:?}");
    assert_eq!(found.body["turn_id"], turn_id.as_str(), "{found:?}");
    assert_eq!(
        found.body["activated"],
        json!(["docs__search"]),
        "{found:?}"
    );
    assert_ne!(found.served_by, turn.served_by);

    // The turn's outcome, tools and activations, from one replica and then the other.
    let mut readers = Vec::new();
    for _ in 0..2 {
        let read = lb
            .call(
                Method::GET,
                &format!("/api/chats/{chat}/turns/{turn_id}"),
                None,
            )
            .await;
        assert_eq!(read.status, 200, "{read:?}");
        assert_eq!(
            read.body["active_tools"],
            json!(["docs__search"]),
            "{read:?}"
        );
        assert_eq!(
            tool_names(&read.body["tools"]),
            ["docs__fetch", "docs__search"],
            "{read:?}"
        );
        assert_eq!(read.body["mcp_discovery"]["phase"], "complete", "{read:?}");
        readers.push(read.served_by);
    }
    assert_ne!(readers[0], readers[1]);
    lb.assert_calls_alternated();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_refresh_through_the_balancer() {
    // Heavy: one at a time in this binary (see ctxsync-test-support's `heavy`).
    let _heavy = ctxsync_test_support::heavy().await;
    let Some(lb) = balanced().await else { return };
    let (_, token, chat) = agent_and_chat(&lb).await;
    let workspace = workspace(&[]);
    let _agent = lb.start_agent("a", &token, workspace.path());
    wait_for_chat(&lb, &chat, "complete discovery", |c| {
        c["mcp_discovery"]["phase"] == "complete"
    })
    .await;

    std::fs::write(workspace.path().join("AGENTS.md"), "Be briefer.\n").unwrap();
    wait_for_chat(&lb, &chat, "the changed context", |c| {
        !c["context"]["dirty"].is_null()
    })
    .await;
    let refreshed = lb
        .call(Method::PUT, &format!("/api/chats/{chat}/context"), None)
        .await;
    assert_eq!(refreshed.status, 200, "{refreshed:?}");
    assert_eq!(
        refreshed.body["context"]["dirty"],
        Value::Null,
        "{refreshed:?}"
    );
    // The next read lands on the other replica, which reads the same pin.
    let read = lb
        .call(Method::GET, &format!("/api/chats/{chat}"), None)
        .await;
    assert_ne!(read.served_by, refreshed.served_by);
    assert_eq!(read.body["context"]["dirty"], Value::Null, "{read:?}");
    lb.assert_calls_alternated();
}

/// A browser on the balancer, signed in to `chat`'s page through a link minted by one
/// replica and opened on the other (checked first without the browser).
pub(crate) async fn open_page(lb: &LoadBalanced, chat: &str) -> Browser {
    let link = lb
        .call(Method::POST, &format!("/api/chats/{chat}/link"), None)
        .await;
    assert_eq!(link.status, 200, "{link:?}");
    let url = lb.url(link.body["url"].as_str().unwrap());
    let peek = LoadBalanced::answer(lb.http.get(&url).send().await.unwrap()).await;
    assert_ne!(
        peek.served_by, link.served_by,
        "the link is opened on the other replica"
    );
    assert_eq!(
        peek.status, 200,
        "a link minted on {} opens on {}",
        link.served_by, peek.served_by
    );

    let (chromium, chromedriver) = browser_paths();
    let browser = Browser::start(&chromium, &chromedriver)
        .await
        .expect("browser starts");
    browser.goto(&url).await.unwrap();
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
    browser
}

/// Waits until the page shows a tool called `tool`.
async fn wait_for_tool(browser: &Browser, tool: &str, what: &str) {
    let script = format!(
        "const t = document.querySelector('ul.tools'); return !!t && t.innerText.includes({});",
        serde_json::to_string(tool).unwrap()
    );
    browser
        .wait_for(&script, WAIT)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
}

/// Changes the workspace's `AGENTS.md`, then uses the page's refresh button: the session's
/// PUT goes through the balancer and the re-pinned panel arrives over the event stream.
async fn refresh_from_the_page(browser: &Browser, workspace: &Path, text: &str) {
    std::fs::write(workspace.join("AGENTS.md"), text).unwrap();
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_link_page_and_live_events_through_the_balancer() {
    // Heavy: one at a time in this binary (see ctxsync-test-support's `heavy`).
    let _heavy = ctxsync_test_support::heavy().await;
    if !browser_available() {
        return;
    }
    let Some(lb) = balanced().await else { return };
    let (_, token, chat) = agent_and_chat(&lb).await;
    let workspace = workspace(&[("slow", slow_server(Duration::from_secs(4), "query"))]);
    let _agent = lb.start_agent("a", &token, workspace.path());
    wait_for_chat(&lb, &chat, "a pending snapshot", |c| {
        c["mcp_discovery"]["phase"] == "pending"
    })
    .await;
    let before: Vec<u64> = lb.stats().await.iter().map(|s| s.total).collect();

    let browser = open_page(&lb, &chat).await;
    browser.eval("window.__noReload = 42;").await.unwrap();
    wait_for_tool(
        &browser,
        "query",
        "the page updates when discovery completes",
    )
    .await;
    assert_eq!(
        browser.eval("return window.__noReload").await.unwrap(),
        42,
        "the page was not reloaded"
    );
    refresh_from_the_page(&browser, workspace.path(), "Be briefer.\n").await;

    let after: Vec<u64> = lb.stats().await.iter().map(|s| s.total).collect();
    assert!(
        after.iter().zip(&before).all(|(a, b)| a > b),
        "the browser's requests reached both replicas: {before:?} → {after:?}"
    );
    lb.assert_calls_alternated();
    browser
        .screenshot(&artifact_dir().join("load-balanced-page.png"))
        .await
        .unwrap();
    browser.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_reconnects_when_its_replica_is_killed() {
    // Heavy: one at a time in this binary (see ctxsync-test-support's `heavy`).
    let _heavy = ctxsync_test_support::heavy().await;
    if !browser_available() {
        return;
    }
    let Some(mut lb) = balanced().await else {
        return;
    };
    let (_, token, chat) = agent_and_chat(&lb).await;
    let browser = open_page(&lb, &chat).await;
    assert_eq!(
        browser
            .eval("return document.querySelector('.reconnecting').hidden")
            .await
            .unwrap(),
        true,
        "no notice while the stream is open"
    );

    // The page's event stream is the one request still open (a favicon or script fetch
    // ends at once; the stream stays): its replica is the victim.
    // The replicas seen holding the one open request, across the last probes.
    let seen = &std::cell::RefCell::new(Vec::<String>::new());
    let victim = ctxsync_test_support::poll("the page's event stream to settle on one replica")
        .within(WAIT)
        .every(Duration::from_millis(50))
        .until(|| async {
            let stats = lb.stats().await;
            let open: Vec<&str> = stats
                .iter()
                .filter(|s| s.current > 0)
                .map(|s| s.name.as_str())
                .collect();
            let mut seen = seen.borrow_mut();
            match (
                open.as_slice(),
                stats.iter().map(|s| s.current).sum::<u64>(),
            ) {
                ([name], 1) => seen.push((*name).to_owned()),
                _ => seen.clear(),
            }
            if seen.len() > STABLE_POLLS {
                seen.remove(0);
            }
            if seen.len() >= STABLE_POLLS && seen.iter().all(|name| *name == seen[0]) {
                Ok(seen[0].clone())
            } else {
                Err(stats)
            }
        })
        .await;
    let survivor = LoadBalanced::other(&victim);
    // The notice may show for only the first backoff; the page records that it did.
    browser
        .eval(
            "const n = document.querySelector('.reconnecting'); window.__noticeShown = false; \
             new MutationObserver(() => { if (!n.hidden) window.__noticeShown = true; }) \
               .observe(n, { attributes: true });",
        )
        .await
        .unwrap();
    lb.kill(&victim).await;
    browser
        .wait_for("return window.__noticeShown === true", WAIT)
        .await
        .expect("the page says its live updates were interrupted");
    lb.wait_for_stats("HAProxy to take the killed replica out", |stats| {
        stats.iter().any(|s| s.name == victim && s.status == "DOWN")
    })
    .await;
    lb.wait_for_stats("the page's new event stream on the survivor", |stats| {
        stats.iter().any(|s| s.name == survivor && s.current == 1)
    })
    .await;
    browser
        .wait_for(
            "return document.querySelector('.reconnecting').hidden === true",
            WAIT,
        )
        .await
        .expect("the notice goes once a new stream is open");

    // A change after the kill: a real agent's push to the survivor reaches the page.
    let workspace = workspace(&[(
        "docs",
        FixtureConfig::new().tool(ToolSpec::new("search", "Search the docs")),
    )]);
    let _agent = lb.start_agent(survivor, &token, workspace.path());
    wait_for_tool(
        &browser,
        "search",
        "the page shows the change made after the kill",
    )
    .await;
    // The browser session still works: its refresh goes through to the survivor.
    refresh_from_the_page(&browser, workspace.path(), "Be briefer.\n").await;
    browser
        .screenshot(&artifact_dir().join("load-balanced-after-kill.png"))
        .await
        .unwrap();
    browser.close().await.unwrap();
}
