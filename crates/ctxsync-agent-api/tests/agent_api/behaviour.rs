//! The persistence behaviour suite (SPEC §5), written once and run against both
//! backends: every test exists as `sqlite::<name>` and `postgres::<name>`. Behaviour
//! visible on the wire goes through the real gRPC service on loopback.

use crate::common;

use common::*;
use ctxsync_persistence::{
    ChangeEvent, MAX_RETIRED_RUN_IDS, PushOutcome, ResourceChanges, StoreError,
};
use ctxsync_protocol::DiscoveryPhase::{Complete, Pending, Unspecified};
use ctxsync_protocol::v1::context_resource::Body;
use ctxsync_protocol::{RunId, v1};
use tonic::Code;

ctxsync_test_support::on_both_backends! {
    #[tokio::test]
    open = Harness::open;
    phase_and_run_id_round_trip,
    a_request_without_discovery_reads_as_unspecified,
    a_stale_run_is_dropped_and_the_row_untouched,
    the_same_run_is_accepted,
    an_empty_run_is_accepted_against_an_empty_row_only,
    update_startup_overwrites_the_run_id_empty_included,
    an_oversized_run_id_is_rejected_with_nothing_written,
    a_retired_run_id_is_refused,
    only_the_last_retired_run_ids_are_kept,
    replayed_and_out_of_order_versions_are_dropped,
    initial_bypasses_the_version_gate,
    a_late_initial_push_of_the_same_run_cannot_go_backwards,
    absent_sources_are_deleted_and_unchanged_rows_kept,
    phase_only_and_run_id_only_changes_are_reported_and_notified,
    a_version_only_push_does_not_notify,
    an_mcp_only_change_does_not_dirty_a_chat,
    chats_pin_refresh_rebind_and_clear_dirty,
    a_chat_created_before_any_snapshot_pins_the_first,
    every_wire_limit_is_rejected_before_any_write,
    wrong_and_missing_tokens_are_refused,
    one_agents_token_cannot_touch_another_agents_rows,
    deleting_an_agent_keeps_its_chats_pointing_at_it,
    concurrent_writers_all_succeed,
    agents_are_listed_and_tokens_authenticate,
    a_rotated_token_replaces_the_old_one_at_once,
    unknown_agents_cannot_be_rotated_or_deleted,
    full_tool_definitions_and_server_details_round_trip,
    always_load_round_trips_and_a_change_of_it_alone_is_stored,
    pending_servers_are_stored_and_a_new_set_notifies,
}

const RUN_A: &str = "4f1c1a52-6a43-4c39-9b59-0b8b1d0e0a01";
const RUN_B: &str = "8e0d2f77-2c1b-4b6e-8d7e-4a2f5c9e0b02";

async fn phase_and_run_id_round_trip(h: Harness) {
    let (agent, token) = h.agent("alpha").await;
    let started = h.startup(&token, RUN_A).await.unwrap();
    assert_eq!(started.agent_run_id, RUN_A);
    assert_eq!(started.version, "1.2.3");

    let pushed = snapshot(1, Some(RUN_A), Pending, workspace());
    assert!(h.push(&token, pushed.clone()).await.unwrap());
    let ctx = h.context(agent).await;
    assert_eq!(RunId::edge(ctx.agent.agent_run_id.as_ref()), RUN_A);
    assert_eq!(ctx.agent.expanded_directory, "/workspace");
    let stored = ctx.snapshot.expect("snapshot stored");
    assert_eq!(RunId::edge(stored.agent_run_id.as_ref()), RUN_A);
    assert_eq!(stored.phase, Pending);
    assert_eq!(stored.version, 1);
    assert_eq!(stored.aggregate_hash, pushed.aggregate_hash);
    assert_eq!(ctx.resources, sorted(workspace()), "resources round trip");

    assert!(
        h.push(&token, snapshot(2, Some(RUN_A), Complete, workspace()))
            .await
            .unwrap()
    );
    let stored = h.context(agent).await.snapshot.unwrap();
    assert_eq!((stored.phase, stored.version), (Complete, 2));
}

async fn a_request_without_discovery_reads_as_unspecified(h: Harness) {
    let (agent, token) = h.agent("legacy").await;
    let request: v1::PushContextStateRequest = snapshot(1, None, Unspecified, workspace()).into();
    assert!(
        request.mcp_discovery.is_none(),
        "fixture must omit the message"
    );
    assert!(h.push_wire(&token, request).await.unwrap());
    let ctx = h.context(agent).await;
    let stored = ctx.snapshot.unwrap();
    assert_eq!(stored.phase, Unspecified);
    assert_eq!(stored.agent_run_id, None);
    assert_eq!(ctx.agent.agent_run_id, None);
}

async fn a_stale_run_is_dropped_and_the_row_untouched(h: Harness) {
    let (agent, token) = h.agent("restarting").await;
    h.startup(&token, RUN_A).await.unwrap();
    assert!(
        h.push(&token, snapshot(1, Some(RUN_A), Complete, workspace()))
            .await
            .unwrap()
    );
    let before = h.context(agent).await;

    // The agent restarted as run B; the old process pushes late, even as `initial`.
    h.startup(&token, RUN_B).await.unwrap();
    let mut late = snapshot(
        7,
        Some(RUN_A),
        Complete,
        vec![instruction("AGENTS.md", "old")],
    );
    late.initial = true;
    let mut events = h.store().subscribe_agent(agent);
    assert!(!h.push(&token, late).await.unwrap(), "stale run accepted");

    let after = h.context(agent).await;
    assert_eq!(RunId::edge(after.agent.agent_run_id.as_ref()), RUN_B);
    assert_eq!(
        after.snapshot, before.snapshot,
        "snapshot rewritten by a stale run"
    );
    assert_eq!(after.resources, before.resources);
    assert_eq!(h.api.metrics().pushes_dropped_stale_run, 1);

    // Nobody was notified: the next event is the new run's first push.
    assert!(
        h.push(&token, snapshot(1, Some(RUN_B), Pending, workspace()))
            .await
            .unwrap()
    );
    assert_eq!(
        next_event(events.next()).await,
        ChangeEvent::AgentContextChanged {
            agent_id: agent,
            snapshot_version: Some(1)
        }
    );
}

