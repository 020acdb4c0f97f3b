//! The server's side of the tool-call channel (issue 36): the `ToolCalls` streams agents
//! open, and [`CallHub`], through which the HTTP layer sends a stored call to its agent,
//! waits for its end and cancels it.
//!
//! The store is the truth: a call is stored before it is sent and every end is recorded
//! there first (the first end wins); the hub's memory holds only which streams this
//! replica serves, which calls it sent on them and who waits, so a waiter also re-reads
//! the store now and then. The one exception is a retryable refusal (`busy`,
//! `agent_unreachable`), which the store does not keep: the hub remembers it for a
//! minute so a waiter still gets the answer.
//!
//! Must never: know gRPC (the agent API hands it domain messages and forwards what it
//! sends); trust an agent with another agent's call; log a call's arguments or result;
//! hold a lock across an await.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use ctxsync_mcp_model::{CallEnd, CallProgress, CallReason, CallStatus};
use ctxsync_protocol::RunId;
use ctxsync_protocol::call::{AgentCall, CallRequest, ServerCall};
use serde_json::Value;
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::AbortHandle;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};

use crate::agent_api::Histogram;
use crate::error::StoreError;
use crate::ids::{AgentId, ToolCallId};
use crate::store::Store;
use crate::tool_calls::ToolCallRecord;

/// How long a call waits for its agent's stream when the agent declared calls but is not
/// connected, before it is refused `agent_unreachable`.
pub const DEFAULT_RECONNECT_GRACE: Duration = Duration::from_secs(5);
/// How long past its own deadline a call may stay `running` before the hub cancels it
/// and ends it `timed_out`: the agent's deadline normally fires first and reports it.
pub const DEFAULT_DEADLINE_SLACK: Duration = Duration::from_secs(5);
/// How long a cancel waits for the agent to report the call's end before recording
/// `canceled` itself.
pub const DEFAULT_CANCEL_WAIT: Duration = Duration::from_secs(5);
/// Messages queued for one stream; a full queue means the agent is not reading.
pub const CALL_QUEUE: usize = 64;
/// How often a stream's coalesced progress is written: at most 4 writes a second a call.
pub const PROGRESS_FLUSH: Duration = Duration::from_millis(250);
/// How long a retryable refusal (not stored) is remembered for waiters.
const RETRYABLE_MEMORY: Duration = Duration::from_secs(60);

/// Upper bounds (seconds) of the call-duration histogram: from a local tool's
/// milliseconds to the longest deadline's ten minutes.
pub const CALL_SECONDS_BUCKETS: [f64; 15] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0,
];

/// Settings of a [`CallHub`].
#[derive(Clone, Debug)]
pub struct CallHubConfig {
    /// See [`DEFAULT_RECONNECT_GRACE`] (at most 5 s).
    pub reconnect_grace: Duration,
    /// How often a waiter re-reads the store for an end another replica recorded.
    pub recheck: Duration,
    /// How often an idle stream gets a heartbeat
    /// ([`ctxsync_protocol::call::CALL_HEARTBEAT`]).
    pub heartbeat: Duration,
    /// Silence from the agent after which its stream counts as lost
    /// ([`ctxsync_protocol::call::CALL_SILENCE_LIMIT`]); also bounds the wait for its hello.
    pub silence_limit: Duration,
    /// See [`DEFAULT_DEADLINE_SLACK`].
    pub deadline_slack: Duration,
    /// See [`DEFAULT_CANCEL_WAIT`].
    pub cancel_wait: Duration,
}

impl Default for CallHubConfig {
    fn default() -> Self {
        Self {
            reconnect_grace: DEFAULT_RECONNECT_GRACE,
            recheck: Duration::from_secs(1),
            heartbeat: ctxsync_protocol::call::CALL_HEARTBEAT,
            silence_limit: ctxsync_protocol::call::CALL_SILENCE_LIMIT,
            deadline_slack: DEFAULT_DEADLINE_SLACK,
            cancel_wait: DEFAULT_CANCEL_WAIT,
        }
    }
}

