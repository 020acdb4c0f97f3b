//! MCP sign-in credentials on both backends: they round-trip sealed; a wrong key, a
//! ciphertext moved to another row or an unknown key id is an error in words that leaves
//! the row as it was; rotation reseals everything under the new key; deleting an agent
//! deletes its credentials and rotating its token keeps them; no token reaches the
//! database file, a dump of the database or a `Debug`. The key file's own checks (length,
//! mode, generation) need no database and run once.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use chrono::{DateTime, TimeZone, Utc};
use ctxsync_persistence::test_support::TestStore;
use ctxsync_persistence::{
    AgentId, CredentialSecrets, CredentialSummary, DatabaseConfig, Keyring, McpCredential,
    OAuthClient, SECRETS_KEY_FILE_NAME, SQLITE_FILE_NAME, SecretString, SecretsKey,
    SecretsKeyError, StoreError,
};
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::Text;

const ACCESS_CANARY: &str = "canary-access-7f3a9c1e";
const REFRESH_CANARY: &str = "canary-refresh-52b8d0aa";
const CLIENT_SECRET_CANARY: &str = "canary-client-secret-e41c";
/// Plaintext metadata: it must be found where the secrets must not, or the scan saw
/// nothing.
const VISIBLE_ACCOUNT: &str = "visible-account-9d2e";
const SERVER_URL: &str = "https://mcp.example.test/mcp";
const ISSUER: &str = "https://auth.example.test/";
const REDIRECT_URI: &str = "https://ctxsync.example.test/oauth/callback";

ctxsync_test_support::on_both_backends! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    open = ctxsync_test_support::store;
    credentials_round_trip_and_are_replaced_and_forgotten,
    a_wrong_key_is_an_error_in_words_and_the_row_is_kept,
    a_ciphertext_moved_to_another_row_does_not_open,
    rotation_reseals_under_the_new_key,
    deleting_an_agent_deletes_its_credentials,
    rotating_an_agent_token_keeps_its_credentials,
    no_secret_is_stored_or_shown_in_plaintext,
    fields_out_of_bounds_are_refused_before_the_database,
    an_agents_credentials_open_together_or_not_at_all,
}

fn key(byte: u8) -> SecretsKey {
    SecretsKey::from_bytes([byte; 32])
}

fn at(hour: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 7, hour, 0, 0).unwrap()
}

fn credential(issuer: &str, access: &str) -> McpCredential {
    McpCredential {
        summary: CredentialSummary {
            server_name: "docs".into(),
            server_url: SERVER_URL.into(),
            issuer: issuer.into(),
            account: Some(VISIBLE_ACCOUNT.into()),
            scopes: "read write".into(),
            access_expires_at: Some(at(11)),
            signed_in_at: at(10),
            signed_in_via: "api_token".into(),
        },
        secrets: CredentialSecrets {
            access_token: access.into(),
            refresh_token: Some(REFRESH_CANARY.into()),
            token_type: "Bearer".into(),
            client_secret: Some(CLIENT_SECRET_CANARY.into()),
            client_id: Some("client-123".into()),
        },
    }
}

fn client(secret: Option<&str>) -> OAuthClient {
    OAuthClient {
        issuer: ISSUER.into(),
        redirect_uri: REDIRECT_URI.into(),
        client_id: "client-123".into(),
        client_secret: secret.map(SecretString::from),
        created_at: at(9),
    }
}

async fn agent(db: &TestStore) -> AgentId {
    db.create_agent("laptop").await.expect("create agent").id
}

/// Fails unless `error` is the unreadable-credentials error, in words, naming what it
/// should and no secret.
fn assert_unreadable(error: &StoreError, names: &str) {
    assert!(
        matches!(error, StoreError::CredentialsUnreadable { .. }),
        "{error:?}"
    );
    let text = error.to_string();
    for expected in [
        "cannot be read with the secrets key given",
        "was the key file changed?",
        names,
    ] {
        assert!(text.contains(expected), "{expected:?} missing from: {text}");
    }
    assert_no_canary(&text);
    assert_no_canary(&format!("{error:?}"));
}

