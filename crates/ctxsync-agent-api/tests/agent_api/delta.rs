//! Delta pushes (issue 19) on both backends, through the real gRPC service: a delta stores
//! and notifies exactly what the equivalent full push does, carries status and warning
//! changes of rows whose body stays, and is refused, writing nothing, when the server
//! lacks its base; the full push that follows is stored.

use crate::common;

use common::*;
use ctxsync_agent_api::test_support::with_bearer;
use ctxsync_persistence::{AgentId, ChangeEvent, PushOutcome, ResourceChanges};
use ctxsync_protocol::DiscoveryPhase::{Complete, Pending};
use ctxsync_protocol::{
    DELTA_DIGEST_SCHEME, DeltaBase, Resource, ResourceStatus, RunId, Snapshot, v1,
};

ctxsync_test_support::on_both_backends! {
    #[tokio::test]
    open = Harness::open;
    the_server_offers_deltas_and_a_legacy_full_push_still_works,
    a_delta_stores_and_notifies_what_the_full_push_does,
    status_and_warning_changes_arrive_through_a_delta,
    a_delta_without_its_base_is_refused_and_the_full_push_follows,
    a_delta_of_another_run_or_a_changed_row_is_refused,
    random_edits_store_the_same_through_deltas_and_full_pushes,
    a_push_with_the_stored_fingerprints_rewrites_no_row_and_any_field_counts,
}

const RUN: &str = "0b5c1a52-6a43-4c39-9b59-0b8b1d0e0a19";
const OTHER_RUN: &str = "9e0d2f77-2c1b-4b6e-8d7e-4a2f5c9e0b19";

/// What a push answered.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    accepted: bool,
    delta_base_missing: bool,
}

const ACCEPTED: Answer = Answer {
    accepted: true,
    delta_base_missing: false,
};
const BASE_MISSING: Answer = Answer {
    accepted: false,
    delta_base_missing: true,
};

async fn send(h: &Harness, token: &str, request: v1::PushContextStateRequest) -> Answer {
    let mut client = h.client.clone();
    let answer = client
        .push_context_state(with_bearer(request, token))
        .await
        .expect("push answered")
        .into_inner();
    Answer {
        accepted: answer.accepted,
        delta_base_missing: answer.delta_base_missing,
    }
}

/// `next` as a delta against the base `previous` left, asserting it omits `omitted` bodies.
fn delta(previous: &Snapshot, next: Snapshot, omitted: usize) -> v1::PushContextStateRequest {
    let base = DeltaBase::of_full(&previous.clone().into());
    let mut request = v1::PushContextStateRequest::from(next);
    base.into_delta(&mut request);
    let left_out = request
        .resources
        .iter()
        .filter(|r| r.body.is_none())
        .count();
    assert_eq!(left_out, omitted, "bodies left out of {request:#?}");
    request
}

/// The stored state of an agent, without what differs between two agents (ids, names,
/// clocks), so two agents fed the same pushes compare equal.
async fn stored(
    h: &Harness,
    agent: AgentId,
) -> (Option<(String, String, u64, Option<String>)>, Vec<Resource>) {
    let context = h.context(agent).await;
    let snapshot = context.snapshot.map(|s| {
        (
            format!(
                "{}:{}",
                RunId::edge(s.agent_run_id.as_ref()),
                s.phase.as_str()
            ),
            s.aggregate_hash,
            s.version,
            s.snapshot_error,
        )
    });
    (snapshot, context.resources)
}

async fn expect_event(
    events: &mut ctxsync_persistence::AgentSubscription,
    agent: AgentId,
    version: u64,
) {
    assert_eq!(
        next_event(events.next()).await,
        ChangeEvent::AgentContextChanged {
            agent_id: agent,
            snapshot_version: Some(version),
        }
    );
}

fn edited_workspace() -> Vec<Resource> {
    let mut resources = workspace();
    resources[0] = instruction("AGENTS.md", "Be brief. And kind.");
    resources.push(skill("new-skill", "Added later"));
    // One row gone: the config file.
    resources.retain(|r| r.source != ".mcp.json");
    resources
}

async fn the_server_offers_deltas_and_a_legacy_full_push_still_works(h: Harness) {
    let (agent, token) = h.agent("legacy").await;
    let answer = h.startup(&token, RUN).await.unwrap();
    assert_eq!(answer.delta_digest_scheme, DELTA_DIGEST_SCHEME);
    // An agent built before deltas sends full pushes without the new fields.
    let first = snapshot(1, Some(RUN), Pending, workspace());
    assert_eq!(send(&h, &token, first.into()).await, ACCEPTED);
    let second = snapshot(2, Some(RUN), Complete, edited_workspace());
    assert_eq!(send(&h, &token, second.clone().into()).await, ACCEPTED);
    assert_eq!(h.context(agent).await.resources, sorted(second.resources));
    assert_eq!(h.api.metrics().pushes_delta, 0);
}

