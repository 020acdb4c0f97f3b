//! The server's side of the tool-call channel (issue 36): the `ToolCalls` streams agents
//! open, and [`CallHub`], through which the HTTP layer sends a stored call to its agent,
//! waits for its end and cancels it.
//!
//! The store is the truth: a call is stored before it is sent and every end is recorded
//! there first (the first end wins); the hub's memory holds only which streams this
//! replica serves and who waits, so a waiter also re-reads the store now and then.
//!
//! STUB: the signatures are the contract between the call channel and the HTTP layer;
//! the bodies are being written.

use std::sync::Arc;
use std::time::Duration;

use crate::error::StoreError;
use crate::ids::ToolCallId;
use crate::store::Store;
use crate::tool_calls::ToolCallRecord;

/// How long a call waits for its agent's stream when the agent declared calls but is not
/// connected, before it is refused `agent_unreachable`.
pub const DEFAULT_RECONNECT_GRACE: Duration = Duration::from_secs(5);

/// Settings of a [`CallHub`].
#[derive(Clone, Debug)]
pub struct CallHubConfig {
    /// See [`DEFAULT_RECONNECT_GRACE`] (at most 5 s).
    pub reconnect_grace: Duration,
    /// How often a waiter re-reads the store for an end another replica recorded.
    pub recheck: Duration,
}

impl Default for CallHubConfig {
    fn default() -> Self {
        Self {
            reconnect_grace: DEFAULT_RECONNECT_GRACE,
            recheck: Duration::from_secs(1),
        }
    }
}

/// The calls' counters and gauges for `/metrics`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CallMetricsSnapshot {
    /// Ends recorded by this replica, by status label (`complete`, `refused`, …), sorted.
    pub ended: Vec<(&'static str, u64)>,
    /// Calls this replica has sent and not yet seen end.
    pub in_flight: u64,
    /// Durations of the ends recorded here (seconds): bucket upper bounds with
    /// cumulative counts, the sum and the count.
    pub duration_buckets: Vec<(f64, u64)>,
    /// Sum of the durations, in seconds.
    pub duration_sum: f64,
    /// How many durations.
    pub duration_count: u64,
}

/// Sends calls to agents' streams and wakes their waiters. One per server process,
/// shared by the agent API and the HTTP layer.
#[derive(Debug)]
pub struct CallHub {
    store: Store,
    config: CallHubConfig,
}

impl CallHub {
    /// A hub over `store`.
    pub fn new(store: Store, config: CallHubConfig) -> Arc<Self> {
        Arc::new(Self { store, config })
    }

    /// Sends a `running` call (as [`Store::admit_tool_call`] started it) to its agent's
    /// stream, waiting up to the reconnect grace for one. No stream by then: the call
    /// ends `refused` `agent_unreachable` (not recorded). Answers at once after sending;
    /// the end arrives later ([`Self::wait`]). The call's deadline is watched here too,
    /// so a silent agent cannot hold it past its `timeout_ms`.
    pub async fn dispatch(&self, call: &ToolCallRecord) -> Result<ToolCallRecord, StoreError> {
        let _ = (call, &self.store, &self.config);
        todo!("issue 36: call channel")
    }

    /// The call as stored once it has ended, or as stored when `wait` passes; `None`
    /// when there is no such call.
    pub async fn wait(
        &self,
        id: ToolCallId,
        wait: Duration,
    ) -> Result<Option<ToolCallRecord>, StoreError> {
        let _ = (id, wait);
        todo!("issue 36: call channel")
    }

    /// Cancels a running call (its agent sends `notifications/cancelled` to the MCP
    /// server) and answers it as it ended; an ended call is answered unchanged. `None`
    /// when there is no such call.
    pub async fn cancel(&self, id: ToolCallId) -> Result<Option<ToolCallRecord>, StoreError> {
        let _ = id;
        todo!("issue 36: call channel")
    }

    /// Records an end this replica decided (find_tools' answer) and wakes its waiters.
    pub async fn end(
        &self,
        id: ToolCallId,
        end: &ctxsync_mcp_model::CallEnd,
        duration_ms: Option<u64>,
    ) -> Result<Option<ToolCallRecord>, StoreError> {
        let _ = (id, end, duration_ms);
        todo!("issue 36: call channel")
    }

    /// The calls' metrics so far.
    pub fn metrics(&self) -> CallMetricsSnapshot {
        todo!("issue 36: call channel")
    }
}
