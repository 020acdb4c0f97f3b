//! `ctxsync agents create`: registers an agent and prints its id and token once.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use ctxsync_persistence::Store;

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// A name for the agent (for people; need not be unique).
    pub name: String,
    /// PostgreSQL (`postgres://…`) or SQLite (`sqlite://PATH`) database URL.
    #[arg(long, env = "CTXSYNC_DATABASE_URL", conflicts_with = "data_dir")]
    pub database_url: Option<String>,
    /// Directory of the embedded SQLite database (default: the user data directory).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Print `{"id": …, "token": …}` instead of text.
    #[arg(long)]
    pub json: bool,
}

pub async fn create(args: CreateArgs) -> Result<()> {
    let name = args.name.trim();
    anyhow::ensure!(!name.is_empty(), "the agent name must not be empty");
    let data_dir = args.data_dir.unwrap_or_else(crate::paths::default_data_dir);
    let database = crate::paths::database(args.database_url.as_deref(), &data_dir)?;
    let store = Store::open(database)
        .await
        .context("opening the database")?;
    let agent = store
        .create_agent(name)
        .await
        .context("creating the agent")?;
    let id = agent.id.to_string();
    let token = agent.token.expose().to_string();
    if args.json {
        println!("{}", serde_json::json!({ "id": id, "token": token }));
    } else {
        println!("agent id: {id}");
        println!("token:    {token}");
        println!("The token is shown only once. Give it to the agent as CTXSYNC_AGENT_TOKEN.");
    }
    Ok(())
}
