//! The single read model of an agent's MCP state for chats (layer 5, SPEC §7).
//!
//! Owns: the projection of what an agent committed (agent row, snapshot, resources) into a
//! [`View`] — discovery [`ViewPhase`], freshness (`stale`), per-source outcomes, counts, the
//! eligible [`ToolCatalog`] with model-facing names (each tool with its title, output
//! schema and the server's annotations kept as untrusted hints, see
//! [`EligibleTool::model_definition`]), each server's MCP revision, info and timings, the
//! servers still connecting while pending ([`View::pending_servers`]), whether the agent
//! process is connected now ([`View::connection`], the control plane's observation of its
//! call stream, carried through as read), the model note —
//! plus [`find_tools`]
//! over that catalog and the chat context pinning model ([`PinnedContext`],
//! [`ChatContext`]). The turn, the chat API and find_tools all read this one view, so the
//! model and the person see the same inventory.
//!
//! The [`store`] module is the thin adapter over persistence: [`store::load_agent_view`]
//! and [`store::load_chat`] map one consistent `read_agent_context` into a [`Binding`]
//! ([`Binding::from_read`]) and project it; `load_chat` adds the chat's stored pin.
//!
//! Must never: do I/O outside [`store`], or write anything there but the one pin a chat
//! should already have had (through persistence's `refresh_chat`); pair an agent row
//! with a snapshot from another read (the core is pure: plain input types in, values
//! out); decide phase or freshness from clocks (`now` in [`project_at`] only dates how
//! long pending servers have been connecting); offer a tool from a stale snapshot; merge
//! discovery completeness, per-source outcomes, turn eligibility and the result of a
//! tool invocation into one flag (the view keeps `phase`, the outcomes and the catalog
//! apart, and knows nothing of invocations).
//!
//! # Example
//!
//! Project an agent whose discovery is complete and list the tools a turn may offer the
//! model, under their model-facing names:
//!
//! ```
//! use ctxsync_chat_projection::{AgentState, Binding, ViewPhase, SnapshotState, project};
//! use ctxsync_protocol::{DiscoveryPhase, McpServerBody, McpTool, Resource, ResourceBody, RunId};
//!
//! let tool = |name: &str| McpTool { name: name.into(), ..Default::default() };
//! let server = McpServerBody {
//!     server_name: "git-hub".into(),
//!     tools: vec![tool("list-prs"), tool("merge")],
//!     ..Default::default()
//! };
//! let row = Resource {
//!     source: "mcp:git-hub".into(),
//!     source_path: None,
//!     content_hash: String::new(),
//!     size_bytes: 0,
//!     status: ctxsync_protocol::ResourceStatus::Ok,
//!     error: None,
//!     body: ResourceBody::McpServer(server),
//! };
//! let snapshot = SnapshotState {
//!     agent_run_id: RunId::new("run-1"),
//!     phase: DiscoveryPhase::Complete,
//!     resources: vec![row],
//!     ..Default::default()
//! };
//! let binding = Binding::Agent(AgentState { agent_run_id: RunId::new("run-1"), snapshot: Some(snapshot), ..Default::default() });
//!
//! let view = project(&binding);
//! assert_eq!(view.phase(), ViewPhase::Complete);
//! assert!(!view.is_stale());
//! let names: Vec<&str> = view.tools().iter().map(|t| t.name.as_str()).collect();
//! assert_eq!(names, ["git-hub__list-prs", "git-hub__merge"]);
//! ```

#![deny(missing_docs)]

mod budget;
#[cfg(feature = "semantic")]
mod embed;
mod find;
mod index;
mod input;
mod naming;
mod note;
mod pin;
mod rank;
#[cfg(feature = "store")]
pub mod store;
mod terms;
mod text;
mod view;

pub use budget::{
    CatalogDetail, Deferral, FIND_TOOLS_NAME, ToolBudget, TurnTools, definition_bytes,
    plan_turn_tools,
};
/// The licence notice of the embedding model find_tools carries (with the `semantic`
/// feature); a binary embedding this crate shows it with its version.
#[cfg(feature = "semantic")]
pub use embed::MODEL_NOTICE;
pub use find::{
    ActiveTools, FindToolsError, FindToolsRequest, FindToolsResponse, MAX_DESCRIPTION_CHARS,
    MAX_MATCHES, MAX_NAMES, MAX_QUERIES, Ranking, ToolMatch, UnresolvedName, find_tools,
    find_tools_in, rank_query, search_terms,
};
pub use index::{DEFAULT_INDEX_CACHE_BYTES, ToolIndex, ToolIndexCache};
pub use input::{AgentState, Binding, Connection, HeldSignIn, SnapshotState};
pub use naming::{EligibleTool, MAX_TOOL_NAME_LEN, ModelTool, ToolCatalog};
pub use note::{elapsed_in_seconds, rfc3339_utc};
pub use pin::{ChatContext, PinnedContext};
pub use view::{
    AgentPresence, ConfigView, ConnectingServer, Counts, ServerView, View, ViewPhase, classify,
    project, project_at,
};
