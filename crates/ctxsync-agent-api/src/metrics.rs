//! The agent API's metrics: counters and fixed-bucket histograms on atomics that
//! `/metrics` reads, shared by the gRPC service and the tool-call hub.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ctxsync_protocol::McpConnectTimings;

/// Upper bounds (seconds) of the push-duration histogram: a push is milliseconds of
/// database work; seconds mean a struggling database.
pub const PUSH_SECONDS_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Upper bounds (seconds) of the MCP server connect histograms: a local process answers
/// in milliseconds, a remote server may take until the agent's connect timeout.
pub const CONNECT_SECONDS_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Largest single observation added to a histogram's sum: agents report their own
/// timings, and one absurd value must not wrap the sum (it still lands in `+Inf`).
const MAX_OBSERVED: Duration = Duration::from_secs(24 * 3600);

/// A fixed-bucket histogram on atomics: an observation is one bucket increment and one
/// sum add, no lock, since every push of every agent records one.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Per bucket, not cumulative; the last slot counts what is above every bound.
    /// The count is their total, so `+Inf` and `_count` always agree with the buckets.
    counts: Box<[AtomicU64]>,
    sum_micros: AtomicU64,
}

/// A point-in-time copy of a [`Histogram`], in Prometheus' terms.
#[derive(Clone, Debug, PartialEq)]
pub struct HistogramSnapshot {
    /// Cumulative `(upper bound in seconds, count)` pairs, `+Inf` left out.
    pub buckets: Vec<(f64, u64)>,
    /// Every observation: the `+Inf` bucket.
    pub count: u64,
    /// The observations' sum in seconds.
    pub sum: f64,
}

impl Histogram {
    /// `bounds` are upper bounds in seconds, increasing.
    pub fn new(bounds: &'static [f64]) -> Self {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]), "increasing bounds");
        Self {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
        }
    }

    /// Counts `value` in its bucket and adds it to the sum (at most 24 h of it).
    pub fn observe(&self, value: Duration) {
        let seconds = value.as_secs_f64();
        let slot = self
            .bounds
            .iter()
            .position(|le| seconds <= *le)
            .unwrap_or(self.bounds.len());
        self.counts[slot].fetch_add(1, Ordering::Relaxed);
        let micros = value.min(MAX_OBSERVED).as_micros() as u64;
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// A copy of the buckets, count and sum; under concurrent observations the sum may
    /// be a few observations off the counts.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut cumulative = 0;
        let buckets = self
            .bounds
            .iter()
            .zip(self.counts.iter())
            .map(|(le, count)| {
                cumulative += count.load(Ordering::Relaxed);
                (*le, cumulative)
            })
            .collect();
        let above = self.counts[self.bounds.len()].load(Ordering::Relaxed);
        HistogramSnapshot {
            buckets,
            count: cumulative + above,
            sum: Duration::from_micros(self.sum_micros.load(Ordering::Relaxed)).as_secs_f64(),
        }
    }
}

/// How a PushContextState call ended, as the push-duration histogram labels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PushResult {
    Accepted,
    DroppedStaleRun,
    DroppedStaleVersion,
    DeltaBaseMissing,
    /// Answered with an error after authentication (invalid, unavailable, failed).
    Error,
}

impl PushResult {
    const ALL: [Self; 5] = [
        Self::Accepted,
        Self::DroppedStaleRun,
        Self::DroppedStaleVersion,
        Self::DeltaBaseMissing,
        Self::Error,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::DroppedStaleRun => "dropped_stale_run",
            Self::DroppedStaleVersion => "dropped_stale_version",
            Self::DeltaBaseMissing => "delta_base_missing",
            Self::Error => "error",
        }
    }
}

/// The steps of an MCP server's connect an agent times (disjoint: they add up).
const CONNECT_PHASES: [&str; 3] = ["start", "handshake", "tools"];

