//! Property tests: the front-matter parser is total, resolution does not depend on the order
//! anything was discovered in, and whatever the workspace and report hold, the snapshot
//! fits every wire limit the server enforces.

use crate::support;

use std::path::PathBuf;

use ctxsync_agent_publication::{Resolution, ScanConfig, parse_front_matter, resolve};
use ctxsync_mcp_model::{
    ConfigFileOutcome, PendingServer, Report, ReportPhase, ServerDetails, ServerReport,
};
use ctxsync_protocol::{McpIcon, McpTool, ResourceStatus, RunId, Snapshot, v1};
use proptest::prelude::*;
use serde_json::json;
use support::Workspace;

// ---- front matter --------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn front_matter_parser_never_panics(text in "\\PC{0,300}") {
        let _ = parse_front_matter(&text);
    }

    #[test]
    fn front_matter_parser_never_panics_on_yaml_like_text(
        body in "[a-z:'\"\\\\ \t#|>\n\r-]{0,300}",
        closed in any::<bool>(),
    ) {
        let text = format!("---\n{body}{}", if closed { "\n---\n" } else { "" });
        let _ = parse_front_matter(&text);
    }

    #[test]
    fn front_matter_round_trips_names_and_descriptions(
        name in "[a-z0-9]{1,10}(-[a-z0-9]{1,10}){0,3}",
        description in "[^\\n\\r\"\\\\]{0,80}",
        quote in any::<bool>(),
    ) {
        let rendered = if quote {
            format!("\"{description}\"")
        } else {
            description.clone()
        };
        let text = format!("---\nname: {name}\ndescription: {rendered}\n---\nbody\n");
        let parsed = parse_front_matter(&text);
        let expected = description.trim();
        // A plain value loses what YAML treats as a comment or a quote; only check it when
        // the text is plain.
        let plain = !expected.contains(" #") && !expected.contains("\t#")
            && !expected.starts_with(['#', '\'', '"', '|', '>']);
        // Unquoted text that YAML would read as a quote, block or comment is not plain.
        prop_assume!(quote || plain);
        prop_assert!(parsed.is_ok(), "{parsed:?} for {text:?}");
        let parsed = parsed.unwrap();
        prop_assert_eq!(parsed.get("name"), Some(name.as_str()));
        if quote {
            prop_assert_eq!(parsed.get("description"), Some(description.as_str()));
        } else if plain {
            prop_assert_eq!(parsed.get("description"), Some(expected));
        }
    }
}

// ---- discovery order -----------------------------------------------------------------

#[derive(Clone, Debug)]
struct ServerSpec {
    name: String,
    connected: bool,
    tools: usize,
    error: Option<String>,
    warning: Option<String>,
    always_load: bool,
}

fn server_spec() -> impl Strategy<Value = ServerSpec> {
    (
        "[a-d]{1,2}",
        any::<bool>(),
        0usize..4,
        proptest::option::of("[a-z ]{0,12}"),
        proptest::option::of("[a-z ]{0,12}"),
        any::<bool>(),
    )
        .prop_map(
            |(name, connected, tools, error, warning, always_load)| ServerSpec {
                name,
                connected,
                tools,
                error,
                warning,
                always_load,
            },
        )
}

fn outcome_spec() -> impl Strategy<Value = (usize, Option<String>, Option<String>)> {
    (
        0usize..3,
        proptest::option::of("[a-z]{1,8}"),
        proptest::option::of("[a-z]{1,8}"),
    )
}

fn to_outcome(spec: &ServerSpec) -> ServerReport {
    ServerReport {
        name: spec.name.clone(),
        connected: spec.connected,
        tools: (0..spec.tools)
            .map(|i| McpTool {
                name: format!("{}-t{i}", spec.name),
                description: "d".into(),
                input_schema: json!({"type": "object", "b": 1, "a": [i]}),
                ..Default::default()
            })
            .collect(),
        details: None,
        error: spec.error.clone(),
        warning: spec.warning.clone(),
        always_load: spec.always_load,
        // Some servers that did not connect ask for a sign-in.
        needs_authorization: !spec.connected && spec.tools % 2 == 1,
    }
}

const CONFIG_PATHS: [&str; 3] = [".mcp.json", "conf/extra.json", "conf/missing.json"];

/// Writes the files in the given order into a new workspace.
fn workspace(files: &[(String, String)]) -> Workspace {
    let ws = Workspace::new();
    for (path, content) in files {
        ws.write(path, content);
    }
    ws
}

