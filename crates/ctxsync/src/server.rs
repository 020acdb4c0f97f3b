//! `ctxsync server` (being built).

use clap::Args;

#[derive(Debug, Args)]
pub struct ServerArgs {}

pub async fn run(_args: ServerArgs) -> anyhow::Result<()> {
    anyhow::bail!("`ctxsync server` is not built yet")
}
