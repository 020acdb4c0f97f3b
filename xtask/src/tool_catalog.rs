//! The catalog the find_tools retrieval benchmark searches: real MCP servers from npm and
//! PyPI, installed at pinned versions under `target/tools/catalog`, declared in one
//! workspace and discovered by the release `ctxsync discover --json`, so the benchmark
//! ranks exactly the tools an agent would publish for that workspace.
//!
//! Nothing here is tuned to the query set: the servers are the common ones people install,
//! taken whole, with every tool they list.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value, json};

/// An npm server: (name in `.mcp.json`, package at its pinned version, its binary, its
/// arguments, its environment). The credentials are placeholders: listing tools needs none,
/// and no tool is ever called.
type NpmServer = (
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static [(&'static str, &'static str)],
);

const NPM_SERVERS: &[NpmServer] = &[
    (
        "filesystem",
        "@modelcontextprotocol/server-filesystem@2026.8.31",
        "mcp-server-filesystem",
        &["{workspace}"],
        &[],
    ),
    (
        "memory",
        "@modelcontextprotocol/server-memory@2026.8.31",
        "mcp-server-memory",
        &[],
        &[("MEMORY_FILE_PATH", "{workspace}/memory.jsonl")],
    ),
    (
        "everything",
        "@modelcontextprotocol/server-everything@2026.8.31",
        "mcp-server-everything",
        &[],
        &[],
    ),
    (
        "sequential-thinking",
        "@modelcontextprotocol/server-sequential-thinking@2026.8.31",
        "mcp-server-sequential-thinking",
        &[],
        &[],
    ),
    (
        "github",
        "@modelcontextprotocol/server-github@2025.4.8",
        "mcp-server-github",
        &[],
        &[("GITHUB_PERSONAL_ACCESS_TOKEN", "placeholder")],
    ),
    (
        "gitlab",
        "@modelcontextprotocol/server-gitlab@2025.4.25",
        "mcp-server-gitlab",
        &[],
        &[("GITLAB_PERSONAL_ACCESS_TOKEN", "placeholder")],
    ),
    (
        "slack",
        "@modelcontextprotocol/server-slack@2025.4.25",
        "mcp-server-slack",
        &[],
        &[("SLACK_BOT_TOKEN", "placeholder"), ("SLACK_TEAM_ID", "T0")],
    ),
    (
        "puppeteer",
        "@modelcontextprotocol/server-puppeteer@2025.5.12",
        "mcp-server-puppeteer",
        &[],
        &[],
    ),
    (
        "playwright",
        "@playwright/mcp@0.0.86",
        "playwright-mcp",
        &[],
        &[],
    ),
    (
        "postgres",
        "@modelcontextprotocol/server-postgres@0.6.2",
        "mcp-server-postgres",
        // Port 1: nothing listens, and listing tools never connects.
        &["postgresql://127.0.0.1:1/none"],
        &[],
    ),
    (
        "notion",
        "@notionhq/notion-mcp-server@2.5.2",
        "notion-mcp-server",
        &[],
        &[],
    ),
    (
        "brave-search",
        "@modelcontextprotocol/server-brave-search@0.6.2",
        "mcp-server-brave-search",
        &[],
        &[("BRAVE_API_KEY", "placeholder")],
    ),
    (
        "context7",
        "@upstash/context7-mcp@4.1.1",
        "context7-mcp",
        &[],
        &[],
    ),
    (
        "google-maps",
        "@modelcontextprotocol/server-google-maps@0.6.2",
        "mcp-server-google-maps",
        &[],
        &[("GOOGLE_MAPS_API_KEY", "placeholder")],
    ),
];

/// PyPI servers: (name in `.mcp.json`, its binary).
const PYPI_SERVERS: &[(&str, &str)] = &[
    ("git", "mcp-server-git"),
    ("fetch", "mcp-server-fetch"),
    ("time", "mcp-server-time"),
];

/// The PyPI packages, pinned with the SDK they run on, so a new SDK release cannot change
/// the catalog between runs.
const PYPI_PACKAGES: &[&str] = &[
    "mcp-server-git==2026.10.19",
    "mcp-server-fetch==2026.10.24",
    "mcp-server-time==2026.10.19",
    super::PYTHON_MCP_PACKAGE,
];

/// Where the catalog lives under the repository root.
const DIR: &str = "target/tools/catalog";

