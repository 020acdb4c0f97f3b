//! The chat API's OpenAPI document: the committed copy is what the code generates, the
//! server serves it without a token, and schemathesis (a generic OpenAPI fuzzer, not
//! ctxsync's own) finds no 5xx answer and no answer outside the document.

use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use support::*;

/// Rewrites the committed copy instead of comparing with it.
const BLESS_ENV: &str = "CTXSYNC_BLESS_OPENAPI";
/// Generated examples per operation (the xtask fuzz run raises it).
const EXAMPLES_ENV: &str = "CTXSYNC_SCHEMATHESIS_EXAMPLES";
/// Requests the run must make at least (the xtask fuzz run raises it).
const MIN_REQUESTS_ENV: &str = "CTXSYNC_SCHEMATHESIS_MIN_REQUESTS";
/// The run's counts, under `target/test-artifacts`.
const SUMMARY_FILE: &str = "schemathesis.txt";

fn committed_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("openapi.json")
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v:?} is not a number"))
        })
        .unwrap_or(default)
}

#[test]
fn the_committed_document_is_the_generated_one() {
    let generated = ctxsync::http::api::openapi_document();
    let path = committed_path();
    if std::env::var_os(BLESS_ENV).is_some() {
        std::fs::write(&path, &generated).expect("write the committed document");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is stale: run `{BLESS_ENV}=1 cargo test -p ctxsync --test in_process openapi::` and commit it",
        path.display()
    );
}

#[test]
fn the_document_is_openapi_3_1_with_exact_schemas() {
    let doc: Value = serde_json::from_str(&ctxsync::http::api::openapi_document()).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    for route in [
        "/healthz",
        "/metrics",
        "/api/openapi.json",
        "/api/agents",
        "/api/agents/{id}",
        "/api/agents/{id}/token",
        "/api/agents/{id}/context",
        "/api/chats",
        "/api/chats/{id}",
        "/api/chats/{id}/agent",
        "/api/chats/{id}/turns",
        "/api/chats/{id}/turns/{turn}",
        "/api/chats/{id}/find-tools",
        "/api/chats/{id}/turns/{turn}/tool-calls",
        "/api/chats/{id}/turns/{turn}/tool-calls/{call_id}",
        "/api/tool-calls",
        "/api/audit",
        "/api/chats/{id}/context",
        "/api/chats/{id}/context/events",
        "/api/chats/{id}/link",
    ] {
        assert!(paths.contains_key(route), "{route} is not documented");
    }
    for (route, item) in paths {
        for (method, operation) in item.as_object().unwrap() {
            let responses = operation["responses"].as_object().unwrap();
            assert!(
                responses.keys().any(|code| code.starts_with('4')),
                "{method} {route} documents no error"
            );
            let open = route == "/healthz" || route == "/api/openapi.json";
            assert_eq!(
                operation.get("security").is_none(),
                open,
                "{method} {route}: security"
            );
        }
    }
    // Every object schema names its properties; the free-form ones are the servers' own
    // JSON (tool schemas, `_meta`) and this document itself.
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for name in [
        "ChatBody",
        "Panel",
        "TurnBody",
        "AgentSummary",
        "ErrorBody",
        "ToolCallRequest",
        "ToolCallBody",
        "ToolCallAuditPage",
        "ToolCallAuditEntry",
    ] {
        let schema = &schemas[name];
        assert!(
            schema["properties"].is_object() || schema["allOf"].is_array(),
            "{name}: {schema}"
        );
        assert!(
            schema["required"].is_array() || schema["allOf"].is_array(),
            "{name}"
        );
    }
    let agent = &schemas["AgentSummary"];
    assert!(
        agent["properties"].get("token").is_none(),
        "a listing never has a token"
    );
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer_token"]["scheme"],
        "bearer"
    );
}

/// Served at `/api/openapi.json` without a token, equal to the committed copy.
#[tokio::test]
async fn the_server_serves_the_document_without_a_token() {
    let h = Harness::start(TestBackend::Sqlite).await.expect("server");
    let response = h
        .http
        .get(h.url("/api/openapi.json"))
        .send()
        .await
        .expect("GET /api/openapi.json");
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let served = response.text().await.unwrap();
    assert_eq!(served, ctxsync::http::api::openapi_document());
    // The token still guards every route the document marks as secured.
    let (status, body) = {
        let r = h.http.get(h.url("/api/agents")).send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    };
    assert_eq!(status, 401, "{body}");
}

