//! The page's "Tool calls" list: what a row says in each state, that the JSON of a call
//! (the `tool_call` event's data) has exactly the allowed keys, and that hostile names
//! stay text.

use ctxsync_context_ui::*;

fn call(id: &str, status: &str) -> ToolCallItem {
    ToolCallItem {
        id: id.into(),
        turn: "turn-1".into(),
        name: "docs__search".into(),
        status: status.into(),
        progress: None,
        duration_ms: None,
        truncated: false,
        phase: if status == "running" {
            CallPhase::Started
        } else {
            CallPhase::Ended
        },
    }
}

#[test]
fn the_json_has_exactly_the_allowed_keys() {
    let mut running = call("c1", "running");
    running.progress = Some(CallProgressItem {
        progress: 2.0,
        total: Some(5.0),
    });
    running.phase = CallPhase::Progress;
    let json = serde_json::to_value(&running).unwrap();
    let keys: Vec<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    let mut allowed = TOOL_CALL_KEYS.to_vec();
    allowed.sort_unstable();
    assert_eq!(keys, allowed);
    assert_eq!(
        json,
        serde_json::json!({
            "id": "c1", "turn": "turn-1", "name": "docs__search", "status": "running",
            "progress": { "progress": 2.0, "total": 5.0 }, "duration_ms": null,
            "truncated": false, "phase": "progress",
        })
    );
    assert_eq!(
        serde_json::to_value(call("c2", "complete")).unwrap()["progress"],
        serde_json::Value::Null
    );
}

#[test]
fn an_empty_list_says_so() {
    let html = render_tool_calls(&[]);
    assert!(html.contains(r#"<p id="calls-empty" class="empty">No tool calls yet.</p>"#));
    assert!(html.contains(r#"<h2 id="tool-calls-heading">Tool calls</h2>"#));
    assert!(html.contains(r#"aria-labelledby="tool-calls-heading""#));
    assert!(!html.contains("<li"));
}

#[test]
fn rows_say_status_in_words_with_a_labelled_bar_while_running() {
    let mut running = call("c1", "running");
    running.progress = Some(CallProgressItem {
        progress: 2.0,
        total: Some(5.0),
    });
    let fresh = call("c0", "running");
    let mut done = call("c2", "complete");
    done.duration_ms = Some(1_250);
    done.truncated = true;
    let mut late = call("c3", "timed_out");
    late.duration_ms = Some(125_000);
    let html = render_tool_calls(&[running, fresh, done, late]);
    assert!(html.contains(r#"<p id="calls-empty" class="empty" hidden>"#));
    assert!(html.contains(
        r#"<li class="call" data-key="turn-1/c1" data-status="running"><code class="call-name">docs__search</code> <span class="badge call-status status-running">running</span> <progress class="call-progress" aria-label="Progress of docs__search" max="5" value="2"></progress> <span class="progress-text">2 of 5</span> <span class="call-id">call c1</span></li>"#
    ), "{html}");
    assert!(
        html.contains(
            r#"<progress class="call-progress" aria-label="Progress of docs__search"></progress> <span class="progress-text">working</span>"#
        ),
        "no report yet: an indeterminate bar: {html}"
    );
    assert!(html.contains(
        r#"<span class="badge call-status status-complete">complete</span> <span class="call-duration">1.3 s</span> <span class="badge call-truncated" title="The result was cut to fit the agent's cap">truncated</span> <span class="call-id">call c2</span></li>"#
    ), "{html}");
    assert!(
        html.contains(
            r#"status-timed_out">timed out</span> <span class="call-duration">2 min 5 s</span>"#
        ),
        "{html}"
    );
    assert_eq!(
        html.matches("<progress").count(),
        2,
        "ended calls have no bar"
    );
}

#[test]
fn durations_and_progress_read_plainly() {
    for (ms, text) in [
        (0, "0 ms"),
        (999, "999 ms"),
        (1_000, "1.0 s"),
        (1_249, "1.2 s"),
        (1_250, "1.3 s"),
        (59_999, "60.0 s"),
        (60_000, "1 min 0 s"),
        (3_725_000, "62 min 5 s"),
    ] {
        assert_eq!(duration_text(ms), text, "{ms}");
    }
    let mut c = call("c1", "running");
    assert_eq!(c.progress_text(), "working");
    c.progress = Some(CallProgressItem {
        progress: 1.5,
        total: None,
    });
    assert_eq!(c.progress_text(), "1.5 so far");
    assert_eq!(call("c", "unknown").status_label(), "outcome unknown");
}

#[test]
fn hostile_names_and_ids_stay_text_and_the_list_is_capped() {
    let mut hostile = call("x", "running");
    hostile.name = "<img src=x onerror=alert(1)>".into();
    let mut calls = vec![hostile];
    calls.extend((0..MAX_LISTED_CALLS + 5).map(|n| call(&format!("c{n}"), "complete")));
    let html = render_tool_calls(&calls);
    assert!(!html.contains("<img"), "{html}");
    assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert_eq!(html.matches("<li ").count(), MAX_LISTED_CALLS);
    let page = render_page_with_calls(&states_panel(), None, &calls);
    assert!(page.contains(r#"<section id="tool-calls""#));
    assert!(
        page.find(r#"id="panel-root""#) < page.find(r#"id="tool-calls""#),
        "the list sits under the panel, outside what a panel swap replaces"
    );
    // The script builds rows as text and the same elements as the server.
    for piece in [
        "textContent = content",
        "'badge call-status status-'",
        "'Progress of '",
        "\"The result was cut to fit the agent's cap\"",
        "addEventListener('tool_call'",
    ] {
        assert!(PAGE_SCRIPT.contains(piece), "{piece}");
    }
    assert!(!PAGE_SCRIPT.contains("innerHTML = call"));
}

/// A minimal panel for the page around the list.
fn states_panel() -> Panel {
    let context =
        ctxsync_chat_projection::ChatContext::new(None, &ctxsync_chat_projection::Binding::NoAgent);
    build_panel("chat-1", &context)
}
