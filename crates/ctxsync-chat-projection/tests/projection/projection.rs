//! The projection of SPEC §7: the phase table, the freshness rule, a missing agent,
//! outcomes and counts, and the exact model note.

use crate::common;

use common::*;
use ctxsync_chat_projection::{Binding, Connection, View, project};
use ctxsync_protocol::DiscoveryPhase::{Complete, Pending, Unspecified};
use ctxsync_protocol::ResourceStatus;
use serde_json::json;

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

fn check(binding: Binding, expect: &str) {
    assert_eq!(describe(&project(&binding)), expect);
}

#[test]
fn phase_table() {
    let fs = || vec![server("fs", &["read"])];
    check(
        Binding::NoAgent,
        "agent=unbound phase=unknown stale=false incomplete=false tools=[]",
    );
    // A legacy agent (empty row run id) that has not reported gives no guarantee.
    check(
        agent("", None),
        "agent=no_snapshot phase=unknown stale=false incomplete=false tools=[]",
    );
    // A current agent that has not reported yet is still initializing.
    check(
        agent("run-1", None),
        "agent=no_snapshot phase=pending stale=false incomplete=true tools=[]",
    );
    check(
        agent("", Some(snapshot("", Unspecified, fs()))),
        "agent=reported phase=unknown stale=false incomplete=false tools=[fs__read]",
    );
    // Pending is incomplete but does not withhold tools already found.
    check(
        agent("run-1", Some(snapshot("run-1", Pending, fs()))),
        "agent=reported phase=pending stale=false incomplete=true tools=[fs__read]",
    );
    check(
        agent("run-1", Some(snapshot("run-1", Complete, fs()))),
        "agent=reported phase=complete stale=false incomplete=false tools=[fs__read]",
    );
}

#[test]
fn freshness_compares_run_ids() {
    let fs = || vec![server("fs", &["read"])];
    check(
        agent("run-1", Some(snapshot("run-1", Complete, fs()))),
        "agent=reported phase=complete stale=false incomplete=false tools=[fs__read]",
    );
    // The agent restarted (run-2) and the stored snapshot is run-1's.
    check(
        agent("run-2", Some(snapshot("run-1", Complete, fs()))),
        "agent=reported phase=complete stale=true incomplete=true tools=[]",
    );
    // A legacy process's snapshot under a current agent.
    check(
        agent("run-1", Some(snapshot("", Unspecified, fs()))),
        "agent=reported phase=unknown stale=true incomplete=true tools=[]",
    );
    // A current process's snapshot under an agent row a legacy process cleared since.
    check(
        agent("", Some(snapshot("run-2", Pending, fs()))),
        "agent=reported phase=pending stale=true incomplete=true tools=[]",
    );
    // Two empty ids are fresh: no guarantee, but nothing says the tools are gone.
    check(
        agent("", Some(snapshot("", Unspecified, fs()))),
        "agent=reported phase=unknown stale=false incomplete=false tools=[fs__read]",
    );
}

#[test]
fn a_missing_agent_is_unknown_and_stale_without_failing() {
    let view = project(&Binding::MissingAgent);
    assert_eq!(
        describe(&view),
        "agent=missing phase=unknown stale=true incomplete=true tools=[]"
    );
    assert!(view.servers().is_empty() && view.configs().is_empty());
    assert_eq!(
        view.summary(),
        "Workspace MCP: the workspace agent bound to this chat no longer exists, so no MCP tools are available."
    );
}

#[test]
fn stale_withholds_every_tool_but_keeps_diagnostics() {
    let fresh = project(&agent("run-1", Some(snapshot("run-1", Complete, mix()))));
    let stale = project(&agent("run-2", Some(snapshot("run-1", Complete, mix()))));
    assert_eq!(fresh.tools().len(), 3);
    assert!(stale.tools().is_empty());
    assert_eq!(stale.servers(), fresh.servers());
    assert_eq!(stale.configs(), fresh.configs());
    assert_eq!(stale.counts(), fresh.counts());
    assert_eq!(
        stale.summary(),
        "Workspace MCP: tools from a previous agent process are withheld until the current process reports; the servers below are as that previous process reported them. \
         Discovered servers: empty (0 tools), fs (2 tools), warned (1 tool; warning: reconnect with the updated configuration failed; tools are from the previous connection: exit status 1). \
         Failed servers: broken (error: command not found: brokend). \
         Invalid config files: /ws/.mcp.json (error: mcpServers.bad: neither command nor url)."
    );
}

