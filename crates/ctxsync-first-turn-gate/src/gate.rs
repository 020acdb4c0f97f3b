//! The gate: one shared, bounded wait per (chat, agent, run id), woken by change
//! notifications, and the turn preparation built on it.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{oneshot, watch};
use tokio::time::{Instant, MissedTickBehavior};

use crate::attempt_log::{AttemptLog, AttemptRecord, AttemptResult, MemoryAttemptLog, RecordedEnd};
use crate::config::GateConfig;
use crate::metrics::{GateMetrics, Recorder, WaitResult};
use crate::outcome::{Outcome, OutcomeReason, Verdict, current_run, verdict};
use crate::source::{ChangeSubscription, DiscoverySource, SourceError};
use ctxsync_chat_projection::View;
use ctxsync_protocol::RunId;

/// What kind of turn is being prepared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TurnMode {
    /// A normal turn: waits for discovery (only the first turn of an agent process
    /// spends the budget) and reports the outcome.
    Default,
    /// A planning turn: never waits and carries no outcome.
    Plan,
}

/// What a turn runs with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TurnContext<T> {
    /// Eligible tools, read after the wait so tools found meanwhile are included.
    pub tools: Vec<T>,
    /// The model note when discovery is incomplete.
    pub note: Option<String>,
    /// The wait's outcome; `None` for a plan-mode turn. Its phase, freshness and counts
    /// are those of the view `tools` and `note` came from (one read), unless that read
    /// failed.
    pub outcome: Option<Outcome>,
    /// Why `tools` and `note` are empty when the inventory could not be read; the turn
    /// proceeds without workspace tools.
    pub inventory_error: Option<String>,
}

/// Result of [`FirstTurnGate::measure_release`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseSample {
    /// From just before the commit started to the waiter's release.
    pub latency: Duration,
    /// The outcome the released waiter got.
    pub outcome: Outcome,
}

/// The in-memory attempt log of [`FirstTurnGate::new`].
pub type DefaultAttemptLog<S> =
    MemoryAttemptLog<<S as DiscoverySource>::ChatId, <S as DiscoverySource>::AgentId>;

/// The first-turn gate. Cheap to clone; clones share attempts and metrics.
///
/// Concurrent turns in this process share one waiting attempt; the attempt log `L` is
/// what tells other processes (replicas, or this one after a restart) that a run's
/// attempt already started, timed out or completed.
///
/// Must be used inside a tokio runtime: each attempt runs on a spawned task so that no
/// caller's cancellation cancels it.
pub struct FirstTurnGate<S: DiscoverySource, L = DefaultAttemptLog<S>> {
    inner: Arc<Inner<S, L>>,
}

impl<S: DiscoverySource, L> Clone for FirstTurnGate<S, L> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<S: DiscoverySource, L> fmt::Debug for FirstTurnGate<S, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FirstTurnGate")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

type AttemptKey<S> = (
    <S as DiscoverySource>::ChatId,
    <S as DiscoverySource>::AgentId,
    Option<RunId>,
);

struct Inner<S: DiscoverySource, L> {
    source: S,
    log: L,
    config: GateConfig,
    attempts: Mutex<Attempts<S>>,
    metrics: Recorder,
}

struct Attempts<S: DiscoverySource> {
    next_id: u64,
    entries: HashMap<AttemptKey<S>, Entry>,
}

enum Entry {
    Waiting {
        id: u64,
        end: watch::Receiver<Option<AttemptEnd>>,
    },
    TimedOut {
        expires_at: Instant,
    },
}

#[derive(Clone, Debug)]
struct AttemptEnd {
    outcome: Outcome,
    timed_out: bool,
}

impl<S: DiscoverySource> Attempts<S> {
    fn sweep(&mut self, now: Instant) {
        self.entries.retain(|_, entry| match entry {
            Entry::TimedOut { expires_at } => *expires_at > now,
            Entry::Waiting { .. } => true,
        });
    }

