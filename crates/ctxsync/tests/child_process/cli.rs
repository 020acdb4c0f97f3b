//! The command line end to end: `ctxsync discover` (JSON and table, exit codes for CI,
//! the current directory by default, no MCP SDK log lines without `--verbose`), `ctxsync agent
//! --no-mcp`, and the one clear line for a wrong flag, a missing or wrong token; an
//! unreachable server is retried, not fatal; JSON logs, `context --json`, `calls` and
//! shell completions; the demo's tool call, printed and listed on its page.

use crate::processes;

use std::process::Output;

use ctxsync_protocol::DiscoveryPhase;
use processes::{
    AgentProcess, FixtureWorkspace, Logs, MCP_TIMEOUT_MS, ServerProcess, TestBackend, WAIT,
    Workspace, ctxsync, database, wait_for_context, wait_for_log,
};

async fn output(command: &mut tokio::process::Command) -> Output {
    tokio::time::timeout(WAIT, command.output())
        .await
        .expect("the command finishes")
        .expect("running ctxsync")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn lines(bytes: &[u8]) -> Vec<String> {
    text(bytes)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

fn discover(workspace: &Workspace, json: bool, timeout_ms: &str) -> tokio::process::Command {
    let mut command = ctxsync();
    command
        .args(["discover", "--workspace"])
        .arg(workspace.path())
        .args(["--mcp-timeout-ms", timeout_ms]);
    if json {
        command.arg("--json");
    }
    command
}

#[tokio::test]
async fn discover_json_prints_a_complete_report() {
    let workspace = Workspace::with_servers(&[("tools", &["--tools", "2"]), ("hung", &["--hang"])]);
    let out = output(&mut discover(&workspace, true, "1500")).await;
    // A config error and failed servers fail the run, after the whole report is printed.
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let last = lines(&out.stderr).pop().unwrap_or_default();
    assert_eq!(
        last,
        "error: 1 MCP config file has an error and 2 MCP servers failed (the report above says \
         why; --allow-failures exits 0)"
    );
    ctxsync_test_support::assert_in_words(&last);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(report["phase"], "complete");
    let servers = report["servers"].as_array().unwrap();
    let names: Vec<&str> = servers
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hung", "missing", "tools"]);
    assert_eq!(servers[0]["connected"], false);
    let hung_error = servers[0]["error"].as_str().unwrap();
    assert!(hung_error.contains("no response within"), "{hung_error}");
    for server in servers {
        ctxsync_test_support::assert_in_words(server["error"].as_str().unwrap_or_default());
    }
    assert!(
        servers[1]["error"]
            .as_str()
            .unwrap()
            .contains("command not found")
    );
    assert_eq!(servers[2]["tools"].as_array().unwrap().len(), 2);
    let outcomes = report["config_outcomes"].as_array().unwrap();
    assert_eq!(outcomes.len(), 1);
    assert!(outcomes[0]["error"].as_str().unwrap().contains("\"bad\""));
    ctxsync_test_support::assert_in_words(outcomes[0]["error"].as_str().unwrap());
    processes::wait_until_gone(&workspace.fixture_pids()).await;
}

#[tokio::test]
async fn discover_prints_progress_and_a_table() {
    let workspace =
        Workspace::with_servers(&[("tools", &["--tools", "2"]), ("empty", &["--tools", "0"])]);
    // The failed "missing" server and the "bad" entry would fail the run; the flag relaxes it.
    let out = output(discover(&workspace, false, MCP_TIMEOUT_MS).arg("--allow-failures")).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = lines(&out.stdout);
    assert!(
        stdout[0].starts_with("SERVER") && stdout[0].contains("STATUS"),
        "{stdout:#?}"
    );
    let find = |name: &str| {
        stdout
            .iter()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no line for {name}: {stdout:#?}"))
            .split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    // SERVER PLUGIN STATUS TOOLS ...: `-` for a server no plugin declared.
    assert_eq!(find("tools")[1..4], ["-", "ok", "2"]);
    assert_eq!(find("empty")[1..4], ["-", "ok", "0"]);
    assert_eq!(
        find("missing")[1..6],
        ["-", "failed", "0", "command", "not"]
    );
    assert!(
        stdout
            .iter()
            .any(|l| l.contains(".mcp.json") && l.contains("error:")),
        "{stdout:#?}"
    );
    // stderr is not a terminal here: plain progress lines. The display samples the
    // latest progress, so a server that fails at once may already be counted in the
    // first line; what must hold is that counts of 3 are shown and never go backwards.
    let stderr = text(&out.stderr);
    let finished: Vec<usize> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("Starting MCP servers ("))
        .filter_map(|rest| rest.split_once("/3)"))
        .map(|(k, _)| k.parse().expect("a count"))
        .collect();
    assert!(!finished.is_empty(), "no progress lines: {stderr}");
    assert!(finished.is_sorted(), "progress went backwards: {stderr}");
    assert!(finished.iter().all(|&k| k <= 3), "{stderr}");
    assert!(
        !stderr.contains('\r'),
        "no redraws without a terminal: {stderr:?}"
    );
}

/// A stdio MCP server that sends a request before answering `initialize`, which the MCP
/// SDK logs as a warning quoting the message in its own debug notation.
const EARLY_REQUEST_SERVER: &str = r#"
import json, sys
def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()
for line in sys.stdin:
    message = json.loads(line)
    method, id = message.get("method"), message.get("id")
    if id is None:
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": "early", "method": "roots/list"})
        send({"jsonrpc": "2.0", "id": id, "result": {
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "early", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": id, "result": {"tools": [
            {"name": "ping", "inputSchema": {"type": "object"}}]}})
    else:
        send({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no such method"}})
"#;

/// `ctxsync discover` in `dir` without `--workspace`, with `flags`.
async fn discover_here(dir: &std::path::Path, flags: &[&str]) -> Output {
    output(
        ctxsync()
            .current_dir(dir)
            .args(["discover", "--mcp-timeout-ms", MCP_TIMEOUT_MS])
            .args(flags),
    )
    .await
}

/// Issue 49: `discover` gates a CI job. The workspace is the current directory unless
/// `--workspace` says otherwise; it exits 0 when every server connected (warnings too), 1
/// when a config file has an error or a server failed (0 again with `--allow-failures`),
/// and the MCP SDK's own log lines reach stderr only with `--verbose`.
#[tokio::test]
async fn discover_exit_codes_suit_ci_and_the_workspace_defaults_to_here() {
    let workspace = Workspace::new();
    workspace.write("early.py", EARLY_REQUEST_SERVER);
    let fixture = serde_json::json!({
        "command": env!("CARGO_BIN_EXE_ctxsync"),
        "args": ["mcp-fixture", "--tools", "1"],
    });
    // A working server, a server that logs an SDK warning, and an ignored key (a warning).
    workspace.write(
        ".mcp.json",
        serde_json::json!({
            "$schema": "https://example.com/schema.json",
            "mcpServers": {
                "tools": fixture,
                "early": {"command": "python3", "args": ["early.py"]},
            },
        })
        .to_string(),
    );
    let out = discover_here(&workspace.path(), &["--json"]).await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    for name in ["early", "tools"] {
        let server = report["servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {report}"));
        assert_eq!(server["connected"], true, "{report}");
    }
    let warning = report["config_outcomes"][0]["warning"].as_str().unwrap();
    assert!(warning.contains("\"$schema\""), "{warning}");
    assert!(
        !stderr.contains("rmcp") && !stderr.contains("JsonRpcRequest") && !stderr.contains("WARN"),
        "the SDK's lines stay out without --verbose: {stderr}"
    );
    // With --verbose they are there: the server above really makes the SDK warn.
    let out = discover_here(&workspace.path(), &["--verbose"]).await;
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("Received unexpected message"), "{stderr}");

    // A server that fails: exit 1 after the table; relaxed to 0 by the flag.
    workspace.write(
        ".mcp.json",
        serde_json::json!({"mcpServers": {"tools": fixture, "gone": {"command": processes::MISSING_COMMAND}}})
            .to_string(),
    );
    let out = discover_here(&workspace.path(), &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("SERVER"),
        "{}",
        text(&out.stdout)
    );
    let last = lines(&out.stderr).pop().unwrap_or_default();
    assert!(last.starts_with("error: 1 MCP server failed ("), "{last}");
    let out = discover_here(&workspace.path(), &["--allow-failures"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));

    // A JSON typo: exit 1, and the table says where the file broke.
    workspace.write(".mcp.json", "{\"mcpServers\": {\"tools\": {}\n\"x\": 1}}");
    let out = discover_here(&workspace.path(), &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("error: invalid JSON at line 2, column 1: expected `,` or `}`"),
        "{stdout}"
    );
    let last = lines(&out.stderr).pop().unwrap_or_default();
    assert!(
        last.starts_with("error: 1 MCP config file has an error ("),
        "{last}"
    );
    let out = discover_here(&workspace.path(), &["--allow-failures", "--json"]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));

    // --workspace still names another directory.
    let elsewhere = Workspace::new();
    let out = output(
        ctxsync()
            .current_dir(elsewhere.path())
            .args(["discover", "--workspace"])
            .arg(workspace.path()),
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "the broken workspace is read: {}",
        text(&out.stdout)
    );
}

#[tokio::test]
async fn without_mcp_the_agent_publishes_unspecified_and_no_run_id() {
    let store = database(TestBackend::Sqlite).await.unwrap();
    let agent = store.create_agent("e2e").await.unwrap();
    let logs = Logs::new();
    let server = ServerProcess::start(&store, &logs).await;
    let workspace = Workspace::with_servers(&[]);
    let mut process = AgentProcess::start(
        &logs,
        "agent",
        &server.url(),
        &workspace.path(),
        agent.token.expose(),
        &["--no-mcp"],
    );
    let context = wait_for_context(&store, agent.id, &logs, "a snapshot", |c| {
        c.snapshot.is_some()
    })
    .await;
    let snapshot = context.snapshot.as_ref().unwrap();
    assert_eq!(snapshot.phase, DiscoveryPhase::Unspecified);
    assert_eq!(snapshot.agent_run_id, None);
    assert_eq!(context.agent.agent_run_id, None);
    assert!(
        context
            .resources
            .iter()
            .all(|r| !r.source.starts_with("mcp:"))
    );
    assert!(context.resources.iter().any(|r| r.source == "AGENTS.md"));
    assert!(process.terminate().await.success());

    // The same server refuses a wrong token: one clear line that says how to get a new
    // one; the agent keeps running and retries only at its longest backoff (30 s).
    let mut wrong = AgentProcess::start(
        &logs,
        "wrong-token",
        &server.url(),
        &workspace.path(),
        "not-the-token-0123456789",
        &["--no-mcp"],
    );
    let log = wait_for_log(&logs, "wrong-token", "refused the agent token").await;
    let line = log
        .lines()
        .find(|l| l.contains("refused the agent token"))
        .unwrap();
    assert!(line.contains("ctxsync agents rotate"), "{line}");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let all = logs.read("wrong-token");
    assert!(
        !all.contains("not-the-token-0123456789") && !all.contains("panicked"),
        "{all}"
    );
    assert_eq!(
        all.matches("refused the agent token").count(),
        1,
        "said once: {all}"
    );
    assert!(wrong.terminate().await.success());
}

#[tokio::test]
async fn a_wrong_flag_or_a_missing_token_is_one_clear_line() {
    let out = output(ctxsync().args(["agent", "--bogus"])).await;
    assert!(!out.status.success());
    let stderr = lines(&out.stderr);
    assert!(
        stderr[0].starts_with("error: unexpected argument '--bogus'"),
        "{stderr:#?}"
    );

    let workspace = Workspace::new();
    let mut command = ctxsync();
    command
        .args(["agent", "--server", "http://127.0.0.1:9", "--workspace"])
        .arg(workspace.path());
    let out = output(&mut command).await;
    assert!(!out.status.success());
    let stderr = lines(&out.stderr);
    assert_eq!(stderr.len(), 1, "{stderr:#?}");
    assert!(
        stderr[0].starts_with("error: CTXSYNC_AGENT_TOKEN is not set"),
        "{stderr:#?}"
    );

    let out = output(ctxsync().args(["discover", "--workspace", "/nonexistent/ctxsync-e2e"])).await;
    assert!(!out.status.success());
    let stderr = lines(&out.stderr);
    assert_eq!(stderr.len(), 1, "{stderr:#?}");
    assert!(
        stderr[0].starts_with("error: workspace directory"),
        "{stderr:#?}"
    );
}

#[tokio::test]
async fn an_unreachable_server_is_retried_not_fatal() {
    // A port nobody listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let logs = Logs::new();
    let workspace = Workspace::new();
    let mut process = AgentProcess::start(
        &logs,
        "agent",
        &format!("http://127.0.0.1:{port}"),
        &workspace.path(),
        "some-token",
        &["--no-mcp"],
    );
    let log = wait_for_log(&logs, "agent", "cannot connect to the server").await;
    assert!(log.contains("retry_in"), "{log}");
    assert!(process.is_running(), "{log}");
    assert!(process.terminate().await.success());
}

#[tokio::test]
async fn json_logs_are_one_object_per_line_and_the_panel_prints_as_json() {
    let store = database(TestBackend::Sqlite).await.unwrap();
    let agent = store.create_agent("json").await.unwrap();
    let chat = store.create_chat(Some(agent.id)).await.unwrap();
    let logs = Logs::new();
    let mut server = ServerProcess::start_with(&store, &logs, &["--log-format", "json"]).await;

    let mut command = ctxsync();
    command
        .args(["context", "--json", "--chat", &chat.id.to_string()])
        .args(["--server", &server.http_url(), "--data-dir"])
        .arg(store.sqlite_data_dir().unwrap());
    let out = output(&mut command).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let panel: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(panel["discovery"]["state"], "unknown", "{panel:#}");

    let (status, _) = server.terminate().await;
    assert!(status.success());
    let log = logs.read("server");
    let events: Vec<serde_json::Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}")))
        .collect();
    assert!(events.len() >= 3, "{log}");
    for event in &events {
        for key in ["timestamp", "level", "target", "message"] {
            assert!(event[key].is_string(), "{key} in {event}");
        }
    }
    let listening = events
        .iter()
        .find(|e| e["message"] == "agent API listening")
        .unwrap_or_else(|| panic!("{log}"));
    assert_eq!(listening["level"], "INFO");
    assert_eq!(
        listening["grpc_addr"],
        server.addr.to_string(),
        "fields sit at the top level: {listening}"
    );
}

