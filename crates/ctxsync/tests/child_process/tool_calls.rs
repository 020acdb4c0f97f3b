//! Tool calls end to end: a real `ctxsync server`, a real `ctxsync agent` and the fixture
//! MCP server as the agent's child, on both backends. Each call goes through the chat API,
//! the agent's call stream and rmcp, and the fixture's call log says what the MCP server
//! saw (started, cancelled, finished).

use std::time::{Duration, Instant};

use ctxsync_persistence::test_support::TestStore;
use ctxsync_persistence::{AgentId, ChatId};
use ctxsync_protocol::DiscoveryPhase;
use serde_json::{Value, json};

use crate::processes::{
    AgentProcess, Logs, MCP_TIMEOUT_MS, ServerProcess, TestBackend, WAIT, Workspace, database,
    poll, wait_for_context,
};

pub(crate) const API_TOKEN: &str = "tool-calls-e2e-api-token-0123456789";
/// A value the fixture's `env` tool prints; it is a secret of the server's entry.
const SECRET: &str = "s3cr3t-value-from-the-entry-env-7f3a";

/// One server, one agent whose workspace declares the fixture `calls` with its call tools.
/// The liveness tests stand on it too (their requests use [`API_TOKEN`]).
pub(crate) struct World {
    pub(crate) store: TestStore,
    pub(crate) logs: Logs,
    pub(crate) server: ServerProcess,
    pub(crate) agent: AgentProcess,
    pub(crate) agent_id: AgentId,
    pub(crate) token: String,
    pub(crate) workspace: Workspace,
    pub(crate) chat: ChatId,
    pub(crate) http: reqwest::Client,
}

impl World {
    pub(crate) async fn start(backend: TestBackend, agent_args: &[&str]) -> Option<Self> {
        Self::start_with(backend, agent_args, serde_json::Map::new(), MCP_TIMEOUT_MS).await
    }

    /// [`Self::start`] with `more` servers declared beside the fixture.
    async fn start_with(
        backend: TestBackend,
        agent_args: &[&str],
        more: serde_json::Map<String, Value>,
        mcp_timeout_ms: &str,
    ) -> Option<Self> {
        let store = database(backend).await?;
        let agent = store.create_agent("calls").await.unwrap();
        let token = agent.token.expose().to_owned();
        let logs = Logs::new();
        let server = ServerProcess::start_with(&store, &logs, &["--api-token", API_TOKEN]).await;
        let workspace = Workspace::new();
        let ctxsync = env!("CARGO_BIN_EXE_ctxsync");
        let call_log = workspace.path().join("calls.jsonl");
        let mut servers = more;
        servers.insert(
            "calls".into(),
            json!({
                "command": ctxsync,
                "args": ["mcp-fixture", "--call-tools", "--call-log", call_log],
                "env": {"CALL_SECRET": SECRET},
            }),
        );
        workspace.write(".mcp.json", json!({ "mcpServers": servers }).to_string());
        let process = AgentProcess::start_timed(
            &logs,
            "agent",
            &server.url(),
            &workspace.path(),
            &token,
            agent_args,
            mcp_timeout_ms,
        );
        let chat = store.create_chat(Some(agent.id)).await.unwrap().id;
        let world = Self {
            store,
            logs,
            server,
            agent: process,
            agent_id: agent.id,
            token,
            workspace,
            chat,
            http: reqwest::Client::new(),
        };
        world.discovered().await;
        Some(world)
    }

    /// Waits for the current agent process's complete snapshot; answers its run.
    pub(crate) async fn discovered(&self) -> String {
        let context = wait_for_context(
            &self.store,
            self.agent_id,
            &self.logs,
            "a complete snapshot",
            |c| {
                c.snapshot.as_ref().is_some_and(|s| {
                    s.phase == DiscoveryPhase::Complete && s.agent_run_id == c.agent.agent_run_id
                })
            },
        )
        .await;
        context.agent.agent_run_id.expect("a run id").to_string()
    }

