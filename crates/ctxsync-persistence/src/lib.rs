//! ctxsync persistence (layer 3, SPEC §5).
//!
//! Owns: the diesel schema and migrations for PostgreSQL and embedded SQLite
//! ([`db::migrations`]), the [`Store`] (agents and tokens, UpdateStartup,
//! PushContextState, full or delta — a delta is applied only on the base it names, this
//! run's rows with those body digests, else refused with nothing written —, consistent
//! reads, chats and their pinned context, chat turns with their tools' origins and their
//! find_tools activations, the turns' tool calls, and the tool-call audit log that outlives
//! them ([`AuditRecord`]: one row per call end, kept by age, the arguments only as a digest
//! keyed with a secret the deployment creates in its database on first use; beside it the
//! sign-in entries, [`SignInAuditRecord`], and one listing of every kind,
//! [`Store::list_audit_log`]), change
//! notifications ([`ChangeEvent`]; in-process for SQLite, LISTEN/NOTIFY across
//! processes for PostgreSQL), and the store's side of routed requests — tool calls —
//! across replicas: agents' stream leases, claims, cancel requests and the sweep, each a
//! compare-and-set ([`StreamLease`]), and from the same rows whether each agent is
//! connected now ([`AgentConnection`]); and the MCP sign-in credentials an agent's
//! servers were signed in with ([`McpCredential`], [`OAuthClient`]), their secrets
//! encrypted at rest under a [`SecretsKey`] that is not in the database (see
//! [`Store::save_credential`] and, for rotation, [`Store::rekey_credentials`]), and the
//! sign-ins that make them, each a routed request from the replica a person asked on to the
//! one holding the agent's stream ([`Store::request_sign_in`], [`CallbackOutcome`]). Bearer
//! tokens are parsed and hashed here ([`PresentedToken`]); the gRPC service and the call
//! hub that use them are `ctxsync-agent-api`'s.
//!
//! Network and disk: PostgreSQL's `sslmode`/`sslrootcert` mean what libpq says for the
//! pool (libpq itself) and for the LISTEN connection (OpenSSL configured to match), and
//! are checked before anything connects. A SQLite database file, its `-wal`/`-shm`
//! siblings and any directory the store creates for them are private to the owner
//! (0600/0700, whatever the umask); an existing directory is left as it is.
//!
//! Must never: know gRPC or any transport (tonic is not in its dependency tree); print a
//! database password (`Debug` and messages mask it); let the LISTEN connection accept a
//! server the pool would refuse, or the reverse; trust event or push content (events carry
//! ids and versions only, readers re-read committed state; pushes are parsed before any
//! database access); store an agent token (only its sha256); let one agent touch
//! another's rows or calls; store a call's arguments past its delivery, or its arguments or
//! result in the audit log; print the digest key; store a sign-in's token, client secret,
//! code or pending state other than sealed (its OAuth state only as a hash), keep a
//! secrets key, or show either in `Debug`; depend on a
//! workspace crate other than `ctxsync-protocol` and `ctxsync-mcp-model`.
//!
//! ## Blocking database work
//!
//! diesel is synchronous. Every store operation checks a connection out of an r2d2
//! pool (diesel's `r2d2` feature) and runs its whole transaction inside one
//! `tokio::task::spawn_blocking` call, so the async runtime never blocks on the
//! database. We chose this over `diesel-async` because: it supports both backends
//! with one API (diesel-async has no native SQLite connection, only a wrapper that
//! itself uses blocking threads); a transaction is a plain closure, which makes the
//! PostgreSQL retry-on-serialization-failure loop and SQLite's `BEGIN IMMEDIATE`
//! simple and obviously correct; and the per-operation hop to a blocking thread costs
//! microseconds against a transaction's milliseconds. The one place that must be
//! truly asynchronous, waiting for PostgreSQL notifications, uses a dedicated
//! `tokio-postgres` connection instead (see Notifications below). The crate README
//! carries the same justification at more length.
//!
//! ## Notifications
//!
//! Writers publish an event after commit to in-process subscribers. On PostgreSQL the
//! transaction also runs `pg_notify` (delivered at commit), and every store keeps one
//! event-driven LISTEN connection that forwards other processes' events; when that
//! connection drops it reconnects with backoff and sends [`ChangeEvent::Resync`].
//!
//! ## Features
//!
//! - `sqlite` (default): embedded SQLite, compiled in.
//! - `postgres` (default): PostgreSQL through a compiled-in libpq and OpenSSL, and the
//!   LISTEN connection (tokio-postgres).
//!
//! At least one is needed. A build without one links none of its code; a
//! [`DatabaseConfig`] naming it fails to open with [`StoreError::InvalidInput`] naming
//! the feature ([`Backend::is_enabled`] asks in advance).
//!
//! ## Example
//!
//! Open an embedded SQLite database, create an agent, store the snapshot its process
//! pushed and read it back:
//!
//! ```
//! use ctxsync_persistence::{DatabaseConfig, PushOutcome, Store};
//! use ctxsync_protocol::{DiscoveryPhase, RunId, Snapshot, Startup};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let store = Store::open(DatabaseConfig::sqlite_in(dir.path())).await?;
//! // The bearer token (`agent.token`) exists only here; the store keeps its hash.
//! let agent = store.create_agent("laptop").await?;
//!
//! let run = RunId::new("4f1c1a52-6a43-4c39-9b59-0b8b1d0e0a01");
//! let startup = Startup { agent_run_id: run.clone(), ..Startup::default() };
//! store.update_startup(agent.id, startup).await?;
//! let snapshot = Snapshot {
//!     version: 1,
//!     initial: true,
//!     agent_run_id: run.clone(),
//!     phase: DiscoveryPhase::Complete,
//!     // sha256 over no resources, as the agent computes it.
//!     aggregate_hash: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855".into(),
//!     ..Snapshot::default()
//! };
//! let outcome = store.push_context_state(agent.id, snapshot).await?;
//! assert!(matches!(outcome, PushOutcome::Accepted(_)));
//!
//! let context = store.read_agent_context(agent.id).await?.expect("the agent exists");
//! assert_eq!(context.agent.agent_run_id, run);
//! let stored = context.snapshot.expect("a snapshot is stored");
//! assert_eq!((stored.version, stored.phase), (1, DiscoveryPhase::Complete));
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

