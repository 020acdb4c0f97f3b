//! Test support for ctxsync: a real MCP server (rmcp, server side) with scripted behaviour.
//!
//! It owns nothing but test behaviour: a server reachable over stdio (the
//! `ctxsync-mcp-fixture` binary) or streamable HTTP (in-process with [`serve_http`], or the
//! binary with `--transport http`, which prints its URL on stdout), scripted by
//! [`FixtureConfig`] (builder or CLI flags): tool count and schemas, slow, hung or failing
//! `initialize` (or `server/discover`), a 2026-07-28-only server that refuses `initialize`,
//! exits with a chosen code, paged or never-ending `tools/list`, oversized tool
//! lists, secrets and floods on stderr, malformed or endless stdout instead of an answer,
//! floods of unsolicited notifications, `tools/list_changed`, a `subscriptions/listen`
//! never acknowledged, a `server/discover` refused with a bare HTTP 4xx or answered with
//! `{}` (the `lenient` lifecycle), a per-instance nonce, an optional required HTTP header,
//! every HTTP request denied with a 401 or 403 challenge, a session lost once (404), an
//! event stream cut once before its answer and resumed by `Last-Event-ID`, one
//! protocol revision of its choice, and a slow start with a line per start in a log. With
//! `--oauth` ([`OAuthConfig`]) the HTTP listener is also an OAuth 2.1 authorization server
//! (discovery metadata, registration, PKCE, rotating refresh tokens) whose bearer tokens the
//! MCP endpoint then requires, and [`HttpFixture::oauth`] shows tests what it saw.
//! With `--call-tools` it also offers tools for
//! tool-call routing (`sleep` that honours or ignores cancellation, `sized_result`, `image`,
//! `fail`, `progress`, `sample`, `env`, `count`), and `--call-log PATH` appends one JSON line
//! per call event (`started`, `cancelled`, `finished`) so tests see what reached the server.
//! Other crates' tests get the binary from [`binary_path`].
//!
//! The tool-call behaviour (`--call-tools`, `--call-log`) lives in one module, `tool_call`,
//! and the OAuth mode in another, `oauth`.
//!
//! It must never be a normal dependency of a library crate (dev-dependency only; the demo
//! binary is the one exception) and never depends on other ctxsync crates.

#![deny(missing_docs)]

mod binary;
mod config;
mod http;
mod malformed;
mod oauth;
mod process;
mod scripted_exit;
mod server;
mod silent;
mod tool_call;
mod tool_spec;

pub use binary::{FIXTURE_BIN_ENV, binary_path};
pub use config::{FixtureConfig, FixtureLifecycle, FixtureTransport, MalformedStdout};
pub use http::{HttpFixture, serve_http};
pub use oauth::{
    AuthorizeRecord, ClientAuth, OAuthClient, OAuthConfig, OAuthHandle, TokenRequestRecord,
};
pub use process::run_process;
pub use server::FixtureServer;
pub use tool_spec::ToolSpec;

/// Errors at this crate's boundary.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FixtureError {
    /// The fixture binary could not be built or found.
    #[error("cannot provide the ctxsync-mcp-fixture binary: {0}")]
    Build(String),
}
