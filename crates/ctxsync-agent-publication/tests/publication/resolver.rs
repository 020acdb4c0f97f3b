//! The context resolver against real temp directories: which files become rows, their
//! statuses, the caps, symlink containment, config outcomes and MCP server rows.

use crate::support;

use std::path::PathBuf;

use ctxsync_agent_publication::{
    MAX_CONTEXT_BYTES, MAX_CONTEXT_RESOURCES, MAX_FILE_BYTES, Resolution, ScanConfig, resolve,
};
use ctxsync_mcp_model::{ConfigFileOutcome, Report, ReportPhase, ServerReport};
use ctxsync_protocol::{
    DiscoveryPhase, McpTool, Resource, ResourceBody, ResourceStatus, RunId, Snapshot, v1,
};
use serde_json::json;
use sha2::{Digest, Sha256};
use support::Workspace;

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn scan(ws: &Workspace) -> ScanConfig {
    ScanConfig {
        workspace_dir: ws.path(),
        ..ScanConfig::default()
    }
}

fn row<'a>(resolution: &'a Resolution, source: &str) -> &'a Resource {
    resolution
        .resources
        .iter()
        .find(|r| r.source == source)
        .unwrap_or_else(|| panic!("no row `{source}` in {:#?}", sources(resolution)))
}

fn sources(resolution: &Resolution) -> Vec<&str> {
    resolution
        .resources
        .iter()
        .map(|r| r.source.as_str())
        .collect()
}

/// Asserts a row's status and that its error contains `error` (or is unset for `None`).
fn check_row(resolution: &Resolution, source: &str, status: ResourceStatus, error: Option<&str>) {
    let r = row(resolution, source);
    assert_eq!(r.status, status, "status of {source}: {r:#?}");
    match error {
        None => assert_eq!(r.error, None, "error of {source}"),
        Some(needle) => {
            let got = r.error.as_deref().unwrap_or_default();
            assert!(
                got.contains(needle),
                "error of {source} is `{got}`, expected `{needle}`"
            );
        }
    }
}

fn wire_accepts(resolution: &Resolution) {
    let wire = v1::PushContextStateRequest::from(resolution.to_snapshot(
        1,
        RunId::new("run").as_ref(),
        true,
    ));
    if let Err(e) = Snapshot::try_from(wire) {
        panic!("the server would refuse this snapshot: {e}");
    }
}

fn tool(name: &str) -> McpTool {
    McpTool {
        name: name.into(),
        description: format!("{name} things"),
        input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        ..Default::default()
    }
}

fn server(name: &str, connected: bool, tools: Vec<McpTool>) -> ServerReport {
    ServerReport {
        name: name.into(),
        connected,
        tools: tools.into(),
        ..ServerReport::default()
    }
}

fn report(phase: ReportPhase, servers: Vec<ServerReport>) -> Report {
    Report {
        phase,
        servers,
        config_outcomes: Vec::new(),
        ..Default::default()
    }
}

#[test]
fn instruction_files_and_mcp_config_at_the_top_level() {
    let ws = Workspace::new();
    ws.write("AGENTS.md", "agents");
    ws.write("CLAUDE.md", "claude");
    ws.write(".cursorrules", "cursor");
    ws.write(
        ".mcp.json",
        r#"{"mcpServers": {"s": {"env": {"KEY": "SECRET-123"}}}}"#,
    );
    ws.write("README.md", "not context");
    ws.write("docs/AGENTS.md", "not top level");
    let resolution = resolve(&scan(&ws), None);

    assert_eq!(
        sources(&resolution),
        [".cursorrules", ".mcp.json", "AGENTS.md", "CLAUDE.md"]
    );
    let agents = row(&resolution, "AGENTS.md");
    assert_eq!(agents.status, ResourceStatus::Ok);
    assert_eq!(agents.content_hash, sha256_hex(b"agents"));
    assert_eq!(agents.size_bytes, 6);
    assert_eq!(
        agents.source_path.as_deref(),
        Some(ws.path().join("AGENTS.md").to_str().unwrap())
    );
    match &agents.body {
        ResourceBody::InstructionFile(body) => assert_eq!(body.content, "agents"),
        other => panic!("unexpected body {other:?}"),
    }

    let config = row(&resolution, ".mcp.json");
    let content = std::fs::read(ws.path().join(".mcp.json")).unwrap();
    assert_eq!(config.status, ResourceStatus::Ok);
    assert_eq!(config.body, ResourceBody::McpConfig, "never the content");
    assert_eq!(config.content_hash, sha256_hex(&content));
    assert_eq!(config.size_bytes, content.len() as u64);
    assert!(!format!("{resolution:?}").contains("SECRET-123"));

    assert_eq!(resolution.phase, DiscoveryPhase::Unspecified);
    assert_eq!(resolution.aggregate_hash.len(), 64);
    assert_eq!(resolution.snapshot_error, None);
}