fn assert_no_canary(text: &str) {
    for canary in [ACCESS_CANARY, REFRESH_CANARY, CLIENT_SECRET_CANARY] {
        assert!(!text.contains(canary), "{canary} shows in: {text}");
    }
}

/// A connection of its own to the test database, beside the store's.
pub(crate) enum RawConn {
    Pg(PgConnection),
    Sqlite(SqliteConnection),
}

#[derive(QueryableByName)]
struct TextRow {
    #[diesel(sql_type = Text)]
    text: String,
}

impl RawConn {
    pub(crate) fn open(db: &TestStore) -> Self {
        match db.config() {
            DatabaseConfig::Postgres { url } => Self::Pg(PgConnection::establish(url).unwrap()),
            DatabaseConfig::Sqlite { path } => {
                let mut conn = SqliteConnection::establish(path.to_str().unwrap()).unwrap();
                conn.batch_execute("PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 5000;")
                    .unwrap();
                Self::Sqlite(conn)
            }
        }
    }

    pub(crate) fn execute(&mut self, sql: &str) {
        match self {
            Self::Pg(c) => c.batch_execute(sql),
            Self::Sqlite(c) => c.batch_execute(sql),
        }
        .unwrap();
    }

    /// The one text column, named `text`, of `sql`'s rows.
    pub(crate) fn texts(&mut self, sql: &str) -> Vec<String> {
        let query = diesel::sql_query(sql);
        match self {
            Self::Pg(c) => query.load::<TextRow>(c),
            Self::Sqlite(c) => query.load::<TextRow>(c),
        }
        .unwrap()
        .into_iter()
        .map(|row| row.text)
        .collect()
    }

    /// The distinct key ids of `table`'s sealed rows.
    fn key_ids(&mut self, table: &str) -> Vec<String> {
        self.texts(&format!(
            "SELECT DISTINCT key_id AS text FROM {table} WHERE key_id IS NOT NULL ORDER BY 1"
        ))
    }
}

async fn credentials_round_trip_and_are_replaced_and_forgotten(db: TestStore) {
    let agent = agent(&db).await;
    let keys = Keyring::new(key(1));
    let saved = credential(ISSUER, ACCESS_CANARY);
    db.save_credential(agent, &saved, &keys).await.unwrap();
    let read = db
        .credential(agent, SERVER_URL, ISSUER, &keys)
        .await
        .unwrap();
    assert_eq!(read.as_ref(), Some(&saved));
    assert_eq!(
        db.credential_summaries(agent).await.unwrap(),
        vec![saved.summary.clone()]
    );
    assert_eq!(
        db.credential(agent, SERVER_URL, "https://other.example.test/", &keys)
            .await
            .unwrap(),
        None,
        "another issuer is another credential"
    );

    // A refresh replaces the row in place; a second issuer is a row of its own.
    let mut refreshed = credential(ISSUER, "refreshed-access");
    refreshed.summary.access_expires_at = Some(at(12));
    refreshed.secrets.refresh_token = None;
    refreshed.summary.account = None;
    db.save_credential(agent, &refreshed, &keys).await.unwrap();
    let other = credential("https://other.example.test/", "other-access");
    db.save_credential(agent, &other, &keys).await.unwrap();
    assert_eq!(
        db.credential(agent, SERVER_URL, ISSUER, &keys)
            .await
            .unwrap(),
        Some(refreshed.clone())
    );
    assert_eq!(
        db.credential_summaries(agent).await.unwrap(),
        vec![refreshed.summary.clone(), other.summary.clone()]
    );
    assert!(
        db.credential_summaries(AgentId::new_random())
            .await
            .unwrap()
            .is_empty()
    );

    assert!(
        db.forget_credential(agent, SERVER_URL, ISSUER)
            .await
            .unwrap()
    );
    assert!(
        !db.forget_credential(agent, SERVER_URL, ISSUER)
            .await
            .unwrap()
    );
    assert_eq!(
        db.credential(agent, SERVER_URL, ISSUER, &keys)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        db.credential_summaries(agent).await.unwrap(),
        vec![other.summary]
    );

    // Client registrations: with a secret, replaced by a newer one, and without one.
    assert_eq!(
        db.oauth_client(ISSUER, REDIRECT_URI, &keys).await.unwrap(),
        None
    );
    let registered = client(Some(CLIENT_SECRET_CANARY));
    db.save_oauth_client(&registered, &keys).await.unwrap();
    assert_eq!(
        db.oauth_client(ISSUER, REDIRECT_URI, &keys).await.unwrap(),
        Some(registered)
    );
    let public = OAuthClient {
        client_id: "client-456".into(),
        ..client(None)
    };
    db.save_oauth_client(&public, &keys).await.unwrap();
    assert_eq!(
        db.oauth_client(ISSUER, REDIRECT_URI, &keys).await.unwrap(),
        Some(public)
    );
    assert_eq!(
        db.oauth_client(ISSUER, "https://elsewhere.test/cb", &keys)
            .await
            .unwrap(),
        None
    );

    let unknown = db
        .save_credential(AgentId::new_random(), &saved, &keys)
        .await
        .unwrap_err();
    assert!(
        matches!(unknown, StoreError::AgentNotFound(_)),
        "{unknown:?}"
    );
}

