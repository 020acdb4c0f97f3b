//! The first-turn gate (layer 6): the bounded, event-driven wait for an agent's MCP
//! discovery before a chat's turn, shared per chat and process (SPEC §8).
//!
//! Owns: the wait rules (a complete or legacy current run returns at once; a pending
//! current run waits up to the budget; no snapshot of the current run waits up to the
//! grace), the one shared attempt per (chat, agent, run id) with its retention and
//! re-keying, the [`Outcome`] that says how the wait went, turn preparation
//! ([`FirstTurnGate::prepare_turn`]) and the gate's metrics.
//!
//! Records every attempt's start and end through [`AttemptLog`]: in this process's
//! memory by default ([`MemoryAttemptLog`]), in the store for the server
//! ([`StoreAttemptLog`]), so a run whose first turn timed out on one replica does not
//! wait again on another, nor on this one after a restart. Concurrent turns of one
//! process still share one waiting attempt in memory.
//!
//! Decides nothing about phase or staleness: every read arrives as the chat
//! projection's `View`, and the [`Outcome`] repeats its phase, `stale`, counts and
//! whether the agent is connected (`connection`, `offline_since`); it never waits on
//! liveness.
//!
//! Reads everything through [`DiscoverySource`]. [`store::StoreSource`] fills it from
//! persistence (committed rows in one read transaction; change notifications after
//! commit, in-process on SQLite and LISTEN/NOTIFY on PostgreSQL) through the chat
//! projection (counts, eligible tools, the model note), and [`StoreGate`] is the gate
//! over it; [`memory::MemorySource`] is an in-memory one for tests and benchmarks.
//!
//! Must never: fail a turn (timeouts, read errors, stale runs and cancelled callers all
//! end in an outcome); poll tightly (waits wake on notifications, with a re-check timer
//! of at least a second for lost ones); trust an event's content (a wake-up only
//! triggers a re-read of committed state); wait longer than the budget; spend the
//! budget twice for one agent process and chat while a timed-out attempt is retained
//! (in this process or in the attempt log); write to the store anything but its attempt
//! log, or show a database error's detail to callers (outcomes carry a safe message
//! such as "database unavailable"; causes go to the log).
//!
//! # Example
//!
//! A first turn waits while the agent's discovery is pending, and the commit that
//! completes it releases the wait:
//!
//! ```
//! use ctxsync_chat_projection::SnapshotState;
//! use ctxsync_first_turn_gate::memory::MemorySource;
//! use ctxsync_first_turn_gate::{FirstTurnGate, GateConfig, OutcomeReason};
//! use ctxsync_protocol::DiscoveryPhase::{Complete, Pending};
//! use ctxsync_protocol::RunId;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! // Any `DiscoverySource` goes here: one over your own storage, or this in-memory one.
//! let source = MemorySource::new();
//! let (chat, agent) = (1, 7);
//! source.bind(chat, agent);
//! let snapshot = |phase| SnapshotState { agent_run_id: RunId::new("run-1"), phase, ..Default::default() };
//! source.commit(agent, |a| {
//!     a.agent_run_id = RunId::new("run-1");
//!     a.snapshot = Some(snapshot(Pending));
//! });
//!
//! let gate = FirstTurnGate::new(source.clone(), GateConfig::default());
//! let waiter = gate.clone();
//! let turn = tokio::spawn(async move { waiter.wait_for_discovery(chat, agent).await });
//! source.commit(agent, |a| a.snapshot = Some(snapshot(Complete)));
//! let outcome = turn.await.unwrap();
//! assert_eq!(outcome.reason, OutcomeReason::DiscoveryComplete);
//! assert!(!outcome.wait_timed_out);
//! # }
//! ```

#![deny(missing_docs)]

mod attempt_log;
mod config;
mod gate;
pub mod memory;
mod metrics;
mod outcome;
mod source;
#[cfg(feature = "store")]
pub mod store;

pub use attempt_log::{AttemptLog, AttemptRecord, AttemptResult, MemoryAttemptLog, RecordedEnd};
pub use config::{
    DEFAULT_DISCOVERY_BUDGET, DEFAULT_READ_TIMEOUT, DEFAULT_RECHECK_INTERVAL,
    DEFAULT_SNAPSHOT_GRACE, DEFAULT_TIMED_OUT_RETENTION, GateConfig, MIN_RECHECK_INTERVAL,
};
pub use gate::{DefaultAttemptLog, FirstTurnGate, ReleaseSample, TurnContext, TurnMode};
pub use metrics::{GateMetrics, WAIT_SECONDS_BUCKETS};
pub use outcome::{Outcome, OutcomeReason};
pub use source::{ChangeSubscription, DiscoverySource, SourceError, TurnInventory};
#[cfg(feature = "store")]
pub use store::{StoreAttemptLog, StoreGate, StoreSource};
