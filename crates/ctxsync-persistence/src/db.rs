//! Database plumbing: configuration, connection pools, migrations, and the transaction
//! runners (PostgreSQL REPEATABLE READ with retries, SQLite IMMEDIATE) that every store
//! operation goes through.

use std::path::{Path, PathBuf};
use std::time::Duration;

#[cfg(feature = "sqlite")]
use diesel::Connection;
#[cfg(feature = "postgres")]
use diesel::PgConnection;
#[cfg(feature = "sqlite")]
use diesel::SqliteConnection;
use diesel::connection::SimpleConnection;
use diesel::r2d2::{ConnectionManager, Pool as R2d2Pool, PooledConnection};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};

use crate::error::StoreError;

/// The migrations of each enabled backend, embedded at build time. Both trees carry the
/// same migration names.
pub mod migrations {
    use super::*;

    /// `migrations/postgres`.
    #[cfg(feature = "postgres")]
    pub const POSTGRES: EmbeddedMigrations = embed_migrations!("../../migrations/postgres");
    /// `migrations/sqlite`.
    #[cfg(feature = "sqlite")]
    pub const SQLITE: EmbeddedMigrations = embed_migrations!("../../migrations/sqlite");
}

/// File name of the embedded database inside the data directory.
pub const SQLITE_FILE_NAME: &str = "ctxsync.sqlite3";

/// Which database a store talks to. `Debug` hides the URL's password.
#[derive(Clone, PartialEq, Eq)]
pub enum DatabaseConfig {
    /// A PostgreSQL server, by `postgres://` (or `postgresql://`) URL. Its `sslmode`
    /// (libpq's six, default `prefer`) and `sslrootcert` (a PEM file, or `system`) apply
    /// to the pool and the LISTEN connection alike; other `ssl*` parameters (but
    /// `sslnegotiation`) are refused.
    Postgres {
        /// The connection URL, password included (`Debug` masks it).
        url: String,
    },
    /// An embedded SQLite database file.
    Sqlite {
        /// The database file (UTF-8), created with its missing directories on open;
        /// `:memory:` and `file:` URIs go to SQLite as they are.
        path: PathBuf,
    },
}

impl std::fmt::Debug for DatabaseConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Postgres { url } => f
                .debug_struct("Postgres")
                .field("url", &redact_url(url))
                .finish(),
            Self::Sqlite { path } => f.debug_struct("Sqlite").field("path", path).finish(),
        }
    }
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

    /// The backend this configuration names.
    pub fn backend(&self) -> Backend {
        match self {
            Self::Postgres { .. } => Backend::Postgres,
            Self::Sqlite { .. } => Backend::Sqlite,
        }
    }
}

/// `url` with its password masked (`postgres://u:***@h/db`, and a `password=` query
/// parameter likewise), for messages and `Debug`.
pub(crate) fn redact_url(url: &str) -> String {
    const MASK: &str = "***";
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let mut out = url[..scheme_end].to_owned();
    // The last '@' ends the userinfo even if the password holds an unencoded '@';
    // should one stand in the query, more than the password is masked, never less.
    let rest = match url[scheme_end..].rfind('@') {
        Some(at) => {
            let (userinfo, rest) = url[scheme_end..].split_at(at);
            match userinfo.split_once(':') {
                Some((user, _password)) => {
                    out.push_str(user);
                    out.push(':');
                    out.push_str(MASK);
                }
                None => out.push_str(userinfo),
            }
            rest
        }
        None => &url[scheme_end..],
    };
    match rest.split_once('?') {
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some(("password", _)) => format!("password={MASK}"),
                    _ => pair.to_owned(),
                })
                .collect();
            out.push_str(&pairs.join("&"));
        }
        None => out.push_str(rest),
    }
    out
}

/// The two supported database backends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// PostgreSQL (the `postgres` feature).
    Postgres,
    /// Embedded SQLite (the `sqlite` feature).
    Sqlite,
}

impl Backend {
    /// True when this build has the backend's feature; a store on any other backend
    /// fails to open with [`StoreError::InvalidInput`] naming the feature.
    pub const fn is_enabled(self) -> bool {
        match self {
            Self::Postgres => cfg!(feature = "postgres"),
            Self::Sqlite => cfg!(feature = "sqlite"),
        }
    }