async fn a_wrong_key_is_an_error_in_words_and_the_row_is_kept(db: TestStore) {
    let agent = agent(&db).await;
    let (right, wrong) = (Keyring::new(key(1)), Keyring::new(key(2)));
    db.save_credential(agent, &credential(ISSUER, ACCESS_CANARY), &right)
        .await
        .unwrap();
    db.save_oauth_client(&client(Some(CLIENT_SECRET_CANARY)), &right)
        .await
        .unwrap();

    let error = db
        .credential(agent, SERVER_URL, ISSUER, &wrong)
        .await
        .unwrap_err();
    assert_unreadable(&error, SERVER_URL);
    let text = error.to_string();
    assert!(text.contains(&agent.to_string()), "{text}");
    assert!(
        text.contains(&key(1).id().to_string()),
        "names the key that sealed: {text}"
    );
    assert!(
        text.contains(&key(2).id().to_string()),
        "names the key given: {text}"
    );
    let error = db
        .oauth_client(ISSUER, REDIRECT_URI, &wrong)
        .await
        .unwrap_err();
    assert_unreadable(&error, "client-123");

    // Rekeying with the wrong ring refuses as a whole and changes nothing.
    let error = db.rekey_credentials(&wrong).await.unwrap_err();
    assert_unreadable(&error, ISSUER);

    // The summaries need no key, and the right key still opens everything.
    assert_eq!(db.credential_summaries(agent).await.unwrap().len(), 1);
    let kept = db
        .credential(agent, SERVER_URL, ISSUER, &right)
        .await
        .unwrap();
    assert_eq!(kept, Some(credential(ISSUER, ACCESS_CANARY)));
    let kept = db.oauth_client(ISSUER, REDIRECT_URI, &right).await.unwrap();
    assert_eq!(kept, Some(client(Some(CLIENT_SECRET_CANARY))));
}