/// The calls' counters and gauges for `/metrics`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CallMetricsSnapshot {
    /// Ends recorded by this replica, by status label (`complete`, `refused`, …), sorted;
    /// every label of [`CallStatus::ALL`] is present (`running` stays 0).
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
    /// For the tasks the hub starts (deadline watchers, stream drivers).
    me: Weak<CallHub>,
    state: Mutex<HubState>,
    /// Woken whenever a stream registers: a dispatch waiting out the grace re-checks.
    registered: Notify,
    next_epoch: AtomicU64,
    /// Indexed like [`CallStatus::ALL`].
    ended: [AtomicU64; 7],
    durations: Histogram,
}

#[derive(Debug, Default)]
struct HubState {
    /// The stream each agent has here (one per agent).
    streams: HashMap<AgentId, StreamEntry>,
    /// Calls sent from here and not yet seen end: the in-flight gauge.
    sent: HashMap<ToolCallId, SentCall>,
    /// Waiters' channels, created on demand and removed with the last waiter.
    waiters: HashMap<ToolCallId, watch::Sender<Option<ToolCallRecord>>>,
    /// Ends counted here lately, so a second report of one end is not counted again;
    /// a retryable refusal keeps its record (the store does not).
    recent: HashMap<ToolCallId, Option<ToolCallRecord>>,
    recent_order: VecDeque<(Instant, ToolCallId)>,
}

#[derive(Clone, Debug)]
struct StreamEntry {
    epoch: u64,
    run: RunId,
    link: Arc<StreamLink>,
}

/// What the hub and a stream's driver share.
#[derive(Debug)]
struct StreamLink {
    tx: mpsc::Sender<ServerCall>,
    /// Told to stop when a newer stream replaces this one or its run was replaced.
    stop: Notify,
    /// When anything was last queued, as an offset from `base` in milliseconds.
    base: Instant,
    last_sent_ms: AtomicU64,
}

impl StreamLink {
    fn touch(&self) {
        let ms = self.base.elapsed().as_millis() as u64;
        self.last_sent_ms.store(ms, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_sent_ms.load(Ordering::Relaxed));
        self.base.elapsed().saturating_sub(last)
    }

    /// Queues `call` without waiting; `false` when the queue is full or the stream gone.
    fn try_send(&self, call: ServerCall) -> bool {
        let sent = self.tx.try_send(call).is_ok();
        if sent {
            self.touch();
        }
        sent
    }
}

#[derive(Debug)]
struct SentCall {
    agent: AgentId,
    epoch: u64,
    sent_at: Instant,
    watcher: Option<AbortHandle>,
}

/// Who asks to record an end, which decides whether it counts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// The agent, the deadline, a cancel or a lost stream: counted when this end is the
    /// one stored.
    Hub,
    /// The store ended it itself (a restart): counted as stored.
    Store,
}

