//! Tool calls as a person sees them: [`ToolCallItem`] (a row of the page's "Tool calls"
//! list, and the data of the event stream's `tool_call` events) and its HTML
//! ([`render_tool_calls`]). The page's script, which keeps the list live, is part of
//! [`PAGE_SCRIPT`](crate::PAGE_SCRIPT) and builds the same markup.

use std::fmt::Write;

use serde::Serialize;

use crate::escape::escape;

/// Calls the page lists: the chat's most recent, newest first.
pub const MAX_LISTED_CALLS: usize = 20;

/// The keys of a [`ToolCallItem`] as JSON, in order: everything a page session may learn
/// about a call.
pub const TOOL_CALL_KEYS: [&str; 8] = [
    "id",
    "turn",
    "name",
    "status",
    "progress",
    "duration_ms",
    "truncated",
    "phase",
];

/// One tool call as a person sees it: a row of the page's "Tool calls" list and, as JSON,
/// the data of a `tool_call` event on the chat's event stream. A page session reads
/// these, so the type has no place for a call's arguments, result, error, progress
/// message or model text: what it cannot hold it cannot leak.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolCallItem {
    /// The caller's id for the call, unique within its turn.
    pub id: String,
    /// The turn the call belongs to.
    pub turn: String,
    /// The model-facing tool name called.
    pub name: String,
    /// `running`, `complete`, `error`, `refused`, `timed_out`, `canceled` or `unknown`.
    pub status: String,
    /// The latest progress the tool reported, without its message; `null` before any.
    pub progress: Option<CallProgressItem>,
    /// How long the call ran, once it ended.
    pub duration_ms: Option<u64>,
    /// The result was cut to fit the agent's cap.
    pub truncated: bool,
    /// What this event reports: the call `started`, made `progress`, or `ended`.
    pub phase: CallPhase,
}

/// A call's progress as the page shows it: how far, and out of what when known.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CallProgressItem {
    /// How far along.
    pub progress: f64,
    /// The total, when the tool knows it.
    pub total: Option<f64>,
}

/// What a `tool_call` event reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum CallPhase {
    /// Stored, or sent to its agent.
    Started,
    /// New progress.
    Progress,
    /// Its end is stored.
    Ended,
}

impl ToolCallItem {
    /// Identifies the call on the page: a `call_id` is unique only within its turn.
    pub fn key(&self) -> String {
        format!("{}/{}", self.turn, self.id)
    }

    /// Whether it is still running (the page shows a progress bar).
    pub fn is_running(&self) -> bool {
        self.status == "running"
    }

    /// The status in words, e.g. `timed out` (the page never says it by colour alone).
    pub fn status_label(&self) -> &str {
        match self.status.as_str() {
            "timed_out" => "timed out",
            "unknown" => "outcome unknown",
            other => other,
        }
    }

    /// The duration as the page writes it: `350 ms`, `1.2 s`, `2 min 5 s`; `None` while
    /// running. Integer arithmetic, so the page's script writes the same.
    pub fn duration_text(&self) -> Option<String> {
        self.duration_ms.map(duration_text)
    }

    /// The progress in words: `2 of 5`, `2 so far`, or `working` before any report.
    pub fn progress_text(&self) -> String {
        match self.progress {
            Some(CallProgressItem {
                progress,
                total: Some(total),
            }) => format!("{progress} of {total}"),
            Some(CallProgressItem { progress, .. }) => format!("{progress} so far"),
            None => "working".to_owned(),
        }
    }
}

/// `ms` as the page writes a duration (see [`ToolCallItem::duration_text`]).
pub fn duration_text(ms: u64) -> String {
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        let tenths = (ms + 50) / 100;
        format!("{}.{} s", tenths / 10, tenths % 10)
    } else {
        format!("{} min {} s", ms / 60_000, ms % 60_000 / 1_000)
    }
}

/// The page's "Tool calls" section: the chat's recent calls (newest first, as given), each
/// with its name, status in words, duration once ended, a "truncated" marker and, while
/// running, a labelled progress bar; an empty-state line when there are none. It sits
/// outside the panel, so a panel swap leaves it alone; the page's script updates its rows
/// from the stream's `tool_call` events, building the same markup as this does.
pub fn render_tool_calls(calls: &[ToolCallItem]) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        r#"<section id="tool-calls" class="calls-panel" aria-labelledby="tool-calls-heading"><h2 id="tool-calls-heading">Tool calls</h2><p class="calls-note">The chat's most recent calls, newest first. What each call was given and answered is not shown here.</p><p id="calls-empty" class="empty"{}>No tool calls yet.</p><ul id="tool-call-list" class="calls" aria-label="Recent tool calls" data-max="{MAX_LISTED_CALLS}">"#,
        if calls.is_empty() { "" } else { " hidden" },
    );
    for call in calls.iter().take(MAX_LISTED_CALLS) {
        call_row(&mut h, call);
    }
    // Announces starts and ends only: a progress bar moving is not worth interrupting for.
    h.push_str(
        r#"</ul><p id="calls-live" class="visually-hidden" role="status" aria-live="polite"></p></section>"#,
    );
    h
}

/// One row of the calls list; the page's script (`renderCall`) builds the same elements.
fn call_row(h: &mut String, call: &ToolCallItem) {
    let status = escape(&call.status);
    let _ = write!(
        h,
        r#"<li class="call" data-key="{}" data-status="{status}"><code class="call-name">{}</code> <span class="badge call-status status-{status}">{}</span>"#,
        escape(&call.key()),
        escape(&call.name),
        escape(call.status_label()),
    );
    if let Some(duration) = call.duration_text() {
        let _ = write!(h, r#" <span class="call-duration">{duration}</span>"#);
    }
    if call.truncated {
        h.push_str(r#" <span class="badge call-truncated" title="The result was cut to fit the agent's cap">truncated</span>"#);
    }
    if call.is_running() {
        let _ = write!(
            h,
            r#" <progress class="call-progress" aria-label="Progress of {}""#,
            escape(&call.name)
        );
        // Without a positive total the bar is indeterminate: it says busy, not how far.
        if let Some(CallProgressItem {
            progress,
            total: Some(total),
        }) = call.progress
            && total > 0.0
        {
            let _ = write!(h, r#" max="{total}" value="{progress}""#);
        }
        let _ = write!(
            h,
            r#"></progress> <span class="progress-text">{}</span>"#,
            escape(&call.progress_text())
        );
    }
    let _ = write!(
        h,
        r#" <span class="call-id">call {}</span></li>"#,
        escape(&call.id)
    );
}