async fn a_ciphertext_moved_to_another_row_does_not_open(db: TestStore) {
    let (alice, bob) = (agent(&db).await, agent(&db).await);
    let keys = Keyring::new(key(1));
    let other_issuer = "https://other.example.test/";
    db.save_credential(alice, &credential(ISSUER, ACCESS_CANARY), &keys)
        .await
        .unwrap();
    db.save_credential(alice, &credential(other_issuer, "decoy-1"), &keys)
        .await
        .unwrap();
    db.save_credential(bob, &credential(ISSUER, "decoy-2"), &keys)
        .await
        .unwrap();
    let mut raw = RawConn::open(&db);
    // Alice's sealed tokens copied over her other issuer's row and over Bob's row.
    let source = format!("agent_id = '{alice}' AND issuer = '{ISSUER}'");
    for target in [
        format!("agent_id = '{alice}' AND issuer = '{other_issuer}'"),
        format!("agent_id = '{bob}' AND issuer = '{ISSUER}'"),
    ] {
        raw.execute(&format!(
            "UPDATE mcp_credentials SET \
             key_id = (SELECT key_id FROM mcp_credentials WHERE {source}), \
             nonce = (SELECT nonce FROM mcp_credentials WHERE {source}), \
             ciphertext = (SELECT ciphertext FROM mcp_credentials WHERE {source}) \
             WHERE {target}"
        ));
    }
    let error = db
        .credential(alice, SERVER_URL, other_issuer, &keys)
        .await
        .unwrap_err();
    assert_unreadable(&error, other_issuer);
    assert!(error.to_string().contains("altered or copied"), "{error}");
    let error = db
        .credential(bob, SERVER_URL, ISSUER, &keys)
        .await
        .unwrap_err();
    assert_unreadable(&error, &bob.to_string());
    // The source row still opens.
    let source_row = db
        .credential(alice, SERVER_URL, ISSUER, &keys)
        .await
        .unwrap();
    assert_eq!(source_row, Some(credential(ISSUER, ACCESS_CANARY)));

    // A client secret moved to another registration does not open either.
    db.save_oauth_client(&client(Some(CLIENT_SECRET_CANARY)), &keys)
        .await
        .unwrap();
    let other_uri = "https://ctxsync.example.test/other/callback";
    let other = OAuthClient {
        redirect_uri: other_uri.into(),
        ..client(Some("decoy-secret"))
    };
    db.save_oauth_client(&other, &keys).await.unwrap();
    let source = format!("redirect_uri = '{REDIRECT_URI}'");
    raw.execute(&format!(
        "UPDATE mcp_oauth_clients SET \
         nonce = (SELECT nonce FROM mcp_oauth_clients WHERE {source}), \
         client_secret_ciphertext = \
           (SELECT client_secret_ciphertext FROM mcp_oauth_clients WHERE {source}) \
         WHERE redirect_uri = '{other_uri}'"
    ));
    let error = db.oauth_client(ISSUER, other_uri, &keys).await.unwrap_err();
    assert_unreadable(&error, other_uri);
}

async fn rotation_reseals_under_the_new_key(db: TestStore) {
    let agent = agent(&db).await;
    let (a, b) = (key(1), key(2));
    let old = Keyring::new(a.clone());
    let saved = credential(ISSUER, ACCESS_CANARY);
    db.save_credential(agent, &saved, &old).await.unwrap();
    db.save_oauth_client(&client(Some(CLIENT_SECRET_CANARY)), &old)
        .await
        .unwrap();
    let public = OAuthClient {
        redirect_uri: "https://ctxsync.example.test/public".into(),
        ..client(None)
    };
    db.save_oauth_client(&public, &old).await.unwrap();

    // Every replica now holds B as current and A as previous: A's rows still open.
    let rotating = Keyring::new(b.clone()).with_previous(a.clone());
    let read = db
        .credential(agent, SERVER_URL, ISSUER, &rotating)
        .await
        .unwrap();
    assert_eq!(read.as_ref(), Some(&saved));
    // A row written meanwhile is sealed under B at once.
    let second = credential("https://other.example.test/", "second-access");
    db.save_credential(agent, &second, &rotating).await.unwrap();

    // One credential and one client secret were under A; the public client has none.
    assert_eq!(db.rekey_credentials(&rotating).await.unwrap(), 2);
    assert_eq!(
        db.rekey_credentials(&rotating).await.unwrap(),
        0,
        "nothing left"
    );
    let mut raw = RawConn::open(&db);
    for table in ["mcp_credentials", "mcp_oauth_clients"] {
        assert_eq!(raw.key_ids(table), vec![b.id().to_string()], "{table}");
    }

    // B alone opens everything; A alone opens nothing.
    let new = Keyring::new(b);
    assert_eq!(
        db.credential(agent, SERVER_URL, ISSUER, &new)
            .await
            .unwrap(),
        Some(saved)
    );
    let read = db
        .credential(agent, SERVER_URL, &second.summary.issuer, &new)
        .await
        .unwrap();
    assert_eq!(read, Some(second));
    assert_eq!(
        db.oauth_client(ISSUER, REDIRECT_URI, &new).await.unwrap(),
        Some(client(Some(CLIENT_SECRET_CANARY)))
    );
    let error = db
        .credential(agent, SERVER_URL, ISSUER, &old)
        .await
        .unwrap_err();
    assert_unreadable(&error, SERVER_URL);
    assert!(error.to_string().contains("sealed under key"), "{error}");
    let error = db
        .oauth_client(ISSUER, REDIRECT_URI, &old)
        .await
        .unwrap_err();
    assert_unreadable(&error, ISSUER);
    // A public client needs no key at all.
    assert_eq!(
        db.oauth_client(ISSUER, &public.redirect_uri, &old)
            .await
            .unwrap(),
        Some(public)
    );
}

