//! Chat turns and their find_tools activations, on both backends: stored as given, read
//! back by chat, numbered without clocks, bounded per chat.

use ctxsync_persistence::test_support::TestStore;
use ctxsync_persistence::{
    ChatId, ChatTurnMode, MAX_TURNS_PER_CHAT, NewTurn, StoreError, TurnActivations, TurnId,
};
use serde_json::json;

ctxsync_test_support::on_both_backends! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    open = ctxsync_test_support::store;
    turns_are_stored_as_answered_and_read_by_their_chat,
    activations_belong_to_one_turn,
    only_the_last_turns_of_a_chat_are_kept,
    concurrent_turns_of_one_chat_get_distinct_numbers,
}

fn turn(mode: ChatTurnMode, tool: &str) -> NewTurn {
    NewTurn {
        mode,
        outcome: json!({ "note": null, "mcp_discovery": { "phase": "complete", "servers_ok": 1 } }),
        tools: json!([{ "name": tool, "description": "A tool", "input_schema": { "type": "object" } }]),
        origin: None,
    }
}

async fn new_chat(db: &TestStore) -> ChatId {
    db.store().create_chat(None).await.expect("chat").id
}

async fn turns_are_stored_as_answered_and_read_by_their_chat(db: TestStore) {
    let store = db.store();
    let (chat, other) = (new_chat(&db).await, new_chat(&db).await);
    let first = store
        .record_turn(chat, &turn(ChatTurnMode::Default, "fs__read"))
        .await
        .unwrap();
    let second = store
        .record_turn(chat, &turn(ChatTurnMode::Plan, "fs__write"))
        .await
        .unwrap();
    assert_eq!((first.number, second.number), (1, 2));
    assert!(
        first.activated.is_empty(),
        "a new turn has nothing activated"
    );

    let read = store.get_turn(chat, first.id).await.unwrap().unwrap();
    assert_eq!(read.id, first.id);
    assert_eq!(read.chat_id, chat);
    assert_eq!(read.mode, ChatTurnMode::Default);
    assert_eq!(read.outcome, turn(ChatTurnMode::Default, "").outcome);
    assert_eq!(read.tools, turn(ChatTurnMode::Default, "fs__read").tools);
    assert_eq!(
        store.get_turn(chat, second.id).await.unwrap().unwrap().mode,
        ChatTurnMode::Plan
    );

    // Another chat's turn and an unknown turn read as absent.
    assert_eq!(store.get_turn(other, first.id).await.unwrap(), None);
    assert_eq!(
        store.get_turn(chat, TurnId::new_random()).await.unwrap(),
        None
    );
    // The other chat numbers its own turns.
    let theirs = store
        .record_turn(other, &turn(ChatTurnMode::Default, "x__y"))
        .await
        .unwrap();
    assert_eq!(theirs.number, 1);

    let unknown = ChatId::new_random();
    assert!(matches!(
        store
            .record_turn(unknown, &turn(ChatTurnMode::Default, "a__b"))
            .await,
        Err(StoreError::ChatNotFound(id)) if id == unknown
    ));
    for bad in [
        NewTurn {
            outcome: json!([]),
            ..turn(ChatTurnMode::Default, "a__b")
        },
        NewTurn {
            tools: json!({}),
            ..turn(ChatTurnMode::Default, "a__b")
        },
    ] {
        assert!(matches!(
            store.record_turn(chat, &bad).await,
            Err(StoreError::InvalidInput(_))
        ));
    }
}

