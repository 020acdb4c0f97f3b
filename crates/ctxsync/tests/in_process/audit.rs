//! The audit log of every kind through the chat API (issue 50) on both backends:
//! `GET /api/audit` lists tool calls' ends and sign-ins' steps together, newest first and
//! a page at a time, each saying who asked; it filters by kind, agent, chat and time; it
//! is for the API token alone; bad query values are 400s naming the parameter (an
//! unknown kind names the kinds); no entry holds a token, code or state; and a server
//! prunes sign-in entries past its retention as it prunes calls.

use crate::support;

use ctxsync_mcp_model::SignInStart;
use ctxsync_persistence::{
    AgentId, CallbackOutcome, CallbackParams, CredentialSecrets, CredentialSummary, Keyring,
    McpCredential, NewSignIn, SecretsKey, SignInId, Store,
};
use ctxsync_protocol::DiscoveryPhase;
use reqwest::Method;
use serde_json::{Value, json};
use support::*;

ctxsync_test_support::on_both_backends! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    open = Harness::start;
    the_log_lists_every_kind_newest_first_a_page_at_a_time,
    the_log_filters_by_kind_agent_chat_and_time,
    the_log_is_for_the_api_token_alone,
    bad_query_values_are_400s_naming_the_parameter,
}

const SERVER: &str = "docs";
const ISSUER: &str = "https://auth.example.test/";
const STATE: &str = "audit-route-state-canary-51e0";
const PAGE_STATE: &str = "audit-route-page-state-canary-8a12";
const CODE: &str = "audit-route-code-canary-c3f9";
const PENDING: &str = "audit-route-pending-canary-77b1";
const ACCESS: &str = "audit-route-access-canary-0d2e";
const REFRESH: &str = "audit-route-refresh-canary-4f60";
const BROWSER: &str = "audit-route-browser-canary-9e3a";

fn keys() -> Keyring {
    Keyring::new(SecretsKey::from_bytes([5; 32]))
}

/// What the calls and sign-ins of [`history`] left.
struct History {
    agent: AgentId,
    chat: String,
    /// The sign-in asked for with the API token, completed.
    signed_in: SignInId,
    /// The sign-in asked for from the chat's page, refused by the authorization server.
    refused: SignInId,
}

/// Ends a call of `chat`'s `turn`: `nope` is refused (not in the turn), `find_tools` runs.
async fn call(h: &Harness, chat: &str, turn: &str, call_id: &str, name: &str) {
    let path = format!("/api/chats/{chat}/turns/{turn}/tool-calls");
    let body = json!({ "call_id": call_id, "name": name, "arguments": { "queries": ["x"] } });
    let (status, answer) = h.call(Method::POST, &path, Some(body)).await;
    assert_eq!(status, 200, "{answer}");
}

/// A sign-in of `agent` to [`SERVER`] asked for `via`, started with `state`.
async fn started(store: &Store, agent: AgentId, via: &str, state: &str) -> SignInId {
    let asked = NewSignIn {
        agent,
        server_name: SERVER.into(),
        via: via.into(),
        browser: Some(BROWSER.into()),
    };
    let id = store.request_sign_in(&asked).await.unwrap();
    let claimed = store.claim_sign_in(id, "replica-a", &keys()).await.unwrap();
    assert!(claimed.is_some());
    let start = SignInStart {
        authorization_url: format!("{ISSUER}authorize?state={state}"),
        state: state.into(),
        issuer: Some(ISSUER.into()),
        server_url: "https://mcp.example.test/mcp".into(),
        pending: PENDING.into(),
    };
    assert!(store.sign_in_started(id, &start, &keys()).await.unwrap());
    id
}

fn credential() -> McpCredential {
    McpCredential {
        summary: CredentialSummary {
            server_name: SERVER.into(),
            server_url: "https://mcp.example.test/mcp".into(),
            issuer: ISSUER.into(),
            account: None,
            scopes: "read".into(),
            access_expires_at: None,
            signed_in_at: chrono::Utc::now(),
            signed_in_via: "api_token".into(),
        },
        secrets: CredentialSecrets {
            access_token: ACCESS.into(),
            refresh_token: Some(REFRESH.into()),
            token_type: "Bearer".into(),
            client_secret: None,
            client_id: Some("client-1".into()),
        },
    }
}