    fn remove_if_current(&mut self, key: &AttemptKey<S>, id: u64) {
        if matches!(self.entries.get(key), Some(Entry::Waiting { id: current, .. }) if *current == id)
        {
            self.entries.remove(key);
        }
    }
}

impl<S: DiscoverySource> FirstTurnGate<S> {
    /// A gate whose attempts are remembered by this process only.
    pub fn new(source: S, config: GateConfig) -> Self {
        Self::with_attempt_log(source, MemoryAttemptLog::new(), config)
    }
}

/// What the attempt log says about a key this process has no attempt for.
enum Recorded {
    /// Nothing to go by: a new attempt with the whole budget.
    Nothing,
    /// An attempt elsewhere is still waiting, started this long ago and ending within
    /// `left`: wait until its deadline, not a new budget.
    Waiting {
        started_ago: Duration,
        left: Duration,
    },
    /// The run's wait already timed out; kept for this much longer.
    TimedOut { kept_for: Duration },
}

impl<S: DiscoverySource, L: AttemptLog<S::ChatId, S::AgentId>> FirstTurnGate<S, L> {
    /// A gate recording its attempts in `log`, so processes sharing the log never wait
    /// twice for one run.
    pub fn with_attempt_log(source: S, log: L, config: GateConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                source,
                log,
                config,
                attempts: Mutex::new(Attempts {
                    next_id: 0,
                    entries: HashMap::new(),
                }),
                metrics: Recorder::default(),
            }),
        }
    }

    /// The budgets and intervals this gate runs with.
    pub fn config(&self) -> &GateConfig {
        &self.inner.config
    }

    /// Where this gate records its attempts.
    pub fn attempt_log(&self) -> &L {
        &self.inner.log
    }

    /// Waits, bounded, until `agent`'s current process has finished MCP discovery, and
    /// says how it went. Never fails: every problem is described in the outcome.
    ///
    /// Returns at once for a complete or legacy current run. Otherwise joins the one
    /// attempt for (chat, agent, run id), starting it if needed; a retained timed-out
    /// attempt returns at once with a fresh read instead of waiting again.
    pub async fn wait_for_discovery(&self, chat: S::ChatId, agent: S::AgentId) -> Outcome {
        self.inner.wait(chat, agent, None).await
    }

    /// Prepares a turn of `chat`: reads the agent the chat is bound to, then as
    /// [`Self::prepare_bound_turn`].
    pub async fn prepare_turn(&self, chat: S::ChatId, mode: TurnMode) -> TurnContext<S::Tool> {
        let inner = &self.inner;
        let started = Instant::now();
        let deadline = after(started, inner.config.read_timeout);
        let bound = inner
            .bounded(deadline, inner.source.bound_agent(&chat))
            .await;
        if let Err(error) = &bound {
            log_source_error(error, "reading the chat's bound agent");
        }
        self.prepare(chat, bound, mode, started).await
    }

    /// Prepares a turn of `chat`, bound to `agent` as the caller just read it (so a turn
    /// reads its chat once): in [`TurnMode::Default`] waits for discovery of that agent
    /// first, then reads the view the turn runs with once: its tools, its note and the
    /// outcome's phase, freshness and counts all come from that read.
    pub async fn prepare_bound_turn(
        &self,
        chat: S::ChatId,
        agent: Option<S::AgentId>,
        mode: TurnMode,
    ) -> TurnContext<S::Tool> {
        self.prepare(chat, Ok(agent), mode, Instant::now()).await
    }

    async fn prepare(
        &self,
        chat: S::ChatId,
        bound: Result<Option<S::AgentId>, SourceError>,
        mode: TurnMode,
        started: Instant,
    ) -> TurnContext<S::Tool> {
        let outcome = match mode {
            TurnMode::Plan => None,
            TurnMode::Default => Some(self.wait_for_bound_agent(&chat, &bound, started).await),
        };
        let agent = match bound {
            Ok(agent) => agent,
            // Nothing to read the inventory of: the turn proceeds without tools.
            Err(error) => {
                return TurnContext {
                    tools: Vec::new(),
                    note: None,
                    outcome,
                    inventory_error: Some(error.message().to_owned()),
                };
            }
        };
        let inner = &self.inner;
        let deadline = after(Instant::now(), inner.config.read_timeout);
        match inner
            .bounded(deadline, inner.source.turn_inventory(&chat, agent.as_ref()))
            .await
        {
            Ok(inventory) => TurnContext {
                tools: inventory.tools,
                note: inventory.view.model_note(),
                outcome: outcome.map(|outcome| outcome.restated(&inventory.view)),
                inventory_error: None,
            },
            Err(error) => {
                log_source_error(&error, "reading the turn inventory");
                TurnContext {
                    tools: Vec::new(),
                    note: None,
                    outcome,
                    inventory_error: Some(error.message().to_owned()),
                }
            }
        }
    }

    /// Measures how fast a waiter is released: starts waiting for `agent`, and once the
    /// waiter has joined an attempt, runs `commit` (which should commit the completing
    /// change and return). Returns the time from just before `commit` to the release,
    /// or `Err` with the outcome when the waiter returned without waiting.
    pub async fn measure_release(
        &self,
        chat: S::ChatId,
        agent: S::AgentId,
        commit: impl Future<Output = ()>,
    ) -> Result<ReleaseSample, Outcome> {
        let (joined_tx, joined_rx) = oneshot::channel();
        let waiter = async {
            let outcome = self.inner.wait(chat, agent, Some(joined_tx)).await;
            (outcome, Instant::now())
        };
        tokio::pin!(waiter);
        tokio::select! {
            (outcome, _) = &mut waiter => return Err(outcome),
            joined = joined_rx => if joined.is_err() {
                return Err(waiter.await.0);
            },
        }
        let commit_started = Instant::now();
        let ((), (outcome, released_at)) = tokio::join!(commit, waiter);
        Ok(ReleaseSample {
            latency: released_at.saturating_duration_since(commit_started),
            outcome,
        })
    }

    /// A copy of the counters and the wait histogram so far.
    pub fn metrics(&self) -> GateMetrics {
        let attempts = self.inner.lock_attempts();
        let waiting = attempts
            .entries
            .values()
            .filter(|e| matches!(e, Entry::Waiting { .. }))
            .count();
        let retained = attempts.entries.len() - waiting;
        drop(attempts);
        self.inner.metrics.snapshot(waiting as u64, retained as u64)
    }

    async fn wait_for_bound_agent(
        &self,
        chat: &S::ChatId,
        bound: &Result<Option<S::AgentId>, SourceError>,
        started: Instant,
    ) -> Outcome {
        let inner = &self.inner;
        let (result, outcome) = match bound {
            Ok(Some(agent)) => return inner.wait(chat.clone(), agent.clone(), None).await,
            Ok(None) => (
                WaitResult::Immediate,
                Outcome::unobserved(OutcomeReason::NoBoundAgent, None),
            ),
            Err(error) => (
                WaitResult::FailedOpen,
                Outcome::unobserved(
                    OutcomeReason::SourceUnavailable,
                    Some(error.message().to_owned()),
                ),
            ),
        };
        let waited = started.elapsed();
        inner.metrics.wait_finished(result, waited);
        outcome.with_waited(waited)
    }
}