async fn deleting_an_agent_deletes_its_credentials(db: TestStore) {
    let (gone, kept) = (agent(&db).await, agent(&db).await);
    let keys = Keyring::new(key(1));
    for agent in [gone, kept] {
        db.save_credential(agent, &credential(ISSUER, ACCESS_CANARY), &keys)
            .await
            .unwrap();
    }
    db.delete_agent(gone).await.unwrap();
    assert!(db.credential_summaries(gone).await.unwrap().is_empty());
    assert_eq!(
        db.credential(gone, SERVER_URL, ISSUER, &keys)
            .await
            .unwrap(),
        None
    );
    assert_eq!(db.credential_summaries(kept).await.unwrap().len(), 1);
    // Gone from the table itself, not only from the store's answers.
    let mut raw = RawConn::open(&db);
    assert_eq!(
        raw.texts("SELECT CAST(agent_id AS TEXT) AS text FROM mcp_credentials"),
        vec![kept.to_string()]
    );
}

async fn rotating_an_agent_token_keeps_its_credentials(db: TestStore) {
    let agent = agent(&db).await;
    let keys = Keyring::new(key(1));
    let saved = credential(ISSUER, ACCESS_CANARY);
    db.save_credential(agent, &saved, &keys).await.unwrap();
    let rotated = db.rotate_agent_token(agent).await.unwrap();
    assert_eq!(
        db.authenticate(rotated.token.expose()).await.unwrap(),
        agent
    );
    assert_eq!(
        db.credential(agent, SERVER_URL, ISSUER, &keys)
            .await
            .unwrap(),
        Some(saved)
    );
}

async fn no_secret_is_stored_or_shown_in_plaintext(db: TestStore) {
    let agent = agent(&db).await;
    let keys = Keyring::new(key(1)).with_previous(key(2));
    let saved = credential(ISSUER, ACCESS_CANARY);
    db.save_credential(agent, &saved, &keys).await.unwrap();
    db.save_oauth_client(&client(Some(CLIENT_SECRET_CANARY)), &keys)
        .await
        .unwrap();

    // What the store answers shows no secret in `Debug`.
    let read = db
        .credential(agent, SERVER_URL, ISSUER, &keys)
        .await
        .unwrap();
    let read = read.expect("saved");
    assert_eq!(read.secrets.access_token.expose(), ACCESS_CANARY);
    let summaries = db.credential_summaries(agent).await.unwrap();
    let registered = db.oauth_client(ISSUER, REDIRECT_URI, &keys).await.unwrap();
    let unreadable = db
        .credential(agent, SERVER_URL, ISSUER, &Keyring::new(key(3)))
        .await
        .unwrap_err();
    for shown in [
        format!("{read:?} {read:#?}"),
        format!("{:?}", read.secrets),
        format!("{summaries:?}"),
        format!("{registered:?}"),
        format!("{unreadable:?} {unreadable}"),
        format!("{keys:?} {:?}", key(1)),
    ] {
        assert_no_canary(&shown);
        assert!(!shown.contains("[1, 1, 1"), "key bytes in {shown}");
    }

    // Nor does the database: its files (SQLite) or a dump of it (PostgreSQL).
    let stored = match (db.sqlite_data_dir(), db.postgres_database()) {
        (Some(dir), _) => sqlite_bytes(dir),
        (None, Some(database)) => {
            let Some(dump) = pg_dump(database.url()) else {
                return;
            };
            dump
        }
        (None, None) => unreachable!("a test store is on one backend"),
    };
    assert!(
        contains(&stored, VISIBLE_ACCOUNT.as_bytes()),
        "the scan must see the plaintext metadata ({} bytes scanned)",
        stored.len()
    );
    for canary in [ACCESS_CANARY, REFRESH_CANARY, CLIENT_SECRET_CANARY] {
        assert!(
            !contains(&stored, canary.as_bytes()),
            "{canary} is stored in plaintext"
        );
        let hex: String = canary.bytes().map(|b| format!("{b:02x}")).collect();
        assert!(
            !contains(&stored, hex.as_bytes()),
            "{canary} is stored as hex"
        );
    }
}

