//! Turns with ids and rebinding (issue 16): a turn's id, outcome, tools and find_tools
//! activations live in the store, so a second server on the same database answers for
//! them; a chat rebound to another agent waits on that agent's current run on its next
//! default turn, then offers its tools.

use crate::support;

use std::time::Duration;

use ctxsync::server::{RunningServer, ServerConfig};
use ctxsync_chat_projection::ToolBudget;
use ctxsync_persistence::test_support::TestDatabase;
use ctxsync_persistence::{AgentId, DatabaseConfig};
use ctxsync_protocol::DiscoveryPhase;
use ctxsync_protocol::RunId;
use reqwest::Method;
use serde_json::{Value, json};
use support::*;

const API_TOKEN: &str = "turns-test-api-token-0123456789";
/// Small enough that a test catalog of a few dozen tools goes over it; the other tests'
/// one- and two-tool catalogs stay under it.
const TOOL_BUDGET: ToolBudget = ToolBudget {
    max_tools: 8,
    max_bytes: 4096,
};
/// Upper bound for what must happen soon; never slept when it does.
const DEADLINE: Duration = Duration::from_secs(10);

/// Servers sharing one database: two on PostgreSQL (replicas), one on SQLite.
struct Servers {
    // Declared first: the servers stop before their database is dropped.
    servers: Vec<RunningServer>,
    http: reqwest::Client,
    _database: Option<TestDatabase>,
    _dirs: Vec<tempfile::TempDir>,
}

impl Servers {
    async fn start(backend: TestBackend) -> Option<Self> {
        let first_dir = tempfile::tempdir().unwrap();
        let (database, db, count) = match backend {
            TestBackend::Sqlite => (DatabaseConfig::sqlite_in(first_dir.path()), None, 1),
            TestBackend::Postgres => {
                let db = tokio::task::spawn_blocking(TestDatabase::create)
                    .await
                    .unwrap()?;
                (db.config(), Some(db), 2)
            }
        };
        let mut dirs = vec![first_dir];
        let mut servers = Vec::new();
        for i in 0..count {
            if i > 0 {
                dirs.push(tempfile::tempdir().unwrap());
            }
            let server = ctxsync::server::start(ServerConfig {
                database: database.clone(),
                api_token: Some(API_TOKEN.into()),
                tool_budget: TOOL_BUDGET,
                ..ServerConfig::ephemeral(dirs[i].path())
            })
            .await
            .expect("server starts");
            servers.push(server);
        }
        Some(Self {
            servers,
            http: reqwest::Client::new(),
            _database: db,
            _dirs: dirs,
        })
    }

    /// The first server; [`Self::other`] is a second replica on PostgreSQL and the same
    /// server on SQLite.
    fn one(&self) -> &RunningServer {
        &self.servers[0]
    }

    fn other(&self) -> &RunningServer {
        self.servers.last().unwrap()
    }