async fn a_delta_stores_and_notifies_what_the_full_push_does(h: Harness) {
    let (full_agent, full_token) = h.agent("full").await;
    let (delta_agent, delta_token) = h.agent("delta").await;
    for token in [&full_token, &delta_token] {
        h.startup(token, RUN).await.unwrap();
    }
    let first = snapshot(1, Some(RUN), Pending, workspace());
    for token in [&full_token, &delta_token] {
        assert_eq!(send(&h, token, first.clone().into()).await, ACCEPTED);
    }
    let mut full_events = h.store().subscribe_agent(full_agent);
    let mut delta_events = h.store().subscribe_agent(delta_agent);

    // An edit, an added and a removed row, and the phase: one new body (the skill) and
    // one changed (AGENTS.md); the other two are left out.
    let mut second = snapshot(2, Some(RUN), Complete, edited_workspace());
    second.initial = false;
    assert_eq!(send(&h, &full_token, second.clone().into()).await, ACCEPTED);
    assert_eq!(
        send(&h, &delta_token, delta(&first, second.clone(), 2)).await,
        ACCEPTED
    );
    assert_eq!(stored(&h, delta_agent).await, stored(&h, full_agent).await);
    assert_eq!(
        h.context(delta_agent).await.resources,
        sorted(second.resources.clone())
    );
    expect_event(&mut full_events, full_agent, 2).await;
    expect_event(&mut delta_events, delta_agent, 2).await;

    // Phase only, as a delta that leaves every body out: stored and notified.
    let mut third = second.clone();
    third.version = 3;
    third.phase = Pending;
    let bodies = third.resources.len();
    assert_eq!(send(&h, &full_token, third.clone().into()).await, ACCEPTED);
    assert_eq!(
        send(&h, &delta_token, delta(&second, third, bodies)).await,
        ACCEPTED
    );
    assert_eq!(stored(&h, delta_agent).await, stored(&h, full_agent).await);
    expect_event(&mut full_events, full_agent, 3).await;
    expect_event(&mut delta_events, delta_agent, 3).await;
    assert_eq!(h.api.metrics().pushes_delta, 2);
}

async fn status_and_warning_changes_arrive_through_a_delta(h: Harness) {
    let (agent, token) = h.agent("status").await;
    h.startup(&token, RUN).await.unwrap();
    let first = snapshot(1, Some(RUN), Complete, workspace());
    assert_eq!(send(&h, &token, first.clone().into()).await, ACCEPTED);
    let mut events = h.store().subscribe_agent(agent);

    // The server keeps its tools but its connection failed: a retained connection's
    // warning on an OK row. The body is unchanged, so the delta leaves it out.
    let mut warned = first.clone();
    warned.version = 2;
    warned.initial = false;
    let server = warned
        .resources
        .iter_mut()
        .find(|r| r.source == "mcp:fs")
        .expect("the workspace has a server");
    server.error = Some("kept the previous connection: the server exited".into());
    let all = warned.resources.len();
    assert_eq!(
        send(&h, &token, delta(&first, warned.clone(), all)).await,
        ACCEPTED
    );
    assert_eq!(
        h.context(agent).await.resources,
        sorted(warned.resources.clone())
    );
    expect_event(&mut events, agent, 2).await;

    // The instruction file became unreadable while its last body stays the same.
    let mut unreadable = warned.clone();
    unreadable.version = 3;
    let file = unreadable
        .resources
        .iter_mut()
        .find(|r| r.source == "AGENTS.md")
        .unwrap();
    file.status = ResourceStatus::Unreadable;
    file.error = Some("permission denied".into());
    file.content_hash = String::new();
    assert_eq!(
        send(&h, &token, delta(&warned, unreadable.clone(), all)).await,
        ACCEPTED
    );
    let context = h.context(agent).await;
    assert_eq!(context.resources, sorted(unreadable.resources));
    expect_event(&mut events, agent, 3).await;
}