#[test]
fn unchanged_resources_give_the_same_hash() {
    let ws = Workspace::new();
    ws.write("AGENTS.md", "one");
    ws.skill("skills", "pdf");
    let first = resolve(&scan(&ws), None);
    assert_eq!(first, resolve(&scan(&ws), None));

    // MCP rows (config files and servers) never take part in the aggregate hash.
    ws.write(".mcp.json", "{}");
    let servers = report(
        ReportPhase::Complete,
        vec![server("fs", true, vec![tool("read")])],
    );
    let with_mcp = resolve(&scan(&ws), Some(&servers));
    assert_eq!(with_mcp.aggregate_hash, first.aggregate_hash);
    assert_ne!(with_mcp.resources, first.resources);

    ws.write("AGENTS.md", "two");
    assert_ne!(
        resolve(&scan(&ws), None).aggregate_hash,
        first.aggregate_hash
    );
}

#[test]
fn oversize_files_are_hashed_without_content() {
    let ws = Workspace::new();
    let big = vec![b'a'; MAX_FILE_BYTES as usize + 1];
    ws.write("AGENTS.md", &big);
    ws.write("CLAUDE.md", vec![b'b'; MAX_FILE_BYTES as usize]);
    let resolution = resolve(&scan(&ws), None);

    check_row(
        &resolution,
        "AGENTS.md",
        ResourceStatus::Oversize,
        Some("65537 bytes"),
    );
    let agents = row(&resolution, "AGENTS.md");
    assert_eq!(agents.content_hash, sha256_hex(&big));
    assert_eq!(agents.size_bytes, big.len() as u64);
    assert_eq!(
        agents.body,
        ResourceBody::InstructionFile(Default::default())
    );
    check_row(&resolution, "CLAUDE.md", ResourceStatus::Ok, None);
    wire_accepts(&resolution);
}

#[test]
fn rows_beyond_500_are_excluded_with_a_snapshot_error() {
    let ws = Workspace::new();
    ws.write("AGENTS.md", "keep me");
    for i in 0..MAX_CONTEXT_RESOURCES + 4 {
        ws.skill("skills", &format!("s{i:04}"));
    }
    let resolution = resolve(&scan(&ws), None);

    assert_eq!(resolution.resources.len(), MAX_CONTEXT_RESOURCES + 5);
    let excluded: Vec<&str> = resolution
        .resources
        .iter()
        .filter(|r| r.status == ResourceStatus::Excluded)
        .map(|r| r.source.as_str())
        .collect();
    // Priority: instruction files first, then skills by name; the last five are out.
    assert_eq!(
        excluded,
        [
            "skills/s0499/SKILL.md",
            "skills/s0500/SKILL.md",
            "skills/s0501/SKILL.md",
            "skills/s0502/SKILL.md",
            "skills/s0503/SKILL.md"
        ]
    );
    check_row(&resolution, "AGENTS.md", ResourceStatus::Ok, None);
    let error = resolution.snapshot_error.as_deref().unwrap();
    assert!(
        error.contains("5 resources excluded") && error.contains("500"),
        "{error}"
    );
    wire_accepts(&resolution);
}

