//! The engine against real third-party MCP servers, at pinned versions (`cargo xtask test`
//! installs them): `@modelcontextprotocol/server-everything` from npm (a revision from before
//! 2026-07-28, through `initialize`) over stdio, and a server on the official Python SDK
//! (`mcp` from PyPI, the current revision) over stdio and streamable HTTP.

use crate::support;

use std::{
    io::Write,
    path::{Path, PathBuf},
    time::Duration,
};

use ctxsync_agent_diagnostics::Engine;
use ctxsync_mcp_model::{Report, ServerReport};
use serde_json::{Value, json};
use support::*;

/// Names the server's executable; otherwise `<workspace>/target/tools/...` is used.
const EVERYTHING_ENV: &str = "CTXSYNC_EVERYTHING_SERVER";
/// Names a Python interpreter that has the `mcp` package; otherwise the one in
/// `<workspace>/target/tools/py` is used.
const PYTHON_ENV: &str = "CTXSYNC_PYTHON_MCP";

/// A Node.js or Python server's cold start is outside this project's control and, on a
/// loaded two-core CI machine, once exceeded the fixture tests' 10 s: the bound is generous.
const COLD_START_TIMEOUT: Duration = Duration::from_secs(60);

fn tools_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/tools")
}

/// The executable `env` names, else `default`. When neither exists, `None` after saying
/// so: a missing server fails the test in CI and is skipped, loudly, elsewhere.
fn installed(test: &str, what: &str, env: &str, default: PathBuf) -> Option<PathBuf> {
    let path = std::env::var_os(env).map_or(default, PathBuf::from);
    if path.is_file() {
        return Some(path);
    }
    let message =
        format!("{what} is not installed: set {env} or run `cargo xtask test`, which installs it");
    assert!(std::env::var_os("CI").is_none(), "{message}");
    // Straight to the process's stderr: the test harness captures eprintln! of passing tests.
    let _ = writeln!(
        std::io::stderr().lock(),
        "\n!!!!! SKIPPED {test}: {message} !!!!!\n"
    );
    None
}

async fn discover(servers: Value) -> Report {
    let ws = Workspace::new();
    ws.write_servers(servers);
    let mut config = ws.engine_config();
    config.connect_timeout = COLD_START_TIMEOUT;
    // A cold interpreter may take seconds to answer the probe; silence is not the question here.
    config.discover_probe_timeout = COLD_START_TIMEOUT / 2;
    let engine = Engine::start(config);
    let mut rx = engine.subscribe();
    // The connect timeout ends the wait with a terminal result; the margin is for the report.
    let report = tokio::time::timeout(
        COLD_START_TIMEOUT + PATIENCE,
        rx.wait_for(|r| r.phase == ctxsync_mcp_model::ReportPhase::Complete),
    )
    .await
    .expect("discovery reaches a terminal result within the connect timeout")
    .expect("the engine is running")
    .clone();
    engine.close().await;
    (*report).clone()
}

fn connected<'a>(report: &'a Report, name: &str, revision: &str) -> &'a ServerReport {
    let server = server(report, name);
    assert!(server.connected, "{server:#?}");
    let details = server.details.as_ref().expect("details");
    assert_eq!(details.protocol_version, revision, "{details:#?}");
    for tool in server.tools.iter() {
        assert!(tool.input_schema.is_object(), "{tool:?}");
    }
    server
}

fn everything_server(test: &str) -> Option<PathBuf> {
    let default = tools_dir().join("node_modules/.bin/mcp-server-everything");
    installed(
        test,
        "@modelcontextprotocol/server-everything",
        EVERYTHING_ENV,
        default,
    )
}

#[tokio::test]
async fn discovers_the_everything_server() {
    let Some(server_path) = everything_server("discovers_the_everything_server") else {
        return;
    };
    let report = discover(json!({"everything": {"command": server_path, "args": ["stdio"]}})).await;
    // It predates 2026-07-28: `server/discover` is refused and `initialize` follows.
    let everything = connected(&report, "everything", "2025-11-25");
    let names = tool_names(everything);
    assert!(names.contains(&"echo"), "{names:?}");
    assert!(names.len() >= 5, "{names:?}");
    let details = everything.details.as_ref().expect("details");
    assert_eq!(details.name, "mcp-servers/everything", "{details:#?}");
    assert!(details.instructions.is_some(), "{details:#?}");
}

fn python(test: &str) -> Option<PathBuf> {
    let default = tools_dir().join("py/bin/python");
    installed(test, "a Python with the mcp package", PYTHON_ENV, default)
}

fn python_server() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/servers/python_sdk.py")
}

