//! `ctxsync demo`: the whole system on one machine in one command. Starts an embedded
//! server (SQLite in a temporary directory), registers an agent, writes a demo workspace
//! whose `.mcp.json` declares fast, slow, zero-tool, missing, hung and invalid MCP
//! servers, starts the agent as a real process, and runs a chat's first turn through the
//! HTTP API so the person sees the gate wait and then proceed. Then it calls one of the
//! turn's tools through the chat API, prints what the model would read of it
//! (`model_text`), and the web page it links to lists that call.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use ctxsync_chat_projection::store::load_agent_view;
use ctxsync_mcp_fixture::{FixtureConfig, ToolSpec};
use ctxsync_persistence::AgentId;
use serde_json::{Value, json};

use crate::server::{RunningServer, ServerConfig};
use crate::terminal::{for_terminal, json_for_terminal};

/// The demo's MCP connect timeout: the hung server fails after this, which ends
/// discovery; short so the whole demo finishes in seconds.
const DEMO_MCP_TIMEOUT: Duration = Duration::from_secs(4);
/// The tool the demo calls after its first turn: the docs server's search, which only
/// echoes its arguments (the fixture's tools have no effects).
const DEMO_TOOL: &str = "search_docs";
/// How long the demo waits for that call; it answers in milliseconds.
const DEMO_CALL_WAIT: Duration = Duration::from_secs(10);
/// How long the slow server takes to answer `initialize`.
const DEMO_SLOW_START: Duration = Duration::from_millis(1500);

/// `ctxsync demo`'s flags.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Finish after the first turn and its tool call (exit code 0) instead of serving
    /// until Ctrl-C; no page link is printed then, as nothing would serve it.
    #[arg(long)]
    pub exit: bool,
    /// Address of the web page and chat API (default: a free loopback port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub http_addr: std::net::SocketAddr,
}

