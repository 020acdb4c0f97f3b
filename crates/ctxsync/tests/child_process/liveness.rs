//! A stopped agent looks stopped (issue 49), end to end on both backends: a real server,
//! a real agent with the fixture MCP server. Killed, the agent reads `offline` (with
//! `offline_since`) within 10 s in the chat API, the page's event stream, `ctxsync
//! context`, `/metrics` and a turn's model note, its tools still listed but marked;
//! restarted, it reads `online` again.

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};

use crate::processes::{AgentProcess, TestBackend, WAIT, ctxsync, poll};
use crate::tool_calls::{API_TOKEN, World};

/// The issue's bound: every surface says offline this soon after the kill.
const SAY_OFFLINE_WITHIN: Duration = Duration::from_secs(10);

// The world is the tool-call tests' (a server, an agent with the fixture's call tools, a
// chat); these read it the ways a person and a chat product see whether its agent is
// connected.

/// `path` on the server's HTTP listener.
fn url(world: &World, path: &str) -> String {
    format!("{}{path}", world.server.http_url())
}

async fn get(world: &World, path: &str) -> reqwest::Response {
    let response = world
        .http
        .get(url(world, path))
        .bearer_auth(API_TOKEN)
        .send()
        .await
        .expect("a GET to the server");
    assert!(response.status().is_success(), "GET {path}: {response:?}");
    response
}

/// `GET /api/chats/{id}`'s `context.header`.
async fn header(world: &World) -> Value {
    let chat: Value = get(world, &format!("/api/chats/{}", world.chat))
        .await
        .json()
        .await
        .unwrap();
    chat["context"]["header"].clone()
}

async fn wait_for_connection(world: &World, word: &str, within: Duration) -> Value {
    poll(format!("the chat API to say the agent is {word}"))
        .within(within)
        .explain(|| world.logs.read("server"))
        .until_some(|| async {
            let header = header(world).await;
            (header["connection"] == word).then_some(header)
        })
        .await
}

/// Checks the world's agent as `GET /api/agents` lists it: its `connection` and
/// `offline_since`.
async fn assert_listed(world: &World, connection: &str, offline_since: &Value) {
    let list: Value = get(world, "/api/agents").await.json().await.unwrap();
    let id = world.agent_id.to_string();
    let listed = list["agents"]
        .as_array()
        .and_then(|agents| agents.iter().find(|a| a["id"] == id.as_str()))
        .unwrap_or_else(|| panic!("the agent in the list: {list:#}"));
    assert_eq!(listed["connection"], connection, "{listed:#}");
    assert_eq!(&listed["offline_since"], offline_since, "{listed:#}");
}

async fn connected_gauge(world: &World) -> String {
    let text = get(world, "/metrics").await.text().await.unwrap();
    text.lines()
        .find(|l| l.starts_with("ctxsync_agents_connected "))
        .expect("the connected-agents gauge")
        .to_owned()
}

/// `POST /api/chats/{id}/turns`: the note and the listed tool names; the outcome's
/// `connection` agrees with the note.
async fn turn(world: &World) -> (Option<String>, Vec<String>) {
    let response = world
        .http
        .post(url(world, &format!("/api/chats/{}/turns", world.chat)))
        .bearer_auth(API_TOKEN)
        .json(&json!({}))
        .send()
        .await
        .expect("POST turns");
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    let names = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect();
    let note = body["note"].as_str().map(str::to_owned);
    let offline = body["mcp_discovery"]["connection"] == "offline";
    assert_eq!(
        offline,
        note.as_deref()
            .is_some_and(|n| n.contains("agent offline since")),
        "{body:#}"
    );
    assert_eq!(
        body["mcp_discovery"]["offline_since"].is_string(),
        offline,
        "{body:#}"
    );
    (note, names)
}