#[test]
fn content_beyond_2_mib_is_excluded() {
    let ws = Workspace::new();
    let chunk = "x".repeat(60 * 1024);
    ws.write("AGENTS.md", &chunk);
    for i in 0..40 {
        ws.write(
            &format!("skills/s{i:02}/SKILL.md"),
            format!("---\nname: s{i:02}\ndescription: d\n---\n{chunk}"),
        );
    }
    let resolution = resolve(&scan(&ws), None);

    let excluded = resolution
        .resources
        .iter()
        .filter(|r| r.status == ResourceStatus::Excluded)
        .count();
    assert!(excluded > 0 && excluded < 40, "{excluded} excluded");
    check_row(&resolution, "AGENTS.md", ResourceStatus::Ok, None);
    check_row(
        &resolution,
        "skills/s39/SKILL.md",
        ResourceStatus::Excluded,
        Some("2 MiB"),
    );
    let excluded_row = row(&resolution, "skills/s39/SKILL.md");
    assert_eq!(
        excluded_row.content_hash.len(),
        64,
        "excluded rows keep their hash"
    );
    let content: usize = resolution
        .resources
        .iter()
        .map(|r| match &r.body {
            ResourceBody::InstructionFile(b) => b.content.len(),
            ResourceBody::Skill(b) => b.meta.len(),
            _ => 0,
        })
        .sum();
    assert!(content <= MAX_CONTEXT_BYTES, "{content}");
    assert!(resolution.snapshot_error.unwrap().contains("2 MiB"));
}

#[test]
fn mcp_rows_are_capped_after_file_rows() {
    let ws = Workspace::new();
    ws.write("AGENTS.md", "instructions");
    for i in 0..MAX_CONTEXT_RESOURCES - 3 {
        ws.skill("skills", &format!("s{i:04}"));
    }
    // Servers sort before every file by name, yet files keep their place.
    let servers = (0..5)
        .map(|i| server(&format!("a{i}"), true, vec![tool("t")]))
        .collect();
    let resolution = resolve(&scan(&ws), Some(&report(ReportPhase::Complete, servers)));

    assert!(
        resolution
            .resources
            .iter()
            .filter(|r| !r.source.starts_with("mcp:"))
            .all(|r| r.status == ResourceStatus::Ok)
    );
    for (name, status) in [
        ("mcp:a0", ResourceStatus::Ok),
        ("mcp:a1", ResourceStatus::Ok),
        ("mcp:a2", ResourceStatus::Excluded),
        ("mcp:a4", ResourceStatus::Excluded),
    ] {
        let error = (status == ResourceStatus::Excluded).then_some("500");
        check_row(&resolution, name, status, error);
    }
    match &row(&resolution, "mcp:a3").body {
        ResourceBody::McpServer(body) => {
            assert_eq!(body.server_name, "a3");
            assert!(body.tools.is_empty(), "an excluded server sends no tools");
        }
        other => panic!("unexpected body {other:?}"),
    }
}