/// The SQLite database file and its `-wal` and `-shm` siblings, as they are on disk.
pub(crate) fn sqlite_bytes(dir: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    for suffix in ["", "-wal", "-shm"] {
        let path = dir.join(format!("{SQLITE_FILE_NAME}{suffix}"));
        match std::fs::read(&path) {
            Ok(content) => bytes.extend(content),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !suffix.is_empty() => {}
            Err(e) => panic!("reading {}: {e}", path.display()),
        }
    }
    bytes
}

/// `pg_dump` of the database at `url`; `None`, with a note, when pg_dump is not on PATH.
pub(crate) fn pg_dump(url: &str) -> Option<Vec<u8>> {
    let output = match std::process::Command::new("pg_dump")
        .args(["--no-owner", "--dbname", url])
        .output()
    {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!(
                "NOTE: pg_dump is not on PATH, so the PostgreSQL dump was not scanned for \
                 plaintext secrets"
            );
            return None;
        }
        Err(e) => panic!("running pg_dump: {e}"),
    };
    assert!(
        output.status.success(),
        "pg_dump failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(output.stdout)
}

pub(crate) fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

async fn fields_out_of_bounds_are_refused_before_the_database(db: TestStore) {
    let agent = agent(&db).await;
    let keys = Keyring::new(key(1));
    let mut bad = credential(ISSUER, ACCESS_CANARY);
    bad.summary.server_url.clear();
    let mut long_scopes = credential(ISSUER, ACCESS_CANARY);
    long_scopes.summary.scopes = "s ".repeat(4000);
    let no_token = credential(ISSUER, "");
    for credential in [bad, long_scopes, no_token] {
        let error = db
            .save_credential(agent, &credential, &keys)
            .await
            .unwrap_err();
        assert!(matches!(error, StoreError::InvalidInput(_)), "{error:?}");
        assert_no_canary(&error.to_string());
    }
    let error = db
        .save_oauth_client(&client(Some("")), &keys)
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::InvalidInput(_)), "{error:?}");
    assert!(db.credential_summaries(agent).await.unwrap().is_empty());
}

async fn an_agents_credentials_open_together_or_not_at_all(db: TestStore) {
    let (agent, other) = (agent(&db).await, agent(&db).await);
    let keys = Keyring::new(key(1));
    let docs = credential(ISSUER, ACCESS_CANARY);
    let wiki = McpCredential {
        summary: CredentialSummary {
            server_name: "wiki".into(),
            server_url: "https://wiki.example.test/mcp".into(),
            ..docs.summary.clone()
        },
        ..credential(ISSUER, "wiki-access")
    };
    let old_docs = credential("https://old.example.test/", "old-access");
    for saved in [&wiki, &docs, &old_docs] {
        db.save_credential(agent, saved, &keys).await.unwrap();
    }
    db.save_credential(other, &docs, &keys).await.unwrap();
    // By server name, then URL and issuer.
    let all = db.agent_credentials(agent, &keys).await.unwrap();
    assert_eq!(all, vec![docs.clone(), old_docs, wiki.clone()]);
    assert!(
        db.agent_credentials(AgentId::new_random(), &keys)
            .await
            .unwrap()
            .is_empty()
    );

    // One the keyring cannot open fails the whole answer, naming it.
    let mut raw = RawConn::open(&db);
    raw.execute(&format!(
        "UPDATE mcp_credentials SET ciphertext = \
           (SELECT ciphertext FROM mcp_credentials WHERE agent_id = '{other}') \
         WHERE agent_id = '{agent}' AND server_name = 'wiki'"
    ));
    let error = db.agent_credentials(agent, &keys).await.unwrap_err();
    assert_unreadable(&error, "https://wiki.example.test/mcp");

    // Forgetting a server forgets it under every URL and issuer, and only for this agent.
    assert_eq!(
        db.forget_server_credentials(agent, "docs", "api_token")
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        db.forget_server_credentials(agent, "docs", "api_token")
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        db.forget_server_credentials(agent, "wiki", "api_token")
            .await
            .unwrap(),
        1
    );
    assert!(db.agent_credentials(agent, &keys).await.unwrap().is_empty());
    assert_eq!(
        db.agent_credentials(other, &keys).await.unwrap(),
        vec![docs]
    );
}

