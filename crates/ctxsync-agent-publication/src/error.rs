//! The errors the publisher returns: bad configuration at start, or being superseded while
//! running. Everything else is retried, never returned — a refused token included.

use std::path::PathBuf;

use ctxsync_protocol::RunId;

/// Why a [`Publisher`](crate::Publisher) could not start or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The server URL does not parse, is not `http://` or `https://`, has no host, or (for
    /// `https://`) names a host a certificate cannot be checked against.
    #[error("invalid server URL `{url}`: {reason}")]
    InvalidServerUrl {
        /// The URL as configured.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The agent token is empty or not all visible ASCII, so it cannot go in a header.
    #[error("the agent token cannot be sent: it must be non-empty visible ASCII")]
    InvalidToken,
    /// The workspace directory cannot be expanded (`~` or a variable unset), does not
    /// exist, or is not a directory.
    #[error("workspace directory {}: {reason}", path.display())]
    Workspace {
        /// The directory: expanded when expansion succeeded, else as configured.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A file of [`PublisherConfig::ca_cert_files`](crate::PublisherConfig::ca_cert_files)
    /// is unreadable, holds no certificate, or holds one that cannot be trusted.
    #[error("CA certificate file {}: {reason}", path.display())]
    CaCertFile {
        /// The file as configured.
        path: PathBuf,
        /// Why it cannot be used.
        reason: String,
    },
    /// An `https://` server, but the platform's trusted certificates could not be loaded
    /// and no CA certificate file was given.
    #[error(
        "no certificate authority to trust for {url}: the platform's trusted certificates could not be loaded ({reason}); give the server's CA certificate file"
    )]
    NoTrustedCertificates {
        /// The server URL.
        url: String,
        /// Why the platform's certificates could not be loaded.
        reason: String,
    },
    /// rustls refused the client configuration (not expected with the built-in provider).
    #[error("cannot set up TLS: {reason}")]
    TlsSetup {
        /// rustls's error.
        reason: String,
    },
    /// The tool call configuration is out of bounds (the result cap, or the heartbeat
    /// against the silence limit) or contradicts itself (`--no-tool-calls` with
    /// `--allow-tool-calls`).
    #[error("tool calls: {reason}")]
    ToolCalls {
        /// What is wrong, naming the flag.
        reason: String,
    },
    /// `UpdateStartup` answered `FailedPrecondition`: a newer process of the same agent
    /// registered itself, and this one must stop.
    #[error(
        "this agent process (run id {}) was superseded by a newer agent process and stops publishing; the server said: {message}",
        RunId::edge(run_id.as_ref())
    )]
    Superseded {
        /// This process's run id (the server refuses only a run id it retired).
        run_id: Option<RunId>,
        /// The server's message with the refusal.
        message: String,
    },
}