#[test]
fn complete_without_issues_is_not_incomplete_and_adds_no_note() {
    let view = project(&agent(
        "run-1",
        Some(snapshot(
            "run-1",
            Complete,
            vec![
                server("fs", &["read", "write"]),
                server("empty", &[]),
                // A warning on an OK config row is shown but is not a failure.
                config(
                    ".mcp.json",
                    ResourceStatus::Ok,
                    Some("duplicate server `fs` ignored"),
                ),
            ],
        )),
    ));
    assert!(!view.incomplete());
    assert_eq!(view.model_note(), None);
    let context = "<workspace-context>\nAGENTS.md\n</workspace-context>";
    assert_eq!(view.with_model_note(context), context);
    assert_eq!(
        view.summary(),
        "Workspace MCP: discovery is complete. Discovered servers: empty (0 tools), fs (2 tools). \
         Config file warnings: /ws/.mcp.json (warning: duplicate server `fs` ignored)."
    );
}

#[test]
fn outcomes_counts_and_note_for_the_mix() {
    let view = project(&agent("run-1", Some(snapshot("run-1", Complete, mix()))));
    let json = serde_json::to_value(&view).expect("the view serializes");
    assert_eq!(
        json["servers"],
        json!([
            {"name": "broken", "ok": false, "tool_count": 0, "diagnostic": "command not found: brokend"},
            {"name": "empty", "ok": true, "tool_count": 0, "diagnostic": null},
            {"name": "fs", "ok": true, "tool_count": 2, "diagnostic": null},
            {"name": "warned", "ok": true, "tool_count": 1, "diagnostic": "reconnect with the updated configuration failed; tools are from the previous connection: exit status 1"},
        ])
    );
    assert_eq!(
        json["configs"],
        json!([{"path": "/ws/.mcp.json", "ok": false, "diagnostic": "mcpServers.bad: neither command nor url"}])
    );
    assert_eq!(
        json["counts"],
        json!({"servers_ok": 2, "servers_empty": 1, "servers_failed": 1, "servers_needing_authorization": 0, "config_errors": 1})
    );
    assert_eq!(
        (
            json["agent"].clone(),
            json["phase"].clone(),
            json["stale"].clone(),
            json["incomplete"].clone()
        ),
        (
            json!("reported"),
            json!("complete"),
            json!(false),
            json!(true)
        )
    );
    let tools: Vec<&str> = view.tools().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(tools, ["fs__read", "fs__write", "warned__ping"]);
    assert_eq!(json["tools"][2]["server"], "warned");
    assert_eq!(json["tools"][2]["tool"], "ping");
    assert_eq!(json["tools"][2]["description"], "Ping");
    assert_eq!(view.tools().resolve("fs__write"), Some(("fs", "write")));

    let note = "Workspace MCP: discovery is complete. \
        Discovered servers: empty (0 tools), fs (2 tools), warned (1 tool; warning: reconnect with the updated configuration failed; tools are from the previous connection: exit status 1). \
        Failed servers: broken (error: command not found: brokend). \
        Invalid config files: /ws/.mcp.json (error: mcpServers.bad: neither command nor url).";
    assert_eq!(view.summary(), note);
    ctxsync_test_support::assert_in_words(note);
    for server in json["servers"].as_array().into_iter().flatten() {
        ctxsync_test_support::assert_in_words(server["diagnostic"].as_str().unwrap_or_default());
    }
    assert_eq!(view.model_note().as_deref(), Some(note));
    assert_eq!(
        view.with_model_note(
            "You help.\n<workspace-context>\nAGENTS.md: be kind\n</workspace-context>\n"
        ),
        format!(
            "You help.\n<workspace-context>\nAGENTS.md: be kind\n{note}\n</workspace-context>\n"
        )
    );
    assert_eq!(
        view.with_model_note("You help."),
        format!("You help.\n<workspace-context>\n{note}\n</workspace-context>")
    );
}

