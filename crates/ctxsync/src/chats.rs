//! The chat side of the command line, over a running server's chat API: `ctxsync chats
//! create --agent ID` (a chat bound to an agent), `ctxsync turn --chat ID` (prepare a turn
//! and print its tools) and `ctxsync link --chat ID` (a one-time link to the chat's page,
//! as a full URL). With `--json` each prints the API's answer.
//!
//! Owns: these commands' flags and their text. Must never: print the API token, or let
//! a tool's or server's text reach the terminal as a control sequence.

use anyhow::{Context, Result};
use clap::Args;
use serde_json::{Value, json};

use crate::api_client::ApiClientArgs;
use crate::http::api::TurnModeName;
use crate::terminal::{for_terminal, json_for_terminal};

/// `ctxsync chats create`'s flags.
#[derive(Debug, Args)]
pub struct CreateChatArgs {
    /// The agent the chat is bound to (its id, from `ctxsync agents create` or `list`).
    #[arg(long, value_name = "AGENT_ID")]
    pub agent: String,
    /// The server and how to authenticate to it.
    #[command(flatten)]
    pub api: ApiClientArgs,
    /// Print the chat as `POST /api/chats` answers it.
    #[arg(long)]
    pub json: bool,
}

/// `ctxsync turn`'s flags.
#[derive(Debug, Args)]
#[command(
    after_long_help = "A default turn waits, briefly and event-driven, until the \
    bound agent's process has finished discovering its MCP servers (the server's \
    --discovery-budget-ms at most), then prints the tools the model would be given, each \
    with the name `ctxsync call` takes. The turn is stored: `ctxsync call --turn ID` calls \
    its tools."
)]
pub struct TurnArgs {
    /// The chat to prepare a turn of.
    #[arg(long, value_name = "CHAT_ID")]
    pub chat: String,
    /// `default` waits for the agent's discovery; `plan` never waits.
    #[arg(long, value_enum, default_value = "default")]
    pub mode: TurnModeName,
    /// The server and how to authenticate to it.
    #[command(flatten)]
    pub api: ApiClientArgs,
    /// Print the turn as `POST /api/chats/{id}/turns` answers it.
    #[arg(long)]
    pub json: bool,
}

/// `ctxsync link`'s flags.
#[derive(Debug, Args)]
#[command(
    after_long_help = "The link opens the chat's context page in a browser once \
    (it shows a button that starts a browser session for this chat alone) and expires \
    after 15 minutes. It is a full URL under the server's --public-url, or its own address \
    when it listens on loopback; otherwise under this command's --server."
)]
pub struct LinkArgs {
    /// The chat whose page to open.
    #[arg(long, value_name = "CHAT_ID")]
    pub chat: String,
    /// The server and how to authenticate to it.
    #[command(flatten)]
    pub api: ApiClientArgs,
    /// Print `{"url", "link"}` as `POST /api/chats/{id}/link` answers it (`link` always
    /// set).
    #[arg(long)]
    pub json: bool,
}

/// Creates a chat bound to the agent and prints its id.
pub async fn create(args: CreateChatArgs) -> Result<()> {
    let chat = call(
        &args.api,
        reqwest::Method::POST,
        "/api/chats",
        Some(json!({ "agent_id": args.agent.trim() })),
    )
    .await?;
    if args.json {
        return print_json(&chat);
    }
    let id = chat["id"]
        .as_str()
        .context("the server answered no chat id")?;
    println!("chat id: {}", for_terminal(id));
    println!(
        "Next: `ctxsync turn --chat {}` prepares its first turn.",
        for_terminal(id)
    );
    Ok(())
}

/// Prepares and stores a turn of the chat, then prints its tools and what the model is
/// told.
pub async fn turn(args: TurnArgs) -> Result<()> {
    let turn = call(
        &args.api,
        reqwest::Method::POST,
        &format!("/api/chats/{}/turns", args.chat.trim()),
        Some(json!({ "mode": args.mode })),
    )
    .await?;
    if args.json {
        return print_json(&turn);
    }
    print!("{}", for_terminal(&turn_text(&turn)));
    Ok(())
}

