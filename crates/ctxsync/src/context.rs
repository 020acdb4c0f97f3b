//! `ctxsync context` (being built).

use clap::Args;

#[derive(Debug, Args)]
pub struct ContextArgs {}

pub async fn run(_args: ContextArgs) -> anyhow::Result<()> {
    anyhow::bail!("`ctxsync context` is not built yet")
}