#[cfg(not(any(feature = "postgres", feature = "sqlite")))]
compile_error!(
    "ctxsync-persistence needs at least one backend: enable `sqlite`, `postgres` or both"
);

mod agents;
mod audit;
mod chats;
mod credentials;
mod db;
mod deployment_secrets;
mod error;
mod gate_attempts;
mod ids;
mod model;
mod notify;
mod page_sessions;
#[cfg(feature = "postgres")]
mod pg_listener;
#[cfg(feature = "postgres")]
mod pg_tls;
mod push;
mod schema;
mod shared;
mod sign_in;
mod sql_types;
mod store;
#[cfg(feature = "test-support")]
pub mod test_support;
mod token;
mod tool_call;
mod turns;

pub use agents::MAX_AGENT_NAME_BYTES;
pub use audit::{
    AuditCursor, AuditEntry, AuditKind, AuditLogPage, AuditLogQuery, AuditPage, AuditQuery,
    AuditRecord, AuditVia, DEFAULT_AUDIT_PAGE, MAX_AUDIT_PAGE, SignInAuditRecord,
    SignInAuditStatus,
};
pub use credentials::{
    CredentialSecrets, CredentialSummary, KeyId, Keyring, McpCredential, OAuthClient,
    SECRETS_KEY_BYTES, SECRETS_KEY_FILE_NAME, SecretString, SecretsKey, SecretsKeyError,
};
pub use db::migrations;
pub use db::{
    Backend, DEFAULT_CONNECTION_TIMEOUT, DEFAULT_OPERATION_TIMEOUT, DatabaseConfig,
    MAX_WRITE_ATTEMPTS, SQLITE_FILE_NAME, StoreOptions, TCP_KEEPALIVE_IDLE, TCP_KEEPALIVE_INTERVAL,
    TCP_KEEPALIVE_RETRIES,
};
pub use error::StoreError;
pub use gate_attempts::GateAttemptRecord;
pub use ids::{AgentId, AuditEntryId, ChatId, SignInId, TurnId};
pub use model::{
    AgentConnection, AgentContext, AgentPhaseGroup, AgentRecord, ChatRecord, MAX_RETIRED_RUN_IDS,
    NewAgent, PushChanges, PushOutcome, ResourceChanges, SnapshotRecord, StartupOutcome,
    StoredChat,
};
pub use notify::{
    AgentSubscription, CallChange, ChangeEvent, ChatCallSubscription, ChatSubscription,
};
pub use page_sessions::{MAX_LIVE_PAGE_LINKS, MAX_LIVE_PAGE_SESSIONS};
pub use sign_in::{
    CallbackOutcome, CallbackParams, ClaimedSignIn, MAX_SIGN_INS_PER_WINDOW, NewSignIn,
    SIGN_IN_CLAIM_TIMEOUT, SIGN_IN_LIFETIME, SIGN_IN_RATE_WINDOW, SignInRef, SignInStage,
    SignInStatus, SignInTask,
};
pub use store::Store;
pub use token::{AgentToken, PresentedToken, TokenDigest};
pub use tool_call::admission::{
    CTXSYNC_SERVER, CallAdmission, FIND_TOOLS_NAME, MAX_CALLS_PER_TURN, MAX_RECENT_CHAT_CALLS,
    NewToolCall, ToolCallRecord, ToolOrigin, TurnOrigin,
};
pub use tool_call::routing::StreamLease;
pub use turns::{
    ChatTurnMode, MAX_TOOL_NAME_BYTES, MAX_TURNS_PER_CHAT, NewTurn, TurnActivations, TurnRecord,
};
