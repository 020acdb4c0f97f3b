//! Benchmark: how long after a person's browser comes back to the callback the agent has
//! connected the server with the new token and published its tools (issue 50's goal:
//! p50 ≤ 1.5 s over 20 sign-ins on loopback). A real `ctxsync server` (in process, the
//! embedded default with its generated secrets key), a real `ctxsync agent` process and
//! the fixture as a remote MCP server behind its own OAuth authorization server; the
//! benchmark plays the person's browser and forgets the sign-in between rounds.
//!
//! Prints one JSON row per figure on stdout (`cargo xtask bench` collects them); progress
//! goes to stderr. `--quick` runs the same 20 rounds: each takes well under a second.

mod support;

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use ctxsync::server::{ServerConfig, start};
use ctxsync_mcp_fixture::{FixtureConfig, OAuthConfig, serve_http};
use ctxsync_persistence::{AgentId, Store};
use ctxsync_protocol::{ResourceBody, ResourceStatus};
use ctxsync_test_support::bench_row_against;
use support::{ctxsync_binary, percentile_ms};

const ROUNDS: usize = 20;
const SERVER: &str = "remote";
/// Bound on any one wait; never reached when the code works.
const WAIT: Duration = Duration::from_secs(30);
/// The goal for the median.
const GOAL_P50_MS: f64 = 1500.0;

#[tokio::main]
async fn main() -> Result<()> {
    let ctxsync = ctxsync_binary("bench_sign_in")?;
    let data = tempfile::tempdir()?;
    let server = start(ServerConfig::ephemeral(data.path())).await?;
    let agent = server.store.create_agent("bench").await?;
    let fixture = serve_http(FixtureConfig::new().http().oauth(OAuthConfig::default())).await?;
    let workspace = tempfile::tempdir()?;
    let config =
        serde_json::json!({"mcpServers": {SERVER: {"type": "http", "url": fixture.url()}}});
    std::fs::write(workspace.path().join(".mcp.json"), config.to_string())?;
    let log = data.path().join("agent.log");
    let mut child = tokio::process::Command::new(&ctxsync)
        .args(["agent", "--server", &server.agent_url(), "--workspace"])
        .arg(workspace.path())
        .env("CTXSYNC_AGENT_TOKEN", agent.token.expose())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .kill_on_drop(true)
        .spawn()
        .context("starting ctxsync agent")?;
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let route = format!(
        "{}/api/agents/{}/mcp-servers/{SERVER}/authorization",
        server.http_url(),
        agent.id
    );
    let agent_log = || std::fs::read_to_string(&log).unwrap_or_default();

    let mut samples = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        remote_is(&server.store, agent.id, ResourceStatus::NeedsAuthorization)
            .await
            .with_context(|| format!("round {round}; agent log:\n{}", agent_log()))?;
        let answer: serde_json::Value = browser
            .post(&route)
            .bearer_auth(&server.api_token)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let url = answer["authorization_url"]
            .as_str()
            .context("no authorization_url")?;
        let redirect = browser.get(url).send().await?;
        ensure!(
            redirect.status() == 302,
            "the authorization server did not redirect"
        );
        let callback = redirect.headers()["location"].to_str()?.to_owned();
        let came_back = Instant::now();
        let page = browser.get(&callback).send().await?;
        ensure!(
            page.status() == 200,
            "the callback answered {}",
            page.status()
        );
        remote_is(&server.store, agent.id, ResourceStatus::Ok).await?;
        samples.push(came_back.elapsed());
        // Signed out again for the next round: the agent drops the token and the server
        // asks for a person once more.
        let forgot = browser
            .delete(&route)
            .bearer_auth(&server.api_token)
            .send()
            .await?;
        ensure!(
            forgot.status() == 204,
            "DELETE answered {}",
            forgot.status()
        );
    }
    let p50 = percentile_ms(&samples, 50.0);
    let p95 = percentile_ms(&samples, 95.0);
    eprintln!(
        "bench_sign_in: callback to tools over {ROUNDS} sign-ins: p50 {p50:.0} ms, p95 {p95:.0} ms"
    );
    bench_row_against(
        "sign_in_callback_to_tools_p50",
        p50,
        "ms",
        None,
        Some("≤ 1500 ms"),
        Some(p50 <= GOAL_P50_MS),
    );
    bench_row_against("sign_in_callback_to_tools_p95", p95, "ms", None, None, None);

    child.start_kill()?;
    let _ = child.wait().await;
    fixture.shutdown().await;
    server.shutdown().await;
    Ok(())
}

/// Waits until the snapshot of the agent's current run shows the remote server with
/// `status`.
async fn remote_is(store: &Store, agent: AgentId, status: ResourceStatus) -> Result<()> {
    let deadline = Instant::now() + WAIT;
    loop {
        let context = store.read_agent_context(agent).await?.context("no agent")?;
        let current = context
            .snapshot
            .as_ref()
            .is_some_and(|s| s.agent_run_id == context.agent.agent_run_id);
        let shown = context.resources.iter().any(|r| {
            matches!(&r.body, ResourceBody::McpServer(s) if s.server_name == SERVER)
                && r.status == status
        });
        if current && shown {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the remote server never showed {status:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
