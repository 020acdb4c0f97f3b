//! Test support (cargo feature `test-support`) for this crate and the layers above:
//! an isolated store per test, on SQLite (a temp dir) or PostgreSQL (a database
//! created from a migrated template and dropped at the end). The agent API served on
//! loopback is `ctxsync-agent-api`'s (its own `test-support` feature).
//!
//! PostgreSQL comes from `CTXSYNC_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`). When it cannot be reached the helper
//! panics with a clear message, unless `CTXSYNC_SKIP_POSTGRES=1` is set and `CI` is
//! not: then it prints a loud skip line and returns `None`.

use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::{Bool, Text};
use diesel_migrations::MigrationHarness;

use crate::db::{DatabaseConfig, StoreOptions, migrations};
use crate::error::StoreError;
use crate::store::Store;

/// Environment variable with the URL of the PostgreSQL server tests use.
pub const POSTGRES_URL_ENV: &str = "CTXSYNC_TEST_POSTGRES_URL";
/// The server tests use when [`POSTGRES_URL_ENV`] is unset.
pub const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
/// Environment variable: `1` skips PostgreSQL tests when the server is unreachable
/// (ignored when `CI` is set).
pub const SKIP_POSTGRES_ENV: &str = "CTXSYNC_SKIP_POSTGRES";

/// Serializes template creation across test binaries and threads.
const TEMPLATE_LOCK_KEY: i64 = 0x0063_7478_7465_6d70;
/// Changes whenever `migrations/postgres` does, so a stale template is never used.
const MIGRATIONS_FINGERPRINT: &str = env!("CTXSYNC_POSTGRES_MIGRATIONS_FINGERPRINT");
/// `CREATE DATABASE .. TEMPLATE` fails while another session touches the template.
const CREATE_ATTEMPTS: u32 = 20;
const CREATE_RETRY_DELAY: Duration = Duration::from_millis(50);

/// Options for test stores: small pools (many tests share one PostgreSQL server) and
/// fast listener reconnects.
pub fn test_options() -> StoreOptions {
    StoreOptions {
        max_connections: 3,
        connection_timeout: Duration::from_secs(10),
        listener_initial_backoff: Duration::from_millis(20),
        listener_max_backoff: Duration::from_millis(500),
        ..StoreOptions::default()
    }
}

/// The PostgreSQL server URL tests use.
pub fn postgres_url() -> String {
    std::env::var(POSTGRES_URL_ENV).unwrap_or_else(|_| DEFAULT_POSTGRES_URL.to_owned())
}

/// `url` with its database name replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let base = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    match query {
        Some(query) => format!("{base}/{database}?{query}"),
        None => format!("{base}/{database}"),
    }
}

