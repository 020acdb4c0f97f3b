//! Counters for the server's `/metrics`: waits by result, wait durations as a histogram,
//! and what woke waiting attempts. Plain atomics; read as a [`GateMetrics`] snapshot.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;

/// How one caller's wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WaitResult {
    /// Returned after the first read (complete, legacy, missing agent).
    Immediate,
    /// Waited and discovery completed.
    Released,
    /// Waited and the budget or grace ran out.
    TimedOut,
    /// Returned at once because a retained attempt had already timed out.
    ReusedTimeout,
    /// A read failed or the attempt was lost; the turn goes on anyway.
    FailedOpen,
}

/// Upper bounds (seconds) of the wait-duration histogram buckets.
pub const WAIT_SECONDS_BUCKETS: [f64; 7] = [0.005, 0.025, 0.1, 0.5, 1.0, 5.0, 15.0];

#[derive(Debug, Default)]
pub(crate) struct Recorder {
    immediate: AtomicU64,
    released: AtomicU64,
    timed_out: AtomicU64,
    reused_timeout: AtomicU64,
    failed_open: AtomicU64,
    cancelled: AtomicU64,
    wait_micros_sum: AtomicU64,
    /// Per bucket, not cumulative; the last slot counts waits above every bound. The
    /// histogram's count is their total, so `+Inf` and `_count` agree with the buckets
    /// in any scrape (counted from the result counters, they could disagree mid-update).
    wait_buckets: [AtomicU64; WAIT_SECONDS_BUCKETS.len() + 1],
    attempts_started: AtomicU64,
    notification_wakeups: AtomicU64,
    recheck_reads: AtomicU64,
}

