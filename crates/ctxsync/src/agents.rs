//! `ctxsync agents create|list|rotate|delete`: the agent tokens' lifecycle, straight on
//! the database. A token is printed once, when it is made; the database keeps only its
//! digest, so a lost token is replaced (rotated), never shown again.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use ctxsync_persistence::{AgentConnection, AgentId, AgentRecord, DatabaseConfig, NewAgent, Store};

use crate::secret::Secret;

/// Where the agents live: the same database the server uses.
#[derive(Debug, Args)]
pub struct DatabaseArgs {
    /// PostgreSQL (`postgres://…`) or SQLite (`sqlite://PATH`) database URL.
    #[arg(
        long,
        env = "CTXSYNC_DATABASE_URL",
        hide_env_values = true,
        conflicts_with = "data_dir"
    )]
    pub database_url: Option<Secret>,
    /// Directory of the embedded SQLite database: the one `ctxsync server` was started
    /// with (its `--data-dir`). Default: $CTXSYNC_DATA_DIR, else `$XDG_DATA_HOME/ctxsync`,
    /// else `~/.local/share/ctxsync`.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

impl DatabaseArgs {
    async fn open(self) -> Result<Store> {
        let data_dir = self.data_dir.unwrap_or_else(crate::paths::default_data_dir);
        let database =
            crate::paths::database(self.database_url.as_ref().map(Secret::expose), &data_dir)?;
        // The trap: a command given another data dir than the server's makes a database
        // of its own, whose agents the server has never heard of. Say so.
        if let DatabaseConfig::Sqlite { path } = &database
            && !path.exists()
        {
            eprintln!(
                "note: no database was in {dir}, so a new one is made there; a server started \
                 with another data dir will not know these agents (give the server's \
                 --data-dir, or set CTXSYNC_DATA_DIR for every command)",
                dir = data_dir.display()
            );
        }
        Store::open(database).await.context("opening the database")
    }
}

/// `ctxsync agents create`'s arguments.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// A name for the agent (for people; need not be unique).
    pub name: String,
    /// The database to create the agent in.
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// Print `{"id": …, "token": …}` instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `ctxsync agents list`'s flags.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// The database to list.
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The arguments of `ctxsync agents rotate` and `ctxsync agents delete`: one agent.
#[derive(Debug, Args)]
pub struct IdArgs {
    /// The agent's id (from `ctxsync agents list`).
    pub id: String,
    /// The database the agent is in.
    #[command(flatten)]
    pub database: DatabaseArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Creates an agent and prints its id and token, the token's only showing.
pub async fn create(args: CreateArgs) -> Result<()> {
    let name = args.name.trim();
    anyhow::ensure!(!name.is_empty(), "the agent name must not be empty");
    let store = args.database.open().await?;
    let agent = store
        .create_agent(name)
        .await
        .context("creating the agent")?;
    print_token(&agent, args.json);
    Ok(())
}

/// Prints every agent, oldest first, as a table or JSON; never a token.
pub async fn list(args: ListArgs) -> Result<()> {
    let store = args.database.open().await?;
    let agents = store
        .list_agents_with_connection()
        .await
        .context("listing the agents")?;
    if args.json {
        let rows: Vec<_> = agents
            .iter()
            .map(|(agent, connection)| agent_json(agent, *connection))
            .collect();
        let text = serde_json::Value::Array(rows).to_string();
        // Agent names are the operator's text: no control sequence reaches the terminal.
        println!("{}", crate::terminal::json_for_terminal(&text));
        return Ok(());
    }
    if agents.is_empty() {
        println!("no agents; create one with `ctxsync agents create NAME`");
        return Ok(());
    }
    println!(
        "{:<36}  {:<20}  {:<25}  NAME",
        "ID", "CREATED", "LAST STARTED"
    );
    for (agent, _) in &agents {
        let started = agent.started_at.map_or_else(
            || "never".to_owned(),
            |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        );
        println!(
            "{:<36}  {:<20}  {:<25}  {}",
            agent.id,
            agent.created_at.format("%Y-%m-%d %H:%M:%S"),
            started,
            printable(&agent.name),
        );
    }
    Ok(())
}

/// Replaces the agent's token: the old one is refused from the moment this returns.
pub async fn rotate(args: IdArgs) -> Result<()> {
    let id = parse_id(&args.id)?;
    let store = args.database.open().await?;
    let agent = store
        .rotate_agent_token(id)
        .await
        .with_context(|| format!("rotating the token of agent {id}"))?;
    print_token(&agent, args.json);
    Ok(())
}

/// Deletes the agent, its snapshot and resources; its token is refused from then on.
pub async fn delete(args: IdArgs) -> Result<()> {
    let id = parse_id(&args.id)?;
    let store = args.database.open().await?;
    store
        .delete_agent(id)
        .await
        .with_context(|| format!("deleting agent {id}"))?;
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "id": id.to_string(), "deleted": true })
        );
    } else {
        println!("deleted agent {id}; its token is refused from now on");
    }
    Ok(())
}

fn parse_id(raw: &str) -> Result<AgentId> {
    raw.trim().parse().map_err(|_| {
        anyhow::anyhow!(
            "`{}` is not an agent id (a UUID, as `ctxsync agents list` prints)",
            printable(raw)
        )
    })
}

fn print_token(agent: &NewAgent, json: bool) {
    let id = agent.id.to_string();
    let token = agent.token.expose();
    if json {
        println!("{}", serde_json::json!({ "id": id, "token": token }));
    } else {
        println!("agent id: {id}");
        println!("token:    {token}");
        println!("The token is shown only once. Give it to the agent as CTXSYNC_AGENT_TOKEN.");
    }
}

/// An agent as `--json` and `GET /api/agents` show it: never its token or digest.
pub fn agent_json(agent: &AgentRecord, connection: AgentConnection) -> serde_json::Value {
    // The HTTP API's type, so the two never differ.
    serde_json::to_value(crate::http::api::AgentSummary::of(agent, connection))
        .expect("an agent serializes")
}

/// `text` with control characters escaped, so a name cannot drive the terminal.
fn printable(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}
