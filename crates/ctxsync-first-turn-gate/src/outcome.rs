//! What a wait reports, and the one rule the gate owns (SPEC §8): whether a view of the
//! agent lets the turn go now or waits. Phase, freshness and counts are the chat
//! projection's, taken from its [`View`] as they are.

use std::time::Duration;

use ctxsync_chat_projection::{AgentPresence, Connection, Counts, View, ViewPhase, rfc3339_utc};
use ctxsync_protocol::RunId;
use serde::Serialize;

/// Why the gate returned. Never an error for the turn: every reason lets it proceed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum OutcomeReason {
    /// The current run's discovery is complete (at once, or after waiting).
    DiscoveryComplete,
    /// The current run's snapshot gives no completeness guarantee (phase `unknown`).
    NoCompletenessGuarantee,
    /// The chat's agent does not exist (deleted, or never created).
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

/// The result of a first turn's wait for discovery (`FirstTurnGate::wait_for_discovery`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Outcome {
    /// The projection's phase of the view this outcome describes.
    pub phase: ViewPhase,
    /// The projection's freshness verdict of that view.
    pub stale: bool,
    /// Discovery was not complete when the wait ended (now or in a retained earlier wait).
    pub wait_timed_out: bool,
    /// The projection's counts of that view.
    #[serde(flatten)]
    pub counts: Counts,
    /// Why the wait ended as it did.
    pub reason: OutcomeReason,
    /// The source's message when the latest read failed.
    pub error: Option<String>,
    /// How long this caller waited, in milliseconds.
    pub waited_ms: u64,
    /// Whether the agent process was connected in that view: `online`, `offline` or
    /// `never` (the projection's word, as the panel header says it). An offline agent's
    /// tools stay in the turn, but a call of one cannot reach it.
    pub connection: &'static str,
    /// While `offline`: when the control plane saw its stream end (RFC 3339, UTC).
    pub offline_since: Option<String>,
}

impl Outcome {
    /// Describes `view` with no wait having happened.
    pub(crate) fn observed(view: &View, reason: OutcomeReason) -> Self {
        Self {
            phase: view.phase(),
            stale: view.is_stale(),
            wait_timed_out: false,
            counts: view.counts(),
            reason,
            error: None,
            waited_ms: 0,
            connection: view.connection().as_str(),
            offline_since: offline_since(view),
        }
    }

    /// Nothing could be observed: unknown, with `reason` and an optional error.
    pub(crate) fn unobserved(reason: OutcomeReason, error: Option<String>) -> Self {
        Self {
            phase: ViewPhase::Unknown,
            stale: false,
            wait_timed_out: false,
            counts: Counts::default(),
            reason,
            error,
            waited_ms: 0,
            connection: Connection::Never.as_str(),
            offline_since: None,
        }
    }