async fn the_same_run_is_accepted(h: Harness) {
    let (agent, token) = h.agent("steady").await;
    h.startup(&token, RUN_A).await.unwrap();
    for version in 1..=3 {
        let accepted = h
            .push(&token, snapshot(version, Some(RUN_A), Pending, workspace()))
            .await
            .unwrap();
        assert!(accepted, "version {version} dropped");
    }
    assert_eq!(h.context(agent).await.snapshot.unwrap().version, 3);
    assert_eq!(h.api.metrics().pushes_accepted, 3);
}

async fn an_empty_run_is_accepted_against_an_empty_row_only(h: Harness) {
    let (agent, token) = h.agent("legacy-then-new").await;
    assert!(
        h.push(&token, snapshot(1, None, Unspecified, workspace()))
            .await
            .unwrap()
    );
    assert_eq!(h.context(agent).await.snapshot.unwrap().version, 1);

    h.startup(&token, RUN_A).await.unwrap();
    let legacy = snapshot(
        2,
        None,
        Unspecified,
        vec![instruction("AGENTS.md", "legacy")],
    );
    assert!(
        !h.push(&token, legacy).await.unwrap(),
        "empty run accepted against run A"
    );
    let ctx = h.context(agent).await;
    assert_eq!(ctx.snapshot.unwrap().version, 1);
    assert_eq!(ctx.resources, sorted(workspace()));
}

async fn update_startup_overwrites_the_run_id_empty_included(h: Harness) {
    let (agent, token) = h.agent("cycling").await;
    let check = |run: &'static str, retired: &'static [&'static str]| {
        let (h, token) = (&h, &token);
        async move {
            let echoed = h.startup(token, run).await.unwrap();
            assert_eq!(echoed.agent_run_id, run);
            let row = h.context(agent).await.agent;
            assert_eq!(
                RunId::edge(row.agent_run_id.as_ref()),
                run,
                "after startup {run:?}"
            );
            assert_eq!(row.retired_agent_run_ids, retired, "after startup {run:?}");
            assert!(row.started_at.is_some());
        }
    };
    check(RUN_A, &[]).await;
    check(RUN_A, &[]).await; // a reconnect of the same process
    check(RUN_B, &[RUN_A]).await;
    check("", &[RUN_A, RUN_B]).await; // a legacy agent clears it
    check("", &[RUN_A, RUN_B]).await;
}

async fn an_oversized_run_id_is_rejected_with_nothing_written(h: Harness) {
    let (agent, token) = h.agent("oversized").await;
    h.startup(&token, RUN_A).await.unwrap();
    let before = h.context(agent).await;
    let long = "r".repeat(65);
    assert_status(
        h.startup(&token, &long).await,
        Code::InvalidArgument,
        "agent_run_id",
    );
    assert_status(
        h.push(&token, snapshot(1, Some(&long), Pending, workspace()))
            .await,
        Code::InvalidArgument,
        "agent_run_id",
    );
    assert_eq!(h.context(agent).await, before, "something was written");
    // Exactly 64 bytes is allowed.
    let max = "r".repeat(64);
    assert_eq!(h.startup(&token, &max).await.unwrap().agent_run_id, max);
}

async fn a_retired_run_id_is_refused(h: Harness) {
    let (agent, token) = h.agent("superseded").await;
    h.startup(&token, RUN_A).await.unwrap();
    h.startup(&token, RUN_B).await.unwrap();
    let before = h.context(agent).await;
    assert_status(
        h.startup(&token, RUN_A).await,
        Code::FailedPrecondition,
        "superseded by a newer agent process",
    );
    assert_eq!(
        h.context(agent).await,
        before,
        "a refused startup changed the row"
    );
    assert_eq!(h.api.metrics().startups_superseded, 1);
    // Its pushes are dropped too.
    let mut late = snapshot(1, Some(RUN_A), Complete, workspace());
    late.initial = true;
    assert!(!h.push(&token, late).await.unwrap());
}

async fn only_the_last_retired_run_ids_are_kept(h: Harness) {
    let (agent, token) = h.agent("many-restarts").await;
    let runs: Vec<String> = (0..MAX_RETIRED_RUN_IDS + 3)
        .map(|i| format!("run-{i:02}"))
        .collect();
    for run in &runs {
        h.startup(&token, run).await.unwrap();
    }
    let retired: Vec<String> = (h.context(agent).await.agent.retired_agent_run_ids)
        .into_iter()
        .map(RunId::into_string)
        .collect();
    let expect = &runs[runs.len() - 1 - MAX_RETIRED_RUN_IDS..runs.len() - 1];
    assert_eq!(retired, expect);
}

async fn replayed_and_out_of_order_versions_are_dropped(h: Harness) {
    let (agent, token) = h.agent("versions").await;
    h.startup(&token, RUN_A).await.unwrap();
    let push = |version: u64, initial: bool| {
        let mut s = snapshot(version, Some(RUN_A), Pending, workspace());
        s.initial = initial;
        s
    };
    assert!(h.push(&token, push(1, true)).await.unwrap());
    assert!(h.push(&token, push(3, false)).await.unwrap());
    assert!(
        !h.push(&token, push(3, false)).await.unwrap(),
        "replay accepted"
    );
    assert!(
        !h.push(&token, push(2, false)).await.unwrap(),
        "out of order accepted"
    );
    assert_eq!(h.context(agent).await.snapshot.unwrap().version, 3);
    assert_eq!(h.api.metrics().pushes_dropped_stale_version, 2);
    let outcome = h
        .store()
        .push_context_state(agent, push(2, false))
        .await
        .unwrap();
    assert_eq!(
        outcome,
        PushOutcome::DroppedStaleVersion { stored_version: 3 }
    );
}

async fn initial_bypasses_the_version_gate(h: Harness) {
    // A new run starts counting again: its first push is `initial` and replaces a higher
    // version of the previous run.
    let (agent, token) = h.agent("restarting").await;
    h.startup(&token, RUN_A).await.unwrap();
    assert!(
        h.push(&token, snapshot(5, Some(RUN_A), Pending, workspace()))
            .await
            .unwrap()
    );
    h.startup(&token, RUN_B).await.unwrap();
    let mut restarted = snapshot(2, Some(RUN_B), Complete, workspace());
    restarted.initial = true;
    assert!(h.push(&token, restarted).await.unwrap());
    let stored = h.context(agent).await.snapshot.unwrap();
    assert_eq!(
        (
            stored.version,
            RunId::edge(stored.agent_run_id.as_ref()),
            stored.phase
        ),
        (2, RUN_B, Complete)
    );

    // A legacy agent (no run id) cannot tell a restart from a reconnect: `initial`
    // bypasses the gate as before.
    let (legacy, token) = h.agent("legacy").await;
    assert!(
        h.push(&token, snapshot(5, None, Pending, workspace()))
            .await
            .unwrap()
    );
    let mut reconnect = snapshot(2, None, Complete, workspace());
    reconnect.initial = true;
    assert!(h.push(&token, reconnect).await.unwrap());
    let stored = h.context(legacy).await.snapshot.unwrap();
    assert_eq!((stored.version, stored.phase), (2, Complete));
}