/// Applies the skip policy when PostgreSQL is unreachable.
fn postgres_unreachable(
    url: &str,
    error: &dyn std::fmt::Display,
) -> Option<std::convert::Infallible> {
    let url = crate::db::redact_url(url);
    if std::env::var_os("CI").is_some() {
        panic!(
            "PostgreSQL test database at {url} is unreachable and CI is set, so PostgreSQL \
             tests cannot be skipped: {error}"
        );
    }
    if std::env::var(SKIP_POSTGRES_ENV).as_deref() == Ok("1") {
        eprintln!(
            "\n!!!!! SKIPPING a PostgreSQL test: {url} is unreachable ({error}) and \
             {SKIP_POSTGRES_ENV}=1 !!!!!\n"
        );
        return None;
    }
    panic!(
        "PostgreSQL test database at {url} is unreachable: {error}\n\
         Start PostgreSQL, point {POSTGRES_URL_ENV} at one, or set {SKIP_POSTGRES_ENV}=1 to \
         skip PostgreSQL tests locally."
    );
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn database_exists(conn: &mut PgConnection, name: &str) -> QueryResult<bool> {
    diesel::select(
        diesel::dsl::sql::<Bool>("EXISTS (SELECT 1 FROM pg_database WHERE datname = ")
            .bind::<Text, _>(name)
            .sql(")"),
    )
    .get_result(conn)
}

/// Creates the migrated template once per migration set. The advisory lock makes
/// concurrent test binaries wait for the first; the template is built under a
/// temporary name and renamed, so nobody ever copies a half-migrated database.
fn ensure_template(admin: &mut PgConnection, server_url: &str) -> Result<String, String> {
    let template = format!("ctxsync_tmpl_{MIGRATIONS_FINGERPRINT}");
    admin
        .batch_execute(&format!("SELECT pg_advisory_lock({TEMPLATE_LOCK_KEY})"))
        .map_err(|e| e.to_string())?;
    let result = (|| -> Result<(), String> {
        if database_exists(admin, &template).map_err(|e| e.to_string())? {
            return Ok(());
        }
        let building = format!("{template}_build");
        // Two calls: a multi-statement string would run as one transaction block,
        // which neither statement allows.
        admin
            .batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                quote_ident(&building)
            ))
            .and_then(|()| {
                admin.batch_execute(&format!("CREATE DATABASE {}", quote_ident(&building)))
            })
            .map_err(|e| format!("creating the template: {e}"))?;
        {
            let mut conn = PgConnection::establish(&with_database(server_url, &building))
                .map_err(|e| e.to_string())?;
            conn.run_pending_migrations(migrations::POSTGRES)
                .map_err(|e| format!("migrating the template: {e}"))?;
        }
        admin
            .batch_execute(&format!(
                "ALTER DATABASE {} RENAME TO {}",
                quote_ident(&building),
                quote_ident(&template)
            ))
            .map_err(|e| format!("renaming the template: {e}"))
    })();
    let unlock = admin.batch_execute(&format!("SELECT pg_advisory_unlock({TEMPLATE_LOCK_KEY})"));
    result?;
    unlock.map_err(|e| e.to_string())?;
    Ok(template)
}

/// A PostgreSQL database of its own for one test, dropped (forcibly) on drop.
pub struct TestDatabase {
    name: String,
    url: String,
    server_url: String,
}

impl std::fmt::Debug for TestDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestDatabase")
            .field("name", &self.name)
            .field("url", &crate::db::redact_url(&self.url))
            .finish_non_exhaustive()
    }
}

impl TestDatabase {
    /// Creates a fresh, migrated database (blocking). `None` only when PostgreSQL is
    /// unreachable and skipping is allowed (see the module docs).
    pub fn create() -> Option<Self> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let server_url = postgres_url();
        let mut admin = match PgConnection::establish(&server_url) {
            Ok(conn) => conn,
            Err(error) => {
                postgres_unreachable(&server_url, &error)?;
                unreachable!("postgres_unreachable returns None or panics");
            }
        };
        let template = ensure_template(&mut admin, &server_url)
            .unwrap_or_else(|e| panic!("preparing the PostgreSQL template database: {e}"));
        let mut nonce = [0u8; 4];
        getrandom::fill(&mut nonce).expect("randomness");
        let name = format!(
            "ctxsync_test_{}_{}_{:08x}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            u32::from_le_bytes(nonce)
        );
        let create = format!(
            "CREATE DATABASE {} TEMPLATE {}",
            quote_ident(&name),
            quote_ident(&template)
        );
        let mut attempt = 1;
        while let Err(error) = admin.batch_execute(&create) {
            // Another session may be copying or (briefly) connected to the template.
            if attempt >= CREATE_ATTEMPTS || !error.to_string().contains("being accessed") {
                panic!("creating test database {name}: {error}");
            }
            attempt += 1;
            std::thread::sleep(CREATE_RETRY_DELAY);
        }
        Some(Self {
            url: with_database(&server_url, &name),
            name,
            server_url,
        })
    }

    /// The database's name on the server.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The URL of this database: the server URL with its database name replaced.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A PostgreSQL [`DatabaseConfig`] for [`Self::url`].
    pub fn config(&self) -> DatabaseConfig {
        DatabaseConfig::Postgres {
            url: self.url.clone(),
        }
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let dropped = PgConnection::establish(&self.server_url)
            .map_err(|e| e.to_string())
            .and_then(|mut admin| {
                admin
                    .batch_execute(&format!(
                        "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                        quote_ident(&self.name)
                    ))
                    .map_err(|e| e.to_string())
            });
        if let Err(error) = dropped {
            eprintln!(
                "warning: could not drop test database {}: {error}",
                self.name
            );
        }
    }
}

