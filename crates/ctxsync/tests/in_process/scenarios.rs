//! End-to-end scenarios with real processes: the `ctxsync agent` binary discovering real
//! MCP servers (this binary's `mcp-fixture` command, as child processes of the agent) and
//! publishing to a real server; every assertion is on what the chat API returns.

use crate::support;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use ctxsync_mcp_fixture::{FixtureConfig, FixtureLifecycle, ToolSpec};
use ctxsync_protocol::RunId;
use reqwest::Method;
use serde_json::{Value, json};
use support::*;

const CTXSYNC: &str = env!("CARGO_BIN_EXE_ctxsync");
/// Upper bound for anything a scenario waits on; far above what each needs.
const DEADLINE: Duration = Duration::from_secs(30);

/// An `.mcp.json` entry that runs the fixture from this binary, offering only the tools
/// the scenario names (none of the fixture's generic ones).
fn fixture(config: FixtureConfig) -> Value {
    let mut args = vec!["mcp-fixture".to_string()];
    args.extend(config.tools(0).to_args());
    json!({ "command": CTXSYNC, "args": args })
}

fn write_mcp_json(workspace: &Path, servers: Value) {
    std::fs::write(
        workspace.join(".mcp.json"),
        json!({ "mcpServers": servers }).to_string(),
    )
    .unwrap();
}

/// A running `ctxsync agent` process; killed (with its MCP children's group) on drop.
struct AgentProcess(tokio::process::Child);

impl AgentProcess {
    fn spawn(h: &Harness, token: &str, workspace: &Path, mcp_timeout: Duration) -> Self {
        let child = tokio::process::Command::new(CTXSYNC)
            .args(["agent", "--server", &h.server.agent_url(), "--workspace"])
            .arg(workspace)
            .args(["--mcp-timeout-ms", &mcp_timeout.as_millis().to_string()])
            .env("CTXSYNC_AGENT_TOKEN", token)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the agent starts");
        Self(child)
    }

    /// Stops the agent the way a crash would.
    async fn kill(mut self) {
        self.0.kill().await.expect("kill");
    }
}

struct Scenario {
    h: Harness,
    agent: String,
    token: String,
    chat: String,
    workspace: tempfile::TempDir,
    // Scenarios assert budgets: never beside a heavy test. Last, so it is released last.
    _timing: ctxsync_test_support::TimingBound,
}

impl Scenario {
    /// The world of one scenario on `backend`, with the scenarios' budget and grace;
    /// `None` only when PostgreSQL may be skipped.
    async fn open(backend: TestBackend) -> Option<Self> {
        let timing = ctxsync_test_support::timing_bound().await;
        let harness = Harness::start_with(backend, BUDGET, GRACE).await;
        if backend == TestBackend::Sqlite {
            assert!(harness.is_some(), "a SQLite server always starts");
        }
        Some(Self::new(harness?, timing).await)
    }

    async fn new(h: Harness, timing: ctxsync_test_support::TimingBound) -> Self {
        let (status, agent) = h
            .call(Method::POST, "/api/agents", Some(json!({ "name": "e2e" })))
            .await;
        assert_eq!(status, 201);
        let id = agent["id"].as_str().unwrap().to_string();
        let (status, chat) = h
            .call(Method::POST, "/api/chats", Some(json!({ "agent_id": id })))
            .await;
        assert_eq!(status, 201);
        let workspace = tempfile::tempdir().unwrap();
        std::fs::write(workspace.path().join("AGENTS.md"), "Be brief.\n").unwrap();
        Self {
            agent: id,
            token: agent["token"].as_str().unwrap().to_string(),
            chat: chat["id"].as_str().unwrap().to_string(),
            h,
            workspace,
            _timing: timing,
        }
    }

    fn start_agent(&self, mcp_timeout: Duration) -> AgentProcess {
        AgentProcess::spawn(&self.h, &self.token, self.workspace.path(), mcp_timeout)
    }

    async fn turn(&self, mode: &str) -> Value {
        let (status, turn) = self
            .h
            .call(
                Method::POST,
                &format!("/api/chats/{}/turns", self.chat),
                Some(json!({ "mode": mode })),
            )
            .await;
        assert_eq!(status, 200, "{turn}");
        turn
    }