/// An `initial` push of the stored snapshot's own run that commits late (say, retried
/// after a serialization conflict while the agent reconnected and pushed a newer
/// version) must not take the snapshot back, nor the phase from complete to pending.
async fn a_late_initial_push_of_the_same_run_cannot_go_backwards(h: Harness) {
    let (agent, token) = h.agent("late-initial").await;
    h.startup(&token, RUN_A).await.unwrap();
    let push = |version: u64, phase, content: &str, initial: bool| {
        let mut resources = workspace();
        resources[0] = instruction("AGENTS.md", content);
        let mut s = snapshot(version, Some(RUN_A), phase, resources);
        s.initial = initial;
        s
    };
    assert!(h.push(&token, push(1, Pending, "v1", true)).await.unwrap());
    assert!(
        h.push(&token, push(3, Complete, "v3", false))
            .await
            .unwrap()
    );
    let newest = h.context(agent).await;

    let outcome = h
        .store()
        .push_context_state(agent, push(2, Pending, "v2", true))
        .await
        .unwrap();
    assert_eq!(
        outcome,
        PushOutcome::DroppedStaleVersion { stored_version: 3 }
    );
    assert!(
        !h.push(&token, push(2, Pending, "v2", true)).await.unwrap(),
        "a late initial push went through the wire"
    );
    assert_eq!(
        h.context(agent).await,
        newest,
        "the snapshot went backwards"
    );

    // The same version again is an idempotent repeat: a reconnect re-sending the newest
    // snapshot as `initial` is accepted and changes nothing, so nobody is notified.
    let mut events = h.store().subscribe_agent(agent);
    let outcome = h
        .store()
        .push_context_state(agent, push(3, Complete, "v3", true))
        .await
        .unwrap();
    let PushOutcome::Accepted(changes) = outcome else {
        panic!("an idempotent repeat was dropped: {outcome:?}")
    };
    assert!(!changes.is_change(), "{changes:?}");
    let stored = h.context(agent).await;
    assert_eq!(
        (
            stored.snapshot.as_ref().map(|s| (s.version, s.phase)),
            &stored.resources
        ),
        (Some((3, Complete)), &newest.resources)
    );
    assert!(
        h.push(&token, push(4, Complete, "v4", false))
            .await
            .unwrap()
    );
    assert_eq!(
        next_event(events.next()).await,
        ChangeEvent::AgentContextChanged {
            agent_id: agent,
            snapshot_version: Some(4),
        },
        "the idempotent repeat notified"
    );
}

async fn absent_sources_are_deleted_and_unchanged_rows_kept(h: Harness) {
    let store = h.store();
    let (agent, _) = h.agent("sources").await;
    let first = vec![
        instruction("AGENTS.md", "a"),
        instruction("CLAUDE.md", "b"),
        mcp_server("fs", &["read"]),
    ];
    let outcome = store
        .push_context_state(agent, snapshot(1, None, Pending, first))
        .await
        .unwrap();
    let PushOutcome::Accepted(changes) = outcome else {
        panic!("dropped: {outcome:?}")
    };
    assert_eq!(
        changes.resources,
        ResourceChanges {
            inserted: 3,
            ..ResourceChanges::default()
        }
    );

    let second = vec![
        instruction("AGENTS.md", "a"),
        mcp_server("fs", &["read", "write"]),
    ];
    let outcome = store
        .push_context_state(agent, snapshot(2, None, Pending, second.clone()))
        .await
        .unwrap();
    let PushOutcome::Accepted(changes) = outcome else {
        panic!("dropped: {outcome:?}")
    };
    assert_eq!(
        changes.resources,
        ResourceChanges {
            inserted: 0,
            updated: 1,
            deleted: 1,
            unchanged: 1
        }
    );
    assert_eq!(h.context(agent).await.resources, sorted(second));
}

async fn phase_only_and_run_id_only_changes_are_reported_and_notified(h: Harness) {
    let (agent, token) = h.agent("changes").await;
    h.startup(&token, RUN_A).await.unwrap();
    let mut events = h.store().subscribe_agent(agent);
    let event = |version| ChangeEvent::AgentContextChanged {
        agent_id: agent,
        snapshot_version: version,
    };

    assert!(
        h.push(&token, snapshot(1, Some(RUN_A), Pending, workspace()))
            .await
            .unwrap()
    );
    assert_eq!(next_event(events.next()).await, event(Some(1)));

    // Phase only: same resources, same hash.
    let outcome = h
        .store()
        .push_context_state(agent, snapshot(2, Some(RUN_A), Complete, workspace()))
        .await
        .unwrap();
    let PushOutcome::Accepted(changes) = outcome else {
        panic!("dropped: {outcome:?}")
    };
    assert!(changes.phase_changed && changes.is_change());
    assert!(!changes.run_id_changed && !changes.aggregate_hash_changed);
    assert!(!changes.resources.any(), "{changes:?}");
    assert_eq!(next_event(events.next()).await, event(Some(2)));

    // Run id only: a restart (which itself notifies) pushing identical content.
    h.startup(&token, RUN_B).await.unwrap();
    assert_eq!(next_event(events.next()).await, event(None));
    let outcome = h
        .store()
        .push_context_state(agent, snapshot(1, Some(RUN_B), Complete, workspace()))
        .await
        .unwrap();
    let PushOutcome::Accepted(changes) = outcome else {
        panic!("dropped: {outcome:?}")
    };
    assert!(changes.run_id_changed && changes.is_change());
    assert!(!changes.phase_changed && !changes.aggregate_hash_changed);
    assert!(!changes.resources.any(), "{changes:?}");
    assert_eq!(next_event(events.next()).await, event(Some(1)));

    // And through the wire: a phase-only push is accepted and notifies.
    let mut pending_again = snapshot(2, Some(RUN_B), Pending, workspace());
    pending_again.initial = false;
    assert!(h.push(&token, pending_again).await.unwrap());
    assert_eq!(next_event(events.next()).await, event(Some(2)));
}

