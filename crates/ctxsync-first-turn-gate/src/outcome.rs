//! What a wait reports, and the pure rules (SPEC §7, §8) that turn one observation into a
//! phase, a freshness verdict and a decision to return or to wait.

use std::time::Duration;

use ctxsync_protocol::DiscoveryPhase;
use serde::Serialize;

use crate::source::{DiscoveryCounts, Observation};

/// Discovery phase as chats see it (SPEC §7).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// No completeness guarantee: a legacy agent, no snapshot from a legacy agent, an
    /// agent that no longer exists, or no bound agent.
    Unknown,
    Pending,
    Complete,
}

/// Why the gate returned. Never an error for the turn: every reason lets it proceed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeReason {
    /// The current run's discovery is complete (at once, or after waiting).
    DiscoveryComplete,
    /// The current run's snapshot gives no completeness guarantee (`unspecified`).
    NoCompletenessGuarantee,
    AgentMissing,
    /// The chat is bound to no agent (only from `prepare_turn`).
    NoBoundAgent,
    /// The current run stayed pending for the whole budget.
    BudgetExhausted,
    /// No snapshot of the current run arrived within the grace.
    NoCurrentSnapshot,
    /// An earlier wait of this process already timed out (and is retained); refreshed by
    /// one read instead of spending the budget again.
    EarlierWaitTimedOut,
    /// Committed state could not be read; see [`Outcome::error`].
    SourceUnavailable,
    /// The shared attempt ended without a result (its task panicked or was aborted).
    AttemptLost,
}

/// The result of [`FirstTurnGate::wait_for_discovery`](crate::FirstTurnGate::wait_for_discovery).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Outcome {
    pub phase: Phase,
    /// The stored snapshot comes from another agent process than the one running now.
    pub stale: bool,
    /// Discovery was not complete when the wait ended (now or in a retained earlier wait).
    pub wait_timed_out: bool,
    /// From the latest successful read of the committed rows.
    #[serde(flatten)]
    pub counts: DiscoveryCounts,
    pub reason: OutcomeReason,
    /// The source's message when the latest read failed.
    pub error: Option<String>,
    /// How long this caller waited, in milliseconds.
    pub waited_ms: u64,
}

impl Outcome {
    /// Describes `observation` with no wait having happened.
    pub(crate) fn observed(observation: &Observation, reason: OutcomeReason) -> Self {
        let (phase, stale, counts) = describe(observation);
        Self {
            phase,
            stale,
            wait_timed_out: false,
            counts,
            reason,
            error: None,
            waited_ms: 0,
        }
    }

    /// Nothing could be observed: unknown, with `reason` and an optional error.
    pub(crate) fn unobserved(reason: OutcomeReason, error: Option<String>) -> Self {
        Self {
            phase: Phase::Unknown,
            stale: false,
            wait_timed_out: false,
            counts: DiscoveryCounts::default(),
            reason,
            error,
            waited_ms: 0,
        }
    }

    pub(crate) fn timed_out(mut self) -> Self {
        self.wait_timed_out = true;
        self
    }

    pub(crate) fn with_waited(mut self, waited: Duration) -> Self {
        self.waited_ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
        self
    }
}

/// What one observation means for a waiter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing more to wait for.
    Ready(OutcomeReason),
    /// The current run is pending: wait up to the budget.
    AwaitCompletion,
    /// No snapshot of the current run yet (none, or a previous run's): wait up to the
    /// grace for one to appear.
    AwaitCurrentSnapshot,
}

/// An empty run id means "none" in storage; both spellings are the same here.
fn normalized(run_id: Option<&String>) -> Option<&str> {
    run_id.map(String::as_str).filter(|id| !id.is_empty())
}

/// The agent row's run id, which keys attempts (`None` for a missing or legacy agent).
pub(crate) fn current_run(observation: &Observation) -> Option<String> {
    match observation {
        Observation::AgentMissing => None,
        Observation::Agent { run_id, .. } => normalized(run_id.as_ref()).map(str::to_owned),
    }
}

/// Phase, freshness and counts by the projection's rules (SPEC §7).
pub(crate) fn describe(observation: &Observation) -> (Phase, bool, DiscoveryCounts) {
    match observation {
        Observation::AgentMissing => (Phase::Unknown, true, DiscoveryCounts::default()),
        Observation::Agent {
            run_id,
            snapshot: None,
        } => {
            let phase = match normalized(run_id.as_ref()) {
                Some(_) => Phase::Pending,
                None => Phase::Unknown,
            };
            (phase, false, DiscoveryCounts::default())
        }
        Observation::Agent {
            run_id,
            snapshot: Some(snapshot),
        } => {
            let phase = match snapshot.phase {
                DiscoveryPhase::Unspecified => Phase::Unknown,
                DiscoveryPhase::Pending => Phase::Pending,
                DiscoveryPhase::Complete => Phase::Complete,
            };
            let stale = normalized(run_id.as_ref()) != normalized(snapshot.run_id.as_ref());
            (phase, stale, snapshot.counts)
        }
    }
}

