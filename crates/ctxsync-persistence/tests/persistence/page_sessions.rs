//! Page links and browser sessions in the store, on both backends: a link is used up once
//! across two stores on one database, only by its own chat and only while unexpired;
//! expired rows are swept; the tables hold digests, never the raw secrets; deleting a
//! chat takes its links and sessions with it.

use std::time::Duration;

use ctxsync_persistence::test_support::TestStore;
use ctxsync_persistence::{
    ChatId, DatabaseConfig, MAX_LIVE_PAGE_LINKS, SQLITE_FILE_NAME, StoreError,
};
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Binary};

const LINK_TTL: Duration = Duration::from_secs(15 * 60);
const SESSION_TTL: Duration = Duration::from_secs(12 * 60 * 60);
/// A lifetime that is over as soon as the row is written.
const EXPIRED: Duration = Duration::ZERO;

ctxsync_test_support::on_both_backends! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    open = ctxsync_test_support::store;
    a_link_is_used_up_once_across_stores,
    a_link_opens_only_its_own_chat,
    expired_links_and_sessions_open_nothing,
    expired_rows_are_swept,
    only_digests_are_stored,
    deleting_a_chat_deletes_its_links_and_sessions,
    unknown_chats_and_odd_secrets_are_refused,
    minting_stops_at_the_live_link_bound,
}

async fn chat(db: &TestStore) -> ChatId {
    db.create_chat(None).await.expect("create chat").id
}

/// Runs raw SQL against the test database beside the store (the SQLite connection with
/// foreign keys on, as the store's own are).
fn with_raw<T>(db: &TestStore, f: impl FnOnce(&mut RawConn) -> T) -> T {
    let mut conn = match db.config() {
        DatabaseConfig::Postgres { url } => RawConn::Pg(PgConnection::establish(url).unwrap()),
        DatabaseConfig::Sqlite { path } => {
            let mut conn = SqliteConnection::establish(path.to_str().unwrap()).unwrap();
            conn.batch_execute("PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 5000;")
                .unwrap();
            RawConn::Sqlite(conn)
        }
    };
    f(&mut conn)
}

enum RawConn {
    Pg(PgConnection),
    Sqlite(SqliteConnection),
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(QueryableByName)]
struct Digest {
    #[diesel(sql_type = Binary)]
    digest: Vec<u8>,
}

impl RawConn {
    fn count(&mut self, sql: &str) -> i64 {
        let query = diesel::sql_query(sql);
        match self {
            Self::Pg(c) => query.get_result::<Count>(c),
            Self::Sqlite(c) => query.get_result::<Count>(c),
        }
        .unwrap()
        .n
    }

    fn digests(&mut self, sql: &str) -> Vec<Vec<u8>> {
        let query = diesel::sql_query(sql);
        match self {
            Self::Pg(c) => query.load::<Digest>(c),
            Self::Sqlite(c) => query.load::<Digest>(c),
        }
        .unwrap()
        .into_iter()
        .map(|d| d.digest)
        .collect()
    }

    fn execute(&mut self, sql: &str) {
        match self {
            Self::Pg(c) => c.batch_execute(sql),
            Self::Sqlite(c) => c.batch_execute(sql),
        }
        .unwrap();
    }
}

fn rows(db: &TestStore, table: &str) -> i64 {
    with_raw(db, |c| {
        c.count(&format!("SELECT count(*) AS n FROM {table}"))
    })
}

async fn a_link_is_used_up_once_across_stores(db: TestStore) {
    let other_replica = db.open_another().await;
    let chat = chat(&db).await;
    let link = db.mint_page_link(chat, LINK_TTL).await.unwrap();
    assert_eq!(
        other_replica.page_link_chat(&link).await.unwrap(),
        Some(chat),
        "the other store sees the link"
    );
    assert_eq!(
        db.page_link_chat(&link).await.unwrap(),
        Some(chat),
        "peeking twice keeps the link"
    );

    // Both stores exchange it at once: exactly one session starts.
    let (first, second) = tokio::join!(
        db.exchange_page_link(chat, &link, SESSION_TTL),
        other_replica.exchange_page_link(chat, &link, SESSION_TTL),
    );
    let sessions: Vec<String> = [first.unwrap(), second.unwrap()]
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(sessions.len(), 1, "a link is single-use: {sessions:?}");
    assert_eq!(db.page_link_chat(&link).await.unwrap(), None);
    assert_eq!(
        db.exchange_page_link(chat, &link, SESSION_TTL)
            .await
            .unwrap(),
        None
    );

    // The session is honoured by both stores.
    for store in [db.store(), &other_replica] {
        assert_eq!(
            store.page_session_chat(&sessions[0]).await.unwrap(),
            Some(chat)
        );
    }
    assert_eq!(rows(&db, "page_links"), 0);
    assert_eq!(rows(&db, "page_sessions"), 1);
}

