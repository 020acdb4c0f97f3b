//! The audit log's sign-in entries and its one listing of every kind (issue 50) on both
//! backends: each sign-in step and each forgetting appends its entry in the transaction of
//! the change (a change refused or rolled back leaves none); an entry says who asked and
//! holds no token, code or state; entries outlive the agent and are pruned by age; the
//! listing merges every kind newest first, filters, and pages without repeats or gaps,
//! ties included.

use chrono::{DateTime, Utc};
use ctxsync_persistence::test_support::TestStore;
use ctxsync_persistence::{
    AgentId, AuditEntry, AuditKind, AuditLogQuery, AuditQuery, AuditVia, CallbackOutcome, ChatId,
    DatabaseConfig, MAX_SIGN_INS_PER_WINDOW, NewSignIn, SignInAuditRecord, SignInAuditStatus,
    SignInId, SignInStage, StoreError,
};

use super::audit::{World, canceled, start as start_call, world};
use super::credentials::RawConn;
use super::sign_ins::{
    CLIENT_SECRET, ISSUER, PENDING, REFRESH, SERVER, code, credential, denied, keys, start,
};

ctxsync_test_support::on_both_backends! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    open = ctxsync_test_support::store;
    every_step_appends_its_entry_saying_who_asked,
    a_change_refused_or_rolled_back_leaves_no_entry,
    no_entry_holds_a_token_code_or_state,
    entries_outlive_the_agent_and_are_pruned_by_age,
    one_listing_merges_every_kind_newest_first,
}

const STATE: &str = "audit-state-canary-19c2";
const CODE: &str = "audit-code-canary-7d41";
const ACCESS: &str = "audit-access-canary-2b8e";
const BROWSER: &str = "audit-browser-canary-0a5f";
const AS_REFUSAL: &str = "the authorization server refused the sign-in: access_denied: \
                          The user declined the request.";
const REFUSED_REFRESH: &str = "the authorization server refused the refresh";

fn asked(agent: AgentId, via: &str, browser: Option<&str>) -> NewSignIn {
    NewSignIn {
        agent,
        server_name: SERVER.into(),
        via: via.into(),
        browser: browser.map(str::to_owned),
    }
}

/// A sign-in of `agent` asked for `via`, claimed and started with `state`.
async fn started(
    db: &TestStore,
    agent: AgentId,
    via: &str,
    browser: Option<&str>,
    state: &str,
) -> SignInId {
    let id = db
        .request_sign_in(&asked(agent, via, browser))
        .await
        .unwrap();
    assert!(
        db.claim_sign_in(id, "replica-a", &keys())
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        db.sign_in_started(id, &start(state), &keys())
            .await
            .unwrap()
    );
    id
}

/// As [`started`], and the browser back with a code: the sign-in is `exchanging`.
async fn exchanging(db: &TestStore, agent: AgentId, via: &str, state: &str) -> SignInId {
    let id = started(db, agent, via, Some(BROWSER), state).await;
    let outcome = db
        .sign_in_callback(state, Some(BROWSER), code(CODE), &keys())
        .await
        .unwrap();
    assert!(
        matches!(outcome, CallbackOutcome::Accepted(_)),
        "{outcome:?}"
    );
    assert!(
        db.claim_sign_in(id, "replica-b", &keys())
            .await
            .unwrap()
            .is_some()
    );
    id
}

/// Every entry `query` lists, page after page.
async fn all_entries(db: &TestStore, mut query: AuditLogQuery) -> Vec<AuditEntry> {
    let mut entries = Vec::new();
    loop {
        let page = db.list_audit_log(&query).await.unwrap();
        entries.extend(page.entries);
        match page.next_cursor {
            Some(cursor) => query.filter.cursor = Some(cursor),
            None => return entries,
        }
    }
}

/// Every sign-in entry, newest first.
async fn sign_in_entries(db: &TestStore) -> Vec<SignInAuditRecord> {
    let query = AuditLogQuery {
        kind: Some(AuditKind::SignIn),
        ..AuditLogQuery::default()
    };
    all_entries(db, query)
        .await
        .into_iter()
        .map(|entry| match entry {
            AuditEntry::SignIn(record) => record,
            other => panic!("a sign-in entry was asked for, not {other:?}"),
        })
        .collect()
}

type Seen = (
    SignInAuditStatus,
    AuditVia,
    Option<SignInId>,
    Option<String>,
    Option<String>,
);