impl CallHub {
    /// A hub over `store`.
    pub fn new(store: Store, config: CallHubConfig) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            store,
            config,
            me: me.clone(),
            state: Mutex::default(),
            registered: Notify::new(),
            next_epoch: AtomicU64::new(1),
            ended: std::array::from_fn(|_| AtomicU64::new(0)),
            durations: Histogram::new(&CALL_SECONDS_BUCKETS),
        })
    }

    /// The settings this hub runs with.
    pub fn config(&self) -> &CallHubConfig {
        &self.config
    }

    fn lock(&self) -> MutexGuard<'_, HubState> {
        // A panic while holding the lock leaves plain maps behind; keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends a `running` call (as [`Store::admit_tool_call`] started it) to its agent's
    /// stream, waiting up to the reconnect grace for one. No stream by then: the call
    /// ends `refused` `agent_unreachable` (not recorded). Answers at once after sending;
    /// the end arrives later ([`Self::wait`]). The call's deadline is watched here too,
    /// so a silent agent cannot hold it past its `timeout_ms`.
    pub async fn dispatch(&self, call: &ToolCallRecord) -> Result<ToolCallRecord, StoreError> {
        if call.status.is_end() {
            return Ok(call.clone());
        }
        let (Some(agent), Some(run), Some(arguments)) = (
            call.agent_id,
            call.agent_run_id.clone(),
            call.arguments.as_deref().and_then(parse_arguments),
        ) else {
            // Admission never starts such a call; end it rather than leave it running.
            tracing::warn!(call = %call.id, "a running call without agent, run or arguments");
            let end = CallEnd::error(0, "the call cannot be sent to an agent");
            return self.record_end(call.id, &end, None, call).await;
        };
        let request = ServerCall::Call(CallRequest {
            id: call.id.to_string(),
            agent_run_id: run,
            server: call.server.clone(),
            tool: call.tool.clone(),
            arguments,
            timeout: Duration::from_millis(call.timeout_ms),
        });

        let grace = Instant::now() + self.config.reconnect_grace;
        let link = loop {
            let registered = self.registered.notified();
            tokio::pin!(registered);
            // Enabled before looking, so a registration in between is not missed.
            registered.as_mut().enable();
            if let Some(link) = self.track(call.id, agent) {
                break Some(link);
            }
            tokio::select! {
                () = &mut registered => {}
                () = tokio::time::sleep_until(grace) => break None,
            }
        };
        let Some(link) = link else {
            tracing::debug!(call = %call.id, %agent, "no call stream within the grace");
            let end = CallEnd::with_reason(CallStatus::Refused, CallReason::AgentUnreachable);
            return self.record_end(call.id, &end, None, call).await;
        };
        let queued = tokio::time::timeout(self.config.reconnect_grace, link.tx.send(request));
        if !matches!(queued.await, Ok(Ok(()))) {
            // Never queued: the agent cannot have it.
            tracing::debug!(call = %call.id, %agent, "the call stream is full or gone");
            self.untrack(call.id);
            let end = CallEnd::with_reason(CallStatus::Refused, CallReason::AgentUnreachable);
            return self.record_end(call.id, &end, None, call).await;
        }
        link.touch();
        self.watch_deadline(call.id, Duration::from_millis(call.timeout_ms));
        Ok(self.read(call.id).await?.unwrap_or_else(|| call.clone()))
    }

    /// Claims `id` for the agent's stream here; `None` when it has none.
    fn track(&self, id: ToolCallId, agent: AgentId) -> Option<Arc<StreamLink>> {
        let mut state = self.lock();
        let entry = state.streams.get(&agent)?.clone();
        state.sent.insert(
            id,
            SentCall {
                agent,
                epoch: entry.epoch,
                sent_at: Instant::now(),
                watcher: None,
            },
        );
        Some(entry.link)
    }

    fn untrack(&self, id: ToolCallId) {
        if let Some(sent) = self.lock().sent.remove(&id)
            && let Some(watcher) = sent.watcher
        {
            watcher.abort();
        }
    }

    /// Ends the call `timed_out` (after a cancel to its agent) if it is still running
    /// `slack` after its own deadline.
    fn watch_deadline(&self, id: ToolCallId, timeout: Duration) {
        let Some(hub) = self.me.upgrade() else { return };
        let limit = timeout.saturating_add(self.config.deadline_slack);
        let task = tokio::spawn(async move {
            tokio::time::sleep(limit).await;
            let (link, elapsed) = {
                let state = hub.lock();
                let Some(sent) = state.sent.get(&id) else {
                    return;
                };
                let link = state
                    .streams
                    .get(&sent.agent)
                    .filter(|entry| entry.epoch == sent.epoch)
                    .map(|entry| Arc::clone(&entry.link));
                (link, sent.sent_at.elapsed())
            };
            tracing::debug!(call = %id, "the call outlived its deadline");
            if let Some(link) = link {
                link.try_send(ServerCall::Cancel { id: id.to_string() });
            }
            let end = CallEnd::bare(CallStatus::TimedOut);
            if let Err(error) = hub.finish(id, &end, Some(millis(elapsed))).await {
                tracing::warn!(call = %id, %error, "recording a timed-out call failed");
            }
        });
        let mut state = self.lock();
        match state.sent.get_mut(&id) {
            Some(sent) => sent.watcher = Some(task.abort_handle()),
            // Ended while the watcher was being started.
            None => task.abort(),
        }
    }

    /// The call as stored once it has ended, or as stored when `wait` passes; `None`
    /// when there is no such call.
    pub async fn wait(
        &self,
        id: ToolCallId,
        wait: Duration,
    ) -> Result<Option<ToolCallRecord>, StoreError> {
        let deadline = Instant::now() + wait;
        let mut waiter = self.waiter(id);
        loop {
            // Subscribed before reading, so an end recorded in between wakes us.
            if let Some(ended) = waiter.rx.borrow_and_update().clone() {
                return Ok(Some(ended));
            }
            let Some(record) = self.read(id).await? else {
                return Ok(None);
            };
            if record.status.is_end() || Instant::now() >= deadline {
                return Ok(Some(record));
            }
            let recheck = (Instant::now() + self.config.recheck).min(deadline);
            tokio::select! {
                _ = waiter.rx.changed() => {}
                () = tokio::time::sleep_until(recheck) => {}
            }
        }
    }

    fn waiter(&self, id: ToolCallId) -> Waiter<'_> {
        let mut state = self.lock();
        let tx = state
            .waiters
            .entry(id)
            .or_insert_with(|| watch::channel(None).0);
        Waiter {
            hub: self,
            id,
            rx: tx.subscribe(),
        }
    }

    /// The stored call, or a retryable refusal the store did not keep.
    async fn read(&self, id: ToolCallId) -> Result<Option<ToolCallRecord>, StoreError> {
        match self.store.get_tool_call_by_id(id).await? {
            Some(record) => Ok(Some(record)),
            None => Ok(self.lock().recent.get(&id).cloned().flatten()),
        }
    }

    /// Cancels a running call (its agent sends `notifications/cancelled` to the MCP
    /// server) and answers it as it ended; an ended call is answered unchanged. `None`
    /// when there is no such call.
    pub async fn cancel(&self, id: ToolCallId) -> Result<Option<ToolCallRecord>, StoreError> {
        let Some(record) = self.read(id).await? else {
            return Ok(None);
        };
        if record.status.is_end() {
            return Ok(Some(record));
        }
        let link = {
            let state = self.lock();
            state.sent.get(&id).and_then(|sent| {
                state
                    .streams
                    .get(&sent.agent)
                    .filter(|entry| entry.epoch == sent.epoch)
                    .map(|entry| Arc::clone(&entry.link))
            })
        };
        if let Some(link) = link
            && link.try_send(ServerCall::Cancel { id: id.to_string() })
        {
            // The agent answers `canceled` (or the end that beat the cancel).
            if let Some(ended) = self.wait(id, self.config.cancel_wait).await?
                && ended.status.is_end()
            {
                return Ok(Some(ended));
            }
            tracing::debug!(call = %id, "no end from the agent after a cancel");
        }
        let elapsed = self
            .lock()
            .sent
            .get(&id)
            .map(|s| millis(s.sent_at.elapsed()));
        self.finish(id, &CallEnd::bare(CallStatus::Canceled), elapsed)
            .await
    }

    /// Records an end this replica decided (find_tools' answer) and wakes its waiters.
    pub async fn end(
        &self,
        id: ToolCallId,
        end: &CallEnd,
        duration_ms: Option<u64>,
    ) -> Result<Option<ToolCallRecord>, StoreError> {
        self.finish(id, end, duration_ms).await
    }

    /// Calls the store already recorded `canceled` (a pruned turn's,
    /// [`crate::TurnRecord::canceled_calls`]): each one sent from here gets its cancel on
    /// its agent's stream, and all are counted and their waiters woken.
    pub fn canceled_by_store(&self, records: &[ToolCallRecord]) {
        for record in records {
            let link = {
                let state = self.lock();
                state.sent.get(&record.id).and_then(|sent| {
                    state
                        .streams
                        .get(&sent.agent)
                        .filter(|entry| entry.epoch == sent.epoch)
                        .map(|entry| Arc::clone(&entry.link))
                })
            };
            if let Some(link) = link {
                link.try_send(ServerCall::Cancel {
                    id: record.id.to_string(),
                });
            }
            self.settle(record, (record.status, record.reason), Origin::Store);
        }
    }

    /// Counts a call that admission ended at once (`refused` before it was sent), so
    /// `/metrics` sees every end; a running call is ignored.
    pub fn count_admitted_end(&self, record: &ToolCallRecord) {
        self.settle(record, (record.status, record.reason), Origin::Hub);
    }

    /// The calls' metrics so far.
    pub fn metrics(&self) -> CallMetricsSnapshot {
        let mut ended: Vec<(&'static str, u64)> = CallStatus::ALL
            .iter()
            .zip(&self.ended)
            .map(|(status, count)| (status.as_str(), count.load(Ordering::Relaxed)))
            .collect();
        ended.sort_unstable();
        let durations = self.durations.snapshot();
        CallMetricsSnapshot {
            ended,
            in_flight: self.lock().sent.len() as u64,
            duration_buckets: durations.buckets,
            duration_sum: durations.sum,
            duration_count: durations.count,
        }
    }

    /// Records `end` (the first end wins), then counts and wakes.
    async fn finish(
        &self,
        id: ToolCallId,
        end: &CallEnd,
        duration_ms: Option<u64>,
    ) -> Result<Option<ToolCallRecord>, StoreError> {
        let record = self.store.end_tool_call(id, end, duration_ms).await?;
        if let Some(record) = &record {
            self.settle(record, (end.status, end.reason), Origin::Hub);
            if end.reason.is_some_and(CallReason::is_retryable) && record.reason == end.reason {
                self.remember(record);
            }
        }
        Ok(record)
    }

    /// [`Self::finish`] for a call whose stored row `fallback` is (a refusal of a call
    /// that was never sent answers as it ended even though the store dropped it).
    async fn record_end(
        &self,
        id: ToolCallId,
        end: &CallEnd,
        duration_ms: Option<u64>,
        fallback: &ToolCallRecord,
    ) -> Result<ToolCallRecord, StoreError> {
        Ok(self
            .finish(id, end, duration_ms)
            .await?
            .unwrap_or_else(|| fallback.clone()))
    }

    /// Keeps a retryable refusal (which the store deleted) for waiters, for a while.
    fn remember(&self, record: &ToolCallRecord) {
        self.lock().recent.insert(record.id, Some(record.clone()));
    }

    /// After an end is stored: the call is no longer in flight here, its end is counted
    /// once (when it is the end `requested`, i.e. the one this replica recorded) and its
    /// waiters wake with it.
    fn settle(
        &self,
        record: &ToolCallRecord,
        requested: (CallStatus, Option<CallReason>),
        origin: Origin,
    ) {
        if !record.status.is_end() {
            return;
        }
        let mut state = self.lock();
        if let Some(sent) = state.sent.remove(&record.id)
            && let Some(watcher) = sent.watcher
        {
            watcher.abort();
        }
        let ours = origin == Origin::Store || requested == (record.status, record.reason);
        let now = Instant::now();
        while let Some((at, old)) = state.recent_order.front().copied() {
            if now.duration_since(at) < RETRYABLE_MEMORY {
                break;
            }
            state.recent_order.pop_front();
            state.recent.remove(&old);
        }
        let first = ours && !state.recent.contains_key(&record.id);
        if first {
            state.recent.insert(record.id, None);
            state.recent_order.push_back((now, record.id));
        }
        // Counted before the waiters wake, so what they read next includes this end.
        if first {
            let slot = CallStatus::ALL.iter().position(|s| *s == record.status);
            if let Some(slot) = slot {
                self.ended[slot].fetch_add(1, Ordering::Relaxed);
            }
            if let Some(ms) = record.duration_ms {
                self.durations.observe(Duration::from_millis(ms));
            }
        }
        if let Some(tx) = state.waiters.get(&record.id) {
            tx.send_replace(Some(record.clone()));
        }
    }

    /// A new run of `agent` was stored (`run`; `None` for a legacy agent): its calls of
    /// other runs end `unknown` `agent_restarted`, and a stream of another run here is
    /// closed (its process is gone).
    pub(crate) async fn agent_restarted(
        &self,
        agent: AgentId,
        run: Option<&RunId>,
    ) -> Result<(), StoreError> {
        let end = CallEnd::with_reason(CallStatus::Unknown, CallReason::AgentRestarted);
        let ended = self.store.end_running_tool_calls(agent, run, &end).await?;
        for record in &ended {
            self.settle(record, (end.status, end.reason), Origin::Store);
        }
        let stale = {
            let mut state = self.lock();
            let other_run = state
                .streams
                .get(&agent)
                .is_some_and(|entry| Some(&entry.run) != run);
            if other_run {
                state.streams.remove(&agent)
            } else {
                None
            }
        };
        if let Some(stale) = stale {
            stale.link.stop.notify_one();
        }
        Ok(())
    }

    /// Serves the stream `agent`'s run `run` opened (its hello checked by the caller):
    /// registers it, replacing an older one, and drives `inbound` in a task of its own.
    /// An `Err` item is a message that failed validation (ignored, but proof of life);
    /// the end of `inbound` is the stream's end. Answers what to send the agent.
    pub(crate) fn open<S>(
        &self,
        agent: AgentId,
        run: RunId,
        inbound: S,
    ) -> ReceiverStream<ServerCall>
    where
        S: Stream<Item = Result<AgentCall, String>> + Send + Unpin + 'static,
    {
        let (tx, rx) = mpsc::channel(CALL_QUEUE);
        let link = Arc::new(StreamLink {
            tx,
            stop: Notify::new(),
            base: Instant::now(),
            last_sent_ms: AtomicU64::new(0),
        });
        let epoch = self.next_epoch.fetch_add(1, Ordering::Relaxed);
        let entry = StreamEntry {
            epoch,
            run,
            link: Arc::clone(&link),
        };
        let replaced = self.lock().streams.insert(agent, entry);
        if let Some(old) = replaced {
            tracing::debug!(%agent, "a newer call stream replaces the agent's older one");
            old.link.stop.notify_one();
        }
        self.registered.notify_waiters();
        tracing::debug!(%agent, "call stream opened");
        if let Some(hub) = self.me.upgrade() {
            let session = Session {
                hub,
                agent,
                epoch,
                link,
                known: HashSet::new(),
                pending: HashMap::new(),
            };
            tokio::spawn(session.run(inbound));
        }
        ReceiverStream::new(rx)
    }
}

