//! Agent Plugins end to end: packages built on disk, a real `ctxsync agent` process running
//! their MCP servers (this binary's `mcp-fixture`, behind a launcher script inside the
//! plugin) and publishing to a real server; every assertion is on what the chat API says.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use ctxsync_mcp_fixture::{FixtureConfig, ToolSpec};
use reqwest::Method;
use serde_json::{Value, json};
use support::*;

const CTXSYNC: &str = env!("CARGO_BIN_EXE_ctxsync");
const DEADLINE: Duration = Duration::from_secs(60);
const MANIFEST: &str = "https://agent-plugins.org/schemas/1.0.0/plugin.schema.json";
const MCP: &str = "https://agent-plugins.org/schemas/1.0.0/mcp.schema.json";
/// A secret of the workspace the agent holds in its environment.
const WORKSPACE_SECRET: &str = "WORKSPACE_DB_PASSWORD";

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A plugin package at `root`: its manifest (raw JSON), its `mcpServers`, its skills.
fn package(root: &Path, manifest: &str, servers: Value, skills: &[&str]) {
    write(&root.join("plugin.json"), manifest);
    write(
        &root.join("mcp.json"),
        &json!({"$schema": MCP, "mcpServers": servers}).to_string(),
    );
    for skill in skills {
        write(
            &root.join(format!("skills/{skill}/SKILL.md")),
            &format!("---\nname: {skill}\ndescription: The {skill} skill\n---\nSteps.\n"),
        );
    }
}

/// An executable script at `path` that runs this binary's fixture with `config`.
fn launcher(path: &Path, config: &FixtureConfig) {
    let args: Vec<String> = std::iter::once("mcp-fixture".to_owned())
        .chain(config.to_args())
        .map(|arg| format!("'{}'", arg.replace('\'', r"'\''")))
        .collect();
    write(
        path,
        &format!("#!/bin/sh\nexec '{CTXSYNC}' {}\n", args.join(" ")),
    );
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_packages_reach_the_chat_with_their_servers_skills_and_problems() {
    let h = Harness::start(TestBackend::Sqlite).await.unwrap();
    let (token, chat) = agent_and_chat(&h).await;

    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("workspace");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&workspace).unwrap();
    let Plugins { kit, broken } = write_plugins(dir.path(), &workspace, &home);

    let _agent = tokio::process::Command::new(CTXSYNC)
        .args(["agent", "--server", &h.server.agent_url(), "--workspace"])
        .arg(&workspace)
        .arg("--plugin-data-dir")
        .arg(dir.path().join("plugin-data"))
        .args(["--mcp-timeout-ms", "20000"])
        .env("CTXSYNC_AGENT_TOKEN", &token)
        .env(WORKSPACE_SECRET, "hunter2-secret")
        .env("HOME", &home)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the agent starts");

    let chat_json = wait_for_discovery(&h, &chat).await;
    let context = &chat_json["context"];
    check_only_the_good_server_runs(context, &kit);
    check_skills(context);
    check_config_rows(context, &kit, &broken);
    check_turn_offers_plugin_tools(&h, &chat).await;
    // Nothing of the secret reached what the chat shows.
    assert!(!chat_json.to_string().contains("hunter2-secret"));
}

/// A new agent (its token) and a chat bound to it (its id).
async fn agent_and_chat(h: &Harness) -> (String, String) {
    let (status, agent) = h
        .call(
            Method::POST,
            "/api/agents",
            Some(json!({"name": "plugins"})),
        )
        .await;
    assert_eq!(status, 201);
    let token = agent["token"].as_str().unwrap().to_owned();
    let (status, chat) = h
        .call(
            Method::POST,
            "/api/chats",
            Some(json!({"agent_id": agent["id"]})),
        )
        .await;
    assert_eq!(status, 201);
    (token, chat["id"].as_str().unwrap().to_owned())
}

/// The workspace plugins' roots, for the assertions on their rows.
struct Plugins {
    kit: std::path::PathBuf,
    broken: std::path::PathBuf,
}

