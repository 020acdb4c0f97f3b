//! `ctxsync call --chat ID [--turn ID] NAME [--args JSON] [--timeout-ms N] [--json]`: calls
//! one of a turn's tools through a running server's chat API and prints what the model
//! would be handed (or, with `--json`, the call as the API answers it).
//!
//! Owns: the command's flags and its wait loop. Must never: print the API token, reuse a
//! `call_id` across runs (each run is a new call), or exit 0 for a call that did not
//! complete without a tool error.

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::{Value, json};

/// How long each poll of a running call waits on the server (below its 55 s bound).
const POLL_WAIT_MS: u64 = 30_000;

/// `ctxsync call`'s flags.
#[derive(Debug, Args)]
#[command(after_long_help = "Without --turn, a new turn of the chat is started \
    (POST /api/chats/{id}/turns, as a chat would) and the call is made in it: the chat API \
    has no \"latest turn\" to read. Exits 0 only when the call completed and the tool \
    reported no error.")]
pub struct CallArgs {
    /// The chat whose turn calls the tool.
    #[arg(long)]
    pub chat: String,
    /// The turn that carries the tool; default: a new turn of the chat.
    #[arg(long)]
    pub turn: Option<String>,
    /// The model-facing tool name, as the turn lists it (or `find_tools`).
    pub name: String,
    /// The tool's arguments, a JSON object.
    #[arg(long = "args", value_name = "JSON", default_value = "{}")]
    pub arguments: String,
    /// The call's deadline in milliseconds (the server's default: 60000).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout_ms: Option<u64>,
    /// The server and how to authenticate to it.
    #[command(flatten)]
    pub api: crate::api_client::ApiClientArgs,
    /// Print the call as JSON, as the API answers it, instead of its model text.
    #[arg(long)]
    pub json: bool,
}

/// Makes the call, waits for its end and prints it; `Err` unless it completed without a
/// tool error.
pub async fn run(args: CallArgs) -> Result<()> {
    let arguments: Value =
        serde_json::from_str(&args.arguments).context("--args is not valid JSON")?;
    if !arguments.is_object() {
        bail!("--args must be a JSON object");
    }
    let token = args.api.token()?;
    let client = args.api.client()?;
    let api = Api {
        client: &client,
        server: &args.api,
        token: &token,
    };
    let chat = &args.chat;
    let turn = match args.turn {
        Some(turn) => turn,
        None => {
            let turn = api
                .send(
                    reqwest::Method::POST,
                    &format!("/api/chats/{chat}/turns"),
                    Some(json!({})),
                )
                .await?
                .1;
            turn["turn_id"]
                .as_str()
                .map(str::to_owned)
                .with_context(|| {
                    format!(
                        "the new turn was not stored: {}",
                        turn["turn_error"].as_str().unwrap_or("no reason given")
                    )
                })?
        }
    };
    let calls = format!("/api/chats/{chat}/turns/{turn}/tool-calls");
    let mut body = json!({
        "call_id": format!("cli-{}", uuid::Uuid::new_v4()),
        "name": args.name,
        "arguments": arguments,
    });
    if let Some(timeout_ms) = args.timeout_ms {
        body["timeout_ms"] = json!(timeout_ms);
    }
    let (_, mut call) = api.send(reqwest::Method::POST, &calls, Some(body)).await?;
    while call["status"] == "running" {
        let call_id = call["call_id"].as_str().unwrap_or_default().to_owned();
        call = api
            .send(
                reqwest::Method::GET,
                &format!("{calls}/{call_id}?wait_ms={POLL_WAIT_MS}"),
                None,
            )
            .await?
            .1;
    }
    // The call quotes the tool's output: nothing of it reaches the terminal as a control
    // sequence.
    if args.json {
        let text = serde_json::to_string_pretty(&call).expect("JSON serializes");
        println!("{}", crate::terminal::json_for_terminal(&text));
    } else {
        let text = call["model_text"].as_str().unwrap_or_default();
        println!("{}", crate::terminal::for_terminal(text));
    }
    if !succeeded(&call) {
        bail!(
            "the call ended {}{}",
            call["status"].as_str().unwrap_or("?"),
            if call["status"] == "complete" {
                " with a tool error"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// `complete` and the tool did not report an error.
fn succeeded(call: &Value) -> bool {
    call["status"] == "complete" && call["result"]["isError"] != true
}

struct Api<'a> {
    client: &'a reqwest::Client,
    server: &'a crate::api_client::ApiClientArgs,
    token: &'a str,
}

impl Api<'_> {
    /// A JSON request; a non-2xx answer is an error quoting the server's message.
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(reqwest::StatusCode, Value)> {
        let mut request = self
            .client
            .request(method, format!("{}{path}", self.server.base()))
            .bearer_auth(self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let (status, text) = self.server.send(request).await?;
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        Ok((status, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_complete_call_without_a_tool_error_succeeds() {
        assert!(succeeded(
            &json!({"status": "complete", "result": {"isError": false}})
        ));
        assert!(succeeded(&json!({"status": "complete", "result": {}})));
        assert!(!succeeded(
            &json!({"status": "complete", "result": {"isError": true}})
        ));
        assert!(!succeeded(
            &json!({"status": "refused", "reason": "not_in_turn"})
        ));
        assert!(!succeeded(&json!({"status": "timed_out"})));
    }
}
