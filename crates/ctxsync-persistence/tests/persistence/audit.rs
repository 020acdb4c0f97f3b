//! The tool-call audit log (issue 37) on both backends: one row per stored end,
//! admission refusals included and racing ends counted once; rows outlive turn pruning and
//! the deletion of their chat and agent; listing filters and pages; pruning by age; and
//! the arguments' digest keyed with one secret per deployment, shared by every replica.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use ctxsync_mcp_model::{CallEnd, CallReason, CallStatus};
use ctxsync_persistence::test_support::TestStore;
use ctxsync_persistence::{
    AgentId, AuditQuery, AuditRecord, CallAdmission, ChatId, ChatTurnMode, DatabaseConfig,
    MAX_AUDIT_PAGE, MAX_TURNS_PER_CHAT, NewToolCall, NewTurn, Store, StoreError, ToolCallRecord,
    ToolOrigin, TurnId, TurnOrigin,
};
use ctxsync_protocol::tool_call::ToolCallId;
use ctxsync_protocol::{RunId, Startup};
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::Binary;
use serde_json::json;

ctxsync_test_support::on_both_backends! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    open = ctxsync_test_support::store;
    every_stored_end_leaves_one_row_refusals_included,
    racing_ends_leave_exactly_one_row,
    rows_outlive_turn_pruning_and_the_chat_and_agent,
    listing_filters_and_pages_newest_first,
    page_limits_are_bounded,
    pruning_deletes_rows_by_age,
    the_digest_is_keyed_with_one_secret_every_replica_shares,
}

const RUN: &str = "run-1";

/// An agent whose run `RUN` takes calls, a chat bound to it, and a turn whose tools came
/// from that run: `fs__read` is `read` on server `fs`.
pub(crate) struct World {
    pub(crate) agent: AgentId,
    pub(crate) chat: ChatId,
    pub(crate) turn: TurnId,
}

pub(crate) async fn world(store: &Store) -> World {
    let agent = store.create_agent("laptop").await.unwrap().id;
    let startup = Startup {
        agent_run_id: RunId::new(RUN),
        accepts_tool_calls: true,
        ..Startup::default()
    };
    store.update_startup(agent, startup).await.unwrap();
    let chat = store.create_chat(Some(agent)).await.unwrap().id;
    let turn = new_turn(store, chat, agent).await;
    World { agent, chat, turn }
}

async fn new_turn(store: &Store, chat: ChatId, agent: AgentId) -> TurnId {
    let origin = TurnOrigin {
        agent_id: agent,
        agent_run_id: RunId::new(RUN).unwrap(),
        tools: BTreeMap::from([(
            "fs__read".to_owned(),
            ToolOrigin {
                server: "fs".into(),
                tool: "read".into(),
            },
        )]),
    };
    let turn = NewTurn {
        mode: ChatTurnMode::Default,
        outcome: json!({}),
        tools: json!([{ "name": "fs__read" }]),
        origin: Some(origin),
    };
    store.record_turn(chat, &turn).await.unwrap().id
}

fn request(w: &World, call_id: &str, name: &str, arguments: serde_json::Value) -> NewToolCall {
    NewToolCall {
        chat: w.chat,
        turn: w.turn,
        call_id: call_id.into(),
        name: name.into(),
        arguments: ctxsync_protocol::tool_call::CallArguments::new(&arguments)
            .unwrap()
            .into_string(),
        timeout_ms: 60_000,
    }
}

async fn admit(store: &Store, call: &NewToolCall) -> CallAdmission {
    store.admit_tool_call(call).await.unwrap().unwrap()
}

pub(crate) async fn start(store: &Store, w: &World, call_id: &str) -> ToolCallRecord {
    match admit(store, &request(w, call_id, "fs__read", json!({"n": 1}))).await {
        CallAdmission::Started(record) => record,
        other => panic!("expected Started, got {other:?}"),
    }
}

pub(crate) fn canceled() -> CallEnd {
    CallEnd {
        status: CallStatus::Canceled,
        reason: None,
        error: None,
        result: None,
        truncated: false,
    }
}

/// Every audit row the query finds, page after page.
async fn all_rows(store: &Store, mut query: AuditQuery) -> Vec<AuditRecord> {
    let mut rows = Vec::new();
    loop {
        let page = store.list_tool_call_audit(&query).await.unwrap();
        rows.extend(page.rows);
        match page.next_cursor {
            Some(cursor) => query.cursor = Some(cursor),
            None => return rows,
        }
    }
}

