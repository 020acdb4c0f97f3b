//! The store adapter end to end on SQLite and PostgreSQL: the phase table and the
//! freshness rule through real UpdateStartup and push writes, a deleted agent, chat
//! pinning, and that a view never pairs one process's agent row with another's snapshot.

use crate::common;

use common::{failed, instruction_file, server};
use ctxsync_chat_projection::store::{agent_phase_counts, load_agent_view, load_chat};
use ctxsync_chat_projection::{Binding, View, project};
use ctxsync_persistence::test_support::TestStore;
use ctxsync_persistence::{AgentId, Store};
use ctxsync_protocol::DiscoveryPhase::{self, Complete, Pending, Unspecified};
use ctxsync_protocol::{Resource, ResourceBody, RunId, Snapshot};
use ctxsync_test_support::push_accepted as push;

ctxsync_test_support::on_both_backends! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    open = ctxsync_test_support::store;
    phase_table,
    freshness_rule,
    a_deleted_agent_is_unknown_and_stale,
    chats_pin_files_and_read_mcp_live,
    agent_rows_and_snapshots_are_never_mixed_across_stores,
    aggregate_counts_agree_with_every_agents_view,
}

/// One line saying everything the phase and freshness rules decide.
fn describe(view: &View) -> String {
    let tools: Vec<&str> = view.tools().iter().map(|t| t.name.as_str()).collect();
    format!(
        "agent={} phase={} stale={} incomplete={} tools=[{}]",
        serde_json::to_value(view.agent())
            .expect("serializes")
            .as_str()
            .unwrap_or("?"),
        view.phase().as_str(),
        view.is_stale(),
        view.incomplete(),
        tools.join(",")
    )
}

async fn check(store: &Store, agent: AgentId, expect: &str) {
    let view = load_agent_view(store, agent).await.expect("load view");
    assert_eq!(describe(&view), expect);
}

async fn new_agent(store: &Store, name: &str) -> AgentId {
    store.create_agent(name).await.expect("create agent").id
}

/// UpdateStartup as process `run` (`""`: a legacy agent).
async fn start(store: &Store, agent: AgentId, run: &str) {
    ctxsync_test_support::start_run(store, agent, run, "1.0.0").await;
}

/// A snapshot stamped with `run` (`""`: none), its aggregate hash derived from the
/// instruction files so a change to them moves it.
fn snapshot(version: u64, run: &str, phase: DiscoveryPhase, resources: Vec<Resource>) -> Snapshot {
    let files: Vec<String> = resources
        .iter()
        .filter_map(|r| match &r.body {
            ResourceBody::InstructionFile(body) => Some(format!("{}={}", r.source, body.content)),
            _ => None,
        })
        .collect();
    Snapshot {
        aggregate_hash: format!("agg[{}]", files.join(";")),
        ..ctxsync_test_support::snapshot(version, run, phase, resources)
    }
}

fn fs() -> Vec<Resource> {
    vec![server("fs", &["read"])]
}

async fn phase_table(db: TestStore) {
    let store = db.store();
    let chat = store.create_chat(None).await.expect("create chat");
    let loaded = load_chat(store, chat.id)
        .await
        .expect("load chat")
        .expect("chat exists");
    assert_eq!(loaded.binding, Binding::NoAgent);
    assert_eq!(
        describe(loaded.context.mcp()),
        "agent=unbound phase=unknown stale=false incomplete=false tools=[]"
    );

    // A legacy agent (empty row run id) that has not reported gives no guarantee.
    let legacy = new_agent(store, "legacy").await;
    check(
        store,
        legacy,
        "agent=no_snapshot phase=unknown stale=false incomplete=false tools=[]",
    )
    .await;

    // A current agent that has not reported yet is still initializing.
    let agent = new_agent(store, "current").await;
    start(store, agent, "run-1").await;
    check(
        store,
        agent,
        "agent=no_snapshot phase=pending stale=false incomplete=true tools=[]",
    )
    .await;
    // MCP discovery off in the current run: no guarantee, tools still offered.
    push(store, agent, snapshot(1, "run-1", Unspecified, fs())).await;
    check(
        store,
        agent,
        "agent=reported phase=unknown stale=false incomplete=false tools=[fs__read]",
    )
    .await;
    // Pending is incomplete but keeps the tools already found.
    push(store, agent, snapshot(2, "run-1", Pending, fs())).await;
    check(
        store,
        agent,
        "agent=reported phase=pending stale=false incomplete=true tools=[fs__read]",
    )
    .await;
    push(store, agent, snapshot(3, "run-1", Complete, fs())).await;
    check(
        store,
        agent,
        "agent=reported phase=complete stale=false incomplete=false tools=[fs__read]",
    )
    .await;
}

