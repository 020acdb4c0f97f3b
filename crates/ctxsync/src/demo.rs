//! `ctxsync demo` (being built).

use clap::Args;

#[derive(Debug, Args)]
pub struct DemoArgs {}

pub async fn run(_args: DemoArgs) -> anyhow::Result<()> {
    anyhow::bail!("`ctxsync demo` is not built yet")
}