impl Recorder {
    pub(crate) fn wait_finished(&self, result: WaitResult, waited: Duration) {
        let counter = match result {
            WaitResult::Immediate => &self.immediate,
            WaitResult::Released => &self.released,
            WaitResult::TimedOut => &self.timed_out,
            WaitResult::ReusedTimeout => &self.reused_timeout,
            WaitResult::FailedOpen => &self.failed_open,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        self.wait_micros_sum.fetch_add(micros, Ordering::Relaxed);
        let seconds = waited.as_secs_f64();
        let slot = WAIT_SECONDS_BUCKETS
            .iter()
            .position(|le| seconds <= *le)
            .unwrap_or(WAIT_SECONDS_BUCKETS.len());
        self.wait_buckets[slot].fetch_add(1, Ordering::Relaxed);
    }

    /// A caller's future was dropped before it returned (its attempt goes on).
    pub(crate) fn wait_cancelled(&self) {
        self.cancelled.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn attempt_started(&self) {
        self.attempts_started.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn notification_wakeup(&self) {
        self.notification_wakeups.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn recheck_read(&self) {
        self.recheck_reads.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self, attempts_waiting: u64, attempts_retained: u64) -> GateMetrics {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut cumulative = 0;
        let wait_seconds_buckets = std::array::from_fn(|i| {
            cumulative += load(&self.wait_buckets[i]);
            (WAIT_SECONDS_BUCKETS[i], cumulative)
        });
        let waits_immediate = load(&self.immediate);
        let waits_released = load(&self.released);
        let waits_timed_out = load(&self.timed_out);
        let waits_reused_timeout = load(&self.reused_timeout);
        let waits_failed_open = load(&self.failed_open);
        GateMetrics {
            waits_immediate,
            waits_released,
            waits_timed_out,
            waits_reused_timeout,
            waits_failed_open,
            waits_cancelled: load(&self.cancelled),
            wait_seconds_sum: Duration::from_micros(load(&self.wait_micros_sum)).as_secs_f64(),
            wait_seconds_count: cumulative + load(&self.wait_buckets[WAIT_SECONDS_BUCKETS.len()]),
            wait_seconds_buckets,
            attempts_started: load(&self.attempts_started),
            attempts_waiting,
            attempts_retained,
            notification_wakeups: load(&self.notification_wakeups),
            recheck_reads: load(&self.recheck_reads),
        }
    }
}

/// A point-in-time copy of the gate's counters.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GateMetrics {
    /// Waits that returned after the first read (complete, legacy, missing agent).
    pub waits_immediate: u64,
    /// Waits released by discovery completing within the budget.
    pub waits_released: u64,
    /// Waits that ended at the budget or the grace.
    pub waits_timed_out: u64,
    /// Waits skipped because a retained attempt of the run already timed out.
    pub waits_reused_timeout: u64,
    /// Waits ended by a failed read or a lost attempt; the turn went ahead anyway.
    pub waits_failed_open: u64,
    /// Callers whose request was dropped while they waited (not in the histogram).
    pub waits_cancelled: u64,
    /// Total seconds waited, over the histogram's waits.
    pub wait_seconds_sum: f64,
    /// How many waits the histogram holds.
    pub wait_seconds_count: u64,
    /// Cumulative `(upper bound in seconds, count)` pairs, as Prometheus wants them.
    pub wait_seconds_buckets: [(f64, u64); WAIT_SECONDS_BUCKETS.len()],
    /// Shared attempts ever started (one per chat, agent and run that had to wait).
    pub attempts_started: u64,
    /// Attempts waiting right now.
    pub attempts_waiting: u64,
    /// Timed-out attempts held for reuse (expired ones until the next wait sweeps them).
    pub attempts_retained: u64,
    /// Re-reads caused by a change notification.
    pub notification_wakeups: u64,
    /// Re-reads caused by the slow re-check timer (each one means a notification was
    /// late, lost, or never coming).
    pub recheck_reads: u64,
}

impl GateMetrics {
    /// Appends the metrics in the Prometheus text format, named `{prefix}_…`.
    pub fn write_prometheus(&self, prefix: &str, out: &mut String) {
        // Writing to a String cannot fail.
        let _ = self.try_write_prometheus(prefix, out);
    }

    fn try_write_prometheus(&self, prefix: &str, out: &mut String) -> std::fmt::Result {
        writeln!(
            out,
            "# HELP {prefix}_waits_total First-turn gate waits by result."
        )?;
        writeln!(out, "# TYPE {prefix}_waits_total counter")?;
        for (result, value) in [
            ("immediate", self.waits_immediate),
            ("released", self.waits_released),
            ("timed_out", self.waits_timed_out),
            ("reused_timeout", self.waits_reused_timeout),
            ("failed_open", self.waits_failed_open),
            ("cancelled", self.waits_cancelled),
        ] {
            writeln!(out, "{prefix}_waits_total{{result=\"{result}\"}} {value}")?;
        }
        writeln!(
            out,
            "# HELP {prefix}_wait_seconds Time turns spent in the gate."
        )?;
        writeln!(out, "# TYPE {prefix}_wait_seconds histogram")?;
        for (le, count) in self.wait_seconds_buckets {
            writeln!(out, "{prefix}_wait_seconds_bucket{{le=\"{le}\"}} {count}")?;
        }
        let count = self.wait_seconds_count;
        writeln!(out, "{prefix}_wait_seconds_bucket{{le=\"+Inf\"}} {count}")?;
        writeln!(out, "{prefix}_wait_seconds_sum {}", self.wait_seconds_sum)?;
        writeln!(out, "{prefix}_wait_seconds_count {count}")?;
        for (name, kind, help, value) in [
            (
                "attempts_started_total",
                "counter",
                "Shared wait attempts started.",
                self.attempts_started,
            ),
            (
                "attempts_waiting",
                "gauge",
                "Shared wait attempts in progress.",
                self.attempts_waiting,
            ),
            (
                "attempts_retained",
                "gauge",
                "Timed-out attempts kept for reuse.",
                self.attempts_retained,
            ),
            (
                "notification_wakeups_total",
                "counter",
                "Re-reads caused by change notifications.",
                self.notification_wakeups,
            ),
            (
                "recheck_reads_total",
                "counter",
                "Re-reads caused by the slow re-check timer.",
                self.recheck_reads,
            ),
        ] {
            writeln!(out, "# HELP {prefix}_{name} {help}")?;
            writeln!(out, "# TYPE {prefix}_{name} {kind}")?;
            writeln!(out, "{prefix}_{name} {value}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_land_in_cumulative_buckets_and_the_sum() {
        let recorder = Recorder::default();
        recorder.wait_finished(WaitResult::Immediate, Duration::ZERO);
        recorder.wait_finished(WaitResult::Released, Duration::from_millis(300));
        recorder.wait_finished(WaitResult::TimedOut, Duration::from_secs(15));
        recorder.wait_finished(WaitResult::FailedOpen, Duration::from_secs(20));
        recorder.wait_cancelled();
        let metrics = recorder.snapshot(1, 2);
        assert_eq!(metrics.wait_seconds_count, 4);
        assert!((metrics.wait_seconds_sum - 35.3).abs() < 1e-9);
        let counts: Vec<u64> = metrics.wait_seconds_buckets.iter().map(|b| b.1).collect();
        assert_eq!(counts, [1, 1, 1, 2, 2, 2, 3]);
        assert_eq!(metrics.waits_cancelled, 1);

        let mut text = String::new();
        metrics.write_prometheus("gate", &mut text);
        for line in [
            "gate_waits_total{result=\"released\"} 1",
            "gate_waits_total{result=\"cancelled\"} 1",
            "gate_wait_seconds_bucket{le=\"0.5\"} 2",
            "gate_wait_seconds_bucket{le=\"15\"} 3",
            "gate_wait_seconds_bucket{le=\"+Inf\"} 4",
            "gate_wait_seconds_sum 35.3",
            "gate_wait_seconds_count 4",
            "gate_attempts_waiting 1",
            "gate_attempts_retained 2",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing `{line}` in\n{text}"
            );
        }
        // Every sample belongs to a family declared with HELP and TYPE before it.
        let mut declared = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                declared.push(rest.split(' ').next().unwrap().to_owned());
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap();
                let family = declared.last().expect("a TYPE line first");
                assert!(name.starts_with(family.as_str()), "{line} after {family}");
                assert!(text.contains(&format!("# HELP {family} ")), "{family}");
            }
        }
    }

    #[test]
    fn the_count_is_the_buckets_total_whatever_the_result() {
        let recorder = Recorder::default();
        recorder.wait_finished(WaitResult::ReusedTimeout, Duration::from_secs(60));
        recorder.wait_finished(WaitResult::Released, Duration::from_millis(5));
        let metrics = recorder.snapshot(0, 0);
        assert_eq!(metrics.wait_seconds_count, 2);
        assert_eq!(metrics.wait_seconds_buckets[0], (0.005, 1));
        assert_eq!(
            metrics.wait_seconds_buckets[6],
            (15.0, 1),
            "60 s is only in +Inf"
        );
    }
}
