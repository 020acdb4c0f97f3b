//! A minimal agent that embeds only the MCP engine (`ctxsync-agent-diagnostics`) and the
//! publisher: it discovers the workspace's MCP servers, publishes the workspace's context
//! to a `ctxsync server`, and stops once the server has accepted a snapshot with
//! discovery complete.
//!
//! ```text
//! CTXSYNC_AGENT_TOKEN=<token from `ctxsync agents create`> \
//!   cargo run -p ctxsync-agent-publication --example publish_workspace -- \
//!   http://127.0.0.1:7443 path/to/workspace
//! ```
//!
//! A long-running agent would keep `Publisher::run` going instead: it republishes on every
//! change of the context files and of the engine's report.

use std::error::Error;
use std::path::PathBuf;

use ctxsync_agent_diagnostics::{Engine, EngineConfig};
use ctxsync_agent_publication::{
    DEFAULT_MAX_WATCHED_DIRS, Publisher, PublisherConfig, PublisherStatus, ScanConfig, Timing,
};
use ctxsync_protocol::DiscoveryPhase;

type BoxError = Box<dyn Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let (Some(server_url), Some(workspace)) = (args.next(), args.next()) else {
        return Err("usage: publish_workspace SERVER_URL WORKSPACE_DIR".into());
    };
    let token = std::env::var("CTXSYNC_AGENT_TOKEN")
        .map_err(|_| "set CTXSYNC_AGENT_TOKEN to the agent's token")?;
    let status = publish_until_complete(server_url, workspace.into(), token).await?;
    println!(
        "published snapshot {} (aggregate hash {})",
        status.published_version, status.aggregate_hash
    );
    Ok(())
}

/// Runs the engine and the publisher until the server has accepted a snapshot whose
/// discovery phase is complete, then closes the engine (and its MCP servers).
pub(crate) async fn publish_until_complete(
    server_url: String,
    workspace: PathBuf,
    token: String,
) -> Result<PublisherStatus, BoxError> {
    let workspace = std::path::absolute(workspace)?;
    let mut engine_config = EngineConfig::new(&workspace);
    // The token must never show up in a server's diagnostic.
    engine_config.injected_secrets.push(token.clone());
    let engine = Engine::start(engine_config);

    let config = PublisherConfig {
        server_url,
        ca_cert_files: Vec::new(),
        token,
        agent_version: env!("CARGO_PKG_VERSION").to_owned(),
        scan: ScanConfig {
            workspace_dir: workspace,
            extra_roots: Vec::new(),
            plugin_dirs: Vec::new(),
            mcp_config_paths: Vec::new(),
        },
        timing: Timing::default(),
        max_watched_dirs: DEFAULT_MAX_WATCHED_DIRS,
    };
    let result = match Publisher::new(config, Some(Box::new(engine.subscribe()))) {
        Ok(publisher) => {
            let mut status = publisher.status();
            let accepted_complete = |s: &PublisherStatus| {
                s.phase == DiscoveryPhase::Complete
                    && s.last_push == Some((s.published_version, true))
            };
            tokio::select! {
                // Ends only on a refusal that retrying cannot fix (a newer process).
                fatal = publisher.run() => match fatal {
                    Err(error) => Err(error.into()),
                    Ok(never) => match never {},
                },
                done = status.wait_for(accepted_complete) => Ok(done?.clone()),
            }
        }
        Err(error) => Err(error.into()),
    };
    engine.close().await;
    result
}