    fn url(&self, path: &str) -> String {
        format!("{}/api/chats/{}{path}", self.server.http_url(), self.chat)
    }

    /// A new turn's id.
    async fn turn(&self) -> String {
        self.turn_and_tools().await.0
    }

    /// A new turn's id and the names of the tools it lists.
    async fn turn_and_tools(&self) -> (String, Vec<String>) {
        let response = self
            .http
            .post(self.url("/turns"))
            .bearer_auth(API_TOKEN)
            .json(&json!({}))
            .send()
            .await
            .expect("POST turns");
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        let names: Vec<String> = body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect();
        assert!(names.iter().any(|n| n == "calls__count"), "{body:#}");
        let turn = body["turn_id"].as_str().expect("a stored turn").to_owned();
        (turn, names)
    }

    async fn post(&self, turn: &str, request: Value) -> (u16, Value) {
        let response = self
            .http
            .post(self.url(&format!("/turns/{turn}/tool-calls")))
            .bearer_auth(API_TOKEN)
            .json(&request)
            .send()
            .await
            .expect("POST tool-calls");
        let status = response.status().as_u16();
        (status, response.json().await.expect("a JSON answer"))
    }

    async fn call(&self, turn: &str, call_id: &str, name: &str, arguments: Value) -> Value {
        let (status, call) = self
            .post(
                turn,
                json!({"call_id": call_id, "name": name, "arguments": arguments}),
            )
            .await;
        assert_eq!(status, 200, "{call:#}\n{}", self.logs.read("agent"));
        call
    }

    async fn get(&self, turn: &str, call_id: &str, wait_ms: u64) -> Value {
        let response = self
            .http
            .get(self.url(&format!(
                "/turns/{turn}/tool-calls/{call_id}?wait_ms={wait_ms}"
            )))
            .bearer_auth(API_TOKEN)
            .send()
            .await
            .expect("GET tool-call");
        assert!(response.status().is_success(), "{response:?}");
        response.json().await.unwrap()
    }