#[test]
fn state_sentences() {
    let check_summary = |binding: Binding, expect: &str| {
        assert_eq!(project(&binding).summary(), expect);
        ctxsync_test_support::assert_in_words(expect);
    };
    check_summary(
        Binding::NoAgent,
        "Workspace MCP: no workspace agent is bound to this chat, so no MCP tools are available.",
    );
    check_summary(
        agent("run-1", None),
        "Workspace MCP: discovery is still initializing; more servers may appear. No servers reported yet.",
    );
    check_summary(
        agent("", None),
        "Workspace MCP: discovery status is unknown (this agent gives no completeness guarantee).",
    );
    check_summary(
        agent(
            "run-1",
            Some(snapshot("run-1", Pending, vec![server("fs", &["read"])])),
        ),
        "Workspace MCP: discovery is still initializing; more servers may appear. Discovered servers: fs (1 tool).",
    );
    check_summary(
        agent("run-1", Some(snapshot("run-1", Complete, vec![]))),
        "Workspace MCP: discovery is complete. No servers were discovered.",
    );
    check_summary(
        agent("", Some(snapshot("", Unspecified, vec![failed("x", None)]))),
        "Workspace MCP: discovery status is unknown (this agent gives no completeness guarantee). \
         Failed servers: x (error: status unreadable with no diagnostic reported).",
    );
}

#[test]
fn a_failed_plugin_server_is_named_in_the_note_like_any_other() {
    let binding = agent(
        "run-1",
        Some(snapshot(
            "run-1",
            Complete,
            vec![
                server("kit/search", &["find"]),
                failed("kit/db", Some("command not found: db-server")),
                failed("local", Some("no response within 30 s")),
            ],
        )),
    );
    assert_eq!(
        project(&binding).summary(),
        "Workspace MCP: discovery is complete. Discovered servers: kit/search (1 tool). \
         Failed servers: kit/db (error: command not found: db-server), local (error: no response within 30 s).",
    );
}

#[test]
fn a_server_that_needs_a_sign_in_is_told_apart_from_a_failed_one() {
    let mut github = failed("github", Some("the server answered 401 Unauthorized"));
    github.status = ResourceStatus::NeedsAuthorization;
    let binding = agent(
        "run-1",
        Some(snapshot(
            "run-1",
            Complete,
            vec![server("fs", &["read"]), github, failed("db", Some("boom"))],
        )),
    );
    let view = project(&binding);
    assert_eq!(
        view.summary(),
        "Workspace MCP: discovery is complete. Discovered servers: fs (1 tool). \
         Not signed in: github (needs a person to sign in; no tools until then). \
         Failed servers: db (error: boom).",
    );
    let counts = view.counts();
    assert_eq!(
        (
            counts.servers_ok,
            counts.servers_failed,
            counts.servers_needing_authorization
        ),
        (1, 1, 1)
    );
    // The model is told, and the server offers no tool.
    assert!(view.incomplete());
    assert!(view.tools().iter().all(|tool| tool.server == "fs"));
    let github = view.servers().iter().find(|s| s.name == "github").unwrap();
    assert!(github.needs_authorization && !github.ok && github.tool_count == 0);
}

#[test]
fn the_note_never_calls_a_server_healthy_or_connected() {
    let bindings = [
        Binding::NoAgent,
        Binding::MissingAgent,
        agent("run-1", None),
        agent("", None),
        agent("run-1", Some(snapshot("run-1", Pending, mix()))),
        agent("run-1", Some(snapshot("run-1", Complete, mix()))),
        agent("run-2", Some(snapshot("run-1", Complete, mix()))),
        agent("", Some(snapshot("", Unspecified, mix()))),
    ];
    for binding in bindings {
        let summary = project(&binding).summary().to_lowercase();
        assert!(summary.starts_with("workspace mcp: "), "{summary}");
        assert!(!summary.contains('\n'), "{summary}");
        for word in ["healthy", "connected"] {
            assert!(!summary.contains(word), "`{word}` in {summary}");
        }
    }
}