/// Mints a one-time link to the chat's page and prints it as a full URL.
pub async fn link(args: LinkArgs) -> Result<()> {
    let mut answer = call(
        &args.api,
        reqwest::Method::POST,
        &format!("/api/chats/{}/link", args.chat.trim()),
        None,
    )
    .await?;
    // A server that does not know where browsers reach it answers the path only: the
    // address this command reached it at is the best guess left.
    if answer["link"].as_str().is_none() {
        let path = answer["url"]
            .as_str()
            .context("the server answered no link")?;
        answer["link"] = json!(format!("{}{path}", args.api.base()));
    }
    if args.json {
        return print_json(&answer);
    }
    let link = answer["link"].as_str().unwrap_or_default();
    println!("{}", for_terminal(link));
    Ok(())
}

async fn call(
    api: &ApiClientArgs,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Result<Value> {
    let token = api.token()?;
    let client = api.client()?;
    api.json(&client, &token, method, path, body).await
}

fn print_json(value: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value).context("printing the answer")?;
    println!("{}", json_for_terminal(&text));
    Ok(())
}

/// A turn as text: its id, the discovery outcome, each tool with its description, and the
/// model's note.
fn turn_text(turn: &Value) -> String {
    let mut out = String::new();
    match turn["turn_id"].as_str() {
        Some(id) => out.push_str(&format!("turn id: {id}\n")),
        None => out.push_str(&format!(
            "turn not stored: {}\n",
            turn["turn_error"].as_str().unwrap_or("no reason given")
        )),
    }
    let discovery = &turn["mcp_discovery"];
    if !discovery.is_null() {
        let phase = discovery["phase"].as_str().unwrap_or("unknown");
        let stale = if discovery["stale"] == true {
            ", stale"
        } else {
            ""
        };
        let waited = discovery["waited_ms"]
            .as_u64()
            .filter(|ms| *ms > 0)
            .map_or_else(String::new, |ms| format!(" (waited {ms} ms)"));
        out.push_str(&format!("discovery: {phase}{stale}{waited}\n"));
    }
    if let Some(error) = turn["inventory_error"].as_str() {
        out.push_str(&format!("tools unavailable: {error}\n"));
    }
    let tools = turn["tools"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    out.push_str(&format!("tools ({}):\n", tools.len()));
    for tool in tools {
        let name = tool["name"].as_str().unwrap_or("?");
        match tool["description"].as_str().filter(|d| !d.is_empty()) {
            Some(description) => out.push_str(&format!("  {name} — {description}\n")),
            None => out.push_str(&format!("  {name}\n")),
        }
    }
    if let Some(note) = turn["note"].as_str() {
        out.push_str(&format!("note for the model: {note}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_prints_its_tools_phase_and_note() {
        let text = turn_text(&json!({
            "turn_id": "t1",
            "mcp_discovery": {"phase": "complete", "stale": false, "waited_ms": 120},
            "tools": [
                {"name": "docs__tool_0", "description": "Fixture tool 0"},
                {"name": "find_tools", "description": ""}
            ],
            "note": null
        }));
        assert_eq!(
            text,
            "turn id: t1\ndiscovery: complete (waited 120 ms)\ntools (2):\n  docs__tool_0 — Fixture tool 0\n  find_tools\n"
        );
        let text = turn_text(&json!({
            "turn_id": null, "turn_error": "database unavailable",
            "mcp_discovery": {"phase": "pending", "stale": true}, "tools": [],
            "note": "Discovery is still running."
        }));
        assert!(
            text.starts_with("turn not stored: database unavailable\n"),
            "{text}"
        );
        assert!(text.contains("discovery: pending, stale\n"), "{text}");
        assert!(
            text.ends_with("note for the model: Discovery is still running.\n"),
            "{text}"
        );
    }
}