fn assert_python_server(report: &Report, name: &str) {
    // The current revision, through `server/discover`.
    let server = connected(report, name, "2026-07-28");
    assert_eq!(tool_names(server), ["add", "lookup"]);
    let details = server.details.as_ref().expect("details");
    assert_eq!(details.name, "ctxsync-interop", "{details:#?}");
    assert_eq!(details.title.as_deref(), Some("ctxsync interop server"));
    assert_eq!(
        details.instructions.as_deref(),
        Some("Call lookup with a key.")
    );
    // Every optional part of a tool definition, as the SDK sends it.
    let lookup = &server.tools[1];
    assert_eq!(lookup.title, "Look up a key", "{lookup:#?}");
    let hints = lookup.annotations.as_ref().expect("annotations");
    assert_eq!(
        (hints.read_only_hint, hints.open_world_hint),
        (Some(true), Some(false))
    );
    let output = lookup.output_schema.as_ref().expect("an output schema");
    assert!(output["properties"]["value"].is_object(), "{output}");
    assert_eq!(lookup.icons.len(), 1);
    assert_eq!(lookup.icons[0].mime_type, "image/png");
    assert_eq!(lookup.icons[0].sizes, ["16x16"]);
    assert_eq!(
        lookup.meta.as_ref().map(|m| &m["ui"]["resourceUri"]),
        Some(&json!("ui://interop/lookup"))
    );
}

#[tokio::test]
async fn discovers_a_python_sdk_server_over_stdio() {
    let Some(python) = python("discovers_a_python_sdk_server_over_stdio") else {
        return;
    };
    let report =
        discover(json!({"py": {"command": python, "args": [python_server(), "stdio"]}})).await;
    assert_python_server(&report, "py");
}

/// Starts a streamable HTTP server process on a free loopback port (`on_port` tells
/// `command` which) and waits until it listens: the process, and its MCP URL.
async fn serve_http(
    mut command: std::process::Command,
    on_port: impl FnOnce(&mut std::process::Command, u16),
) -> (Child, String) {
    // A free port: bound, read, released; the server binds it a moment later.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    on_port(&mut command, port);
    let child = Child(
        command
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the HTTP server"),
    );
    poll(format!("the server to listen on {port}"))
        .within(COLD_START_TIMEOUT)
        .every(Duration::from_millis(50))
        .until(|| async { tokio::net::TcpStream::connect(("127.0.0.1", port)).await })
        .await;
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

/// Kills the child when the test ends, however it ends.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn discovers_a_python_sdk_server_over_streamable_http() {
    let Some(python) = python("discovers_a_python_sdk_server_over_streamable_http") else {
        return;
    };
    let mut command = std::process::Command::new(python);
    command.arg(python_server());
    let (_child, url) = serve_http(command, |command, port| {
        command.args(["http", &port.to_string()]);
    })
    .await;
    let report = discover(json!({"py": {"type": "http", "url": url}})).await;
    assert_python_server(&report, "py");
}

#[tokio::test]
async fn discovers_the_everything_server_over_streamable_http() {
    let Some(server_path) =
        everything_server("discovers_the_everything_server_over_streamable_http")
    else {
        return;
    };
    let mut command = std::process::Command::new(server_path);
    command.arg("streamableHttp");
    let (_child, url) = serve_http(command, |command, port| {
        command.env("PORT", port.to_string());
    })
    .await;
    let report = discover(json!({"everything": {"type": "http", "url": url}})).await;
    // A legacy HTTP server answers the probe with HTTP 400 ("Server not initialized").
    let everything = connected(&report, "everything", "2025-11-25");
    assert!(tool_names(everything).contains(&"echo"));
}

/// An engine over `servers` once discovery is complete; the caller closes it.
async fn running_engine(servers: Value) -> (Engine, Workspace) {
    let ws = Workspace::new();
    ws.write_servers(servers);
    let mut config = ws.engine_config();
    config.connect_timeout = COLD_START_TIMEOUT;
    config.discover_probe_timeout = COLD_START_TIMEOUT / 2;
    let engine = Engine::start(config);
    let mut rx = engine.subscribe();
    tokio::time::timeout(
        COLD_START_TIMEOUT + PATIENCE,
        rx.wait_for(|r| r.phase == ctxsync_mcp_model::ReportPhase::Complete),
    )
    .await
    .expect("discovery reaches a terminal result within the connect timeout")
    .expect("the engine is running");
    (engine, ws)
}