    /// The Cargo feature of ctxsync-persistence that compiles the backend in.
    pub const fn feature(self) -> &'static str {
        match self {
            Self::Postgres => "postgres",
            Self::Sqlite => "sqlite",
        }
    }

    /// An error unless this build has the backend.
    pub(crate) fn check_enabled(self) -> Result<(), StoreError> {
        self.refuse_unless(self.is_enabled())
    }

    fn refuse_unless(self, enabled: bool) -> Result<(), StoreError> {
        if enabled {
            return Ok(());
        }
        Err(StoreError::InvalidInput(format!(
            "this build has no {self:?} support: enable the `{}` feature of \
             ctxsync-persistence",
            self.feature()
        )))
    }
}

/// Default of [`StoreOptions::connection_timeout`].
pub const DEFAULT_CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);
/// Default of [`StoreOptions::operation_timeout`]: below the agent's 30 s request timeout,
/// so a stuck database reaches agents as `Unavailable` rather than as their own timeout.
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(20);
/// PostgreSQL TCP keepalive, for the pool (unless its URL sets its own) and the LISTEN
/// connection: idle time before the first probe. With [`TCP_KEEPALIVE_INTERVAL`] and
/// [`TCP_KEEPALIVE_RETRIES`], a server that vanished without closing its sockets (host
/// down, network cut) is noticed within about 25 s, even by a connection blocked waiting
/// for a query's answer.
pub const TCP_KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
/// PostgreSQL TCP keepalive: the gap between probes.
pub const TCP_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// PostgreSQL TCP keepalive: how many unanswered probes mean the peer is gone.
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
    /// PostgreSQL: the longest delay between LISTEN reconnect attempts.
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

/// Attempts, the first included, a PostgreSQL write transaction gets when it keeps
/// failing on serialization (SPEC §5.4); after the last the caller gets
/// [`StoreError::Conflict`].
pub const MAX_WRITE_ATTEMPTS: u32 = 5;

#[cfg(feature = "postgres")]
/// Key of the session advisory lock that serializes migrations of one PostgreSQL
/// database across replicas (an arbitrary constant: "ctxsync" in ASCII).
const MIGRATION_LOCK_KEY: i64 = 0x0063_7478_7379_6e63;

pub(crate) enum Pool {
    #[cfg(feature = "postgres")]
    Postgres(R2d2Pool<ConnectionManager<PgConnection>>),
    #[cfg(feature = "sqlite")]
    Sqlite(R2d2Pool<ConnectionManager<SqliteConnection>>),
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (backend, state) = match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(p) => ("postgres", p.state()),
            #[cfg(feature = "sqlite")]
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
    #[cfg(feature = "postgres")]
    Postgres(PooledConnection<ConnectionManager<PgConnection>>),
    #[cfg(feature = "sqlite")]
    Sqlite(PooledConnection<ConnectionManager<SqliteConnection>>),
}

/// A connection inside a transaction, of either backend. Store operations are written
/// once against it; [`on_backend!`] expands each query for every enabled backend.
pub(crate) enum Tx<'a> {
    #[cfg(feature = "postgres")]
    Postgres(&'a mut PgConnection),
    #[cfg(feature = "sqlite")]
    Sqlite(&'a mut SqliteConnection),
}

/// Runs `$body` with `$c` bound to the concrete connection of a `&mut Tx`: the same
/// query text is type-checked against each enabled backend.
macro_rules! on_backend {
    ($tx:expr, |$c:ident| $body:expr) => {
        match $tx {
            #[cfg(feature = "postgres")]
            $crate::db::Tx::Postgres(conn) => {
                let $c: &mut ::diesel::PgConnection = &mut **conn;
                $body
            }
            #[cfg(feature = "sqlite")]
            $crate::db::Tx::Sqlite(conn) => {
                let $c: &mut ::diesel::SqliteConnection = &mut **conn;
                $body
            }
        }
    };
}
pub(crate) use on_backend;

#[cfg(feature = "sqlite")]
#[derive(Debug)]
struct SqlitePragmas {
    busy_timeout: Duration,
}

#[cfg(feature = "sqlite")]
impl diesel::r2d2::CustomizeConnection<SqliteConnection, diesel::r2d2::Error> for SqlitePragmas {
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
        config.backend().check_enabled()?;
        match config {
            #[cfg(feature = "postgres")]
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
            #[cfg(feature = "sqlite")]
            DatabaseConfig::Sqlite { path } => {
                let on_disk = is_file_path(path);
                if let Some(dir) = path
                    .parent()
                    .filter(|d| on_disk && !d.as_os_str().is_empty())
                {
                    create_private_dirs(dir).map_err(|e| {
                        StoreError::Unavailable(format!(
                            "cannot create data directory {}: {e}",
                            dir.display()
                        ))
                    })?;
                }
                if on_disk {
                    make_private(path)?;
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
                if on_disk {
                    // SQLite gives -wal and -shm the database file's mode; checking
                    // the files it has now created costs a few stat calls.
                    make_private(path)?;
                }
                Ok(Self::Sqlite(pool))
            }
            #[allow(unreachable_patterns)]
            _ => unreachable!("check_enabled refused a disabled backend"),
        }
    }

    /// Takes a connection from the pool (blocking up to the connection timeout).
    pub(crate) fn get(&self) -> Result<PooledConn, StoreError> {
        Ok(match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(p) => PooledConn::Postgres(p.get()?),
            #[cfg(feature = "sqlite")]
            Self::Sqlite(p) => PooledConn::Sqlite(p.get()?),
        })
    }
}