/// One waiter's subscription; the channel goes with the last waiter.
struct Waiter<'a> {
    hub: &'a CallHub,
    id: ToolCallId,
    rx: watch::Receiver<Option<ToolCallRecord>>,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        let mut state = self.hub.lock();
        // Our receiver still counts until this drop returns: one left is ours.
        if state
            .waiters
            .get(&self.id)
            .is_some_and(|tx| tx.receiver_count() <= 1)
        {
            state.waiters.remove(&self.id);
        }
    }
}

/// One stream's driver: reads the agent's messages, writes progress coalesced, sends
/// heartbeats, and on the stream's end ends what it carried.
struct Session {
    hub: Arc<CallHub>,
    agent: AgentId,
    epoch: u64,
    link: Arc<StreamLink>,
    /// Calls checked to be this agent's and running.
    known: HashSet<ToolCallId>,
    /// The latest progress of each call, not yet written.
    pending: HashMap<ToolCallId, CallProgress>,
}

impl Session {
    async fn run<S>(mut self, mut inbound: S)
    where
        S: Stream<Item = Result<AgentCall, String>> + Send + Unpin + 'static,
    {
        let config = self.hub.config.clone();
        let mut flush = tokio::time::interval(PROGRESS_FLUSH);
        flush.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // Checked twice per period, so an idle stream hears from us within the period.
        let mut heartbeat =
            tokio::time::interval((config.heartbeat / 2).max(Duration::from_millis(1)));
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut last_heard = Instant::now();
        let why = loop {
            tokio::select! {
                () = self.link.stop.notified() => break "replaced",
                message = inbound.next() => match message {
                    Some(Ok(message)) => {
                        last_heard = Instant::now();
                        self.received(message).await;
                    }
                    Some(Err(problem)) => {
                        last_heard = Instant::now();
                        tracing::debug!(agent = %self.agent, %problem, "invalid call message ignored");
                    }
                    None => break "closed",
                },
                () = tokio::time::sleep_until(last_heard + config.silence_limit) => break "silent",
                _ = flush.tick() => self.flush_all().await,
                _ = heartbeat.tick() => {
                    if self.link.idle_for() >= config.heartbeat / 2 {
                        self.link.try_send(ServerCall::Heartbeat);
                    }
                }
            }
        };
        tracing::debug!(agent = %self.agent, why, "call stream ended");
        self.close().await;
    }

