//! What the commands that talk to a running server's chat API share (`ctxsync context`,
//! `ctxsync call`, `ctxsync calls`): its address, the certificate authorities to trust,
//! and the API token (given, or read from a local server's data directory). Never prints
//! the token.

use std::path::PathBuf;

use anyhow::{Context, Result, anyhow};
use clap::Args;

/// The flags naming a server's chat API and how to authenticate to it.
#[derive(Debug, Args)]
pub struct ApiClientArgs {
    /// The server's HTTP address (https:// when the server has a certificate).
    #[arg(long, default_value = "http://127.0.0.1:4780")]
    pub server: String,
    /// A PEM file of certificate authorities to trust for https, besides the system's
    /// (repeatable).
    #[arg(long = "ca-cert", value_name = "FILE", env = "CTXSYNC_CA_CERT")]
    pub ca_certs: Vec<PathBuf>,
    /// The HTTP API token; default: `<data-dir>/api-token` of a local server.
    #[arg(long, env = "CTXSYNC_API_TOKEN", hide_env_values = true)]
    pub api_token: Option<crate::secret::Secret>,
    /// The local server's data directory, to read its API token from.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
}

impl ApiClientArgs {
    /// The API token: `--api-token`, else the local server's `api-token` file.
    pub fn token(&self) -> Result<String> {
        if let Some(token) = &self.api_token {
            return Ok(token.expose().to_owned());
        }
        let path = self
            .data_dir
            .clone()
            .unwrap_or_else(crate::paths::default_data_dir)
            .join("api-token");
        Ok(std::fs::read_to_string(&path)
            .with_context(|| format!("no --api-token given and {} cannot be read", path.display()))?
            .trim()
            .to_string())
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
    let response = request
        .send()
        .await
        .with_context(|| format!("cannot reach the ctxsync server at {base}"))?;
    let status = response.status();
    let text = response
        .text()
        .await
        .context("reading the server's answer")?;
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
