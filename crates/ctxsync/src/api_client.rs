//! What the commands that talk to a running server's chat API share (`ctxsync context`,
//! `call`, `calls`, `chats`, `turn`, `link`): its address, the certificate authorities to
//! trust, and the API token (given, or read from a local server's data directory); a
//! refused token names the address and where the token came from, and an address that
//! answers gRPC says it is the agent API's port. Never prints the token.

use std::path::PathBuf;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;

/// The flags naming a server's chat API and how to authenticate to it.
#[derive(Debug, Args)]
pub struct ApiClientArgs {
    /// The server's chat API (HTTP): `chat API (HTTP)` in `ctxsync server`'s output,
    /// https:// when it has a certificate. Not the agent API's gRPC port (4770).
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:4780")]
    pub server: String,
    /// A PEM file of certificate authorities to trust for https, besides the system's
    /// (repeatable).
    #[arg(long = "ca-cert", value_name = "FILE", env = "CTXSYNC_CA_CERT")]
    pub ca_certs: Vec<PathBuf>,
    /// The HTTP API token; default: `<data-dir>/api-token` of a local server.
    #[arg(long, env = "CTXSYNC_API_TOKEN", hide_env_values = true)]
    pub api_token: Option<crate::secret::Secret>,
    /// The local server's data directory, to read its API token from: the server's own
    /// `--data-dir`; default: `$XDG_DATA_HOME/ctxsync`, else `~/.local/share/ctxsync`.
    #[arg(long, env = "CTXSYNC_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

impl ApiClientArgs {
    /// The API token: `--api-token`, else the local server's `api-token` file.
    pub fn token(&self) -> Result<String> {
        if let Some(token) = &self.api_token {
            return Ok(token.expose().to_owned());
        }
        let path = self.token_file();
        match std::fs::read_to_string(&path) {
            Ok(token) => Ok(token.trim().to_string()),
            Err(e) => bail!(
                "cannot read the API token from {} ({e}): give the data dir `ctxsync server` \
                 was started with (--data-dir or CTXSYNC_DATA_DIR), or its token with \
                 --api-token or CTXSYNC_API_TOKEN",
                path.display()
            ),
        }
    }

    fn token_file(&self) -> PathBuf {
        self.data_dir
            .clone()
            .unwrap_or_else(crate::paths::default_data_dir)
            .join("api-token")
    }

    /// Where the token came from, for an error a person reads (never the token).
    fn token_origin(&self) -> String {
        if self.api_token.is_some() {
            "the API token given by --api-token or CTXSYNC_API_TOKEN".to_owned()
        } else {
            format!("the API token read from {}", self.token_file().display())
        }
    }

    /// `--server` without a trailing slash, for joining paths onto.
    pub fn base(&self) -> &str {
        self.server.trim_end_matches('/')
    }

    /// Sends `request` (to this server) as [`crate::api_client::send`] does; a refused
    /// token also names where it was read from.
    pub async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<(reqwest::StatusCode, String)> {
        send_from(request, self.base(), Some(&self.token_origin())).await
    }

    /// A JSON request to `path` with the token, answering the server's JSON (`null` for an
    /// empty answer); a non-2xx answer is an error quoting the server's message.
    pub async fn json(
        &self,
        client: &reqwest::Client,
        token: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<serde_json::Value> {
        let mut request = client
            .request(method, format!("{}{path}", self.base()))
            .bearer_auth(token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let (_, text) = self.send(request).await?;
        if text.trim().is_empty() {
            return Ok(serde_json::Value::Null);
        }
        serde_json::from_str(&text).context("the server's answer is not JSON")
    }

    /// An HTTP client that also trusts `--ca-cert`'s authorities.
    pub fn client(&self) -> Result<reqwest::Client> {
        let mut trusted = Vec::new();
        for path in &self.ca_certs {
            let pem = std::fs::read(path)
                .with_context(|| format!("reading the CA certificate file {}", path.display()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .ok()
                .filter(|certs| !certs.is_empty())
                .with_context(|| format!("{} holds no PEM certificate", path.display()))?;
            trusted.extend(certs);
        }
        reqwest::Client::builder()
            .tls_certs_merge(trusted)
            .build()
            .context("setting up the HTTP client")
    }
}

/// Sends `request` to the server at `base` and answers the status and the text of a
/// 2xx answer; any other answer is [`answer_error`].
pub async fn send(
    request: reqwest::RequestBuilder,
    base: &str,
) -> Result<(reqwest::StatusCode, String)> {
    send_from(request, base, None).await
}

async fn send_from(
    request: reqwest::RequestBuilder,
    base: &str,
    token_origin: Option<&str>,
) -> Result<(reqwest::StatusCode, String)> {
    let response = match request.send().await {
        Ok(response) => response,
        Err(e) => {
            if crate::wrong_port::is_agent_api(base, &e).await {
                bail!(
                    "cannot talk to the chat API at {base}: this looks like the gRPC port (the \
                     agent API); this command needs the HTTP one, `chat API (HTTP)` in \
                     `ctxsync server`'s output (127.0.0.1:4780 by default)"
                );
            }
            return Err(
                anyhow::Error::new(e).context(format!("cannot reach the ctxsync server at {base}"))
            );
        }
    };
    let status = response.status();
    let text = response
        .text()
        .await
        .context("reading the server's answer")?;
    if status == reqwest::StatusCode::UNAUTHORIZED {
        let origin = token_origin.unwrap_or("the API token");
        bail!(
            "the chat API at {base} refused {origin} (401): use the token of the server at \
             that address: its data dir (--data-dir or CTXSYNC_DATA_DIR, as the server was \
             started with) or --api-token"
        );
    }
    if !status.is_success() {
        return Err(answer_error(status, &text));
    }
    Ok((status, text))
}

/// The error for a non-2xx answer: its status and the server's `error` message (else the
/// whole text), escaped for a terminal.
pub fn answer_error(status: reqwest::StatusCode, text: &str) -> anyhow::Error {
    let message = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_owned))
        .unwrap_or_else(|| text.to_owned());
    anyhow!(
        "the server answered {status}: {}",
        crate::terminal::for_terminal(&message)
    )
}