/// Installs the servers (once per pinned list), discovers them with `ctxsync` (the release
/// binary at `ctxsync`) and returns the path of the discovery report. Fails, naming the
/// server, when any declared server did not connect: a partial catalog would change what
/// the benchmark measures without saying so.
pub(crate) fn assemble(root: &Path, ctxsync: &Path) -> Result<PathBuf> {
    install(root)?;
    let dir = root.join(DIR);

    let workspace = dir.join("workspace");
    std::fs::create_dir_all(&workspace)
        .with_context(|| format!("creating {}", workspace.display()))?;
    let workspace_text = workspace.to_str().context("target path is UTF-8")?;
    let fill = |text: &str| text.replace("{workspace}", workspace_text);
    let mut servers = Map::new();
    for (name, _, binary, args, env) in NPM_SERVERS {
        let env: Map<String, Value> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Value::String(fill(v))))
            .collect();
        servers.insert(
            (*name).to_owned(),
            json!({
                "command": dir.join("node/node_modules/.bin").join(binary),
                "args": args.iter().map(|a| fill(a)).collect::<Vec<_>>(),
                "env": env,
            }),
        );
    }
    for (name, binary) in PYPI_SERVERS {
        servers.insert(
            (*name).to_owned(),
            json!({ "command": dir.join("py/bin").join(binary) }),
        );
    }
    let config = json!({ "mcpServers": servers });
    std::fs::write(
        workspace.join(".mcp.json"),
        serde_json::to_string_pretty(&config)?,
    )
    .context("writing the catalog workspace's .mcp.json")?;

    eprintln!(
        "bench: discovering the tool catalog ({} servers)",
        servers.len()
    );
    let output = Command::new(ctxsync)
        // Failed servers are reported below, by name, rather than as discover's exit code.
        .args([
            "discover",
            "--json",
            "--allow-failures",
            "--mcp-timeout-ms",
            "60000",
        ])
        .arg("--workspace")
        .arg(&workspace)
        .current_dir(&workspace)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .context("running ctxsync discover on the catalog workspace")?;
    if !output.status.success() {
        bail!("ctxsync discover failed with {}", output.status);
    }
    let report: Value =
        serde_json::from_slice(&output.stdout).context("ctxsync discover printed no JSON")?;
    let listed = report["servers"]
        .as_array()
        .context("the discovery report has no servers")?;
    let mut failed = Vec::new();
    for name in servers.keys() {
        let server = listed.iter().find(|s| s["name"] == name.as_str());
        match server {
            Some(s) if s["connected"] == true => {}
            Some(s) => failed.push(format!("{name}: {}", s["error"].as_str().unwrap_or("?"))),
            None => failed.push(format!("{name}: not in the report")),
        }
    }
    if !failed.is_empty() {
        bail!(
            "catalog servers did not connect:\n{}",
            failed.join("\n").chars().take(4000).collect::<String>()
        );
    }
    let path = dir.join("report.json");
    std::fs::write(&path, &output.stdout).context("writing the catalog report")?;
    Ok(path)
}

/// Installs the catalog's npm and PyPI servers unless the pinned lists are there already
/// (CI does it beside the checks, long before the benchmarks run).
pub(crate) fn install(root: &Path) -> Result<()> {
    install_npm(root, &root.join(DIR))?;
    super::python_env(root, &format!("{DIR}/py"), PYPI_PACKAGES)
        .context("installing the catalog's PyPI MCP servers (needs python3 with venv and pip)")?;
    Ok(())
}

/// `npm install` of every npm server into `<dir>/node`, skipped when the stamp shows the
/// same pinned list. Install scripts are not run: none of these servers needs one to list
/// its tools, and puppeteer's would download a browser.
fn install_npm(root: &Path, dir: &Path) -> Result<()> {
    let prefix = dir.join("node");
    let stamp = prefix.join("ctxsync-packages.txt");
    let wanted: Vec<&str> = NPM_SERVERS
        .iter()
        .map(|(_, package, ..)| *package)
        .collect();
    let wanted_text = wanted.join("\n");
    if std::fs::read_to_string(&stamp).is_ok_and(|had| had == wanted_text) {
        return Ok(());
    }
    let _ = std::fs::remove_dir_all(&prefix);
    std::fs::create_dir_all(&prefix)?;
    let prefix_text = prefix.to_str().context("target path is UTF-8")?;
    let mut args = vec![
        "install",
        "--no-audit",
        "--no-fund",
        "--ignore-scripts",
        "--prefix",
        prefix_text,
    ];
    args.extend(&wanted);
    super::run(root, "npm".into(), &args)
        .context("installing the catalog's npm MCP servers (needs npm)")?;
    std::fs::write(&stamp, wanted_text).context("recording the npm packages installed")?;
    Ok(())
}
