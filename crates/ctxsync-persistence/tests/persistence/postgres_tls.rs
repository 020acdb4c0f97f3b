//! PostgreSQL over TLS: `sslmode` and `sslrootcert` mean the same for the pool (libpq)
//! and the LISTEN connection (tokio-postgres over OpenSSL). Against the local server
//! (`ssl = on`, a self-signed certificate) and against a throwaway cluster that only
//! accepts TLS, with a certificate from a test CA.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use common::*;
use ctxsync_persistence::test_support::{TestDatabase, connect_listener, test_options};
use ctxsync_persistence::{ChangeEvent, DatabaseConfig, Store, StoreError, StoreOptions};
use ctxsync_protocol::DiscoveryPhase::Pending;
use ctxsync_test_support::TestCa;
use diesel::prelude::*;
use diesel::sql_types::BigInt;

/// `url` with one more query parameter.
fn with_param(url: &str, param: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}{param}")
}

fn postgres(url: &str) -> DatabaseConfig {
    DatabaseConfig::Postgres {
        url: url.to_owned(),
    }
}

/// Opens two stores on `url`, as two server processes would, and checks that a push
/// through one reaches a subscriber of the other: only the LISTEN connection carries
/// it. Returns the stores, still open.
async fn assert_listen_delivers(url: &str) -> (Store, Store) {
    let writer = Store::open_with(postgres(url), test_options())
        .await
        .expect("opening the writing store");
    let reader = Store::open_with(postgres(url), test_options())
        .await
        .expect("opening the subscribing store");
    let agent = writer.create_agent("over-tls").await.unwrap().id;
    let mut events = reader.subscribe_agent(agent);
    let pushed = snapshot(1, None, Pending, workspace());
    assert!(
        writer
            .push_context_state(agent, pushed)
            .await
            .unwrap()
            .accepted()
    );
    assert_eq!(
        next_event(events.next()).await,
        ChangeEvent::AgentContextChanged {
            agent_id: agent,
            snapshot_version: Some(1)
        }
    );
    (writer, reader)
}

/// Sessions on one database, by TLS and by role.
#[derive(QueryableByName, Debug, PartialEq)]
struct Sessions {
    #[diesel(sql_type = BigInt)]
    listeners_tls: i64,
    #[diesel(sql_type = BigInt)]
    pool_tls: i64,
    #[diesel(sql_type = BigInt)]
    plain: i64,
}

#[tokio::test]
async fn require_encrypts_the_pool_and_listen_on_the_local_server() {
    let Some(database) = tokio::task::spawn_blocking(TestDatabase::create)
        .await
        .unwrap()
    else {
        return;
    };
    let url = with_param(database.url(), "sslmode=require");
    let stores = assert_listen_delivers(&url).await;

    // Both stores' pool connections and LISTEN connections are encrypted.
    let mut admin =
        PgConnection::establish(&ctxsync_persistence::test_support::postgres_url()).unwrap();
    let sessions: Sessions = diesel::sql_query(
        "SELECT count(*) FILTER (WHERE s.ssl AND a.application_name = 'ctxsync-listener') \
                AS listeners_tls, \
                count(*) FILTER (WHERE s.ssl AND a.application_name <> 'ctxsync-listener') \
                AS pool_tls, \
                count(*) FILTER (WHERE NOT s.ssl) AS plain \
         FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.datname = $1",
    )
    .bind::<diesel::sql_types::Text, _>(database.name())
    .get_result(&mut admin)
    .unwrap();
    assert_eq!(sessions.listeners_tls, 2, "{sessions:?}");
    assert!(sessions.pool_tls >= 2, "{sessions:?}");
    assert_eq!(sessions.plain, 0, "{sessions:?}");
    drop(stores);
}

#[tokio::test]
async fn bad_tls_settings_fail_before_connecting() {
    // Nothing listens on port 1: these must fail on the settings, not on connecting.
    let base = "postgres://ctxsync:hunter2@127.0.0.1:1/db";
    let cases = [
        ("sslmode=verify", "invalid sslmode \"verify\""),
        (
            "sslmode=verify-ca&sslrootcert=/nonexistent/root.pem",
            "cannot read sslrootcert /nonexistent/root.pem",
        ),
        ("sslkey=/k.pem", "\"sslkey\" is not supported"),
        (
            "sslrootcert=system&sslmode=require",
            "may not be used with sslrootcert=system",
        ),
    ];
    for (params, needle) in cases {
        let error = Store::open_with(postgres(&with_param(base, params)), test_options())
            .await
            .expect_err(params);
        let text = error.to_string();
        assert!(
            matches!(error, StoreError::InvalidInput(_)),
            "{params}: {error:?}"
        );
        assert!(text.contains(needle), "{text:?} should mention {needle:?}");
        assert!(!text.contains("hunter2"), "{text:?} shows the password");
    }
}