    async fn call(
        &self,
        server: &RunningServer,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", server.http_url()))
            .bearer_auth(API_TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }
}

/// Reports a process start and pushes one snapshot from it through `server`'s store.
async fn push(
    server: &RunningServer,
    agent: AgentId,
    run: &str,
    version: u64,
    phase: DiscoveryPhase,
    resources: Vec<ctxsync_protocol::Resource>,
) {
    let store = &server.store;
    let startup = ctxsync_protocol::Startup {
        version: "test".into(),
        expanded_directory: "/ws".into(),
        agent_run_id: RunId::new(run),
        accepts_tool_calls: false,
    };
    store.update_startup(agent, startup).await.unwrap();
    let snapshot = ctxsync_protocol::Snapshot {
        version,
        aggregate_hash: "agg".into(),
        resources,
        initial: true,
        snapshot_error: None,
        agent_run_id: RunId::new(run),
        phase,
        ..Default::default()
    };
    assert!(
        store
            .push_context_state(agent, snapshot)
            .await
            .unwrap()
            .accepted()
    );
}

fn tool_names(turn: &Value) -> Vec<&str> {
    turn["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {turn}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect()
}

ctxsync_test_support::on_both_backends! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    open = Servers::start;
    turns_are_stored_and_read_from_any_replica,
    activations_belong_to_their_turn,
    unknown_turns_and_bad_requests_are_refused,
    a_rebound_chat_waits_for_its_new_agent_then_offers_its_tools,
    rebinding_refuses_unknown_agents_and_bad_bodies,
    a_turn_over_budget_defers_behind_find_tools,
}

/// An agent whose current run finished discovery with `tools` on server `name`; a chat
/// bound to it.
async fn complete_agent_and_chat(
    s: &Servers,
    name: &str,
    tools: &[(&str, &str)],
) -> (AgentId, String) {
    let agent = s.one().store.create_agent(name).await.unwrap().id;
    push(
        s.one(),
        agent,
        &format!("{name}-run"),
        1,
        DiscoveryPhase::Complete,
        vec![server(name, tools)],
    )
    .await;
    let (status, chat) = s
        .call(
            s.one(),
            Method::POST,
            "/api/chats",
            Some(json!({ "agent_id": agent.to_string() })),
        )
        .await;
    assert_eq!(status, 201, "{chat}");
    (agent, chat["id"].as_str().unwrap().to_owned())
}

async fn turns_are_stored_and_read_from_any_replica(s: Servers) {
    let (_, chat) = complete_agent_and_chat(&s, "docs", &[("search", "Search the docs")]).await;
    let (status, turn) = s
        .call(
            s.one(),
            Method::POST,
            &format!("/api/chats/{chat}/turns"),
            Some(json!({ "mode": "default" })),
        )
        .await;
    assert_eq!(status, 200, "{turn}");
    let turn_id = turn["turn_id"].as_str().expect("a turn id").to_owned();
    assert_eq!(tool_names(&turn), ["docs__search"]);
    assert_eq!(turn["mcp_discovery"]["phase"], "complete");
    assert_eq!(turn["mode"], "default");
    assert_eq!(turn["active_tools"], json!([]));

    // Another replica answers for the turn exactly as the POST did.
    let (status, read) = s
        .call(
            s.other(),
            Method::GET,
            &format!("/api/chats/{chat}/turns/{turn_id}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{read}");
    assert_eq!(read, turn);

    let (status, plan) = s
        .call(
            s.other(),
            Method::POST,
            &format!("/api/chats/{chat}/turns"),
            Some(json!({ "mode": "plan" })),
        )
        .await;
    assert_eq!(status, 200, "{plan}");
    assert_ne!(plan["turn_id"], turn["turn_id"]);
    assert_eq!(plan["mcp_discovery"], Value::Null);
    let (_, read) = s
        .call(
            s.one(),
            Method::GET,
            &format!(
                "/api/chats/{chat}/turns/{}",
                plan["turn_id"].as_str().unwrap()
            ),
            None,
        )
        .await;
    assert_eq!(read, plan);
}

async fn activations_belong_to_their_turn(s: Servers) {
    let (_, chat) = complete_agent_and_chat(
        &s,
        "docs",
        &[("search", "Search the docs"), ("read", "Read a page")],
    )
    .await;
    let turns = format!("/api/chats/{chat}/turns");
    let find = format!("/api/chats/{chat}/find-tools");
    let (_, first) = s.call(s.one(), Method::POST, &turns, Some(json!({}))).await;
    let first_id = first["turn_id"].as_str().unwrap().to_owned();

    // Activated through one replica, seen through the other.
    let (status, found) = s
        .call(
            s.one(),
            Method::POST,
            &find,
            Some(json!({ "turn_id": first_id, "names": ["docs__search"] })),
        )
        .await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["activated"], json!(["docs__search"]));
    assert_eq!(found["turn_id"], first["turn_id"]);
    let (status, again) = s
        .call(
            s.other(),
            Method::POST,
            &find,
            Some(json!({ "turn_id": first_id, "names": ["docs__search", "docs__read"] })),
        )
        .await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        again["activated"],
        json!(["docs__read"]),
        "what the first replica activated is active on the second"
    );
    let first_path = format!("{turns}/{first_id}");
    let (_, read) = s.call(s.other(), Method::GET, &first_path, None).await;
    assert_eq!(read["active_tools"], json!(["docs__read", "docs__search"]));

    // A new turn starts with nothing activated; find-tools without an id uses it.
    let (_, second) = s
        .call(s.other(), Method::POST, &turns, Some(json!({})))
        .await;
    assert_eq!(second["active_tools"], json!([]));
    let (status, fresh) = s
        .call(
            s.one(),
            Method::POST,
            &find,
            Some(json!({ "names": ["docs__search"] })),
        )
        .await;
    assert_eq!(status, 200, "{fresh}");
    assert_eq!(fresh["turn_id"], second["turn_id"], "the latest turn");
    assert_eq!(fresh["activated"], json!(["docs__search"]));
    let second_path = format!("{turns}/{}", second["turn_id"].as_str().unwrap());
    let (_, read) = s.call(s.one(), Method::GET, &second_path, None).await;
    assert_eq!(read["active_tools"], json!(["docs__search"]));
    // The first turn keeps its own.
    let (_, read) = s.call(s.one(), Method::GET, &first_path, None).await;
    assert_eq!(read["active_tools"], json!(["docs__read", "docs__search"]));
}

