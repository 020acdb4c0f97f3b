//! The tool-call routes (issue 36) against a real server on both backends: request
//! bounds, 404s, the API token alone may call, refusals recorded once and answered the
//! same on a repeat, 409 on changed arguments, ctxsync's own find_tools through the call
//! route, the call metrics, and a call answered by an agent's real `ToolCalls` stream.

use crate::support;

use std::time::Duration;

use ctxsync_agent_api::test_support::with_bearer;
use ctxsync_mcp_model::CallEnd;
use ctxsync_persistence::AgentId;
use ctxsync_protocol::tool_call::{AgentCall, ServerCall};
use ctxsync_protocol::v1::agent_client::AgentClient;
use ctxsync_protocol::{DiscoveryPhase, RunId, Startup, v1};
use reqwest::Method;
use serde_json::{Value, json};
use support::*;
use tokio_stream::wrappers::ReceiverStream;

/// Upper bound for what must happen soon; never slept when it does.
const DEADLINE: Duration = Duration::from_secs(10);

ctxsync_test_support::on_both_backends! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    open = start;
    requests_are_bounded,
    unknown_chats_turns_and_calls_are_404,
    a_page_session_cannot_call_read_or_cancel,
    a_name_the_turn_lacks_is_refused_once_and_a_repeat_answers_the_same,
    an_agent_that_never_declared_calls_is_unsupported,
    a_turn_of_a_run_no_longer_current_is_refused_stale_run,
    the_call_command_calls_in_a_new_turn_and_fails_unless_complete,
    find_tools_through_the_call_route_activates_with_structured_content,
    a_call_reaches_the_agents_stream_and_its_end_comes_back,
    the_event_stream_shows_calls_but_never_their_arguments_or_results,
}

async fn start(backend: TestBackend) -> Option<Harness> {
    Harness::start_configured(backend, |config| {
        config.tool_call_max = Duration::from_secs(120);
    })
    .await
}

/// An agent whose run `run` finished discovery with server `docs` (tools `search` and
/// `fetch`), a chat bound to it and a stored turn: (agent, chat, turn).
async fn chat_with_turn(h: &Harness, run: &str) -> (AgentId, String, String) {
    let agent = h.new_agent().await;
    h.push(
        agent,
        run,
        1,
        DiscoveryPhase::Complete,
        vec![server(
            "docs",
            &[("search", "Search the docs"), ("fetch", "Fetch a page")],
        )],
    )
    .await;
    let chat = h.new_chat(agent).await;
    let turn = new_turn(h, &chat).await;
    (agent, chat, turn)
}