async fn freshness_rule(db: TestStore) {
    let store = db.store();

    // Same run, then a restart: run-1's snapshot under run-2 withholds every tool but
    // keeps the diagnostics; run-2's push makes it fresh again.
    let agent = new_agent(store, "restarting").await;
    start(store, agent, "run-1").await;
    let mut resources = fs();
    resources.push(failed("broken", Some("command not found: brokend")));
    push(store, agent, snapshot(1, "run-1", Complete, resources)).await;
    check(
        store,
        agent,
        "agent=reported phase=complete stale=false incomplete=true tools=[fs__read]",
    )
    .await;
    start(store, agent, "run-2").await;
    let view = load_agent_view(store, agent).await.expect("load view");
    assert_eq!(
        describe(&view),
        "agent=reported phase=complete stale=true incomplete=true tools=[]"
    );
    let servers: Vec<(&str, bool)> = view
        .servers()
        .iter()
        .map(|s| (s.name.as_str(), s.ok))
        .collect();
    assert_eq!(servers, [("broken", false), ("fs", true)]);
    assert_eq!(view.counts().servers_failed, 1);
    push(store, agent, snapshot(1, "run-2", Complete, fs())).await;
    check(
        store,
        agent,
        "agent=reported phase=complete stale=false incomplete=false tools=[fs__read]",
    )
    .await;

    // A legacy process's snapshot under a current agent.
    let agent = new_agent(store, "upgraded").await;
    push(store, agent, snapshot(1, "", Unspecified, fs())).await;
    start(store, agent, "run-1").await;
    check(
        store,
        agent,
        "agent=reported phase=unknown stale=true incomplete=true tools=[]",
    )
    .await;

    // A newer process's snapshot under an agent row a legacy process cleared.
    let agent = new_agent(store, "downgraded").await;
    start(store, agent, "run-1").await;
    push(store, agent, snapshot(1, "run-1", Complete, fs())).await;
    start(store, agent, "").await;
    check(
        store,
        agent,
        "agent=reported phase=complete stale=true incomplete=true tools=[]",
    )
    .await;

    // Both empty: fresh, with no guarantee.
    let agent = new_agent(store, "legacy").await;
    start(store, agent, "").await;
    push(store, agent, snapshot(1, "", Unspecified, fs())).await;
    check(
        store,
        agent,
        "agent=reported phase=unknown stale=false incomplete=false tools=[fs__read]",
    )
    .await;
}

async fn a_deleted_agent_is_unknown_and_stale(db: TestStore) {
    let store = db.store();
    let agent = new_agent(store, "doomed").await;
    start(store, agent, "run-1").await;
    let resources = vec![
        instruction_file("AGENTS.md", "be kind"),
        server("fs", &["read"]),
    ];
    push(store, agent, snapshot(1, "run-1", Complete, resources)).await;
    let chat = store.create_chat(Some(agent)).await.expect("create chat");
    store.delete_agent(agent).await.expect("delete agent");

    let missing = "agent=missing phase=unknown stale=true incomplete=true tools=[]";
    check(store, agent, missing).await;
    let loaded = load_chat(store, chat.id)
        .await
        .expect("a missing agent is no error")
        .expect("the chat stays");
    assert_eq!(loaded.binding, Binding::MissingAgent);
    assert_eq!(describe(loaded.context.mcp()), missing);
    assert!(
        loaded.context.mcp().summary().contains("no longer exists"),
        "{}",
        loaded.context.mcp().summary()
    );
    // The chat keeps the files it pinned while the agent existed.
    let pinned = loaded.context.pinned().expect("still pinned");
    assert_eq!(pinned.instruction_files().count(), 1);
}

