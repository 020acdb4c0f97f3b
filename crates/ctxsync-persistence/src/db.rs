//! Database plumbing: configuration, connection pools, migrations, and the transaction
//! runners (PostgreSQL REPEATABLE READ with retries, SQLite IMMEDIATE) that every store
//! operation goes through.

use std::path::{Path, PathBuf};
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::r2d2::{ConnectionManager, CustomizeConnection, Pool as R2d2Pool, PooledConnection};
use diesel::{Connection, PgConnection, SqliteConnection};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};

use crate::error::StoreError;

/// The migrations of each backend, embedded at build time. Both trees carry the same
/// migration names.
pub mod migrations {
    use super::*;

    /// `migrations/postgres`.
    pub const POSTGRES: EmbeddedMigrations = embed_migrations!("../../migrations/postgres");
    /// `migrations/sqlite`.
    pub const SQLITE: EmbeddedMigrations = embed_migrations!("../../migrations/sqlite");
}

/// File name of the embedded database inside the data directory.
pub const SQLITE_FILE_NAME: &str = "ctxsync.sqlite3";

/// Which database a store talks to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DatabaseConfig {
    /// A PostgreSQL server, by `postgres://` (or `postgresql://`) URL.
    Postgres { url: String },
    /// An embedded SQLite database file.
    Sqlite { path: PathBuf },
}

impl DatabaseConfig {
    /// The embedded default: `<data_dir>/ctxsync.sqlite3`.
    pub fn sqlite_in(data_dir: &Path) -> Self {
        Self::Sqlite {
            path: data_dir.join(SQLITE_FILE_NAME),
        }
    }

    /// Chooses the backend from a URL: `postgres://` or `postgresql://` → PostgreSQL,
    /// `sqlite://PATH` → that SQLite file.
    pub fn from_url(url: &str) -> Result<Self, StoreError> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Self::Postgres {
                url: url.to_owned(),
            })
        } else if let Some(path) = url.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(StoreError::InvalidInput(
                    "a sqlite:// URL needs a file path".into(),
                ));
            }
            Ok(Self::Sqlite {
                path: PathBuf::from(path),
            })
        } else {
            Err(StoreError::InvalidInput(format!(
                "unsupported database URL scheme in {:?}; use postgres:// or sqlite://",
                redact_url(url)
            )))
        }
    }

    pub fn backend(&self) -> Backend {
        match self {
            Self::Postgres { .. } => Backend::Postgres,
            Self::Sqlite { .. } => Backend::Sqlite,
        }
    }
}

/// A URL without its userinfo, for messages.
pub(crate) fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            format!("{}[redacted]{}", &url[..scheme_end + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// The two supported database backends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    Postgres,
    Sqlite,
}

/// Default of [`StoreOptions::connection_timeout`].
pub const DEFAULT_CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);
/// Default of [`StoreOptions::operation_timeout`]: below the agent's 30 s request timeout,
/// so a stuck database reaches agents as `Unavailable` rather than as their own timeout.
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(20);
/// PostgreSQL TCP keepalive: idle time before the first probe, the gap between probes,
/// and how many unanswered probes mean the peer is gone. A server that vanished without
/// closing its sockets (host down, network cut) is noticed within about 25 s, even by a
/// connection blocked waiting for a query's answer.
pub const TCP_KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
pub const TCP_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
pub const TCP_KEEPALIVE_RETRIES: u32 = 3;

/// Tuning knobs; the defaults suit a small control plane on a 2-core machine.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// Most pooled connections (PostgreSQL) or SQLite handles.
    pub max_connections: u32,
    /// How long an operation waits for a pooled connection before reporting
    /// [`StoreError::Unavailable`]. PostgreSQL: also bounds opening one connection
    /// (libpq's `connect_timeout`, at least 2 s, and the LISTEN connection's connect and
    /// `LISTEN`), so a database that accepts nothing cannot hold the pool's connector
    /// threads.
    pub connection_timeout: Duration,
    /// Bound on one whole store operation: the wait for a connection plus its
    /// transaction. Past it the caller gets [`StoreError::Unavailable`] at once, while
    /// the blocking thread finishes or fails on its own (TCP keepalive breaks a
    /// connection to a vanished server); if that transaction commits after all, its
    /// in-process event is lost and waiters see the change on their re-check timer.
    pub operation_timeout: Duration,
    /// SQLite: how long a writer waits for the write lock before failing.
    pub sqlite_busy_timeout: Duration,
    /// PostgreSQL: the first delay before reconnecting the LISTEN connection; it doubles
    /// up to [`Self::listener_max_backoff`].
    pub listener_initial_backoff: Duration,
    pub listener_max_backoff: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            max_connections: 8,
            connection_timeout: DEFAULT_CONNECTION_TIMEOUT,
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
            sqlite_busy_timeout: Duration::from_secs(5),
            listener_initial_backoff: Duration::from_millis(100),
            listener_max_backoff: Duration::from_secs(5),
        }
    }
}