#[test]
fn skills_are_validated() {
    let ws = Workspace::new();
    ws.skill("skills", "pdf-tools");
    ws.skill(".agents/skills", "agent-skill");
    ws.skill(".claude/skills", "claude-skill");
    ws.write(
        "skills/mismatch/SKILL.md",
        "---\nname: other\ndescription: d\n---\n",
    );
    ws.write(
        "skills/Bad_Name/SKILL.md",
        "---\nname: Bad_Name\ndescription: d\n---\n",
    );
    ws.write("skills/no-front/SKILL.md", "# just markdown\n");
    ws.write("skills/unclosed/SKILL.md", "---\nname: unclosed\n");
    ws.write("skills/no-name/SKILL.md", "---\ndescription: d\n---\n");
    ws.write("skills/no-desc/SKILL.md", "---\nname: no-desc\n---\n");
    ws.write("skills/.hidden/SKILL.md", "---\nname: hidden\n---\n");
    ws.write("skills/README.md", "not a skill");
    std::fs::create_dir_all(ws.path().join("skills/empty-dir")).unwrap();
    ws.write("skills/nested/deeper/SKILL.md", "---\nname: deeper\n---\n");
    let resolution = resolve(&scan(&ws), None);

    check_row(
        &resolution,
        "skills/pdf-tools/SKILL.md",
        ResourceStatus::Ok,
        None,
    );
    check_row(
        &resolution,
        ".agents/skills/agent-skill/SKILL.md",
        ResourceStatus::Ok,
        None,
    );
    check_row(
        &resolution,
        ".claude/skills/claude-skill/SKILL.md",
        ResourceStatus::Ok,
        None,
    );
    match &row(&resolution, "skills/pdf-tools/SKILL.md").body {
        ResourceBody::Skill(body) => {
            assert_eq!(body.name, "pdf-tools");
            assert_eq!(body.description, "The pdf-tools skill.");
            assert!(body.meta.starts_with("---\nname: pdf-tools"));
        }
        other => panic!("unexpected body {other:?}"),
    }
    check_row(
        &resolution,
        "skills/mismatch/SKILL.md",
        ResourceStatus::Invalid,
        Some("`other` does not match its directory name `mismatch`"),
    );
    check_row(
        &resolution,
        "skills/Bad_Name/SKILL.md",
        ResourceStatus::Invalid,
        Some("not kebab-case"),
    );
    check_row(
        &resolution,
        "skills/no-front/SKILL.md",
        ResourceStatus::Invalid,
        Some("must start with a `---` line"),
    );
    check_row(
        &resolution,
        "skills/unclosed/SKILL.md",
        ResourceStatus::Invalid,
        Some("never closed"),
    );
    check_row(
        &resolution,
        "skills/no-name/SKILL.md",
        ResourceStatus::Invalid,
        Some("no `name`"),
    );
    check_row(
        &resolution,
        "skills/no-desc/SKILL.md",
        ResourceStatus::Ok,
        Some("no `description`"),
    );
    // An invalid skill still says what it is, without content.
    match &row(&resolution, "skills/mismatch/SKILL.md").body {
        ResourceBody::Skill(body) => {
            assert_eq!((body.name.as_str(), body.meta.as_str()), ("mismatch", ""));
        }
        other => panic!("unexpected body {other:?}"),
    }
    let all = sources(&resolution);
    assert!(
        !all.iter()
            .any(|s| s.contains("hidden") || s.contains("README") || s.contains("deeper")),
        "{all:?}"
    );
    assert_eq!(all.len(), 9, "{all:?}");
}

#[test]
fn symlinks_are_followed_only_inside_the_scan_root() {
    let outside = Workspace::new();
    let secret = outside.write("secret.md", "OUTSIDE-SECRET");
    outside.skill("skills", "escaped");
    let ws = Workspace::new();
    let inside = ws.write("docs/agents.md", "inside content");
    ws.symlink(&inside, "AGENTS.md");
    ws.symlink(&secret, "CLAUDE.md");
    ws.symlink(&ws.path().join("missing.md"), ".cursorrules");
    ws.symlink(&outside.path().join("skills/escaped"), "skills/escaped");
    ws.skill("real/linked", "linked");
    ws.symlink(&ws.path().join("real/linked/linked"), "skills/linked");
    ws.symlink(&outside.path().join("skills"), ".claude/skills");
    let resolution = resolve(&scan(&ws), None);

    check_row(&resolution, "AGENTS.md", ResourceStatus::Ok, None);
    check_row(
        &resolution,
        "CLAUDE.md",
        ResourceStatus::Invalid,
        Some("outside the scan root"),
    );
    check_row(
        &resolution,
        ".cursorrules",
        ResourceStatus::Unreadable,
        Some("does not exist"),
    );
    check_row(
        &resolution,
        "skills/escaped/SKILL.md",
        ResourceStatus::Invalid,
        Some("outside the scan root"),
    );
    check_row(
        &resolution,
        "skills/linked/SKILL.md",
        ResourceStatus::Ok,
        None,
    );
    check_row(
        &resolution,
        ".claude/skills",
        ResourceStatus::Invalid,
        Some("outside the scan root"),
    );
    let text = format!("{resolution:?}");
    assert!(!text.contains("OUTSIDE-SECRET") && !text.contains("The escaped skill"));
    assert_eq!(
        row(&resolution, "CLAUDE.md").content_hash,
        "",
        "nothing outside is even hashed"
    );
}