/// What each entry says, oldest first.
fn seen(entries: &[SignInAuditRecord]) -> Vec<Seen> {
    entries
        .iter()
        .rev()
        .map(|e| {
            (
                e.status,
                e.via,
                e.sign_in_id,
                e.issuer.clone(),
                e.reason.clone(),
            )
        })
        .collect()
}

async fn every_step_appends_its_entry_saying_who_asked(db: TestStore) {
    use SignInAuditStatus::{Completed, Failed, Forgotten, Started};
    let agent = db.create_agent("laptop").await.unwrap().id;
    let chat = db.create_chat(Some(agent)).await.unwrap().id;
    let page = format!("chat:{chat}");
    let keys = keys();

    let done = exchanging(&db, agent, "api_token", STATE).await;
    let saved = credential(SERVER, ISSUER, ACCESS);
    assert!(db.sign_in_completed(done, &saved, &keys).await.unwrap());
    let refused = started(&db, agent, &page, None, "state-refused").await;
    let outcome = db
        .sign_in_callback("state-refused", None, denied(), &keys)
        .await
        .unwrap();
    assert!(
        matches!(outcome, CallbackOutcome::Refused(_)),
        "{outcome:?}"
    );
    let unanswered = db
        .request_sign_in(&asked(agent, &page, None))
        .await
        .unwrap();
    let why = "the agent did not answer in time";
    assert!(db.sign_in_failed(unanswered, why).await.unwrap());
    // Nothing to forget: no entry; a `via` no one asks by is refused, and nothing goes.
    let none = db.forget_server_credentials(agent, "wiki", "api_token");
    assert_eq!(none.await.unwrap(), 0);
    for bad in ["page", "chat:42", ""] {
        let error = db
            .forget_server_credentials(agent, SERVER, bad)
            .await
            .unwrap_err();
        assert!(
            matches!(&error, StoreError::InvalidInput(m) if m.contains("via")),
            "{bad:?}: {error:?}"
        );
    }
    let forgot = db.forget_server_credentials(agent, SERVER, &page);
    assert_eq!(forgot.await.unwrap(), 1);
    // The agent lost a credential: its refresh was refused.
    db.save_credential(agent, &saved, &keys).await.unwrap();
    let lost = db.forget_server_credentials(agent, SERVER, "agent");
    assert_eq!(lost.await.unwrap(), 1);

    let entries = sign_in_entries(&db).await;
    let page = AuditVia::Page(chat);
    assert_eq!(
        seen(&entries),
        [
            (Started, AuditVia::ApiToken, Some(done), None, None),
            (
                Completed,
                AuditVia::ApiToken,
                Some(done),
                Some(ISSUER.into()),
                None
            ),
            (Started, page, Some(refused), None, None),
            (Failed, page, Some(refused), None, Some(AS_REFUSAL.into())),
            (Started, page, Some(unanswered), None, None),
            (Failed, page, Some(unanswered), None, Some(why.into())),
            (Forgotten, page, None, None, None),
            (
                Forgotten,
                AuditVia::Agent,
                None,
                None,
                Some(REFUSED_REFRESH.into())
            ),
        ]
    );
    assert!(
        entries
            .iter()
            .all(|e| e.agent_id == agent && e.server == SERVER),
        "{entries:?}"
    );
    // A step that did not happen appends nothing.
    assert!(!db.sign_in_failed(done, "too late").await.unwrap());
    assert!(!db.sign_in_completed(done, &saved, &keys).await.unwrap());
    let replay = db.sign_in_callback("state-refused", None, denied(), &keys);
    assert_eq!(replay.await.unwrap(), CallbackOutcome::Used);
    assert_eq!(sign_in_entries(&db).await, entries);
}

/// Count of `table`'s rows (all of them are the test's).
fn count(raw: &mut RawConn, table: &str) -> usize {
    raw.texts(&format!(
        "SELECT CAST(COUNT(*) AS TEXT) AS text FROM {table}"
    ))[0]
        .parse()
        .unwrap()
}