async fn a_link_opens_only_its_own_chat(db: TestStore) {
    let (chat, other) = (chat(&db).await, chat(&db).await);
    let link = db.mint_page_link(chat, LINK_TTL).await.unwrap();
    assert_eq!(
        db.exchange_page_link(other, &link, SESSION_TTL)
            .await
            .unwrap(),
        None,
        "another chat's exchange fails"
    );
    assert_eq!(
        db.page_link_chat(&link).await.unwrap(),
        Some(chat),
        "and leaves the link as it was"
    );
    let session = db
        .exchange_page_link(chat, &link, SESSION_TTL)
        .await
        .unwrap()
        .expect("its own chat's exchange works");
    assert_eq!(db.page_session_chat(&session).await.unwrap(), Some(chat));
    assert_ne!(session, link, "a session id is a new secret");
    assert_eq!(db.page_session_chat(&link).await.unwrap(), None);
}

async fn expired_links_and_sessions_open_nothing(db: TestStore) {
    let chat = chat(&db).await;
    let expired = db.mint_page_link(chat, EXPIRED).await.unwrap();
    assert_eq!(db.page_link_chat(&expired).await.unwrap(), None);
    assert_eq!(
        db.exchange_page_link(chat, &expired, SESSION_TTL)
            .await
            .unwrap(),
        None
    );

    let link = db.mint_page_link(chat, LINK_TTL).await.unwrap();
    let short = db
        .exchange_page_link(chat, &link, EXPIRED)
        .await
        .unwrap()
        .expect("a live link starts a session");
    assert_eq!(
        db.page_session_chat(&short).await.unwrap(),
        None,
        "an expired session opens nothing"
    );
}

async fn expired_rows_are_swept(db: TestStore) {
    let chat = chat(&db).await;
    for _ in 0..3 {
        db.mint_page_link(chat, EXPIRED).await.unwrap();
    }
    let link = db.mint_page_link(chat, LINK_TTL).await.unwrap();
    db.exchange_page_link(chat, &link, EXPIRED)
        .await
        .unwrap()
        .unwrap();
    // Minting swept the three expired links before adding its own.
    assert_eq!(rows(&db, "page_links"), 0);
    assert_eq!(rows(&db, "page_sessions"), 1, "the expired session is kept");

    let live = db.mint_page_link(chat, LINK_TTL).await.unwrap();
    assert_eq!(rows(&db, "page_sessions"), 0, "the next mint swept it");
    assert_eq!(rows(&db, "page_links"), 1, "live links stay");
    assert_eq!(db.page_link_chat(&live).await.unwrap(), Some(chat));
}

async fn only_digests_are_stored(db: TestStore) {
    let chat = chat(&db).await;
    let link = db.mint_page_link(chat, LINK_TTL).await.unwrap();
    let stored_link = with_raw(&db, |c| {
        c.digests("SELECT token_digest AS digest FROM page_links")
    });
    let keep = db.mint_page_link(chat, LINK_TTL).await.unwrap();
    let session = db
        .exchange_page_link(chat, &keep, SESSION_TTL)
        .await
        .unwrap()
        .unwrap();
    let stored_session = with_raw(&db, |c| {
        c.digests("SELECT session_digest AS digest FROM page_sessions")
    });
    assert_eq!(stored_link, [sha256(&link)]);
    assert_eq!(stored_session, [sha256(&session)]);
    for (stored, raw) in [(&stored_link[0], &link), (&stored_session[0], &session)] {
        assert!(
            !contains(stored, raw.as_bytes()),
            "the raw secret is not stored"
        );
    }
    // No text column anywhere carries the raw secrets either.
    let dump = match db.config() {
        DatabaseConfig::Sqlite { path } => {
            assert!(path.ends_with(SQLITE_FILE_NAME));
            let mut bytes = std::fs::read(path).unwrap();
            let mut wal = path.clone().into_os_string();
            wal.push("-wal");
            bytes.extend(std::fs::read(wal).unwrap_or_default());
            bytes
        }
        DatabaseConfig::Postgres { .. } => with_raw(&db, |c| {
            c.digests(
                "SELECT convert_to(l::text, 'UTF8') AS digest FROM page_links l \
                 UNION ALL SELECT convert_to(s::text, 'UTF8') FROM page_sessions s",
            )
            .concat()
        }),
    };
    for raw in [&link, &keep, &session] {
        assert!(!contains(&dump, raw.as_bytes()), "{raw} found in the data");
    }
}