async fn chats_pin_files_and_read_mcp_live(db: TestStore) {
    let store = db.store();
    let agent = new_agent(store, "agent").await;
    start(store, agent, "run-1").await;
    let chat = store
        .create_chat(Some(agent))
        .await
        .expect("create chat")
        .id;

    let loaded = load_chat(store, chat).await.expect("load").expect("exists");
    assert!(loaded.context.pinned().is_none(), "nothing to pin yet");
    assert_eq!(loaded.context.mcp().phase().as_str(), "pending");

    // The first snapshot the chat sees is pinned (files and skills, never MCP rows).
    let first = vec![
        instruction_file("AGENTS.md", "version one"),
        server("fs", &["read"]),
    ];
    let first = snapshot(1, "run-1", Pending, first);
    let first_hash = first.aggregate_hash.clone();
    push(store, agent, first).await;
    let loaded = load_chat(store, chat).await.expect("load").expect("exists");
    let pin = loaded.context.pinned().expect("pinned");
    assert_eq!(pin.aggregate_hash(), first_hash);
    let sources: Vec<&str> = pin.resources().iter().map(|r| r.source.as_str()).collect();
    assert_eq!(sources, ["AGENTS.md"]);
    assert!(
        loaded.context.newly_pinned().is_none(),
        "the store pinned it"
    );
    assert!(!loaded.context.is_dirty());
    assert_eq!(
        load_chat(store, chat).await.expect("load").expect("exists"),
        loaded,
        "loads are stable"
    );

    // Files change and a server appears: the pin stays (dirty), MCP is read live.
    let second = vec![
        instruction_file("AGENTS.md", "version two"),
        server("fs", &["read"]),
        server("git", &["log"]),
    ];
    push(store, agent, snapshot(2, "run-1", Complete, second)).await;
    let loaded = load_chat(store, chat).await.expect("load").expect("exists");
    let pin = loaded.context.pinned().expect("pinned");
    assert_eq!(pin.aggregate_hash(), first_hash);
    assert!(loaded.context.is_dirty());
    assert!(loaded.chat.is_dirty(), "persistence marked it");
    assert_eq!(
        describe(loaded.context.mcp()),
        "agent=reported phase=complete stale=false incomplete=false tools=[fs__read,git__log]"
    );

    store.refresh_chat(chat).await.expect("refresh");
    let loaded = load_chat(store, chat).await.expect("load").expect("exists");
    assert!(!loaded.context.is_dirty());
    let (_, body) = loaded
        .context
        .pinned()
        .expect("pinned")
        .instruction_files()
        .next()
        .expect("one file");
    assert_eq!(body.content, "version two");

    // An unknown chat is no error.
    let unknown = ctxsync_persistence::ChatId::new_random();
    assert!(load_chat(store, unknown).await.expect("load").is_none());
}