/// Resources without their absolute paths, which differ between two temp directories.
fn portable(resolution: &Resolution) -> Resolution {
    let mut out = resolution.clone();
    for row in &mut out.resources {
        row.source_path = None;
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn resolution_is_independent_of_discovery_order(
        skills in proptest::collection::btree_set("[a-z]{1,6}", 0..8),
        instruction in proptest::collection::vec(any::<bool>(), 3),
        servers in proptest::collection::vec(server_spec(), 0..8),
        outcomes in proptest::collection::vec(outcome_spec(), 0..5),
        complete in any::<bool>(),
        seed in any::<u64>(),
    ) {
        let mut files: Vec<(String, String)> = skills
            .iter()
            .map(|s| (format!("skills/{s}/SKILL.md"), format!("---\nname: {s}\ndescription: x\n---\n")))
            .collect();
        for (present, name) in instruction.iter().zip(["AGENTS.md", "CLAUDE.md", ".cursorrules"]) {
            if *present {
                files.push((name.to_owned(), format!("content of {name}")));
            }
        }
        files.push((".mcp.json".into(), "{}".into()));
        files.push(("conf/extra.json".into(), "{}".into()));
        let report = Report {
            phase: if complete { ReportPhase::Complete } else { ReportPhase::Pending },
            pending: Vec::new(),
            servers: servers.iter().map(to_outcome).collect(),
            config_outcomes: outcomes
                .iter()
                .map(|(path, error, warning)| ConfigFileOutcome {
                    path: PathBuf::from(CONFIG_PATHS[*path]),
                    error: error.clone(),
                    warning: warning.clone(),
                })
                .collect(),
        };
        let mut shuffled = report.clone();
        shuffle(&mut shuffled.servers, seed);
        shuffle(&mut shuffled.config_outcomes, seed.rotate_left(17));
        let mut reordered_files = files.clone();
        shuffle(&mut reordered_files, seed.rotate_left(33));

        let (a, b) = (workspace(&files), workspace(&reordered_files));
        let scan = |ws: &Workspace| ScanConfig {
            workspace_dir: ws.path(),
            extra_roots: Vec::new(),
            plugin_dirs: Vec::new(),
            mcp_config_paths: vec![ws.path().join("conf/extra.json")],
        };
        let first = resolve(&scan(&a), Some(&report));
        let second = resolve(&scan(&b), Some(&shuffled));
        prop_assert_eq!(&first.aggregate_hash, &second.aggregate_hash);
        prop_assert_eq!(portable(&first), portable(&second));
    }
}

/// A deterministic Fisher–Yates shuffle driven by `seed`.
fn shuffle<T>(items: &mut [T], mut seed: u64) {
    for i in (1..items.len()).rev() {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let j = (seed >> 33) as usize % (i + 1);
        items.swap(i, j);
    }
}

// ---- self-bounding -------------------------------------------------------------------

/// A workspace and report built to break limits: long names, huge files, many rows,
/// long errors, heavy tool lists. The server side comes in shapes so that every limit is
/// reached without building gigabytes of test data.
#[derive(Clone, Debug)]
struct Extreme {
    agents_bytes: usize,
    skills: usize,
    skill_name_bytes: usize,
    deep_root: bool,
    servers: usize,
    server_name_bytes: usize,
    multibyte: bool,
    error_bytes: usize,
    tools: usize,
    tool_description_bytes: usize,
    outcome_error_bytes: usize,
}

/// (servers, name bytes, error bytes, tools per server, tool description bytes)
fn server_shape() -> impl Strategy<Value = (usize, usize, usize, usize, usize)> {
    prop_oneof![
        // Many servers with long names and errors: row and source limits.
        (
            450usize..1100,
            1000usize..5000,
            4000usize..5000,
            0usize..3,
            0usize..100
        ),
        // Few servers with heavy tool lists: per-body and total body limits.
        (
            1usize..25,
            1usize..40,
            0usize..30_000,
            40usize..60,
            5_000usize..10_000
        ),
        // One tool larger than a whole body.
        (
            1usize..3,
            1usize..40,
            0usize..100,
            1usize..5,
            300_000usize..310_000
        ),
        // A handful of ordinary servers.
        (0usize..5, 1usize..40, 0usize..100, 0usize..5, 0usize..100),
    ]
}

fn extreme() -> impl Strategy<Value = Extreme> {
    (
        prop_oneof![0usize..100, 65_000usize..70_000, 150_000usize..200_000],
        // File creation dominates this test's time; many rows come from servers too.
        prop_oneof![3 => 0usize..10, 1 => 495usize..510],
        1usize..250,
        any::<bool>(),
        server_shape(),
        any::<bool>(),
        prop_oneof![0usize..100, 5000usize..9000],
    )
        .prop_map(
            |(
                agents_bytes,
                skills,
                skill_name_bytes,
                deep_root,
                (servers, server_name_bytes, error_bytes, tools, tool_description_bytes),
                multibyte,
                outcome_error_bytes,
            )| Extreme {
                agents_bytes,
                skills,
                skill_name_bytes,
                deep_root,
                servers,
                server_name_bytes,
                multibyte,
                error_bytes,
                tools,
                tool_description_bytes,
                outcome_error_bytes,
            },
        )
}

/// `bytes` (or a little less) of text; multi-byte characters make cuts land mid-character
/// unless truncation respects UTF-8.
fn text(bytes: usize, multibyte: bool, seed: usize) -> String {
    if multibyte {
        let mut out = format!("{seed}-");
        out.push_str(&"é€".repeat(bytes / 5));
        out
    } else {
        let mut out = format!("{seed}-");
        out.push_str(&"x".repeat(bytes));
        out
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, max_shrink_iters: 64, ..ProptestConfig::default() })]

    #[test]
    fn every_snapshot_fits_the_wire_limits(case in extreme()) {
        let ws = Workspace::new();
        ws.write("AGENTS.md", "a".repeat(case.agents_bytes));
        ws.write(".mcp.json", "{}");
        for i in 0..case.skills {
            // Kebab-case names up to the file-name limit; every other one invalid.
            let name = format!("s{i}-{}", "k".repeat(case.skill_name_bytes));
            let declared = if i % 2 == 0 { name.clone() } else { format!("Other_{i}") };
            ws.write(
                &format!("skills/{name}/SKILL.md"),
                format!("---\nname: {declared}\ndescription: {}\n---\n", "d".repeat(i % 300)),
            );
        }
        let mut extra_roots = Vec::new();
        if case.deep_root {
            let deep = (0..5).map(|i| format!("{i}{}", "r".repeat(240))).collect::<Vec<_>>().join("/");
            let root = ws.path().join(deep);
            std::fs::create_dir_all(&root).unwrap();
            std::fs::write(root.join("AGENTS.md"), "deep").unwrap();
            std::fs::write(root.join("CLAUDE.md"), "deep").unwrap();
            extra_roots.push(root);
        }
        let servers = (0..case.servers)
            .map(|i| ServerReport {
                name: text(case.server_name_bytes, case.multibyte, i),
                connected: i % 3 != 0,
                tools: (0..case.tools)
                    .map(|t| McpTool {
                        name: format!("tool-{t}"),
                        description: text(case.tool_description_bytes, case.multibyte, t),
                        input_schema: if t % 7 == 3 { json!("not an object") } else { json!({"type": "object"}) },
                        // Full definitions on some tools, some of them past the field limits.
                        title: text(case.tool_description_bytes / 4, case.multibyte, t),
                        output_schema: (t % 2 == 0).then(|| json!({"type": "object", "description": text(case.tool_description_bytes, case.multibyte, t)})),
                        icons: vec![McpIcon { src: format!("data:image/png;base64,{}", "A".repeat(case.tool_description_bytes)), ..Default::default() }; t % 10],
                        meta: (t % 3 == 0).then(|| json!({"ui": text(case.tool_description_bytes * 2, case.multibyte, t)})),
                        ..Default::default() })
                    .collect(),
                error: (i % 2 == 0).then(|| text(case.error_bytes, case.multibyte, i)),
                warning: (i % 5 == 0).then(|| text(case.error_bytes, !case.multibyte, i)),
                details: (i % 2 == 1).then(|| ServerDetails {
                    protocol_version: text(case.error_bytes / 8, case.multibyte, i),
                    instructions: Some(text(case.error_bytes * 3, case.multibyte, i)),
                    ..Default::default()
                }),
                always_load: i % 4 == 1,
                needs_authorization: i % 6 == 0,
            })
            .collect();
        let report = Report {
            pending: (0..case.servers)
                .map(|i| PendingServer { name: text(case.server_name_bytes, case.multibyte, i), since: std::time::SystemTime::now() })
                .collect(),
            phase: ReportPhase::Pending,
            servers,
            config_outcomes: vec![ConfigFileOutcome {
                path: PathBuf::from(".mcp.json"),
                error: Some(text(case.outcome_error_bytes, case.multibyte, 0)),
                warning: Some(text(case.outcome_error_bytes, case.multibyte, 1)),
            }],
        };
        let scan = ScanConfig {
            workspace_dir: ws.path(),
            extra_roots,
            plugin_dirs: Vec::new(),
            mcp_config_paths: Vec::new(),
        };
        let resolution = resolve(&scan, Some(&report));
        let wire = v1::PushContextStateRequest::from(resolution.to_snapshot(u64::MAX >> 1, RunId::new("r".repeat(36)).as_ref(), true));
        let accepted = Snapshot::try_from(wire);
        prop_assert!(accepted.is_ok(), "the server would refuse it: {:?}", accepted.err());

        // Servers never push out a small instruction file.
        let agents = resolution.resources.iter().find(|r| r.source == "AGENTS.md").unwrap();
        if case.agents_bytes <= 65_536 {
            prop_assert_eq!(agents.status, ResourceStatus::Ok);
        } else {
            prop_assert_eq!(agents.status, ResourceStatus::Oversize);
        }
    }
}