async fn a_version_only_push_does_not_notify(h: Harness) {
    let (agent, token) = h.agent("quiet").await;
    h.startup(&token, RUN_A).await.unwrap();
    let mut events = h.store().subscribe_agent(agent);
    assert!(
        h.push(&token, snapshot(1, Some(RUN_A), Pending, workspace()))
            .await
            .unwrap()
    );
    assert!(
        h.push(&token, snapshot(2, Some(RUN_A), Pending, workspace()))
            .await
            .unwrap()
    );
    assert!(
        h.push(&token, snapshot(3, Some(RUN_A), Complete, workspace()))
            .await
            .unwrap()
    );
    let version = |e: ChangeEvent| match e {
        ChangeEvent::AgentContextChanged {
            snapshot_version, ..
        } => snapshot_version,
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(version(next_event(events.next()).await), Some(1));
    assert_eq!(
        version(next_event(events.next()).await),
        Some(3),
        "the unchanged version 2 notified"
    );
    assert_eq!(h.context(agent).await.snapshot.unwrap().version, 3);
}

async fn an_mcp_only_change_does_not_dirty_a_chat(h: Harness) {
    let (agent, token) = h.agent("pinning").await;
    h.startup(&token, RUN_A).await.unwrap();
    let v1 = snapshot(1, Some(RUN_A), Pending, workspace());
    assert!(h.push(&token, v1.clone()).await.unwrap());
    let chat = h.store().create_chat(Some(agent)).await.unwrap();
    assert_eq!(
        chat.pinned_aggregate_hash.as_deref(),
        Some(v1.aggregate_hash.as_str())
    );
    assert!(!chat.is_dirty());

    // MCP only: servers change, a server fails, the hash stays.
    let mcp_changed = vec![
        instruction("AGENTS.md", "Be brief."),
        skill("pdf-tools", "Work with PDF files"),
        mcp_config(".mcp.json"),
        mcp_server("fs", &["read", "write", "delete"]),
        failed_server("git", "failed to connect"),
    ];
    let v2 = snapshot(2, Some(RUN_A), Complete, mcp_changed);
    assert_eq!(v2.aggregate_hash, v1.aggregate_hash);
    assert!(h.push(&token, v2).await.unwrap());
    assert!(
        !h.store()
            .get_chat(chat.id)
            .await
            .unwrap()
            .unwrap()
            .is_dirty(),
        "MCP change dirtied the chat"
    );

    // An instruction file changes: dirty.
    let mut edited = workspace();
    edited[0] = instruction("AGENTS.md", "Be thorough.");
    let v3 = snapshot(3, Some(RUN_A), Complete, edited);
    let outcome = h.store().push_context_state(agent, v3).await.unwrap();
    let PushOutcome::Accepted(changes) = outcome else {
        panic!("dropped: {outcome:?}")
    };
    assert!(changes.aggregate_hash_changed);
    assert_eq!(changes.chats_marked_dirty, 1);
    let dirty = h.store().get_chat(chat.id).await.unwrap().unwrap();
    assert!(dirty.is_dirty());
    let pinned = h
        .store()
        .read_chat_context(chat.id)
        .await
        .unwrap()
        .unwrap()
        .pinned;
    assert_eq!(
        pinned[0],
        instruction("AGENTS.md", "Be brief."),
        "the pin moved"
    );
}

async fn chats_pin_refresh_rebind_and_clear_dirty(h: Harness) {
    let store = h.store();
    let (agent, token) = h.agent("chat-owner").await;
    let (other, other_token) = h.agent("other").await;
    h.startup(&token, RUN_A).await.unwrap();
    assert!(
        h.push(&token, snapshot(1, Some(RUN_A), Complete, workspace()))
            .await
            .unwrap()
    );
    let mut error_snapshot = snapshot(1, None, Complete, vec![instruction("README.md", "other")]);
    error_snapshot.snapshot_error = Some("500 resources excluded".into());
    assert!(h.push(&other_token, error_snapshot.clone()).await.unwrap());

    let chat = store.create_chat(Some(agent)).await.unwrap();
    let mut events = store.subscribe_chat(chat.id).await.unwrap();
    let ctx = store.read_chat_context(chat.id).await.unwrap().unwrap();
    let pinnable: Vec<_> = sorted(workspace())
        .into_iter()
        .filter(|r| r.source == "AGENTS.md" || r.source.starts_with("skills/"))
        .collect();
    assert_eq!(
        ctx.pinned, pinnable,
        "only instruction files and skills are pinned"
    );

    let mut edited = workspace();
    edited[0] = instruction("AGENTS.md", "v2");
    let v2 = snapshot(2, Some(RUN_A), Complete, edited);
    assert!(h.push(&token, v2.clone()).await.unwrap());
    // The push tells the agent's subscribers and, since it marked the chat dirty, the
    // chat's (the subscription hears both topics, in either order).
    let mut heard = [
        next_event(events.next()).await,
        next_event(events.next()).await,
    ];
    heard.sort_by_key(|event| matches!(event, ChangeEvent::ChatChanged { .. }));
    assert!(matches!(
        heard[0],
        ChangeEvent::AgentContextChanged { agent_id, .. } if agent_id == agent
    ));
    assert_eq!(
        heard[1],
        ChangeEvent::ChatChanged {
            chat_id: chat.id,
            agent_id: Some(agent)
        }
    );
    assert!(store.get_chat(chat.id).await.unwrap().unwrap().is_dirty());

    // clear_dirty keeps the pin; refresh re-pins.
    let cleared = store.clear_chat_dirty(chat.id).await.unwrap();
    assert!(!cleared.is_dirty());
    assert_eq!(cleared.pinned_aggregate_hash, chat.pinned_aggregate_hash);
    assert!(matches!(
        next_event(events.next()).await,
        ChangeEvent::ChatChanged { .. }
    ));
    let refreshed = store.refresh_chat(chat.id).await.unwrap();
    assert_eq!(
        refreshed.pinned_aggregate_hash.as_deref(),
        Some(v2.aggregate_hash.as_str())
    );
    let pinned = store
        .read_chat_context(chat.id)
        .await
        .unwrap()
        .unwrap()
        .pinned;
    assert_eq!(pinned[0], instruction("AGENTS.md", "v2"));
    assert!(matches!(
        next_event(events.next()).await,
        ChangeEvent::ChatChanged { .. }
    ));

    // Rebinding pins the other agent's snapshot and its error; events follow it.
    let rebound = store.bind_chat(chat.id, Some(other)).await.unwrap();
    assert_eq!(rebound.agent_id, Some(other));
    assert_eq!(
        rebound.pinned_aggregate_hash,
        Some(error_snapshot.aggregate_hash)
    );
    assert_eq!(
        rebound.context_error.as_deref(),
        Some("500 resources excluded")
    );
    assert_eq!(
        next_event(events.next()).await,
        ChangeEvent::ChatChanged {
            chat_id: chat.id,
            agent_id: Some(other)
        }
    );
    assert_eq!(events.agent_id(), Some(other));

    // Unbinding clears the pin.
    let unbound = store.bind_chat(chat.id, None).await.unwrap();
    assert_eq!(
        (unbound.agent_id, unbound.pinned_aggregate_hash),
        (None, None)
    );
    assert!(
        store
            .read_chat_context(chat.id)
            .await
            .unwrap()
            .unwrap()
            .pinned
            .is_empty()
    );

    let missing = ctxsync_persistence::ChatId::new_random();
    assert!(
        matches!(store.refresh_chat(missing).await, Err(StoreError::ChatNotFound(id)) if id == missing)
    );
    assert!(store.get_chat(missing).await.unwrap().is_none());
    let ghost = ctxsync_persistence::AgentId::new_random();
    assert!(matches!(
        store.create_chat(Some(ghost)).await,
        Err(StoreError::AgentNotFound(_))
    ));
}

async fn a_chat_created_before_any_snapshot_pins_the_first(h: Harness) {
    let store = h.store();
    let (agent, token) = h.agent("late").await;
    let chat = store.create_chat(Some(agent)).await.unwrap();
    assert_eq!(chat.pinned_aggregate_hash, None);
    h.startup(&token, RUN_A).await.unwrap();
    let first = snapshot(1, Some(RUN_A), Pending, workspace());
    assert!(h.push(&token, first.clone()).await.unwrap());
    let chat = store.get_chat(chat.id).await.unwrap().unwrap();
    assert_eq!(chat.pinned_aggregate_hash, Some(first.aggregate_hash));
    assert!(!chat.is_dirty());
    let pinned = store
        .read_chat_context(chat.id)
        .await
        .unwrap()
        .unwrap()
        .pinned;
    assert_eq!(pinned.len(), 2, "{pinned:?}");
}

/// One wire-limit violation: a name and how to break a valid request.
type Breaker = (
    &'static str,
    &'static str,
    fn(&mut v1::PushContextStateRequest),
);

fn body_of(resource: &mut v1::ContextResource) -> &mut String {
    match resource.body.as_mut() {
        Some(Body::InstructionFile(file)) => &mut file.content,
        _ => panic!("fixture resource 0 must be an instruction file"),
    }
}

const WIRE_LIMITS: &[Breaker] = &[
    ("too many resources", "resources", |r| {
        let template = r.resources[0].clone();
        r.resources = (0..1001)
            .map(|i| v1::ContextResource {
                source: format!("f{i}"),
                ..template.clone()
            })
            .collect();
    }),
    ("body over 256 KiB", "resources[0].body", |r| {
        *body_of(&mut r.resources[0]) = "x".repeat(256 * 1024 + 1);
    }),
    ("bodies over 4 MiB in total", "total", |r| {
        let template = r.resources[0].clone();
        r.resources = (0..17)
            .map(|i| {
                let mut resource = v1::ContextResource {
                    source: format!("f{i}"),
                    ..template.clone()
                };
                *body_of(&mut resource) = "x".repeat(250 * 1024);
                resource
            })
            .collect();
    }),
    ("source over 1024 bytes", "resources[0].source", |r| {
        r.resources[0].source = "s".repeat(1025)
    }),
    (
        "source_path over 1024 bytes",
        "resources[0].source_path",
        |r| r.resources[0].source_path = Some("p".repeat(1025)),
    ),
    ("empty source", "resources[0].source", |r| {
        r.resources[0].source.clear()
    }),
    ("duplicate source", "resources[1].source", |r| {
        r.resources[1].source = r.resources[0].source.clone()
    }),
    ("error over 4096 bytes", "resources[0].error", |r| {
        r.resources[0].error = "e".repeat(4097)
    }),
    (
        "content hash over 64 bytes",
        "resources[0].content_hash",
        |r| r.resources[0].content_hash = "h".repeat(65),
    ),
    ("aggregate hash over 64 bytes", "aggregate_hash", |r| {
        r.aggregate_hash = "h".repeat(65)
    }),
    ("snapshot error over 4096 bytes", "snapshot_error", |r| {
        r.snapshot_error = "e".repeat(4097)
    }),
    ("run id over 64 bytes", "agent_run_id", |r| {
        r.agent_run_id = "r".repeat(65)
    }),
    ("version beyond i64", "version", |r| r.version = u64::MAX),
    ("size beyond i64", "resources[0].size_bytes", |r| {
        r.resources[0].size_bytes = i64::MAX as u64 + 1
    }),
    ("unknown status", "resources[0].status", |r| {
        r.resources[0].status = 99
    }),
    ("unspecified status", "resources[0].status", |r| {
        r.resources[0].status = 0
    }),
    ("missing body", "resources[0].body", |r| {
        r.resources[0].body = None
    }),
    ("unknown phase", "mcp_discovery.phase", |r| {
        r.mcp_discovery = Some(v1::push_context_state_request::McpDiscovery {
            phase: 7,
            ..Default::default()
        })
    }),
    ("invalid tool schema", "input_schema", |r| {
        if let Some(Body::McpServer(server)) = r.resources[3].body.as_mut() {
            server.tools[0].input_schema = "{not json".into();
        }
    }),
];

async fn every_wire_limit_is_rejected_before_any_write(h: Harness) {
    let (agent, token) = h.agent("limits").await;
    let valid: v1::PushContextStateRequest = snapshot(1, None, Pending, workspace()).into();
    for (name, field, breaker) in WIRE_LIMITS {
        let mut request = valid.clone();
        breaker(&mut request);
        let result = h.push_wire(&token, request).await;
        match result {
            Err(status) => {
                assert_eq!(status.code(), Code::InvalidArgument, "{name}: {status:?}");
                assert!(
                    status.message().contains(field),
                    "{name}: {:?} lacks {field}",
                    status.message()
                );
            }
            Ok(accepted) => panic!("{name}: accepted={accepted}, expected InvalidArgument"),
        }
    }
    let startup_breakers: &[(&str, &str, v1::UpdateStartupRequest)] = &[
        (
            "missing startup",
            "startup",
            v1::UpdateStartupRequest { startup: None },
        ),
        (
            "version over 256 bytes",
            "startup.version",
            v1::UpdateStartupRequest {
                startup: Some(v1::Startup {
                    version: "v".repeat(257),
                    ..v1::Startup::default()
                }),
            },
        ),
        (
            "directory over 4096 bytes",
            "startup.expanded_directory",
            v1::UpdateStartupRequest {
                startup: Some(v1::Startup {
                    expanded_directory: "d".repeat(4097),
                    ..v1::Startup::default()
                }),
            },
        ),
    ];
    for (name, field, request) in startup_breakers {
        assert_status(
            h.startup_wire(&token, request.clone()).await,
            Code::InvalidArgument,
            field,
        );
        let _ = name;
    }
    let ctx = h.context(agent).await;
    assert_eq!(ctx.snapshot, None, "a rejected push wrote a snapshot");
    assert!(ctx.resources.is_empty(), "a rejected push wrote resources");
    assert_eq!(
        ctx.agent.started_at, None,
        "a rejected startup wrote the row"
    );
    assert_eq!(
        h.api.metrics().requests_invalid as usize,
        WIRE_LIMITS.len() + startup_breakers.len()
    );
    // The unbroken request is accepted, so each rejection was that one limit.
    assert!(h.push_wire(&token, valid).await.unwrap());
}

async fn wrong_and_missing_tokens_are_refused(h: Harness) {
    let (agent, token) = h.agent("guarded").await;
    let request: v1::PushContextStateRequest = snapshot(1, None, Pending, workspace()).into();
    let mut client = h.client.clone();
    assert_status(
        client.push_context_state(request.clone()).await,
        Code::Unauthenticated,
        "authorization",
    );
    let (id_part, secret) = token.split_once('.').unwrap();
    let mut flipped = secret.to_owned();
    let last = flipped.pop().unwrap();
    flipped.push(if last == 'A' { 'B' } else { 'A' });
    let wrong_secret = format!("{id_part}.{flipped}");
    for bad in ["garbage", "", wrong_secret.as_str()] {
        assert_status(
            h.push_wire(bad, request.clone()).await,
            Code::Unauthenticated,
            "",
        );
        assert_status(h.startup(bad, RUN_A).await, Code::Unauthenticated, "");
    }
    // A deleted agent's token stops working.
    let (doomed, doomed_token) = h.agent("doomed").await;
    h.store().delete_agent(doomed).await.unwrap();
    assert_status(
        h.push_wire(&doomed_token, request.clone()).await,
        Code::Unauthenticated,
        "",
    );
    let ctx = h.context(agent).await;
    assert_eq!((ctx.snapshot, ctx.agent.started_at), (None, None));
    assert!(h.api.metrics().requests_unauthenticated >= 8);
    assert!(matches!(
        h.store().authenticate(&wrong_secret).await,
        Err(StoreError::InvalidToken)
    ));
    assert_eq!(h.store().authenticate(&token).await.unwrap(), agent);
}

async fn one_agents_token_cannot_touch_another_agents_rows(h: Harness) {
    let (mallory, mallory_token) = h.agent("mallory").await;
    let (victim, victim_token) = h.agent("victim").await;
    h.startup(&victim_token, RUN_A).await.unwrap();
    assert!(
        h.push(
            &victim_token,
            snapshot(1, Some(RUN_A), Complete, workspace())
        )
        .await
        .unwrap()
    );
    let before = h.context(victim).await;

    // Mallory's token only ever reaches mallory's rows.
    h.startup(&mallory_token, RUN_B).await.unwrap();
    assert!(
        h.push(&mallory_token, snapshot(9, Some(RUN_B), Pending, vec![]))
            .await
            .unwrap()
    );
    assert_eq!(h.context(victim).await, before);
    assert_eq!(
        RunId::edge(h.context(mallory).await.agent.agent_run_id.as_ref()),
        RUN_B
    );

    // A token claiming the victim's id with mallory's secret is refused.
    let forged = format!("{victim}.{}", mallory_token.split_once('.').unwrap().1);
    assert_status(h.startup(&forged, RUN_B).await, Code::Unauthenticated, "");
    assert_status(
        h.push(&forged, snapshot(10, Some(RUN_A), Pending, vec![]))
            .await,
        Code::Unauthenticated,
        "",
    );
    assert_eq!(h.context(victim).await, before);
}

async fn deleting_an_agent_keeps_its_chats_pointing_at_it(h: Harness) {
    let store = h.store();
    let (agent, token) = h.agent("ephemeral").await;
    assert!(
        h.push(&token, snapshot(1, None, Pending, workspace()))
            .await
            .unwrap()
    );
    let chat = store.create_chat(Some(agent)).await.unwrap();
    let mut events = store.subscribe_agent(agent);
    store.delete_agent(agent).await.unwrap();
    assert_eq!(
        next_event(events.next()).await,
        ChangeEvent::AgentContextChanged {
            agent_id: agent,
            snapshot_version: None
        }
    );
    assert!(store.read_agent_context(agent).await.unwrap().is_none());
    let kept = store
        .get_chat(chat.id)
        .await
        .unwrap()
        .expect("chat deleted with its agent");
    assert_eq!(kept.agent_id, Some(agent));
    assert!(matches!(
        store.delete_agent(agent).await,
        Err(StoreError::AgentNotFound(_))
    ));
    assert!(store.list_agents().await.unwrap().is_empty());
}

async fn concurrent_writers_all_succeed(h: Harness) {
    let mut agents = Vec::new();
    for i in 0..6 {
        let (agent, token) = h.agent(&format!("busy-{i}")).await;
        h.startup(&token, RUN_A).await.unwrap();
        agents.push((agent, token));
    }
    let mut tasks = tokio::task::JoinSet::new();
    for (_, token) in &agents {
        let (client, token) = (h.client.clone(), token.clone());
        tasks.spawn(async move {
            for version in 1..=5u64 {
                let mut resources = workspace();
                resources[0] = instruction("AGENTS.md", &format!("v{version}"));
                let request: v1::PushContextStateRequest =
                    snapshot(version, Some(RUN_A), Pending, resources).into();
                let accepted = client
                    .clone()
                    .push_context_state(ctxsync_agent_api::test_support::with_bearer(
                        request, &token,
                    ))
                    .await
                    .expect("push failed under concurrency")
                    .into_inner()
                    .accepted;
                assert!(accepted);
            }
        });
    }
    while let Some(result) = tasks.join_next().await {
        result.expect("pusher panicked");
    }
    for (agent, _) in agents {
        assert_eq!(h.context(agent).await.snapshot.unwrap().version, 5);
    }
}

async fn agents_are_listed_and_tokens_authenticate(h: Harness) {
    let store = h.store();
    let (a, a_token) = h.agent("first").await;
    let (b, _) = h.agent("second").await;
    let listed: Vec<_> = store
        .list_agents()
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.id, r.name))
        .collect();
    assert_eq!(listed.len(), 2);
    assert!(listed.contains(&(a, "first".into())) && listed.contains(&(b, "second".into())));
    assert_eq!(store.authenticate(&a_token).await.unwrap(), a);
    for bad_name in ["", &"n".repeat(257)] {
        assert!(matches!(
            store.create_agent(bad_name).await,
            Err(StoreError::InvalidInput(_))
        ));
    }
}

