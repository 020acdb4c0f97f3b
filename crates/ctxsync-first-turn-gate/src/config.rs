//! The gate's budgets and intervals, with the defaults of SPEC §8.

use std::time::Duration;

/// How long a pending current run may hold up a turn.
pub const DEFAULT_DISCOVERY_BUDGET: Duration = Duration::from_secs(15);
/// How long to wait for the current run's first snapshot.
pub const DEFAULT_SNAPSHOT_GRACE: Duration = Duration::from_secs(3);
/// How often a waiting attempt re-reads without a notification, in case one was lost.
pub const DEFAULT_RECHECK_INTERVAL: Duration = Duration::from_secs(1);
/// The re-check interval never goes below this, so no configuration polls tightly.
pub const MIN_RECHECK_INTERVAL: Duration = Duration::from_secs(1);
/// How long a timed-out attempt is remembered, so later turns do not wait again.
pub const DEFAULT_TIMED_OUT_RETENTION: Duration = Duration::from_secs(10 * 60);
/// Bound on any single read, including the one refreshing a retained timed-out attempt.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(2);

/// Configuration of a [`FirstTurnGate`](crate::FirstTurnGate). Tests shrink the
/// durations or run on tokio's paused clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateConfig {
    /// Longest wait for a pending current run to complete, from the attempt's start.
    pub discovery_budget: Duration,
    /// Longest wait, from the attempt's start, for a snapshot of the current run when
    /// there is none or only a previous run's. Once the current run is seen pending,
    /// the attempt waits up to the budget instead.
    pub snapshot_grace: Duration,
    /// Re-read interval without notifications; raised to [`MIN_RECHECK_INTERVAL`].
    pub recheck_interval: Duration,
    /// How long a timed-out attempt is kept for reuse.
    pub timed_out_retention: Duration,
    /// Bound on each read of the source.
    pub read_timeout: Duration,
}

impl Default for GateConfig {
    fn default() -> Self {
        Self {
            discovery_budget: DEFAULT_DISCOVERY_BUDGET,
            snapshot_grace: DEFAULT_SNAPSHOT_GRACE,
            recheck_interval: DEFAULT_RECHECK_INTERVAL,
            timed_out_retention: DEFAULT_TIMED_OUT_RETENTION,
            read_timeout: DEFAULT_READ_TIMEOUT,
        }
    }
}

impl GateConfig {
    pub(crate) fn effective_recheck_interval(&self) -> Duration {
        self.recheck_interval.max(MIN_RECHECK_INTERVAL)
    }
}