async fn a_change_refused_or_rolled_back_leaves_no_entry(db: TestStore) {
    let keys = keys();
    let mut raw = RawConn::open(&db);
    // Refused before anything is stored.
    let unknown = db
        .request_sign_in(&asked(AgentId::new_random(), "api_token", None))
        .await
        .unwrap_err();
    assert!(
        matches!(unknown, StoreError::AgentNotFound(_)),
        "{unknown:?}"
    );
    let busy = db.create_agent("busy").await.unwrap().id;
    for _ in 0..MAX_SIGN_INS_PER_WINDOW {
        db.request_sign_in(&asked(busy, "api_token", None))
            .await
            .unwrap();
    }
    let limited = db.request_sign_in(&asked(busy, "api_token", None)).await;
    assert!(
        matches!(limited, Err(StoreError::LimitReached(_))),
        "{limited:?}"
    );
    assert_eq!(
        count(&mut raw, "sign_in_audit"),
        MAX_SIGN_INS_PER_WINDOW as usize
    );

    // A completion refused inside its transaction rolls its entry back with it.
    let agent = db.create_agent("laptop").await.unwrap().id;
    let id = exchanging(&db, agent, "api_token", STATE).await;
    let waiting = started(&db, agent, "api_token", None, "state-waiting").await;
    let saved = credential(SERVER, ISSUER, ACCESS);
    let kept = db.create_agent("kept").await.unwrap().id;
    db.save_credential(kept, &saved, &keys).await.unwrap();
    let before = count(&mut raw, "sign_in_audit");
    let other = credential("wiki", ISSUER, ACCESS);
    let error = db.sign_in_completed(id, &other, &keys).await.unwrap_err();
    assert!(matches!(error, StoreError::InvalidInput(_)), "{error:?}");
    assert_eq!(count(&mut raw, "sign_in_audit"), before);

    // With the log unwritable, no change is stored without its entry.
    let sign_ins = count(&mut raw, "mcp_sign_ins");
    raw.execute("ALTER TABLE sign_in_audit RENAME TO sign_in_audit_away");
    let asked_for = db.request_sign_in(&asked(agent, "api_token", None)).await;
    assert!(asked_for.is_err(), "{asked_for:?}");
    assert_eq!(count(&mut raw, "mcp_sign_ins"), sign_ins);
    assert!(db.sign_in_failed(waiting, "no").await.is_err());
    assert!(db.sign_in_completed(id, &saved, &keys).await.is_err());
    let refusal = db.sign_in_callback("state-waiting", None, denied(), &keys);
    assert!(refusal.await.is_err());
    let forgot = db.forget_server_credentials(kept, SERVER, "api_token");
    assert!(forgot.await.is_err());
    raw.execute("ALTER TABLE sign_in_audit_away RENAME TO sign_in_audit");
    assert_eq!(
        db.sign_in_status(waiting).await.unwrap().unwrap().stage,
        SignInStage::Started
    );
    assert_eq!(
        db.sign_in_status(id).await.unwrap().unwrap().stage,
        SignInStage::Exchanging
    );
    assert!(db.agent_credentials(agent, &keys).await.unwrap().is_empty());
    assert_eq!(
        db.agent_credentials(kept, &keys).await.unwrap(),
        vec![saved.clone()]
    );
    assert_eq!(count(&mut raw, "sign_in_audit"), before);

    // The same changes, the log writable again: each stored with its entry.
    assert!(db.sign_in_completed(id, &saved, &keys).await.unwrap());
    assert!(db.sign_in_failed(waiting, "no").await.unwrap());
    let forgot = db.forget_server_credentials(kept, SERVER, "api_token");
    assert_eq!(forgot.await.unwrap(), 1);
    assert_eq!(count(&mut raw, "sign_in_audit"), before + 3);
}

async fn no_entry_holds_a_token_code_or_state(db: TestStore) {
    let agent = db.create_agent("laptop").await.unwrap().id;
    let chat = db.create_chat(Some(agent)).await.unwrap().id;
    let id = exchanging(&db, agent, &format!("chat:{chat}"), STATE).await;
    let saved = credential(SERVER, ISSUER, ACCESS);
    assert!(db.sign_in_completed(id, &saved, &keys()).await.unwrap());
    db.forget_server_credentials(agent, SERVER, "api_token")
        .await
        .unwrap();

    let entries = sign_in_entries(&db).await;
    assert_eq!(entries.len(), 3, "{entries:?}");
    let shown = format!("{entries:?}");
    let mut raw = RawConn::open(&db);
    let columns = "id, agent_id, sign_in_id, server, status, via, chat_id, issuer, reason, \
                   recorded_at";
    let mut stored = String::new();
    for column in columns.split(", ") {
        let sql = format!(
            "SELECT CAST({column} AS TEXT) AS text FROM sign_in_audit WHERE {column} IS NOT NULL"
        );
        stored.push_str(&raw.texts(&sql).join("\n"));
    }
    let state_hash = super::sign_ins::sha256_hex(STATE);
    for secret in [
        STATE,
        CODE,
        PENDING,
        ACCESS,
        REFRESH,
        CLIENT_SECRET,
        BROWSER,
        &state_hash,
    ] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
        assert!(!stored.contains(secret), "{secret} in {stored}");
    }
    // What an entry does say is there, so the scans saw the entries.
    for said in [SERVER, ISSUER, &chat.to_string(), &id.to_string()] {
        assert!(shown.contains(said), "{said} not in {shown}");
        assert!(stored.contains(said), "{said} not in {stored}");
    }
}