async fn a_rotated_token_replaces_the_old_one_at_once(h: Harness) {
    let store = h.store();
    let (agent, old) = h.agent("rotating").await;
    let (other, other_token) = h.agent("bystander").await;
    h.startup(&old, RUN_A).await.unwrap();
    // A push the server accepted: it may remember the token, but not past a rotation.
    assert!(
        h.push(&old, snapshot(1, Some(RUN_A), Pending, workspace()))
            .await
            .unwrap()
    );
    let before = store.get_agent(agent).await.unwrap().unwrap();

    let rotated = store.rotate_agent_token(agent).await.unwrap();
    assert_eq!(rotated.id, agent);
    let new = rotated.token.into_string();
    assert_ne!(new, old);

    // Refused from the commit on, in the store and on the wire.
    assert!(matches!(
        store.authenticate(&old).await,
        Err(StoreError::InvalidToken)
    ));
    let mut second = snapshot(2, Some(RUN_A), Complete, workspace());
    second.initial = false;
    // Twice: refused in the push's transaction, then before it.
    for _ in 0..2 {
        assert_status(
            h.push(&old, second.clone()).await,
            Code::Unauthenticated,
            "",
        );
    }
    let stored = h.context(agent).await.snapshot.unwrap();
    assert_eq!(
        (stored.version, stored.phase),
        (1, Pending),
        "nothing written"
    );
    assert_eq!(store.authenticate(&new).await.unwrap(), agent);
    assert!(
        h.push(&new, snapshot(1, Some(RUN_A), Pending, workspace()))
            .await
            .unwrap()
    );
    // The agent keeps its row and run; only the token changed.
    let after = store.get_agent(agent).await.unwrap().unwrap();
    assert_eq!(
        (&after.name, &after.agent_run_id, after.created_at),
        (&before.name, &before.agent_run_id, before.created_at)
    );
    assert_eq!(store.authenticate(&other_token).await.unwrap(), other);

    // Rotating again retires the second token too.
    let third = store.rotate_agent_token(agent).await.unwrap();
    assert!(matches!(
        store.authenticate(&new).await,
        Err(StoreError::InvalidToken)
    ));
    assert_eq!(
        store.authenticate(third.token.expose()).await.unwrap(),
        agent
    );
}

