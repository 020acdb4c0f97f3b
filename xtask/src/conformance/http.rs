//! Just enough HTTP/1.1 for the conformance client to drive the chat API on loopback: one
//! JSON request per connection (`Connection: close`), the answer read to its end.
//!
//! Written here rather than taken from a crate: xtask needs four JSON calls to a plain
//! loopback listener, and a client crate would add itself (and its TLS stack) to the
//! workspace's lock file and to the generated workspace-hack for that.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// The chat API of one running server: its `host:port` and the API token.
pub(crate) struct ChatApi {
    pub(crate) authority: String,
    pub(crate) token: String,
}

/// An answer: the status code and the body as JSON (`null` when empty).
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) body: serde_json::Value,
}

impl ChatApi {
    /// Sends `method path` with `body` (JSON) and reads the whole answer, within `timeout`
    /// for each read and write.
    pub(crate) fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&serde_json::Value>,
        timeout: Duration,
    ) -> Result<Answer> {
        let mut stream = TcpStream::connect(&self.authority)
            .with_context(|| format!("connecting to the chat API at {}", self.authority))?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let payload = body.map(serde_json::Value::to_string).unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nAccept: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            self.authority,
            self.token,
            payload.len()
        );
        stream
            .write_all(head.as_bytes())
            .and_then(|()| stream.write_all(payload.as_bytes()))
            .with_context(|| format!("sending {method} {path} to the chat API"))?;
        let mut raw = Vec::new();
        stream
            .read_to_end(&mut raw)
            .with_context(|| format!("reading the chat API's answer to {method} {path}"))?;
        parse_answer(&raw).with_context(|| format!("the chat API's answer to {method} {path}"))
    }
}

/// Splits a whole HTTP/1.1 response into its status and JSON body, undoing chunked
/// transfer encoding.
fn parse_answer(raw: &[u8]) -> Result<Answer> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("the answer ended before its headers did")?;
    let head = std::str::from_utf8(&raw[..split]).context("the headers are not text")?;
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .context("the answer has no status line")?;
    let chunked = lines.any(|line| {
        line.split_once(':').is_some_and(|(name, value)| {
            name.trim().eq_ignore_ascii_case("transfer-encoding")
                && value.trim().eq_ignore_ascii_case("chunked")
        })
    });
    let rest = &raw[split + 4..];
    let body = if chunked {
        dechunk(rest)?
    } else {
        rest.to_vec()
    };
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        serde_json::Value::Null
    } else {
        serde_json::from_slice(&body).with_context(|| {
            format!(
                "status {status}, a body that is not JSON: {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            )
        })?
    };
    Ok(Answer { status, body })
}

fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .context("a chunk's size line never ended")?;
        let size = std::str::from_utf8(&rest[..end])
            .ok()
            .map(|line| line.split(';').next().unwrap_or_default().trim())
            .and_then(|hex| usize::from_str_radix(hex, 16).ok())
            .context("a chunk's size is not hexadecimal")?;
        rest = &rest[end + 2..];
        if size == 0 {
            return Ok(body);
        }
        if rest.len() < size + 2 {
            bail!("the answer ended inside a chunk");
        }
        body.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_sized_json_answer() {
        let raw = b"HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: 10\r\n\r\n{\"id\":\"a\"}";
        let answer = parse_answer(raw).unwrap();
        assert_eq!(answer.status, 201);
        assert_eq!(answer.body["id"], "a");
    }

    #[test]
    fn reads_a_chunked_answer_and_an_empty_one() {
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3;x=y\r\n:1}\r\n0\r\n\r\n";
        assert_eq!(parse_answer(raw).unwrap().body["a"], 1);
        let empty = parse_answer(b"HTTP/1.1 204 No Content\r\n\r\n").unwrap();
        assert_eq!((empty.status, empty.body), (204, serde_json::Value::Null));
    }

    #[test]
    fn a_cut_answer_is_an_error() {
        assert!(parse_answer(b"HTTP/1.1 200 OK\r\ncontent-").is_err());
        let cut = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{\"a\"";
        assert!(parse_answer(cut).is_err());
    }
}