    /// The same wait, described by `view` (read after it ended): a turn's outcome, tools
    /// and note then come from one read.
    pub(crate) fn restated(mut self, view: &View) -> Self {
        self.phase = view.phase();
        self.stale = view.is_stale();
        self.counts = view.counts();
        self.connection = view.connection().as_str();
        self.offline_since = offline_since(view);
        self
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

fn offline_since(view: &View) -> Option<String> {
    view.connection().offline_since().map(rfc3339_utc)
}

/// What one view means for a waiter.
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

/// The agent row's run id, which keys attempts (`None` for a missing or legacy agent).
pub(crate) fn current_run(view: &View) -> Option<RunId> {
    view.current_run().cloned()
}

/// Whether to return or wait, and for how long (SPEC §8), from the projection's view.
pub(crate) fn verdict(view: &View) -> Verdict {
    if matches!(
        view.agent(),
        AgentPresence::Missing | AgentPresence::Unbound
    ) {
        return Verdict::Ready(OutcomeReason::AgentMissing);
    }
    if !view.reports_current_run() {
        return Verdict::AwaitCurrentSnapshot;
    }
    match view.phase() {
        ViewPhase::Complete => Verdict::Ready(OutcomeReason::DiscoveryComplete),
        ViewPhase::Unknown => Verdict::Ready(OutcomeReason::NoCompletenessGuarantee),
        ViewPhase::Pending => Verdict::AwaitCompletion,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxsync_chat_projection::{AgentState, Binding, SnapshotState, project};
    use ctxsync_protocol::DiscoveryPhase;

    fn agent(run: &str, snapshot: Option<(&str, DiscoveryPhase)>) -> View {
        project(&Binding::Agent(AgentState {
            agent_run_id: RunId::new(run),
            snapshot: snapshot.map(|(run, phase)| SnapshotState {
                agent_run_id: RunId::new(run),
                phase,
                ..SnapshotState::default()
            }),
            ..Default::default()
        }))
    }

    /// The gate's verdict beside the projection's phase and freshness, which it reports
    /// unchanged.
    fn check(view: View, expect: (ViewPhase, bool, Verdict)) {
        let outcome = Outcome::observed(&view, OutcomeReason::DiscoveryComplete);
        assert_eq!(
            (outcome.phase, outcome.stale),
            (view.phase(), view.is_stale())
        );
        assert_eq!(outcome.counts, view.counts());
        assert_eq!(
            (view.phase(), view.is_stale(), verdict(&view)),
            expect,
            "{view:?}"
        );
    }

    use DiscoveryPhase::{Complete, Pending, Unspecified};
    use Verdict::{AwaitCompletion, AwaitCurrentSnapshot, Ready};

    #[test]
    fn fresh_snapshots_follow_their_phase() {
        let done = Ready(OutcomeReason::DiscoveryComplete);
        check(
            agent("a", Some(("a", Complete))),
            (ViewPhase::Complete, false, done),
        );
        check(
            agent("a", Some(("a", Pending))),
            (ViewPhase::Pending, false, AwaitCompletion),
        );
        let legacy = Ready(OutcomeReason::NoCompletenessGuarantee);
        check(
            agent("", Some(("", Unspecified))),
            (ViewPhase::Unknown, false, legacy),
        );
        // An MCP-disabled agent of the current run: no guarantee either.
        check(
            agent("a", Some(("a", Unspecified))),
            (ViewPhase::Unknown, false, legacy),
        );
        // No run ids on either side, but a phase: the phase decides.
        check(
            agent("", Some(("", Pending))),
            (ViewPhase::Pending, false, AwaitCompletion),
        );
    }

    #[test]
    fn a_previous_runs_snapshot_is_stale_and_awaits_the_current_one() {
        let wait = AwaitCurrentSnapshot;
        check(
            agent("b", Some(("a", Complete))),
            (ViewPhase::Complete, true, wait),
        );
        check(
            agent("b", Some(("a", Pending))),
            (ViewPhase::Pending, true, wait),
        );
        // A legacy snapshot under a current run.
        check(
            agent("b", Some(("", Unspecified))),
            (ViewPhase::Unknown, true, wait),
        );
        // A legacy agent row left with a run-stamped snapshot.
        check(
            agent("", Some(("a", Complete))),
            (ViewPhase::Complete, true, wait),
        );
    }

    #[test]
    fn no_snapshot_awaits_one() {
        check(
            agent("a", None),
            (ViewPhase::Pending, false, AwaitCurrentSnapshot),
        );
        check(
            agent("", None),
            (ViewPhase::Unknown, false, AwaitCurrentSnapshot),
        );
    }

    #[test]
    fn a_missing_agent_is_unknown_and_stale() {
        check(
            project(&Binding::MissingAgent),
            (ViewPhase::Unknown, true, Ready(OutcomeReason::AgentMissing)),
        );
    }

    #[test]
    fn empty_run_ids_mean_none() {
        let view = agent("", Some(("", Complete)));
        assert_eq!(current_run(&view), None);
        assert_eq!(current_run(&agent("a", None)).as_deref(), Some("a"));
        check(
            view,
            (
                ViewPhase::Complete,
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
                "servers_ok": 0,
                "servers_empty": 0,
                "servers_failed": 0,
                "servers_needing_authorization": 0,
                "config_errors": 0,
                "reason": "no_current_snapshot",
                "error": null,
                "waited_ms": 3000,
                "connection": "never",
                "offline_since": null,
            })
        );
    }
}
