//! The tool-call audit log through the chat API (issue 37) on both backends:
//! `GET /api/tool-calls` lists every call end, refusals included, newest first and a page
//! at a time, for the API token alone; bad query values are 400s naming the parameter; a
//! server prunes rows past its retention; and `ctxsync calls` prints the same page.

use crate::support;

use ctxsync_protocol::DiscoveryPhase;
use reqwest::Method;
use serde_json::{Value, json};
use support::*;

ctxsync_test_support::on_both_backends! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    open = Harness::start;
    the_log_lists_every_end_newest_first_a_page_at_a_time,
    the_log_is_for_the_api_token_alone,
    bad_query_values_are_400s_naming_the_parameter,
    the_calls_command_prints_the_log,
}

/// An agent that listed `docs`' `search`, a chat bound to it, and two calls of one turn
/// ended: `nope` refused (`not_in_turn`), then find_tools complete. (agent, chat).
async fn two_ended_calls(h: &Harness) -> (String, String) {
    let agent = h.new_agent().await;
    h.push(
        agent,
        "run-1",
        1,
        DiscoveryPhase::Complete,
        vec![server("docs", &[("search", "Search the docs")])],
    )
    .await;
    let chat = h.new_chat(agent).await;
    let (status, turn) = h
        .call(
            Method::POST,
            &format!("/api/chats/{chat}/turns"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status, 200, "{turn}");
    let turn = turn["turn_id"].as_str().unwrap().to_owned();
    let path = format!("/api/chats/{chat}/turns/{turn}/tool-calls");
    for (call_id, name, arguments) in [
        ("c1", "nope", json!({ "secret": "hunter2" })),
        ("c2", "find_tools", json!({ "queries": ["search"] })),
    ] {
        let body = json!({ "call_id": call_id, "name": name, "arguments": arguments });
        let (status, call) = h.call(Method::POST, &path, Some(body)).await;
        assert_eq!(status, 200, "{call}");
    }
    (agent.to_string(), chat)
}

async fn list(h: &Harness, query: &str) -> (u16, Value) {
    h.call(Method::GET, &format!("/api/tool-calls{query}"), None)
        .await
}

async fn the_log_lists_every_end_newest_first_a_page_at_a_time(h: Harness) {
    let (agent, chat) = two_ended_calls(&h).await;
    let (status, page) = list(&h, "").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["next_cursor"], Value::Null);
    let calls = page["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{page}");
    let (found, refused) = (&calls[0], &calls[1]);
    assert_eq!(
        (&found["name"], &found["server"], &found["status"]),
        (&json!("find_tools"), &json!("ctxsync"), &json!("complete"))
    );
    assert_eq!(found["agent_id"], Value::Null, "the server answered it");
    assert!(found["result_size"].as_u64().unwrap() > 0, "{found}");
    assert_eq!(
        (&refused["name"], &refused["status"], &refused["reason"]),
        (&json!("nope"), &json!("refused"), &json!("not_in_turn"))
    );
    assert_eq!(refused["agent_id"], agent.as_str());
    assert_eq!(refused["chat_id"], chat.as_str());
    assert_eq!(refused["call_id"], "c1");
    assert_eq!(refused["duration_ms"], 0);
    assert_eq!(refused["result_size"], Value::Null);
    let digest = refused["arguments_digest"].as_str().unwrap();
    assert!(
        digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()),
        "{digest}"
    );
    assert_eq!(
        refused["arguments_size"],
        r#"{"secret":"hunter2"}"#.len() as u64
    );
    assert!(
        !page.to_string().contains("hunter2"),
        "never the arguments: {page}"
    );

    // Filters, and a page at a time.
    let (_, of_agent) = list(&h, &format!("?agent={agent}")).await;
    assert_eq!(of_agent["calls"].as_array().unwrap().len(), 1, "{of_agent}");
    let (_, of_chat) = list(&h, &format!("?chat={chat}&since=2000-01-01T00:00:00Z")).await;
    assert_eq!(of_chat["calls"].as_array().unwrap().len(), 2, "{of_chat}");
    let (_, future) = list(&h, "?since=2999-01-01T00:00:00%2B01:00").await;
    assert_eq!(future["calls"], json!([]), "{future}");
    let (status, first) = list(&h, "?limit=1").await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["calls"], json!([found]));
    let cursor = first["next_cursor"].as_str().expect("a next page");
    let (status, second) = list(&h, &format!("?limit=1&cursor={cursor}")).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["calls"], json!([refused]));
    assert_eq!(second["next_cursor"], Value::Null);
}

