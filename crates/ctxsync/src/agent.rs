//! `ctxsync agent`: the workspace agent process (being built).

use clap::Args;

#[derive(Debug, Args)]
pub struct AgentArgs {}

pub async fn run(_args: AgentArgs) -> anyhow::Result<()> {
    anyhow::bail!("`ctxsync agent` is not built yet")
}
