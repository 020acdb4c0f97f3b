//! `ctxsync calls [--agent ID] [--chat ID] [--since RFC3339] [--limit N] [--cursor C]
//! [--json]`: prints a page of the tool-call audit log (`GET /api/tool-calls`) of a running
//! server, newest first, as a table (or, with `--json`, the page as the API answers it).
//!
//! Owns: the command's flags and its table. Must never: print the API token, or let a
//! tool's or server's name reach the terminal as a control sequence.

use anyhow::{Context, Result};
use clap::Args;
use serde_json::Value;

/// `ctxsync calls`' flags.
#[derive(Debug, Args)]
#[command(
    after_long_help = "The log keeps one row per call end for the server's \
    --tool-call-audit-days, whatever became of the call's turn, chat or agent: never the \
    arguments or the result, only their sizes and the arguments' keyed digest. When more \
    rows follow, the last line names the --cursor that prints them."
)]
pub struct CallsArgs {
    /// Only calls that went to this agent.
    #[arg(long, value_name = "ID")]
    pub agent: Option<String>,
    /// Only calls of this chat.
    #[arg(long, value_name = "ID")]
    pub chat: Option<String>,
    /// Only calls that ended at or after this time (RFC 3339, e.g. 2026-12-06T09:00:00Z).
    #[arg(long, value_name = "RFC3339")]
    pub since: Option<String>,
    /// Rows to print, at most 500 (the server's default: 50).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=500))]
    pub limit: Option<u32>,
    /// Continue after an earlier page (its `next_cursor`).
    #[arg(long, value_name = "CURSOR")]
    pub cursor: Option<String>,
    /// The server and how to authenticate to it.
    #[command(flatten)]
    pub api: crate::api_client::ApiClientArgs,
    /// Print the page as JSON, as `GET /api/tool-calls` answers it.
    #[arg(long)]
    pub json: bool,
}

/// Fetches one page of the audit log and prints it.
pub async fn run(args: CallsArgs) -> Result<()> {
    let page = fetch(&args).await?;
    if args.json {
        let text = serde_json::to_string_pretty(&page).expect("JSON serializes");
        println!("{}", crate::terminal::json_for_terminal(&text));
    } else {
        print!("{}", crate::terminal::for_terminal(&table(&page)));
    }
    Ok(())
}

/// The page the flags ask for, as the server answered it.
pub async fn fetch(args: &CallsArgs) -> Result<Value> {
    let token = args.api.token()?;
    let client = args.api.client()?;
    let base = args.api.server.trim_end_matches('/');
    let mut query: Vec<(&str, String)> = Vec::new();
    for (key, value) in [
        ("agent", &args.agent),
        ("chat", &args.chat),
        ("since", &args.since),
        ("cursor", &args.cursor),
    ] {
        if let Some(value) = value {
            query.push((key, value.clone()));
        }
    }
    if let Some(limit) = args.limit {
        query.push(("limit", limit.to_string()));
    }
    let mut url = reqwest::Url::parse(&format!("{base}/api/tool-calls"))
        .with_context(|| format!("--server {base:?} is not a URL"))?;
    if !query.is_empty() {
        url.query_pairs_mut().extend_pairs(&query);
    }
    let (_, text) = args.api.send(client.get(url).bearer_auth(&token)).await?;
    serde_json::from_str(&text).context("the server's answer is not JSON")
}

/// The page as a table, a row per call end, newest first; the cursor of the next page
/// last, when there is one.
pub fn table(page: &Value) -> String {
    let calls = page["calls"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if calls.is_empty() {
        return "No tool call ended in what was asked.\n".to_owned();
    }
    let header = [
        "ENDED",
        "NAME",
        "SERVER/TOOL",
        "STATUS",
        "MS",
        "ARGS",
        "RESULT",
        "TRUNC",
    ]
    .map(str::to_owned);
    let rows: Vec<[String; 8]> = calls.iter().map(row).collect();
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    if let Some(cursor) = page["next_cursor"].as_str() {
        out.push_str(&format!("More: --cursor {cursor}\n"));
    }
    out
}

/// One call end's cells.
fn row(call: &Value) -> [String; 8] {
    let text = |key: &str| call[key].as_str().unwrap_or_default().to_owned();
    let number = |key: &str| call[key].as_u64().map_or("-".to_owned(), |n| n.to_string());
    let origin = match (text("server"), text("tool")) {
        (server, tool) if server.is_empty() && tool.is_empty() => "-".to_owned(),
        (server, tool) => format!("{server}/{tool}"),
    };
    let mut status = text("status");
    if let Some(reason) = call["reason"].as_str() {
        status = format!("{status}/{reason}");
    }
    if let Some(code) = call["error_code"].as_i64() {
        status = format!("{status} ({code})");
    }
    // Seconds are enough to read; the JSON keeps the exact time.
    let ended = text("ended_at")
        .get(..19)
        .map_or_else(|| text("ended_at"), |t| format!("{}Z", t.replace('T', " ")));
    [
        ended,
        text("name"),
        origin,
        status,
        number("duration_ms"),
        number("arguments_size"),
        number("result_size"),
        if call["truncated"] == true {
            "yes"
        } else {
            "-"
        }
        .to_owned(),
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_table_reads_a_page_newest_first() {
        let page = json!({
            "calls": [
                {
                    "ended_at": "2026-12-06T09:30:01.123456+00:00", "name": "docs__search",
                    "server": "docs", "tool": "search", "status": "complete",
                    "duration_ms": 12, "arguments_size": 15, "result_size": 2048,
                    "truncated": true,
                },
                {
                    "ended_at": "2026-12-06T09:29:00+00:00", "name": "nope", "server": "",
                    "tool": "", "status": "refused", "reason": "not_in_turn",
                    "duration_ms": 0, "arguments_size": 2, "result_size": null,
                    "truncated": false,
                },
                {
                    "ended_at": "2026-12-06T09:28:00+00:00", "name": "fs__read",
                    "server": "fs", "tool": "read", "status": "error", "error_code": -32602,
                    "duration_ms": 3, "arguments_size": 2, "result_size": null,
                    "truncated": false,
                },
            ],
            "next_cursor": "abc",
        });
        let expected = "\
ENDED                 NAME          SERVER/TOOL  STATUS               MS  ARGS  RESULT  TRUNC
2026-12-06 09:30:01Z  docs__search  docs/search  complete             12  15    2048    yes
2026-12-06 09:29:00Z  nope          -            refused/not_in_turn  0   2     -       -
2026-12-06 09:28:00Z  fs__read      fs/read      error (-32602)       3   2     -       -
More: --cursor abc
";
        assert_eq!(table(&page), expected);
        assert_eq!(
            table(&json!({ "calls": [], "next_cursor": null })),
            "No tool call ended in what was asked.\n"
        );
    }
}