/// Restarts the agent `RESTARTS` times through a second store (UpdateStartup run-k, then
/// a complete push of run-k whose rows are all tagged k) while the first store loads
/// views in a loop. Every load is one process's committed state: the snapshot is the
/// row's run (fresh, with that run's tool) or the run just before it (stale, no tools);
/// never a snapshot newer than the row, and never rows of another run.
async fn agent_rows_and_snapshots_are_never_mixed_across_stores(db: TestStore) {
    const RESTARTS: u32 = 25;
    let store = db.store().clone();
    let other = db.open_another().await;
    let agent = new_agent(&store, "restarting").await;
    let resources = |k: u32| {
        vec![
            instruction_file("AGENTS.md", &format!("run {k}")),
            server(&format!("srv-{k}"), &["probe"]),
        ]
    };
    start(&store, agent, "run-0").await;
    push(&store, agent, snapshot(1, "run-0", Complete, resources(0))).await;

    let writer = tokio::spawn(async move {
        for k in 1..=RESTARTS {
            let run = format!("run-{k}");
            start(&other, agent, &run).await;
            push(&other, agent, snapshot(1, &run, Complete, resources(k))).await;
        }
    });

    let run_number = |run: &str| -> u32 {
        run.strip_prefix("run-")
            .and_then(|k| k.parse().ok())
            .unwrap_or_else(|| panic!("unexpected run id {run:?}"))
    };
    let (mut fresh, mut stale, mut loads) = (0u32, 0u32, 0u32);
    let mut writer_done = false;
    while !writer_done {
        writer_done = writer.is_finished();
        // The consistent read itself, to see which run each part came from.
        let binding = Binding::from_read(
            store
                .read_agent_context(agent)
                .await
                .expect("read agent context"),
        );
        let Binding::Agent(state) = &binding else {
            panic!("the agent exists: {binding:?}");
        };
        let row = run_number(RunId::edge(state.agent_run_id.as_ref()));
        let snapshot = state.snapshot.as_ref().expect("pushed before the loop");
        let snap = run_number(RunId::edge(snapshot.agent_run_id.as_ref()));
        assert!(
            snap == row || snap + 1 == row,
            "agent row run-{row} paired with snapshot run-{snap}"
        );
        for resource in &snapshot.resources {
            let tagged = match &resource.body {
                ResourceBody::InstructionFile(body) => body.content == format!("run {snap}"),
                ResourceBody::McpServer(body) => body.server_name == format!("srv-{snap}"),
                _ => false,
            };
            assert!(
                tagged,
                "snapshot run-{snap} with a row of another run: {resource:?}"
            );
        }
        let expected = if snap == row {
            format!(
                "agent=reported phase=complete stale=false incomplete=false tools=[srv-{snap}__probe]"
            )
        } else {
            "agent=reported phase=complete stale=true incomplete=true tools=[]".to_owned()
        };
        assert_eq!(describe(&project(&binding)), expected);

        // And the adapter's own load: fresh with one run's tool, or stale with none.
        let view = load_agent_view(&store, agent).await.expect("load view");
        if view.is_stale() {
            stale += 1;
            assert!(view.tools().is_empty());
            assert_eq!(view.servers().len(), 1);
        } else {
            fresh += 1;
            let tools: Vec<&str> = view.tools().iter().map(|t| t.name.as_str()).collect();
            assert_eq!(tools.len(), 1, "{tools:?}");
            assert!(
                tools[0].starts_with("srv-") && tools[0].ends_with("__probe"),
                "{tools:?}"
            );
        }
        loads += 1;
    }
    writer.await.expect("writer");
    assert!(
        loads > 0 && fresh > 0,
        "loads={loads} fresh={fresh} stale={stale}"
    );
    check(
        &store,
        agent,
        &format!(
            "agent=reported phase=complete stale=false incomplete=false tools=[srv-{RESTARTS}__probe]"
        ),
    )
    .await;
}

/// `/metrics`' one aggregate query counts every agent exactly as its own view would,
/// in every state the phase table and the freshness rule distinguish.
async fn aggregate_counts_agree_with_every_agents_view(db: TestStore) {
    let store = db.store();
    // Legacy without a snapshot; current without one; legacy with an unstamped one.
    new_agent(store, "legacy").await;
    let current = new_agent(store, "current").await;
    start(store, current, "run-1").await;
    let old = new_agent(store, "old").await;
    push(store, old, snapshot(1, "", Unspecified, fs())).await;
    // Fresh pending, fresh complete (twice), and complete but stale after a restart.
    for (name, phase, restarted) in [
        ("pending", Pending, false),
        ("complete-a", Complete, false),
        ("complete-b", Complete, false),
        ("restarted", Complete, true),
    ] {
        let agent = new_agent(store, name).await;
        start(store, agent, "run-1").await;
        push(store, agent, snapshot(1, "run-1", phase, fs())).await;
        if restarted {
            start(store, agent, "run-2").await;
        }
    }

    let mut expected: Vec<(String, bool, u64)> = Vec::new();
    for agent in store.list_agents().await.expect("list agents") {
        let view = load_agent_view(store, agent.id).await.expect("load view");
        let key = (view.phase().as_str().to_owned(), view.is_stale());
        match expected.iter_mut().find(|(p, s, _)| (p.clone(), *s) == key) {
            Some((_, _, count)) => *count += 1,
            None => expected.push((key.0, key.1, 1)),
        }
    }
    expected.sort();
    let counted: Vec<(String, bool, u64)> = agent_phase_counts(store)
        .await
        .expect("aggregate")
        .into_iter()
        .map(|(phase, stale, count)| (phase.as_str().to_owned(), stale, count))
        .collect();
    assert_eq!(counted, expected);
    assert_eq!(
        counted,
        [
            ("complete".to_owned(), false, 2),
            ("complete".to_owned(), true, 1),
            ("pending".to_owned(), false, 2),
            ("unknown".to_owned(), false, 2),
        ]
    );
}