#[test]
fn non_utf8_and_non_regular_files() {
    let ws = Workspace::new();
    ws.write("AGENTS.md", [0xff, 0xfe, 0x00]);
    std::fs::create_dir_all(ws.path().join("CLAUDE.md")).unwrap();
    let resolution = resolve(&scan(&ws), None);
    check_row(
        &resolution,
        "AGENTS.md",
        ResourceStatus::Invalid,
        Some("not UTF-8"),
    );
    assert_eq!(row(&resolution, "AGENTS.md").size_bytes, 3);
    check_row(
        &resolution,
        "CLAUDE.md",
        ResourceStatus::Unreadable,
        Some("not a regular file"),
    );
}

#[test]
fn config_outcomes_apply_to_config_rows() {
    let ws = Workspace::new();
    let elsewhere = Workspace::new();
    ws.write(".mcp.json", "{}");
    let extra = elsewhere.write("extra.json", "{}");
    let warned = elsewhere.write("warned.json", "{}");
    let only_report = elsewhere.path().join("only-in-report.json");
    let scan = ScanConfig {
        workspace_dir: ws.path(),
        plugin_dirs: Vec::new(),
        mcp_config_paths: vec![
            extra.clone(),
            warned.clone(),
            elsewhere.path().join("absent.json"),
        ],
        ..ScanConfig::default()
    };
    let report = Report {
        phase: ReportPhase::Complete,
        servers: Vec::new(),
        config_outcomes: vec![
            ConfigFileOutcome {
                path: PathBuf::from(".mcp.json"), // relative to the workspace
                error: Some("entry `x`: neither command nor url".into()),
                warning: None,
            },
            ConfigFileOutcome {
                path: warned.clone(),
                error: None,
                warning: Some("server `fs` is also declared in .mcp.json; ignored".into()),
            },
            ConfigFileOutcome {
                path: only_report.clone(),
                error: Some("unreadable: permission denied".into()),
                warning: None,
            },
            // Already a row: no second row for the same source.
            ConfigFileOutcome {
                path: ws.path().join("./.mcp.json"),
                error: None,
                warning: Some("second note".into()),
            },
        ],
        ..Default::default()
    };
    let resolution = resolve(&scan, Some(&report));

    check_row(
        &resolution,
        ".mcp.json",
        ResourceStatus::Invalid,
        Some("neither command nor url; second note"),
    );
    check_row(
        &resolution,
        extra.to_str().unwrap(),
        ResourceStatus::Ok,
        None,
    );
    check_row(
        &resolution,
        warned.to_str().unwrap(),
        ResourceStatus::Ok,
        Some("ignored"),
    );
    let only = row(&resolution, only_report.to_str().unwrap());
    assert_eq!(only.body, ResourceBody::McpConfig);
    assert_ne!(only.status, ResourceStatus::Ok);
    assert!(only.error.as_deref().unwrap().contains("permission denied"));
    assert_eq!(resolution.resources.len(), 4, "{:?}", sources(&resolution));
}

#[test]
fn server_rows_from_the_report() {
    let ws = Workspace::new();
    let servers = vec![
        server("fs", true, vec![tool("read"), tool("write")]),
        server("empty", true, Vec::new()),
        ServerReport {
            warning: Some("reconnect with the updated configuration failed".into()),
            ..server("retained", true, vec![tool("old")])
        },
        ServerReport {
            error: Some("command not found: [redacted]".into()),
            ..server("broken", false, Vec::new())
        },
        server("silent", false, Vec::new()),
    ];
    let resolution = resolve(
        &scan(&ws),
        Some(&report(ReportPhase::Pending, servers.clone())),
    );

    assert_eq!(resolution.phase, DiscoveryPhase::Pending);
    check_row(&resolution, "mcp:fs", ResourceStatus::Ok, None);
    check_row(&resolution, "mcp:empty", ResourceStatus::Ok, None);
    check_row(
        &resolution,
        "mcp:retained",
        ResourceStatus::Ok,
        Some("reconnect with the updated"),
    );
    check_row(
        &resolution,
        "mcp:broken",
        ResourceStatus::Unreadable,
        Some("command not found"),
    );
    check_row(
        &resolution,
        "mcp:silent",
        ResourceStatus::Unreadable,
        Some("failed to connect"),
    );
    match &row(&resolution, "mcp:fs").body {
        ResourceBody::McpServer(body) => {
            assert_eq!(body.server_name, "fs");
            assert_eq!(body.tools, vec![tool("read"), tool("write")]);
        }
        other => panic!("unexpected body {other:?}"),
    }
    assert!(row(&resolution, "mcp:fs").source_path.is_none());

    // The hash covers name and tools, not the warning.
    let mut quiet = servers.clone();
    quiet[2].warning = None;
    let quiet = resolve(&scan(&ws), Some(&report(ReportPhase::Complete, quiet)));
    assert_eq!(quiet.phase, DiscoveryPhase::Complete);
    assert_eq!(
        row(&quiet, "mcp:retained").content_hash,
        row(&resolution, "mcp:retained").content_hash
    );
    let mut changed = servers;
    changed[2].tools = [&changed[2].tools[..], &[tool("new")]].concat().into();
    let changed = resolve(&scan(&ws), Some(&report(ReportPhase::Complete, changed)));
    assert_ne!(
        row(&changed, "mcp:retained").content_hash,
        row(&resolution, "mcp:retained").content_hash
    );
}

