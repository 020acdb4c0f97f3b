//! Agent Plugins packages through the engine: real packages on disk, real fixture servers.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use ctxsync_agent_diagnostics::Engine;
use ctxsync_mcp_fixture::FixtureConfig;
use serde_json::json;
use support::*;

const MANIFEST: &str = "https://agent-plugins.org/schemas/1.0.0/plugin.schema.json";
const MCP: &str = "https://agent-plugins.org/schemas/1.0.0/mcp.schema.json";

/// Writes a plugin package: its manifest (raw JSON) and, when given, its `mcpServers`.
fn package(root: &Path, manifest: &str, servers: Option<serde_json::Value>) {
    std::fs::create_dir_all(root.join("bin")).unwrap();
    std::fs::write(root.join("plugin.json"), manifest).unwrap();
    if let Some(servers) = servers {
        let mcp = json!({"$schema": MCP, "mcpServers": servers});
        std::fs::write(root.join("mcp.json"), mcp.to_string()).unwrap();
    }
}

/// An executable script at `path` that runs the fixture with `config`.
fn launcher(path: &Path, config: &FixtureConfig) {
    let args: Vec<String> = config
        .to_args()
        .iter()
        .map(|arg| format!("'{}'", arg.replace('\'', r"'\''")))
        .collect();
    let script = format!(
        "#!/bin/sh\nexec '{}' {}\n",
        fixture_bin().display(),
        args.join(" ")
    );
    std::fs::write(path, script).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[tokio::test]
async fn plugin_servers_run_with_an_allow_listed_environment_and_fail_alone() {
    let ws = Workspace::new();
    let plugins = ws.file(".agents/plugins");
    let kit = plugins.join("kit");
    package(
        &kit,
        &format!(r#"{{"$schema": "{MANIFEST}", "name": "kit", "surprise": 1}}"#),
        Some(json!({
            "local": {"type": "stdio", "command": "./bin/server", "env": {"MODE": "${PLUGIN_DATA}/m"}},
            "escape": {"type": "stdio", "command": "./bin/escape"},
            "parent": {"type": "stdio", "command": "../outside.sh"},
        })),
    );
    launcher(
        &kit.join("bin/server"),
        &FixtureConfig::new().tools(2).report_env(),
    );
    launcher(&ws.file("outside.sh"), &FixtureConfig::new().tools(1));
    std::os::unix::fs::symlink(ws.file("outside.sh"), kit.join("bin/escape")).unwrap();
    // A rejected manifest: nothing of this package may run.
    let broken = plugins.join("broken");
    package(
        &broken,
        r#"{"$schema": "https://agent-plugins.org/schemas/1.0.0/plugin.schema.json", "name": "Broken"}"#,
        Some(json!({"never": {"type": "stdio", "command": "./bin/server"}})),
    );
    launcher(&broken.join("bin/server"), &FixtureConfig::new().tools(1));

    let mut config = ws.engine_config();
    config
        .env
        .insert("CTXSYNC_TOKEN".into(), "ctx_agent_token_123".into());
    config
        .env
        .insert("WORKSPACE_DB_PASSWORD".into(), "hunter2".into());
    config.env.insert("LANG".into(), "C.UTF-8".into());
    config.injected_secrets = vec!["ctx_agent_token_123".into()];
    let data_root = config.plugin_data_dir.clone();
    let engine = Engine::start(config);
    let report = complete(&engine).await;

    let names: Vec<&str> = report.servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["kit/local"], "{report:#?}");
    let local = server(&report, "kit/local");
    assert!(local.connected, "{local:#?}");
    assert_eq!(local.plugin(), Some("kit"));
    assert_eq!(tool_names(local), ["report_env", "tool_0", "tool_1"]);
    let said = local
        .details
        .as_ref()
        .unwrap()
        .instructions
        .clone()
        .unwrap();
    let (cwd, env) = said.split_once(" env=").unwrap();
    let env: Vec<&str> = env.split(',').collect();
    for expected in ["PATH", "HOME", "LANG", "PLUGIN_ROOT", "PLUGIN_DATA", "MODE"] {
        assert!(env.contains(&expected), "{expected} missing from {env:?}");
    }
    for leaked in ["CTXSYNC_TOKEN", "WORKSPACE_DB_PASSWORD"] {
        assert!(!env.contains(&leaked), "{leaked} leaked into {env:?}");
    }
    let root = std::fs::canonicalize(&kit).unwrap();
    assert_eq!(cwd, format!("cwd={}", root.display()));
    // The data directory exists before the server starts, owner-only.
    let data: Vec<_> = std::fs::read_dir(&data_root).unwrap().collect();
    assert_eq!(data.len(), 1, "{data:?}");
    let mode = data[0]
        .as_ref()
        .unwrap()
        .metadata()
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);

    let outcome = |path: &Path| {
        report
            .config_outcomes
            .iter()
            .find(|o| o.path == path)
            .unwrap_or_else(|| panic!("no outcome for {path:?} in {report:#?}"))
    };
    let mcp_error = outcome(&kit.join("mcp.json")).error.clone().unwrap();
    assert!(
        mcp_error.starts_with("2 invalid server entries, not started"),
        "{mcp_error}"
    );
    assert!(
        mcp_error
            .contains("\"escape\": \"command\" \"./bin/escape\" resolves outside the plugin root"),
        "{mcp_error}"
    );
    assert!(
        mcp_error.contains("\"parent\": \"command\" \"../outside.sh\" must be"),
        "{mcp_error}"
    );
    let warning = outcome(&kit.join("plugin.json")).warning.clone().unwrap();
    assert_eq!(warning, "unknown field \"surprise\" ignored");
    let rejected = outcome(&broken.join("plugin.json")).error.clone().unwrap();
    assert!(
        rejected.starts_with("plugin rejected: invalid plugin name \"Broken\""),
        "{rejected}"
    );
    engine.close().await;
}

#[tokio::test]
async fn a_plugin_installed_later_is_found_by_the_poll() {
    let ws = Workspace::new();
    let mut config = ws.engine_config();
    config.watch = true;
    config.poll_interval = std::time::Duration::from_millis(50);
    let engine = Engine::start(config);
    let first = complete(&engine).await;
    assert!(first.servers.is_empty(), "{first:#?}");

    let kit = ws.file(".agents/plugins/kit");
    package(
        &kit,
        &format!(r#"{{"$schema": "{MANIFEST}", "name": "kit"}}"#),
        Some(json!({"local": {"type": "stdio", "command": "./bin/server"}})),
    );
    launcher(&kit.join("bin/server"), &FixtureConfig::new().tools(1));
    let mut rx = engine.subscribe();
    let report = wait_for(&mut rx, "the plugin's server", |r| {
        r.server("kit/local").is_some_and(|s| s.connected)
    })
    .await;
    assert_eq!(tool_names(server(&report, "kit/local")), ["tool_0"]);
    engine.close().await;
}