async fn unknown_turns_and_bad_requests_are_refused(s: Servers) {
    let (_, chat) = complete_agent_and_chat(&s, "docs", &[("search", "Search the docs")]).await;
    let (_, other_chat) = complete_agent_and_chat(&s, "more", &[("x", "X")]).await;
    let (_, theirs) = s
        .call(
            s.one(),
            Method::POST,
            &format!("/api/chats/{other_chat}/turns"),
            Some(json!({})),
        )
        .await;
    let theirs = theirs["turn_id"].as_str().unwrap().to_owned();
    let unknown = "00000000-0000-4000-8000-000000000000";

    for (path, status, needle) in [
        (format!("/api/chats/{chat}/turns/{unknown}"), 404, "turn"),
        (format!("/api/chats/{chat}/turns/{theirs}"), 404, "turn"),
        (format!("/api/chats/{unknown}/turns/{theirs}"), 404, "chat"),
        (
            format!("/api/chats/{chat}/turns/not-a-uuid"),
            400,
            "invalid turn id",
        ),
    ] {
        let (got, error) = s.call(s.other(), Method::GET, &path, None).await;
        assert_eq!(got, status, "{path}: {error}");
        assert!(
            error["error"].as_str().unwrap().contains(needle),
            "{path}: {error}"
        );
    }

    let find = format!("/api/chats/{chat}/find-tools");
    for (body, status, needle) in [
        (json!({ "names": ["docs__search"] }), 400, "has no turn yet"),
        (
            json!({ "turn_id": theirs, "names": ["docs__search"] }),
            404,
            "turn",
        ),
        (
            json!({ "turn_id": "nope", "names": ["docs__search"] }),
            400,
            "turn_id",
        ),
        (
            json!({ "turn": theirs, "names": ["docs__search"] }),
            400,
            "turn",
        ),
    ] {
        let (got, error) = s
            .call(s.one(), Method::POST, &find, Some(body.clone()))
            .await;
        assert_eq!(got, status, "{body}: {error}");
        assert!(
            error["error"].as_str().unwrap().contains(needle),
            "{body}: {error}"
        );
    }
    // Another chat's turn got nothing activated.
    let (_, read) = s
        .call(
            s.one(),
            Method::GET,
            &format!("/api/chats/{other_chat}/turns/{theirs}"),
            None,
        )
        .await;
    assert_eq!(read["active_tools"], json!([]));
}

async fn gate_attempts_waiting(s: &Servers, server: &RunningServer) -> u64 {
    let text = s
        .http
        .get(format!("{}/metrics", server.http_url()))
        .bearer_auth(API_TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("ctxsync_gate_attempts_waiting "))
        .map_or(0, |v| v.trim().parse::<f64>().unwrap_or(0.0) as u64)
}