/// Serialization failures retried per PostgreSQL write transaction (SPEC §5.4).
pub const MAX_WRITE_ATTEMPTS: u32 = 5;

/// Key of the session advisory lock that serializes migrations of one PostgreSQL
/// database across replicas (an arbitrary constant: "ctxsync" in ASCII).
const MIGRATION_LOCK_KEY: i64 = 0x0063_7478_7379_6e63;

pub(crate) enum Pool {
    Postgres(R2d2Pool<ConnectionManager<PgConnection>>),
    Sqlite(R2d2Pool<ConnectionManager<SqliteConnection>>),
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (backend, state) = match self {
            Self::Postgres(p) => ("postgres", p.state()),
            Self::Sqlite(p) => ("sqlite", p.state()),
        };
        f.debug_struct("Pool")
            .field("backend", &backend)
            .field("connections", &state.connections)
            .field("idle", &state.idle_connections)
            .finish()
    }
}

pub(crate) enum PooledConn {
    Postgres(PooledConnection<ConnectionManager<PgConnection>>),
    Sqlite(PooledConnection<ConnectionManager<SqliteConnection>>),
}

/// A connection inside a transaction, of either backend. Store operations are written
/// once against it; [`on_backend!`] expands each query for both connection types.
pub(crate) enum Tx<'a> {
    Postgres(&'a mut PgConnection),
    Sqlite(&'a mut SqliteConnection),
}

/// Runs `$body` with `$c` bound to the concrete connection of a `&mut Tx`: the same
/// query text is type-checked against both backends.
macro_rules! on_backend {
    ($tx:expr, |$c:ident| $body:expr) => {
        match $tx {
            $crate::db::Tx::Postgres(conn) => {
                let $c: &mut ::diesel::PgConnection = &mut **conn;
                $body
            }
            $crate::db::Tx::Sqlite(conn) => {
                let $c: &mut ::diesel::SqliteConnection = &mut **conn;
                $body
            }
        }
    };
}
pub(crate) use on_backend;

#[derive(Debug)]
struct SqlitePragmas {
    busy_timeout: Duration,
}

impl CustomizeConnection<SqliteConnection, diesel::r2d2::Error> for SqlitePragmas {
    fn on_acquire(&self, conn: &mut SqliteConnection) -> Result<(), diesel::r2d2::Error> {
        // WAL lets readers run beside the one writer; NORMAL sync is durable in WAL mode
        // except for the last transactions on power loss, which agents re-push anyway.
        conn.batch_execute(&format!(
            "PRAGMA busy_timeout = {};
             PRAGMA journal_mode = WAL;
             PRAGMA synchronous = NORMAL;
             PRAGMA foreign_keys = ON;",
            self.busy_timeout.as_millis()
        ))
        .map_err(diesel::r2d2::Error::QueryError)
    }
}

impl Pool {
    /// Connects (blocking) and applies pending migrations.
    pub(crate) fn open(
        config: &DatabaseConfig,
        options: &StoreOptions,
    ) -> Result<Self, StoreError> {
        match config {
            DatabaseConfig::Postgres { url } => {
                let pool = R2d2Pool::builder()
                    .max_size(options.max_connections.max(1))
                    .min_idle(Some(1))
                    .connection_timeout(options.connection_timeout)
                    .build(ConnectionManager::<PgConnection>::new(libpq_url(
                        url, options,
                    )))?;
                let mut conn = pool.get()?;
                migrate_postgres(&mut conn)?;
                Ok(Self::Postgres(pool))
            }
            DatabaseConfig::Sqlite { path } => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(|e| {
                        StoreError::Unavailable(format!(
                            "cannot create data directory {}: {e}",
                            dir.display()
                        ))
                    })?;
                }
                let url = path.to_str().ok_or_else(|| {
                    StoreError::InvalidInput(format!(
                        "SQLite path is not UTF-8: {}",
                        path.display()
                    ))
                })?;
                let pool = R2d2Pool::builder()
                    .max_size(options.max_connections.max(1))
                    .min_idle(Some(1))
                    .connection_timeout(options.connection_timeout)
                    .test_on_check_out(false)
                    .connection_customizer(Box::new(SqlitePragmas {
                        busy_timeout: options.sqlite_busy_timeout,
                    }))
                    .build(ConnectionManager::<SqliteConnection>::new(url))?;
                let mut conn = pool.get()?;
                conn.immediate_transaction(|c| {
                    c.run_pending_migrations(migrations::SQLITE)
                        .map(drop)
                        .map_err(|e| StoreError::Migration(e.to_string()))
                })?;
                Ok(Self::Sqlite(pool))
            }
        }
    }

    /// Takes a connection from the pool (blocking up to the connection timeout).
    pub(crate) fn get(&self) -> Result<PooledConn, StoreError> {
        Ok(match self {
            Self::Postgres(p) => PooledConn::Postgres(p.get()?),
            Self::Sqlite(p) => PooledConn::Sqlite(p.get()?),
        })
    }
}