/// Writes the packages under `workspace` and `home` (and a script outside both in `dir`).
fn write_plugins(dir: &Path, workspace: &Path, home: &Path) -> Plugins {
    let plugins = workspace.join(".agents/plugins");
    // A valid plugin: one good server beside an invalid entry and a command that escapes
    // the plugin root through a symlink.
    let kit = plugins.join("kit");
    package(
        &kit,
        &format!(r#"{{"$schema": "{MANIFEST}", "name": "kit", "version": "1.0.0"}}"#),
        json!({
            "db": {"type": "stdio", "command": "./bin/server", "env": {"DB_DIR": "${PLUGIN_DATA}/db"}},
            "bad": {"type": "stdio", "command": "./bin/server", "url": "https://example.com"},
            "escape": {"type": "stdio", "command": "./bin/escape"},
        }),
        &["deploy"],
    );
    launcher(
        &kit.join("bin/server"),
        &FixtureConfig::new()
            .tools(0)
            .tool(ToolSpec::new("query", "Run a query on the kit database"))
            .report_env(),
    );
    launcher(&dir.join("outside.sh"), &FixtureConfig::new().tools(1));
    std::os::unix::fs::symlink(dir.join("outside.sh"), kit.join("bin/escape")).unwrap();
    // A plugin whose manifest is invalid: none of its components may load.
    let broken = plugins.join("broken");
    package(
        &broken,
        &format!(r#"{{"$schema": "{MANIFEST}", "name": "Broken"}}"#),
        json!({"never": {"type": "stdio", "command": "./bin/server"}}),
        &["hidden"],
    );
    launcher(&broken.join("bin/server"), &FixtureConfig::new().tools(1));
    // A plugin in the home directory: skills only.
    package(
        &home.join(".agents/plugins/notes"),
        &format!(r#"{{"$schema": "{MANIFEST}", "name": "notes"}}"#),
        json!({}),
        &["jot"],
    );
    Plugins { kit, broken }
}

/// The chat once discovery is complete with servers and both skills, within DEADLINE.
async fn wait_for_discovery(h: &Harness, chat: &str) -> Value {
    let path = format!("/api/chats/{chat}");
    ctxsync_test_support::poll("discovery to complete with servers and both skills")
        .within(DEADLINE)
        .every(Duration::from_millis(100))
        .until(|| async {
            let (_, body) = h.call(Method::GET, &path, None).await;
            if body["mcp_discovery"]["phase"] == "complete"
                && body["context"]["mcp"]["servers"].is_array()
                && body["context"]["skills"]
                    .as_array()
                    .is_some_and(|s| s.len() >= 2)
            {
                Ok(body)
            } else {
                Err(body)
            }
        })
        .await
}

/// Servers: only the good one runs, attributed to its plugin, in the plugin root with
/// the plugin's environment and none of the agent's secrets.
fn check_only_the_good_server_runs(context: &Value, kit: &Path) {
    let servers = context["mcp"]["servers"].as_array().unwrap();
    let names: Vec<&str> = servers
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["kit/db"], "{context:#}");
    let db = &servers[0];
    assert_eq!(db["plugin"], "kit");
    assert_eq!(db["state"], "tools");
    let tools = db["tools"].as_array().unwrap();
    let report = tools
        .iter()
        .find(|t| t["name"] == "report_env")
        .expect("the report_env tool")["description"]
        .as_str()
        .unwrap();
    let (cwd, env) = report.split_once(" env=").unwrap();
    let env: Vec<&str> = env.split(',').collect();
    for expected in ["PATH", "HOME", "PLUGIN_ROOT", "PLUGIN_DATA", "DB_DIR"] {
        assert!(env.contains(&expected), "{expected} missing from {env:?}");
    }
    for leaked in ["CTXSYNC_AGENT_TOKEN", WORKSPACE_SECRET, "RUST_LOG"] {
        assert!(
            !env.contains(&leaked),
            "{leaked} reached the plugin: {env:?}"
        );
    }
    let root = std::fs::canonicalize(kit).unwrap();
    assert_eq!(cwd, format!("cwd={}", root.display()));
}

/// Skills: the plugin's and the home plugin's, never the rejected one's.
fn check_skills(context: &Value) {
    let skills: Vec<(&str, &str, &str)> = context["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap(),
                s["source"].as_str().unwrap(),
                s["plugin"].as_str().unwrap_or("-"),
            )
        })
        .collect();
    assert_eq!(
        skills,
        [
            ("deploy", "kit/skills/deploy/SKILL.md", "kit"),
            ("jot", "notes/skills/jot/SKILL.md", "notes"),
        ]
    );
}

/// Config rows (the panel names them by path): what was wrong, said where it was wrong.
fn check_config_rows(context: &Value, kit: &Path, broken: &Path) {
    let configs = context["mcp"]["configs"].as_array().unwrap();
    let config = |path: &Path| {
        configs
            .iter()
            .find(|c| c["path"] == path.to_str().unwrap())
            .unwrap_or_else(|| panic!("no config row {} in {configs:#?}", path.display()))
    };
    let kit_config = config(&kit.join("mcp.json"));
    assert_eq!(kit_config["ok"], false);
    let diagnostic = kit_config["diagnostic"].as_str().unwrap();
    assert!(
        diagnostic.contains("2 invalid server entries"),
        "{diagnostic}"
    );
    assert!(
        diagnostic
            .contains("\"escape\": \"command\" \"./bin/escape\" resolves outside the plugin root"),
        "{diagnostic}"
    );
    assert!(
        diagnostic.contains("\"bad\": field \"url\" is not allowed for type \"stdio\""),
        "{diagnostic}"
    );
    let rejected = config(&broken.join("plugin.json"));
    assert_eq!(rejected["ok"], false);
    let diagnostic = rejected["diagnostic"].as_str().unwrap();
    assert!(
        diagnostic.starts_with("plugin rejected: invalid plugin name \"Broken\""),
        "{diagnostic}"
    );
}

/// A turn offers the plugin's tools like any other server's.
async fn check_turn_offers_plugin_tools(h: &Harness, chat: &str) {
    let (status, turn) = h
        .call(
            Method::POST,
            &format!("/api/chats/{chat}/turns"),
            Some(json!({"mode": "default"})),
        )
        .await;
    assert_eq!(status, 200, "{turn}");
    let tool_names: Vec<&str> = turn["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        tool_names.iter().any(|n| n.ends_with("__query")),
        "{tool_names:?}"
    );
}