/// `ctxsync calls` against a server process: the audit log's page as JSON and as a table;
/// a bad flag or a value the server refuses is one clear line, as is a retention out of
/// bounds for `ctxsync server`.
#[tokio::test]
async fn calls_prints_the_audit_log_as_json_and_as_a_table() {
    use ctxsync_persistence::{CallAdmission, ChatTurnMode, NewToolCall, NewTurn};

    let store = database(TestBackend::Sqlite).await.unwrap();
    let agent = store.create_agent("audit").await.unwrap();
    let chat = store.create_chat(Some(agent.id)).await.unwrap().id;
    let turn = NewTurn {
        mode: ChatTurnMode::Default,
        outcome: serde_json::json!({}),
        tools: serde_json::json!([]),
        origin: None,
    };
    let turn = store.record_turn(chat, &turn).await.unwrap().id;
    // A turn without a recorded origin refuses every call: an end the log keeps.
    let call = NewToolCall {
        chat,
        turn,
        call_id: "c1".into(),
        name: "nope".into(),
        arguments: "{}".into(),
        timeout_ms: 1_000,
    };
    let admission = store.admit_tool_call(&call).await.unwrap();
    assert!(
        matches!(admission, Some(CallAdmission::Refused(_))),
        "{admission:?}"
    );
    let logs = Logs::new();
    let mut server = ServerProcess::start_with(&store, &logs, &[]).await;
    let calls = |extra: &[&str]| {
        let mut command = ctxsync();
        command
            .arg("calls")
            .args(extra)
            .args(["--server", &server.http_url(), "--data-dir"])
            .arg(store.sqlite_data_dir().unwrap());
        command
    };

    let out = output(&mut calls(&["--json", "--chat", &chat.to_string()])).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let page: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(page["calls"][0]["name"], "nope", "{page:#}");
    assert_eq!(page["calls"][0]["reason"], "not_in_turn", "{page:#}");
    assert_eq!(page["next_cursor"], serde_json::Value::Null);

    let out = output(&mut calls(&[])).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = lines(&out.stdout);
    assert!(table[0].starts_with("ENDED"), "{table:#?}");
    assert!(table[1].contains("refused/not_in_turn"), "{table:#?}");

    for (extra, expected) in [
        (
            &["--limit", "0"][..],
            "error: invalid value '0' for '--limit <N>'",
        ),
        (
            &["--agent", "x"][..],
            "error: the server answered 400 Bad Request: agent:",
        ),
    ] {
        let out = output(&mut calls(extra)).await;
        assert!(!out.status.success(), "{extra:?}");
        let stderr = lines(&out.stderr);
        assert!(stderr[0].starts_with(expected), "{extra:?}: {stderr:#?}");
    }
    assert!(server.terminate().await.0.success());

    let out = output(ctxsync().args(["server", "--tool-call-audit-days", "0"])).await;
    assert!(!out.status.success());
    let stderr = lines(&out.stderr);
    assert!(
        stderr[0].starts_with("error: invalid value '0' for '--tool-call-audit-days <DAYS>'"),
        "{stderr:#?}"
    );
}