/// `url` with libpq's connect timeout and TCP keepalive parameters added, unless the URL
/// sets them itself. Without them libpq waits for a connection, or for a query's answer
/// from a server that vanished, as long as the kernel lets it (minutes to hours).
fn libpq_url(url: &str, options: &StoreOptions) -> String {
    // libpq counts whole seconds and treats anything under 2 as 2.
    let connect_timeout_s = options.connection_timeout.as_secs_f64().ceil().max(2.0) as u64;
    let defaults = [
        ("connect_timeout", connect_timeout_s.to_string()),
        ("keepalives", "1".to_owned()),
        ("keepalives_idle", TCP_KEEPALIVE_IDLE.as_secs().to_string()),
        (
            "keepalives_interval",
            TCP_KEEPALIVE_INTERVAL.as_secs().to_string(),
        ),
        ("keepalives_count", TCP_KEEPALIVE_RETRIES.to_string()),
    ];
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, query),
        None => (url, ""),
    };
    let given: Vec<&str> = query
        .split('&')
        .filter_map(|pair| pair.split('=').next())
        .collect();
    let mut pairs: Vec<String> = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(str::to_owned)
        .collect();
    for (key, value) in defaults {
        if !given.contains(&key) {
            pairs.push(format!("{key}={value}"));
        }
    }
    format!("{base}?{}", pairs.join("&"))
}

/// Applies pending PostgreSQL migrations under a session advisory lock, so replicas
/// starting together do not race each other.
fn migrate_postgres(conn: &mut PgConnection) -> Result<(), StoreError> {
    conn.batch_execute(&format!("SELECT pg_advisory_lock({MIGRATION_LOCK_KEY})"))?;
    let result = conn
        .run_pending_migrations(migrations::POSTGRES)
        .map(drop)
        .map_err(|e| StoreError::Migration(e.to_string()));
    let unlock = conn.batch_execute(&format!("SELECT pg_advisory_unlock({MIGRATION_LOCK_KEY})"));
    result?;
    unlock?;
    Ok(())
}

impl PooledConn {
    /// Runs `f` in one write transaction: PostgreSQL REPEATABLE READ, retried on
    /// serialization failure up to [`MAX_WRITE_ATTEMPTS`] times; SQLite `BEGIN
    /// IMMEDIATE`, which takes the write lock up front so it never has to retry.
    pub(crate) fn write<T>(
        &mut self,
        mut f: impl FnMut(&mut Tx<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match self {
            Self::Postgres(conn) => {
                let mut attempt = 1;
                loop {
                    let result = conn
                        .build_transaction()
                        .repeatable_read()
                        .run(|c| f(&mut Tx::Postgres(c)));
                    match result {
                        Err(StoreError::Conflict(reason)) if attempt < MAX_WRITE_ATTEMPTS => {
                            tracing::debug!(attempt, %reason, "serialization failure; retrying");
                            std::thread::sleep(retry_delay(attempt));
                            attempt += 1;
                        }
                        other => return other,
                    }
                }
            }
            Self::Sqlite(conn) => conn.immediate_transaction(|c| f(&mut Tx::Sqlite(c))),
        }
    }

    /// Runs `f` in one read-only, snapshot-consistent transaction.
    pub(crate) fn read<T>(
        &mut self,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match self {
            Self::Postgres(conn) => conn
                .build_transaction()
                .repeatable_read()
                .read_only()
                .run(|c| f(&mut Tx::Postgres(c))),
            // In WAL mode a deferred transaction reads one consistent snapshot from its
            // first read to its end.
            Self::Sqlite(conn) => conn.transaction(|c| f(&mut Tx::Sqlite(c))),
        }
    }
}

/// A short, growing, jittered pause between retries so two conflicting writers do not
/// collide again in lockstep.
fn retry_delay(attempt: u32) -> Duration {
    let mut jitter = [0u8; 1];
    let jitter_ms = match getrandom::fill(&mut jitter) {
        Ok(()) => u64::from(jitter[0] % 4),
        Err(_) => 0,
    };
    Duration::from_millis(u64::from(attempt) * 2 + jitter_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpq_urls_get_timeouts_unless_they_set_their_own() {
        let options = StoreOptions {
            connection_timeout: Duration::from_millis(300),
            ..StoreOptions::default()
        };
        let check = |url: &str, expect: &str| assert_eq!(libpq_url(url, &options), expect, "{url}");
        let added = "connect_timeout=2&keepalives=1&keepalives_idle=10&keepalives_interval=5\
                     &keepalives_count=3";
        check("postgres://h/db", &format!("postgres://h/db?{added}"));
        check(
            "postgres://u@h:5432/db?sslmode=disable",
            &format!("postgres://u@h:5432/db?sslmode=disable&{added}"),
        );
        check(
            "postgres://h/db?connect_timeout=9&keepalives=0",
            "postgres://h/db?connect_timeout=9&keepalives=0&keepalives_idle=10\
             &keepalives_interval=5&keepalives_count=3",
        );
    }
}
