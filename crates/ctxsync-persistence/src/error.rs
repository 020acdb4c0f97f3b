//! The store's error type: what went wrong, in terms a caller can act on.

use diesel::result::{DatabaseErrorKind, Error as DieselError};

use crate::ids::{AgentId, ChatId};

/// An error at the store's boundary. [`StoreError::Unavailable`] and
/// [`StoreError::Conflict`] are transient: retrying later may succeed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No agent has this id (never created, or deleted).
    #[error("agent {0} not found")]
    AgentNotFound(AgentId),
    /// No chat has this id.
    #[error("chat {0} not found")]
    ChatNotFound(ChatId),
    /// The bearer token is malformed or names no agent.
    #[error("invalid agent token")]
    InvalidToken,
    /// An UpdateStartup carrying a run id this agent already replaced.
    #[error("agent run {run_id:?} was superseded by a newer agent process")]
    SupersededRun {
        /// The refused run id, one of the agent's retired ones.
        run_id: ctxsync_protocol::RunId,
    },
    /// The caller passed something the store refuses before touching the database.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// A bounded table is full of live rows (e.g. open page links): refused, nothing
    /// written; it frees up as rows expire.
    #[error("limit reached: {0}")]
    LimitReached(String),
    /// The database cannot be reached (down, restarting, pool exhausted).
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// Concurrent writers kept conflicting after every retry.
    #[error("write conflict: {0}")]
    Conflict(String),
    /// Stored data that cannot be read back (a migration or a foreign writer broke it).
    #[error("corrupt stored data: {0}")]
    Corrupt(String),
    /// Sealed MCP sign-in credentials (or a client secret) that the keyring given cannot
    /// open: sealed under a key it does not hold, or altered. Nothing was changed; the row
    /// is kept as it was, for the right key to open.
    #[error(
        "the stored credentials for {subject} cannot be read with the secrets key given \
         ({detail}): was the key file changed?"
    )]
    CredentialsUnreadable {
        /// Whose credentials: the agent, server URL and issuer (or the OAuth client).
        subject: String,
        /// Which key sealed them and which keys were given.
        detail: String,
    },
    /// Opening the store could not apply the embedded migrations.
    #[error("applying migrations failed: {0}")]
    Migration(String),
    /// Any other diesel error (kept as the source); not transient.
    #[error("database error: {0}")]
    Database(#[source] DieselError),
}

impl StoreError {
    /// True for errors that say nothing about the request: retry later.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::Conflict(_))
    }
}

impl From<DieselError> for StoreError {
    fn from(error: DieselError) -> Self {
        match &error {
            DieselError::DatabaseError(kind, info) => match kind {
                DatabaseErrorKind::ClosedConnection | DatabaseErrorKind::UnableToSendCommand => {
                    Self::Unavailable(info.message().to_owned())
                }
                DatabaseErrorKind::SerializationFailure => {
                    Self::Conflict(info.message().to_owned())
                }
                _ if is_connection_failure(info.message()) => {
                    Self::Unavailable(info.message().to_owned())
                }
                _ => Self::Database(error),
            },
            DieselError::BrokenTransactionManager => Self::Unavailable(error.to_string()),
            DieselError::DeserializationError(e) => Self::Corrupt(e.to_string()),
            _ => Self::Database(error),
        }
    }
}

impl From<diesel::r2d2::PoolError> for StoreError {
    fn from(error: diesel::r2d2::PoolError) -> Self {
        Self::Unavailable(error.to_string())
    }
}

impl From<diesel::ConnectionError> for StoreError {
    fn from(error: diesel::ConnectionError) -> Self {
        Self::Unavailable(error.to_string())
    }
}

/// Messages of errors that mean the server went away or is refusing work, which diesel
/// reports without a dedicated kind (SQLSTATE classes 08 and 57P, SQLite busy/locked).
fn is_connection_failure(message: &str) -> bool {
    const MARKERS: &[&str] = &[
        "server closed the connection",
        "terminating connection",
        "connection to server",
        "the database system is shutting down",
        "the database system is starting up",
        "no connection to the server",
        "database is locked",
        "database is busy",
    ];
    MARKERS.iter().any(|m| message.contains(m))
}