#[tokio::test]
async fn completion_scripts_complete_subcommands_in_bash_and_cover_other_shells() {
    let script = output(ctxsync().args(["completions", "bash"])).await;
    assert!(script.status.success(), "{}", text(&script.stderr));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ctxsync.bash");
    std::fs::write(&path, &script.stdout).unwrap();
    // What bash does on `ctxsync ag<TAB>`: call the registered function with the words.
    let probe = format!(
        "source '{}' && complete -p ctxsync && COMP_WORDS=(ctxsync ag) COMP_CWORD=1 \
         COMP_LINE='ctxsync ag' COMP_POINT=10 && _ctxsync ctxsync ag ctxsync && \
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        path.display()
    );
    let out = output(tokio::process::Command::new("bash").args(["-c", &probe])).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines = lines(&out.stdout);
    assert!(
        lines[0].starts_with("complete ") && lines[0].ends_with(" ctxsync"),
        "{lines:?}"
    );
    let mut offered: Vec<&str> = lines[1..].iter().map(|l| l.trim()).collect();
    offered.sort_unstable();
    assert_eq!(offered, ["agent", "agents"]);

    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let out = output(ctxsync().args(["completions", shell])).await;
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        assert!(
            script.contains("discover") && script.contains("log-format"),
            "{shell}: {script}"
        );
    }
    let out = output(ctxsync().args(["completions", "tcsh"])).await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("invalid value 'tcsh'"),
        "{}",
        text(&out.stderr)
    );
}