    /// A counter of this server's gate, read from `/metrics`.
    async fn gate_metric(&self, series: &str) -> u64 {
        let text = self
            .h
            .http
            .get(self.h.url("/metrics"))
            .bearer_auth(&self.h.server.api_token)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        metric(&text, &format!("ctxsync_gate_{series}"))
    }

    async fn chat(&self) -> Value {
        self.h
            .call(Method::GET, &format!("/api/chats/{}", self.chat), None)
            .await
            .1
    }

    /// Polls the chat until `done` holds (bounded by [`DEADLINE`]).
    async fn wait_for_chat(&self, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let done = &done;
        ctxsync_test_support::poll(what)
            .within(DEADLINE)
            .every(Duration::from_millis(50))
            .until(move || async move {
                let chat = self.chat().await;
                if done(&chat) { Ok(chat) } else { Err(chat) }
            })
            .await
    }
}

/// The value of one Prometheus series in `text` (0 when absent).
fn metric(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .map_or(0, |v| v.trim().parse::<f64>().unwrap_or(0.0) as u64)
}

fn tool_names(turn: &Value) -> Vec<String> {
    turn["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// A TCP server answering every HTTP request with 500, standing in for an MCP endpoint
/// whose registration fails.
async fn http_500_server() -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = [0u8; 4096];
                let _ = socket.read(&mut buffer).await;
                let _ = socket
                    .write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 5\r\nconnection: close\r\n\r\nboom!")
                    .await;
            });
        }
    });
    format!("http://{addr}/mcp")
}

/// The gate's budget in these scenarios: short, but far above a release's latency.
const BUDGET: Duration = Duration::from_secs(3);
const GRACE: Duration = Duration::from_secs(2);

ctxsync_test_support::on_both_backends! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    open = Scenario::open;
    no_mcp_servers_is_complete_at_once,
    a_failing_registration_is_settled,
    a_hung_server_fails_open_within_the_budget,
    a_first_turn_while_pending_waits_for_the_tools,
    plan_mode_never_waits,
    a_restarted_agent_never_offers_the_old_process_tools,
    a_broken_edit_keeps_the_previous_tools_with_a_warning,
    a_json_typo_keeps_the_tools_and_the_panel_says_where,
    full_tool_definitions_and_pending_servers_reach_the_chat_api,
}

async fn no_mcp_servers_is_complete_at_once(s: Scenario) {
    let _agent = s.start_agent(Duration::from_secs(5));
    s.wait_for_chat("complete", |c| c["mcp_discovery"]["phase"] == "complete")
        .await;
    let turn = s.turn("default").await;
    assert_eq!(turn["mcp_discovery"]["phase"], "complete");
    assert_eq!(turn["mcp_discovery"]["wait_timed_out"], false);
    assert_eq!(turn["mcp_discovery"]["reason"], "discovery_complete");
    assert!(turn["tools"].as_array().unwrap().is_empty());
    assert_eq!(
        s.gate_metric("waits_total{result=\"immediate\"}").await,
        1,
        "a complete discovery does not wait"
    );
    let chat = s.chat().await;
    assert_eq!(chat["context"]["discovery"]["state"], "complete_no_servers");
}

async fn a_failing_registration_is_settled(s: Scenario) {
    write_mcp_json(
        s.workspace.path(),
        json!({
            "registry": { "type": "http", "url": http_500_server().await },
            "docs": fixture(FixtureConfig::new().tool(ToolSpec::new("search", "Search docs"))),
        }),
    );
    let _agent = s.start_agent(Duration::from_secs(5));
    let turn = s.turn("default").await;
    assert_eq!(turn["mcp_discovery"]["phase"], "complete", "{turn}");
    assert_eq!(turn["mcp_discovery"]["servers_failed"], 1);
    assert_eq!(turn["mcp_discovery"]["servers_ok"], 1);
    assert_eq!(tool_names(&turn), ["docs__search"]);
    let note = turn["note"]
        .as_str()
        .expect("a failed server is worth a note");
    assert!(
        note.starts_with("Workspace MCP: ") && note.contains("registry"),
        "{note}"
    );
}

