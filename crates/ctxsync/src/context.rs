//! `ctxsync context --chat ID`: prints a chat's context panel as plain text (or, with
//! `--json`, the chat API's panel JSON), read from a running server's HTTP API.

use anyhow::{Context, Result};
use clap::Args;

/// `ctxsync context`'s flags.
#[derive(Debug, Args)]
pub struct ContextArgs {
    /// The chat whose context to show.
    #[arg(long)]
    pub chat: String,
    /// The server and how to authenticate to it.
    #[command(flatten)]
    pub api: crate::api_client::ApiClientArgs,
    /// Print the panel as JSON, as `GET /api/chats/{id}/context` answers it (the schema
    /// is in the server's OpenAPI document).
    #[arg(long)]
    pub json: bool,
}

/// Fetches the chat's panel from the server and prints it, control characters escaped.
pub async fn run(args: ContextArgs) -> Result<()> {
    let token = args.api.token()?;
    let client = args.api.client()?;
    let format = if args.json {
        Format::Json
    } else {
        Format::Text
    };
    let panel = fetch_with(&client, &args.api.server, &args.chat, &token, format).await?;
    // The panel quotes MCP servers' names, tools and errors: nothing of theirs reaches the
    // terminal as a control sequence.
    match format {
        Format::Text => print!("{}", crate::terminal::for_terminal(&panel)),
        Format::Json => {
            let value: serde_json::Value =
                serde_json::from_str(&panel).context("the server's panel is not JSON")?;
            let text = serde_json::to_string_pretty(&value).expect("JSON serializes");
            println!("{}", crate::terminal::json_for_terminal(&text));
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Format {
    Text,
    Json,
}

/// The plain-text panel of `chat` from the server at `base`.
pub async fn fetch_panel_text(base: &str, chat: &str, token: &str) -> Result<String> {
    fetch_with(&reqwest::Client::new(), base, chat, token, Format::Text).await
}

async fn fetch_with(
    client: &reqwest::Client,
    base: &str,
    chat: &str,
    token: &str,
    format: Format,
) -> Result<String> {
    let accept = match format {
        Format::Text => "text/plain",
        Format::Json => "application/json",
    };
    let url = format!("{}/api/chats/{chat}/context", base.trim_end_matches('/'));
    let request = client
        .get(&url)
        .bearer_auth(token)
        .header(reqwest::header::ACCEPT, accept);
    Ok(crate::api_client::send(request, base).await?.1)
}
