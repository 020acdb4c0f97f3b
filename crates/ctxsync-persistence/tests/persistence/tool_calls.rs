//! Tool calls in the store, on both backends: admitted against the turn's recorded
//! origin (never the current snapshot), at most once per call id, bounded per turn; the
//! first end wins, a retryable refusal is kept until a retry replaces it, arguments go
//! once delivered, and calls go with their turn (a running one cancelled first).

use std::collections::BTreeMap;

use ctxsync_mcp_model::{CallEnd, CallProgress, CallReason, CallStatus};
use ctxsync_persistence::test_support::TestStore;
use ctxsync_persistence::{
    AgentId, CTXSYNC_SERVER, CallAdmission, ChatId, ChatTurnMode, FIND_TOOLS_NAME,
    MAX_CALLS_PER_TURN, MAX_RECENT_CHAT_CALLS, MAX_TURNS_PER_CHAT, NewToolCall, NewTurn, Store,
    StoreError, ToolCallRecord, ToolOrigin, TurnId, TurnOrigin,
};
use ctxsync_protocol::{RunId, Startup};
use serde_json::json;

ctxsync_test_support::on_both_backends! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    open = ctxsync_test_support::store;
    a_call_starts_once_and_a_repeat_answers_the_recorded_call,
    a_turn_holds_at_most_its_limit_of_calls,
    a_name_the_turn_does_not_carry_is_refused_and_recorded,
    a_restarted_agent_refuses_the_old_turns_calls,
    an_agent_that_never_declared_calls_is_unsupported,
    activated_tools_resolve_to_their_recorded_origin,
    find_tools_is_answered_by_the_server,
    turn_origins_are_stored_and_read_back,
    the_first_end_wins_and_progress_is_kept_while_running,
    a_retryable_refusal_is_kept_and_a_retry_replaces_it,
    running_calls_of_an_agent_end_together,
    calls_go_with_their_turn_and_running_ones_are_cancelled_first,
    concurrent_duplicates_start_one_call,
    a_chats_recent_calls_come_newest_first_and_bounded,
}

const RUN: &str = "run-1";

/// An agent whose process `RUN` declared calls (or not), a chat bound to it, and a turn
/// whose tools came from that run: `fs__read` is `read` on server `fs`.
struct World {
    agent: AgentId,
    chat: ChatId,
    turn: TurnId,
}

async fn world(store: &Store, accepts_tool_calls: bool) -> World {
    let agent = store.create_agent("laptop").await.unwrap().id;
    declare(store, agent, RUN, accepts_tool_calls).await;
    let chat = store.create_chat(Some(agent)).await.unwrap().id;
    let turn = new_turn(store, chat, Some(origin(agent, RUN))).await;
    World { agent, chat, turn }
}

async fn declare(store: &Store, agent: AgentId, run: &str, accepts_tool_calls: bool) {
    let startup = Startup {
        agent_run_id: RunId::new(run),
        accepts_tool_calls,
        ..Startup::default()
    };
    store.update_startup(agent, startup).await.unwrap();
}

fn origin(agent: AgentId, run: &str) -> TurnOrigin {
    let tools = BTreeMap::from([(
        "fs__read".to_owned(),
        ToolOrigin {
            server: "fs".into(),
            tool: "read".into(),
        },
    )]);
    TurnOrigin {
        agent_id: agent,
        agent_run_id: RunId::new(run).unwrap(),
        tools,
    }
}

async fn new_turn(store: &Store, chat: ChatId, origin: Option<TurnOrigin>) -> TurnId {
    let turn = NewTurn {
        mode: ChatTurnMode::Default,
        outcome: json!({}),
        tools: json!([{ "name": "fs__read" }]),
        origin,
    };
    store.record_turn(chat, &turn).await.unwrap().id
}

fn request(world: &World, call_id: &str, name: &str, arguments: serde_json::Value) -> NewToolCall {
    NewToolCall {
        chat: world.chat,
        turn: world.turn,
        call_id: call_id.into(),
        name: name.into(),
        // What the caller does: `CallArguments::new`.
        arguments: ctxsync_protocol::tool_call::CallArguments::new(&arguments)
            .unwrap()
            .into_string(),
        timeout_ms: 60_000,
    }
}