async fn the_log_is_for_the_api_token_alone(h: Harness) {
    let (_, chat) = two_ended_calls(&h).await;
    let (browser, cookie) = crate::tool_calls::page_session(&h, &chat).await;
    // Even the session's own chat's calls.
    for query in ["", &format!("?chat={chat}")] {
        let response = browser
            .get(h.url(&format!("/api/tool-calls{query}")))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "{query}");
    }
    let anonymous = h.http.get(h.url("/api/tool-calls")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let (status, page) = list(&h, "").await;
    assert_eq!(status, 200);
    assert_eq!(page["calls"].as_array().unwrap().len(), 2);
}

async fn bad_query_values_are_400s_naming_the_parameter(h: Harness) {
    for (query, parameter) in [
        ("?limit=0", "limit"),
        ("?limit=501", "limit"),
        ("?limit=many", "limit"),
        ("?agent=not-a-uuid", "agent"),
        ("?chat=42", "chat"),
        ("?since=yesterday", "since"),
        ("?cursor=forged", "cursor"),
    ] {
        let (status, answer) = list(&h, query).await;
        assert_eq!(status, 400, "{query}: {answer}");
        let message = answer["error"].as_str().unwrap();
        assert!(
            message.starts_with(&format!("{parameter}:")),
            "{query}: {message}"
        );
    }
    let (status, answer) = list(&h, "?limit=500").await;
    assert_eq!(status, 200, "{answer}");
}

async fn the_calls_command_prints_the_log(h: Harness) {
    let (agent, _) = two_ended_calls(&h).await;
    let args =
        |agent: Option<&str>, json: bool| ctxsync::http::tool_call::list_command::CallsArgs {
            agent: agent.map(str::to_owned),
            chat: None,
            since: None,
            limit: Some(1),
            cursor: None,
            api: ctxsync::api_client::ApiClientArgs {
                server: h.server.http_url(),
                ca_certs: Vec::new(),
                api_token: Some(h.server.api_token.parse().unwrap()),
                data_dir: None,
            },
            json,
        };
    let page = ctxsync::http::tool_call::list_command::fetch(&args(None, true))
        .await
        .unwrap();
    assert_eq!(page["calls"][0]["name"], "find_tools", "{page}");
    let table = ctxsync::http::tool_call::list_command::table(&page);
    assert!(table.contains("ctxsync/find_tools"), "{table}");
    assert!(table.contains("More: --cursor "), "{table}");
    let page = ctxsync::http::tool_call::list_command::fetch(&args(Some(&agent), false))
        .await
        .unwrap();
    assert_eq!(page["calls"][0]["reason"], "not_in_turn", "{page}");
    ctxsync::http::tool_call::list_command::run(args(None, true))
        .await
        .unwrap();
    ctxsync::http::tool_call::list_command::run(args(None, false))
        .await
        .unwrap();
    // The server's refusal, word for word.
    let error = ctxsync::http::tool_call::list_command::run(args(Some("x"), false))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("400"), "{error}");
    assert!(error.to_string().contains("agent:"), "{error}");
}

/// A server deletes the rows past its retention as it starts (and hourly after): a second
/// server on the same database with no retention at all empties the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_prunes_the_log_past_its_retention() {
    let h = Harness::start(TestBackend::Sqlite)
        .await
        .expect("SQLite starts");
    two_ended_calls(&h).await;
    let replica = ctxsync::server::start(ctxsync::server::ServerConfig {
        database: ctxsync_persistence::DatabaseConfig::sqlite_in(h.data_dir()),
        api_token: Some("audit-replica-token-0123456789".into()),
        tool_call_audit_retention: std::time::Duration::ZERO,
        ..ctxsync::server::ServerConfig::ephemeral(h.data_dir())
    })
    .await
    .expect("the replica starts");
    ctxsync_test_support::poll("the replica to empty the log")
        .until(|| async {
            let (status, page) = list(&h, "").await;
            if status == 200 && page["calls"] == json!([]) {
                Ok(())
            } else {
                Err(page)
            }
        })
        .await;
    replica.shutdown().await;
}