async fn a_hung_server_fails_open_within_the_budget(s: Scenario) {
    write_mcp_json(
        s.workspace.path(),
        json!({
            "hung": fixture(FixtureConfig::new().hang()),
            "fast": fixture(FixtureConfig::new().tool(ToolSpec::new("ping", "Answer pong"))),
        }),
    );
    // The agent's own timeout is far beyond the gate's budget: the gate must give up first.
    let _agent = s.start_agent(Duration::from_secs(60));
    s.wait_for_chat("the fast server", |c| c.to_string().contains("\"fast\""))
        .await;
    let turn = s.turn("default").await;
    assert_eq!(turn["mcp_discovery"]["wait_timed_out"], true, "{turn}");
    assert_eq!(
        turn["mcp_discovery"]["reason"], "budget_exhausted",
        "the wait ends at the budget"
    );
    assert_eq!(turn["mcp_discovery"]["phase"], "pending");
    assert_eq!(
        tool_names(&turn),
        ["fast__ping"],
        "the healthy sibling's tools are usable"
    );
    assert!(
        turn["note"]
            .as_str()
            .unwrap()
            .contains("more servers may appear"),
        "{turn}"
    );

    // A later turn of the same agent process does not spend a second budget.
    let again = s.turn("default").await;
    assert_eq!(
        again["mcp_discovery"]["reason"], "earlier_wait_timed_out",
        "later turns never wait again: {again}"
    );
    assert_eq!(
        s.gate_metric("waits_total{result=\"timed_out\"}").await,
        1,
        "one budget spent"
    );
    assert_eq!(tool_names(&again), ["fast__ping"]);
}

