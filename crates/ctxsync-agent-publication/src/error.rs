//! The errors the publisher returns: bad configuration at start, or being superseded while
//! running. Everything else is retried, never returned — a refused token included.

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
    /// A file of [`PublisherConfig::ca_cert_files`](crate::PublisherConfig::ca_cert_files)
    /// is unreadable, holds no certificate, or holds one that cannot be trusted.
    #[error("CA certificate file {}: {reason}", path.display())]
    CaCertFile { path: PathBuf, reason: String },
    /// An `https://` server, but the platform's trusted certificates could not be loaded
    /// and no CA certificate file was given.
    #[error(
        "no certificate authority to trust for {url}: the platform's trusted certificates could not be loaded ({reason}); give the server's CA certificate file"
    )]
    NoTrustedCertificates { url: String, reason: String },
    /// rustls refused the client configuration (not expected with the built-in provider).
    #[error("cannot set up TLS: {reason}")]
    TlsSetup { reason: String },
    /// `UpdateStartup` answered `FailedPrecondition`: a newer process of the same agent
    /// registered itself, and this one must stop.
    #[error(
        "this agent process (run id {run_id}) was superseded by a newer agent process and stops publishing; the server said: {message}"
    )]
    Superseded { run_id: String, message: String },
}
