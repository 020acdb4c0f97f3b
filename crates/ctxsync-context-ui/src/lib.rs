//! The chat context panel (layer 7): a serializable view model ([`Panel`]) and its three
//! renderers — JSON for APIs, HTML for the web page, plain text for terminals — and the
//! page's "Tool calls" list: [`ToolCallItem`] (also the data of the event stream's
//! `tool_call` events) rendered by [`render_tool_calls`] and kept live by the page's
//! script.
//!
//! Owns: how a chat's context is presented — grouping, the discovery banner (naming the
//! servers still connecting while pending), whether the agent is connected (the header's
//! `connection`; an offline agent's tools marked), the Issues list, the overall tone, each
//! server's connection line (MCP revision, implementation, timings) and each tool's title
//! and hint badges; how a tool call reads to a person (status in words, its duration) —
//! so every surface says the same thing.
//!
//! Must never: read a database or talk to an agent (it is handed projected data); call a
//! server "healthy" or "connected"; show an empty server list while discovery is still
//! initializing or the tools are withheld; emit unescaped text into HTML; present a
//! server's annotations as anything but its unverified hints; load anything a server
//! names (tool icons are left out: a `data:` or remote `src` would break the CSP or leak);
//! give a tool call's arguments, result, error, progress message or model text a place
//! (a page session reads what this crate shows of a call).
//!
//! # Example
//!
//! Build the panel of a chat bound to an agent that published one instruction file, and
//! render it as text:
//!
//! ```
//! use ctxsync_chat_projection::{AgentState, Binding, ChatContext, SnapshotState};
//! use ctxsync_context_ui::{build_chat_panel, render_fragment, render_text};
//! use ctxsync_protocol::{DiscoveryPhase, InstructionFileBody, Resource, ResourceBody, ResourceStatus, RunId};
//!
//! let file = Resource {
//!     source: "AGENTS.md".into(),
//!     source_path: None,
//!     content_hash: "0f".into(),
//!     size_bytes: 16,
//!     status: ResourceStatus::Ok,
//!     error: None,
//!     body: ResourceBody::InstructionFile(InstructionFileBody { content: "Answer briefly.".into() }),
//! };
//! let snapshot = SnapshotState {
//!     agent_run_id: RunId::new("run-1"),
//!     phase: DiscoveryPhase::Complete,
//!     resources: vec![file],
//!     ..Default::default()
//! };
//! let live = Binding::Agent(AgentState { agent_run_id: RunId::new("run-1"), snapshot: Some(snapshot), ..Default::default() });
//! // A chat without a pin pins what it first sees.
//! let context = ChatContext::new(None, &live);
//!
//! let panel = build_chat_panel("chat-1", &context, &live);
//! assert!(render_text(&panel).contains("AGENTS.md"));
//! assert!(render_fragment(&panel).contains("AGENTS.md"));
//! ```

#![deny(missing_docs)]

mod builder;
mod escape;
mod html;
mod model;
mod text;
mod tool_call;

pub use builder::{build_chat_panel, build_chat_panel_at, build_panel};
pub use escape::escape;
pub use html::{
    PAGE_SCRIPT, PAGE_SCRIPT_PATH, PAGE_STYLE, PAGE_STYLE_PATH, PageAgent, PageShell,
    render_fragment, render_page, render_page_for, render_page_with_calls,
};
pub use model::*;
pub use text::render_text;
pub use tool_call::{
    CallPhase, CallProgressItem, MAX_LISTED_CALLS, TOOL_CALL_KEYS, ToolCallItem, duration_text,
    render_tool_calls,
};

/// The JSON renderer: the view model as the HTTP API returns it.
pub fn render_json(panel: &Panel) -> serde_json::Value {
    serde_json::to_value(panel).expect("the panel serializes to JSON infallibly")
}