/// Calls and sign-ins, interleaved: two calls end (`nope` refused, find_tools), a sign-in
/// with the API token completes, one from the chat's page is refused, the page signs the
/// server out, and one more call ends.
async fn history(h: &Harness) -> History {
    let (store, keys) = (&h.server.store, keys());
    let agent = h.new_agent().await;
    h.push(
        agent,
        "run-1",
        1,
        DiscoveryPhase::Complete,
        vec![server(SERVER, &[("search", "Search the docs")])],
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
    call(h, &chat, &turn, "c1", "nope").await;
    call(h, &chat, &turn, "c2", "find_tools").await;

    let signed_in = started(store, agent, "api_token", STATE).await;
    let code = CallbackParams::Code {
        code: CODE.into(),
        iss: Some(ISSUER.into()),
    };
    let outcome = store.sign_in_callback(STATE, Some(BROWSER), code, &keys);
    assert!(matches!(
        outcome.await.unwrap(),
        CallbackOutcome::Accepted(_)
    ));
    assert!(
        store
            .claim_sign_in(signed_in, "replica-a", &keys)
            .await
            .unwrap()
            .is_some()
    );
    let completed = credential();
    let completed = store.sign_in_completed(signed_in, &completed, &keys);
    assert!(completed.await.unwrap());
    let refused = started(store, agent, &format!("chat:{chat}"), PAGE_STATE).await;
    let denied = CallbackParams::Error {
        error: "access_denied".into(),
        description: None,
    };
    let outcome = store.sign_in_callback(PAGE_STATE, Some(BROWSER), denied, &keys);
    assert!(matches!(
        outcome.await.unwrap(),
        CallbackOutcome::Refused(_)
    ));
    // Signed out from the page; again with the token, with nothing left to forget.
    let (browser, cookie) = crate::tool_calls::page_session(h, &chat).await;
    let path = format!("/api/agents/{agent}/mcp-servers/{SERVER}/authorization");
    let response = browser
        .delete(h.url(&path))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    let (status, _) = h.call(Method::DELETE, &path, None).await;
    assert_eq!(status, 204);

    call(h, &chat, &turn, "c3", "nope").await;
    History {
        agent,
        chat,
        signed_in,
        refused,
    }
}

async fn list(h: &Harness, query: &str) -> (u16, Value) {
    h.call(Method::GET, &format!("/api/audit{query}"), None)
        .await
}

/// Every entry `query` lists, page after page (`limit` is part of `query`).
async fn all_pages(h: &Harness, query: &str) -> Vec<Value> {
    let mut entries = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let next = cursor.map(|c| format!("&cursor={c}")).unwrap_or_default();
        let (status, page) = list(h, &format!("{query}{next}")).await;
        assert_eq!(status, 200, "{page}");
        entries.extend(page["entries"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return entries,
        }
    }
}

fn at(entry: &Value) -> chrono::DateTime<chrono::FixedOffset> {
    chrono::DateTime::parse_from_rfc3339(entry["at"].as_str().unwrap()).unwrap()
}

async fn the_log_lists_every_kind_newest_first_a_page_at_a_time(h: Harness) {
    let History {
        agent,
        chat,
        signed_in,
        refused,
    } = history(&h).await;
    let (status, page) = list(&h, "").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["next_cursor"], Value::Null);
    let entries = page["entries"].as_array().unwrap();
    let told: Vec<(&str, &str, &str)> = entries
        .iter()
        .rev()
        .map(|e| {
            (
                e["kind"].as_str().unwrap(),
                e["status"].as_str().unwrap(),
                e["via"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        told,
        [
            ("tool_call", "refused", "api_token"),
            ("tool_call", "complete", "api_token"),
            ("sign_in", "started", "api_token"),
            ("sign_in", "completed", "api_token"),
            ("sign_in", "started", "page"),
            ("sign_in", "failed", "page"),
            ("sign_in", "forgotten", "page"),
            ("tool_call", "refused", "api_token"),
        ],
        "{page}"
    );
    for pair in entries.windows(2) {
        assert!(at(&pair[0]) >= at(&pair[1]), "{pair:?}");
    }

    // Each kind as the contract says: a call's entry is /api/tool-calls' with kind, at
    // and via; a sign-in's says who asked, and nothing that does not apply.
    let (_, calls) = h.call(Method::GET, "/api/tool-calls", None).await;
    let calls = calls["calls"].as_array().unwrap();
    let call_entries: Vec<&Value> = entries
        .iter()
        .filter(|e| e["kind"] == "tool_call")
        .collect();
    assert_eq!(call_entries.len(), calls.len());
    for (entry, call) in call_entries.iter().zip(calls) {
        let mut bare = entry.as_object().unwrap().clone();
        assert_eq!(bare.remove("at"), Some(call["ended_at"].clone()), "{entry}");
        assert_eq!(bare.remove("via"), Some(json!("api_token")));
        assert_eq!(bare.remove("kind"), Some(json!("tool_call")));
        assert_eq!(Value::Object(bare), *call);
    }
    let agent = agent.to_string();
    let base = |status: &str, via: &str| json!({"kind": "sign_in", "agent_id": agent, "server": SERVER, "status": status, "via": via});
    let mut expected = [
        base("started", "api_token"),
        base("completed", "api_token"),
        base("started", "page"),
        base("failed", "page"),
        base("forgotten", "page"),
    ];
    for (entry, id) in expected
        .iter_mut()
        .zip([signed_in, signed_in, refused, refused])
    {
        entry["sign_in_id"] = json!(id.to_string());
    }
    expected[1]["issuer"] = json!(ISSUER);
    for page_entry in &mut expected[2..] {
        page_entry["chat_id"] = json!(chat);
    }
    expected[3]["reason"] = json!("the authorization server refused the sign-in: access_denied");
    let mut sign_ins: Vec<Value> = entries
        .iter()
        .rev()
        .filter(|e| e["kind"] == "sign_in")
        .cloned()
        .collect();
    for entry in &mut sign_ins {
        assert!(
            entry.as_object_mut().unwrap().remove("at").is_some(),
            "{entry}"
        );
    }
    assert_eq!(sign_ins, expected);

    // Page by page, nothing lost or repeated; a full last page says it is the last.
    for limit in [1, 3, 7] {
        let paged = all_pages(&h, &format!("?limit={limit}")).await;
        assert_eq!(paged, *entries, "limit {limit}");
    }
    let (_, exact) = list(&h, "?limit=8").await;
    assert_eq!(exact["next_cursor"], Value::Null, "{exact}");

    // No token, code, state, pending state or browser binding, on any page.
    let text = format!("{page} {:?}", all_pages(&h, "?limit=2").await);
    assert!(text.contains(SERVER) && text.contains(ISSUER), "{text}");
    for secret in [STATE, PAGE_STATE, CODE, PENDING, ACCESS, REFRESH, BROWSER] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
}

async fn the_log_filters_by_kind_agent_chat_and_time(h: Harness) {
    let history = history(&h).await;
    let everything = all_pages(&h, "?limit=500").await;
    let only = |keep: &dyn Fn(&Value) -> bool| -> Vec<Value> {
        everything.iter().filter(|e| keep(e)).cloned().collect()
    };
    for kind in ["tool_call", "sign_in"] {
        let listed = all_pages(&h, &format!("?kind={kind}&limit=2")).await;
        assert_eq!(listed, only(&|e| e["kind"] == kind), "{kind}");
        assert!(!listed.is_empty());
    }
    // The agent's: not find_tools, which the server answered itself.
    let agent = history.agent.to_string();
    let listed = all_pages(&h, &format!("?agent={agent}")).await;
    assert_eq!(listed, only(&|e| e["agent_id"] == agent.as_str()));
    assert_eq!(listed.len(), everything.len() - 1);
    // The chat's: its calls, and the sign-in steps its page asked for.
    let listed = all_pages(&h, &format!("?chat={}", history.chat)).await;
    assert_eq!(listed, only(&|e| e["chat_id"] == history.chat.as_str()));
    assert_eq!(listed.len(), 3 + 3, "{listed:?}");
    let listed = all_pages(&h, &format!("?kind=sign_in&chat={}", history.chat)).await;
    assert_eq!(listed.len(), 3, "{listed:?}");
    let other = uuid::Uuid::new_v4();
    assert!(all_pages(&h, &format!("?agent={other}")).await.is_empty());

    // Since, inclusive: an entry's own time keeps it and the ones after.
    let middle = &everything[3];
    let since = middle["at"].as_str().unwrap().replace('+', "%2B");
    let listed = all_pages(&h, &format!("?since={since}")).await;
    assert_eq!(listed, everything[..=3]);
    let listed = all_pages(&h, "?since=2999-01-01T00:00:00Z").await;
    assert!(listed.is_empty());
}

async fn the_log_is_for_the_api_token_alone(h: Harness) {
    let History { chat, .. } = history(&h).await;
    let (browser, cookie) = crate::tool_calls::page_session(&h, &chat).await;
    // Even the session's own chat's entries.
    for query in ["", &format!("?chat={chat}"), "?kind=sign_in"] {
        let response = browser
            .get(h.url(&format!("/api/audit{query}")))
            .header("cookie", &cookie)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "{query}");
        let body = response.text().await.unwrap();
        assert!(!body.contains(SERVER), "{body}");
    }
    let anonymous = h.http.get(h.url("/api/audit")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let (status, page) = list(&h, "").await;
    assert_eq!(status, 200);
    assert_eq!(page["entries"].as_array().unwrap().len(), 8);
}

async fn bad_query_values_are_400s_naming_the_parameter(h: Harness) {
    for (query, parameter) in [
        ("?kind=tool_calls", "kind"),
        ("?kind=", "kind"),
        ("?kind=sign_in&limit=0", "limit"),
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
    let (_, answer) = list(&h, "?kind=calls").await;
    let message = answer["error"].as_str().unwrap();
    assert!(message.contains("tool_call, sign_in"), "{message}");
    for good in ["?kind=sign_in&limit=500", "?kind=tool_call", "?limit=1"] {
        let (status, answer) = list(&h, good).await;
        assert_eq!(status, 200, "{good}: {answer}");
    }
}

/// A server deletes the sign-in entries past its retention as it starts, as it does the
/// calls': a second server on the same database with no retention at all empties the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_prunes_sign_in_entries_past_its_retention() {
    let h = Harness::start(TestBackend::Sqlite)
        .await
        .expect("SQLite starts");
    let agent = h.new_agent().await;
    started(&h.server.store, agent, "api_token", STATE).await;
    let (_, page) = list(&h, "?kind=sign_in").await;
    assert_eq!(page["entries"].as_array().unwrap().len(), 1, "{page}");
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
            if status == 200 && page["entries"] == json!([]) {
                Ok(())
            } else {
                Err(page)
            }
        })
        .await;
    replica.shutdown().await;
}