/// Runs the demo in a temporary directory; with `--exit`, stops after the first turn,
/// else serves until Ctrl-C or SIGTERM.
pub async fn run(args: DemoArgs) -> Result<()> {
    let started = Instant::now();
    let scratch = tempfile_dir()?;
    let data_dir = scratch.join("data");
    let workspace = scratch.join("workspace");
    std::fs::create_dir_all(&data_dir)?;

    let server = crate::server::start(ServerConfig {
        http_addr: args.http_addr,
        ..ServerConfig::ephemeral(&data_dir)
    })
    .await?;
    println!("ctxsync demo");
    println!(
        "  server: agent API {}  chat API {}",
        server.agent_url(),
        server.http_url()
    );

    let agent = server
        .store
        .create_agent("demo-agent")
        .await
        .context("creating the demo agent")?;
    write_workspace(&workspace)?;
    println!("  workspace: {}", workspace.display());

    let mut agent_process = spawn_agent(&server, agent.token.expose(), &workspace, &data_dir)?;
    println!(
        "  agent: started (pid {})",
        agent_process.id().unwrap_or_default()
    );

    let http = reqwest::Client::new();
    let chat: Value = api(
        &http,
        &server,
        reqwest::Method::POST,
        "/api/chats",
        Some(json!({ "agent_id": agent.id.to_string() })),
    )
    .await?;
    let chat_id = chat["id"]
        .as_str()
        .context("the chat API returned no id")?
        .to_string();
    println!("  chat: {chat_id}\n");

    println!("First turn: waiting for the agent's MCP discovery to complete…");
    let progress = tokio::spawn(show_progress(
        server.store.clone(),
        agent.id,
        Instant::now(),
    ));
    let turn_started = Instant::now();
    let turn = api(
        &http,
        &server,
        reqwest::Method::POST,
        &format!("/api/chats/{chat_id}/turns"),
        Some(json!({ "mode": "default" })),
    )
    .await;
    progress.abort();
    let turn = turn?;
    println!(
        "First turn proceeds after {:.1}s.\n",
        turn_started.elapsed().as_secs_f64()
    );
    print_turn(&turn);
    call_a_tool(&http, &server, &chat_id, &turn).await?;

    let panel =
        crate::context::fetch_panel_text(&server.http_url(), &chat_id, &server.api_token).await?;
    println!("\nContext panel\n-------------\n{}", for_terminal(&panel));
    let chat_uuid = chat_id.parse().context("the chat id is a UUID")?;
    if args.exit {
        // The server stops with the demo: a link printed now could never be opened.
        println!("Web page: not served with --exit (run `ctxsync demo` without it to open it).");
        println!("Demo done in {:.1}s.", started.elapsed().as_secs_f64());
    } else {
        println!(
            "Web page (one-time link; it lists the tool call): {}",
            server.page_link(chat_uuid).await?
        );
        println!("Demo ready in {:.1}s.", started.elapsed().as_secs_f64());
        println!("Serving until Ctrl-C…");
        crate::server::wait_for_stop_signal().await;
    }
    stop_agent(&mut agent_process).await;
    server.shutdown().await;
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

fn tempfile_dir() -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "ctxsync-demo-{}-{}",
        std::process::id(),
        &crate::http::api_token::random_token()[..8]
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Writes the demo workspace: instructions, a skill, and MCP servers of every kind.
fn write_workspace(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir.join("skills/code-review"))?;
    std::fs::write(
        dir.join("AGENTS.md"),
        "# Demo workspace\n\nAnswer briefly. Use the docs server's tools to look things up.\n",
    )?;
    std::fs::write(
        dir.join("skills/code-review/SKILL.md"),
        "---\nname: code-review\ndescription: Review a change for bugs, missing tests and unclear names.\n---\n\nRead the diff twice before commenting.\n",
    )?;
    let exe = std::env::current_exe().context("locating the ctxsync executable")?;
    let exe = exe.to_string_lossy().into_owned();
    let fixture = |config: FixtureConfig| {
        let mut args = vec!["mcp-fixture".to_string()];
        args.extend(config.to_args());
        json!({ "command": exe, "args": args })
    };
    let docs = FixtureConfig::new()
        .tools(0)
        .tool(ToolSpec::new(
            "search_docs",
            "Search the project documentation for a phrase.",
        ))
        .tool(ToolSpec::new(
            "read_page",
            "Read one documentation page by its path.",
        ))
        .tool(ToolSpec::new(
            "list_sections",
            "List the documentation's sections.",
        ));
    let tickets = FixtureConfig::new()
        .tools(0)
        .init_delay(DEMO_SLOW_START)
        .tool(ToolSpec::new(
            "find_ticket",
            "Find tickets matching a query.",
        ))
        .tool(ToolSpec::new("comment", "Add a comment to a ticket."));
    let config = json!({
        "mcpServers": {
            "docs": fixture(docs),
            "tickets": fixture(tickets),
            "scratchpad": fixture(FixtureConfig::new().tools(0)),
            "search": { "command": "search-mcp-server-not-installed", "args": ["--stdio"] },
            "legacy-crm": fixture(FixtureConfig::new().hang()),
            "broken-entry": { "command": "node", "url": "http://127.0.0.1:9/mcp" }
        }
    });
    std::fs::write(
        dir.join(".mcp.json"),
        serde_json::to_string_pretty(&config)?,
    )?;
    Ok(())
}

fn spawn_agent(
    server: &RunningServer,
    token: &str,
    workspace: &Path,
    data_dir: &Path,
) -> Result<tokio::process::Child> {
    let exe = std::env::current_exe().context("locating the ctxsync executable")?;
    let log = std::fs::File::create(data_dir.join("agent.log"))?;
    tokio::process::Command::new(exe)
        .args(["agent", "--server", &server.agent_url(), "--workspace"])
        .arg(workspace)
        .args([
            "--mcp-timeout-ms",
            &DEMO_MCP_TIMEOUT.as_millis().to_string(),
        ])
        .env("CTXSYNC_AGENT_TOKEN", token)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .context("starting the agent process")
}

async fn stop_agent(child: &mut tokio::process::Child) {
    if let Some(pid) = child.id() {
        // SIGTERM lets the agent close its MCP servers; the kill below is the fallback.
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status();
    }
    if tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
}