async fn rows_of(store: &Store, call: ToolCallId) -> Vec<AuditRecord> {
    all_rows(store, AuditQuery::default())
        .await
        .into_iter()
        .filter(|row| row.tool_call_id == call)
        .collect()
}

/// The one row of `call`.
async fn row_of(store: &Store, call: ToolCallId) -> AuditRecord {
    let rows = rows_of(store, call).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    rows.into_iter().next().unwrap()
}

async fn every_stored_end_leaves_one_row_refusals_included(db: TestStore) {
    let store = db.store();
    let w = world(store).await;

    // Refused at admission: an end like any other.
    let refused = match admit(store, &request(&w, "r1", "fs__delete", json!({"p": 1}))).await {
        CallAdmission::Refused(record) => record,
        other => panic!("expected Refused, got {other:?}"),
    };
    let row = row_of(store, refused.id).await;
    assert_eq!(
        (
            row.status,
            row.reason,
            row.server.as_str(),
            row.tool.as_str()
        ),
        (CallStatus::Refused, Some(CallReason::NotInTurn), "", "")
    );
    assert_eq!(
        (row.chat_id, row.turn_id, row.agent_id),
        (w.chat, w.turn, Some(w.agent))
    );
    assert_eq!(
        (row.call_id.as_str(), row.name.as_str()),
        ("r1", "fs__delete")
    );
    assert_eq!(row.duration_ms, Some(0));
    assert_eq!(row.arguments_digest, refused.arguments_digest);
    assert_eq!(row.arguments_size, refused.arguments_size);
    assert_eq!(row.result_size, None);
    assert_eq!(Some(row.ended_at), refused.ended_at);
    // Its repeat answers the recorded call and adds nothing.
    admit(store, &request(&w, "r1", "fs__delete", json!({"p": 1}))).await;
    assert_eq!(rows_of(store, refused.id).await.len(), 1);

    // Running calls have no row; ending one writes it, with the result's size only.
    let done = start(store, &w, "c1").await;
    assert!(rows_of(store, done.id).await.is_empty(), "running: no row");
    let result = json!({"content": [{"type": "text", "text": "ok \u{0000} é"}], "isError": false});
    let ended = store
        .end_tool_call(done.id, &CallEnd::complete(result.clone(), true), Some(42))
        .await
        .unwrap()
        .unwrap();
    let row = row_of(store, done.id).await;
    assert_eq!((row.status, row.reason), (CallStatus::Complete, None));
    assert_eq!((row.server.as_str(), row.tool.as_str()), ("fs", "read"));
    assert_eq!(row.duration_ms, Some(42));
    assert_eq!(row.result_size, Some(result.to_string().len() as u64));
    assert!(row.truncated);
    assert_eq!(row.error_code, None);
    assert_eq!(Some(row.ended_at), ended.ended_at);
    // A later end is not stored, so it writes nothing either.
    store
        .end_tool_call(done.id, &CallEnd::error(-1, "late"), None)
        .await
        .unwrap();
    assert_eq!(row_of(store, done.id).await.status, CallStatus::Complete);

    // An error keeps its code, never its message.
    let failing = start(store, &w, "c2").await;
    store
        .end_tool_call(failing.id, &CallEnd::error(-32602, "secret detail"), None)
        .await
        .unwrap();
    let row = row_of(store, failing.id).await;
    assert_eq!(
        (row.status, row.error_code),
        (CallStatus::Error, Some(-32602))
    );
    assert!(!format!("{row:?}").contains("secret detail"), "{row:?}");

    // A retryable refusal is an end too (a retry runs as a new call with a row of its own).
    let busy = start(store, &w, "c3").await;
    store
        .end_tool_call(
            busy.id,
            &CallEnd::with_reason(CallStatus::Refused, CallReason::Busy),
            None,
        )
        .await
        .unwrap();
    let row = row_of(store, busy.id).await;
    assert_eq!(
        (row.status, row.reason),
        (CallStatus::Refused, Some(CallReason::Busy))
    );

    // Ends of a whole agent's calls at once each leave their row.
    let lost = start(store, &w, "c4").await;
    let unknown = CallEnd::with_reason(CallStatus::Unknown, CallReason::StreamLost);
    store
        .end_running_tool_calls(w.agent, None, &unknown)
        .await
        .unwrap();
    let row = row_of(store, lost.id).await;
    assert_eq!(
        (row.status, row.reason),
        (CallStatus::Unknown, Some(CallReason::StreamLost))
    );
    assert_eq!(all_rows(store, AuditQuery::default()).await.len(), 5);
}