/// The histograms of [`AgentApiMetrics`], copied.
#[derive(Clone, Debug, PartialEq)]
pub struct AgentApiHistograms {
    /// Time from receiving a PushContextState call to its answer (token lookup included),
    /// by result label.
    pub push_seconds: Vec<(&'static str, HistogramSnapshot)>,
    /// Each MCP server's whole connect as its agent reported it, once per connect.
    pub server_connect_seconds: HistogramSnapshot,
    /// The same connects by step label (`start` only for stdio servers).
    pub server_connect_phase_seconds: Vec<(&'static str, HistogramSnapshot)>,
}

/// Counters and histograms a `/metrics` endpoint can read. Monotonic; relaxed ordering
/// is enough for independent counters.
#[derive(Debug)]
pub struct AgentApiMetrics {
    pub(crate) startups_accepted: AtomicU64,
    pub(crate) startups_superseded: AtomicU64,
    pub(crate) pushes_accepted: AtomicU64,
    pub(crate) pushes_dropped_stale_run: AtomicU64,
    pub(crate) pushes_dropped_stale_version: AtomicU64,
    pub(crate) pushes_delta: AtomicU64,
    pub(crate) pushes_delta_base_missing: AtomicU64,
    pub(crate) requests_invalid: AtomicU64,
    pub(crate) requests_unauthenticated: AtomicU64,
    pub(crate) requests_unavailable: AtomicU64,
    pub(crate) requests_failed: AtomicU64,
    /// Indexed like [`PushResult::ALL`].
    push_seconds: [Histogram; 5],
    server_connect_seconds: Histogram,
    /// Indexed like [`CONNECT_PHASES`].
    server_connect_phase_seconds: [Histogram; 3],
}

impl Default for AgentApiMetrics {
    fn default() -> Self {
        let zero = AtomicU64::default;
        Self {
            startups_accepted: zero(),
            startups_superseded: zero(),
            pushes_accepted: zero(),
            pushes_dropped_stale_run: zero(),
            pushes_dropped_stale_version: zero(),
            pushes_delta: zero(),
            pushes_delta_base_missing: zero(),
            requests_invalid: zero(),
            requests_unauthenticated: zero(),
            requests_unavailable: zero(),
            requests_failed: zero(),
            push_seconds: std::array::from_fn(|_| Histogram::new(&PUSH_SECONDS_BUCKETS)),
            server_connect_seconds: Histogram::new(&CONNECT_SECONDS_BUCKETS),
            server_connect_phase_seconds: std::array::from_fn(|_| {
                Histogram::new(&CONNECT_SECONDS_BUCKETS)
            }),
        }
    }
}

/// A point-in-time copy of [`AgentApiMetrics`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AgentApiCounters {
    /// UpdateStartup calls stored.
    pub startups_accepted: u64,
    /// UpdateStartup calls refused for a retired run id (`FailedPrecondition`).
    pub startups_superseded: u64,
    /// PushContextState calls accepted, whether or not they changed anything.
    pub pushes_accepted: u64,
    /// Pushes dropped as coming from another run than the agent's current one.
    pub pushes_dropped_stale_run: u64,
    /// Pushes dropped as replayed or out of order.
    pub pushes_dropped_stale_version: u64,
    /// Delta pushes received (counted in the results above, or as base-missing).
    pub pushes_delta: u64,
    /// Delta pushes refused because their base was not stored.
    pub pushes_delta_base_missing: u64,
    /// Refused for its content: `InvalidArgument` (wire validation, the codec's counting
    /// limits) or `ResourceExhausted` (the codec's decoded-size bound).
    pub requests_invalid: u64,
    /// Answered `Unauthenticated`: a missing, malformed, unknown or wrong bearer token.
    pub requests_unauthenticated: u64,
    /// The database was unavailable or kept conflicting (`Unavailable`/`Aborted`).
    pub requests_unavailable: u64,
    /// Any other failure (`Internal`).
    pub requests_failed: u64,
}

impl AgentApiMetrics {
    /// The counters now, each read on its own.
    pub fn snapshot(&self) -> AgentApiCounters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        AgentApiCounters {
            startups_accepted: get(&self.startups_accepted),
            startups_superseded: get(&self.startups_superseded),
            pushes_accepted: get(&self.pushes_accepted),
            pushes_dropped_stale_run: get(&self.pushes_dropped_stale_run),
            pushes_dropped_stale_version: get(&self.pushes_dropped_stale_version),
            pushes_delta: get(&self.pushes_delta),
            pushes_delta_base_missing: get(&self.pushes_delta_base_missing),
            requests_invalid: get(&self.requests_invalid),
            requests_unauthenticated: get(&self.requests_unauthenticated),
            requests_unavailable: get(&self.requests_unavailable),
            requests_failed: get(&self.requests_failed),
        }
    }

    /// The histograms now, copied.
    pub fn histograms(&self) -> AgentApiHistograms {
        AgentApiHistograms {
            push_seconds: PushResult::ALL
                .iter()
                .zip(&self.push_seconds)
                .map(|(result, h)| (result.as_str(), h.snapshot()))
                .collect(),
            server_connect_seconds: self.server_connect_seconds.snapshot(),
            server_connect_phase_seconds: CONNECT_PHASES
                .iter()
                .zip(&self.server_connect_phase_seconds)
                .map(|(phase, h)| (*phase, h.snapshot()))
                .collect(),
        }
    }

