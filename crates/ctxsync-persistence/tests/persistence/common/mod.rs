//! Shared helpers for persistence's integration tests: event waits and snapshot
//! fixtures.

use std::time::Duration;

use ctxsync_persistence::ChangeEvent;
pub(crate) use ctxsync_test_support::pushed::{
    instruction, mcp_server, snapshot, sorted, workspace,
};

/// Upper bound for waiting on an event that must arrive; never slept when it does.
pub(crate) const EVENT_DEADLINE: Duration = Duration::from_secs(5);

/// Waits for the next event (bounded by [`EVENT_DEADLINE`]).
pub(crate) async fn next_event(next: impl Future<Output = Option<ChangeEvent>>) -> ChangeEvent {
    tokio::time::timeout(EVENT_DEADLINE, next)
        .await
        .expect("no event within the deadline")
        .expect("store closed")
}