async fn admit(store: &Store, call: &NewToolCall) -> CallAdmission {
    store
        .admit_tool_call(call)
        .await
        .unwrap()
        .expect("the turn is the chat's")
}

fn started(admission: CallAdmission) -> ToolCallRecord {
    match admission {
        CallAdmission::Started(record) => record,
        other => panic!("expected Started, got {other:?}"),
    }
}

fn refused(admission: CallAdmission, reason: CallReason) -> ToolCallRecord {
    match admission {
        CallAdmission::Refused(record) => {
            assert_eq!(record.status, CallStatus::Refused);
            assert_eq!(record.reason, Some(reason));
            assert!(record.ended_at.is_some());
            assert_eq!(record.duration_ms, Some(0));
            assert_eq!(record.arguments, None, "an ended call keeps no arguments");
            record
        }
        other => panic!("expected Refused({reason:?}), got {other:?}"),
    }
}

fn canceled() -> CallEnd {
    CallEnd {
        status: CallStatus::Canceled,
        reason: None,
        error: None,
        result: None,
        truncated: false,
    }
}

async fn a_call_starts_once_and_a_repeat_answers_the_recorded_call(db: TestStore) {
    let store = db.store();
    let w = world(store, true).await;
    let first = started(
        admit(
            store,
            &request(&w, "c1", "fs__read", json!({"path": "/a", "n": 1})),
        )
        .await,
    );
    assert_eq!((first.server.as_str(), first.tool.as_str()), ("fs", "read"));
    assert_eq!(first.status, CallStatus::Running);
    assert_eq!(first.agent_id, Some(w.agent));
    assert_eq!(first.agent_run_id, RunId::new(RUN));
    assert_eq!(first.arguments.as_deref(), Some(r#"{"n":1,"path":"/a"}"#));
    assert_eq!(first.arguments_size, 19);
    assert_eq!(first.arguments_digest.len(), 64);
    assert!(!first.delivered);

    // Other key order and whitespace canonicalize to the same text: the same call.
    let same: serde_json::Value = serde_json::from_str(r#"{ "path" : "/a" ,  "n":1 }"#).unwrap();
    match admit(store, &request(&w, "c1", "fs__read", same)).await {
        CallAdmission::Existing(record) => assert_eq!(record, first),
        other => panic!("expected Existing, got {other:?}"),
    }
    for other in [
        request(&w, "c1", "fs__write", json!({"path": "/a", "n": 1})),
        request(&w, "c1", "fs__read", json!({"path": "/b", "n": 1})),
    ] {
        match admit(store, &other).await {
            CallAdmission::Conflict(record) => assert_eq!(record.id, first.id),
            unexpected => panic!("expected Conflict, got {unexpected:?}"),
        }
    }
    // Read back by call id and by the server's id; another chat sees nothing.
    let read = store.get_tool_call(w.chat, w.turn, "c1").await.unwrap();
    assert_eq!(read.as_ref(), Some(&first));
    assert_eq!(
        store.get_tool_call_by_id(first.id).await.unwrap(),
        Some(first.clone())
    );
    let other_chat = store.create_chat(None).await.unwrap().id;
    assert_eq!(
        store.get_tool_call(other_chat, w.turn, "c1").await.unwrap(),
        None
    );
    let mut foreign = request(&w, "c2", "fs__read", json!({}));
    foreign.chat = other_chat;
    assert_eq!(store.admit_tool_call(&foreign).await.unwrap(), None);

    // Debug never prints the arguments.
    let debug = format!(
        "{first:?} {:?}",
        request(&w, "c1", "fs__read", json!({"secret": "hunter2"}))
    );
    assert!(
        !debug.contains("hunter2") && !debug.contains("/a"),
        "{debug}"
    );
    assert!(debug.contains("<19 bytes>"), "{debug}");

    // Bounds the database would refuse are refused before it.
    for bad in [
        request(&w, "", "fs__read", json!({})),
        request(&w, &"x".repeat(129), "fs__read", json!({})),
    ] {
        assert!(matches!(
            store.admit_tool_call(&bad).await,
            Err(StoreError::InvalidInput(_))
        ));
    }
}

async fn a_turn_holds_at_most_its_limit_of_calls(db: TestStore) {
    let store = db.store();
    let w = world(store, true).await;
    for i in 0..MAX_CALLS_PER_TURN {
        started(admit(store, &request(&w, &format!("c{i}"), "fs__read", json!({}))).await);
    }
    let error = store
        .admit_tool_call(&request(&w, "one-more", "fs__read", json!({})))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, StoreError::LimitReached(m) if m.contains(&MAX_CALLS_PER_TURN.to_string())),
        "{error:?}"
    );
    // A repeat of a stored call still answers it.
    assert!(matches!(
        admit(store, &request(&w, "c0", "fs__read", json!({}))).await,
        CallAdmission::Existing(_)
    ));
}

async fn a_name_the_turn_does_not_carry_is_refused_and_recorded(db: TestStore) {
    let store = db.store();
    let w = world(store, true).await;
    let refusal = refused(
        admit(store, &request(&w, "c1", "fs__delete", json!({}))).await,
        CallReason::NotInTurn,
    );
    assert_eq!((refusal.server.as_str(), refusal.tool.as_str()), ("", ""));
    match admit(store, &request(&w, "c1", "fs__delete", json!({}))).await {
        CallAdmission::Existing(record) => assert_eq!(record, refusal),
        other => panic!("expected Existing, got {other:?}"),
    }
}

async fn a_restarted_agent_refuses_the_old_turns_calls(db: TestStore) {
    let store = db.store();
    let w = world(store, true).await;
    ctxsync_test_support::start_run(store, w.agent, "run-2", "2.0.0").await;
    let refusal = refused(
        admit(store, &request(&w, "c1", "fs__read", json!({}))).await,
        CallReason::StaleRun,
    );
    assert_eq!(
        (refusal.server.as_str(), refusal.tool.as_str()),
        ("fs", "read")
    );

    // A turn without a recorded origin reaches nothing either, nor does a deleted agent.
    let bare = World {
        turn: new_turn(store, w.chat, None).await,
        ..w
    };
    refused(
        admit(store, &request(&bare, "c1", "fs__read", json!({}))).await,
        CallReason::NotInTurn,
    );
    let World { chat, agent, .. } = w;
    let turn = new_turn(store, chat, Some(origin(agent, "run-2"))).await;
    store.delete_agent(agent).await.unwrap();
    let gone = World { agent, chat, turn };
    refused(
        admit(store, &request(&gone, "c1", "fs__read", json!({}))).await,
        CallReason::StaleRun,
    );
}

async fn an_agent_that_never_declared_calls_is_unsupported(db: TestStore) {
    let store = db.store();
    let w = world(store, false).await;
    refused(
        admit(store, &request(&w, "c1", "fs__read", json!({}))).await,
        CallReason::AgentUnsupported,
    );
    assert!(
        !store
            .get_agent(w.agent)
            .await
            .unwrap()
            .unwrap()
            .accepts_tool_calls
    );
    // Each startup overwrites the flag.
    declare(store, w.agent, RUN, true).await;
    assert!(
        store
            .get_agent(w.agent)
            .await
            .unwrap()
            .unwrap()
            .accepts_tool_calls
    );
    started(admit(store, &request(&w, "c2", "fs__read", json!({}))).await);
}

async fn activated_tools_resolve_to_their_recorded_origin(db: TestStore) {
    let store = db.store();
    let w = world(store, true).await;
    let docs = ToolOrigin {
        server: "docs".into(),
        tool: "search".into(),
    };
    let activated = vec![
        ("docs__search".to_owned(), Some(docs)),
        ("docs__stale".to_owned(), None),
    ];
    assert!(
        store
            .activate_tools(w.chat, w.turn, activated)
            .await
            .unwrap()
    );
    let call = started(admit(store, &request(&w, "c1", "docs__search", json!({"q": "x"}))).await);
    assert_eq!(
        (call.server.as_str(), call.tool.as_str()),
        ("docs", "search")
    );
    // Activated without an origin (the turn's run was no longer current): refused.
    refused(
        admit(store, &request(&w, "c2", "docs__stale", json!({}))).await,
        CallReason::NotInTurn,
    );
}

async fn find_tools_is_answered_by_the_server(db: TestStore) {
    let store = db.store();
    // Even for an agent that takes no calls: the server answers find_tools itself.
    let w = world(store, false).await;
    let call = started(
        admit(
            store,
            &request(&w, "f1", FIND_TOOLS_NAME, json!({"query": "pdf"})),
        )
        .await,
    );
    assert_eq!(
        (call.server.as_str(), call.tool.as_str()),
        (CTXSYNC_SERVER, FIND_TOOLS_NAME)
    );
    assert_eq!(call.agent_id, None, "no agent holds a find_tools call");
    assert!(store.running_tool_calls(w.agent).await.unwrap().is_empty());
    let result = json!({"content": [], "structuredContent": {"tools": []}});
    let ended = store
        .end_tool_call(call.id, &CallEnd::complete(result.clone(), false), Some(3))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (ended.status, ended.result, ended.duration_ms),
        (CallStatus::Complete, Some(result), Some(3))
    );
}