async fn unknown_agents_cannot_be_rotated_or_deleted(h: Harness) {
    let store = h.store();
    let missing = ctxsync_persistence::AgentId::new_random();
    assert!(matches!(
        store.rotate_agent_token(missing).await,
        Err(StoreError::AgentNotFound(id)) if id == missing
    ));
    assert!(matches!(
        store.delete_agent(missing).await,
        Err(StoreError::AgentNotFound(id)) if id == missing
    ));
    let error = store.delete_agent(missing).await.unwrap_err();
    assert_eq!(error.to_string(), format!("agent {missing} not found"));

    // A deleted agent's token dies with it and it cannot be rotated back to life.
    let (agent, token) = h.agent("short-lived").await;
    store.delete_agent(agent).await.unwrap();
    assert!(matches!(
        store.rotate_agent_token(agent).await,
        Err(StoreError::AgentNotFound(_))
    ));
    assert!(matches!(
        store.authenticate(&token).await,
        Err(StoreError::InvalidToken)
    ));
    assert!(store.list_agents().await.unwrap().is_empty());
}

async fn full_tool_definitions_and_server_details_round_trip(h: Harness) {
    use ctxsync_protocol::*;
    let (agent, token) = h.agent("rich").await;
    h.startup(&token, RUN_A).await.unwrap();
    let mut server = mcp_server("py", &["search"]);
    let ResourceBody::McpServer(body) = &mut server.body else {
        unreachable!()
    };
    body.protocol_version = "2026-07-28".into();
    body.server_info = Some(McpServerInfo {
        name: "py-server".into(),
        version: "2.3.0".into(),
        title: "Python search".into(),
        description: "Searches things".into(),
    });
    body.instructions = "Search before you guess.".into();
    body.always_load = true;
    body.timings = Some(McpConnectTimings {
        start_ms: Some(120),
        handshake_ms: 35,
        tools_ms: 4,
    });
    let tool = &mut body.tools[0];
    tool.title = "Search the index".into();
    tool.annotations = Some(McpToolAnnotations {
        title: "Search".into(),
        read_only_hint: Some(true),
        destructive_hint: Some(false),
        idempotent_hint: Some(true),
        open_world_hint: Some(false),
    });
    tool.output_schema =
        Some(serde_json::json!({"type": "object", "properties": {"hits": {"type": "array"}}}));
    tool.icons = vec![McpIcon {
        src: "data:image/png;base64,iVBORw0KGgo=".into(),
        mime_type: "image/png".into(),
        sizes: vec!["48x48".into()],
        theme: "light".into(),
    }];
    tool.meta = Some(serde_json::json!({"ui": {"resourceUri": "ui://py/search"}}));
    let mut resources = workspace();
    resources.push(server.clone());
    // Through the real gRPC service, so the wire conversion is part of the round trip.
    assert!(
        h.push(&token, snapshot(1, Some(RUN_A), Complete, resources))
            .await
            .unwrap()
    );
    let ctx = h.context(agent).await;
    let stored = ctx.resources.iter().find(|r| r.source == "mcp:py").unwrap();
    assert_eq!(stored, &server, "every field survives the store");
}