/// `at` as either backend stores a timestamp written as text.
fn stored_time(db: &TestStore, at: DateTime<Utc>) -> String {
    match db.config() {
        DatabaseConfig::Postgres { .. } => at.to_rfc3339(),
        DatabaseConfig::Sqlite { .. } => at.format("%F %T%.f%:z").to_string(),
    }
}

/// Moves every entry of both kinds to `at`, or those `filter` (an SQL condition on
/// `agent_id`) picks.
fn move_entries(db: &TestStore, raw: &mut RawConn, at: DateTime<Utc>, filter: &str) {
    let at = stored_time(db, at);
    raw.execute(&format!(
        "UPDATE tool_call_audit SET ended_at = '{at}' WHERE {filter}; \
         UPDATE sign_in_audit SET recorded_at = '{at}' WHERE {filter};"
    ));
}

async fn entries_outlive_the_agent_and_are_pruned_by_age(db: TestStore) {
    let w = world(&db).await;
    let call = start_call(&db, &w, "c1").await;
    db.end_tool_call(call.id, &canceled(), None).await.unwrap();
    let id = exchanging(&db, w.agent, &format!("chat:{}", w.chat), STATE).await;
    let saved = credential(SERVER, ISSUER, ACCESS);
    assert!(db.sign_in_completed(id, &saved, &keys()).await.unwrap());
    let survivor = db.create_agent("survivor").await.unwrap().id;
    db.request_sign_in(&asked(survivor, "api_token", None))
        .await
        .unwrap();

    // Deleting the agent deletes its sign-ins and credentials, not its entries.
    let before = sign_in_entries(&db).await;
    assert_eq!(before.len(), 3, "{before:?}");
    db.delete_agent(w.agent).await.unwrap();
    assert_eq!(db.sign_in_status(id).await.unwrap(), None);
    assert_eq!(sign_in_entries(&db).await, before);
    let of_agent = AuditLogQuery {
        filter: AuditQuery {
            agent: Some(w.agent),
            ..AuditQuery::default()
        },
        ..AuditLogQuery::default()
    };
    assert_eq!(
        all_entries(&db, of_agent).await.len(),
        3,
        "the call's and two sign-in's"
    );

    // Pruning takes every kind past the cutoff, and nothing newer.
    let mut raw = RawConn::open(&db);
    let now = Utc::now();
    let filter = format!("agent_id = '{}'", w.agent);
    move_entries(&db, &mut raw, now - chrono::Duration::days(40), &filter);
    let cutoff = now - chrono::Duration::days(30);
    assert_eq!(db.prune_tool_call_audit(cutoff).await.unwrap(), 3);
    let left = all_entries(&db, AuditLogQuery::default()).await;
    assert_eq!(left, vec![AuditEntry::SignIn(before[0].clone())]);
    assert_eq!(before[0].agent_id, survivor);
    assert_eq!(db.prune_tool_call_audit(cutoff).await.unwrap(), 0);
}

/// An entry's place in the log's order.
fn position(entry: &AuditEntry) -> (DateTime<Utc>, uuid::Uuid) {
    match entry {
        AuditEntry::ToolCall(r) => (r.ended_at, r.tool_call_id.as_uuid()),
        AuditEntry::SignIn(r) => (r.at, r.id.as_uuid()),
    }
}

fn chat_of(entry: &AuditEntry) -> Option<ChatId> {
    match entry {
        AuditEntry::ToolCall(r) => Some(r.chat_id),
        AuditEntry::SignIn(r) => match r.via {
            AuditVia::Page(chat) => Some(chat),
            AuditVia::ApiToken | AuditVia::Agent => None,
        },
    }
}

/// Calls of `w` ended and sign-ins of its agent, interleaved: via its chat's page on even
/// rounds, the API token on odd ones. Answers each entry's kind, in order.
async fn interleaved(db: &TestStore, w: &World, rounds: usize) -> Vec<AuditKind> {
    let mut kinds = Vec::new();
    for round in 0..rounds {
        let call = start_call(db, w, &format!("c{round}")).await;
        db.end_tool_call(call.id, &canceled(), None).await.unwrap();
        let via = if round % 2 == 0 {
            format!("chat:{}", w.chat)
        } else {
            "api_token".to_owned()
        };
        let id = db
            .request_sign_in(&asked(w.agent, &via, None))
            .await
            .unwrap();
        db.sign_in_failed(id, "the agent did not answer in time")
            .await
            .unwrap();
        kinds.extend([AuditKind::ToolCall, AuditKind::SignIn, AuditKind::SignIn]);
    }
    kinds
}

