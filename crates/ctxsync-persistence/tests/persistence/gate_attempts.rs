//! The first-turn gate's attempt log on both backends: a start, its end, a restart of
//! the same run, forgetting a pair's old runs, and rows that cannot exist (unknown chat
//! or agent) or go with their chat and agent.

use std::time::Duration;

use ctxsync_persistence::test_support::TestStore;
use ctxsync_persistence::{AgentId, ChatId, GateAttemptRecord, Store};
use ctxsync_protocol::RunId;

ctxsync_test_support::on_both_backends! {
    #[tokio::test]
    open = ctxsync_test_support::store;
    a_start_and_its_end_are_read_back_by_another_store,
    a_new_start_of_the_same_run_replaces_its_record,
    old_runs_of_the_pair_are_forgotten_on_a_start,
    unknown_chats_and_agents_have_no_attempts,
    attempts_go_with_their_chat_and_agent,
}

const LIMIT: Duration = Duration::from_secs(15);
const FORGET_AFTER: Duration = Duration::from_secs(600);

async fn chat_and_agent(store: &Store) -> (ChatId, AgentId) {
    let agent = store.create_agent("agent").await.expect("agent").id;
    let chat = store.create_chat(Some(agent)).await.expect("chat").id;
    (chat, agent)
}

async fn read(store: &Store, chat: ChatId, agent: AgentId, run: &str) -> Option<GateAttemptRecord> {
    store
        .read_gate_attempt(chat, agent, RunId::new(run).as_ref())
        .await
        .expect("read the attempt")
}

async fn a_start_and_its_end_are_read_back_by_another_store(db: TestStore) {
    let (chat, agent) = chat_and_agent(db.store()).await;
    let other = db.open_another().await;
    assert_eq!(read(&other, chat, agent, "run-1").await, None);

    let written = db
        .start_gate_attempt(
            chat,
            agent,
            RunId::new("run-1").as_ref(),
            LIMIT,
            FORGET_AFTER,
        )
        .await
        .expect("start");
    assert!(written);
    let started = read(&other, chat, agent, "run-1").await.expect("recorded");
    assert_eq!(
        (started.wait_limit, started.ended_at, started.timed_out),
        (LIMIT, None, false)
    );

    assert!(
        db.end_gate_attempt(chat, agent, RunId::new("run-1").as_ref(), true)
            .await
            .expect("end")
    );
    let ended = read(&other, chat, agent, "run-1").await.expect("recorded");
    assert_eq!(ended.started_at, started.started_at);
    assert!(ended.timed_out);
    assert!(ended.ended_at.is_some_and(|at| at >= started.started_at));
    // Other runs, chats and the legacy run id are other keys.
    assert_eq!(read(&other, chat, agent, "run-2").await, None);
    assert_eq!(read(&other, chat, agent, "").await, None);
}

async fn a_new_start_of_the_same_run_replaces_its_record(db: TestStore) {
    let (chat, agent) = chat_and_agent(db.store()).await;
    // An end without a start (a re-keyed wait) starts and ends at once.
    assert!(
        db.end_gate_attempt(chat, agent, None, true)
            .await
            .expect("end")
    );
    let ended = read(&db, chat, agent, "").await.expect("recorded");
    assert_eq!(ended.ended_at, Some(ended.started_at));
    assert_eq!(ended.wait_limit, Duration::ZERO);

    db.start_gate_attempt(chat, agent, None, LIMIT, FORGET_AFTER)
        .await
        .expect("start");
    let restarted = read(&db, chat, agent, "").await.expect("recorded");
    assert_eq!((restarted.ended_at, restarted.timed_out), (None, false));
    assert!(restarted.started_at >= ended.started_at);
    assert!(
        db.end_gate_attempt(chat, agent, None, false)
            .await
            .expect("end")
    );
    let completed = read(&db, chat, agent, "").await.expect("recorded");
    assert!(completed.ended_at.is_some() && !completed.timed_out);
}

async fn old_runs_of_the_pair_are_forgotten_on_a_start(db: TestStore) {
    let (chat, agent) = chat_and_agent(db.store()).await;
    let other_chat = db.create_chat(Some(agent)).await.expect("chat").id;
    for (chat, run) in [(chat, "run-1"), (other_chat, "run-1")] {
        db.start_gate_attempt(chat, agent, RunId::new(run).as_ref(), LIMIT, FORGET_AFTER)
            .await
            .expect("start");
        db.end_gate_attempt(chat, agent, RunId::new(run).as_ref(), true)
            .await
            .expect("end");
    }
    tokio::time::sleep(Duration::from_millis(20)).await;

    // Kept while younger than `forget_after`; forgotten once older, for this pair only.
    db.start_gate_attempt(
        chat,
        agent,
        RunId::new("run-2").as_ref(),
        LIMIT,
        FORGET_AFTER,
    )
    .await
    .expect("start");
    assert!(read(&db, chat, agent, "run-1").await.is_some());
    db.start_gate_attempt(
        chat,
        agent,
        RunId::new("run-3").as_ref(),
        LIMIT,
        Duration::from_millis(1),
    )
    .await
    .expect("start");
    assert_eq!(read(&db, chat, agent, "run-1").await, None);
    assert!(read(&db, chat, agent, "run-3").await.is_some());
    assert!(read(&db, other_chat, agent, "run-1").await.is_some());
}

async fn unknown_chats_and_agents_have_no_attempts(db: TestStore) {
    let (chat, agent) = chat_and_agent(db.store()).await;
    let (unknown_chat, unknown_agent) = (ChatId::new_random(), AgentId::new_random());
    for (chat, agent) in [(unknown_chat, agent), (chat, unknown_agent)] {
        let started = db
            .start_gate_attempt(
                chat,
                agent,
                RunId::new("run-1").as_ref(),
                LIMIT,
                FORGET_AFTER,
            )
            .await
            .expect("start");
        let ended = db
            .end_gate_attempt(chat, agent, RunId::new("run-1").as_ref(), true)
            .await
            .expect("end");
        assert_eq!((started, ended), (false, false));
        assert_eq!(read(&db, chat, agent, "run-1").await, None);
    }
}

async fn attempts_go_with_their_chat_and_agent(db: TestStore) {
    let (chat, agent) = chat_and_agent(db.store()).await;
    db.start_gate_attempt(
        chat,
        agent,
        RunId::new("run-1").as_ref(),
        LIMIT,
        FORGET_AFTER,
    )
    .await
    .expect("start");
    db.delete_agent(agent).await.expect("delete agent");
    assert_eq!(read(&db, chat, agent, "run-1").await, None);
}
