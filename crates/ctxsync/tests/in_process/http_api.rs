//! The chat API through real HTTP on loopback: every route, status code and error, on
//! SQLite and PostgreSQL.

use crate::support;

use std::time::Duration;

use ctxsync_protocol::DiscoveryPhase;
use ctxsync_protocol::RunId;
use reqwest::Method;
use serde_json::{Value, json};
use support::*;

ctxsync_test_support::on_both_backends! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    open = Harness::start;
    every_api_route_refuses_a_missing_or_wrong_token,
    agents_are_created_and_their_context_summarised,
    chats_are_created_and_read,
    turns_wait_for_discovery_and_return_tools,
    find_tools_finds_and_activates,
    find_tools_ranks_alike_over_http_in_a_call_and_in_process,
    refresh_repins_the_chat,
    page_links_become_a_session_cookie_once,
    events_stream_a_new_panel_after_a_push,
    metrics_and_health,
}

async fn every_api_route_refuses_a_missing_or_wrong_token(h: Harness) {
    let chat = "00000000-0000-4000-8000-000000000000";
    let routes = [
        (Method::POST, "/api/agents".to_string()),
        (Method::GET, format!("/api/agents/{chat}/context")),
        (Method::POST, "/api/chats".to_string()),
        (Method::GET, format!("/api/chats/{chat}")),
        (Method::POST, format!("/api/chats/{chat}/turns")),
        (Method::GET, format!("/api/chats/{chat}/turns/{chat}")),
        (Method::PUT, format!("/api/chats/{chat}/agent")),
        (Method::POST, format!("/api/chats/{chat}/find-tools")),
        (Method::GET, format!("/api/chats/{chat}/context")),
        (Method::PUT, format!("/api/chats/{chat}/context")),
        (Method::GET, format!("/api/chats/{chat}/context/events")),
        (Method::POST, format!("/api/chats/{chat}/link")),
        (Method::GET, "/api/tool-calls".to_string()),
        (Method::GET, "/metrics".to_string()),
    ];
    for (method, path) in routes {
        for auth in [None, Some("Bearer wrong-token"), Some("Basic dGVzdA==")] {
            let mut request = h.http.request(method.clone(), h.url(&path));
            if let Some(auth) = auth {
                request = request.header("authorization", auth);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 401, "{method} {path} with {auth:?}");
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["error"], "missing or invalid bearer token");
        }
    }
    // The token value never appears in an error.
    let (status, body) = h.call(Method::GET, "/no/such/route", None).await;
    assert_eq!(status, 404, "{body}");
    assert!(!body.to_string().contains(&h.server.api_token));
}