async fn always_load_round_trips_and_a_change_of_it_alone_is_stored(h: Harness) {
    use ctxsync_persistence::AgentContext;
    use ctxsync_protocol::ResourceBody;
    let (agent, token) = h.agent("always").await;
    h.startup(&token, RUN_A).await.unwrap();
    let server = |always_load: bool| {
        let mut server = mcp_server("py", &["search"]);
        let ResourceBody::McpServer(body) = &mut server.body else {
            unreachable!()
        };
        body.always_load = always_load;
        server
    };
    let stored = |ctx: &AgentContext| {
        let row = ctx.resources.iter().find(|r| r.source == "mcp:py").unwrap();
        let ResourceBody::McpServer(body) = &row.body else {
            panic!("a server row: {row:?}")
        };
        body.always_load
    };
    for (version, always_load) in [(1, true), (2, false), (3, true)] {
        let mut resources = workspace();
        resources.push(server(always_load));
        // Same content hash and size every time: only the body (and its digest) differs.
        assert!(
            h.push(&token, snapshot(version, Some(RUN_A), Complete, resources))
                .await
                .unwrap()
        );
        assert_eq!(stored(&h.context(agent).await), always_load, "v{version}");
    }
}

async fn pending_servers_are_stored_and_a_new_set_notifies(h: Harness) {
    use ctxsync_protocol::SnapshotPendingServer;
    let (agent, token) = h.agent("pending").await;
    h.startup(&token, RUN_A).await.unwrap();
    let pending = |version, names: &[(&str, u64)]| ctxsync_protocol::Snapshot {
        pending_servers: names
            .iter()
            .map(|(name, ms)| SnapshotPendingServer {
                server_name: (*name).into(),
                elapsed_ms: *ms,
            })
            .collect(),
        ..snapshot(version, Some(RUN_A), Pending, workspace())
    };
    assert!(
        h.push(&token, pending(1, &[("github", 4000), ("jira", 12000)]))
            .await
            .unwrap()
    );
    let stored = h.context(agent).await.snapshot.unwrap();
    let names: Vec<_> = stored
        .pending_servers
        .iter()
        .map(|p| (p.server_name.as_str(), p.elapsed_ms))
        .collect();
    assert_eq!(names, [("github", 4000), ("jira", 12000)]);

    let changes = |outcome| match outcome {
        PushOutcome::Accepted(changes) => changes,
        other => panic!("dropped: {other:?}"),
    };
    // Only the times moved: stored, but no change for readers.
    let same = h
        .store()
        .push_context_state(agent, pending(2, &[("github", 5000), ("jira", 13000)]))
        .await
        .unwrap();
    assert!(!changes(same).is_change());
    assert_eq!(
        h.context(agent).await.snapshot.unwrap().pending_servers[0].elapsed_ms,
        5000
    );
    // One server finished: another set.
    let fewer = h
        .store()
        .push_context_state(agent, pending(3, &[("jira", 14000)]))
        .await
        .unwrap();
    let fewer = changes(fewer);
    assert!(fewer.pending_changed && fewer.is_change(), "{fewer:?}");
    // Complete: the list empties.
    assert!(
        h.push(&token, snapshot(4, Some(RUN_A), Complete, workspace()))
            .await
            .unwrap()
    );
    assert!(
        h.context(agent)
            .await
            .snapshot
            .unwrap()
            .pending_servers
            .is_empty()
    );
}