/// Calls `tool` on `server` with a 30 s deadline and the default cap; the end and the
/// progress reports it relayed.
async fn call(
    engine: &Engine,
    server: &str,
    tool: &str,
    arguments: Value,
) -> (
    ctxsync_mcp_model::CallEnd,
    Vec<ctxsync_mcp_model::CallProgress>,
) {
    let (progress, mut reports) = tokio::sync::mpsc::channel(64);
    let spec = ctxsync_mcp_model::CallSpec {
        server: server.into(),
        tool: tool.into(),
        arguments: arguments.as_object().expect("an object").clone(),
        timeout: Duration::from_secs(30),
        max_result_bytes: ctxsync_agent_diagnostics::DEFAULT_MAX_RESULT_BYTES,
    };
    let end = engine
        .caller()
        .call(spec, progress, tokio_util::sync::CancellationToken::new())
        .await;
    let mut relayed = Vec::new();
    while let Ok(report) = reports.try_recv() {
        relayed.push(report);
    }
    (end, relayed)
}

fn result_text(end: &ctxsync_mcp_model::CallEnd) -> String {
    let result = end.result.as_ref().expect("a result");
    result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|block| block["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn calls_tools_on_the_everything_server() {
    let Some(server_path) = everything_server("calls_tools_on_the_everything_server") else {
        return;
    };
    let secret = "everything-secret-0c5e1d2b";
    let (engine, _ws) = running_engine(json!({"everything": {
        "command": server_path, "args": ["stdio"], "env": {"EVERYTHING_TOKEN": secret},
    }}))
    .await;
    use ctxsync_mcp_model::CallStatus;

    let (echo, _) = call(&engine, "everything", "echo", json!({"message": "hi"})).await;
    assert_eq!(echo.status, CallStatus::Complete, "{echo:?}");
    assert!(result_text(&echo).contains("hi"), "{echo:?}");

    // The TypeScript SDK reports progress when the request carries a progress token.
    let (long, progress) = call(
        &engine,
        "everything",
        "trigger-long-running-operation",
        json!({"duration": 0.3, "steps": 3}),
    )
    .await;
    assert_eq!(long.status, CallStatus::Complete, "{long:?}");
    assert!(!progress.is_empty(), "no progress relayed");
    assert_eq!(progress.last().unwrap().total, Some(3.0), "{progress:?}");

    // Its environment, with the entry's secret, comes back redacted.
    let (env, _) = call(&engine, "everything", "get-env", json!({})).await;
    assert_eq!(env.status, CallStatus::Complete, "{env:?}");
    let text = result_text(&env);
    assert!(text.contains("EVERYTHING_TOKEN"), "{text:.2000}");
    assert!(!text.contains(secret), "the secret came back");

    // An image block stays an image block within the cap.
    let (image, _) = call(&engine, "everything", "get-tiny-image", json!({})).await;
    assert_eq!(image.status, CallStatus::Complete, "{image:?}");
    let content = image.result.as_ref().unwrap()["content"].to_string();
    assert!(content.contains("\"image\""), "{content:.500}");

    let (missing, _) = call(&engine, "everything", "no-such-tool", json!({})).await;
    assert_eq!(missing.status, CallStatus::Refused, "{missing:?}");
    engine.close().await;
}

#[tokio::test]
async fn calls_tools_on_a_python_sdk_server() {
    let Some(python) = python("calls_tools_on_a_python_sdk_server") else {
        return;
    };
    let (engine, _ws) =
        running_engine(json!({"py": {"command": python, "args": [python_server(), "stdio"]}}))
            .await;
    use ctxsync_mcp_model::CallStatus;

    let (sum, _) = call(&engine, "py", "add", json!({"a": 2, "b": 3})).await;
    assert_eq!(sum.status, CallStatus::Complete, "{sum:?}");
    let result = sum.result.as_ref().unwrap();
    assert_eq!(
        result["structuredContent"],
        json!({"result": 5}),
        "{result}"
    );
    assert_eq!(result["isError"], json!(false), "{result}");

    let (entry, _) = call(&engine, "py", "lookup", json!({"key": "k"})).await;
    assert_eq!(entry.status, CallStatus::Complete, "{entry:?}");
    assert_eq!(
        entry.result.as_ref().unwrap()["structuredContent"],
        json!({"key": "k", "value": "K"})
    );

    // Arguments the tool's schema refuses: the SDK answers a tool error (isError).
    let (bad, _) = call(&engine, "py", "add", json!({"a": "x"})).await;
    assert!(
        bad.status == CallStatus::Error
            || bad
                .result
                .as_ref()
                .is_some_and(|r| r["isError"] == json!(true)),
        "{bad:?}"
    );
    engine.close().await;
}