async fn a_first_turn_while_pending_waits_for_the_tools(s: Scenario) {
    write_mcp_json(
        s.workspace.path(),
        json!({ "slow": fixture(FixtureConfig::new().init_delay(Duration::from_millis(1200)).tool(ToolSpec::new("query", "Run a query"))) }),
    );
    let _agent = s.start_agent(Duration::from_secs(10));
    s.wait_for_chat("pending", |c| c["mcp_discovery"]["phase"] == "pending")
        .await;
    let turn = s.turn("default").await;
    assert_eq!(turn["mcp_discovery"]["phase"], "complete", "{turn}");
    assert_eq!(turn["mcp_discovery"]["wait_timed_out"], false);
    assert_eq!(tool_names(&turn), ["slow__query"]);

    // find_tools finds the fresh tool.
    let (status, found) =
        s.h.call(
            Method::POST,
            &format!("/api/chats/{}/find-tools", s.chat),
            Some(json!({ "queries": ["query"] })),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(found["matches"][0]["name"], "slow__query", "{found}");
}

async fn plan_mode_never_waits(s: Scenario) {
    write_mcp_json(
        s.workspace.path(),
        json!({ "hung": fixture(FixtureConfig::new().hang()) }),
    );
    let _agent = s.start_agent(Duration::from_secs(60));
    s.wait_for_chat("pending", |c| c["mcp_discovery"]["phase"] == "pending")
        .await;
    let turn = s.turn("plan").await;
    assert_eq!(
        turn["mcp_discovery"],
        Value::Null,
        "plan mode neither waits nor reports an outcome"
    );
    assert_eq!(
        s.gate_metric("attempts_started_total").await,
        0,
        "plan mode starts no wait"
    );
}

async fn a_restarted_agent_never_offers_the_old_process_tools(s: Scenario) {
    let server = FixtureConfig::new()
        .nonce_in_descriptions()
        .tool(ToolSpec::new("whoami", "Says which process answers"));
    write_mcp_json(s.workspace.path(), json!({ "id": fixture(server) }));
    let first = s.start_agent(Duration::from_secs(10));
    let turn = s.turn("default").await;
    let old_description = turn["tools"][0]["description"]
        .as_str()
        .expect("the first process's tool")
        .to_string();
    first.kill().await;

    // The next process announces itself before it pushes: from then on the stored
    // snapshot is stale and none of its tools are offered.
    let store = &s.h.server.store;
    let startup = ctxsync_protocol::Startup {
        version: "e2e".into(),
        expanded_directory: s.workspace.path().display().to_string(),
        agent_run_id: RunId::new("a-process-that-has-not-pushed-yet"),
        accepts_tool_calls: false,
    };
    store
        .update_startup(s.agent.parse().unwrap(), startup)
        .await
        .unwrap();
    let chat = s.chat().await;
    assert_eq!(chat["mcp_discovery"]["stale"], true, "{chat}");
    let stale_turn = s.turn("default").await;
    assert!(
        stale_turn["tools"].as_array().unwrap().is_empty(),
        "no tools while stale: {stale_turn}"
    );

    let _second = s.start_agent(Duration::from_secs(10));
    let fresh = s
        .wait_for_chat("the new process's snapshot", |c| {
            c["mcp_discovery"] == json!({ "phase": "complete", "stale": false })
        })
        .await;
    let turn = s.turn("default").await;
    let new_description = turn["tools"][0]["description"]
        .as_str()
        .expect("the new process's tool")
        .to_string();
    assert_ne!(
        new_description, old_description,
        "the tool comes from the new process (its nonce differs)"
    );
    assert!(!fresh.to_string().contains(&old_description));
}

async fn a_broken_edit_keeps_the_previous_tools_with_a_warning(s: Scenario) {
    write_mcp_json(
        s.workspace.path(),
        json!({ "docs": fixture(FixtureConfig::new().tool(ToolSpec::new("search", "Search docs"))) }),
    );
    let _agent = s.start_agent(Duration::from_secs(5));
    let turn = s.turn("default").await;
    assert_eq!(tool_names(&turn), ["docs__search"]);

    write_mcp_json(
        s.workspace.path(),
        json!({ "docs": { "command": "ctxsync-e2e-no-such-command" } }),
    );
    let chat = s
        .wait_for_chat("the retained-connection warning", |c| {
            c.to_string()
                .contains("tools are from the previous connection")
        })
        .await;
    let turn = s.turn("default").await;
    assert_eq!(
        tool_names(&turn),
        ["docs__search"],
        "the previous connection's tools stay usable: {chat}"
    );
    let issues = chat["context"]["issues"].as_array().unwrap();
    assert!(
        issues
            .iter()
            .any(|i| i["kind"] == "mcp_server" && i["severity"] == "warning"),
        "{issues:?}"
    );
}

/// Issue 49 end to end: a JSON typo saved into `.mcp.json` while the agent runs keeps the
/// working server's tools for turns, the chat's panel names the config file's error by line
/// and column and its headline says the config is broken (not that nothing is declared),
/// and fixing the file clears both.
async fn a_json_typo_keeps_the_tools_and_the_panel_says_where(s: Scenario) {
    let docs = fixture(FixtureConfig::new().tool(ToolSpec::new("search", "Search docs")));
    write_mcp_json(s.workspace.path(), json!({ "docs": docs }));
    let _agent = s.start_agent(Duration::from_secs(5));
    let turn = s.turn("default").await;
    assert_eq!(tool_names(&turn), ["docs__search"]);

    // The closing brace of the server map is missing: the file ends after line 2.
    std::fs::write(
        s.workspace.path().join(".mcp.json"),
        format!("{{\"mcpServers\": {{\n\"docs\": {docs}\n"),
    )
    .unwrap();
    let config_error = |c: &Value| {
        c["context"]["mcp"]["configs"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|config| {
                config["path"]
                    .as_str()
                    .is_some_and(|p| p.ends_with(".mcp.json"))
            })
            .and_then(|config| config["diagnostic"].as_str())
            .map(str::to_owned)
    };
    let chat = s
        .wait_for_chat("the config file's parse error", |c| {
            config_error(c).is_some_and(|d| d.contains("invalid JSON"))
        })
        .await;
    let diagnostic = config_error(&chat).unwrap();
    assert!(
        diagnostic.starts_with("invalid JSON at the end of line 2: EOF while parsing an object"),
        "{diagnostic}"
    );
    assert!(
        diagnostic.contains("kept the servers it declared before"),
        "{diagnostic}"
    );
    let banner = &chat["context"]["discovery"];
    assert_eq!(
        banner["text"],
        "MCP discovery is complete, but an MCP config file is broken; its error is shown below.",
        "{banner}"
    );
    let issues = chat["context"]["issues"].as_array().unwrap();
    let kept = issues
        .iter()
        .find(|i| i["kind"] == "mcp_server" && i["source"] == "docs")
        .unwrap_or_else(|| panic!("the kept server's warning: {issues:?}"));
    assert_eq!(kept["severity"], "warning");
    assert!(
        kept["text"]
            .as_str()
            .unwrap()
            .contains("at the end of line 2"),
        "{kept}"
    );
    for issue in issues {
        ctxsync_test_support::assert_in_words(issue["text"].as_str().unwrap_or_default());
    }
    let turn = s.turn("default").await;
    assert_eq!(
        tool_names(&turn),
        ["docs__search"],
        "the tools stay usable: {chat}"
    );

    write_mcp_json(s.workspace.path(), json!({ "docs": docs }));
    let chat = s
        .wait_for_chat("the fixed file", |c| {
            config_error(c).is_none() && !c["context"]["issues"].to_string().contains("docs")
        })
        .await;
    assert_eq!(
        chat["context"]["discovery"]["text"],
        "MCP discovery is complete."
    );
    let turn = s.turn("default").await;
    assert_eq!(tool_names(&turn), ["docs__search"]);
}

/// Issue 18's path end to end: a real agent negotiates the current revision with a server
/// whose tool has every optional part, while another server never answers; the chat API
/// names the one still connecting, a turn's tools carry title, output schema and untrusted
/// annotations, the panel shows title, badge, revision and timings, and the stored body
/// keeps icons, `_meta` and the server's instructions.
async fn full_tool_definitions_and_pending_servers_reach_the_chat_api(s: Scenario) {
    let rich = FixtureConfig::new()
        .lifecycle(FixtureLifecycle::Modern)
        .rich_tools()
        .instructions("Search before you answer.")
        .tool(ToolSpec::new("search", "Search the docs"));
    write_mcp_json(
        s.workspace.path(),
        json!({ "docs": fixture(rich), "stuck": fixture(FixtureConfig::new().hang()) }),
    );
    let _agent = s.start_agent(Duration::from_secs(60));
    let chat = s
        .wait_for_chat("docs discovered while stuck connects", |c| {
            c["mcp_discovery"]["phase"] == "pending" && c.to_string().contains("Title of search")
        })
        .await;
    let pending = &chat["mcp_discovery"]["pending_servers"];
    assert_eq!(pending[0]["name"], "stuck", "{chat}");
    assert_eq!(pending.as_array().unwrap().len(), 1, "{chat}");
    assert!(pending[0]["elapsed_ms"].as_u64().is_some(), "{chat}");
    let panel = chat["context"].to_string();
    assert!(panel.contains("MCP 2026-07-28"), "{panel}");
    assert!(
        panel.contains("read_only"),
        "the read-only hint badge: {panel}"
    );

    let plan = s.turn("plan").await;
    let note = plan["note"].as_str().expect("pending is noted");
    assert!(note.contains("Waiting for: stuck ("), "{note}");
    let tool = &plan["tools"][0];
    assert_eq!(tool["name"], "docs__search", "{plan}");
    assert_eq!(tool["title"], "Title of search");
    assert_eq!(
        tool["output_schema"]["properties"]["result"]["type"],
        "string"
    );
    assert_eq!(
        tool["annotations_untrusted"]["read_only_hint"], true,
        "{tool}"
    );

    let (status, context) =
        s.h.call(
            Method::GET,
            &format!("/api/agents/{}/context", s.agent),
            None,
        )
        .await;
    assert_eq!(status, 200);
    let body = context["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["source"] == "mcp:docs")
        .map(|r| &r["body"])
        .expect("the docs row");
    assert_eq!(body["protocol_version"], "2026-07-28", "{body}");
    assert_eq!(body["instructions"], "Search before you answer.");
    assert!(body["timings"]["handshake_ms"].as_u64().is_some(), "{body}");
    assert_eq!(body["server_info"]["name"], "ctxsync-mcp-fixture");
    let stored = &body["tools"][0];
    assert_eq!(stored["icons"][0]["mime_type"], "image/png", "{stored}");
    assert_eq!(stored["meta"]["ui"]["resourceUri"], "ui://fixture/search");
    assert_eq!(stored["annotations"]["title"], "Hint title of search");
}
