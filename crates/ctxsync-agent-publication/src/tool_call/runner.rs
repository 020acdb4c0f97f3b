//! The seam between the call wing and whatever runs a call or a sign-in: the agent's
//! binary wires the MCP engine to it, tests a scripted runner.

use std::future::Future;

use ctxsync_mcp_model::{CallEnd, CallProgress, CallSpec, SignInCredential, SignInStart};
use ctxsync_protocol::sign_in::{BeginSignIn, ExchangeSignIn, StoredSignIn};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// What a runner that cannot sign in answers.
const NO_SIGN_IN: &str = "this agent cannot sign in to MCP servers";

/// What runs a call: the MCP engine's `ToolCaller` in the agent, a scripted runner in
/// tests. The sign-in methods default to a runner that cannot sign in.
pub trait CallRunner: Clone + Send + Sync + 'static {
    /// Whether `server` is connected and currently lists `tool`.
    fn lists(&self, server: &str, tool: &str) -> bool;

    /// Runs `spec` to its end (which is never `running` or `unknown`), honouring its
    /// timeout and `cancel`, passing progress to `progress`.
    fn call(
        &self,
        spec: CallSpec,
        progress: mpsc::Sender<CallProgress>,
        cancel: CancellationToken,
    ) -> impl Future<Output = CallEnd> + Send;

    /// Starts a person's sign-in to an HTTP server: where the person signs in, or why
    /// not in words.
    fn begin_sign_in(
        &self,
        begin: BeginSignIn,
    ) -> impl Future<Output = Result<SignInStart, String>> + Send {
        let _ = begin;
        async { Err(NO_SIGN_IN.to_owned()) }
    }

    /// Finishes one with the person's code: the credential (already in use), or why
    /// not in words.
    fn finish_sign_in(
        &self,
        exchange: ExchangeSignIn,
    ) -> impl Future<Output = Result<SignInCredential, String>> + Send {
        let _ = exchange;
        async { Err(NO_SIGN_IN.to_owned()) }
    }

    /// A credential the server kept (or, without one, one to forget).
    fn restore_sign_in(&self, stored: StoredSignIn) {
        let _ = stored;
    }

    /// The next credential the runner refreshed or lost, for the server to keep; never
    /// resolves for a runner that does not sign in. Must be cancel-safe: the wing polls
    /// it beside the stream.
    fn next_sign_in_update(&self) -> impl Future<Output = StoredSignIn> + Send {
        std::future::pending()
    }
}
