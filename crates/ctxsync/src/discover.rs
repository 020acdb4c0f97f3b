//! `ctxsync discover`: local MCP discovery (being built).

use clap::Args;

#[derive(Debug, Args)]
pub struct DiscoverArgs {}

pub async fn run(_args: DiscoverArgs) -> anyhow::Result<()> {
    anyhow::bail!("`ctxsync discover` is not built yet")
}