async fn turn_origins_are_stored_and_read_back(db: TestStore) {
    let store = db.store();
    let w = world(store, true).await;
    let read = store.get_turn(w.chat, w.turn).await.unwrap().unwrap();
    assert_eq!(read.origin, Some(origin(w.agent, RUN)));
    assert!(read.canceled_calls.is_empty());
    let bare = new_turn(store, w.chat, None).await;
    assert_eq!(
        store.get_turn(w.chat, bare).await.unwrap().unwrap().origin,
        None
    );
}

async fn the_first_end_wins_and_progress_is_kept_while_running(db: TestStore) {
    let store = db.store();
    let w = world(store, true).await;
    let call = started(admit(store, &request(&w, "c1", "fs__read", json!({}))).await);
    let progress = CallProgress {
        progress: 2.0,
        total: Some(4.0),
        message: Some("half".into()),
    };
    store
        .record_tool_call_progress(call.id, &progress)
        .await
        .unwrap();
    let result =
        json!({"content": [{"type": "text", "text": "ok \u{0000} nul"}], "isError": false});
    let ended = store
        .end_tool_call(call.id, &CallEnd::complete(result.clone(), true), Some(42))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ended.status, CallStatus::Complete);
    assert_eq!(ended.result, Some(result));
    assert!(ended.truncated);
    assert_eq!(ended.duration_ms, Some(42));
    assert_eq!(ended.progress, Some(progress.clone()));
    assert_eq!(ended.arguments, None, "ending drops the arguments");
    assert!(ended.ended_at.is_some());

    // A later end and later progress change nothing.
    let again = store
        .end_tool_call(call.id, &CallEnd::error(-32000, "late"), None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again, ended);
    let later = CallProgress {
        progress: 3.0,
        total: None,
        message: None,
    };
    store
        .record_tool_call_progress(call.id, &later)
        .await
        .unwrap();
    assert_eq!(
        store.get_tool_call_by_id(call.id).await.unwrap().unwrap(),
        ended
    );

    // An error end, its duration measured by the store.
    let failing = started(admit(store, &call_of(&w, "c2")).await);
    let errored = store
        .end_tool_call(failing.id, &CallEnd::error(-32602, "bad input"), None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        errored.error.as_ref().map(|e| (e.code, e.message.as_str())),
        Some((-32602, "bad input"))
    );
    assert!(errored.duration_ms.is_some());
    assert_eq!(
        store.get_tool_call_by_id(failing.id).await.unwrap(),
        Some(errored)
    );

    assert!(
        store
            .end_tool_call(
                call.id,
                &CallEnd {
                    status: CallStatus::Running,
                    ..canceled()
                },
                None
            )
            .await
            .is_err()
    );
    assert_eq!(
        store
            .end_tool_call(
                ctxsync_protocol::tool_call::ToolCallId::new_random(),
                &canceled(),
                None
            )
            .await
            .unwrap(),
        None
    );
}