async fn racing_ends_leave_exactly_one_row(db: TestStore) {
    let store = db.store();
    let replica = db.open_another().await;
    let w = world(store).await;
    for round in 0..3 {
        let call = start(store, &w, &format!("race-{round}")).await;
        let ends = [
            CallEnd::complete(json!({"content": []}), false),
            CallEnd::error(-32000, "failed"),
            canceled(),
            CallEnd::with_reason(CallStatus::Unknown, CallReason::AgentRestarted),
        ];
        let tasks: Vec<_> = ends
            .into_iter()
            .cycle()
            .take(8)
            .enumerate()
            .map(|(i, end)| {
                let store = if i % 2 == 0 {
                    store.clone()
                } else {
                    replica.clone()
                };
                tokio::spawn(async move { store.end_tool_call(call.id, &end, None).await })
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        let stored = store.get_tool_call_by_id(call.id).await.unwrap().unwrap();
        let row = row_of(store, call.id).await;
        assert_eq!(
            (row.status, Some(row.ended_at)),
            (stored.status, stored.ended_at)
        );
    }
}

/// Runs `sql` on the test database beside the store.
fn raw(db: &TestStore, sql: &str) {
    match db.config() {
        DatabaseConfig::Postgres { url } => {
            PgConnection::establish(url).unwrap().batch_execute(sql)
        }
        DatabaseConfig::Sqlite { path } => {
            let mut conn = SqliteConnection::establish(path.to_str().unwrap()).unwrap();
            conn.batch_execute("PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 5000;")
                .unwrap();
            conn.batch_execute(sql)
        }
    }
    .unwrap();
}

async fn rows_outlive_turn_pruning_and_the_chat_and_agent(db: TestStore) {
    let store = db.store();
    let w = world(store).await;
    let ended = start(store, &w, "c1").await;
    store
        .end_tool_call(ended.id, &canceled(), None)
        .await
        .unwrap();
    let running = start(store, &w, "c2").await;
    // Recording turns past the chat's limit prunes w.turn with its calls, the running one
    // cancelled first: that end is audited too.
    for _ in 0..MAX_TURNS_PER_CHAT {
        new_turn(store, w.chat, w.agent).await;
    }
    assert_eq!(store.get_turn(w.chat, w.turn).await.unwrap(), None);
    assert_eq!(store.get_tool_call_by_id(running.id).await.unwrap(), None);
    let rows = all_rows(store, AuditQuery::default()).await;
    assert_eq!(
        rows.iter()
            .map(|r| (r.tool_call_id, r.status))
            .collect::<Vec<_>>(),
        [
            (running.id, CallStatus::Canceled),
            (ended.id, CallStatus::Canceled)
        ]
    );

    store.delete_agent(w.agent).await.unwrap();
    raw(&db, &format!("DELETE FROM chats WHERE id = '{}'", w.chat));
    assert_eq!(store.get_chat(w.chat).await.unwrap(), None);
    let kept = all_rows(store, AuditQuery::default()).await;
    assert_eq!(kept, rows, "the rows keep their ids as plain values");
    for filter in [
        AuditQuery {
            agent: Some(w.agent),
            ..AuditQuery::default()
        },
        AuditQuery {
            chat: Some(w.chat),
            ..AuditQuery::default()
        },
    ] {
        assert_eq!(all_rows(store, filter).await.len(), 2);
    }
}

/// Moves the audit rows of `calls` to `at` (SQLite keeps diesel's text form).
fn age(db: &TestStore, calls: &[ToolCallId], at: DateTime<Utc>) {
    let at = match db.config() {
        DatabaseConfig::Postgres { .. } => at.to_rfc3339(),
        DatabaseConfig::Sqlite { .. } => at.format("%F %T%.f%:z").to_string(),
    };
    for call in calls {
        raw(
            db,
            &format!("UPDATE tool_call_audit SET ended_at = '{at}' WHERE tool_call_id = '{call}'"),
        );
    }
}

async fn listing_filters_and_pages_newest_first(db: TestStore) {
    let store = db.store();
    let first = world(store).await;
    let second = world(store).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        for w in [&first, &second] {
            let call = start(store, w, &format!("c{i}")).await;
            store
                .end_tool_call(call.id, &canceled(), None)
                .await
                .unwrap();
            ids.push(call.id);
        }
    }
    // Newest first, by end time then id; page by page with nothing lost or repeated.
    let everything = all_rows(store, AuditQuery::default()).await;
    assert_eq!(everything.len(), 10);
    for pair in everything.windows(2) {
        assert!(
            (pair[0].ended_at, pair[0].tool_call_id) > (pair[1].ended_at, pair[1].tool_call_id),
            "{pair:?}"
        );
    }
    let paged = all_rows(
        store,
        AuditQuery {
            limit: Some(3),
            ..AuditQuery::default()
        },
    )
    .await;
    assert_eq!(paged, everything);
    let page = store
        .list_tool_call_audit(&AuditQuery {
            limit: Some(10),
            ..AuditQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(page.rows.len(), 10);
    assert_eq!(
        page.next_cursor, None,
        "a full last page says it is the last"
    );
    // Rows that end at the same instant still page by id.
    age(
        &db,
        &ids,
        DateTime::from_timestamp(1_900_000_000, 0).unwrap(),
    );
    let tied = all_rows(
        store,
        AuditQuery {
            limit: Some(4),
            ..AuditQuery::default()
        },
    )
    .await;
    let mut expected = ids.clone();
    expected.sort();
    expected.reverse();
    assert_eq!(
        tied.iter().map(|r| r.tool_call_id).collect::<Vec<_>>(),
        expected
    );

    // Filters.
    let of_agent = all_rows(
        store,
        AuditQuery {
            agent: Some(first.agent),
            limit: Some(2),
            ..AuditQuery::default()
        },
    )
    .await;
    assert_eq!(of_agent.len(), 5);
    assert!(of_agent.iter().all(|r| r.agent_id == Some(first.agent)));
    let of_chat = all_rows(
        store,
        AuditQuery {
            chat: Some(second.chat),
            ..AuditQuery::default()
        },
    )
    .await;
    assert_eq!(of_chat.len(), 5);
    assert!(of_chat.iter().all(|r| r.chat_id == second.chat));
    let neither = AuditQuery {
        agent: Some(first.agent),
        chat: Some(second.chat),
        ..AuditQuery::default()
    };
    assert!(all_rows(store, neither).await.is_empty());
    let old = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
    age(&db, &ids[..4], old);
    let since = AuditQuery {
        since: Some(old + chrono::Duration::microseconds(1)),
        ..AuditQuery::default()
    };
    assert_eq!(all_rows(store, since).await.len(), 6);
    let since_exactly = AuditQuery {
        since: Some(old),
        ..AuditQuery::default()
    };
    assert_eq!(all_rows(store, since_exactly).await.len(), 10);
}

async fn page_limits_are_bounded(db: TestStore) {
    let store = db.store();
    let w = world(store).await;
    let call = start(store, &w, "c1").await;
    store
        .end_tool_call(call.id, &canceled(), None)
        .await
        .unwrap();
    for bad in [0, MAX_AUDIT_PAGE + 1] {
        let error = store
            .list_tool_call_audit(&AuditQuery {
                limit: Some(bad),
                ..AuditQuery::default()
            })
            .await
            .unwrap_err();
        assert!(
            matches!(&error, StoreError::InvalidInput(m) if m.starts_with("limit:")),
            "{error:?}"
        );
    }
    for limit in [None, Some(1), Some(MAX_AUDIT_PAGE)] {
        let query = AuditQuery {
            limit,
            ..AuditQuery::default()
        };
        let page = store.list_tool_call_audit(&query).await.unwrap();
        assert_eq!((page.rows.len(), page.next_cursor), (1, None), "{limit:?}");
    }
}

async fn pruning_deletes_rows_by_age(db: TestStore) {
    let store = db.store();
    let w = world(store).await;
    let mut ids = Vec::new();
    for i in 0..6 {
        let call = start(store, &w, &format!("c{i}")).await;
        store
            .end_tool_call(call.id, &canceled(), None)
            .await
            .unwrap();
        ids.push(call.id);
    }
    let now = Utc::now();
    age(&db, &ids[..4], now - chrono::Duration::days(40));
    let cutoff = now - chrono::Duration::days(30);
    assert_eq!(store.prune_tool_call_audit(cutoff).await.unwrap(), 4);
    let kept: Vec<ToolCallId> = all_rows(store, AuditQuery::default())
        .await
        .into_iter()
        .map(|r| r.tool_call_id)
        .collect();
    assert_eq!(kept.len(), 2);
    assert!(kept.iter().all(|id| ids[4..].contains(id)), "{kept:?}");
    assert_eq!(store.prune_tool_call_audit(cutoff).await.unwrap(), 0);
    // The calls themselves are the turn's: pruning the log leaves them.
    assert!(store.get_tool_call_by_id(ids[0]).await.unwrap().is_some());
}

#[derive(QueryableByName)]
struct Secret {
    #[diesel(sql_type = Binary)]
    value: Vec<u8>,
}

fn deployment_secrets(db: &TestStore) -> Vec<Vec<u8>> {
    let query = diesel::sql_query("SELECT value FROM deployment_secrets");
    let rows = match db.config() {
        DatabaseConfig::Postgres { url } => {
            query.load::<Secret>(&mut PgConnection::establish(url).unwrap())
        }
        DatabaseConfig::Sqlite { path } => {
            query.load::<Secret>(&mut SqliteConnection::establish(path.to_str().unwrap()).unwrap())
        }
    };
    rows.unwrap().into_iter().map(|s| s.value).collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

async fn the_digest_is_keyed_with_one_secret_every_replica_shares(db: TestStore) {
    use hmac::{Hmac, KeyInit, Mac};
    use sha2::{Digest, Sha256};

    let store = db.store();
    let replica = db.open_another().await;
    let w = world(store).await;
    let arguments = json!({"q": "a"});
    let canonical = ctxsync_protocol::tool_call::CallArguments::new(&arguments)
        .unwrap()
        .into_string();
    let here = start(store, &w, "c1").await;
    let on_replica = match admit(&replica, &request(&w, "c2", "fs__read", json!({"n": 1}))).await {
        CallAdmission::Started(record) => record,
        other => panic!("expected Started, got {other:?}"),
    };
    assert_eq!(here.arguments_digest, on_replica.arguments_digest);

    // One secret, 32 bytes; the digest is its HMAC-SHA256, not the plain sha256 a short
    // argument could be guessed back from.
    let secrets = deployment_secrets(&db);
    assert_eq!(secrets.len(), 1);
    let secret = &secrets[0];
    assert_eq!(secret.len(), 32);
    let plain = hex(&Sha256::digest(canonical.as_bytes()));
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
    mac.update(canonical.as_bytes());
    let keyed = hex(&mac.finalize().into_bytes());
    let call = match admit(store, &request(&w, "c3", "fs__read", arguments.clone())).await {
        CallAdmission::Started(record) => record,
        other => panic!("expected Started, got {other:?}"),
    };
    assert_eq!(call.arguments_digest, keyed);
    assert_ne!(call.arguments_digest, plain);

    // A repeat through the other replica: the same arguments are the same call, others
    // conflict.
    match admit(&replica, &request(&w, "c3", "fs__read", arguments)).await {
        CallAdmission::Existing(record) => assert_eq!(record.id, call.id),
        other => panic!("expected Existing, got {other:?}"),
    }
    match admit(&replica, &request(&w, "c3", "fs__read", json!({"q": "b"}))).await {
        CallAdmission::Conflict(record) => assert_eq!(record.id, call.id),
        other => panic!("expected Conflict, got {other:?}"),
    }

    // A replica opened later reads the same secret; no store prints it.
    let third = db.open_another().await;
    let late = match admit(&third, &request(&w, "c4", "fs__read", json!({"n": 1}))).await {
        CallAdmission::Started(record) => record,
        other => panic!("expected Started, got {other:?}"),
    };
    assert_eq!(late.arguments_digest, here.arguments_digest);
    assert_eq!(deployment_secrets(&db), secrets);
    let debug = format!("{store:?} {replica:?}");
    assert!(!debug.contains(&hex(secret)), "{debug}");
    assert!(!debug.contains(&format!("{secret:?}")), "{debug}");
}