/// Counts a caller whose future is dropped before it returns.
struct CancellationWatch<'a> {
    metrics: &'a Recorder,
    finished: bool,
}

impl Drop for CancellationWatch<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.metrics.wait_cancelled();
        }
    }
}

impl<S: DiscoverySource, L> Inner<S, L> {
    fn lock_attempts(&self) -> MutexGuard<'_, Attempts<S>> {
        // The map stays consistent even if a holder panicked: every update is one step.
        self.attempts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl<S: DiscoverySource, L: AttemptLog<S::ChatId, S::AgentId>> Inner<S, L> {
    async fn bounded<T>(
        &self,
        deadline: Instant,
        read: impl Future<Output = Result<T, SourceError>>,
    ) -> Result<T, SourceError> {
        match tokio::time::timeout_at(deadline, read).await {
            Ok(result) => result,
            Err(_) => Err(SourceError::new("reading discovery state timed out")),
        }
    }

    /// What the attempt log says about `key`, judged by this gate's budgets. A log that
    /// cannot be read says nothing: the caller may wait again, but is never failed.
    async fn recorded(&self, key: &AttemptKey<S>, deadline: Instant) -> Recorded {
        let (chat, agent, run) = key;
        let read = self.log.read(chat, agent, run.as_ref());
        match self.bounded(deadline, read).await {
            Ok(record) => self.judge(record),
            Err(error) => {
                log_source_error(&error, "reading the attempt log");
                Recorded::Nothing
            }
        }
    }

    fn judge(&self, record: Option<AttemptRecord>) -> Recorded {
        let config = &self.config;
        let kept =
            |timed_out_ago: Duration| match config.timed_out_retention.checked_sub(timed_out_ago) {
                Some(kept_for) if !kept_for.is_zero() => Recorded::TimedOut { kept_for },
                _ => Recorded::Nothing,
            };
        match record {
            None
            | Some(AttemptRecord {
                end:
                    Some(RecordedEnd {
                        result: AttemptResult::Completed,
                        ..
                    }),
                ..
            }) => Recorded::Nothing,
            Some(AttemptRecord {
                end:
                    Some(RecordedEnd {
                        result: AttemptResult::TimedOut,
                        ago,
                    }),
                ..
            }) => kept(ago),
            // Past its limit, an attempt that never ended (its process died waiting, or
            // its end is being recorded right now) has spent the run's wait all the same.
            Some(AttemptRecord {
                started_ago,
                wait_limit,
                end: None,
            }) => match started_ago.checked_sub(wait_limit) {
                Some(overdue) => kept(overdue),
                None => Recorded::Waiting {
                    started_ago,
                    left: wait_limit - started_ago,
                },
            },
        }
    }

    /// One caller's wait. `joined` is told when the caller has joined a waiting attempt
    /// (for [`FirstTurnGate::measure_release`]).
    async fn wait(
        self: &Arc<Self>,
        chat: S::ChatId,
        agent: S::AgentId,
        joined: Option<oneshot::Sender<()>>,
    ) -> Outcome {
        let started = Instant::now();
        let mut watch = CancellationWatch {
            metrics: &self.metrics,
            finished: false,
        };
        let (result, outcome) = self.decide(chat, agent, started, joined).await;
        watch.finished = true;
        let waited = started.elapsed();
        self.metrics.wait_finished(result, waited);
        outcome.with_waited(waited)
    }

    async fn decide(
        self: &Arc<Self>,
        chat: S::ChatId,
        agent: S::AgentId,
        started: Instant,
        joined: Option<oneshot::Sender<()>>,
    ) -> (WaitResult, Outcome) {
        // One bound for subscribing and reading, so a refresh costs at most one read timeout.
        let read_deadline = after(started, self.config.read_timeout);
        let (subscription, observation) = match self.observe(&chat, &agent, read_deadline).await {
            Ok(observed) => observed,
            Err(failed_open) => return failed_open,
        };
        if let Verdict::Ready(reason) = verdict(&observation) {
            return (
                WaitResult::Immediate,
                Outcome::observed(&observation, reason),
            );
        }
        let key: AttemptKey<S> = (chat, agent, current_run(&observation));
        let started_attempt = StartedAttempt {
            started,
            subscription,
            joined,
        };
        match self
            .join_or_start(key, observation, read_deadline, started_attempt)
            .await
        {
            Joined::Reused(answer) => answer,
            Joined::Waiting(end, joined) => {
                if let Some(joined) = joined {
                    let _ = joined.send(());
                }
                await_end(end).await
            }
        }
    }

    /// Subscribes, then reads: a commit after the read then always wakes the attempt. A
    /// failed read is the fail-open answer.
    async fn observe(
        &self,
        chat: &S::ChatId,
        agent: &S::AgentId,
        read_deadline: Instant,
    ) -> Result<(Option<S::Subscription>, View), (WaitResult, Outcome)> {
        let subscription = match self
            .bounded(read_deadline, self.source.subscribe(agent))
            .await
        {
            Ok(subscription) => Some(subscription),
            Err(error) => {
                log_source_error(
                    &error,
                    "subscribing to agent changes; re-checking on the timer only",
                );
                None
            }
        };
        match self
            .bounded(read_deadline, self.source.read_discovery(chat, agent))
            .await
        {
            Ok(observation) => Ok((subscription, observation)),
            Err(error) => {
                log_source_error(&error, "reading discovery state");
                let outcome = Outcome::unobserved(
                    OutcomeReason::SourceUnavailable,
                    Some(error.message().to_owned()),
                );
                Err((WaitResult::FailedOpen, outcome))
            }
        }
    }

    /// This process first: join its waiting attempt or reuse its retained timeout; then the
    /// log, where another replica (or this process before a restart) may have waited for
    /// this run already; else a new attempt.
    async fn join_or_start(
        self: &Arc<Self>,
        key: AttemptKey<S>,
        observation: View,
        read_deadline: Instant,
        attempt: StartedAttempt<S>,
    ) -> Joined {
        let local = {
            let now = Instant::now();
            let mut attempts = self.lock_attempts();
            attempts.sweep(now);
            match attempts.entries.get(&key) {
                Some(Entry::Waiting { end, .. }) => Some(end.clone()),
                Some(Entry::TimedOut { .. }) => return Joined::Reused(reuse(&observation)),
                None => None,
            }
        };
        if let Some(end) = local {
            return Joined::Waiting(end, attempt.joined);
        }
        let recorded = self.recorded(&key, read_deadline).await;
        let now = Instant::now();
        let mut attempts = self.lock_attempts();
        attempts.sweep(now);
        match (attempts.entries.get(&key), recorded) {
            // Another caller of this process got here first.
            (Some(Entry::Waiting { end, .. }), _) => Joined::Waiting(end.clone(), attempt.joined),
            (Some(Entry::TimedOut { .. }), _) => Joined::Reused(reuse(&observation)),
            (None, Recorded::TimedOut { kept_for }) => {
                let expires_at = after(now, kept_for);
                attempts.entries.insert(key, Entry::TimedOut { expires_at });
                Joined::Reused(reuse(&observation))
            }
            (None, recorded) => {
                let end =
                    self.start_attempt(&mut attempts, key, recorded, observation, attempt, now);
                Joined::Waiting(end, None)
            }
        }
    }

    /// Registers and spawns a new attempt for `key`. An adopted attempt (one the log says
    /// is waiting elsewhere) keeps the other's start and ends by its deadline, whatever
    /// this gate's own budgets are.
    fn start_attempt(
        self: &Arc<Self>,
        attempts: &mut Attempts<S>,
        key: AttemptKey<S>,
        recorded: Recorded,
        observation: View,
        attempt: StartedAttempt<S>,
        now: Instant,
    ) -> watch::Receiver<Option<AttemptEnd>> {
        let (started, record_start, ends_by) = match recorded {
            Recorded::Waiting { started_ago, left } => (
                now.checked_sub(started_ago).unwrap_or(now),
                false,
                Some(after(now, left)),
            ),
            _ => (attempt.started, true, None),
        };
        let id = attempts.next_id;
        attempts.next_id += 1;
        let (end_tx, end_rx) = watch::channel(None);
        attempts.entries.insert(
            key.clone(),
            Entry::Waiting {
                id,
                end: end_rx.clone(),
            },
        );
        self.metrics.attempt_started();
        tracing::debug!(chat = ?key.0, agent = ?key.1, run = ?key.2, adopted = !record_start, "first-turn gate: waiting for discovery");
        let runner = Attempt {
            inner: Arc::clone(self),
            key,
            id,
            started,
            ends_by,
            end: end_tx,
            finished: false,
        };
        tokio::spawn(runner.run(
            attempt.subscription,
            observation,
            record_start,
            attempt.joined,
        ));
        end_rx
    }
}

/// What a new attempt starts from: the caller's start, its subscription and its
/// "joined" signal.
struct StartedAttempt<S: DiscoverySource> {
    started: Instant,
    subscription: Option<S::Subscription>,
    joined: Option<oneshot::Sender<()>>,
}

/// How a caller joined the wait for its key.
enum Joined {
    /// A retained timeout answered at once.
    Reused((WaitResult, Outcome)),
    /// An attempt's end to wait for, and the "joined" signal still to send.
    Waiting(
        watch::Receiver<Option<AttemptEnd>>,
        Option<oneshot::Sender<()>>,
    ),
}

/// The answer for a run whose earlier wait timed out: the read that found it was the
/// refresh, so there is no second budget for this run.
fn reuse(observation: &View) -> (WaitResult, Outcome) {
    let outcome = Outcome::observed(observation, OutcomeReason::EarlierWaitTimedOut).timed_out();
    (WaitResult::ReusedTimeout, outcome)
}

/// Waits for an attempt's end; a vanished attempt fails open.
async fn await_end(mut end: watch::Receiver<Option<AttemptEnd>>) -> (WaitResult, Outcome) {
    let end = end
        .wait_for(Option::is_some)
        .await
        .map(|end| end.clone())
        .ok()
        .flatten();
    match end {
        Some(AttemptEnd {
            outcome,
            timed_out: false,
        }) => (WaitResult::Released, outcome),
        Some(AttemptEnd {
            outcome,
            timed_out: true,
        }) => (WaitResult::TimedOut, outcome),
        None => (
            WaitResult::FailedOpen,
            Outcome::unobserved(OutcomeReason::AttemptLost, None),
        ),
    }
}

/// `instant + duration`, saturating far in the future instead of overflowing on an
/// absurd configured duration.
fn after(instant: Instant, duration: Duration) -> Instant {
    const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);
    instant
        .checked_add(duration.min(FAR_FUTURE))
        .unwrap_or(instant)
}