    async fn received(&mut self, message: AgentCall) {
        let id = match &message {
            AgentCall::Accepted { id }
            | AgentCall::Progress { id, .. }
            | AgentCall::Ended { id, .. } => id.clone(),
            AgentCall::Heartbeat => return,
            AgentCall::Hello { .. } => {
                tracing::debug!(agent = %self.agent, "a second hello ignored");
                return;
            }
        };
        let Some(id) = self.own(&id).await else {
            return;
        };
        let result = match message {
            AgentCall::Accepted { .. } => self.hub.store.mark_tool_call_delivered(id).await,
            AgentCall::Progress { progress, .. } => {
                self.pending.insert(id, progress);
                Ok(())
            }
            AgentCall::Ended { end, duration, .. } => {
                self.flush(id).await;
                self.known.remove(&id);
                self.hub
                    .finish(id, &end, Some(millis(duration)))
                    .await
                    .map(drop)
            }
            AgentCall::Heartbeat | AgentCall::Hello { .. } => Ok(()),
        };
        if let Err(error) = result {
            tracing::warn!(agent = %self.agent, call = %id, %error, "recording an agent's call message failed");
        }
    }

    /// `id` as a call of this agent that is running; `None` (logged) otherwise: the
    /// agent is never trusted with another agent's call.
    async fn own(&mut self, text: &str) -> Option<ToolCallId> {
        let Ok(id) = text.parse::<ToolCallId>() else {
            tracing::debug!(agent = %self.agent, "a call message with a malformed id ignored");
            return None;
        };
        if self.known.contains(&id) {
            return Some(id);
        }
        let sent_here = self
            .hub
            .lock()
            .sent
            .get(&id)
            .is_some_and(|sent| sent.agent == self.agent);
        let ours = sent_here
            || match self.hub.store.get_tool_call_by_id(id).await {
                Ok(Some(record)) => record.agent_id == Some(self.agent) && !record.status.is_end(),
                Ok(None) => false,
                Err(error) => {
                    tracing::warn!(call = %id, %error, "reading a call failed");
                    false
                }
            };
        if ours {
            self.known.insert(id);
            Some(id)
        } else {
            tracing::debug!(agent = %self.agent, call = %id, "a message for a call not this agent's running one ignored");
            None
        }
    }