/// Schemathesis against a live server on embedded SQLite with small gate budgets, every
/// route but the event stream: no 5xx, no status, content type or body outside the
/// document, and at least the configured number of requests (counted from its HAR log).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_server_error_or_schema_violation() {
    let h = Harness::start_with(
        TestBackend::Sqlite,
        Duration::from_millis(200),
        Duration::from_millis(100),
    )
    .await
    .expect("server");
    seed_real_ids(&h).await;

    let examples = env_number(EXAMPLES_ENV, 16);
    let min_requests = env_number(MIN_REQUESTS_ENV, 200);
    let dir = tempfile::tempdir().unwrap();
    let har = dir.path().join("run.har");
    let st = python().with_file_name("st");
    let args = schemathesis_args(&h, examples, &har);
    let output = run_schemathesis(&st, &args, dir.path()).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let entries = har_entries(&har);
    let server_errors = entries
        .iter()
        .filter(|e| e["response"]["status"].as_u64().is_some_and(|s| s >= 500))
        .count();
    let summary = run_summary(&entries, server_errors, examples);
    print!("{summary}");
    // `cargo xtask test` prints this after the tests, so CI's log shows the counts.
    std::fs::write(artifact_dir().join(SUMMARY_FILE), &summary).expect("writing the summary");
    assert!(
        output.status.success(),
        "schemathesis failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert_eq!(server_errors, 0, "{stdout}");
    assert!(
        entries.len() as u64 >= min_requests,
        "schemathesis made {} requests, fewer than {min_requests}:\n{stdout}",
        entries.len()
    );
}