    /// The fixture's call log: one JSON object per event.
    fn call_log(&self) -> Vec<Value> {
        std::fs::read_to_string(self.workspace.path().join("calls.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    }

    fn events(&self, tool: &str, event: &str) -> usize {
        self.call_log()
            .iter()
            .filter(|e| e["tool"] == tool && e["event"] == event)
            .count()
    }

    async fn wait_for_event(&self, tool: &str, event: &str, count: usize) {
        poll(format!("{count} `{event}` of {tool} in the call log"))
            .within(WAIT)
            .explain(|| format!("{:#?}\n{}", self.call_log(), self.logs.read("agent")))
            .until_true(|| async { self.events(tool, event) >= count })
            .await;
    }
}

fn status(call: &Value) -> &str {
    call["status"].as_str().unwrap_or("")
}

/// Resident memory of `pid` in KiB, from `/proc`.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

async fn calls_run_once_and_end_each_way(backend: TestBackend) {
    let Some(world) = World::start(backend, &[]).await else {
        return;
    };
    let turn = world.turn().await;

    runs_once_and_conflicts(&world, &turn).await;
    timeouts_and_cancels_reach_the_server(&world, &turn).await;
    errors_and_progress(&world, &turn).await;
    results_are_capped(&world, &turn).await;
    secrets_come_back_nowhere(&world, &turn).await;
    unknown_names_are_refused(&world, &turn).await;
    // None of this changed discovery.
    let context = world
        .store
        .read_agent_context(world.agent_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        context.snapshot.map(|s| s.phase),
        Some(DiscoveryPhase::Complete)
    );
}

async fn runs_once_and_conflicts(world: &World, turn: &str) {
    // Ten concurrent POSTs of one call: one run, ten identical answers.
    let posts = (0..10).map(|_| {
        world.post(
            turn,
            json!({"call_id": "toolu_01", "name": "calls__count", "arguments": {}}),
        )
    });
    let answers = futures::future::join_all(posts).await;
    for (code, call) in &answers {
        assert_eq!(*code, 200, "{call:#}");
        assert_eq!(status(call), "complete", "{call:#}");
        assert_eq!(call["result"], answers[0].1["result"]);
        assert_eq!(call["server"], "calls");
        assert_eq!(call["tool"], "count");
    }
    assert_eq!(
        world.events("count", "started"),
        1,
        "{:#?}",
        world.call_log()
    );
    assert!(
        answers[0].1["model_text"]
            .as_str()
            .is_some_and(|t| !t.is_empty())
    );
    // The same id with other arguments is another call: 409.
    let (code, conflict) = world
        .post(
            turn,
            json!({"call_id": "toolu_01", "name": "calls__count", "arguments": {"n": 1}}),
        )
        .await;
    assert_eq!(code, 409, "{conflict:#}");
}

async fn timeouts_and_cancels_reach_the_server(world: &World, turn: &str) {
    // A timeout reaches the MCP server as notifications/cancelled.
    let (code, timed_out) = world
        .post(
            turn,
            json!({"call_id": "slow", "name": "calls__sleep", "arguments": {"ms": 60000},
                   "timeout_ms": 300}),
        )
        .await;
    assert_eq!(code, 200, "{timed_out:#}");
    assert_eq!(status(&timed_out), "timed_out", "{timed_out:#}");
    world.wait_for_event("sleep", "cancelled", 1).await;

    // A cancel too, while the call runs.
    let (code, running) = world
        .post(
            turn,
            json!({"call_id": "cancel-me", "name": "calls__sleep", "arguments": {"ms": 60000},
                   "wait_ms": 0}),
        )
        .await;
    assert_eq!(code, 202, "{running:#}");
    assert_eq!(status(&running), "running");
    world.wait_for_event("sleep", "started", 2).await;
    let canceled: Value = world
        .http
        .delete(world.url(&format!("/turns/{turn}/tool-calls/cancel-me")))
        .bearer_auth(API_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status(&canceled), "canceled", "{canceled:#}");
    world.wait_for_event("sleep", "cancelled", 2).await;
}

async fn errors_and_progress(world: &World, turn: &str) {
    // A tool error is a complete call whose result says so; a JSON-RPC error is `error`.
    let failed = world
        .call(
            turn,
            "fail-tool",
            "calls__fail",
            json!({"mode": "tool", "message": "nope"}),
        )
        .await;
    assert_eq!(status(&failed), "complete", "{failed:#}");
    assert_eq!(failed["result"]["isError"], true);
    let rpc = world
        .call(
            turn,
            "fail-rpc",
            "calls__fail",
            json!({"mode": "rpc", "message": "bad"}),
        )
        .await;
    assert_eq!(status(&rpc), "error", "{rpc:#}");
    assert!(
        rpc["error"]["code"].as_i64().is_some_and(|c| c != 0),
        "{rpc:#}"
    );

    // Progress is relayed and the latest kept.
    let progressed = world
        .call(
            turn,
            "prog",
            "calls__progress",
            json!({"steps": 3, "interval_ms": 300}),
        )
        .await;
    assert_eq!(status(&progressed), "complete", "{progressed:#}");
    assert!(
        progressed["progress"]["progress"].as_f64().is_some(),
        "{progressed:#}"
    );
}

async fn results_are_capped(world: &World, turn: &str) {
    // A 10 MiB result is capped before it leaves the agent, and memory stays bounded.
    let big = world
        .call(
            turn,
            "big",
            "calls__sized_result",
            json!({"bytes": 10 * 1024 * 1024}),
        )
        .await;
    assert_eq!(status(&big), "complete", "{:.300}", big.to_string());
    assert_eq!(big["truncated"], true);
    let size = big["result"].to_string().len();
    assert!(size <= 256 * 1024 + 1024, "{size} bytes");
    let agent_rss = rss_kib(world.agent.child.id().unwrap());
    let server_rss = rss_kib(world.server.pid());
    assert!(agent_rss < 400 * 1024, "agent RSS {agent_rss} KiB");
    assert!(server_rss < 400 * 1024, "server RSS {server_rss} KiB");
}

async fn secrets_come_back_nowhere(world: &World, turn: &str) {
    // A secret of the server's entry that its tool prints comes back nowhere.
    let printed = world
        .call(turn, "secret", "calls__env", json!({"name": "CALL_SECRET"}))
        .await;
    assert_eq!(status(&printed), "complete", "{printed:#}");
    assert!(!printed.to_string().contains(SECRET), "{printed:#}");
    let stored = world
        .store
        .get_tool_call(world.chat, turn.parse().unwrap(), "secret")
        .await
        .unwrap()
        .expect("the call is stored");
    assert!(!format!("{:?}", stored.result).contains(SECRET));
    assert!(!world.logs.read("agent").contains(SECRET));
    assert!(!world.logs.read("server").contains(SECRET));
    assert!(!world.logs.read("agent").contains(&world.token));
}

async fn unknown_names_are_refused(world: &World, turn: &str) {
    // A name the turn does not carry is refused, and recorded.
    let refused = world.call(turn, "nope", "calls__missing", json!({})).await;
    assert_eq!(status(&refused), "refused");
    assert_eq!(refused["reason"], "not_in_turn");
    let again = world.get(turn, "nope", 0).await;
    assert_eq!(again["reason"], "not_in_turn");
}

async fn a_restarted_agent_refuses_the_old_turns_call(backend: TestBackend) {
    let Some(mut world) = World::start(backend, &[]).await else {
        return;
    };
    let old_run = world.discovered().await;
    let turn = world.turn().await;
    world.agent.terminate().await;
    world.agent = AgentProcess::start(
        &world.logs,
        "agent2",
        &world.server.url(),
        &world.workspace.path(),
        &world.token,
        &[],
    );
    poll("the new agent's complete snapshot")
        .within(WAIT)
        .until_true(|| async { world.discovered().await != old_run })
        .await;
    let started_before = world.events("count", "started");
    let stale = world.call(&turn, "old", "calls__count", json!({})).await;
    assert_eq!(status(&stale), "refused", "{stale:#}");
    assert_eq!(stale["reason"], "stale_run");
    // A new turn runs on the new process; the old call never ran there.
    let fresh_turn = world.turn().await;
    let fresh = world
        .call(&fresh_turn, "new", "calls__count", json!({}))
        .await;
    assert_eq!(status(&fresh), "complete", "{fresh:#}");
    assert_eq!(world.events("count", "started"), started_before + 1);
}

async fn a_killed_agent_ends_its_call_unknown(backend: TestBackend) {
    let Some(mut world) = World::start(backend, &[]).await else {
        return;
    };
    let turn = world.turn().await;
    let (code, running) = world
        .post(
            &turn,
            json!({"call_id": "doomed", "name": "calls__sleep", "arguments": {"ms": 60000},
                   "wait_ms": 0}),
        )
        .await;
    assert_eq!(code, 202, "{running:#}");
    world.wait_for_event("sleep", "started", 1).await;
    let killed = Instant::now();
    world.agent.kill().await;
    let ended = world.get(&turn, "doomed", 15_000).await;
    assert_eq!(status(&ended), "unknown", "{ended:#}");
    assert!(
        killed.elapsed() < Duration::from_secs(10),
        "unknown after {:?}",
        killed.elapsed()
    );
}

async fn a_pruned_turns_running_call_is_cancelled_first(backend: TestBackend) {
    let Some(world) = World::start(backend, &[]).await else {
        return;
    };
    let turn = world.turn().await;
    let (code, running) = world
        .post(
            &turn,
            json!({"call_id": "pruned", "name": "calls__sleep", "arguments": {"ms": 60000},
                   "wait_ms": 0}),
        )
        .await;
    assert_eq!(code, 202, "{running:#}");
    world.wait_for_event("sleep", "started", 1).await;
    // A chat keeps its last 32 turns: the 33rd prunes the first, and its call with it.
    for _ in 0..ctxsync_persistence::MAX_TURNS_PER_CHAT {
        world.turn().await;
    }
    world.wait_for_event("sleep", "cancelled", 1).await;
    assert!(
        world
            .store
            .get_tool_call(world.chat, turn.parse().unwrap(), "pruned")
            .await
            .unwrap()
            .is_none(),
        "the call went with its turn"
    );
}

/// A third-party server the tests run, where `cargo xtask test` installs it (or `env`
/// names it); missing, the test fails in CI and is skipped loudly elsewhere.
fn installed(env: &str, default: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os(env).map_or_else(
        || {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/tools")
                .join(default)
        },
        std::path::PathBuf::from,
    );
    if path.is_file() {
        return Some(path);
    }
    let message = format!(
        "{} is not installed: set {env} or run `cargo xtask test`",
        path.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{message}");
    eprintln!("\n!!!!! SKIPPED: {message} !!!!!\n");
    None
}

/// Calls through the chat API reach servers on the official Python SDK and the
/// TypeScript SDK (server-everything) as they reach the fixture.
async fn third_party_servers_answer_calls(backend: TestBackend) {
    let (Some(python), Some(everything)) = (
        installed("CTXSYNC_PYTHON_MCP", "py/bin/python"),
        installed(
            "CTXSYNC_EVERYTHING_SERVER",
            "node_modules/.bin/mcp-server-everything",
        ),
    ) else {
        return;
    };
    let python_server = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../ctxsync-agent-diagnostics/tests/servers/python_sdk.py");
    let mut more = serde_json::Map::new();
    more.insert(
        "py".into(),
        json!({"command": python, "args": [python_server, "stdio"]}),
    );
    more.insert(
        "everything".into(),
        json!({"command": everything, "args": ["stdio"], "env": {"EVERYTHING_KEY": SECRET}}),
    );
    // Cold interpreters on a loaded machine: a generous connect timeout.
    let Some(world) = World::start_with(backend, &[], more, "60000").await else {
        return;
    };
    let turn = world.turn().await;
    let sum = world
        .call(&turn, "py-add", "py__add", json!({"a": 2, "b": 3}))
        .await;
    assert_eq!(status(&sum), "complete", "{sum:#}");
    assert_eq!(
        sum["result"]["structuredContent"],
        json!({"result": 5}),
        "{sum:#}"
    );
    assert_eq!(sum["server"], "py");
    let echo = world
        .call(
            &turn,
            "ts-echo",
            "everything__echo",
            json!({"message": "hello"}),
        )
        .await;
    assert_eq!(status(&echo), "complete", "{echo:#}");
    assert!(
        echo["model_text"].as_str().unwrap_or("").contains("hello"),
        "{echo:#}"
    );
    let long = world
        .call(
            &turn,
            "ts-long",
            "everything__trigger-long-running-operation",
            json!({"duration": 0.3, "steps": 3}),
        )
        .await;
    assert_eq!(status(&long), "complete", "{long:#}");
    assert_eq!(long["progress"]["total"], 3.0, "{long:#}");
    let env = world
        .call(&turn, "ts-env", "everything__get-env", json!({}))
        .await;
    assert_eq!(status(&env), "complete", "{:.500}", env.to_string());
    assert!(env.to_string().contains("EVERYTHING_KEY"));
    assert!(!env.to_string().contains(SECRET), "the secret came back");
    let (code, timed_out) = world
        .post(
            &turn,
            json!({"call_id": "ts-slow", "name": "everything__trigger-long-running-operation",
                   "arguments": {"duration": 60, "steps": 2}, "timeout_ms": 300}),
        )
        .await;
    assert_eq!(code, 200, "{timed_out:#}");
    assert_eq!(status(&timed_out), "timed_out", "{timed_out:#}");
}

async fn an_agent_without_tool_calls_denies_them(backend: TestBackend) {
    let Some(world) = World::start(backend, &["--no-tool-calls"]).await else {
        return;
    };
    let turn = world.turn().await;
    let denied = world.call(&turn, "d", "calls__count", json!({})).await;
    assert_eq!(status(&denied), "refused", "{denied:#}");
    assert_eq!(denied["reason"], "denied");
    assert_eq!(world.events("count", "started"), 0);
}

async fn an_allow_list_runs_only_the_calls_it_matches(backend: TestBackend) {
    let agent_args = [
        "--allow-tool-calls",
        "calls/c?unt",
        "--allow-tool-calls",
        "*/*/*",
    ];
    let Some(world) = World::start(backend, &agent_args).await else {
        return;
    };
    let (turn, tools) = world.turn_and_tools().await;
    assert!(
        tools.iter().any(|t| t == "calls__env"),
        "a tool outside the policy is still listed: {tools:?}"
    );
    let allowed = world.call(&turn, "a", "calls__count", json!({})).await;
    assert_eq!(status(&allowed), "complete", "{allowed:#}");
    let denied = world.call(&turn, "d", "calls__env", json!({})).await;
    assert_eq!(status(&denied), "refused", "{denied:#}");
    assert_eq!(denied["reason"], "denied");
    assert!(
        denied["model_text"]
            .as_str()
            .is_some_and(|t| t.contains("does not allow this tool call")),
        "{denied:#}"
    );
    assert_eq!(world.events("count", "started"), 1);
    assert_eq!(world.events("env", "started"), 0);
    // The refusal changed neither the listing nor the turn's tools.
    let (_, mut again) = world.turn_and_tools().await;
    let mut tools = tools;
    tools.sort();
    again.sort();
    assert_eq!(again, tools);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_run_once_and_end_each_way_on_sqlite() {
    calls_run_once_and_end_each_way(TestBackend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_run_once_and_end_each_way_on_postgres() {
    calls_run_once_and_end_each_way(TestBackend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_refuses_the_old_turns_call_on_sqlite() {
    a_restarted_agent_refuses_the_old_turns_call(TestBackend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_agent_refuses_the_old_turns_call_on_postgres() {
    a_restarted_agent_refuses_the_old_turns_call(TestBackend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_agent_ends_its_call_unknown_on_sqlite() {
    a_killed_agent_ends_its_call_unknown(TestBackend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_agent_ends_its_call_unknown_on_postgres() {
    a_killed_agent_ends_its_call_unknown(TestBackend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_without_tool_calls_denies_them_on_sqlite() {
    an_agent_without_tool_calls_denies_them(TestBackend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_without_tool_calls_denies_them_on_postgres() {
    an_agent_without_tool_calls_denies_them(TestBackend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allow_list_runs_only_the_calls_it_matches_on_sqlite() {
    an_allow_list_runs_only_the_calls_it_matches(TestBackend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allow_list_runs_only_the_calls_it_matches_on_postgres() {
    an_allow_list_runs_only_the_calls_it_matches(TestBackend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pruned_turns_running_call_is_cancelled_first_on_sqlite() {
    a_pruned_turns_running_call_is_cancelled_first(TestBackend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pruned_turns_running_call_is_cancelled_first_on_postgres() {
    a_pruned_turns_running_call_is_cancelled_first(TestBackend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn third_party_servers_answer_calls_on_sqlite() {
    third_party_servers_answer_calls(TestBackend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn third_party_servers_answer_calls_on_postgres() {
    third_party_servers_answer_calls(TestBackend::Postgres).await;
}