/// What `ctxsync context --chat ID` prints, its words joined by single spaces (long
/// lines wrap).
async fn context_command(world: &World) -> String {
    let output = ctxsync()
        .args(["context", "--chat", &world.chat.to_string()])
        .args(["--server", &world.server.http_url()])
        .env("CTXSYNC_API_TOKEN", API_TOKEN)
        .output()
        .await
        .expect("running ctxsync context");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// The page's event stream: each `panel` event's JSON panel, in order, with the HTML
/// fragment the page swaps in under `"html"`.
async fn panel_events(world: &World) -> impl futures::Stream<Item = Value> + Unpin + use<> {
    let response = get(world, &format!("/api/chats/{}/context/events", world.chat)).await;
    let bytes = response.bytes_stream();
    Box::pin(futures::stream::unfold(
        (bytes, String::new()),
        |(mut bytes, mut buffer)| async move {
            loop {
                if let Some(end) = buffer.find("\n\n") {
                    let event: String = buffer.drain(..end + 2).collect();
                    let data: String = event
                        .lines()
                        .filter_map(|l| l.strip_prefix("data:"))
                        .map(str::trim_start)
                        .collect();
                    if event.lines().any(|l| l == "event: panel")
                        && let Ok(value) = serde_json::from_str::<Value>(&data)
                    {
                        let mut panel = value["panel"].clone();
                        panel["html"] = value["html"].clone();
                        return Some((panel, (bytes, buffer)));
                    }
                    continue;
                }
                let chunk = bytes.next().await?.ok()?;
                buffer.push_str(&String::from_utf8_lossy(&chunk));
            }
        },
    ))
}

async fn a_killed_agent_reads_offline_everywhere_until_it_returns(backend: TestBackend) {
    let Some(mut world) = World::start(backend, &[]).await else {
        return;
    };
    let old_run = world.discovered().await;
    let online = wait_for_connection(&world, "online", WAIT).await;
    assert_eq!(online["offline_since"], Value::Null, "{online:#}");
    assert_eq!(connected_gauge(&world).await, "ctxsync_agents_connected 1");
    assert_listed(&world, "online", &Value::Null).await;
    let (note, _) = turn(&world).await;
    assert!(
        !note.as_deref().unwrap_or("").contains("offline"),
        "an online agent's turn says nothing of it: {note:?}"
    );

    let mut events = panel_events(&world).await;
    let first = tokio::time::timeout(WAIT, events.next())
        .await
        .expect("the stream's first panel")
        .expect("a panel");
    assert_eq!(first["header"]["connection"], "online", "{first:#}");

    let killed = Instant::now();
    world.agent.kill().await;

    // The page hears it on its event stream, without a reload.
    let offline_panel = tokio::time::timeout(SAY_OFFLINE_WITHIN, async {
        while let Some(panel) = events.next().await {
            if panel["header"]["connection"] == "offline" {
                return panel;
            }
        }
        panic!("the event stream ended");
    })
    .await
    .unwrap_or_else(|_| panic!("no offline panel within {SAY_OFFLINE_WITHIN:?}"));
    let page_after = killed.elapsed();
    assert_eq!(offline_panel["tone"], "warning", "{offline_panel:#}");
    // Liveness sits beside the phase, never instead of it.
    assert_eq!(offline_panel["mcp_discovery"]["phase"], "complete");
    let html = offline_panel["html"].as_str().expect("the fragment");
    assert!(
        html.contains(r#"<span class="badge badge-offline">offline</span> since"#),
        "{html}"
    );
    assert!(html.contains("not callable: agent offline"), "{html}");
    assert!(html.contains("calls"), "the tools stay listed: {html}");

    let header = wait_for_connection(
        &world,
        "offline",
        SAY_OFFLINE_WITHIN.saturating_sub(killed.elapsed()),
    )
    .await;
    let api_after = killed.elapsed();
    let since = header["offline_since"].as_str().expect("offline_since");
    let since = chrono::DateTime::parse_from_rfc3339(since).expect("RFC 3339");
    let age = chrono::Utc::now().signed_duration_since(since);
    assert!(
        age >= chrono::Duration::seconds(-2) && age <= chrono::Duration::seconds(30),
        "offline since {since}, {age} ago"
    );
    assert!(
        header["text"]
            .as_str()
            .unwrap()
            .contains("agent offline since"),
        "{header:#}"
    );

    let text = context_command(&world).await;
    assert!(text.contains("agent offline since"), "{text}");
    assert!(
        text.contains("cannot be called until it reconnects"),
        "{text}"
    );
    assert!(text.contains("[warning]"), "{text}");

    assert_eq!(connected_gauge(&world).await, "ctxsync_agents_connected 0");
    // The list of agents says it too, with the same time as the chat's header.
    assert_listed(&world, "offline", &header["offline_since"]).await;

    // A turn now says the agent is gone; the tools stay listed, not dropped.
    let (note, tools) = turn(&world).await;
    let note = note.expect("a note while the agent is offline");
    assert!(note.contains("agent offline since"), "{note}");
    assert!(tools.iter().any(|t| t == "calls__count"), "{tools:?}");

    // Restarted: online again, on every surface.
    world.agent = AgentProcess::start(
        &world.logs,
        "agent2",
        &world.server.url(),
        &world.workspace.path(),
        &world.token,
        &[],
    );
    poll("the restarted agent's complete snapshot")
        .within(WAIT)
        .until_true(|| async { world.discovered().await != old_run })
        .await;
    let header = wait_for_connection(&world, "online", WAIT).await;
    assert_eq!(header["offline_since"], Value::Null, "{header:#}");
    let back = tokio::time::timeout(WAIT, async {
        while let Some(panel) = events.next().await {
            // The new process may connect before or after it publishes.
            if panel["header"]["connection"] == "online"
                && panel["mcp_discovery"] == json!({"phase": "complete", "stale": false})
            {
                return panel;
            }
        }
        panic!("the event stream ended");
    })
    .await
    .expect("the page hears the agent is back");
    assert_eq!(back["tone"], "ok", "{back:#}");
    let (note, _) = turn(&world).await;
    assert!(
        !note.as_deref().unwrap_or("").contains("offline"),
        "{note:?}"
    );
    assert!(!context_command(&world).await.contains("offline"));
    assert_eq!(connected_gauge(&world).await, "ctxsync_agents_connected 1");
    assert_listed(&world, "online", &Value::Null).await;
    eprintln!(
        "{backend:?}: offline on the page after {page_after:?}, in the chat API after {api_after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_agent_reads_offline_everywhere_until_it_returns_on_sqlite() {
    a_killed_agent_reads_offline_everywhere_until_it_returns(TestBackend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_agent_reads_offline_everywhere_until_it_returns_on_postgres() {
    a_killed_agent_reads_offline_everywhere_until_it_returns(TestBackend::Postgres).await;
}
