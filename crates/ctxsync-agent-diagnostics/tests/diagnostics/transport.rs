//! What HTTP MCP servers do to a client, and what the engine makes of it: a refusal of the
//! agent's credentials said in words and kept typed, an unreachable server, a session the
//! server lost, an event stream it closed before the answer, and the protocol revisions it
//! may choose.

use crate::support;

use ctxsync_agent_diagnostics::{AccessRefused, Engine};
use ctxsync_mcp_fixture::{FixtureConfig, serve_http};
use serde_json::json;
use support::*;

/// What every sentence promises: no Rust paths, generics or debug formatting.
fn assert_words(sentence: &str) {
    ctxsync_test_support::assert_in_words(sentence);
    for debug in ["Some(", "None", "Error {", "Transport ["] {
        assert!(!sentence.contains(debug), "{sentence}");
    }
}

#[tokio::test]
async fn refused_credentials_are_said_in_words_and_kept_typed() {
    let header = serve_http(
        FixtureConfig::new()
            .http()
            .require_header("x-api-key", "k-1"),
    )
    .await
    .expect("serve");
    let challenged = serve_http(FixtureConfig::new().http().deny_status(401))
        .await
        .expect("serve");
    let forbidden = serve_http(FixtureConfig::new().http().deny_status(403))
        .await
        .expect("serve");
    let unreachable = "http://127.0.0.1:1/mcp";
    let ws = Workspace::new();
    ws.write_servers(json!({
        "header": {"type": "http", "url": header.url()},
        "challenged": {"type": "http", "url": challenged.url()},
        "forbidden": {"type": "http", "url": forbidden.url()},
        "unreachable": {"type": "http", "url": unreachable},
    }));
    let engine = Engine::start(ws.engine_config());
    let report = complete(&engine).await;
    let error = |name: &str| {
        let server = server(&report, name);
        assert!(!server.connected, "{server:#?}");
        let error = server.error.clone().unwrap_or_default();
        assert_words(&error);
        error
    };
    for (name, url) in [("header", header.url()), ("challenged", challenged.url())] {
        let error = error(name);
        assert!(
            error.contains(&format!(
                "the server at {url} answered 401 Unauthorized: it needs a person to sign in"
            )),
            "{error}"
        );
    }
    let denied = error("forbidden");
    assert!(
        denied.contains(&format!(
            "the server at {} answered 403 Forbidden",
            forbidden.url()
        )),
        "{denied}"
    );
    let down = error("unreachable");
    assert!(
        down.contains(&format!("cannot reach the server at {unreachable}")),
        "{down}"
    );
    assert!(down.contains("check that it is running"), "{down}");

    let refused = engine.refused_access();
    assert_eq!(
        refused.get("header"),
        Some(&AccessRefused::Unauthorized { challenge: None })
    );
    let challenge = |refusal: Option<&AccessRefused>| match refusal {
        Some(
            AccessRefused::Unauthorized { challenge } | AccessRefused::Forbidden { challenge },
        ) => challenge.clone().unwrap_or_default(),
        _ => String::new(),
    };
    assert!(
        matches!(
            refused.get("challenged"),
            Some(AccessRefused::Unauthorized { .. })
        ),
        "{refused:?}"
    );
    assert!(challenge(refused.get("challenged")).starts_with("Bearer "));
    assert!(
        matches!(
            refused.get("forbidden"),
            Some(AccessRefused::Forbidden { .. })
        ),
        "{refused:?}"
    );
    assert!(challenge(refused.get("forbidden")).contains("insufficient_scope"));
    assert!(!refused.contains_key("unreachable"), "{refused:?}");
    // A 401 and a 403 naming `insufficient_scope` ask for a person's sign-in; a server
    // that is down does not.
    for (name, sign_in) in [
        ("header", true),
        ("challenged", true),
        ("forbidden", true),
        ("unreachable", false),
    ] {
        assert_eq!(
            server(&report, name).needs_authorization,
            sign_in,
            "{name}: {report:#?}"
        );
    }
    engine.close().await;
    for fixture in [header, challenged, forbidden] {
        fixture.shutdown().await;
    }
}

/// A connected server whose new entry is refused for want of a sign-in keeps no tools:
/// unlike any other failed reconnect, the older connection is not retained.
#[tokio::test]
async fn a_refused_reconnect_drops_the_tools_of_the_older_connection() {
    let guarded = serve_http(
        FixtureConfig::new()
            .http()
            .tools(2)
            .require_header("x-api-key", "k-1"),
    )
    .await
    .expect("serve");
    let ws = Workspace::new();
    let entry = |key: &str| json!({"guarded": {"type": "http", "url": guarded.url(), "headers": {"x-api-key": key}}});
    ws.write_servers(entry("k-1"));
    let engine = Engine::start(ws.engine_config());
    let report = complete(&engine).await;
    let before = server(&report, "guarded");
    assert!(
        before.connected && !before.needs_authorization,
        "{before:#?}"
    );
    assert_eq!(tool_names(before), ["tool_0", "tool_1"]);

    ws.write_servers(entry("k-2"));
    let report = engine.reload().await.expect("reload");
    let after = server(&report, "guarded");
    assert!(
        !after.connected && after.needs_authorization && after.tools.is_empty(),
        "{after:#?}"
    );
    assert!(after.warning.is_none(), "{after:#?}");
    assert_words(after.error.as_deref().unwrap_or_default());
    engine.close().await;
    guarded.shutdown().await;
}