/// Each non-empty line of `bytes` as a JSON object, or a panic naming the line.
fn json_objects(stream: &str, bytes: &[u8]) -> Vec<serde_json::Value> {
    lines(bytes)
        .iter()
        .map(
            |line| match serde_json::from_str::<serde_json::Value>(line) {
                Ok(object) if object.is_object() => object,
                _ => panic!("{stream}: not a JSON object: {line:?}"),
            },
        )
        .collect()
}

/// With JSON logs, every line the server writes, on stdout and stderr alike (containers
/// merge them), is one JSON object: its start-up lines, its shutdown, a usage error and
/// a failed start.
#[tokio::test]
async fn with_json_logs_every_line_of_both_streams_is_an_object() {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt};

    let data = tempfile::tempdir().unwrap();
    let mut command = ctxsync();
    command
        .args([
            "server",
            "--log-format",
            "json",
            "--grpc-addr",
            "127.0.0.1:0",
        ])
        .args(["--http-addr", "127.0.0.1:0", "--data-dir"])
        .arg(data.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = command.spawn().expect("spawning ctxsync server");
    let mut stdout = tokio::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut stderr = child.stderr.take().expect("stderr");
    // Read stderr all along, so a full pipe never blocks the server.
    let stderr = tokio::spawn(async move {
        let mut all = Vec::new();
        let _ = stderr.read_to_end(&mut all).await;
        all
    });
    let mut out = Vec::new();
    tokio::time::timeout(WAIT, async {
        loop {
            let mut line = String::new();
            if stdout.read_line(&mut line).await.expect("reading stdout") == 0 {
                panic!("the server ended early: {}", text(&out));
            }
            out.extend_from_slice(line.as_bytes());
            // SIGTERM at the first start-up line, before the server has printed the rest:
            // it must already be listening for it (drain, exit 0), and still print them.
            if line.contains("agent API (gRPC)") {
                break;
            }
        }
    })
    .await
    .expect("the server starts");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id().expect("running")).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("the server stops")
        .expect("waiting for the server");
    assert!(status.success(), "{status}");
    stdout.read_to_end(&mut out).await.expect("reading stdout");
    let err = stderr.await.expect("stderr reader");

    let printed = json_objects("stdout", &out);
    let messages: Vec<&str> = printed
        .iter()
        .map(|line| line["message"].as_str().unwrap_or_default())
        .collect();
    assert!(
        messages[0].starts_with("agent API (gRPC): http://127.0.0.1:"),
        "{messages:?}"
    );
    assert!(messages[1].starts_with("chat API (HTTP):"), "{messages:?}");
    for line in &printed {
        assert_eq!(line["level"], "INFO", "{line}");
        assert!(line["timestamp"].is_string(), "{line}");
    }
    let logged = json_objects("stderr", &err);
    assert!(
        logged.iter().any(|line| line["message"] == "stopped"),
        "{}",
        text(&err)
    );

    let usage = output(ctxsync().args(["server", "--log-format", "json", "--bogus"])).await;
    assert_eq!(usage.status.code(), Some(2));
    assert!(lines(&usage.stdout).is_empty(), "{}", text(&usage.stdout));
    let refused = json_objects("stderr", &usage.stderr);
    assert_eq!(refused.len(), 1, "{}", text(&usage.stderr));
    assert_eq!(refused[0]["level"], "ERROR");
    let message = refused[0]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("error: unexpected argument '--bogus'"),
        "{message}"
    );

    let missing = data.path().join("missing.pem");
    let mut command = ctxsync();
    command
        .args([
            "server",
            "--log-format",
            "json",
            "--grpc-addr",
            "127.0.0.1:0",
        ])
        .args(["--http-addr", "127.0.0.1:0", "--data-dir"])
        .arg(data.path())
        .arg("--tls-cert")
        .arg(&missing)
        .arg("--tls-key")
        .arg(&missing);
    let failed = output(&mut command).await;
    assert!(!failed.status.success());
    assert!(lines(&failed.stdout).is_empty(), "{}", text(&failed.stdout));
    let logged = json_objects("stderr", &failed.stderr);
    let last = logged.last().expect("a line");
    assert_eq!(last["level"], "ERROR", "{last}");
    assert!(
        last["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("error: ")),
        "{last}"
    );
}