fn log_source_error(error: &SourceError, doing: &str) {
    let cause = std::error::Error::source(error).map(ToString::to_string);
    tracing::warn!(error = %error, cause = ?cause, "first-turn gate: {doing} failed; the turn proceeds");
}

/// One shared wait, running on its own task.
struct Attempt<S: DiscoverySource, L> {
    inner: Arc<Inner<S, L>>,
    key: AttemptKey<S>,
    id: u64,
    started: Instant,
    /// For an attempt adopted from another replica: that one's deadline.
    ends_by: Option<Instant>,
    end: watch::Sender<Option<AttemptEnd>>,
    finished: bool,
}

/// Why an attempt re-reads.
enum Wake {
    Notification,
    Recheck,
    SubscriptionEnded,
}

async fn next_change<T: ChangeSubscription>(subscription: &mut Option<T>) -> bool {
    match subscription {
        Some(subscription) => subscription.changed().await,
        None => std::future::pending().await,
    }
}

impl<S: DiscoverySource, L: AttemptLog<S::ChatId, S::AgentId>> Attempt<S, L> {
    /// Waits, then publishes the end to every joiner and records it in the log.
    /// `record_start`: this is the run's first attempt anywhere, as far as the log
    /// knows; `joined` is told once it is recorded (for [`FirstTurnGate::measure_release`]).
    async fn run(
        mut self,
        subscription: Option<S::Subscription>,
        observation: View,
        record_start: bool,
        joined: Option<oneshot::Sender<()>>,
    ) {
        if record_start {
            self.record_start().await;
        }
        if let Some(joined) = joined {
            let _ = joined.send(());
        }
        let (observation, end) = self.wait(subscription, observation).await;
        let records = self.finish(&observation, &end);
        if end.timed_out {
            // Recorded before anyone hears of it, so a caller that moves on to another
            // replica finds the timeout there; a timeout can afford the write's delay.
            self.record_ends(records).await;
            self.publish_end(end);
        } else {
            // A release is not held up by the log: a completed run spares nobody a wait.
            self.publish_end(end);
            self.record_ends(records).await;
        }
    }

