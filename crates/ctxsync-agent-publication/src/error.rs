//! The errors the publisher returns: bad configuration at start, or a fatal refusal by the
//! server while running. Everything transient is retried, never returned.

use std::path::PathBuf;

/// Why a [`Publisher`](crate::Publisher) could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("invalid server URL `{url}`: {reason}")]
    InvalidServerUrl { url: String, reason: String },
    #[error("the agent token cannot be sent: it must be non-empty visible ASCII")]
    InvalidToken,
    #[error("workspace directory {}: {reason}", path.display())]
    Workspace { path: PathBuf, reason: String },
    /// `UpdateStartup` answered `FailedPrecondition`: a newer process of the same agent
    /// registered itself, and this one must stop.
    #[error(
        "this agent process (run id {run_id}) was superseded by a newer agent process and stops publishing; the server said: {message}"
    )]
    Superseded { run_id: String, message: String },
    /// The server refused the token (`Unauthenticated` or `PermissionDenied`).
    #[error("the server refused the agent token: {message}")]
    Unauthenticated { message: String },
}