async fn new_turn(h: &Harness, chat: &str) -> String {
    let (status, turn) = h
        .call(
            Method::POST,
            &format!("/api/chats/{chat}/turns"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 200, "{turn}");
    turn["turn_id"].as_str().expect("a stored turn").to_owned()
}

fn calls_path(chat: &str, turn: &str) -> String {
    format!("/api/chats/{chat}/turns/{turn}/tool-calls")
}

/// The name the turn lists for `tool` of server `docs`.
async fn listed_name(h: &Harness, chat: &str, turn: &str, tool: &str) -> String {
    let (status, body) = h
        .call(
            Method::GET,
            &format!("/api/chats/{chat}/turns/{turn}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .find(|n| n.ends_with(tool))
        .unwrap_or_else(|| panic!("no {tool} in {body}"))
        .to_owned()
}

async fn post(h: &Harness, path: &str, body: Value) -> (u16, Value) {
    let (status, answer) = h.call(Method::POST, path, Some(body)).await;
    // A refusal's text, or a failed call's message: both are read by people and models.
    let error = &answer["error"];
    for text in [error.as_str(), error["message"].as_str()]
        .into_iter()
        .flatten()
    {
        ctxsync_test_support::assert_in_words(text);
    }
    (status, answer)
}

async fn requests_are_bounded(h: Harness) {
    let (_, chat, turn) = chat_with_turn(&h, "run-1").await;
    let path = calls_path(&chat, &turn);
    for (body, field) in [
        (json!({ "call_id": "", "name": "x" }), "call_id"),
        (json!({ "call_id": "a b", "name": "x" }), "call_id"),
        (
            json!({ "call_id": "x".repeat(129), "name": "x" }),
            "call_id",
        ),
        (json!({ "call_id": "c1", "name": "" }), "name"),
        (
            json!({ "call_id": "c1", "name": "x", "arguments": [1] }),
            "arguments",
        ),
        (
            json!({ "call_id": "c1", "name": "x", "arguments": "text" }),
            "arguments",
        ),
        (
            json!({ "call_id": "c1", "name": "x", "timeout_ms": 120_001 }),
            "timeout_ms",
        ),
        (
            json!({ "call_id": "c1", "name": "x", "timeout_ms": 0 }),
            "timeout_ms",
        ),
        (
            json!({ "call_id": "c1", "name": "x", "wait_ms": 55_001 }),
            "wait_ms",
        ),
        (json!({ "call_id": "c1", "name": "x", "extra": 1 }), "extra"),
        (json!({ "name": "x" }), "call_id"),
    ] {
        let (status, answer) = post(&h, &path, body.clone()).await;
        assert_eq!(status, 400, "{body} → {answer}");
        let message = answer["error"].as_str().unwrap();
        assert!(message.contains(field), "{body}: {message}");
    }
    // Nested deeper than 64 levels.
    let mut deep = json!(1);
    for _ in 0..70 {
        deep = json!({ "a": deep });
    }
    let (status, answer) = post(
        &h,
        &path,
        json!({ "call_id": "deep", "name": "x", "arguments": deep }),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("arguments"));

    // 1 MiB of arguments passes the route's limit (the global one is 64 KiB)...
    let fits = "y".repeat(1024 * 1024 - 64);
    let (status, answer) = post(
        &h,
        &path,
        json!({ "call_id": "big", "name": "not_here", "arguments": { "x": fits } }),
    )
    .await;
    assert_eq!(status, 200, "{}", answer["error"]);
    assert_eq!(answer["status"], "refused");
    // ...more is 413, in the body or in the canonical arguments.
    let over = "y".repeat(1024 * 1024 + 1);
    let (status, answer) = post(
        &h,
        &path,
        json!({ "call_id": "bigger", "name": "x", "arguments": { "x": over } }),
    )
    .await;
    assert_eq!(status, 413, "{}", answer["error"]);
    let body_over = "y".repeat(1024 * 1024 + 128 * 1024);
    let (status, _) = post(
        &h,
        &path,
        json!({ "call_id": "huge", "name": "x", "arguments": { "x": body_over } }),
    )
    .await;
    assert_eq!(status, 413);
    // The other routes keep their 64 KiB.
    let (status, _) = post(
        &h,
        &format!("/api/chats/{chat}/turns"),
        json!({ "mode": "x".repeat(70 * 1024) }),
    )
    .await;
    assert_eq!(status, 413);
    // GET's wait is bounded too.
    let (status, answer) = h
        .call(Method::GET, &format!("{path}/big?wait_ms=55001"), None)
        .await;
    assert_eq!(status, 400, "{answer}");
}

async fn unknown_chats_turns_and_calls_are_404(h: Harness) {
    let (_, chat, turn) = chat_with_turn(&h, "run-1").await;
    let (_, other_chat, other_turn) = chat_with_turn(&h, "run-2").await;
    let body = json!({ "call_id": "c1", "name": "x" });
    let unknown = "00000000-0000-4000-8000-000000000000";
    for (path, what) in [
        (calls_path(unknown, &turn), "chat"),
        (calls_path(&chat, unknown), "turn"),
        (calls_path(&chat, &other_turn), "turn"),
    ] {
        let (status, answer) = post(&h, &path, body.clone()).await;
        assert_eq!(status, 404, "{path}: {answer}");
        assert!(answer["error"].as_str().unwrap().contains(what), "{answer}");
    }
    let (status, _) = post(&h, &calls_path(&chat, "not-a-uuid"), body.clone()).await;
    assert_eq!(status, 400);
    // A call of another chat's turn is not this chat's.
    let (status, _) = post(&h, &calls_path(&other_chat, &other_turn), body).await;
    assert_eq!(status, 200);
    for method in [Method::GET, Method::DELETE] {
        let (status, _) = h
            .call(
                method.clone(),
                &format!("{}/c1", calls_path(&chat, &turn)),
                None,
            )
            .await;
        assert_eq!(status, 404, "{method} an unknown call");
        let (status, _) = h
            .call(
                method.clone(),
                &format!("{}/c1", calls_path(&chat, &other_turn)),
                None,
            )
            .await;
        assert_eq!(status, 404, "{method} another chat's call");
        let (status, _) = h
            .call(
                method.clone(),
                &format!("{}/c1", calls_path(&other_chat, &other_turn)),
                None,
            )
            .await;
        assert_eq!(status, 200, "{method} the call itself");
    }
}

async fn a_page_session_cannot_call_read_or_cancel(h: Harness) {
    let (_, chat, turn) = chat_with_turn(&h, "run-1").await;
    let path = calls_path(&chat, &turn);
    let (status, _) = post(&h, &path, json!({ "call_id": "c1", "name": "x" })).await;
    assert_eq!(status, 200);
    // A session bound to this very chat.
    let (browser, cookie) = page_session(&h, &chat).await;
    // The session opens its own chat's refresh...
    let refresh = browser
        .put(h.url(&format!("/api/chats/{chat}/context")))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(refresh.status(), 200);
    // ...and none of the call routes.
    for (method, url, body) in [
        (
            Method::POST,
            path.clone(),
            Some(json!({ "call_id": "c2", "name": "x" })),
        ),
        (Method::GET, format!("{path}/c1"), None),
        (Method::DELETE, format!("{path}/c1"), None),
    ] {
        let mut request = browser
            .request(method.clone(), h.url(&url))
            .header("cookie", &cookie);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let status = request.send().await.unwrap().status().as_u16();
        assert!(matches!(status, 401 | 403), "{method} {url}: {status}");
    }
    let (status, _) = h.call(Method::GET, &format!("{path}/c2"), None).await;
    assert_eq!(status, 404, "the session's POST stored nothing");
}

async fn a_name_the_turn_lacks_is_refused_once_and_a_repeat_answers_the_same(h: Harness) {
    let (_, chat, turn) = chat_with_turn(&h, "run-1").await;
    let path = calls_path(&chat, &turn);
    let body = json!({ "call_id": "toolu_01", "name": "nope", "arguments": { "b": 1, "a": 2 } });
    let (status, first) = post(&h, &path, body).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["status"], "refused");
    assert_eq!(first["reason"], "not_in_turn");
    assert_eq!(first["call_id"], "toolu_01");
    assert_eq!(first["turn_id"], turn);
    assert_eq!(first["name"], "nope");
    assert_eq!(first["result"], Value::Null);
    assert_eq!(first["error"], Value::Null);
    assert!(first["ended_at"].is_string(), "{first}");
    assert!(
        first["model_text"]
            .as_str()
            .unwrap()
            .contains("not_in_turn"),
        "{first}"
    );
    assert!(first.get("arguments").is_none(), "never the arguments");
    // The same arguments in another key order and spacing are the same call.
    let (status, again) = post(
        &h,
        &path,
        json!({ "call_id": "toolu_01", "name": "nope", "arguments": { "a": 2, "b": 1 } }),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(again, first);
    let (status, read) = h.call(Method::GET, &format!("{path}/toolu_01"), None).await;
    assert_eq!(status, 200);
    assert_eq!(read, first);
    let (status, cancelled) = h
        .call(Method::DELETE, &format!("{path}/toolu_01"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(cancelled, first, "an ended call is answered unchanged");
    // Other arguments or another name under the same id: 409 naming it.
    for body in [
        json!({ "call_id": "toolu_01", "name": "nope", "arguments": { "a": 3 } }),
        json!({ "call_id": "toolu_01", "name": "other", "arguments": { "a": 2, "b": 1 } }),
    ] {
        let (status, answer) = post(&h, &path, body).await;
        assert_eq!(status, 409, "{answer}");
        assert!(
            answer["error"].as_str().unwrap().contains("toolu_01"),
            "{answer}"
        );
    }
    // The metrics saw the refusal.
    let metrics = h
        .http
        .get(h.url("/metrics"))
        .bearer_auth(&h.server.api_token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let refused = metrics
        .lines()
        .find_map(|l| l.strip_prefix("ctxsync_tool_calls_total{status=\"refused\"} "))
        .unwrap_or_else(|| panic!("no refused count in\n{metrics}"));
    assert_eq!(refused, "1", "counted once, not per repeat");
    for family in [
        "ctxsync_tool_call_duration_seconds_count ",
        "ctxsync_tool_calls_in_flight 0",
        "ctxsync_tool_calls_total{status=\"timed_out\"} 0",
    ] {
        assert!(metrics.contains(family), "{family} in\n{metrics}");
    }
}

async fn an_agent_that_never_declared_calls_is_unsupported(h: Harness) {
    let (_, chat, turn) = chat_with_turn(&h, "run-1").await;
    let name = listed_name(&h, &chat, &turn, "search").await;
    let (status, call) = post(
        &h,
        &calls_path(&chat, &turn),
        json!({ "call_id": "c1", "name": name, "arguments": { "query": "x" } }),
    )
    .await;
    assert_eq!(status, 200, "{call}");
    assert_eq!(call["status"], "refused");
    assert_eq!(call["reason"], "agent_unsupported");
    assert_eq!(call["server"], "docs");
    assert_eq!(call["tool"], "search");
    assert_eq!(call["agent_run_id"], "run-1", "the turn recorded its run");
}

/// The turn recorded the run its tools came from: after the agent restarts, its call is
/// refused, never sent to the new process.
async fn a_turn_of_a_run_no_longer_current_is_refused_stale_run(h: Harness) {
    let (agent, chat, turn) = chat_with_turn(&h, "run-1").await;
    let name = listed_name(&h, &chat, &turn, "search").await;
    h.push(
        agent,
        "run-2",
        1,
        DiscoveryPhase::Complete,
        vec![server("docs", &[("search", "Search the docs")])],
    )
    .await;
    let (status, call) = post(
        &h,
        &calls_path(&chat, &turn),
        json!({ "call_id": "c1", "name": name }),
    )
    .await;
    assert_eq!(status, 200, "{call}");
    assert_eq!(call["status"], "refused");
    assert_eq!(call["reason"], "stale_run");
    assert_eq!(call["agent_run_id"], "run-1");
    // A new turn is built from the new run.
    let turn = new_turn(&h, &chat).await;
    let (_, call) = post(
        &h,
        &calls_path(&chat, &turn),
        json!({ "call_id": "c1", "name": name }),
    )
    .await;
    assert_eq!(call["agent_run_id"], "run-2", "{call}");
    assert_eq!(call["reason"], "agent_unsupported");
}

/// `ctxsync call`: without `--turn` it starts a turn and calls in it; Ok only for a
/// complete call without a tool error.
async fn the_call_command_calls_in_a_new_turn_and_fails_unless_complete(h: Harness) {
    let (_, chat, first_turn) = chat_with_turn(&h, "run-1").await;
    let args = |name: &str, arguments: &str| ctxsync::http::tool_call::call_command::CallArgs {
        chat: chat.clone(),
        turn: None,
        name: name.to_owned(),
        arguments: arguments.to_owned(),
        timeout_ms: Some(5_000),
        api: ctxsync::api_client::ApiClientArgs {
            server: h.server.http_url(),
            ca_certs: Vec::new(),
            api_token: Some(h.server.api_token.parse().unwrap()),
            data_dir: None,
        },
        json: true,
    };
    ctxsync::http::tool_call::call_command::run(args("find_tools", r#"{"queries":["search"]}"#))
        .await
        .expect("find_tools completes");
    let error = ctxsync::http::tool_call::call_command::run(args("nope", "{}"))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("refused"), "{error}");
    let error = ctxsync::http::tool_call::call_command::run(args("find_tools", "[1]"))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("--args"), "{error}");
    // The calls were made in a new turn, not the one the chat had.
    let latest = h
        .server
        .store
        .turn_activations(chat.parse().unwrap(), None)
        .await
        .unwrap()
        .expect("a latest turn");
    assert_ne!(latest.turn_id.to_string(), first_turn);
    let (status, _) = h
        .call(
            Method::GET,
            &format!("{}/nope", calls_path(&chat, &first_turn)),
            None,
        )
        .await;
    assert_eq!(status, 404, "nothing was called in the chat's earlier turn");
}

async fn find_tools_through_the_call_route_activates_with_structured_content(h: Harness) {
    let (_, chat, turn) = chat_with_turn(&h, "run-1").await;
    let path = calls_path(&chat, &turn);
    let (status, call) = post(
        &h,
        &path,
        json!({ "call_id": "f1", "name": "find_tools", "arguments": { "queries": ["fetch page"] } }),
    )
    .await;
    assert_eq!(status, 200, "{call}");
    assert_eq!(call["status"], "complete", "{call}");
    assert_eq!(call["server"], "ctxsync");
    let result = &call["result"];
    assert_eq!(result["isError"], false);
    let structured = &result["structuredContent"];
    assert_eq!(structured["turn_id"], turn);
    let matches: Vec<&str> = structured["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert!(matches.iter().any(|n| n.ends_with("fetch")), "{structured}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("fetch"), "{text}");
    assert_eq!(call["model_text"], text);
    // A search find_tools refuses is the tool's error, not the request's.
    let (status, bad) = post(
        &h,
        &path,
        json!({ "call_id": "f2", "name": "find_tools", "arguments": {} }),
    )
    .await;
    assert_eq!(status, 200, "{bad}");
    assert_eq!(bad["status"], "complete");
    assert_eq!(bad["result"]["isError"], true);
    assert!(
        bad["model_text"]
            .as_str()
            .unwrap()
            .starts_with("The tool reported an error"),
        "{bad}"
    );
    // Activation by exact name: the turn carries it from now on (it listed every tool
    // already, so nothing is new; the answer says so).
    let name = listed_name(&h, &chat, &turn, "search").await;
    let (status, by_name) = post(
        &h,
        &path,
        json!({ "call_id": "f3", "name": "find_tools", "arguments": { "names": [name] } }),
    )
    .await;
    assert_eq!(status, 200, "{by_name}");
    assert_eq!(
        by_name["result"]["structuredContent"]["matches"][0]["name"],
        name.as_str()
    );
}

/// A fake agent on a real `ToolCalls` stream: the server sends it the call, it accepts
/// and answers; the POST that waited answers 200 with the result, and a call still
/// running after `wait_ms` answers 202, then GET with a wait reads its end, and DELETE
/// cancels one.
async fn a_call_reaches_the_agents_stream_and_its_end_comes_back(h: Harness) {
    let (chat, token) = calling_agent(&h).await;
    let turn = new_turn(&h, &chat).await;
    let name = listed_name(&h, &chat, &turn, "search").await;
    let path = calls_path(&chat, &turn);
    let agent_task = fake_agent(&h, &token).await;

    let (status, call) = post(
        &h,
        &path,
        json!({ "call_id": "c1", "name": name, "arguments": { "query": "rust" } }),
    )
    .await;
    assert_eq!(status, 200, "{call}");
    assert_eq!(call["status"], "complete", "{call}");
    assert_eq!(call["model_text"], "found \"rust\"");
    assert_eq!(call["agent_run_id"], "run-calls");
    assert_eq!(call["duration_ms"], 3);

    // Still running after the wait: 202, then cancelled.
    let (status, held) = post(
        &h,
        &path,
        json!({ "call_id": "c2", "name": name, "arguments": { "hold": true }, "wait_ms": 50 }),
    )
    .await;
    assert_eq!(status, 202, "{held}");
    assert_eq!(held["status"], "running");
    assert_eq!(held["ended_at"], Value::Null);
    let (status, read) = h
        .call(Method::GET, &format!("{path}/c2?wait_ms=50"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(read["status"], "running");
    let (status, cancelled) = h.call(Method::DELETE, &format!("{path}/c2"), None).await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["status"], "canceled", "{cancelled}");
    let (seen, _open_stream) = tokio::time::timeout(DEADLINE, agent_task)
        .await
        .expect("the agent saw the cancel")
        .unwrap();
    assert_eq!(
        seen,
        [
            ("docs".to_owned(), "search".to_owned()),
            ("docs".to_owned(), "search".to_owned())
        ],
        "each call reached the agent once, by the turn's recorded origin"
    );
    let metrics = h
        .http
        .get(h.url("/metrics"))
        .bearer_auth(&h.server.api_token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("ctxsync_tool_calls_total{status=\"complete\"} 1\n"),
        "{metrics}"
    );
}

/// An agent whose run `run-calls` declared calls and listed `docs`' `search`, and a chat
/// bound to it: (chat, the agent's token).
async fn calling_agent(h: &Harness) -> (String, String) {
    let store = &h.server.store;
    let created = store.create_agent("caller").await.unwrap();
    let agent = created.id;
    let token = created.token.expose().to_owned();
    let startup = Startup {
        version: "test".into(),
        expanded_directory: "/ws".into(),
        agent_run_id: RunId::new("run-calls"),
        accepts_tool_calls: true,
    };
    store.update_startup(agent, startup).await.unwrap();
    let snapshot = ctxsync_protocol::Snapshot {
        version: 1,
        aggregate_hash: "agg".into(),
        resources: vec![server("docs", &[("search", "Search the docs")])],
        initial: true,
        agent_run_id: RunId::new("run-calls"),
        phase: DiscoveryPhase::Complete,
        ..Default::default()
    };
    store.push_context_state(agent, snapshot).await.unwrap();
    (h.new_chat(agent).await, token)
}

type OpenStream = (
    tokio::sync::mpsc::Sender<v1::AgentCallMessage>,
    tonic::Streaming<v1::ServerCallMessage>,
);

/// Opens the agent's call stream (run `run-calls`) with its hello sent: what the agent
/// sends, and what it receives.
async fn open_call_stream(h: &Harness, token: &str) -> OpenStream {
    let channel = tonic::transport::Endpoint::from_shared(h.server.agent_url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel::<v1::AgentCallMessage>(16);
    tx.send(
        AgentCall::Hello {
            agent_run_id: RunId::new("run-calls").unwrap(),
        }
        .into(),
    )
    .await
    .unwrap();
    let inbound = AgentClient::new(channel)
        .tool_calls(with_bearer(ReceiverStream::new(rx), token))
        .await
        .expect("the stream opens")
        .into_inner();
    (tx, inbound)
}

/// The agent's stream, served by a task: answers `search` with its query echoed, leaves
/// anything with `"hold": true` running until it is cancelled, then ends with the
/// (server, tool) of every call it saw and the stream still open.
async fn fake_agent(
    h: &Harness,
    token: &str,
) -> tokio::task::JoinHandle<(Vec<(String, String)>, Option<OpenStream>)> {
    let (tx, mut inbound) = open_call_stream(h, token).await;
    // The fake agent: answers `search` with its query echoed, leaves anything with
    // `"hold": true` running until it is cancelled.
    tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Ok(Ok(Some(message))) = tokio::time::timeout(DEADLINE, inbound.message()).await {
            match ServerCall::try_from(message).expect("a valid message") {
                ServerCall::Call(request) => {
                    tx.send(AgentCall::Accepted { id: request.id }.into())
                        .await
                        .unwrap();
                    seen.push((request.server.clone(), request.tool.clone()));
                    let arguments = Value::Object(request.arguments.parse().unwrap());
                    if arguments["hold"] == true {
                        continue;
                    }
                    let result = json!({
                        "content": [{ "type": "text", "text": format!("found {}", arguments["query"]) }],
                        "isError": false,
                    });
                    let end = AgentCall::Ended {
                        id: request.id,
                        end: CallEnd::complete(result, false),
                        duration: Duration::from_millis(3),
                    };
                    tx.send(end.into()).await.unwrap();
                }
                ServerCall::Cancel { id } => {
                    let end = AgentCall::Ended {
                        id,
                        end: CallEnd {
                            status: ctxsync_mcp_model::CallStatus::Canceled,
                            reason: None,
                            error: None,
                            result: None,
                            truncated: false,
                        },
                        duration: Duration::from_millis(5),
                    };
                    tx.send(end.into()).await.unwrap();
                    // The stream stays open (a closed one would make its calls
                    // `unknown`) until the test is done with it.
                    return (seen, Some((tx, inbound)));
                }
                // No sign-in is asked of this agent; kept credentials are none here.
                ServerCall::Heartbeat
                | ServerCall::BeginSignIn(_)
                | ServerCall::ExchangeSignIn(_)
                | ServerCall::Credential(_) => {}
            }
        }
        (seen, None)
    })
}

/// A secret-looking value put in a call's arguments: the tool gets it and echoes it in
/// its result, and the chat's event stream never carries it.
const ARGUMENT_SECRET: &str = "sk-live-ARGUMENT-7f3a9c1e5b2d4e8f0a1b";
/// A progress message the agent reports: not for the event stream either.
const PROGRESS_SECRET: &str = "progress-message-SECRET-41c2d9";

/// The chat's event stream, read through a page session (what the page reads):
/// `tool_call` events for a call that starts, progresses and ends, and for one refused
/// at once, each with exactly the allowed keys; no byte of the stream holds the
/// arguments, the result, the progress message or the model text. Meanwhile the same
/// session still cannot read the call itself.
async fn the_event_stream_shows_calls_but_never_their_arguments_or_results(h: Harness) {
    let (chat, token) = calling_agent(&h).await;
    let turn = new_turn(&h, &chat).await;
    let name = listed_name(&h, &chat, &turn, "search").await;
    let path = calls_path(&chat, &turn);
    let (session, cookie) = page_session(&h, &chat).await;
    let stream = EventLog::open(
        &session,
        &h.url(&format!("/api/chats/{chat}/context/events")),
        &cookie,
    )
    .await;
    let agent_task = progress_agent(&h, &token).await;

    let (status, call) = post(
        &h,
        &path,
        json!({ "call_id": "c1", "name": name, "arguments": { "query": ARGUMENT_SECRET } }),
    )
    .await;
    assert_eq!(status, 200, "{call}");
    assert_eq!(call["status"], "complete", "{call}");
    assert!(
        call["model_text"]
            .as_str()
            .unwrap()
            .contains(ARGUMENT_SECRET),
        "the result carries the secret (so its absence below means something): {call}"
    );
    let (status, refused) = post(
        &h,
        &path,
        json!({ "call_id": "c2", "name": "nope", "arguments": { "token": ARGUMENT_SECRET } }),
    )
    .await;
    assert_eq!(status, 200, "{refused}");

    // The session that receives the events still cannot read a call.
    let read = session
        .get(h.url(&format!("{path}/c1")))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 401);

    let ended = |events: &[Value], id: &str| {
        events
            .iter()
            .any(|e| e["id"] == id && e["phase"] == "ended")
    };
    let events = stream
        .until(|events| ended(events, "c1") && ended(events, "c2"))
        .await;
    let allowed: std::collections::BTreeSet<&str> =
        ctxsync_context_ui::TOOL_CALL_KEYS.into_iter().collect();
    for event in &events {
        let keys: std::collections::BTreeSet<&str> = event
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, allowed, "{event}");
        assert_eq!(event["turn"], turn.as_str());
    }
    let phases: Vec<&str> = events
        .iter()
        .filter(|e| e["id"] == "c1")
        .map(|e| e["phase"].as_str().unwrap())
        .collect();
    assert_eq!(phases.first(), Some(&"started"), "{events:#?}");
    assert!(phases.contains(&"progress"), "{events:#?}");
    assert_eq!(phases.last(), Some(&"ended"), "{events:#?}");
    let last = events.iter().rfind(|e| e["id"] == "c1").unwrap();
    assert_eq!(
        *last,
        json!({
            "id": "c1", "turn": turn, "name": name, "status": "complete",
            "progress": { "progress": 2.0, "total": 2.0 }, "duration_ms": 7,
            "truncated": true, "phase": "ended",
        })
    );
    let refused = events.iter().rfind(|e| e["id"] == "c2").unwrap();
    assert_eq!(refused["status"], "refused");
    assert_eq!(refused["duration_ms"], 0);

    let bytes = stream.text();
    for secret in [ARGUMENT_SECRET, PROGRESS_SECRET, "model_text"] {
        assert!(
            !bytes.contains(secret),
            "{secret:?} in the event stream:\n{bytes}"
        );
    }
    agent_task.abort();
}

/// A page session bound to `chat`, as its one-time link gives a browser: a client that
/// does not follow redirects, and the session's cookie.
pub(crate) async fn page_session(h: &Harness, chat: &str) -> (reqwest::Client, String) {
    let (status, link) = h
        .call(Method::POST, &format!("/api/chats/{chat}/link"), None)
        .await;
    assert_eq!(status, 200, "{link}");
    let token = link["url"]
        .as_str()
        .unwrap()
        .split_once("?token=")
        .unwrap()
        .1;
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let exchanged = browser
        .post(h.url(&format!("/chats/{chat}/session")))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(exchanged.status(), 303);
    let cookie = exchanged.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    (browser, cookie)
}

/// Everything an event stream sent so far, collected by a task.
struct EventLog {
    text: std::sync::Arc<std::sync::Mutex<String>>,
    task: tokio::task::JoinHandle<()>,
}

impl EventLog {
    async fn open(client: &reqwest::Client, url: &str, cookie: &str) -> Self {
        use futures::StreamExt;
        let response = client
            .get(url)
            .header("cookie", cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            200,
            "the session opens its chat's events"
        );
        let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = std::sync::Arc::clone(&text);
        let task = tokio::spawn(async move {
            let mut body = response.bytes_stream();
            while let Some(Ok(chunk)) = body.next().await {
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&chunk));
            }
        });
        Self { text, task }
    }

    fn text(&self) -> String {
        self.text.lock().unwrap().clone()
    }

    /// The data of every complete `tool_call` event so far.
    fn tool_calls(&self) -> Vec<Value> {
        let text = self.text();
        let Some(complete) = text.rfind("\n\n") else {
            return Vec::new();
        };
        text[..complete]
            .split("\n\n")
            .filter(|event| event.lines().any(|l| l == "event: tool_call"))
            .filter_map(|event| event.lines().find_map(|l| l.strip_prefix("data: ")))
            .map(|data| serde_json::from_str(data).expect("an event's data is JSON"))
            .collect()
    }

    /// The `tool_call` events once `done` holds for them.
    async fn until(&self, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let events = self.tool_calls();
            if done(&events) {
                return events;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the expected tool_call events never came:\n{}",
                self.text()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for EventLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An agent's call stream that reports two steps of progress (with a message) on every
/// call, 300 ms apart, then ends it complete and truncated, echoing the query.
async fn progress_agent(h: &Harness, token: &str) -> tokio::task::JoinHandle<()> {
    let (tx, mut inbound) = open_call_stream(h, token).await;
    tokio::spawn(async move {
        while let Ok(Some(message)) = inbound.message().await {
            let ServerCall::Call(request) = ServerCall::try_from(message).expect("a valid message")
            else {
                continue;
            };
            let id = request.id;
            tx.send(AgentCall::Accepted { id }.into()).await.unwrap();
            for step in [1.0, 2.0] {
                // Past the channel's progress flush, so each step is stored.
                tokio::time::sleep(Duration::from_millis(300)).await;
                let progress = ctxsync_mcp_model::CallProgress {
                    progress: step,
                    total: Some(2.0),
                    message: Some(PROGRESS_SECRET.into()),
                };
                tx.send(AgentCall::Progress { id, progress }.into())
                    .await
                    .unwrap();
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            let query = Value::Object(request.arguments.parse().unwrap())["query"].clone();
            let result = json!({
                "content": [{ "type": "text", "text": format!("found {query}") }],
                "isError": false,
            });
            let end = AgentCall::Ended {
                id,
                end: CallEnd::complete(result, true),
                duration: Duration::from_millis(7),
            };
            tx.send(end.into()).await.unwrap();
        }
    })
}