#[cfg(feature = "sqlite")]
/// False for SQLite's in-memory database and `file:` URIs, which name no plain file.
fn is_file_path(path: &Path) -> bool {
    let text = path.to_string_lossy();
    text != ":memory:" && !text.starts_with("file:")
}

/// Creates the missing directories up to `dir`, each 0700 whatever the umask (the
/// database is the agents' context and their token hashes; the secrets key file sits
/// there too). Directories that already exist, such as one the user chose, are left as
/// they are.
pub(crate) fn create_private_dirs(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};

    let missing: Vec<&Path> = dir
        .ancestors()
        .take_while(|d| !d.as_os_str().is_empty() && !d.exists())
        .collect();
    for d in missing.into_iter().rev() {
        match std::fs::DirBuilder::new().mode(0o700).create(d) {
            // mkdir's mode passes through the umask; a looser umask cannot widen it,
            // a stricter one could leave the owner without access.
            Ok(()) => std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))?,
            // Made meanwhile by someone else: theirs, not ours to change.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && d.is_dir() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(feature = "sqlite")]
/// The database file (created 0600 if missing) and its `-wal`/`-shm` siblings lose any
/// group and other permission bits.
fn make_private(path: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};

    let failed = |path: &Path, e: std::io::Error| {
        StoreError::Unavailable(format!(
            "cannot restrict the permissions of {}: {e}",
            path.display()
        ))
    };
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        // Exactly 0600 even under a umask that took the owner's bits.
        Ok(_) => std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| failed(path, e))?,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(failed(path, e)),
    }
    let mut siblings = [path.to_owned(), path.to_owned(), path.to_owned()];
    siblings[1].as_mut_os_string().push("-wal");
    siblings[2].as_mut_os_string().push("-shm");
    for file in &siblings {
        let mode = match std::fs::metadata(file) {
            Ok(meta) => meta.permissions().mode(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(failed(file, e)),
        };
        // Only when needed, so a private file owned by someone else is no error.
        if mode & 0o077 != 0 {
            std::fs::set_permissions(file, std::fs::Permissions::from_mode(mode & 0o700))
                .map_err(|e| failed(file, e))?;
        }
    }
    Ok(())
}

#[cfg(feature = "postgres")]
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

#[cfg(feature = "postgres")]
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
            #[cfg(feature = "postgres")]
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
            #[cfg(feature = "sqlite")]
            Self::Sqlite(conn) => conn.immediate_transaction(|c| f(&mut Tx::Sqlite(c))),
        }
    }

    /// Runs `f`, which must issue exactly one statement, outside an explicit
    /// transaction: one statement is atomic and reads one snapshot on both backends, and
    /// it saves the `BEGIN` and `COMMIT` round trips of [`Self::read`].
    pub(crate) fn single_statement<T>(
        &mut self,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(conn) => f(&mut Tx::Postgres(conn)),
            #[cfg(feature = "sqlite")]
            Self::Sqlite(conn) => f(&mut Tx::Sqlite(conn)),
        }
    }

    /// Runs `f` in one read-only, snapshot-consistent transaction.
    pub(crate) fn read<T>(
        &mut self,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(conn) => conn
                .build_transaction()
                .repeatable_read()
                .read_only()
                .run(|c| f(&mut Tx::Postgres(c))),
            // In WAL mode a deferred transaction reads one consistent snapshot from its
            // first read to its end.
            #[cfg(feature = "sqlite")]
            Self::Sqlite(conn) => conn.transaction(|c| f(&mut Tx::Sqlite(c))),
        }
    }
}