/// Real ids for the generator to find beside random ones: an agent with a snapshot, a
/// chat bound to it with a turn; and an audit entry of each kind (a call's end, a failed
/// sign-in), so the audit log's answers are checked against their schemas.
async fn seed_real_ids(h: &Harness) {
    let agent = h.new_agent().await;
    h.push(
        agent,
        "run-1",
        1,
        ctxsync_protocol::DiscoveryPhase::Complete,
        vec![
            config_file(),
            file("AGENTS.md", "# agents"),
            server("search", &[("find", "Finds things")]),
            failed_server("broken", "connection refused"),
        ],
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
    let turn = turn["turn_id"].as_str().unwrap();
    let path = format!("/api/chats/{chat}/turns/{turn}/tool-calls");
    let body =
        json!({ "call_id": "seed", "name": "find_tools", "arguments": { "queries": ["x"] } });
    let (status, call) = h.call(Method::POST, &path, Some(body)).await;
    assert_eq!(status, 200, "{call}");
    let sign_in = ctxsync_persistence::NewSignIn {
        agent,
        server_name: "search".into(),
        via: format!("chat:{chat}"),
        browser: None,
    };
    let id = h.server.store.request_sign_in(&sign_in).await.unwrap();
    let failed = h
        .server
        .store
        .sign_in_failed(id, "the agent did not answer in time");
    assert!(failed.await.unwrap());
}

/// The `st run` command line: the checks, what is left out and why, and the HAR report.
fn schemathesis_args(h: &Harness, examples: u64, har: &std::path::Path) -> Vec<String> {
    let schema_url = h.url("/api/openapi.json");
    let base_url = h.server.http_url();
    let auth = format!("Authorization: Bearer {}", h.server.api_token);
    vec![
        "run".into(),
        schema_url,
        "--url".into(),
        base_url,
        "-H".into(),
        auth,
        "--checks".into(),
        "not_a_server_error,status_code_conformance,content_type_conformance,\
         response_schema_conformance,response_headers_conformance"
            .into(),
        // The event stream never ends by itself: it has its own tests.
        "--exclude-path-regex".into(),
        "/events$".into(),
        // Its coverage phase trips a CPython 3.11 parser fault inside hypothesis (an
        // "AST constructor recursion depth mismatch" in the tool itself, not an answer of
        // ours); the generated phases cover every operation.
        "--phases".into(),
        "examples,fuzzing,stateful".into(),
        "--max-examples".into(),
        examples.to_string(),
        "--seed".into(),
        "20261203".into(),
        "--workers".into(),
        "2".into(),
        "--request-timeout".into(),
        "30".into(),
        "--no-color".into(),
        "--report".into(),
        "har".into(),
        "--report-har-path".into(),
        har.display().to_string(),
    ]
}

/// Runs `st` in `dir`, bounded to 10 minutes and killed if the test ends first.
async fn run_schemathesis(
    st: &std::path::Path,
    args: &[String],
    dir: &std::path::Path,
) -> std::process::Output {
    tokio::time::timeout(
        Duration::from_secs(600),
        tokio::process::Command::new(st)
            .args(args)
            .env("SCHEMATHESIS_HOOKS", "")
            .current_dir(dir)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("schemathesis finished within 10 minutes")
    .unwrap_or_else(|e| panic!("running {}: {e}", st.display()))
}

/// The HAR log's entries; none when the log is missing or unreadable (the assertions
/// then fail on the request count).
fn har_entries(har: &std::path::Path) -> Vec<Value> {
    let log: Value = serde_json::from_str(&std::fs::read_to_string(har).unwrap_or_default())
        .unwrap_or(Value::Null);
    log["log"]["entries"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The run's counts: totals, then requests per method and route.
fn run_summary(entries: &[Value], server_errors: usize, examples: u64) -> String {
    let mut per_route = std::collections::BTreeMap::<String, usize>::new();
    for entry in entries {
        let url = entry["request"]["url"].as_str().unwrap_or("");
        let path = url
            .split_once("://")
            .map_or(url, |(_, rest)| rest.find('/').map_or("", |i| &rest[i..]));
        let path = path.split('?').next().unwrap_or("");
        // Ids (UUIDs) folded, so each route counts once.
        let route = path
            .split('/')
            .map(|segment| {
                if segment.len() == 36 && segment.matches('-').count() == 4 {
                    "{id}"
                } else {
                    segment
                }
            })
            .collect::<Vec<_>>()
            .join("/");
        let method = entry["request"]["method"].as_str().unwrap_or("?");
        *per_route.entry(format!("{method} {route}")).or_default() += 1;
    }
    let mut summary = format!(
        "schemathesis: {} requests, {} with a 5xx answer, {} examples per operation\n",
        entries.len(),
        server_errors,
        examples
    );
    for (route, count) in &per_route {
        summary.push_str(&format!("  {count:>5} {route}\n"));
    }
    summary
}

/// Where a description (or an operation's summary) still carries rustdoc's link syntax:
/// `` [`Name`] ``, `[Name]`, `](path)` or a Rust path (`crate::…`, `Self::…`). The
/// document's readers are not reading rustdoc.
fn rustdoc_links(doc: &Value) -> Vec<String> {
    fn is_link(text: &str) -> bool {
        // `[Name]` or `` [`Name`] `` opening a word (so `a[i]` is no link).
        let bracketed_name = text.match_indices('[').any(|(at, _)| {
            let opens_word = !text[..at]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_');
            opens_word
                && text[at + 1..].split_once(']').is_some_and(|(name, _)| {
                    !name.is_empty()
                        && name
                            .chars()
                            .all(|c| c.is_alphanumeric() || matches!(c, '_' | ':' | '`'))
                })
        });
        bracketed_name
            || text.contains("](")
            || ["crate::", "Self::", "super::"]
                .iter()
                .any(|path| text.contains(path))
    }
    fn walk(value: &Value, path: &str, found: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (key, value) in map {
                    let here = format!("{path}/{key}");
                    match value {
                        Value::String(text)
                            if matches!(key.as_str(), "description" | "summary")
                                && is_link(text) =>
                        {
                            found.push(format!("{here}: {text}"));
                        }
                        _ => walk(value, &here, found),
                    }
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(item, &format!("{path}/{i}"), found);
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    walk(doc, "", &mut found);
    found
}

#[test]
fn descriptions_are_plain_text_without_rustdoc_links() {
    let doc: Value = serde_json::from_str(&ctxsync::http::api::openapi_document()).unwrap();
    let found = rustdoc_links(&doc);
    assert!(
        found.is_empty(),
        "rustdoc link syntax:\n{}",
        found.join("\n")
    );
    // The check itself finds each form.
    for text in [
        "at most [`MAX_MATCHES`].",
        "see [Outcome] for more",
        "[`wait`](crate::Gate::wait)",
        "as Self::run_id says",
    ] {
        assert_eq!(
            rustdoc_links(&json!({ "description": text })).len(),
            1,
            "{text}"
        );
    }
    assert!(rustdoc_links(&json!({ "description": "`null` in [0, 1] or `a[i]`" })).is_empty());
}

/// The chat and agent answers' `mcp_discovery` carries `pending_servers` while pending:
/// the one `DiscoveryWords` schema says so.
#[test]
fn discovery_words_document_their_pending_servers() {
    let doc: Value = serde_json::from_str(&ctxsync::http::api::openapi_document()).unwrap();
    let words = &doc["components"]["schemas"]["DiscoveryWords"];
    let pending = &words["properties"]["pending_servers"];
    assert_eq!(pending["type"], "array", "{words}");
    assert_eq!(
        pending["items"]["$ref"], "#/components/schemas/PendingServerWait",
        "{words}"
    );
    let required = words["required"].as_array().expect("required");
    assert!(
        !required.iter().any(|name| name == "pending_servers"),
        "left out when none is named: {words}"
    );
}