/// Whether to return or wait, and for how long (SPEC §8).
pub(crate) fn verdict(observation: &Observation) -> Verdict {
    let Observation::Agent { run_id, snapshot } = observation else {
        return Verdict::Ready(OutcomeReason::AgentMissing);
    };
    match snapshot {
        Some(snapshot) if normalized(run_id.as_ref()) == normalized(snapshot.run_id.as_ref()) => {
            match snapshot.phase {
                DiscoveryPhase::Complete => Verdict::Ready(OutcomeReason::DiscoveryComplete),
                DiscoveryPhase::Unspecified => {
                    Verdict::Ready(OutcomeReason::NoCompletenessGuarantee)
                }
                DiscoveryPhase::Pending => Verdict::AwaitCompletion,
            }
        }
        _ => Verdict::AwaitCurrentSnapshot,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::SnapshotObservation;

    const COUNTS: DiscoveryCounts = DiscoveryCounts {
        servers_ok: 2,
        servers_empty: 1,
        servers_failed: 1,
        config_errors: 1,
    };

    fn agent(run: &str, snapshot: Option<(&str, DiscoveryPhase)>) -> Observation {
        let id = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        Observation::Agent {
            run_id: id(run),
            snapshot: snapshot.map(|(run, phase)| SnapshotObservation {
                run_id: id(run),
                phase,
                counts: COUNTS,
            }),
        }
    }

    fn check(observation: Observation, expect: (Phase, bool, Verdict)) {
        let (phase, stale, counts) = describe(&observation);
        assert_eq!(
            (phase, stale, verdict(&observation)),
            expect,
            "{observation:?}"
        );
        let has_snapshot = matches!(
            observation,
            Observation::Agent {
                snapshot: Some(_),
                ..
            }
        );
        let expected_counts = if has_snapshot {
            COUNTS
        } else {
            DiscoveryCounts::default()
        };
        assert_eq!(counts, expected_counts, "{observation:?}");
    }

    use DiscoveryPhase::{Complete, Pending, Unspecified};
    use Verdict::{AwaitCompletion, AwaitCurrentSnapshot, Ready};

    #[test]
    fn fresh_snapshots_follow_their_phase() {
        let done = Ready(OutcomeReason::DiscoveryComplete);
        check(
            agent("a", Some(("a", Complete))),
            (Phase::Complete, false, done),
        );
        check(
            agent("a", Some(("a", Pending))),
            (Phase::Pending, false, AwaitCompletion),
        );
        let legacy = Ready(OutcomeReason::NoCompletenessGuarantee);
        check(
            agent("", Some(("", Unspecified))),
            (Phase::Unknown, false, legacy),
        );
        // An MCP-disabled agent of the current run: no guarantee either.
        check(
            agent("a", Some(("a", Unspecified))),
            (Phase::Unknown, false, legacy),
        );
        // No run ids on either side, but a phase: the phase decides.
        check(
            agent("", Some(("", Pending))),
            (Phase::Pending, false, AwaitCompletion),
        );
    }

    #[test]
    fn a_previous_runs_snapshot_is_stale_and_awaits_the_current_one() {
        let wait = AwaitCurrentSnapshot;
        check(
            agent("b", Some(("a", Complete))),
            (Phase::Complete, true, wait),
        );
        check(
            agent("b", Some(("a", Pending))),
            (Phase::Pending, true, wait),
        );
        // A legacy snapshot under a current run.
        check(
            agent("b", Some(("", Unspecified))),
            (Phase::Unknown, true, wait),
        );
        // A legacy agent row left with a run-stamped snapshot.
        check(
            agent("", Some(("a", Complete))),
            (Phase::Complete, true, wait),
        );
    }

    #[test]
    fn no_snapshot_awaits_one() {
        check(
            agent("a", None),
            (Phase::Pending, false, AwaitCurrentSnapshot),
        );
        check(
            agent("", None),
            (Phase::Unknown, false, AwaitCurrentSnapshot),
        );
    }

    #[test]
    fn a_missing_agent_is_unknown_and_stale() {
        check(
            Observation::AgentMissing,
            (Phase::Unknown, true, Ready(OutcomeReason::AgentMissing)),
        );
    }

    #[test]
    fn empty_run_ids_mean_none() {
        let observation = Observation::Agent {
            run_id: Some(String::new()),
            snapshot: Some(SnapshotObservation {
                run_id: None,
                phase: Complete,
                counts: COUNTS,
            }),
        };
        assert_eq!(current_run(&observation), None);
        check(
            observation,
            (
                Phase::Complete,
                false,
                Ready(OutcomeReason::DiscoveryComplete),
            ),
        );
    }

    #[test]
    fn outcome_serializes_flat_with_snake_case_names() {
        let outcome = Outcome::observed(
            &agent("b", Some(("a", Pending))),
            OutcomeReason::NoCurrentSnapshot,
        )
        .timed_out()
        .with_waited(Duration::from_millis(3000));
        let json = serde_json::to_value(&outcome).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "phase": "pending",
                "stale": true,
                "wait_timed_out": true,
                "servers_ok": 2,
                "servers_empty": 1,
                "servers_failed": 1,
                "config_errors": 1,
                "reason": "no_current_snapshot",
                "error": null,
                "waited_ms": 3000,
            })
        );
    }
}