async fn api(
    http: &reqwest::Client,
    server: &RunningServer,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Result<Value> {
    let mut request = http
        .request(method, format!("{}{path}", server.http_url()))
        .bearer_auth(&server.api_token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request
        .send()
        .await
        .with_context(|| format!("calling {path}"))?;
    let status = response.status();
    let value: Value = response
        .json()
        .await
        .with_context(|| format!("reading the answer of {path}"))?;
    if !status.is_success() {
        let error = value["error"].to_string();
        bail!("{path} answered {status}: {}", json_for_terminal(&error));
    }
    Ok(value)
}

/// Prints a line whenever the agent's committed discovery state changes.
async fn show_progress(store: ctxsync_persistence::Store, agent: AgentId, since: Instant) {
    let mut subscription = store.subscribe_agent(agent);
    let mut last = String::new();
    loop {
        if let Ok(view) = load_agent_view(&store, agent).await {
            let servers: Vec<String> = view
                .servers()
                .iter()
                .map(|s| {
                    let name = for_terminal(&s.name);
                    match (s.ok, s.tool_count) {
                        (false, _) if s.needs_authorization => format!("{name} needs sign-in"),
                        (false, _) => format!("{name} failed"),
                        (true, 0) => format!("{name} no tools"),
                        (true, n) => format!("{name} {n} tools"),
                    }
                })
                .collect();
            let line = format!(
                "discovery {}: {}",
                view.phase().as_str(),
                if servers.is_empty() {
                    "no server reported yet".into()
                } else {
                    servers.join(", ")
                }
            );
            if line != last {
                println!("  [{:>4.1}s] {line}", since.elapsed().as_secs_f64());
                last = line;
            }
        }
        if subscription.next().await.is_none() {
            return;
        }
    }
}

/// Calls [`DEMO_TOOL`] in the first turn through the chat API, as a model's client
/// would, and prints the call and its `model_text`.
async fn call_a_tool(
    http: &reqwest::Client,
    server: &RunningServer,
    chat_id: &str,
    turn: &Value,
) -> Result<()> {
    let turn_id = turn["turn_id"]
        .as_str()
        .context("the chat API stored no turn")?;
    // The turn names the tool the way the model sees it (`docs__search_docs`).
    let name = turn["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|tool| tool["name"].as_str())
        .find(|name| name.ends_with(DEMO_TOOL));
    let Some(name) = name else {
        println!("\nNo {DEMO_TOOL} tool in the turn: no tool call made.");
        return Ok(());
    };
    println!("\nCalling {} through the chat API…", for_terminal(name));
    let wait_ms = DEMO_CALL_WAIT.as_millis() as u64;
    let call = api(
        http,
        server,
        reqwest::Method::POST,
        &format!("/api/chats/{chat_id}/turns/{turn_id}/tool-calls"),
        Some(json!({
            "call_id": "demo-call-1",
            "name": name,
            "arguments": { "query": "getting started" },
            "timeout_ms": wait_ms,
            "wait_ms": wait_ms,
        })),
    )
    .await?;
    let duration = call["duration_ms"]
        .as_u64()
        .map_or_else(String::new, |ms| format!(" in {ms} ms"));
    println!(
        "Tool call {}: {}{duration}.",
        for_terminal(call["call_id"].as_str().unwrap_or("?")),
        for_terminal(call["status"].as_str().unwrap_or("?"))
    );
    println!(
        "model_text:\n  {}",
        for_terminal(call["model_text"].as_str().unwrap_or(""))
    );
    Ok(())
}

fn print_turn(turn: &Value) {
    println!("Turn context");
    println!("------------");
    let tools = turn["tools"].as_array().cloned().unwrap_or_default();
    println!("tools ({}):", tools.len());
    for tool in &tools {
        println!(
            "  {} — {}",
            for_terminal(tool["name"].as_str().unwrap_or("?")),
            for_terminal(tool["description"].as_str().unwrap_or(""))
        );
    }
    match turn["note"].as_str() {
        Some(note) => println!("note for the model:\n  {}", for_terminal(note)),
        None => println!("note for the model: none (discovery complete without issues)"),
    }
    let outcome = serde_json::to_string_pretty(&turn["mcp_discovery"]).unwrap_or_default();
    println!("discovery outcome: {}", json_for_terminal(&outcome));
}