#[test]
fn tools_are_bounded_per_body_and_bad_schemas_replaced() {
    let ws = Workspace::new();
    let big_description = "d".repeat(100 * 1024);
    let tools: Vec<McpTool> = (0..4)
        .map(|i| McpTool {
            description: big_description.clone(),
            ..tool(&format!("t{i}"))
        })
        .chain([McpTool {
            input_schema: json!(null),
            ..tool("no-schema")
        }])
        .collect();
    let resolution = resolve(
        &scan(&ws),
        Some(&report(
            ReportPhase::Complete,
            vec![server("big", true, tools)],
        )),
    );
    let big = row(&resolution, "mcp:big");
    assert_eq!(big.status, ResourceStatus::Ok);
    let error = big.error.as_deref().unwrap();
    assert!(error.contains("2 of 5 tools left out"), "{error}");
    assert!(error.contains("not a JSON object"), "{error}");
    match &big.body {
        ResourceBody::McpServer(body) => {
            let names: Vec<&str> = body.tools.iter().map(|t| t.name.as_str()).collect();
            assert_eq!(names, ["t0", "t1", "no-schema"]);
            assert_eq!(body.tools[2].input_schema, json!({"type": "object"}));
        }
        other => panic!("unexpected body {other:?}"),
    }
    wire_accepts(&resolution);
}

#[test]
fn extra_roots_long_sources_and_missing_roots() {
    let ws = Workspace::new();
    let other = Workspace::new();
    other.write("AGENTS.md", "other root");
    // A root whose paths are longer than the wire allows for a source.
    let long = (0..5)
        .map(|i| format!("{i}{}", "d".repeat(230)))
        .collect::<Vec<_>>()
        .join("/");
    let long_root = ws.path().join(&long);
    std::fs::create_dir_all(&long_root).unwrap();
    std::fs::write(long_root.join("AGENTS.md"), "deep").unwrap();
    let scan = ScanConfig {
        workspace_dir: ws.path(),
        extra_roots: vec![
            other.path(),
            other.path(),
            long_root.clone(),
            ws.path().join("missing"),
        ],
        plugin_dirs: Vec::new(),
        mcp_config_paths: Vec::new(),
    };
    let resolution = resolve(&scan, None);

    let other_agents = other.path().join("AGENTS.md");
    check_row(
        &resolution,
        other_agents.to_str().unwrap(),
        ResourceStatus::Ok,
        None,
    );
    let flagged: Vec<&Resource> = resolution
        .resources
        .iter()
        .filter(|r| r.source.starts_with(&long[..100]))
        .collect();
    assert_eq!(flagged.len(), 1, "{:?}", sources(&resolution));
    assert_eq!(flagged[0].status, ResourceStatus::Invalid);
    assert!(
        flagged[0]
            .error
            .as_deref()
            .unwrap()
            .contains("1024-byte limit")
    );
    assert!(flagged[0].source.len() <= 1024);
    assert!(
        resolution
            .snapshot_error
            .as_deref()
            .unwrap()
            .contains("missing")
    );
    assert_eq!(
        resolution.resources.len(),
        2,
        "the duplicate root is read once"
    );
    wire_accepts(&resolution);
}