async fn a_rebound_chat_waits_for_its_new_agent_then_offers_its_tools(s: Servers) {
    let (_, chat) = complete_agent_and_chat(&s, "alpha", &[("first", "The first tool")]).await;
    let turns = format!("/api/chats/{chat}/turns");
    let (_, turn) = s.call(s.one(), Method::POST, &turns, Some(json!({}))).await;
    assert_eq!(tool_names(&turn), ["alpha__first"]);

    // B's process has started and is still discovering.
    let beta = s.one().store.create_agent("beta").await.unwrap().id;
    push(
        s.one(),
        beta,
        "beta-run",
        1,
        DiscoveryPhase::Pending,
        vec![],
    )
    .await;
    let (status, rebound) = s
        .call(
            s.other(),
            Method::PUT,
            &format!("/api/chats/{chat}/agent"),
            Some(json!({ "agent_id": beta.to_string() })),
        )
        .await;
    assert_eq!(status, 200, "{rebound}");
    assert_eq!(rebound["agent_id"], beta.to_string());
    assert_eq!(rebound["mcp_discovery"]["phase"], "pending");

    // The next default turn waits on B's run, as a first turn does; B completing
    // discovery (through the first server) releases it with B's tools.
    let waiting = async {
        s.call(
            s.other(),
            Method::POST,
            &turns,
            Some(json!({ "mode": "default" })),
        )
        .await
    };
    let complete = async {
        ctxsync_test_support::poll("the turn to wait on B (waiting attempts are the last seen)")
            .within(DEADLINE)
            .every(Duration::from_millis(10))
            .until(|| async {
                match gate_attempts_waiting(&s, s.other()).await {
                    0 => Err(0),
                    _ => Ok(()),
                }
            })
            .await;
        push(
            s.one(),
            beta,
            "beta-run",
            2,
            DiscoveryPhase::Complete,
            vec![server("beta", &[("second", "The second tool")])],
        )
        .await;
    };
    let ((status, turn), ()) = tokio::join!(waiting, complete);
    assert_eq!(status, 200, "{turn}");
    assert_eq!(turn["mcp_discovery"]["phase"], "complete", "{turn}");
    assert_eq!(turn["mcp_discovery"]["wait_timed_out"], false, "{turn}");
    assert_eq!(tool_names(&turn), ["beta__second"]);
    let (_, read) = s
        .call(
            s.one(),
            Method::GET,
            &format!("{turns}/{}", turn["turn_id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(read, turn);

    // A chat that gains its workspace mid-conversation gets its tools on the next turn.
    let unbound = s.one().store.create_chat(None).await.unwrap().id;
    let unbound_turns = format!("/api/chats/{unbound}/turns");
    let (status, before) = s
        .call(s.one(), Method::POST, &unbound_turns, Some(json!({})))
        .await;
    assert_eq!(status, 200, "{before}");
    assert!(tool_names(&before).is_empty(), "{before}");
    let (status, _) = s
        .call(
            s.other(),
            Method::PUT,
            &format!("/api/chats/{unbound}/agent"),
            Some(json!({ "agent_id": beta.to_string() })),
        )
        .await;
    assert_eq!(status, 200);
    let (_, after) = s
        .call(s.one(), Method::POST, &unbound_turns, Some(json!({})))
        .await;
    assert_eq!(tool_names(&after), ["beta__second"], "{after}");
}

async fn rebinding_refuses_unknown_agents_and_bad_bodies(s: Servers) {
    let (agent, chat) = complete_agent_and_chat(&s, "alpha", &[("first", "The first tool")]).await;
    let path = format!("/api/chats/{chat}/agent");
    let unknown = "00000000-0000-4000-8000-000000000000";
    for (path, body, status, needle) in [
        (path.clone(), json!({ "agent_id": unknown }), 404, "agent"),
        (
            format!("/api/chats/{unknown}/agent"),
            json!({ "agent_id": agent.to_string() }),
            404,
            "chat",
        ),
        (path.clone(), json!({}), 400, "agent_id"),
        (path.clone(), json!({ "agent_id": "nope" }), 400, "agent_id"),
        (path.clone(), json!({ "agent_id": 7 }), 400, "agent_id"),
        (
            path.clone(),
            json!({ "agent_id": agent.to_string(), "extra": 1 }),
            400,
            "extra",
        ),
    ] {
        let (got, error) = s
            .call(s.one(), Method::PUT, &path, Some(body.clone()))
            .await;
        assert_eq!(got, status, "{path} {body}: {error}");
        assert!(
            error["error"].as_str().unwrap().contains(needle),
            "{path} {body}: {error}"
        );
    }
    // Nothing changed.
    let (_, read) = s
        .call(s.one(), Method::GET, &format!("/api/chats/{chat}"), None)
        .await;
    assert_eq!(read["agent_id"], agent.to_string());
}

/// A catalog over the turn budget: the turn carries the `alwaysLoad` server's tools and
/// find_tools, whose description lists the rest and fits the budget; what find_tools
/// activates joins that turn on any replica; mangled names resolve only when they name one
/// tool.
async fn a_turn_over_budget_defers_behind_find_tools(s: Servers) {
    let chat = big_catalog_chat(&s).await;
    let turn_id = check_first_turn_defers(&s, &chat).await;
    check_mangled_names_resolve_when_unambiguous(&s, &chat, &turn_id).await;
    check_activations_join_the_turn_on_both_replicas(&s, &chat, &turn_id).await;

    // A new turn starts with nothing activated again.
    let (_, next) = s
        .call(
            s.one(),
            Method::POST,
            &format!("/api/chats/{chat}/turns"),
            Some(json!({})),
        )
        .await;
    assert_eq!(
        tool_names(&next),
        ["pinned__status", "find_tools"],
        "{next}"
    );
}

/// An agent with 40 tracker tools, an `alwaysLoad` server and another server that also
/// has a `status` tool; returns a chat bound to it.
async fn big_catalog_chat(s: &Servers) -> String {
    let agent = s.one().store.create_agent("big").await.unwrap().id;
    let names: Vec<(String, String)> = (0..40)
        .map(|i| {
            (
                format!("tool_{i}"),
                format!("Does task number {i} for the tracker"),
            )
        })
        .collect();
    let tools: Vec<(&str, &str)> = names
        .iter()
        .map(|(n, d)| (n.as_str(), d.as_str()))
        .collect();
    let mut pinned = server("pinned", &[("status", "Reports the build status")]);
    if let ctxsync_protocol::ResourceBody::McpServer(body) = &mut pinned.body {
        body.always_load = true;
    }
    let other = server("other", &[("status", "Reports the deploy status")]);
    push(
        s.one(),
        agent,
        "big-run",
        1,
        DiscoveryPhase::Complete,
        vec![server("tracker", &tools), pinned, other],
    )
    .await;
    let (status, chat) = s
        .call(
            s.one(),
            Method::POST,
            "/api/chats",
            Some(json!({ "agent_id": agent.to_string() })),
        )
        .await;
    assert_eq!(status, 201, "{chat}");
    chat["id"].as_str().unwrap().to_owned()
}

/// The first turn loads only the pinned server and find_tools, within the byte budget,
/// and find_tools lists the rest; returns the turn's id.
async fn check_first_turn_defers(s: &Servers, chat: &str) -> String {
    let (status, turn) = s
        .call(
            s.one(),
            Method::POST,
            &format!("/api/chats/{chat}/turns"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 200, "{turn}");
    assert_eq!(
        tool_names(&turn),
        ["pinned__status", "find_tools"],
        "{turn}"
    );
    let deferral = &turn["tool_deferral"];
    assert_eq!(deferral["eligible"], 42, "{turn}");
    assert_eq!(deferral["loaded"], 1, "{turn}");
    assert_eq!(deferral["deferred"], 41, "{turn}");
    let bytes = serde_json::to_vec(&turn["tools"]).unwrap().len();
    assert!(bytes <= TOOL_BUDGET.max_bytes, "{bytes} bytes: {turn}");
    let find = &turn["tools"][1];
    let listing = find["description"].as_str().unwrap();
    assert!(
        listing.contains("tracker__tool_39") || listing.contains("tracker (40)"),
        "the catalog is listed: {listing}"
    );
    assert!(
        !listing.contains("pinned__status"),
        "loaded tools are not listed: {listing}"
    );
    assert!(
        find["input_schema"]["properties"]["queries"].is_object(),
        "{find}"
    );
    turn["turn_id"].as_str().unwrap().to_owned()
}

/// Mangled names: unambiguous ones resolve; `status` is on two servers and is not
/// guessed.
async fn check_mangled_names_resolve_when_unambiguous(s: &Servers, chat: &str, turn_id: &str) {
    let (status, found) = s
        .call(
            s.other(),
            Method::POST,
            &format!("/api/chats/{chat}/find-tools"),
            Some(json!({
                "turn_id": turn_id,
                "names": ["tracker.tool_7", "functions.tracker__tool_8", "tracker/tool_9", "tool_10", "status"]
            })),
        )
        .await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(
        found["activated"],
        json!([
            "tracker__tool_7",
            "tracker__tool_8",
            "tracker__tool_9",
            "tracker__tool_10"
        ]),
        "{found}"
    );
    assert_eq!(found["unresolved"][0]["name"], "status", "{found}");
    assert_eq!(
        found["unresolved"][0]["candidates"],
        json!(["other__status", "pinned__status"]),
        "{found}"
    );
    let defined: Vec<&str> = found["definitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(defined.len(), 4, "{found}");
}

/// A keyword search activates too, and the turn read from either replica carries the
/// activated definitions after the ones it started with.
async fn check_activations_join_the_turn_on_both_replicas(s: &Servers, chat: &str, turn_id: &str) {
    let (status, found) = s
        .call(
            s.other(),
            Method::POST,
            &format!("/api/chats/{chat}/find-tools"),
            Some(json!({ "turn_id": turn_id, "queries": ["deploy status"] })),
        )
        .await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["matches"][0]["name"], "other__status", "{found}");
    for server in [s.one(), s.other()] {
        let (status, read) = s
            .call(
                server,
                Method::GET,
                &format!("/api/chats/{chat}/turns/{turn_id}"),
                None,
            )
            .await;
        assert_eq!(status, 200, "{read}");
        let names = tool_names(&read);
        assert_eq!(&names[..2], ["pinned__status", "find_tools"], "{read}");
        for activated in ["tracker__tool_7", "tracker__tool_10", "other__status"] {
            assert!(names.contains(&activated), "{activated} in {read}");
        }
        assert_eq!(read["tool_deferral"]["deferred"], 41, "{read}");
    }
}