    async fn flush(&mut self, id: ToolCallId) {
        if let Some(progress) = self.pending.remove(&id)
            && let Err(error) = self
                .hub
                .store
                .record_tool_call_progress(id, &progress)
                .await
        {
            tracing::warn!(call = %id, %error, "recording a call's progress failed");
        }
    }

    async fn flush_all(&mut self) {
        let ids: Vec<ToolCallId> = self.pending.keys().copied().collect();
        for id in ids {
            self.flush(id).await;
        }
    }

    /// The stream is gone: every call it carried that is still running ends `unknown`
    /// `stream_lost` (the agent cancels what it held).
    async fn close(mut self) {
        self.flush_all().await;
        let carried: Vec<(ToolCallId, Option<u64>)> = {
            let mut state = self.hub.lock();
            if state
                .streams
                .get(&self.agent)
                .is_some_and(|entry| entry.epoch == self.epoch)
            {
                state.streams.remove(&self.agent);
            }
            let mut carried: Vec<_> = state
                .sent
                .iter()
                .filter(|(_, sent)| sent.agent == self.agent && sent.epoch == self.epoch)
                .map(|(id, sent)| (*id, Some(millis(sent.sent_at.elapsed()))))
                .collect();
            carried.extend(
                self.known
                    .iter()
                    .filter(|id| !state.sent.contains_key(id))
                    .map(|id| (*id, None)),
            );
            carried
        };
        let end = CallEnd::with_reason(CallStatus::Unknown, CallReason::StreamLost);
        for (id, duration) in carried {
            if let Err(error) = self.hub.finish(id, &end, duration).await {
                tracing::warn!(call = %id, %error, "ending a lost stream's call failed");
            }
        }
    }
}

fn parse_arguments(text: &str) -> Option<serde_json::Map<String, Value>> {
    match serde_json::from_str(text) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