// ---- a push tells the chats it changes -------------------------------------------------

mod push_chat_events {
    use super::*;

    ctxsync_test_support::on_both_backends! {
        #[tokio::test]
        open = Harness::open;
        a_push_that_marks_chats_dirty_tells_their_subscribers,
    }

    /// The next `ChatChanged` of `chat` (agent events on the way are skipped).
    async fn chat_changed(events: &mut ctxsync_persistence::ChatSubscription) -> ChangeEvent {
        let deadline = tokio::time::Instant::now() + EVENT_DEADLINE;
        loop {
            let event = tokio::time::timeout_at(deadline, events.next())
                .await
                .expect("no ChatChanged within the deadline")
                .expect("store closed");
            if matches!(event, ChangeEvent::ChatChanged { .. }) {
                return event;
            }
        }
    }

    async fn a_push_that_marks_chats_dirty_tells_their_subscribers(h: Harness) {
        let (agent, token) = h.agent("dirty").await;
        h.startup(&token, RUN_A).await.unwrap();
        assert!(
            h.push(&token, snapshot(1, Some(RUN_A), Complete, workspace()))
                .await
                .unwrap()
        );
        let chat = h.store().create_chat(Some(agent)).await.unwrap().id;
        let mut events = h.store().subscribe_chat(chat).await.unwrap();
        let expected = ChangeEvent::ChatChanged {
            chat_id: chat,
            agent_id: Some(agent),
        };

        let mut changed = workspace();
        changed[0] = instruction("AGENTS.md", "Be briefer.");
        assert!(
            h.push(&token, snapshot(2, Some(RUN_A), Complete, changed))
                .await
                .unwrap()
        );
        let row = h.store().get_chat(chat).await.unwrap().unwrap();
        assert!(row.is_dirty(), "the push did not mark the chat dirty");
        assert_eq!(chat_changed(&mut events).await, expected, "marked dirty");

        // Back to the pinned files: the flag clears, and that is a change of the row too.
        assert!(
            h.push(&token, snapshot(3, Some(RUN_A), Complete, workspace()))
                .await
                .unwrap()
        );
        assert!(!h.store().get_chat(chat).await.unwrap().unwrap().is_dirty());
        assert_eq!(chat_changed(&mut events).await, expected, "cleared");
    }
}