async fn a_delta_without_its_base_is_refused_and_the_full_push_follows(h: Harness) {
    let (agent, token) = h.agent("no-base").await;
    h.startup(&token, RUN).await.unwrap();
    let mut events = h.store().subscribe_agent(agent);

    // Nothing is stored yet (say, a restored database): every omitted body is missing.
    let first = snapshot(1, Some(RUN), Pending, workspace());
    let all = first.resources.len();
    assert_eq!(
        send(&h, &token, delta(&first, first.clone(), all)).await,
        BASE_MISSING
    );
    assert_eq!(
        h.context(agent).await.snapshot,
        None,
        "a refused delta writes nothing"
    );
    assert_eq!(h.api.metrics().pushes_delta_base_missing, 1);

    // The agent's full push of the same snapshot follows and is stored.
    assert_eq!(send(&h, &token, first.clone().into()).await, ACCEPTED);
    assert_eq!(
        h.context(agent).await.resources,
        sorted(first.resources.clone())
    );
    // The refusal notified nobody: the first event is the full push's.
    expect_event(&mut events, agent, 1).await;

    // A delta naming a source the server never stored is refused too.
    let mut extra = first.clone();
    extra.version = 2;
    extra.initial = false;
    extra.resources.push(instruction("docs/AGENTS.md", "More."));
    let mut request = v1::PushContextStateRequest::from(extra.clone());
    DeltaBase::of_full(&extra.into()).into_delta(&mut request);
    assert_eq!(send(&h, &token, request).await, BASE_MISSING);
    assert_eq!(h.context(agent).await.snapshot.map(|s| s.version), Some(1));
}

async fn a_delta_of_another_run_or_a_changed_row_is_refused(h: Harness) {
    let (agent, token) = h.agent("changed").await;
    h.startup(&token, RUN).await.unwrap();
    let first = snapshot(1, Some(RUN), Pending, workspace());
    assert_eq!(send(&h, &token, first.clone().into()).await, ACCEPTED);

    // Rows changed since the base the delta relies on (a push this agent did not see
    // answered): the delta's digests no longer match.
    let mut second = snapshot(2, Some(RUN), Pending, edited_workspace());
    second.initial = false;
    assert_eq!(send(&h, &token, second.clone().into()).await, ACCEPTED);
    let mut third = first.clone();
    third.version = 3;
    third.initial = false;
    let all = third.resources.len();
    assert_eq!(
        send(&h, &token, delta(&first, third.clone(), all)).await,
        BASE_MISSING
    );
    let (snapshot_now, rows) = stored(&h, agent).await;
    assert_eq!(snapshot_now.map(|s| s.2), Some(2));
    assert_eq!(rows, sorted(second.resources.clone()));
    assert_eq!(send(&h, &token, third.clone().into()).await, ACCEPTED);
    assert_eq!(
        h.context(agent).await.resources,
        sorted(third.resources.clone())
    );

    // A restarted process (another run) cannot build on its predecessor's rows, even
    // with the same bodies.
    h.startup(&token, OTHER_RUN).await.unwrap();
    let mut restarted = third.clone();
    restarted.version = 1;
    restarted.initial = true;
    restarted.agent_run_id = RunId::new(OTHER_RUN);
    assert_eq!(
        send(&h, &token, delta(&third, restarted.clone(), all)).await,
        BASE_MISSING
    );
    let context = h.context(agent).await;
    assert_eq!(
        context.snapshot.and_then(|s| s.agent_run_id),
        RunId::new(RUN)
    );
    assert_eq!(send(&h, &token, restarted.into()).await, ACCEPTED);
    let context = h.context(agent).await;
    assert_eq!(
        context.snapshot.and_then(|s| s.agent_run_id),
        RunId::new(OTHER_RUN)
    );
}

/// One random change to a workspace: an edit, a status or warning change, a row added
/// or removed, or the phase; `seed` picks it (a fixed sequence, so failures reproduce).
fn mutate(resources: &mut Vec<Resource>, step: u64, seed: &mut u64) {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let pick = (*seed >> 33) as usize;
    let index = pick % resources.len().max(1);
    match pick % 6 {
        0 => resources.push(instruction(&format!("docs/{step}/AGENTS.md"), "New.")),
        1 if resources.len() > 2 => {
            resources.remove(index);
        }
        2 => {
            let r = &mut resources[index];
            r.status = ResourceStatus::Unreadable;
            r.error = Some(format!("unreadable at step {step}"));
        }
        3 => resources[index].error = Some(format!("warning {step}")),
        4 => {
            let source = resources[index].source.clone();
            if let Some(name) = source.strip_prefix("mcp:") {
                resources[index] = mcp_server(name, &["read", &format!("tool{step}")]);
            } else {
                resources[index] = instruction(&source, &format!("edited at {step}"));
            }
        }
        _ => {
            let r = &mut resources[index];
            r.status = ResourceStatus::Ok;
            r.error = None;
        }
    }
}

