//! `ctxsync context --chat ID`: prints a chat's context panel as plain text, read from a
//! running server's HTTP API.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;

#[derive(Debug, Args)]
pub struct ContextArgs {
    /// The chat whose context to show.
    #[arg(long)]
    pub chat: String,
    /// The server's HTTP address.
    #[arg(long, default_value = "http://127.0.0.1:4780")]
    pub server: String,
    /// The HTTP API token; default: `<data-dir>/api-token` of a local server.
    #[arg(long, env = "CTXSYNC_API_TOKEN", hide_env_values = true)]
    pub api_token: Option<String>,
    /// The local server's data directory, to read its API token from.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
}

pub async fn run(args: ContextArgs) -> Result<()> {
    let token = match args.api_token {
        Some(token) => token,
        None => {
            let path = args
                .data_dir
                .unwrap_or_else(crate::paths::default_data_dir)
                .join("api-token");
            std::fs::read_to_string(&path)
                .with_context(|| {
                    format!("no --api-token given and {} cannot be read", path.display())
                })?
                .trim()
                .to_string()
        }
    };
    print!(
        "{}",
        fetch_panel_text(&args.server, &args.chat, &token).await?
    );
    Ok(())
}

/// The plain-text panel of `chat` from the server at `base`.
pub async fn fetch_panel_text(base: &str, chat: &str, token: &str) -> Result<String> {
    let url = format!("{}/api/chats/{chat}/context", base.trim_end_matches('/'));
    let response = reqwest::Client::new()
        .get(&url)
        .bearer_auth(token)
        .header(reqwest::header::ACCEPT, "text/plain")
        .send()
        .await
        .with_context(|| format!("cannot reach the ctxsync server at {base}"))?;
    let status = response.status();
    let text = response
        .text()
        .await
        .context("reading the server's answer")?;
    if !status.is_success() {
        let message = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_owned))
            .unwrap_or(text);
        bail!("the server answered {status}: {message}");
    }
    Ok(text)
}