async fn activations_belong_to_one_turn(db: TestStore) {
    let store = db.store();
    let (chat, other) = (new_chat(&db).await, new_chat(&db).await);
    let first = store
        .record_turn(chat, &turn(ChatTurnMode::Default, "t"))
        .await
        .unwrap();
    let names = |names: &[&str]| {
        names
            .iter()
            .map(|n| ((*n).to_owned(), None))
            .collect::<Vec<_>>()
    };
    assert!(
        store
            .activate_tools(chat, first.id, names(&["docs__search", "docs__read"]))
            .await
            .unwrap()
    );
    // Activating again keeps one row per name.
    assert!(
        store
            .activate_tools(chat, first.id, names(&["docs__read", "fs__list"]))
            .await
            .unwrap()
    );
    let expected: Vec<String> = ["docs__read", "docs__search", "fs__list"]
        .map(str::to_owned)
        .to_vec();
    assert_eq!(
        store.turn_activations(chat, None).await.unwrap(),
        Some(TurnActivations {
            turn_id: first.id,
            activated: expected.clone()
        }),
        "without a turn id: the latest turn"
    );

    // A new turn starts with nothing activated; the old one keeps its activations.
    let second = store
        .record_turn(chat, &turn(ChatTurnMode::Default, "t"))
        .await
        .unwrap();
    assert_eq!(
        store.turn_activations(chat, None).await.unwrap(),
        Some(TurnActivations {
            turn_id: second.id,
            activated: Vec::new()
        })
    );
    let old = store.turn_activations(chat, Some(first.id)).await.unwrap();
    assert_eq!(old.unwrap().activated, expected);
    assert_eq!(
        store
            .get_turn(chat, first.id)
            .await
            .unwrap()
            .unwrap()
            .activated,
        expected
    );

    // Another chat cannot read or write this chat's turn.
    assert_eq!(
        store.turn_activations(other, Some(first.id)).await.unwrap(),
        None
    );
    assert_eq!(store.turn_activations(other, None).await.unwrap(), None);
    assert!(
        !store
            .activate_tools(other, first.id, names(&["evil__tool"]))
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .get_turn(chat, first.id)
            .await
            .unwrap()
            .unwrap()
            .activated,
        expected
    );

    for bad in ["", &"x".repeat(65)] {
        assert!(matches!(
            store.activate_tools(chat, second.id, names(&[bad])).await,
            Err(StoreError::InvalidInput(_))
        ));
    }
}

async fn only_the_last_turns_of_a_chat_are_kept(db: TestStore) {
    let store = db.store();
    let chat = new_chat(&db).await;
    let mut ids = Vec::new();
    for _ in 0..MAX_TURNS_PER_CHAT + 2 {
        let recorded = store
            .record_turn(chat, &turn(ChatTurnMode::Plan, "t"))
            .await
            .unwrap();
        ids.push(recorded.id);
    }
    assert!(
        store
            .activate_tools(chat, ids[2], vec![("kept__tool".into(), None)])
            .await
            .unwrap()
    );
    for gone in &ids[..2] {
        assert_eq!(store.get_turn(chat, *gone).await.unwrap(), None);
        assert!(
            !store
                .activate_tools(chat, *gone, vec![("a__b".into(), None)])
                .await
                .unwrap()
        );
    }
    let oldest_kept = store.get_turn(chat, ids[2]).await.unwrap().unwrap();
    assert_eq!(oldest_kept.number, 3);
    assert_eq!(oldest_kept.activated, ["kept__tool"]);
    let newest = store.turn_activations(chat, None).await.unwrap().unwrap();
    assert_eq!(newest.turn_id, *ids.last().unwrap());
}

async fn concurrent_turns_of_one_chat_get_distinct_numbers(db: TestStore) {
    let store = db.store();
    let chat = new_chat(&db).await;
    let turns = (0..4).map(|_| {
        let store = store.clone();
        tokio::spawn(async move {
            store
                .record_turn(chat, &turn(ChatTurnMode::Plan, "t"))
                .await
        })
    });
    let mut numbers: Vec<u64> = futures_join(turns).await;
    numbers.sort_unstable();
    assert_eq!(numbers, [1, 2, 3, 4]);
}

async fn futures_join(
    handles: impl Iterator<
        Item = tokio::task::JoinHandle<Result<ctxsync_persistence::TurnRecord, StoreError>>,
    >,
) -> Vec<u64> {
    let mut numbers = Vec::new();
    for handle in handles.collect::<Vec<_>>() {
        numbers.push(handle.await.unwrap().expect("turn recorded").number);
    }
    numbers
}
