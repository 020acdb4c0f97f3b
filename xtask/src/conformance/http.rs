//! Just enough HTTP/1.1 for the conformance client on loopback: JSON calls to the chat API,
//! and the person's browser's plain GETs of the suite's authorization server and of
//! ctxsync's sign-in callback. One request per connection (`Connection: close`), the
//! answer read to its end.
//!
//! Written here rather than taken from a crate: xtask needs a few requests to plain
//! loopback listeners, and a client crate would add itself (and its TLS stack) to the
//! workspace's lock file and to the generated workspace-hack for that.

use std::fmt;
use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream, ToSocketAddrs};
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
        let stream = TcpStream::connect(&self.authority)
            .with_context(|| format!("connecting to the chat API at {}", self.authority))?;
        let payload = body.map(serde_json::Value::to_string).unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nAccept: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{payload}",
            self.authority,
            self.token,
            payload.len()
        );
        let raw = round_trip(stream, &request, timeout)
            .with_context(|| format!("sending {method} {path} to the chat API"))?;
        parse_answer(&raw).with_context(|| format!("the chat API's answer to {method} {path}"))
    }
}

/// An absolute `http://` URL on this machine's loopback: the only kind the person's
/// browser in the conformance client opens (the suite's servers and ctxsync all listen
/// there). Shown without its query, which carries the OAuth `state` and `code`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LoopbackUrl {
    /// As written, without brackets for IPv6.
    host: String,
    port: u16,
    /// Starts with `/`; the query included, the fragment dropped.
    target: String,
}

impl LoopbackUrl {
    /// Parses an absolute URL; refuses anything but plain `http` to a loopback host, in
    /// words.
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let shown = url.split(['?', '#']).next().unwrap_or_default();
        let Some((scheme, rest)) = url.split_once("://") else {
            bail!("{shown:?} is not an absolute URL");
        };
        if scheme.eq_ignore_ascii_case("https") {
            bail!(
                "{shown} is https: the conformance client's browser speaks only plain http, to \
                 this machine's loopback (where the suite's servers listen)"
            );
        }
        if !scheme.eq_ignore_ascii_case("http") {
            bail!("{shown} is not an http URL");
        }
        let rest = rest.split('#').next().unwrap_or_default();
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, target) = rest.split_at(end);
        if authority.contains('@') {
            bail!("{shown} names a user: the browser sends no credentials in a URL");
        }
        let (host, port) = match authority.strip_prefix('[') {
            Some(bracketed) => {
                let (host, after) = bracketed
                    .split_once(']')
                    .with_context(|| format!("{shown} has an unclosed [ in its host"))?;
                (host, after.strip_prefix(':'))
            }
            None => match authority.split_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            },
        };
        let port = match port {
            None | Some("") => 80,
            Some(port) => port
                .parse()
                .with_context(|| format!("{shown} has no valid port"))?,
        };
        let loopback = host.eq_ignore_ascii_case("localhost")
            || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
        if !loopback {
            bail!(
                "{shown} is not on this machine's loopback: the conformance client's browser \
                 goes nowhere else"
            );
        }
        let target = match target {
            "" => "/".to_owned(),
            query if query.starts_with('?') => format!("/{query}"),
            path => path.to_owned(),
        };
        Ok(Self {
            host: host.to_owned(),
            port,
            target,
        })
    }

    /// Where a redirect's `Location` leads from here: absolute, scheme-relative,
    /// absolute-path, query-only or path-relative (without dot-segment removal, which
    /// the suite's servers never need).
    pub(crate) fn join(&self, location: &str) -> Result<Self> {
        let location = location.trim();
        let scheme = location.split(':').next().unwrap_or_default();
        let has_scheme = location.contains(':')
            && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
        if has_scheme {
            return Self::parse(location);
        }
        if let Some(rest) = location.strip_prefix("//") {
            return Self::parse(&format!("http://{rest}"));
        }
        let location = location.split('#').next().unwrap_or_default();
        let target = if location.starts_with('/') {
            location.to_owned()
        } else if location.starts_with('?') {
            format!("{}{location}", self.path())
        } else if location.is_empty() {
            self.target.clone()
        } else {
            let path = self.path();
            let dir = &path[..path.rfind('/').map_or(0, |slash| slash + 1)];
            format!("{dir}{location}")
        };
        Ok(Self {
            target,
            ..self.clone()
        })
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// The path, without the query.
    pub(crate) fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("/")
    }

    /// The query parameter `name`, percent-decoded.
    pub(crate) fn query_param(&self, name: &str) -> Option<String> {
        let (_, query) = self.target.split_once('?')?;
        query
            .split('&')
            .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
            .find(|(key, _)| percent_decode(key) == name)
            .map(|(_, value)| percent_decode(value))
    }

    /// `host:port` as a `Host` header says it.
    fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Display for LoopbackUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}{}", self.authority(), self.path())
    }
}

