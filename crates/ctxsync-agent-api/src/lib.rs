//! ctxsync agent API (layer 4, SPEC §5): the control plane's gRPC face to agents.
//!
//! Owns: the tonic `ctxsync.agent.v1.Agent` service ([`AgentApi`]) behind token
//! authentication from the headers ([`Authenticated`]: a request without a valid agent
//! token is answered before its body is read); `UpdateStartup` and `PushContextState`
//! applied to the [`Store`](ctxsync_persistence::Store) after `ctxsync-protocol` checked
//! them; the tool-call hub ([`CallHub`]), which holds agents' `ToolCalls` streams on this
//! replica, sends them stored calls and records what comes back, and through which the
//! HTTP layer starts, waits for and cancels calls on whichever replica holds the stream,
//! and which routes people's sign-ins the same way ([`SignInSettings`]: the sign-in rows
//! any replica writes go to the agent, what it answers is kept sealed, kept credentials
//! go to a stream that opens); and the agent-facing metrics `/metrics` reads ([`AgentApiMetrics`],
//! [`CallMetricsSnapshot`]). With the `test-support` feature, [`test_support`] serves the
//! service on loopback for this crate's tests and the layers above.
//!
//! Must never: decode a request before its token is checked; touch the database except
//! through the store's operations (every decision about a call or a push is the store's
//! compare-and-set, so any replica may take any request); trust an agent with another
//! agent's calls or sign-ins; log a call's arguments or result, or a token, code or
//! verifier; hold a lock across an await; depend on a workspace crate other than
//! `ctxsync-persistence`, `ctxsync-protocol` and `ctxsync-mcp-model`.

#![deny(missing_docs)]

mod metrics;
mod service;
#[cfg(feature = "test-support")]
pub mod test_support;
mod tool_call;

pub use metrics::{
    AgentApiCounters, AgentApiHistograms, AgentApiMetrics, CONNECT_SECONDS_BUCKETS, Histogram,
    HistogramSnapshot, PUSH_SECONDS_BUCKETS,
};
pub use service::{
    AgentApi, Authenticated, MAX_REQUEST_BYTES, STALE_CALL_RUN_MESSAGE, SUPERSEDED_MESSAGE,
};
pub use tool_call::{
    CALL_QUEUE, CALL_SECONDS_BUCKETS, CallHub, CallHubConfig, CallMetricsSnapshot, CallStart,
    DEFAULT_CALL_LEASE, DEFAULT_CANCEL_WAIT, DEFAULT_DEADLINE_SLACK, DEFAULT_RECONNECT_GRACE,
    PROGRESS_FLUSH, SignInSettings,
};