    async fn record_start(&self) {
        let inner = &self.inner;
        let config = &inner.config;
        let (chat, agent, run) = &self.key;
        // Bounded by the shortest limit too, so recording never holds up the wait.
        let deadline = after(Instant::now(), config.read_timeout).min(after(
            self.started,
            config.discovery_budget.min(config.snapshot_grace),
        ));
        let wait_limit = config.discovery_budget.max(config.snapshot_grace);
        let forget_after = config.timed_out_retention.saturating_add(wait_limit);
        let write = inner
            .log
            .record_start(chat, agent, run.as_ref(), wait_limit, forget_after);
        if let Err(error) = inner.bounded(deadline, write).await {
            log_source_error(&error, "recording the attempt's start");
        }
    }

    async fn record_ends(&self, records: Vec<(Option<RunId>, AttemptResult)>) {
        let inner = &self.inner;
        let (chat, agent, _) = &self.key;
        for (run, result) in records {
            let deadline = after(Instant::now(), inner.config.read_timeout);
            let write = inner.log.record_end(chat, agent, run.as_ref(), result);
            if let Err(error) = inner.bounded(deadline, write).await {
                log_source_error(&error, "recording the attempt's end");
            }
        }
    }

    async fn wait(
        &self,
        mut subscription: Option<S::Subscription>,
        mut observation: View,
    ) -> (View, AttemptEnd) {
        let config = &self.inner.config;
        let every = config.effective_recheck_interval();
        let mut recheck = tokio::time::interval_at(after(Instant::now(), every), every);
        recheck.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // Once the current run is seen pending the budget applies; until then, the grace.
        let mut seen_pending = false;
        let mut last_error: Option<String> = None;
        let (chat, agent) = (&self.key.0, &self.key.1);

        let (outcome, timed_out) = loop {
            let reason_if_timed_out = match verdict(&observation) {
                Verdict::Ready(reason) => break (Outcome::observed(&observation, reason), false),
                Verdict::AwaitCompletion => {
                    seen_pending = true;
                    OutcomeReason::BudgetExhausted
                }
                Verdict::AwaitCurrentSnapshot => OutcomeReason::NoCurrentSnapshot,
            };
            let limit = if seen_pending {
                config.discovery_budget
            } else {
                config.snapshot_grace
            };
            let deadline = match self.ends_by {
                Some(ends_by) => after(self.started, limit).min(ends_by),
                None => after(self.started, limit),
            };
            let timed_out = || {
                let mut outcome = Outcome::observed(&observation, reason_if_timed_out).timed_out();
                outcome.error.clone_from(&last_error);
                (outcome, true)
            };
            if Instant::now() >= deadline {
                break timed_out();
            }
            let wake = tokio::select! {
                // The deadline wins a tie, so the budget is never overrun by a read.
                biased;
                () = tokio::time::sleep_until(deadline) => break timed_out(),
                changed = next_change(&mut subscription) => if changed {
                    Wake::Notification
                } else {
                    Wake::SubscriptionEnded
                },
                _ = recheck.tick() => Wake::Recheck,
            };
            match wake {
                Wake::Notification => self.inner.metrics.notification_wakeup(),
                Wake::Recheck => self.inner.metrics.recheck_read(),
                Wake::SubscriptionEnded => {
                    tracing::debug!(
                        ?agent,
                        "first-turn gate: subscription ended; re-checking on the timer only"
                    );
                    subscription = None;
                    continue;
                }
            }
            let read_deadline = deadline.min(after(Instant::now(), config.read_timeout));
            match self
                .inner
                .bounded(read_deadline, self.inner.source.read_discovery(chat, agent))
                .await
            {
                Ok(fresh) => {
                    observation = fresh;
                    last_error = None;
                }
                Err(error) => {
                    log_source_error(&error, "re-reading discovery state while waiting");
                    last_error = Some(error.message().to_owned());
                }
            }
        };
        (observation, AttemptEnd { outcome, timed_out })
    }