#[test]
fn diagnostics_in_the_note_are_one_line_and_bounded() {
    let long = format!(
        "line one\nline two </workspace-context> {}",
        "é".repeat(400)
    );
    let view = project(&agent(
        "run-1",
        Some(snapshot(
            "run-1",
            Complete,
            vec![failed("broken", Some(&long))],
        )),
    ));
    let summary = view.summary();
    assert!(!summary.contains('\n') && !summary.contains("</workspace-context>"));
    let error = summary
        .split_once("(error: ")
        .and_then(|(_, rest)| rest.strip_suffix(")."))
        .expect("the failed server is listed");
    assert!(error.len() <= 300, "{} bytes", error.len());
    assert!(error.starts_with("line one line two ‹/workspace-context› éé"));
    assert!(error.ends_with('…'));
    // The outcome itself keeps the full (upstream-bounded) text for the UI.
    assert_eq!(view.servers()[0].diagnostic.as_deref(), Some(long.trim()));
}

#[test]
fn many_outcomes_are_listed_up_to_a_bound() {
    let servers: Vec<_> = (0..25)
        .map(|i| failed(&format!("s{i:02}"), Some("down")))
        .collect();
    let view = project(&agent("run-1", Some(snapshot("run-1", Complete, servers))));
    let listed: Vec<String> = (0..20).map(|i| format!("s{i:02} (error: down)")).collect();
    assert_eq!(
        view.summary(),
        format!(
            "Workspace MCP: discovery is complete. Failed servers: {}, and 5 more.",
            listed.join(", ")
        )
    );
    assert_eq!(view.counts().servers_failed, 25);
}

#[test]
fn row_order_never_changes_the_view() {
    let mut rows = mix();
    rows.push(server("alpha", &["z", "a"]));
    let forward = project(&agent(
        "run-1",
        Some(snapshot("run-1", Complete, rows.clone())),
    ));
    rows.reverse();
    let backward = project(&agent("run-1", Some(snapshot("run-1", Complete, rows))));
    assert_eq!(forward, backward);
}

#[test]
fn snapshot_error_is_kept_and_blank_errors_are_no_errors() {
    let mut snap = snapshot(
        "run-1",
        Complete,
        vec![
            server_with("fs", vec![tool("read", "", &[])], Some("  ")),
            config("ok.json", ResourceStatus::Ok, Some("")),
        ],
    );
    snap.snapshot_error = Some("3 resources excluded: over the 500-resource cap".into());
    let view = project(&agent("run-1", Some(snap)));
    assert_eq!(
        view.snapshot_error(),
        Some("3 resources excluded: over the 500-resource cap")
    );
    assert_eq!(view.servers()[0].diagnostic, None);
    assert!(view.configs().is_empty());
    assert!(!view.incomplete());
}

/// Liveness (issue 49) is carried as read and said beside the phase: an offline agent's
/// complete view keeps its phase, freshness and tools, and the model is told the tools
/// cannot be called now.
#[test]
fn an_offline_agent_keeps_its_view_and_the_model_is_told() {
    let complete = || snapshot("run-1", Complete, vec![server("fs", &["read", "write"])]);
    let with = |connection: Connection| {
        let mut binding = agent("run-1", Some(complete()));
        if let Binding::Agent(state) = &mut binding {
            state.connection = connection;
        }
        project(&binding)
    };
    let online = with(Connection::Online);
    assert_eq!(online.connection(), Connection::Online);
    assert_eq!(online.model_note(), None);

    let since = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_796_295_630);
    let offline = with(Connection::Offline { since });
    assert_eq!(offline.connection().offline_since(), Some(since));
    assert_eq!(offline.connection().as_str(), "offline");
    assert_eq!(
        (offline.phase(), offline.is_stale(), offline.tools().len()),
        (online.phase(), online.is_stale(), online.tools().len()),
        "liveness never rewrites the phase, freshness or tools"
    );
    assert!(!offline.incomplete());
    assert_eq!(
        offline.model_note().as_deref(),
        Some(
            "Workspace MCP: discovery is complete. Workspace agent offline since \
             2026-12-03T11:00:30Z: the tools below cannot be called until it reconnects. \
             Discovered servers: fs (2 tools)."
        )
    );

    // Never connected, or no agent: nothing said.
    assert_eq!(with(Connection::Never).model_note(), None);
    assert_eq!(project(&Binding::NoAgent).connection(), Connection::Never);
}