/// `ctxsync demo` (issue 37): after its first turn it calls a tool of its docs server
/// through the chat API and prints the call's `model_text`; the page its one-time link
/// opens lists that call. SIGTERM then stops it cleanly.
#[tokio::test]
async fn the_demo_calls_a_tool_and_its_page_lists_the_call() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let mut demo = ctxsync()
        .arg("demo")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the demo starts");
    let mut stdout = BufReader::new(demo.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    let link = tokio::time::timeout(WAIT, async {
        while let Some(line) = stdout.next_line().await.unwrap() {
            printed.push(line.clone());
            if let Some((_, url)) =
                line.split_once("Web page (one-time link; it lists the tool call): ")
            {
                return url.to_owned();
            }
        }
        panic!(
            "the demo ended before printing its link:\n{}",
            printed.join("\n")
        );
    })
    .await
    .expect("the demo prints its link in time");
    let printed = printed.join("\n");
    assert!(
        printed.contains("Calling docs__search_docs through the chat API")
            && printed.contains("Tool call demo-call-1: complete in ")
            && printed
                .contains("model_text:\n  search_docs called with {\"query\":\"getting started\"}"),
        "{printed}"
    );

    // The link's button, as a browser presses it, then the page under its session.
    let (page_url, token) = link.split_once("?token=").unwrap();
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let exchanged = browser
        .post(format!("{page_url}/session"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(exchanged.status(), 303);
    let cookie = exchanged.headers()["set-cookie"].to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_owned();
    let page = browser
        .get(page_url)
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    assert!(
        page.contains(r#"/demo-call-1" data-status="complete"><code class="call-name">docs__search_docs</code>"#),
        "the page lists the demo's call:\n{page}"
    );
    assert!(
        !page.contains("getting started"),
        "never the call's arguments"
    );

    let pid = demo.id().expect("the demo runs").to_string();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status();
    let status = tokio::time::timeout(WAIT, demo.wait())
        .await
        .expect("the demo stops on SIGTERM")
        .unwrap();
    assert!(status.success(), "{status}");
}