    /// Updates the attempt map for the end (the caller then publishes it, see
    /// [`Attempt::publish_end`]) and says what to record in the log: (run, result) pairs.
    fn finish(
        &mut self,
        observation: &View,
        end: &AttemptEnd,
    ) -> Vec<(Option<RunId>, AttemptResult)> {
        let inner = Arc::clone(&self.inner);
        let mut records = Vec::with_capacity(2);
        let mut attempts = inner.lock_attempts();
        attempts.sweep(Instant::now());
        attempts.remove_if_current(&self.key, self.id);
        if end.timed_out {
            // Keyed by the run observed last: if the agent restarted during the wait,
            // the next turn of the new run reuses this attempt instead of waiting again.
            let (chat, agent, run) = &self.key;
            let observed_run = current_run(observation);
            if observed_run != *run {
                tracing::info!(?chat, ?agent, from = ?run, to = ?observed_run, "first-turn gate: agent restarted during a timed-out wait; re-keying the attempt");
            }
            tracing::info!(?chat, ?agent, run = ?observed_run, reason = ?end.outcome.reason, "first-turn gate: wait timed out; the turn proceeds");
            // The attempt's own record ends either way; the observed run's only when no
            // attempt of this process waits for it.
            records.push((run.clone(), AttemptResult::TimedOut));
            let observed_key = (chat.clone(), agent.clone(), observed_run);
            if !matches!(
                attempts.entries.get(&observed_key),
                Some(Entry::Waiting { .. })
            ) {
                if observed_key.2 != *run {
                    records.push((observed_key.2.clone(), AttemptResult::TimedOut));
                }
                let expires_at = after(Instant::now(), inner.config.timed_out_retention);
                attempts
                    .entries
                    .insert(observed_key, Entry::TimedOut { expires_at });
            }
        } else {
            records.push((self.key.2.clone(), AttemptResult::Completed));
        }
        self.finished = true;
        records
    }