#[cfg(feature = "postgres")]
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
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn passwords_are_masked_in_debug_and_messages() {
        let check = |url: &str, expect: &str| assert_eq!(redact_url(url), expect, "{url}");
        check("postgres://u:secret@h/db", "postgres://u:***@h/db");
        check(
            "postgresql://u:p%40ss@w@h:5432/db?sslmode=require",
            "postgresql://u:***@h:5432/db?sslmode=require",
        );
        check("postgres://u@h/db", "postgres://u@h/db");
        check("postgres://h/db", "postgres://h/db");
        check(
            "postgres://h/db?user=u&password=secret&sslmode=verify-full",
            "postgres://h/db?user=u&password=***&sslmode=verify-full",
        );

        let config = DatabaseConfig::from_url("postgres://admin:hunter2@db.example/ctx").unwrap();
        let debug = format!("{config:?}");
        assert_eq!(
            debug,
            r#"Postgres { url: "postgres://admin:***@db.example/ctx" }"#
        );
        let sqlite = DatabaseConfig::Sqlite {
            path: "/var/lib/ctxsync/ctxsync.sqlite3".into(),
        };
        assert_eq!(
            format!("{sqlite:?}"),
            r#"Sqlite { path: "/var/lib/ctxsync/ctxsync.sqlite3" }"#
        );
        let error = DatabaseConfig::from_url("mysql://admin:hunter2@h/db").unwrap_err();
        assert!(!error.to_string().contains("hunter2"), "{error}");
    }

    #[test]
    fn a_backend_left_out_of_the_build_is_refused_by_name() {
        for backend in [Backend::Postgres, Backend::Sqlite] {
            backend
                .refuse_unless(true)
                .expect("an enabled backend opens");
            let error = backend.refuse_unless(false).unwrap_err();
            assert!(matches!(error, StoreError::InvalidInput(_)), "{error:?}");
            let feature = format!("the `{}` feature of ctxsync-persistence", backend.feature());
            assert!(error.to_string().contains(&feature), "{error}");
        }
    }

    /// Set in the child process [`sqlite_files_are_private_whatever_the_umask`] runs
    /// itself in.
    const UMASK_CHILD_ENV: &str = "CTXSYNC_PERSISTENCE_UMASK_CHILD";

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
            .permissions()
            .mode()
            & 0o777
    }

    /// The umask is per process, so the check runs in a child started under umask 0,
    /// where nothing but the store's own modes keeps the files private.
    #[test]
    fn sqlite_files_are_private_whatever_the_umask() {
        const NAME: &str = "db::tests::sqlite_files_are_private_whatever_the_umask";
        if std::env::var_os(UMASK_CHILD_ENV).is_none() {
            let output = std::process::Command::new("sh")
                .args(["-c", r#"umask 000 && exec "$0" "$@""#])
                .arg(std::env::current_exe().unwrap())
                .args([NAME, "--exact", "--nocapture", "--test-threads=1"])
                .env(UMASK_CHILD_ENV, "1")
                .output()
                .expect("running the test under umask 0");
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(
                output.status.success() && stdout.contains("1 passed"),
                "child failed: {stdout}\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
            return;
        }
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        assert!(
            status.lines().any(|l| l == "Umask:\t0000"),
            "the child should run under umask 0"
        );

        let chosen = tempfile::tempdir().unwrap();
        std::fs::set_permissions(chosen.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = chosen.path().join("made/by-store").join(SQLITE_FILE_NAME);
        let pool = Pool::open(
            &DatabaseConfig::Sqlite { path: path.clone() },
            &StoreOptions::default(),
        )
        .expect("opening SQLite");
        assert_eq!(
            mode(chosen.path()),
            0o755,
            "the user's directory was changed"
        );
        assert_eq!(mode(&chosen.path().join("made")), 0o700);
        assert_eq!(mode(&chosen.path().join("made/by-store")), 0o700);
        assert_eq!(mode(&path), 0o600);
        for suffix in ["-wal", "-shm"] {
            let mut sibling = path.clone().into_os_string();
            sibling.push(suffix);
            assert_eq!(mode(Path::new(&sibling)), 0o600, "{suffix}");
        }
        drop(pool);

        // A database file that exists with looser permissions is tightened.
        let loose = chosen.path().join("loose.sqlite3");
        std::fs::write(&loose, b"").unwrap();
        std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o664)).unwrap();
        Pool::open(
            &DatabaseConfig::Sqlite {
                path: loose.clone(),
            },
            &StoreOptions::default(),
        )
        .expect("opening the loose database");
        assert_eq!(mode(&loose), 0o600);
        assert_eq!(mode(chosen.path()), 0o755);
    }

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