/// A page a browser GET answered: its status, where it redirects, its text.
pub(crate) struct Page {
    pub(crate) status: u16,
    pub(crate) location: Option<String>,
    pub(crate) body: String,
}

/// GETs `url` as a browser would, sending no credentials and following no redirect,
/// within `timeout` for each read and write.
pub(crate) fn get(url: &LoopbackUrl, timeout: Duration) -> Result<Page> {
    // `localhost` may resolve to several addresses; only loopback ones are tried, so a
    // resolver that says otherwise cannot send the browser elsewhere.
    let addrs: Vec<_> = (url.host.as_str(), url.port)
        .to_socket_addrs()
        .with_context(|| format!("resolving {url}"))?
        .filter(|addr| addr.ip().is_loopback())
        .collect();
    if addrs.is_empty() {
        bail!("{} resolves to no loopback address", url.host);
    }
    let stream = TcpStream::connect(&addrs[..]).with_context(|| format!("connecting to {url}"))?;
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nAccept: text/html, */*\r\n\
         User-Agent: ctxsync-conformance-client\r\nConnection: close\r\n\r\n",
        url.target,
        url.authority()
    );
    let raw = round_trip(stream, &request, timeout).with_context(|| format!("GET {url}"))?;
    let response = parse_response(&raw).with_context(|| format!("the answer to GET {url}"))?;
    Ok(Page {
        status: response.status,
        location: response.header("location").map(str::to_owned),
        body: String::from_utf8_lossy(&response.body).into_owned(),
    })
}

/// Writes `request` and reads the answer to its end.
fn round_trip(mut stream: TcpStream, request: &str, timeout: Duration) -> Result<Vec<u8>> {
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream
        .write_all(request.as_bytes())
        .context("writing the request")?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).context("reading the answer")?;
    Ok(raw)
}

/// A whole HTTP/1.1 response, its body de-chunked.
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

fn parse_response(raw: &[u8]) -> Result<Response> {
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
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_owned(), value.trim().to_owned()))
        .collect();
    let mut response = Response {
        status,
        headers,
        body: Vec::new(),
    };
    let rest = &raw[split + 4..];
    response.body = if response
        .header("transfer-encoding")
        .is_some_and(|coding| coding.eq_ignore_ascii_case("chunked"))
    {
        dechunk(rest)?
    } else {
        rest.to_vec()
    };
    Ok(response)
}

/// Splits a whole HTTP/1.1 response into its status and JSON body.
fn parse_answer(raw: &[u8]) -> Result<Answer> {
    let Response { status, body, .. } = parse_response(raw)?;
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

/// `%XX` escapes and `+` (a space in a form-encoded query) undone; a broken escape is
/// kept as written.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => match text
                .get(i + 1..i + 3)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
            {
                Some(byte) => {
                    out.push(byte);
                    i += 2;
                }
                None => out.push(b'%'),
            },
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
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

    #[test]
    fn a_redirect_keeps_its_location() {
        let raw = b"HTTP/1.1 302 Found\r\nlocation: http://127.0.0.1:9/oauth/callback?code=c&state=s\r\ncontent-length: 0\r\n\r\n";
        let response = parse_response(raw).unwrap();
        assert_eq!(response.status, 302);
        assert_eq!(
            response.header("Location"),
            Some("http://127.0.0.1:9/oauth/callback?code=c&state=s")
        );
    }

    /// `(url, host, port, target)` for each URL the browser takes.
    #[test]
    fn loopback_http_urls_parse() {
        for (url, host, port, target) in [
            (
                "http://localhost:3000/authorize?a=1",
                "localhost",
                3000,
                "/authorize?a=1",
            ),
            ("HTTP://127.0.0.1:9", "127.0.0.1", 9, "/"),
            ("http://127.0.0.2?x=y#frag", "127.0.0.2", 80, "/?x=y"),
            ("http://[::1]:8080/a/b#f", "::1", 8080, "/a/b"),
            ("http://LOCALHOST:/p", "LOCALHOST", 80, "/p"),
        ] {
            let parsed = LoopbackUrl::parse(url).unwrap();
            assert_eq!(
                (parsed.host.as_str(), parsed.port, parsed.target.as_str()),
                (host, port, target),
                "{url}"
            );
        }
    }

    /// Each refused URL and the words that say why.
    #[test]
    fn other_urls_are_refused_in_words() {
        for (url, words) in [
            (
                "https://localhost:3000/authorize?state=s",
                "https://localhost:3000/authorize is https",
            ),
            (
                "http://example.com/authorize",
                "is not on this machine's loopback",
            ),
            ("http://10.0.0.1:80/", "is not on this machine's loopback"),
            ("http://user:pw@localhost/", "names a user"),
            ("ftp://localhost/", "is not an http URL"),
            ("/oauth/callback", "is not an absolute URL"),
            ("http://localhost:99999/", "has no valid port"),
            ("http://[::1/", "unclosed ["),
        ] {
            let error = LoopbackUrl::parse(url).unwrap_err().to_string();
            assert!(error.contains(words), "{url}: {error}");
            assert!(
                !error.contains("state=s"),
                "{url}: the query shows: {error}"
            );
        }
    }

    /// `(location, where it leads)` from `http://localhost:3000/tenant1/authorize?a=1`.
    #[test]
    fn redirects_resolve_against_the_current_url() {
        let base = LoopbackUrl::parse("http://localhost:3000/tenant1/authorize?a=1").unwrap();
        for (location, expect) in [
            (
                "http://127.0.0.1:9/oauth/callback?code=c&state=s",
                "http://127.0.0.1:9/oauth/callback?code=c&state=s",
            ),
            ("//127.0.0.1:9/cb?x", "http://127.0.0.1:9/cb?x"),
            (
                "/oauth/callback?code=c",
                "http://localhost:3000/oauth/callback?code=c",
            ),
            ("?b=2", "http://localhost:3000/tenant1/authorize?b=2"),
            ("next?c=3#frag", "http://localhost:3000/tenant1/next?c=3"),
            ("", "http://localhost:3000/tenant1/authorize?a=1"),
        ] {
            let expect = LoopbackUrl::parse(expect).unwrap();
            assert_eq!(base.join(location).unwrap(), expect, "{location}");
        }
        assert!(base.join("https://localhost:3000/secure").is_err());
        assert!(base.join("http://example.com/elsewhere").is_err());
        assert!(base.join("javascript:alert(1)").is_err());
        assert_eq!(
            base.join("cb?to=http://x").unwrap().to_string(),
            "http://localhost:3000/tenant1/cb"
        );
    }

    #[test]
    fn query_params_are_decoded_and_shown_urls_hide_the_query() {
        let url = LoopbackUrl::parse(
            "http://localhost:3000/authorize?client_id=https%3A%2F%2Fc.local%2Fm.json&scope=mcp%3Abasic+mcp:write&state=s&flag",
        )
        .unwrap();
        assert_eq!(
            url.query_param("client_id").as_deref(),
            Some("https://c.local/m.json")
        );
        assert_eq!(
            url.query_param("scope").as_deref(),
            Some("mcp:basic mcp:write")
        );
        assert_eq!(url.query_param("flag").as_deref(), Some(""));
        assert_eq!(url.query_param("resource"), None);
        assert_eq!(url.to_string(), "http://localhost:3000/authorize");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%41"), "%zzA");
    }
}