#[test]
fn plugin_packages_publish_their_skills_and_mcp_config_under_the_plugin() {
    let ws = Workspace::new();
    let manifest = r#"{"$schema": "https://agent-plugins.org/schemas/1.0.0/plugin.schema.json", "name": "kit"}"#;
    ws.write(".agents/plugins/kit/plugin.json", manifest);
    ws.write(
        ".agents/plugins/kit/mcp.json",
        r#"{"$schema": "https://agent-plugins.org/schemas/1.0.0/mcp.schema.json", "mcpServers": {"db": {"type": "stdio", "command": "npx", "env": {"K": "SECRET-456"}}}}"#,
    );
    ws.write(
        ".agents/plugins/kit/skills/deploy/SKILL.md",
        "---\nname: deploy\ndescription: Ship it\n---\nSteps.\n",
    );
    ws.write(
        ".agents/plugins/kit/skills/wrong/SKILL.md",
        "---\nname: other\ndescription: x\n---\n",
    );
    // Deeper descendants are not skills (the specification forbids a recursive search).
    ws.write(
        ".agents/plugins/kit/skills/deploy/nested/SKILL.md",
        "---\nname: nested\n---\n",
    );
    // A rejected manifest: its skills are never published.
    ws.write(".agents/plugins/bad/plugin.json", r#"{"name": "bad"}"#);
    ws.write(
        ".agents/plugins/bad/skills/hidden/SKILL.md",
        "---\nname: hidden\ndescription: x\n---\n",
    );
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(outside.path().join("s")).unwrap();
    ws.write(
        ".agents/plugins/leaky/plugin.json",
        manifest.replace("kit", "leaky"),
    );
    ws.symlink(outside.path(), ".agents/plugins/leaky/skills");

    let mut report = report(
        ReportPhase::Complete,
        vec![server("kit/db", true, vec![tool("query")])],
    );
    let plugins = ws.path().join(".agents/plugins");
    report.config_outcomes = vec![
        ConfigFileOutcome {
            path: plugins.join("kit/mcp.json"),
            error: Some("1 invalid server entry, not started: \"x\": \"type\" is missing".into()),
            warning: None,
        },
        ConfigFileOutcome {
            path: plugins.join("bad/plugin.json"),
            error: Some("plugin rejected: plugin.json has no \"$schema\"".into()),
            warning: None,
        },
    ];
    let scan = ScanConfig {
        plugin_dirs: vec![plugins.clone()],
        ..scan(&ws)
    };
    let resolution = resolve(&scan, Some(&report));
    assert_eq!(
        sources(&resolution),
        [
            ".agents/plugins/bad/plugin.json",
            "kit/mcp.json",
            "kit/skills/deploy/SKILL.md",
            "kit/skills/wrong/SKILL.md",
            "leaky/skills",
            "mcp:kit/db",
        ]
    );
    check_row(
        &resolution,
        "kit/skills/deploy/SKILL.md",
        ResourceStatus::Ok,
        None,
    );
    check_row(
        &resolution,
        "kit/skills/wrong/SKILL.md",
        ResourceStatus::Invalid,
        Some("does not match its directory name"),
    );
    check_row(
        &resolution,
        "kit/mcp.json",
        ResourceStatus::Invalid,
        Some("\"type\" is missing"),
    );
    let config = row(&resolution, "kit/mcp.json");
    assert!(matches!(config.body, ResourceBody::McpConfig));
    check_row(
        &resolution,
        ".agents/plugins/bad/plugin.json",
        ResourceStatus::Invalid,
        Some("plugin rejected"),
    );
    check_row(
        &resolution,
        "leaky/skills",
        ResourceStatus::Invalid,
        Some("its skills were not read"),
    );
    wire_accepts(&resolution);
    let wire = format!(
        "{:?}",
        resolution.to_snapshot(1, RunId::new("run").as_ref(), true)
    );
    assert!(
        !wire.contains("SECRET-456"),
        "a plugin's mcp.json body never leaves the agent"
    );
}