// ---- a cluster that requires TLS -----------------------------------------------------

/// A PostgreSQL cluster of its own on 127.0.0.1: TLS only (`hostssl`, no `host` line),
/// with a certificate for `localhost` from a test CA. Stopped and removed on drop.
struct Cluster {
    pg_ctl: PathBuf,
    data: PathBuf,
    port: u16,
    /// The CA that signed the server's certificate.
    ca_file: PathBuf,
    /// A CA that has nothing to do with the server.
    other_ca_file: PathBuf,
    // Last: removed after the server stopped.
    dir: tempfile::TempDir,
}

/// Runs `program` as the `postgres` OS user (initdb refuses root); panics with its output
/// when it fails.
fn as_postgres(program: &Path, args: &[&str]) {
    let output = Command::new("runuser")
        .args(["-u", "postgres", "--"])
        .arg(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running runuser (needed to run {}): {e}", program.display()));
    assert!(
        output.status.success(),
        "{} {args:?} failed: {}\n{}",
        program.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The newest `/usr/lib/postgresql/<version>/bin` that has initdb.
fn postgres_bin_dir() -> PathBuf {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).unwrap_or_else(|| {
        panic!(
            "no /usr/lib/postgresql/<version>/bin/initdb: the TLS cluster tests need the \
             PostgreSQL server binaries (and runuser) installed{}",
            if std::env::var_os("CI").is_some() {
                " (CI is set: they cannot be skipped)"
            } else {
                ""
            }
        )
    })
}

fn id_of(flag: &str) -> u32 {
    let output = Command::new("id")
        .args([flag, "postgres"])
        .output()
        .expect("running id");
    assert!(output.status.success(), "no postgres OS user");
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap()
}

/// A free port on 127.0.0.1 (free now; the caller retries if it is taken meanwhile).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("binding a loopback port")
        .port()
}

impl Cluster {
    fn start() -> Self {
        let bin = postgres_bin_dir();
        let (uid, gid) = (id_of("-u"), id_of("-g"));
        let dir = tempfile::Builder::new()
            .prefix("ctxsync-pg-tls-")
            .tempdir()
            .unwrap();
        let owned_by_postgres = |path: &Path| std::os::unix::fs::chown(path, Some(uid), Some(gid));
        owned_by_postgres(dir.path()).unwrap();

        let (ca, other_ca) = (TestCa::new("ctxsync test CA"), TestCa::new("unrelated CA"));
        // For `localhost` only (no IP address).
        let (cert, key) = ca.server_cert(&["localhost"]);
        let (ca_file, other_ca_file) = (dir.path().join("ca.pem"), dir.path().join("other-ca.pem"));
        std::fs::write(&ca_file, ca.pem()).unwrap();
        std::fs::write(&other_ca_file, other_ca.pem()).unwrap();
        let (cert_file, key_file) = (dir.path().join("server.crt"), dir.path().join("server.key"));
        std::fs::write(&cert_file, cert).unwrap();
        std::fs::write(&key_file, key).unwrap();
        // PostgreSQL refuses a key others can read or that is not its own.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        owned_by_postgres(&cert_file).unwrap();
        owned_by_postgres(&key_file).unwrap();

        let data = dir.path().join("data");
        as_postgres(
            &bin.join("initdb"),
            &[
                "-D",
                data.to_str().unwrap(),
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
                "--no-instructions",
                "-E",
                "UTF8",
                "--locale=C",
            ],
        );
        let conf = format!(
            "\nlisten_addresses = '127.0.0.1'\n\
             unix_socket_directories = '{dir}'\n\
             ssl = on\n\
             ssl_cert_file = '{cert}'\n\
             ssl_key_file = '{key}'\n\
             fsync = off\n\
             max_connections = 40\n",
            dir = dir.path().display(),
            cert = cert_file.display(),
            key = key_file.display(),
        );
        let mut postgresql_conf = std::fs::read_to_string(data.join("postgresql.conf")).unwrap();
        postgresql_conf.push_str(&conf);
        std::fs::write(data.join("postgresql.conf"), postgresql_conf).unwrap();
        // TLS over TCP or nothing; the socket only serves pg_ctl.
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
        )
        .unwrap();

        let pg_ctl = bin.join("pg_ctl");
        let log = dir.path().join("server.log");
        let mut attempt = 0;
        let port = loop {
            attempt += 1;
            let port = free_port();
            let started = Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(&pg_ctl)
                .args(["-D", data.to_str().unwrap(), "-l", log.to_str().unwrap()])
                .args(["-o", &format!("-p {port}"), "-w", "-t", "30", "start"])
                .output()
                .expect("running pg_ctl");
            if started.status.success() {
                break port;
            }
            // Most likely the port was taken between our probe and the server's bind.
            assert!(
                attempt < 3,
                "pg_ctl start failed: {}\n{}",
                String::from_utf8_lossy(&started.stderr),
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        };
        Self {
            pg_ctl,
            data,
            port,
            ca_file,
            other_ca_file,
            dir,
        }
    }

    /// One cluster for all tests that run at the same time; the last one to finish
    /// stops it.
    fn shared() -> Arc<Self> {
        static SHARED: Mutex<Weak<Cluster>> = Mutex::new(Weak::new());
        let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(cluster) = shared.upgrade() {
            return cluster;
        }
        let cluster = Arc::new(Self::start());
        *shared = Arc::downgrade(&cluster);
        cluster
    }

    async fn get() -> Arc<Self> {
        tokio::task::spawn_blocking(Self::shared)
            .await
            .expect("starting the TLS cluster")
    }

    fn url(&self, host: &str, params: &str) -> String {
        format!("postgres://postgres@{host}:{}/postgres?{params}", self.port)
    }

    fn ca(&self) -> String {
        self.ca_file.display().to_string()
    }

    fn other_ca(&self) -> String {
        self.other_ca_file.display().to_string()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let stopped = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(&self.pg_ctl)
            .args([
                "-D",
                self.data.to_str().unwrap(),
                "-m",
                "immediate",
                "-w",
                "stop",
            ])
            .output();
        if !stopped.is_ok_and(|o| o.status.success()) {
            eprintln!(
                "warning: could not stop the test cluster in {}",
                self.dir.path().display()
            );
        }
    }
}

/// Both paths refuse `url`: opening a store (whichever connection comes first) and the
/// LISTEN connection alone. Each error must mention every needle (case-insensitive).
async fn assert_refused(url: &str, needles: &[&str]) {
    // The pool retries a refused connection until this timeout.
    let options = StoreOptions {
        connection_timeout: Duration::from_secs(1),
        ..test_options()
    };
    let store = Store::open_with(postgres(url), options.clone()).await;
    let listener = connect_listener(url, &options).await;
    for (path, result) in [("store", store.map(drop)), ("LISTEN", listener)] {
        let error = match result {
            Ok(()) => panic!("{path}: {url} was accepted"),
            Err(error) => error,
        };
        assert!(error.is_transient(), "{path}: {error:?}");
        let text = error.to_string().to_lowercase();
        for needle in needles {
            assert!(
                text.contains(needle),
                "{path}: {text:?} should mention {needle:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_accepts_the_right_ca_and_host_name() {
    let cluster = Cluster::get().await;
    let url = cluster.url(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", cluster.ca()),
    );
    connect_listener(&url, &test_options()).await.unwrap();
    assert_listen_delivers(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_ca_checks_the_chain_but_not_the_host_name() {
    let cluster = Cluster::get().await;
    let url = cluster.url(
        "127.0.0.1",
        &format!("sslmode=verify-ca&sslrootcert={}", cluster.ca()),
    );
    connect_listener(&url, &test_options()).await.unwrap();
    assert_listen_delivers(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_refuses_a_certificate_for_another_host_name() {
    let cluster = Cluster::get().await;
    let url = cluster.url(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={}", cluster.ca()),
    );
    // libpq: `server certificate for "localhost" does not match host name "127.0.0.1"`;
    // OpenSSL: `certificate verify failed ...: IP address mismatch`.
    assert_refused(&url, &["certificate"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_another_ca_is_refused() {
    let cluster = Cluster::get().await;
    for mode in ["verify-ca", "verify-full", "require"] {
        // libpq: with a root certificate, require verifies the chain like verify-ca.
        let url = cluster.url(
            "localhost",
            &format!("sslmode={mode}&sslrootcert={}", cluster.other_ca()),
        );
        assert_refused(&url, &["certificate verify failed"]).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_text_is_refused_by_a_server_that_requires_tls() {
    let cluster = Cluster::get().await;
    assert_refused(
        &cluster.url("localhost", "sslmode=disable"),
        &["pg_hba.conf"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modes_that_do_not_verify_still_reach_a_tls_only_server() {
    let cluster = Cluster::get().await;
    // allow: plain text first, refused, then TLS; prefer: TLS first.
    for mode in ["require", "prefer", "allow"] {
        let url = cluster.url("127.0.0.1", &format!("sslmode={mode}"));
        connect_listener(&url, &test_options())
            .await
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
        Store::open_with(postgres(&url), test_options())
            .await
            .unwrap_or_else(|e| panic!("{mode}: {e}"));
    }
}