/// A server that lost the session (HTTP 404 to a request naming it) is given a new session
/// once, and the request is sent again: the listing succeeds.
#[tokio::test]
async fn a_lost_session_is_started_again_once() {
    let forgetful = serve_http(FixtureConfig::new().http().tools(2).forget_session_once())
        .await
        .expect("serve");
    let ws = Workspace::new();
    ws.write_servers(json!({"forgetful": {"type": "http", "url": forgetful.url()}}));
    let engine = Engine::start(ws.engine_config());
    let report = complete(&engine).await;
    let forgetful_report = server(&report, "forgetful");
    assert!(forgetful_report.connected, "{forgetful_report:#?}");
    assert_eq!(tool_names(forgetful_report), ["tool_0", "tool_1"]);
    assert!(forgetful.forgot_a_session(), "the 404 was never sent");
    engine.close().await;
    forgetful.shutdown().await;
}

/// A server that answers `initialize` with a revision ctxsync does not know is refused in
/// words naming it; the known ones from 2025-03-26 on are accepted, over HTTP and stdio.
#[tokio::test]
async fn protocol_revisions_are_accepted_or_refused_in_words() {
    let known = ["2025-03-26", "2025-06-18", "2025-11-25"];
    let mut servers = serde_json::Map::new();
    let mut fixtures = Vec::new();
    for version in known.iter().chain(&["2025-01-01"]) {
        let config = FixtureConfig::new().protocol_version(*version);
        let http = serve_http(config.clone().http()).await.expect("serve");
        servers.insert(
            format!("http-{version}"),
            json!({"type": "http", "url": http.url()}),
        );
        servers.insert(format!("stdio-{version}"), fixture_entry(&config));
        fixtures.push(http);
    }
    let ws = Workspace::new();
    ws.write_servers(serde_json::Value::Object(servers));
    let engine = Engine::start(ws.engine_config());
    let report = complete(&engine).await;
    for transport in ["http", "stdio"] {
        for version in known {
            let server = server(&report, &format!("{transport}-{version}"));
            assert!(server.connected, "{server:#?}");
            let details = server.details.as_ref().expect("details");
            assert_eq!(details.protocol_version, version);
        }
        let unknown = server(&report, &format!("{transport}-2025-01-01"));
        assert!(!unknown.connected, "{unknown:#?}");
        let error = unknown.error.clone().unwrap_or_default();
        assert!(
            error.contains("chose MCP revision 2025-01-01, which ctxsync does not speak"),
            "{error}"
        );
        assert_words(&error);
    }
    engine.close().await;
    for fixture in fixtures {
        fixture.shutdown().await;
    }
}

/// A server whose event stream closes before the answer (SEP-1699: a priming event with an
/// id and `retry`, then a graceful close) is resumed with `GET` and `Last-Event-ID` after
/// the `retry` interval, and the answer arrives on the resumed stream.
#[tokio::test]
async fn a_closed_event_stream_is_resumed_after_the_servers_retry() {
    let cutting = serve_http(FixtureConfig::new().http().tools(2).close_stream_once())
        .await
        .expect("serve");
    let ws = Workspace::new();
    ws.write_servers(json!({"cutting": {"type": "http", "url": cutting.url()}}));
    let engine = Engine::start(ws.engine_config());
    let report = complete(&engine).await;
    let cutting_report = server(&report, "cutting");
    assert!(cutting_report.connected, "{cutting_report:#?}");
    assert_eq!(tool_names(cutting_report), ["tool_0", "tool_1"]);
    let waited = cutting
        .resumed_after()
        .expect("the stream was resumed with its last event id");
    // The server asked for 300 ms; sooner would not honour it.
    assert!(
        waited >= std::time::Duration::from_millis(300),
        "resumed after {waited:?}"
    );
    engine.close().await;
    cutting.shutdown().await;
}

/// An entry whose `oauth` block signs in with client credentials, at a server with no
/// authorization server: the failure says so in words, and never shows the secret.
#[tokio::test]
async fn a_failed_client_credentials_sign_in_is_said_in_words() {
    let plain = serve_http(FixtureConfig::new().http().tools(1))
        .await
        .expect("serve");
    let ws = Workspace::new();
    ws.write_servers(json!({
        "machine": {
            "type": "http",
            "url": plain.url(),
            "oauth": {"clientId": "c-1", "clientSecret": "cs-canary-7731", "grant": "client_credentials"},
        },
    }));
    let engine = Engine::start(ws.engine_config());
    let report = complete(&engine).await;
    let machine = server(&report, "machine");
    assert!(!machine.connected, "{machine:#?}");
    let error = machine.error.clone().unwrap_or_default();
    assert_words(&error);
    assert!(
        error.contains(&format!(
            "signing in to the server at {} with the client credentials in its \"oauth\" block failed",
            plain.url()
        )),
        "{error}"
    );
    assert!(
        !format!("{report:?}").contains("cs-canary-7731"),
        "{report:#?}"
    );
    engine.close().await;
    plain.shutdown().await;
}