    /// Tells every joiner how the attempt ended.
    fn publish_end(&mut self, end: AttemptEnd) {
        self.end.send_replace(Some(end));
    }
}

impl<S: DiscoverySource, L> Drop for Attempt<S, L> {
    fn drop(&mut self) {
        if !self.finished {
            // Panicked or aborted: free the key so the next caller starts afresh; joiners
            // see the sender gone and fail open.
            self.inner
                .lock_attempts()
                .remove_if_current(&self.key, self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use ctxsync_chat_projection::SnapshotState;
    use ctxsync_protocol::{DiscoveryPhase, RunId};

    use super::*;
    use crate::memory::MemorySource;

    /// A turn reads its chat's binding once, and not at all when the caller read the
    /// chat already; the inventory is read once either way.
    #[tokio::test(start_paused = true)]
    async fn a_turn_reads_its_chat_once() {
        let (chat, agent) = (1, 2);
        let source = MemorySource::new();
        source.commit(agent, |record| {
            record.agent_run_id = RunId::new("run-1");
            record.snapshot = Some(SnapshotState {
                agent_run_id: RunId::new("run-1"),
                phase: DiscoveryPhase::Complete,
                ..SnapshotState::default()
            });
        });
        source.bind(chat, agent);
        let gate = FirstTurnGate::new(source.clone(), GateConfig::default());
        for mode in [TurnMode::Default, TurnMode::Plan] {
            let (chats, inventories) = (source.chat_reads(), source.inventory_reads());
            gate.prepare_turn(chat, mode).await;
            assert_eq!(source.chat_reads() - chats, 1, "{mode:?}");
            gate.prepare_bound_turn(chat, Some(agent), mode).await;
            assert_eq!(source.chat_reads() - chats, 1, "{mode:?}: read again");
            assert_eq!(source.inventory_reads() - inventories, 2, "{mode:?}");
        }
    }
}
