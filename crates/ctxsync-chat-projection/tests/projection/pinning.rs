//! Chat context pinning: files and skills come from the chat's pin, MCP servers always
//! from the live view through the freshness rule, never from the pin.

use crate::common;

use common::*;
use ctxsync_chat_projection::{Binding, ChatContext, PinnedContext, SnapshotState};
use ctxsync_protocol::DiscoveryPhase::Complete;

fn live(
    hash: &str,
    row_run: &str,
    snapshot_run: &str,
    servers: &[&str],
) -> (Binding, SnapshotState) {
    let mut resources = vec![instruction_file("AGENTS.md", hash), skill("deploy")];
    resources.extend(servers.iter().map(|s| server(s, &["t"])));
    let mut snap = snapshot(snapshot_run, Complete, resources);
    snap.aggregate_hash = hash.to_owned();
    (agent(row_run, Some(snap.clone())), snap)
}

/// `pinned=<hash or none> new=<bool> dirty=<bool> files=[..] skills=[..] tools=[..]`.
fn describe(context: &ChatContext) -> String {
    let pin = context.pinned();
    let files: Vec<String> = pin
        .map(|p| {
            p.instruction_files()
                .map(|(r, body)| format!("{}={}", r.source, body.content))
                .collect()
        })
        .unwrap_or_default();
    let skills: Vec<&str> = pin
        .map(|p| p.skills().map(|(_, body)| body.name.as_str()).collect())
        .unwrap_or_default();
    let tools: Vec<&str> = context
        .mcp()
        .tools()
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    format!(
        "pinned={} new={} dirty={} files=[{}] skills=[{}] tools=[{}]",
        pin.map_or("none", PinnedContext::aggregate_hash),
        context.newly_pinned().is_some(),
        context.is_dirty(),
        files.join(","),
        skills.join(","),
        tools.join(",")
    )
}

fn check(pin: Option<PinnedContext>, live: &Binding, expect: &str) {
    assert_eq!(describe(&ChatContext::new(pin, live)), expect);
}

#[test]
fn first_sight_pins_files_and_skills_but_never_mcp_rows() {
    let (binding, snap) = live("h1", "run-1", "run-1", &["fs"]);
    check(
        None,
        &binding,
        "pinned=h1 new=true dirty=false files=[AGENTS.md=h1] skills=[deploy] tools=[fs__t]",
    );
    assert_eq!(PinnedContext::pin(&snap).resources().len(), 2);
    // Nothing to pin before the first snapshot, nor without an agent.
    check(
        None,
        &agent("run-1", None),
        "pinned=none new=false dirty=false files=[] skills=[] tools=[]",
    );
    check(
        None,
        &Binding::NoAgent,
        "pinned=none new=false dirty=false files=[] skills=[] tools=[]",
    );
}

#[test]
fn files_stay_pinned_while_mcp_is_read_live() {
    let (_, old) = live("h1", "run-1", "run-1", &["fs"]);
    let pin = PinnedContext::pin(&old);
    // Same files, different servers: MCP follows the live snapshot, the pin is clean.
    let (binding, _) = live("h1", "run-2", "run-2", &["git"]);
    check(
        Some(pin.clone()),
        &binding,
        "pinned=h1 new=false dirty=false files=[AGENTS.md=h1] skills=[deploy] tools=[git__t]",
    );
    // Files changed: the pinned copy stays and the chat is dirty.
    let (binding, _) = live("h2", "run-2", "run-2", &["git"]);
    check(
        Some(pin.clone()),
        &binding,
        "pinned=h1 new=false dirty=true files=[AGENTS.md=h1] skills=[deploy] tools=[git__t]",
    );
    // The live snapshot is stale: its tools are withheld even though a pin exists.
    let (binding, _) = live("h1", "run-3", "run-2", &["git"]);
    check(
        Some(pin.clone()),
        &binding,
        "pinned=h1 new=false dirty=false files=[AGENTS.md=h1] skills=[deploy] tools=[]",
    );
    // The agent is gone: the pin is kept, no tools.
    check(
        Some(pin),
        &Binding::MissingAgent,
        "pinned=h1 new=false dirty=false files=[AGENTS.md=h1] skills=[deploy] tools=[]",
    );
}

#[test]
fn the_stored_dirty_flag_holds_until_refresh() {
    let (binding, snap) = live("h1", "run-1", "run-1", &[]);
    let stored = PinnedContext::from_stored("h1".into(), true, snap.resources.clone());
    assert!(stored.is_marked_dirty());
    check(
        Some(stored),
        &binding,
        "pinned=h1 new=false dirty=true files=[AGENTS.md=h1] skills=[deploy] tools=[]",
    );
    // Refresh re-pins the live snapshot, clean.
    let (binding, snap) = live("h2", "run-1", "run-1", &[]);
    let refreshed = PinnedContext::pin(&snap);
    assert!(!refreshed.is_marked_dirty());
    check(
        Some(refreshed),
        &binding,
        "pinned=h2 new=false dirty=false files=[AGENTS.md=h2] skills=[deploy] tools=[]",
    );
}

#[test]
fn stored_mcp_rows_are_never_part_of_a_pin() {
    let stored = PinnedContext::from_stored(
        "h1".into(),
        false,
        vec![
            instruction_file("AGENTS.md", "x"),
            server("fs", &["read"]),
            config(".mcp.json", ctxsync_protocol::ResourceStatus::Ok, None),
        ],
    );
    let sources: Vec<&str> = stored
        .resources()
        .iter()
        .map(|r| r.source.as_str())
        .collect();
    assert_eq!(sources, ["AGENTS.md"]);
    // With no live snapshot, nothing offers the pinned-looking server.
    check(
        Some(stored),
        &agent("run-1", None),
        "pinned=h1 new=false dirty=false files=[AGENTS.md=x] skills=[] tools=[]",
    );
}