async fn one_listing_merges_every_kind_newest_first(db: TestStore) {
    let (first, second) = (world(&db).await, world(&db).await);
    let mut kinds = interleaved(&db, &first, 3).await;
    kinds.extend(interleaved(&db, &second, 2).await);
    let everything = all_entries(&db, AuditLogQuery::default()).await;
    let listed: Vec<AuditKind> = everything.iter().rev().map(AuditEntry::kind).collect();
    assert_eq!(listed, kinds);
    for pair in everything.windows(2) {
        assert!(position(&pair[0]) > position(&pair[1]), "{pair:?}");
    }
    let with_limit = |limit, query: AuditLogQuery| AuditLogQuery {
        filter: AuditQuery {
            limit: Some(limit),
            ..query.filter
        },
        ..query
    };
    for limit in [1, 2, 4, 15] {
        let paged = all_entries(&db, with_limit(limit, AuditLogQuery::default())).await;
        assert_eq!(paged, everything, "limit {limit}");
    }
    let page = db
        .list_audit_log(&with_limit(15, AuditLogQuery::default()))
        .await
        .unwrap();
    assert_eq!((page.entries.len(), page.next_cursor), (15, None));

    // Filters: a kind, an agent, a chat (its calls, and sign-ins its page asked for).
    for kind in AuditKind::ALL {
        let only = AuditLogQuery {
            kind: Some(kind),
            ..with_limit(2, AuditLogQuery::default())
        };
        let expected: Vec<_> = everything
            .iter()
            .filter(|e| e.kind() == kind)
            .cloned()
            .collect();
        assert_eq!(all_entries(&db, only).await, expected, "{kind:?}");
    }
    let of_agent = AuditLogQuery {
        filter: AuditQuery {
            agent: Some(second.agent),
            limit: Some(2),
            ..AuditQuery::default()
        },
        ..AuditLogQuery::default()
    };
    assert_eq!(all_entries(&db, of_agent).await, everything[..6]);
    let of_chat = AuditLogQuery {
        filter: AuditQuery {
            chat: Some(first.chat),
            ..AuditQuery::default()
        },
        ..AuditLogQuery::default()
    };
    let expected: Vec<_> = everything
        .iter()
        .filter(|e| chat_of(e) == Some(first.chat))
        .cloned()
        .collect();
    assert_eq!(
        expected.len(),
        3 + 2 * 2,
        "three calls, two page sign-ins' two entries"
    );
    assert_eq!(all_entries(&db, of_chat).await, expected);

    // Since, inclusive: the first agent's entries moved to the past.
    let mut raw = RawConn::open(&db);
    let old = DateTime::from_timestamp(1_000_000_000, 0).unwrap();
    let filter = format!("agent_id = '{}'", first.agent);
    move_entries(&db, &mut raw, old, &filter);
    let since = |at| AuditLogQuery {
        filter: AuditQuery {
            since: Some(at),
            ..AuditQuery::default()
        },
        ..AuditLogQuery::default()
    };
    let after = all_entries(&db, since(old + chrono::Duration::microseconds(1))).await;
    assert_eq!(after, everything[..6]);
    assert_eq!(all_entries(&db, since(old)).await.len(), 15);

    // Entries of both kinds at one instant page by id, with nothing lost or repeated.
    move_entries(&db, &mut raw, old, "1 = 1");
    let tied = all_entries(&db, AuditLogQuery::default()).await;
    let mut ids: Vec<uuid::Uuid> = everything.iter().map(|e| position(e).1).collect();
    ids.sort();
    ids.reverse();
    assert_eq!(tied.iter().map(|e| position(e).1).collect::<Vec<_>>(), ids);
    for limit in [1, 4] {
        let paged = all_entries(&db, with_limit(limit, AuditLogQuery::default())).await;
        assert_eq!(paged, tied, "limit {limit}");
    }

    for bad in [0, ctxsync_persistence::MAX_AUDIT_PAGE + 1] {
        let error = db
            .list_audit_log(&with_limit(bad, AuditLogQuery::default()))
            .await
            .unwrap_err();
        assert!(
            matches!(&error, StoreError::InvalidInput(m) if m.starts_with("limit:")),
            "{error:?}"
        );
    }
}