async fn random_edits_store_the_same_through_deltas_and_full_pushes(h: Harness) {
    let (full_agent, full_token) = h.agent("full").await;
    let (delta_agent, delta_token) = h.agent("delta").await;
    for token in [&full_token, &delta_token] {
        h.startup(token, RUN).await.unwrap();
    }
    let mut previous = snapshot(1, Some(RUN), Pending, workspace());
    for token in [&full_token, &delta_token] {
        assert_eq!(send(&h, token, previous.clone().into()).await, ACCEPTED);
    }
    let mut seed = 19;
    let mut resources = previous.resources.clone();
    for step in 2..=24u64 {
        mutate(&mut resources, step, &mut seed);
        let phase = if step > 12 { Complete } else { Pending };
        let mut next = snapshot(step, Some(RUN), phase, resources.clone());
        next.initial = false;
        let mut request = v1::PushContextStateRequest::from(next.clone());
        DeltaBase::of_full(&previous.clone().into()).into_delta(&mut request);
        assert_eq!(send(&h, &full_token, next.clone().into()).await, ACCEPTED);
        assert_eq!(
            send(&h, &delta_token, request).await,
            ACCEPTED,
            "step {step}"
        );
        assert_eq!(
            stored(&h, delta_agent).await,
            stored(&h, full_agent).await,
            "step {step}"
        );
        previous = next;
    }
    assert_eq!(h.context(delta_agent).await.resources, sorted(resources));
    assert_eq!(h.api.metrics().pushes_delta, 23);
}

/// The resource changes an accepted push reports.
async fn pushed(h: &Harness, agent: AgentId, snapshot: Snapshot) -> ResourceChanges {
    match h.store().push_context_state(agent, snapshot).await.unwrap() {
        PushOutcome::Accepted(changes) => changes.resources,
        other => panic!("push not accepted: {other:?}"),
    }
}

/// A push whose resources hash as the stored ones (issue 39) skips reading and comparing
/// rows: it must still report every row unchanged, and any one field of any one row
/// (path, status, error, size, content hash, body), a row more or less, or another run
/// must take the full comparison and store it.
async fn a_push_with_the_stored_fingerprints_rewrites_no_row_and_any_field_counts(h: Harness) {
    let (agent, token) = h.agent("fingerprints").await;
    h.startup(&token, RUN).await.unwrap();
    let rows = workspace().len();
    let inserted = pushed(&h, agent, snapshot(1, Some(RUN), Pending, workspace())).await;
    assert_eq!(inserted.inserted, rows);
    let unchanged = ResourceChanges {
        unchanged: rows,
        ..ResourceChanges::default()
    };
    // The phase alone, then the same snapshot again (as a reconnect sends it).
    let mut next = snapshot(2, Some(RUN), Complete, workspace());
    next.initial = false;
    assert_eq!(pushed(&h, agent, next.clone()).await, unchanged);
    next.version = 3;
    assert_eq!(pushed(&h, agent, next.clone()).await, unchanged);

    type Edit = fn(&mut Resource);
    let edits: [(&str, Edit); 6] = [
        ("path", |r| {
            r.source_path = Some("/elsewhere/AGENTS.md".into())
        }),
        ("status", |r| r.status = ResourceStatus::Unreadable),
        ("error", |r| r.error = Some("permission denied".into())),
        ("size", |r| r.size_bytes += 1),
        ("content hash", |r| r.content_hash = "f".repeat(64)),
        ("body", |r| {
            *r = instruction("AGENTS.md", "Be brief. Really.")
        }),
    ];
    for (field, edit) in edits {
        next.version += 1;
        edit(&mut next.resources[0]);
        let changes = pushed(&h, agent, next.clone()).await;
        assert_eq!(changes.updated, 1, "{field}: {changes:?}");
        assert_eq!(
            h.context(agent).await.resources,
            sorted(next.resources.clone()),
            "{field}"
        );
        next.version += 1;
        assert_eq!(pushed(&h, agent, next.clone()).await, unchanged, "{field}");
    }

    next.version += 1;
    let removed = next.resources.pop().unwrap();
    assert_eq!(pushed(&h, agent, next.clone()).await.deleted, 1);
    next.version += 1;
    next.resources.push(removed);
    assert_eq!(pushed(&h, agent, next.clone()).await.inserted, 1);
    assert_eq!(
        h.context(agent).await.resources,
        sorted(next.resources.clone())
    );

    // Another run compares its rows in full (it reports its servers' connects anew).
    h.startup(&token, OTHER_RUN).await.unwrap();
    let restarted = snapshot(1, Some(OTHER_RUN), Complete, next.resources.clone());
    assert_eq!(pushed(&h, agent, restarted).await, unchanged);
}
