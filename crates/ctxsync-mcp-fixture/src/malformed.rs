//! `--malformed-stdout`: a stdio server that answers `initialize` with something broken.

use std::{
    io::{self, BufRead, Write},
    process::ExitCode,
};

use serde_json::{Value, json};

use crate::config::MalformedStdout;

/// Lines written by the line-based kinds: more than a pipe buffer holds, still quick.
const MALFORMED_LINES: usize = 1000;
/// The huge line is written in pieces of this size, so the fixture never holds it whole.
const CHUNK_BYTES: usize = 1024 * 1024;

/// Reads the client's first request (`initialize`), writes `kind` instead of its answer, then
/// only drains stdin; the process exits when the client closes stdin. Blocking.
pub(crate) fn run(kind: MalformedStdout, huge_line_bytes: usize) -> ExitCode {
    let mut stdin = io::BufReader::new(io::stdin());
    let mut request = String::new();
    match stdin.read_line(&mut request) {
        Ok(0) | Err(_) => return ExitCode::SUCCESS, // the client is gone before it asked
        Ok(_) => {}
    }
    let id = serde_json::from_str::<Value>(&request)
        .ok()
        .and_then(|request| request.get("id").cloned())
        .unwrap_or(Value::Null);
    // Keep reading, so a client that answers the garbage (e.g. with "Invalid Request") never
    // blocks on a full pipe; its closing stdin ends the process, as for a normal server.
    std::thread::spawn(move || {
        let _ = io::copy(&mut stdin, &mut io::sink());
        std::process::exit(0);
    });
    let mut stdout = io::stdout().lock();
    if let Err(error) = write_kind(&mut stdout, kind, &id, huge_line_bytes) {
        // Usually a broken pipe: the client gave up reading, which is its right.
        eprintln!("ctxsync-mcp-fixture: writing malformed stdout stopped: {error}");
    }
    drop(stdout);
    loop {
        std::thread::park();
    }
}

fn write_kind(
    out: &mut impl Write,
    kind: MalformedStdout,
    id: &Value,
    huge_line_bytes: usize,
) -> io::Result<()> {
    match kind {
        MalformedStdout::NotJson => {
            for n in 0..MALFORMED_LINES {
                writeln!(out, "ctxsync-mcp-fixture: log line {n} on stdout, not JSON")?;
            }
        }
        MalformedStdout::NotJsonrpc => {
            for n in 0..MALFORMED_LINES {
                writeln!(out, "{}", json!({"hello": "not JSON-RPC", "n": n}))?;
            }
        }
        MalformedStdout::WrongId => {
            let wrong_id = match id {
                Value::Number(n) => json!(n.as_u64().unwrap_or(0).wrapping_add(1000)),
                Value::String(s) => json!(format!("{s}-wrong")),
                _ => json!(4242),
            };
            let response = json!({
                "jsonrpc": "2.0",
                "id": wrong_id,
                "result": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "ctxsync-mcp-fixture", "version": env!("CARGO_PKG_VERSION")},
                },
            });
            writeln!(out, "{response}")?;
        }
        MalformedStdout::HugeLine => {
            let prefix = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"padding":""#);
            out.write_all(prefix.as_bytes())?;
            let chunk = vec![b'x'; CHUNK_BYTES];
            let mut left = huge_line_bytes.saturating_sub(prefix.len());
            while left > 0 {
                let n = left.min(CHUNK_BYTES);
                out.write_all(&chunk[..n])?;
                left -= n;
            }
        }
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(kind: MalformedStdout, id: Value, huge: usize) -> String {
        let mut out = Vec::new();
        write_kind(&mut out, kind, &id, huge).expect("write to a Vec");
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn each_kind_writes_what_it_promises() {
        let not_json = written(MalformedStdout::NotJson, json!(0), 0);
        assert_eq!(not_json.lines().count(), MALFORMED_LINES);
        assert!(
            not_json
                .lines()
                .all(|l| serde_json::from_str::<Value>(l).is_err())
        );

        let not_rpc = written(MalformedStdout::NotJsonrpc, json!(0), 0);
        for line in not_rpc.lines() {
            let value: Value = serde_json::from_str(line).expect("JSON");
            assert!(value.get("jsonrpc").is_none() && value.get("id").is_none());
        }

        let wrong = written(MalformedStdout::WrongId, json!(0), 0);
        let value: Value = serde_json::from_str(wrong.trim()).expect("JSON");
        assert_eq!(value["id"], json!(1000));
        assert!(value["result"]["protocolVersion"].is_string());
        let wrong = written(MalformedStdout::WrongId, json!("a"), 0);
        assert!(wrong.contains(r#""id":"a-wrong""#), "{wrong}");

        let huge = written(MalformedStdout::HugeLine, json!(7), 3 * CHUNK_BYTES + 5);
        assert_eq!(huge.len(), 3 * CHUNK_BYTES + 5);
        assert!(huge.starts_with(r#"{"jsonrpc":"2.0","id":7,"result":{"padding":"xxx"#));
        assert!(!huge.contains('\n'));
    }
}
