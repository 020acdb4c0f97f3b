//! Tool calls, the first kind of routed request: a request a chat makes that runs in
//! the agent process that listed the tool. `hub` holds the agents' `ToolCalls` streams
//! on this replica and is the one entry point the HTTP layer starts, waits for and
//! cancels calls through; the store's compare-and-sets decide every step, so any replica
//! may take any request. Sign-ins (the hub's `sign_in` module) travel the same streams;
//! the next kinds (a prompt, a resource read) will too.

mod hub;

pub use hub::{
    CALL_QUEUE, CALL_SECONDS_BUCKETS, CallHub, CallHubConfig, CallMetricsSnapshot, CallStart,
    DEFAULT_CALL_LEASE, DEFAULT_CANCEL_WAIT, DEFAULT_DEADLINE_SLACK, DEFAULT_RECONNECT_GRACE,
    PROGRESS_FLUSH, SignInSettings,
};