    pub(crate) fn push_finished(&self, result: PushResult, received: Instant) {
        let slot = PushResult::ALL.iter().position(|r| *r == result);
        if let Some(slot) = slot {
            self.push_seconds[slot].observe(received.elapsed());
        }
    }

    /// One MCP server's connect as its agent reported it.
    pub(crate) fn server_connected(&self, timings: &McpConnectTimings) {
        let ms = Duration::from_millis;
        let [start, handshake, tools] = &self.server_connect_phase_seconds;
        if let Some(start_ms) = timings.start_ms {
            start.observe(ms(start_ms));
        }
        handshake.observe(ms(timings.handshake_ms));
        tools.observe(ms(timings.tools_ms));
        let total = timings
            .start_ms
            .unwrap_or(0)
            .saturating_add(timings.handshake_ms)
            .saturating_add(timings.tools_ms);
        self.server_connect_seconds.observe(ms(total));
    }
}

pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_inf_is_the_count() {
        let h = Histogram::new(&PUSH_SECONDS_BUCKETS);
        for ms in [0, 1, 3, 40, 700, 9_000] {
            h.observe(Duration::from_millis(ms));
        }
        let s = h.snapshot();
        assert_eq!(s.count, 6);
        assert!((s.sum - 9.744).abs() < 1e-9, "{}", s.sum);
        let at = |le: f64| s.buckets.iter().find(|b| b.0 == le).unwrap().1;
        assert_eq!(at(0.001), 2, "a bound is inclusive");
        assert_eq!(at(0.005), 3);
        assert_eq!(at(0.05), 4);
        assert_eq!(at(1.0), 5);
        assert_eq!(at(5.0), 5, "9 s is above every bound: only in +Inf");
        assert!(s.buckets.windows(2).all(|w| w[0].1 <= w[1].1));
    }

    #[test]
    fn an_absurd_reported_timing_cannot_wrap_the_sum() {
        let metrics = AgentApiMetrics::default();
        let huge = McpConnectTimings {
            start_ms: Some(u64::MAX),
            handshake_ms: u64::MAX,
            tools_ms: 5,
        };
        metrics.server_connected(&huge);
        metrics.server_connected(&huge);
        let h = metrics.histograms();
        assert_eq!(h.server_connect_seconds.count, 2);
        assert_eq!(
            h.server_connect_seconds.sum,
            2.0 * MAX_OBSERVED.as_secs_f64()
        );
        let tools = &h.server_connect_phase_seconds[2];
        assert_eq!(tools.0, "tools");
        assert_eq!(
            tools.1.buckets[0],
            (0.005, 2),
            "5 ms is within the first bound"
        );
    }

    #[test]
    fn a_stdio_connect_times_its_start_and_an_http_one_does_not() {
        let metrics = AgentApiMetrics::default();
        let stdio = McpConnectTimings {
            start_ms: Some(20),
            handshake_ms: 30,
            tools_ms: 10,
        };
        let http = McpConnectTimings {
            start_ms: None,
            ..stdio
        };
        metrics.server_connected(&stdio);
        metrics.server_connected(&http);
        let h = metrics.histograms();
        assert_eq!(h.server_connect_seconds.count, 2);
        assert!((h.server_connect_seconds.sum - 0.1).abs() < 1e-9);
        let counts: Vec<(&str, u64)> = h
            .server_connect_phase_seconds
            .iter()
            .map(|(phase, s)| (*phase, s.count))
            .collect();
        assert_eq!(counts, [("start", 1), ("handshake", 2), ("tools", 2)]);
    }

    #[test]
    fn push_durations_are_kept_by_result() {
        let metrics = AgentApiMetrics::default();
        metrics.push_finished(PushResult::Accepted, Instant::now());
        metrics.push_finished(PushResult::Error, Instant::now());
        metrics.push_finished(PushResult::Error, Instant::now());
        let counts: Vec<(&str, u64)> = metrics
            .histograms()
            .push_seconds
            .iter()
            .map(|(result, s)| (*result, s.count))
            .collect();
        assert_eq!(
            counts,
            [
                ("accepted", 1),
                ("dropped_stale_run", 0),
                ("dropped_stale_version", 0),
                ("delta_base_missing", 0),
                ("error", 2),
            ]
        );
    }
}