async fn agents_are_created_and_their_context_summarised(h: Harness) {
    let (status, agent) = h
        .call(
            Method::POST,
            "/api/agents",
            Some(json!({ "name": "laptop" })),
        )
        .await;
    assert_eq!(status, 201, "{agent}");
    let id = agent["id"].as_str().unwrap();
    let token = agent["token"].as_str().unwrap();
    assert!(token.len() > 20);
    assert_eq!(
        h.server
            .store
            .authenticate(token)
            .await
            .unwrap()
            .to_string(),
        id
    );

    for (body, needle) in [
        (json!({}), "name"),
        (json!({ "name": "  " }), "name: must not be empty"),
        (json!({ "name": 7 }), "name"),
        (json!({ "name": "x", "extra": 1 }), "extra"),
    ] {
        let (status, error) = h
            .call(Method::POST, "/api/agents", Some(body.clone()))
            .await;
        assert_eq!(status, 400, "{body}");
        assert!(
            error["error"].as_str().unwrap().contains(needle),
            "{body} → {error}"
        );
    }

    let (status, error) = h
        .call(Method::GET, "/api/agents/not-a-uuid/context", None)
        .await;
    assert_eq!(status, 400);
    assert!(
        error["error"]
            .as_str()
            .unwrap()
            .contains("invalid agent id")
    );
    let (status, _) = h
        .call(
            Method::GET,
            "/api/agents/00000000-0000-4000-8000-000000000000/context",
            None,
        )
        .await;
    assert_eq!(status, 404);

    let agent_id = id.parse().unwrap();
    h.push(
        agent_id,
        "run-1",
        1,
        DiscoveryPhase::Pending,
        vec![
            file("AGENTS.md", "hi"),
            config_file(),
            server("fs", &[("read", "Read")]),
        ],
    )
    .await;
    let (status, summary) = h
        .call(Method::GET, &format!("/api/agents/{id}/context"), None)
        .await;
    assert_eq!(status, 200, "{summary}");
    assert_eq!(summary["agent_run_id"], "run-1");
    assert_eq!(summary["stale"], false);
    assert_eq!(summary["snapshot"]["phase"], "pending");
    assert_eq!(summary["snapshot"]["agent_run_id"], "run-1");
    let resources = summary["resources"].as_array().unwrap();
    let config = resources
        .iter()
        .find(|r| r["kind"] == "mcp_config")
        .unwrap();
    assert!(
        config.get("body").is_none(),
        "a config file's body is never returned: {config}"
    );
    let fs = resources
        .iter()
        .find(|r| r["kind"] == "mcp_server")
        .unwrap();
    assert_eq!(fs["body"]["tools"][0]["name"], "read");

    // Pushed, but no call stream of its run was ever opened: listed as never connected.
    let (status, list) = h.call(Method::GET, "/api/agents", None).await;
    assert_eq!(status, 200, "{list}");
    let listed = list["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == id)
        .unwrap_or_else(|| panic!("{list}"));
    assert_eq!(listed["connection"], "never", "{listed}");
    assert_eq!(listed["offline_since"], Value::Null, "{listed}");
    assert!(listed.get("token").is_none(), "{listed}");
}

async fn chats_are_created_and_read(h: Harness) {
    let (status, error) = h
        .call(
            Method::POST,
            "/api/chats",
            Some(json!({ "agent_id": "nope" })),
        )
        .await;
    assert_eq!(status, 400);
    assert!(
        error["error"].as_str().unwrap().starts_with("agent_id:"),
        "{error}"
    );
    let (status, _) = h
        .call(
            Method::POST,
            "/api/chats",
            Some(json!({ "agent_id": "00000000-0000-4000-8000-000000000000" })),
        )
        .await;
    assert_eq!(status, 404);
    let (status, error) = h.call(Method::POST, "/api/chats", Some(json!({}))).await;
    assert_eq!(status, 400);
    assert!(
        error["error"].as_str().unwrap().contains("agent_id"),
        "{error}"
    );

    let agent = h.new_agent().await;
    let chat = h.new_chat(agent).await;
    let (status, read) = h
        .call(Method::GET, &format!("/api/chats/{chat}"), None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(read["id"], chat.as_str());
    assert_eq!(read["agent_id"], agent.to_string());
    assert_eq!(
        read["mcp_discovery"],
        json!({ "phase": "unknown", "stale": false })
    );
    assert_eq!(read["context"]["discovery"]["state"], "unknown");

    h.push(agent, "run-1", 1, DiscoveryPhase::Pending, vec![])
        .await;
    let (_, read) = h
        .call(Method::GET, &format!("/api/chats/{chat}"), None)
        .await;
    assert_eq!(
        read["mcp_discovery"],
        json!({ "phase": "pending", "stale": false })
    );
    assert_eq!(read["context"]["discovery"]["state"], "pending");

    let (status, _) = h
        .call(
            Method::GET,
            "/api/chats/00000000-0000-4000-8000-000000000000",
            None,
        )
        .await;
    assert_eq!(status, 404);
    let (status, _) = h.call(Method::GET, "/api/chats/xyz", None).await;
    assert_eq!(status, 400);
}

async fn turns_wait_for_discovery_and_return_tools(h: Harness) {
    let agent = h.new_agent().await;
    let chat = h.new_chat(agent).await;
    let path = format!("/api/chats/{chat}/turns");

    let (status, error) = h
        .call(Method::POST, &path, Some(json!({ "mode": "fast" })))
        .await;
    assert_eq!(status, 400);
    assert!(
        error["error"].as_str().unwrap().starts_with("mode:"),
        "{error}"
    );
    let (status, _) = h
        .call(
            Method::POST,
            "/api/chats/00000000-0000-4000-8000-000000000000/turns",
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 404);

    h.push(
        agent,
        "run-1",
        1,
        DiscoveryPhase::Pending,
        vec![server("fs", &[("read", "Read a file")])],
    )
    .await;
    // Plan mode never waits and carries no outcome.
    let (status, plan) = h
        .call(Method::POST, &path, Some(json!({ "mode": "plan" })))
        .await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!(plan["mcp_discovery"], Value::Null);

    // A default turn waits; completing discovery releases it.
    let turn = {
        let h = &h;
        let path = path.clone();
        async move {
            h.call(Method::POST, &path, Some(json!({ "mode": "default" })))
                .await
        }
    };
    let complete = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        h.push(
            agent,
            "run-1",
            2,
            DiscoveryPhase::Complete,
            vec![
                server("fs", &[("read", "Read a file")]),
                server("empty", &[]),
            ],
        )
        .await;
    };
    let ((status, turn), ()) = tokio::join!(turn, complete);
    assert_eq!(status, 200, "{turn}");
    assert_eq!(turn["mcp_discovery"]["phase"], "complete");
    assert_eq!(turn["mcp_discovery"]["wait_timed_out"], false);
    assert_eq!(turn["mcp_discovery"]["servers_ok"], 1);
    assert_eq!(turn["mcp_discovery"]["servers_empty"], 1);
    assert_eq!(turn["tools"][0]["name"], "fs__read");
    assert_eq!(turn["tools"][0]["description"], "Read a file");
    assert!(turn["tools"][0]["input_schema"].is_object());
    assert_eq!(
        turn["note"],
        Value::Null,
        "complete without issues needs no note"
    );
}

async fn find_tools_finds_and_activates(h: Harness) {
    let agent = h.new_agent().await;
    let chat = h.new_chat(agent).await;
    h.push(
        agent,
        "r",
        1,
        DiscoveryPhase::Complete,
        vec![server(
            "docs",
            &[
                ("search_docs", "Search documentation"),
                ("read_page", "Read a page"),
            ],
        )],
    )
    .await;
    let path = format!("/api/chats/{chat}/find-tools");
    // find_tools activates for a turn: a chat without one has nothing to activate for.
    let (status, error) = h
        .call(
            Method::POST,
            &path,
            Some(json!({ "names": ["docs__read_page"] })),
        )
        .await;
    assert_eq!(status, 400, "{error}");
    assert!(
        error["error"].as_str().unwrap().contains("has no turn yet"),
        "{error}"
    );
    let (status, turn) = h
        .call(
            Method::POST,
            &format!("/api/chats/{chat}/turns"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 200, "{turn}");
    let (status, found) = h
        .call(
            Method::POST,
            &path,
            Some(json!({ "queries": ["search documentation"] })),
        )
        .await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["matches"][0]["name"], "docs__search_docs");
    // The embedding model may also offer the docs' other tool, after it.
    let first: Vec<Value> = found["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].clone())
        .collect();
    assert_eq!(found["total"], first.len());
    assert_eq!(
        found["activated"],
        json!(first),
        "a new turn activates every match"
    );
    assert_eq!(found["turn_id"], turn["turn_id"], "the chat's latest turn");
    let (_, again) = h
        .call(
            Method::POST,
            &path,
            Some(json!({ "names": ["docs__search_docs", "docs__read_page"] })),
        )
        .await;
    let newly: Vec<&str> = ["docs__read_page"]
        .into_iter()
        .filter(|n| !first.contains(&json!(n)))
        .collect();
    assert_eq!(
        again["activated"],
        json!(newly),
        "already active tools are not activated twice"
    );

    let (status, error) = h.call(Method::POST, &path, Some(json!({}))).await;
    assert_eq!(status, 400);
    assert!(!error["error"].as_str().unwrap().is_empty());
    let (status, _) = h
        .call(
            Method::POST,
            &path,
            Some(json!({ "queries": "not a list" })),
        )
        .await;
    assert_eq!(status, 400);
}

/// One path: `POST …/find-tools`, a turn's `find_tools` call and the projection's
/// in-process ranking (the retrieval benchmark's) order every query alike, requests in
/// other words included.
async fn find_tools_ranks_alike_over_http_in_a_call_and_in_process(h: Harness) {
    use ctxsync_chat_projection::{AgentState, Binding, Ranking, SnapshotState, ToolIndex};
    let servers = vec![
        server(
            "docs",
            &[
                ("search_docs", "Search documentation"),
                ("read_page", "Read a page"),
            ],
        ),
        server(
            "ops",
            &[
                ("restart", "Restart the service"),
                ("deploy", "Deploy a release"),
            ],
        ),
        server(
            "git",
            &[
                ("log", "Show the commit history"),
                ("status", "Show the working tree status"),
            ],
        ),
    ];
    let agent = h.new_agent().await;
    let chat = h.new_chat(agent).await;
    h.push(agent, "r", 1, DiscoveryPhase::Complete, servers.clone())
        .await;
    let turn = h.new_turn(&chat).await;
    let turn_id = turn["turn_id"].as_str().unwrap().to_owned();

    let view = ctxsync_chat_projection::project(&Binding::Agent(AgentState {
        agent_run_id: RunId::new("r"),
        snapshot: Some(SnapshotState {
            agent_run_id: RunId::new("r"),
            phase: DiscoveryPhase::Complete,
            resources: servers,
            ..Default::default()
        }),
        ..Default::default()
    }));
    let index = ToolIndex::build(view.tools());
    let names = |found: &Value| -> Vec<String> {
        found["matches"]
            .as_array()
            .unwrap_or_else(|| panic!("matches in {found}"))
            .iter()
            .map(|m| m["name"].as_str().unwrap().to_owned())
            .collect()
    };
    for (i, query) in [
        "reboot the server",
        "read a documentation page",
        "git: history",
        "what changed lately",
        "status",
    ]
    .into_iter()
    .enumerate()
    {
        let expected =
            ctxsync_chat_projection::rank_query(&index, view.tools(), &[query], Ranking::Fused);
        assert!(!expected.is_empty(), "{query:?} finds something");
        let (status, found) = h
            .call(
                Method::POST,
                &format!("/api/chats/{chat}/find-tools"),
                Some(json!({ "queries": [query] })),
            )
            .await;
        assert_eq!(status, 200, "{found}");
        assert_eq!(names(&found), expected, "{query:?} over HTTP");
        let body = json!({
            "call_id": format!("find-{i}"),
            "name": "find_tools",
            "arguments": { "queries": [query] },
        });
        let (status, call) = h
            .call(
                Method::POST,
                &format!("/api/chats/{chat}/turns/{turn_id}/tool-calls"),
                Some(body),
            )
            .await;
        assert_eq!(status, 200, "{call}");
        assert_eq!(
            names(&call["result"]["structuredContent"]),
            expected,
            "{query:?} as the turn's call"
        );
    }
}

async fn refresh_repins_the_chat(h: Harness) {
    let agent = h.new_agent().await;
    h.push(
        agent,
        "r",
        1,
        DiscoveryPhase::Complete,
        vec![file("AGENTS.md", "one")],
    )
    .await;
    let chat = h.new_chat(agent).await;
    let mut changed = file("AGENTS.md", "two, longer");
    changed.content_hash = "other".into();
    let store = &h.server.store;
    let snapshot = ctxsync_protocol::Snapshot {
        version: 2,
        aggregate_hash: "agg-2".into(),
        resources: vec![changed],
        initial: false,
        snapshot_error: None,
        agent_run_id: RunId::new("r"),
        phase: DiscoveryPhase::Complete,
        ..Default::default()
    };
    store.push_context_state(agent, snapshot).await.unwrap();
    let (_, read) = h
        .call(Method::GET, &format!("/api/chats/{chat}"), None)
        .await;
    assert_eq!(
        read["context"]["dirty"]["refresh"]["method"], "PUT",
        "{read}"
    );

    let (status, refreshed) = h
        .call(Method::PUT, &format!("/api/chats/{chat}/context"), None)
        .await;
    assert_eq!(status, 200, "{refreshed}");
    assert_eq!(refreshed["context"]["dirty"], Value::Null);
    let (status, _) = h
        .call(
            Method::PUT,
            "/api/chats/00000000-0000-4000-8000-000000000000/context",
            None,
        )
        .await;
    assert_eq!(status, 404);

    let text = ctxsync::context::fetch_panel_text(&h.server.http_url(), &chat, &h.server.api_token)
        .await
        .unwrap();
    assert!(text.starts_with(&format!("Chat {chat} context")), "{text}");
    let error = ctxsync::context::fetch_panel_text(&h.server.http_url(), &chat, "wrong-token")
        .await
        .unwrap_err();
    assert!(format!("{error:#}").contains("401"), "{error:#}");
}

async fn page_links_become_a_session_cookie_once(h: Harness) {
    let agent = h.new_agent().await;
    let chat = h.new_chat(agent).await;
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    let page = no_redirects
        .get(h.url(&format!("/chats/{chat}")))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 401, "the page needs a link or a session");

    let (status, link) = h
        .call(Method::POST, &format!("/api/chats/{chat}/link"), None)
        .await;
    assert_eq!(status, 200);
    let link = link["url"].as_str().unwrap().to_string();
    let token = link.split_once("?token=").unwrap().1.to_string();
    // Opening the link shows a button; only its POST exchanges the token.
    for _ in 0..2 {
        let shown = no_redirects.get(h.url(&link)).send().await.unwrap();
        assert_eq!(shown.status(), 200);
        let html = shown.text().await.unwrap();
        assert!(
            html.contains(&format!(r#"action="/chats/{chat}/session""#)),
            "{html}"
        );
    }
    let exchange = no_redirects
        .post(h.url(&format!("/chats/{chat}/session")))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(exchange.status(), 303);
    assert_eq!(exchange.headers()["location"], format!("/chats/{chat}"));
    let cookie = exchange.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let session = cookie.split(';').next().unwrap().to_string();

    let page = no_redirects
        .get(h.url(&format!("/chats/{chat}")))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains(r#"id="context-panel""#));
    // The session opens the page's own refresh, not the rest of the chat API.
    let refresh = no_redirects
        .put(h.url(&format!("/api/chats/{chat}/context")))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(refresh.status(), 200);
    let panel = no_redirects
        .get(h.url(&format!("/api/chats/{chat}")))
        .header("cookie", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(panel.status(), 401);

    let reused = no_redirects.get(h.url(&link)).send().await.unwrap();
    assert_eq!(reused.status(), 401, "a link token works once");
    let (status, _) = h
        .call(
            Method::POST,
            "/api/chats/00000000-0000-4000-8000-000000000000/link",
            None,
        )
        .await;
    assert_eq!(status, 404);
}

async fn events_stream_a_new_panel_after_a_push(h: Harness) {
    use futures::StreamExt;
    let agent = h.new_agent().await;
    let chat = h.new_chat(agent).await;
    h.push(agent, "r", 1, DiscoveryPhase::Pending, vec![]).await;
    let response = h
        .http
        .get(h.url(&format!("/api/chats/{chat}/context/events")))
        .bearer_auth(&h.server.api_token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut body = response.bytes_stream();
    let mut buffer = String::new();
    let mut next_event = async || -> Value {
        loop {
            if let Some(end) = buffer.find("\n\n") {
                let event: String = buffer.drain(..end + 2).collect();
                if let Some(data) = event.lines().find_map(|l| l.strip_prefix("data: ")) {
                    return serde_json::from_str(data).unwrap();
                }
                continue;
            }
            let chunk = tokio::time::timeout(Duration::from_secs(10), body.next())
                .await
                .expect("an event in time");
            buffer.push_str(&String::from_utf8_lossy(&chunk.unwrap().unwrap()));
        }
    };
    let first = next_event().await;
    assert_eq!(first["panel"]["discovery"]["state"], "pending");
    h.push(
        agent,
        "r",
        2,
        DiscoveryPhase::Complete,
        vec![server("fs", &[("read", "Read")])],
    )
    .await;
    let second = next_event().await;
    assert_eq!(
        second["panel"]["discovery"]["state"], "complete",
        "{second}"
    );
    assert!(second["html"].as_str().unwrap().contains("fs"));
}

async fn metrics_and_health(h: Harness) {
    let health = h.http.get(h.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200, "health needs no token");
    let agent = h.new_agent().await;
    h.push(agent, "r", 1, DiscoveryPhase::Complete, vec![])
        .await;
    let metrics = h
        .http
        .get(h.url("/metrics"))
        .bearer_auth(&h.server.api_token)
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), 200);
    let text = metrics.text().await.unwrap();
    assert!(
        text.contains("# TYPE ctxsync_agent_pushes_total counter"),
        "{text}"
    );
    assert!(
        text.contains("ctxsync_agents{phase=\"complete\",stale=\"false\"} 1"),
        "{text}"
    );
    assert!(text.contains("ctxsync_gate"), "{text}");
}