// ---- the key file (no database) ------------------------------------------------------

fn write_key_file(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

#[test]
fn a_key_file_of_32_private_bytes_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_key_file(dir.path(), "key", &[7; 32], 0o600);
    let read = SecretsKey::from_file(&path).unwrap();
    assert_eq!(read.id(), key(7).id());
    let read_only = write_key_file(dir.path(), "ro", &[7; 32], 0o400);
    assert_eq!(SecretsKey::from_file(&read_only).unwrap().id(), key(7).id());
}

#[test]
fn key_file_problems_are_told_in_words() {
    let dir = tempfile::tempdir().unwrap();
    let check = |path: &Path, expected: &[&str]| {
        let error = SecretsKey::from_file(path).unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains(&path.display().to_string()),
            "names the file: {text}"
        );
        for part in expected {
            assert!(text.contains(part), "{part:?} missing from: {text}");
        }
        error
    };
    let short = write_key_file(dir.path(), "short", &[1; 31], 0o600);
    let error = check(
        &short,
        &[
            "holds 31 bytes",
            "it must hold exactly 32 random bytes, e.g. from `head -c 32 /dev/urandom`",
        ],
    );
    assert!(matches!(
        error,
        SecretsKeyError::WrongLength { len: 31, .. }
    ));
    let mut with_newline = vec![1; 32];
    with_newline.push(b'\n');
    let newline = write_key_file(dir.path(), "newline", &with_newline, 0o600);
    check(&newline, &["holds 33 bytes", "ends with a newline"]);
    let hex = write_key_file(dir.path(), "hex", "ab".repeat(32).as_bytes(), 0o600);
    check(&hex, &["holds 64 bytes", "hex digits"]);
    let empty = write_key_file(dir.path(), "empty", b"", 0o600);
    check(&empty, &["holds 0 bytes"]);

    for mode in [0o644, 0o640, 0o604, 0o620] {
        let open = write_key_file(dir.path(), "open", &[1; 32], mode);
        let error = check(&open, &["chmod 600", &format!("{mode:04o}")]);
        assert!(
            matches!(error, SecretsKeyError::TooOpen { .. }),
            "{error:?}"
        );
    }

    let missing = dir.path().join("missing");
    let error = check(&missing, &["cannot read the secrets key file"]);
    assert!(matches!(error, SecretsKeyError::Unreadable { .. }));
    let error = check(dir.path(), &["not a regular file"]);
    assert!(
        matches!(error, SecretsKeyError::NotAFile { .. }),
        "{error:?}"
    );
}

#[test]
fn the_generated_key_file_is_private_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data").join("nested");
    let created = SecretsKey::load_or_create(&data_dir).unwrap();
    let path = data_dir.join(SECRETS_KEY_FILE_NAME);
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.len(), 32);
    let dir_mode = std::fs::metadata(&data_dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(dir_mode, 0o700);
    // Only the key file is left behind.
    let names: Vec<_> = std::fs::read_dir(&data_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [SECRETS_KEY_FILE_NAME]);

    // The next start reads the same key, and it is the file's.
    let again = SecretsKey::load_or_create(&data_dir).unwrap();
    assert_eq!(again.id(), created.id());
    assert_eq!(SecretsKey::from_file(&path).unwrap().id(), created.id());
    assert_ne!(created.id(), key(0).id(), "random, not zeros");

    // A key file made too open later is refused, not replaced.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let error = SecretsKey::load_or_create(&data_dir).unwrap_err();
    assert!(
        matches!(error, SecretsKeyError::TooOpen { .. }),
        "{error:?}"
    );
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(
        SecretsKey::load_or_create(&data_dir).unwrap().id(),
        created.id()
    );
}