async fn deleting_a_chat_deletes_its_links_and_sessions(db: TestStore) {
    let (chat, other) = (chat(&db).await, chat(&db).await);
    let link = db.mint_page_link(chat, LINK_TTL).await.unwrap();
    let used = db.mint_page_link(chat, LINK_TTL).await.unwrap();
    let session = db
        .exchange_page_link(chat, &used, SESSION_TTL)
        .await
        .unwrap()
        .unwrap();
    let kept = db.mint_page_link(other, LINK_TTL).await.unwrap();
    with_raw(&db, |c| {
        c.execute(&format!("DELETE FROM chats WHERE id = '{chat}'"))
    });
    assert_eq!(db.page_link_chat(&link).await.unwrap(), None);
    assert_eq!(db.page_session_chat(&session).await.unwrap(), None);
    assert_eq!(rows(&db, "page_sessions"), 0);
    assert_eq!(rows(&db, "page_links"), 1, "another chat's link stays");
    assert_eq!(db.page_link_chat(&kept).await.unwrap(), Some(other));
}

async fn unknown_chats_and_odd_secrets_are_refused(db: TestStore) {
    let missing = ChatId::new_random();
    assert!(matches!(
        db.mint_page_link(missing, LINK_TTL).await,
        Err(StoreError::ChatNotFound(id)) if id == missing
    ));
    let chat = chat(&db).await;
    let long = "a".repeat(10_000);
    for odd in ["", "forged", long.as_str(), "x'; DROP TABLE chats; --"] {
        assert_eq!(db.page_link_chat(odd).await.unwrap(), None, "{odd:?}");
        assert_eq!(db.page_session_chat(odd).await.unwrap(), None, "{odd:?}");
        assert_eq!(
            db.exchange_page_link(chat, odd, SESSION_TTL).await.unwrap(),
            None
        );
    }
    assert!(matches!(
        db.mint_page_link(chat, Duration::MAX).await,
        Err(StoreError::InvalidInput(_))
    ));
}

async fn minting_stops_at_the_live_link_bound(db: TestStore) {
    let chat = chat(&db).await;
    let link = db.mint_page_link(chat, LINK_TTL).await.unwrap();
    // Fill the table to the bound with live links (random digests, far from expiry).
    let fill = MAX_LIVE_PAGE_LINKS - 1;
    with_raw(&db, |c| {
        match c {
        RawConn::Pg(_) => c.execute(&format!(
            "INSERT INTO page_links (token_digest, chat_id, expires_at, created_at) \
             SELECT sha256(convert_to(i::text, 'UTF8')), '{chat}', now() + interval '1 hour', now() \
             FROM generate_series(1, {fill}) AS i"
        )),
        RawConn::Sqlite(_) => c.execute(&format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {fill}) \
             INSERT INTO page_links (token_digest, chat_id, expires_at, created_at) \
             SELECT randomblob(32), '{chat}', '2999-01-01 00:00:00+00:00', \
             '2000-01-01 00:00:00+00:00' FROM n"
        )),
    }
    });
    assert!(matches!(
        db.mint_page_link(chat, LINK_TTL).await,
        Err(StoreError::LimitReached(message)) if message.contains("page links")
    ));
    assert_eq!(
        rows(&db, "page_links"),
        MAX_LIVE_PAGE_LINKS,
        "nothing written"
    );
    // Using a link frees a place.
    db.exchange_page_link(chat, &link, SESSION_TTL)
        .await
        .unwrap()
        .expect("the exchange still works at the bound");
    db.mint_page_link(chat, LINK_TTL).await.unwrap();
}

fn sha256(text: &str) -> Vec<u8> {
    use sha2::Digest as _;
    sha2::Sha256::digest(text.as_bytes()).to_vec()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}