#[derive(Debug)]
enum Isolation {
    Postgres(TestDatabase),
    Sqlite(tempfile::TempDir),
}

/// A store on a database of its own. Dereferences to [`Store`].
#[derive(Debug)]
pub struct TestStore {
    // Declared first so it is dropped before the database it uses.
    store: Store,
    config: DatabaseConfig,
    isolation: Isolation,
}

impl TestStore {
    /// A store on a fresh SQLite file in a temporary data directory.
    pub async fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("creating a temp dir");
        let config = DatabaseConfig::sqlite_in(dir.path());
        let store = Store::open_with(config.clone(), test_options())
            .await
            .expect("opening a SQLite test store");
        Self {
            store,
            config,
            isolation: Isolation::Sqlite(dir),
        }
    }

    /// A store on a fresh PostgreSQL database; `None` only when skipping is allowed.
    pub async fn postgres() -> Option<Self> {
        let database = tokio::task::spawn_blocking(TestDatabase::create)
            .await
            .expect("creating a test database")?;
        let config = database.config();
        let store = Store::open_with(config.clone(), test_options())
            .await
            .expect("opening a PostgreSQL test store");
        Some(Self {
            store,
            config,
            isolation: Isolation::Postgres(database),
        })
    }

    /// The store (also reached through `Deref`).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The configuration the store was opened with.
    pub fn config(&self) -> &DatabaseConfig {
        &self.config
    }

    /// The PostgreSQL test database, if this store uses one.
    pub fn postgres_database(&self) -> Option<&TestDatabase> {
        match &self.isolation {
            Isolation::Postgres(database) => Some(database),
            Isolation::Sqlite(_) => None,
        }
    }

    /// The SQLite data directory, if this store uses one.
    pub fn sqlite_data_dir(&self) -> Option<&std::path::Path> {
        match &self.isolation {
            Isolation::Postgres(_) => None,
            Isolation::Sqlite(dir) => Some(dir.path()),
        }
    }

    /// Another, independent store on the same database: its own pool and (PostgreSQL)
    /// its own listener, as a second server process would have.
    pub async fn open_another(&self) -> Store {
        Store::open_with(self.config.clone(), test_options())
            .await
            .expect("opening a second store")
    }
}

impl Deref for TestStore {
    type Target = Store;

    fn deref(&self) -> &Store {
        &self.store
    }
}

/// Opens only a store's LISTEN connection to `url` (TLS settings included, as
/// [`Store::open`] reads them), LISTENs, and closes it. Tests the LISTEN path's TLS
/// where opening a whole store would fail on the pool first.
pub async fn connect_listener(url: &str, options: &StoreOptions) -> Result<(), StoreError> {
    crate::pg_listener::probe(url, options).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_names_are_replaced_in_urls() {
        let check = |url: &str, expect: &str| assert_eq!(with_database(url, "x"), expect, "{url}");
        check(
            "postgres://postgres@127.0.0.1:5432/test",
            "postgres://postgres@127.0.0.1:5432/x",
        );
        check(
            "postgres://u:p@h/db?sslmode=disable",
            "postgres://u:p@h/x?sslmode=disable",
        );
        check("postgres://h:5432", "postgres://h:5432/x");
        check(
            "postgresql://h?application_name=a",
            "postgresql://h/x?application_name=a",
        );
    }
}