fn call_of(w: &World, call_id: &str) -> NewToolCall {
    request(w, call_id, "fs__read", json!({}))
}

async fn a_retryable_refusal_is_kept_and_a_retry_replaces_it(db: TestStore) {
    let store = db.store();
    let w = world(store, true).await;
    let call = started(admit(store, &call_of(&w, "c1")).await);
    let busy = CallEnd::with_reason(CallStatus::Refused, CallReason::Busy);
    let answer = store
        .end_tool_call(call.id, &busy, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (answer.status, answer.reason),
        (CallStatus::Refused, Some(CallReason::Busy))
    );
    // Every replica reads the same answer.
    let kept = store.get_tool_call_by_id(call.id).await.unwrap().unwrap();
    assert_eq!(kept.reason, Some(CallReason::Busy));
    // A retry with the same call id runs, as a new call.
    let retry = started(admit(store, &call_of(&w, "c1")).await);
    assert_ne!(retry.id, call.id);
    assert_eq!(store.get_tool_call_by_id(call.id).await.unwrap(), None);
    // Once ended otherwise, a retryable refusal does not replace the end.
    store
        .end_tool_call(retry.id, &canceled(), None)
        .await
        .unwrap();
    let unreachable = CallEnd::with_reason(CallStatus::Refused, CallReason::AgentUnreachable);
    let kept = store
        .end_tool_call(retry.id, &unreachable, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(kept.status, CallStatus::Canceled);
    assert!(store.get_tool_call_by_id(retry.id).await.unwrap().is_some());
}

async fn running_calls_of_an_agent_end_together(db: TestStore) {
    let store = db.store();
    let w = world(store, true).await;
    let first = started(admit(store, &call_of(&w, "c1")).await);
    let second = started(admit(store, &call_of(&w, "c2")).await);
    let done = started(admit(store, &call_of(&w, "c3")).await);
    store
        .end_tool_call(done.id, &canceled(), None)
        .await
        .unwrap();
    let running = store.running_tool_calls(w.agent).await.unwrap();
    assert_eq!(
        running.iter().map(|c| c.id).collect::<Vec<_>>(),
        vec![first.id, second.id]
    );

    // The current run is kept.
    let kept = RunId::new(RUN).unwrap();
    let lost = CallEnd::with_reason(CallStatus::Unknown, CallReason::StreamLost);
    assert!(
        store
            .end_running_tool_calls(w.agent, Some(&kept), &lost)
            .await
            .unwrap()
            .is_empty()
    );
    // Another run's calls end.
    let restarted = CallEnd::with_reason(CallStatus::Unknown, CallReason::AgentRestarted);
    let other = RunId::new("run-2").unwrap();
    let ended = store
        .end_running_tool_calls(w.agent, Some(&other), &restarted)
        .await
        .unwrap();
    assert_eq!(
        ended.iter().map(|c| c.id).collect::<Vec<_>>(),
        vec![first.id, second.id]
    );
    for call in &ended {
        assert_eq!(
            (call.status, call.reason),
            (CallStatus::Unknown, Some(CallReason::AgentRestarted))
        );
        assert_eq!(
            store.get_tool_call_by_id(call.id).await.unwrap().as_ref(),
            Some(call)
        );
    }
    assert!(store.running_tool_calls(w.agent).await.unwrap().is_empty());
    let third = started(admit(store, &call_of(&w, "c4")).await);
    let all = store
        .end_running_tool_calls(w.agent, None, &lost)
        .await
        .unwrap();
    assert_eq!(
        all.iter().map(|c| (c.id, c.reason)).collect::<Vec<_>>(),
        vec![(third.id, Some(CallReason::StreamLost))]
    );
}

async fn calls_go_with_their_turn_and_running_ones_are_cancelled_first(db: TestStore) {
    let store = db.store();
    let w = world(store, true).await;
    let running = started(admit(store, &call_of(&w, "c1")).await);
    let ended = started(admit(store, &call_of(&w, "c2")).await);
    store
        .end_tool_call(ended.id, &canceled(), None)
        .await
        .unwrap();
    // w.turn is the chat's first; the turn that pushes it past the limit prunes it.
    let turn = NewTurn {
        mode: ChatTurnMode::Default,
        outcome: json!({}),
        tools: json!([]),
        origin: Some(origin(w.agent, RUN)),
    };
    for _ in 1..MAX_TURNS_PER_CHAT {
        let kept = store.record_turn(w.chat, &turn).await.unwrap();
        assert!(kept.canceled_calls.is_empty());
    }
    let pruning = store.record_turn(w.chat, &turn).await.unwrap();
    assert_eq!(
        pruning.canceled_calls.len(),
        1,
        "{:?}",
        pruning.canceled_calls
    );
    let canceled_call = &pruning.canceled_calls[0];
    assert_eq!(
        (canceled_call.id, canceled_call.status),
        (running.id, CallStatus::Canceled)
    );
    assert_eq!(canceled_call.agent_id, Some(w.agent));
    // Both calls went with the turn.
    assert_eq!(store.get_turn(w.chat, w.turn).await.unwrap(), None);
    for id in [running.id, ended.id] {
        assert_eq!(store.get_tool_call_by_id(id).await.unwrap(), None);
    }
    assert!(store.running_tool_calls(w.agent).await.unwrap().is_empty());
}

async fn concurrent_duplicates_start_one_call(db: TestStore) {
    let store = db.store();
    let w = world(store, true).await;
    let call = request(&w, "dup", "fs__read", json!({"path": "/a"}));
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let (store, call) = (store.clone(), call.clone());
            tokio::spawn(async move { store.admit_tool_call(&call).await })
        })
        .collect();
    let mut started_ids = Vec::new();
    let mut existing_ids = Vec::new();
    for task in tasks {
        match task.await.unwrap().unwrap().unwrap() {
            CallAdmission::Started(r) => started_ids.push(r.id),
            CallAdmission::Existing(r) => existing_ids.push(r.id),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(started_ids.len(), 1, "exactly one starts");
    assert_eq!(existing_ids.len(), 9);
    assert!(existing_ids.iter().all(|id| *id == started_ids[0]));
}

/// The page's list: the chat's own calls only, newest first across turns, never more
/// than the cap whatever the caller asks.
async fn a_chats_recent_calls_come_newest_first_and_bounded(db: TestStore) {
    let store = db.store();
    let w = world(store, true).await;
    let other = world(store, true).await;
    started(admit(store, &call_of(&other, "elsewhere")).await);
    for n in 0..3 {
        started(admit(store, &call_of(&w, &format!("c{n}"))).await);
    }
    let later_turn = World {
        turn: new_turn(store, w.chat, Some(origin(w.agent, RUN))).await,
        ..w
    };
    refused(
        admit(store, &request(&later_turn, "last", "nope", json!({}))).await,
        CallReason::NotInTurn,
    );
    let ids = |calls: Vec<ToolCallRecord>| -> Vec<String> {
        calls.into_iter().map(|c| c.call_id).collect()
    };
    assert_eq!(
        ids(store.chat_tool_calls(w.chat, 10).await.unwrap()),
        ["last", "c2", "c1", "c0"]
    );
    assert_eq!(
        ids(store.chat_tool_calls(w.chat, 2).await.unwrap()),
        ["last", "c2"]
    );
    assert!(store.chat_tool_calls(w.chat, 0).await.unwrap().is_empty());
    for n in 0..MAX_RECENT_CHAT_CALLS {
        started(admit(store, &call_of(&later_turn, &format!("more{n}"))).await);
    }
    assert_eq!(
        store
            .chat_tool_calls(w.chat, usize::MAX)
            .await
            .unwrap()
            .len(),
        MAX_RECENT_CHAT_CALLS
    );
}
