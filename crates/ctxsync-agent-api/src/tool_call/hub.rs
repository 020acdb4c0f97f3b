//! The server's side of the tool-call channel (issues 36 and 37): the `ToolCalls`
//! streams agents open, and [`CallHub`], through which the HTTP layer sees a stored call
//! to its agent, waits for its end and cancels it, on whichever replica holds the
//! agent's stream.
//!
//! The store is the truth: a call is stored before it is sent and every end is recorded
//! there first (the first end wins). Which replica holds an agent's stream is a fenced
//! lease in the store (persistence's `tool_call::routing`); the holder claims a pending
//! call with a compare-and-set when its event arrives (in-process, or PostgreSQL NOTIFY
//! from another replica) or on its slow re-check, and sends it. The hub's memory holds only which
//! streams this replica serves, which calls it sent on them and who waits; waiters are
//! woken by the calls' events and also re-read the store now and then. A lease keeper
//! renews this replica's leases, closes a stream another replica took over, sweeps
//! calls whose stream or dispatcher died, and wakes the chats of agents whose replica
//! died (their lease lapsed: offline from then).
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
use ctxsync_protocol::tool_call::{AgentCall, CallArguments, CallRequest, ServerCall};
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::AbortHandle;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};

use ctxsync_persistence::{
    AgentId, CTXSYNC_SERVER, CallAdmission, CallChange, ChangeEvent, ChatCallSubscription,
    NewToolCall, Store, StoreError, StreamLease, ToolCallRecord,
};
use ctxsync_protocol::tool_call::ToolCallId;

use crate::metrics::Histogram;

mod sign_in;

pub use sign_in::SignInSettings;

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
/// How long an end counted here is remembered, so a second report is not counted again.
const COUNTED_MEMORY: Duration = Duration::from_secs(60);
/// How long a replica's hold on an agent's stream lasts unless renewed: the bound on
/// noticing a dead replica (renewed every fifth of it).
pub const DEFAULT_CALL_LEASE: Duration = Duration::from_secs(5);

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
    /// ([`ctxsync_protocol::tool_call::CALL_HEARTBEAT`]).
    pub heartbeat: Duration,
    /// Silence from the agent after which its stream counts as lost
    /// ([`ctxsync_protocol::tool_call::CALL_SILENCE_LIMIT`]); also bounds the wait for its hello.
    pub silence_limit: Duration,
    /// See [`DEFAULT_DEADLINE_SLACK`].
    pub deadline_slack: Duration,
    /// See [`DEFAULT_CANCEL_WAIT`].
    pub cancel_wait: Duration,
    /// See [`DEFAULT_CALL_LEASE`].
    pub lease: Duration,
    /// How sign-ins are routed; `None` (no secrets key): sign-ins are not routed and
    /// kept credentials not sent.
    pub sign_in: Option<SignInSettings>,
}

impl Default for CallHubConfig {
    fn default() -> Self {
        Self {
            reconnect_grace: DEFAULT_RECONNECT_GRACE,
            recheck: Duration::from_secs(1),
            heartbeat: ctxsync_protocol::tool_call::CALL_HEARTBEAT,
            silence_limit: ctxsync_protocol::tool_call::CALL_SILENCE_LIMIT,
            deadline_slack: DEFAULT_DEADLINE_SLACK,
            cancel_wait: DEFAULT_CANCEL_WAIT,
            lease: DEFAULT_CALL_LEASE,
            sign_in: None,
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

/// What [`CallHub::start`] made of a call.
#[derive(Clone, Debug)]
pub enum CallStart {
    /// The chat does not exist, or has no such turn.
    NoTurn,
    /// The turn holds this `call_id` already, with another name or other arguments.
    Conflict(ToolCallRecord),
    /// A call of the server's own tool (`find_tools`): admitted and `running`, for the
    /// caller to answer and end ([`CallHub::end`]); it never reaches an agent.
    Own(ToolCallRecord),
    /// The call as stored when the wait ended: ended, or still running.
    Call(ToolCallRecord),
    /// The call's row went away while it was waited for (its turn was pruned).
    Gone(ToolCallRecord),
}

/// Sends calls to agents' streams and wakes their waiters. One per server process,
/// shared by the agent API and the HTTP layer; several replicas' hubs share one store.
#[derive(Debug)]
pub struct CallHub {
    store: Store,
    config: CallHubConfig,
    /// This hub's name in `call_streams` (random per process).
    replica: String,
    /// For the tasks the hub starts (deadline watchers, stream drivers, claims).
    me: Weak<CallHub>,
    state: Mutex<HubState>,
    /// Indexed like [`CallStatus::ALL`].
    ended: [AtomicU64; 7],
    durations: Histogram,
    /// The event feed and the lease keeper: stopped with the hub.
    tasks: Mutex<Vec<AbortHandle>>,
}

#[derive(Debug, Default)]
struct HubState {
    /// The stream each agent has here (one per agent).
    streams: HashMap<AgentId, StreamEntry>,
    /// Calls sent from here and not yet seen end: the in-flight gauge.
    sent: HashMap<ToolCallId, SentCall>,
    /// Calls being claimed here right now, so one wake-up does not race another.
    claiming: HashSet<ToolCallId>,
    /// Agents whose streams are being registered here (one entry per open in progress).
    registering: Vec<AgentId>,
    /// Waiters' channels, created on demand and removed with the last waiter.
    waiters: HashMap<ToolCallId, watch::Sender<Option<ToolCallRecord>>>,
    /// Ends counted here lately, so a second report of one end is not counted again.
    counted: HashSet<ToolCallId>,
    counted_order: VecDeque<(Instant, ToolCallId)>,
    /// Where the last look for lapsed leases ended (the store's milliseconds).
    lapse_mark: Option<i64>,
    /// Sign-ins sent to agents here and not yet answered.
    sign_ins: HashMap<ctxsync_protocol::sign_in::SignInRequestId, sign_in::SignInFlight>,
}

impl HubState {
    /// The (agent, generation) of every stream here.
    fn leases(&self) -> Vec<(AgentId, u64)> {
        self.streams
            .iter()
            .map(|(agent, entry)| (*agent, entry.lease.generation))
            .collect()
    }
}

#[derive(Clone, Debug)]
struct StreamEntry {
    lease: StreamLease,
    run: RunId,
    link: Arc<StreamLink>,
}

/// What the hub and a stream's driver share.
#[derive(Debug)]
struct StreamLink {
    /// Boxed: a channel allocates its first block of slots up front, and a server holds
    /// one channel per agent; a pointer-sized slot keeps that block small.
    tx: mpsc::Sender<Box<ServerCall>>,
    /// Told to stop when a newer stream replaces this one, its run was replaced or its
    /// lease was taken over.
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
        let sent = self.tx.try_send(Box::new(call)).is_ok();
        if sent {
            self.touch();
        }
        sent
    }
}

#[derive(Debug)]
struct SentCall {
    agent: AgentId,
    generation: u64,
    sent_at: Instant,
    watcher: Option<AbortHandle>,
    /// A cancel went to the agent already.
    cancel_sent: bool,
    /// This hub is recording its end.
    ending: bool,
}

/// Who asks to record an end, which decides whether it counts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// The agent, the deadline, a cancel or a lost stream: counted when this end is the
    /// one stored.
    Hub,
    /// The store ended it itself (a restart, a sweep): counted as stored.
    Store,
}

impl Drop for CallHub {
    fn drop(&mut self) {
        for task in self
            .tasks
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            task.abort();
        }
    }
}

impl CallHub {
    /// A hub over `store`. Inside a tokio runtime it starts its event feed (wake-ups from
    /// this and other replicas) and its lease keeper (renewal, the slow re-check and the
    /// sweep), both stopped when the hub is dropped.
    pub fn new(store: Store, config: CallHubConfig) -> Arc<Self> {
        let mut name = [0u8; 8];
        // Only names this process among replicas: a clock-based fallback would do.
        if getrandom::fill(&mut name).is_err() {
            name = (Instant::now().elapsed().as_nanos() as u64 ^ std::process::id() as u64)
                .to_le_bytes();
        }
        let replica = name.iter().map(|b| format!("{b:02x}")).collect();
        let hub = Arc::new_cyclic(|me| Self {
            store,
            config,
            replica,
            me: me.clone(),
            state: Mutex::default(),
            ended: std::array::from_fn(|_| AtomicU64::new(0)),
            durations: Histogram::new(&CALL_SECONDS_BUCKETS),
            tasks: Mutex::default(),
        });
        if tokio::runtime::Handle::try_current().is_ok() {
            // Subscribed before anything is admitted through this hub.
            let feed = tokio::spawn(feed(Arc::downgrade(&hub), hub.store.subscribe_all_calls()));
            let keeper = tokio::spawn(keep_leases(Arc::downgrade(&hub)));
            let mut tasks = hub.tasks.lock().unwrap_or_else(|e| e.into_inner());
            tasks.push(feed.abort_handle());
            tasks.push(keeper.abort_handle());
        }
        hub
    }

    /// The settings this hub runs with.
    pub fn config(&self) -> &CallHubConfig {
        &self.config
    }

    /// This hub's name among the replicas sharing its store.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    fn lock(&self) -> MutexGuard<'_, HubState> {
        // A panic while holding the lock leaves plain maps behind; keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a call and waits for it: admits `call` in the store (a repeated `call_id`
    /// answers the recorded call), sends it to its agent's stream through whichever
    /// replica holds it ([`Self::dispatch`]), and waits at most `wait` for its end
    /// ([`Self::wait`]). The one way a request starts a tool call, so a route only maps
    /// what comes back. [`StoreError::LimitReached`] when the turn holds the most calls
    /// it takes.
    pub async fn start(&self, call: &NewToolCall, wait: Duration) -> Result<CallStart, StoreError> {
        let Some(admission) = self.store.admit_tool_call(call).await? else {
            return Ok(CallStart::NoTurn);
        };
        let record = match admission {
            CallAdmission::Conflict(existing) => return Ok(CallStart::Conflict(existing)),
            CallAdmission::Refused(refused) => {
                self.count_admitted_end(&refused);
                refused
            }
            CallAdmission::Existing(existing) => existing,
            CallAdmission::Started(started) if started.server == CTXSYNC_SERVER => {
                return Ok(CallStart::Own(started));
            }
            CallAdmission::Started(started) => self.dispatch(&started).await?,
        };
        if record.status.is_end() {
            return Ok(CallStart::Call(record));
        }
        Ok(match self.wait(record.id, wait).await? {
            Some(now) => CallStart::Call(now),
            None => CallStart::Gone(record),
        })
    }

    /// Sees a `running` call (as [`Store::admit_tool_call`] started it) to its agent's
    /// stream: the replica holding that stream, this one or another, claims and sends
    /// it; this waits until it is delivered or ended, at most the reconnect grace. Still
    /// pending then: it ends `refused` `agent_unreachable` (a retry may run). Answers the
    /// call as stored; its end arrives later ([`Self::wait`]).
    pub async fn dispatch(&self, call: &ToolCallRecord) -> Result<ToolCallRecord, StoreError> {
        if call.status.is_end() || call.delivered {
            return Ok(call.clone());
        }
        if call.agent_id.is_none() || call.agent_run_id.is_none() {
            // Admission never starts such a call; end it rather than leave it running.
            tracing::warn!(call = %call.id, "a running call without agent or run");
            let end = CallEnd::error(0, "the call cannot be sent to an agent");
            return self.record_end(call.id, &end, None, call).await;
        }
        let grace = Instant::now() + self.config.reconnect_grace;
        let mut waiter = self.waiter(call.id);
        // The holder was woken by the admission's event; a stream here claims at once.
        if let Some(agent) = call.agent_id {
            self.offer(call.id, agent);
        }
        loop {
            let recheck = (Instant::now() + self.config.recheck).min(grace);
            tokio::select! {
                _ = waiter.rx.changed() => {}
                () = tokio::time::sleep_until(recheck) => {}
            }
            if let Some(ended) = waiter.rx.borrow_and_update().clone() {
                return Ok(ended);
            }
            let Some(record) = self.store.get_tool_call_by_id(call.id).await? else {
                return Ok(call.clone());
            };
            if record.status.is_end() || record.delivered {
                return Ok(record);
            }
            if Instant::now() >= grace {
                break;
            }
        }
        tracing::debug!(call = %call.id, "no call stream took the call within the grace");
        let end = CallEnd::with_reason(CallStatus::Refused, CallReason::AgentUnreachable);
        let stored = self.store.end_pending_tool_call(call.id, &end).await?;
        let record = stored.unwrap_or_else(|| call.clone());
        self.settle(&record, (end.status, end.reason), Origin::Hub);
        Ok(record)
    }

    /// A pending call for `agent`: claimed and sent if this replica holds the agent's
    /// stream (in a task of its own), else nothing (its holder was woken too).
    fn offer(&self, id: ToolCallId, agent: AgentId) {
        let entry = {
            let mut state = self.lock();
            let Some(entry) = state.streams.get(&agent).cloned() else {
                return;
            };
            if state.sent.contains_key(&id) || !state.claiming.insert(id) {
                return;
            }
            entry
        };
        let Some(hub) = self.me.upgrade() else { return };
        tokio::spawn(async move {
            if let Err(error) = hub.claim_and_send(id, &entry).await {
                tracing::warn!(call = %id, %error, "delivering a call failed");
            }
            hub.lock().claiming.remove(&id);
        });
    }

    /// Claims call `id` for `entry`'s stream (a compare-and-set in the store) and queues
    /// it there.
    async fn claim_and_send(&self, id: ToolCallId, entry: &StreamEntry) -> Result<(), StoreError> {
        let Some(call) = self
            .store
            .claim_tool_call(id, &entry.lease, &self.replica)
            .await?
        else {
            return Ok(());
        };
        let Some(arguments) = call.arguments.map(CallArguments::from_canonical) else {
            let end = CallEnd::error(0, "the call's stored arguments are unreadable");
            self.finish(id, &end, None).await?;
            return Ok(());
        };
        let request = ServerCall::Call(CallRequest {
            id,
            agent_run_id: entry.run.clone(),
            server: call.server.clone(),
            tool: call.tool.clone(),
            arguments,
            timeout: Duration::from_millis(call.timeout_ms),
        });
        self.lock().sent.insert(
            id,
            SentCall {
                agent: entry.lease.agent,
                generation: entry.lease.generation,
                sent_at: Instant::now(),
                watcher: None,
                cancel_sent: false,
                ending: false,
            },
        );
        let queued = tokio::time::timeout(
            self.config.reconnect_grace,
            entry.link.tx.send(Box::new(request)),
        );
        if !matches!(queued.await, Ok(Ok(()))) {
            // Never queued: the agent cannot have it, so it did not run.
            tracing::debug!(call = %id, "the call stream is full or gone");
            let end = CallEnd::with_reason(CallStatus::Refused, CallReason::AgentUnreachable);
            self.finish(id, &end, None).await?;
            return Ok(());
        }
        entry.link.touch();
        self.watch_deadline(id, Duration::from_millis(call.timeout_ms));
        Ok(())
    }

    /// The link of the stream call `id` was sent on here, if it is still this hub's.
    fn link_of(&self, id: ToolCallId) -> Option<Arc<StreamLink>> {
        let state = self.lock();
        let sent = state.sent.get(&id)?;
        state
            .streams
            .get(&sent.agent)
            .filter(|entry| entry.lease.generation == sent.generation)
            .map(|entry| Arc::clone(&entry.link))
    }

    /// Ends the call `timed_out` (after a cancel to its agent) if it is still running
    /// `slack` after its own deadline.
    fn watch_deadline(&self, id: ToolCallId, timeout: Duration) {
        let Some(hub) = self.me.upgrade() else { return };
        let limit = timeout.saturating_add(self.config.deadline_slack);
        let task = tokio::spawn(async move {
            tokio::time::sleep(limit).await;
            let Some(elapsed) = hub.lock().sent.get(&id).map(|s| s.sent_at.elapsed()) else {
                return;
            };
            tracing::debug!(call = %id, "the call outlived its deadline");
            if let Some(link) = hub.link_of(id) {
                link.try_send(ServerCall::Cancel { id });
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
    /// when there is no such call. Woken by the end's event (from any replica), with a
    /// store re-read every [`CallHubConfig::recheck`] for a lost one.
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
            let Some(record) = self.store.get_tool_call_by_id(id).await? else {
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

    /// Wakes `id`'s waiters here to re-read the store (a change another replica made).
    fn wake(&self, id: ToolCallId) {
        if let Some(tx) = self.lock().waiters.get(&id) {
            tx.send_modify(|_| {});
        }
    }

    fn wake_all(&self) {
        for tx in self.lock().waiters.values() {
            tx.send_modify(|_| {});
        }
    }

    /// Cancels a running call (its agent sends `notifications/cancelled` to the MCP
    /// server) and answers it as it ended; an ended call is answered unchanged. A call
    /// not yet delivered ends `canceled` at once; one delivered on another replica's
    /// stream is cancelled there (through the store). `None` when there is no such call.
    pub async fn cancel(&self, id: ToolCallId) -> Result<Option<ToolCallRecord>, StoreError> {
        let Some(mut record) = self.store.get_tool_call_by_id(id).await? else {
            return Ok(None);
        };
        if !record.status.is_end() && !record.delivered {
            let end = CallEnd::bare(CallStatus::Canceled);
            match self.store.end_pending_tool_call(id, &end).await? {
                Some(stored) => record = stored,
                None => return Ok(None),
            }
            self.settle(&record, (end.status, end.reason), Origin::Hub);
        }
        if record.status.is_end() {
            return Ok(Some(record));
        }
        let asked = match self.link_of(id) {
            Some(link) => link.try_send(ServerCall::Cancel { id }),
            None => self.store.request_tool_call_cancel(id).await?.is_some(),
        };
        if asked {
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
    /// [`ctxsync_persistence::TurnRecord::canceled_calls`]): each one sent from here gets its cancel on
    /// its agent's stream, and all are counted and their waiters woken.
    pub fn canceled_by_store(&self, records: &[ToolCallRecord]) {
        for record in records {
            self.ended_elsewhere(record.id);
            self.settle(record, (record.status, record.reason), Origin::Store);
        }
    }

    /// Counts a call that admission ended at once (`refused` before it was sent), so
    /// `/metrics` sees every end; a running call is ignored.
    fn count_admitted_end(&self, record: &ToolCallRecord) {
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
        if let Some(sent) = self.lock().sent.get_mut(&id) {
            // Its `Ended` event may arrive before this returns: not someone else's end.
            sent.ending = true;
        }
        let record = self.store.end_tool_call(id, end, duration_ms).await?;
        if let Some(record) = &record {
            self.settle(record, (end.status, end.reason), Origin::Hub);
        }
        Ok(record)
    }

    /// [`Self::finish`] for a call whose stored row `fallback` is.
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

    /// A call sent from here ended without its agent's word (another replica's cancel
    /// fallback, a sweep, a pruned turn): the agent is told to stop it.
    fn ended_elsewhere(&self, id: ToolCallId) {
        let Some(link) = self.link_of(id) else { return };
        link.try_send(ServerCall::Cancel { id });
        if let Some(sent) = self.lock().sent.remove(&id)
            && let Some(watcher) = sent.watcher
        {
            watcher.abort();
        }
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
        while let Some((at, old)) = state.counted_order.front().copied() {
            if now.duration_since(at) < COUNTED_MEMORY {
                break;
            }
            state.counted_order.pop_front();
            state.counted.remove(&old);
        }
        // Counted before the waiters wake, so what they read next includes this end.
        if ours && state.counted.insert(record.id) {
            state.counted_order.push_back((now, record.id));
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
    /// registers it in the store (a new generation, fencing any older stream of the
    /// agent on any replica), replaces an older one here, drives `inbound` in a task of
    /// its own and claims the agent's pending calls. An `Err` item is a message that
    /// failed validation (ignored, but proof of life); the end of `inbound` is the
    /// stream's end. Answers what to send the agent; `None` when `run` is no longer the
    /// agent's current run.
    pub(crate) async fn open<S>(
        &self,
        agent: AgentId,
        run: RunId,
        inbound: S,
    ) -> Result<Option<ReceiverStream<Box<ServerCall>>>, StoreError>
    where
        S: Stream<Item = Result<AgentCall, String>> + Send + Unpin + 'static,
    {
        self.lock().registering.push(agent);
        let registered = self
            .store
            .register_call_stream(agent, &run, &self.replica, self.config.lease)
            .await;
        let unmark = |state: &mut HubState| {
            if let Some(at) = state.registering.iter().position(|a| *a == agent) {
                state.registering.swap_remove(at);
            }
        };
        let Some((lease, lost)) = registered.inspect_err(|_| unmark(&mut self.lock()))? else {
            unmark(&mut self.lock());
            return Ok(None);
        };
        for record in &lost {
            self.ended_elsewhere(record.id);
            self.settle(record, (record.status, record.reason), Origin::Store);
        }
        let (tx, rx) = mpsc::channel(CALL_QUEUE);
        let link = Arc::new(StreamLink {
            tx,
            stop: Notify::new(),
            base: Instant::now(),
            last_sent_ms: AtomicU64::new(0),
        });
        let entry = StreamEntry {
            lease: lease.clone(),
            run,
            link: Arc::clone(&link),
        };
        let replaced = {
            let mut state = self.lock();
            unmark(&mut state);
            state.streams.insert(agent, entry)
        };
        if let Some(old) = replaced {
            tracing::debug!(%agent, "a newer call stream replaces the agent's older one");
            old.link.stop.notify_one();
        }
        tracing::debug!(%agent, generation = lease.generation, "call stream opened");
        let Some(hub) = self.me.upgrade() else {
            return Ok(Some(ReceiverStream::new(rx)));
        };
        let session = Session {
            hub: Arc::clone(&hub),
            lease,
            link: Arc::clone(&link),
            known: HashSet::new(),
            pending: HashMap::new(),
        };
        tokio::spawn(session.run(inbound));
        // Calls that waited for this stream (within their grace) go now, after the
        // credentials kept for the agent, and sign-ins waiting for it.
        tokio::spawn(async move {
            for message in hub.kept_credentials(agent).await {
                link.try_send(message);
            }
            match hub.store.pending_calls_of_agent(agent).await {
                Ok(ids) => ids.into_iter().for_each(|id| hub.offer(id, agent)),
                Err(error) => tracing::warn!(%agent, %error, "reading pending calls failed"),
            }
            hub.run_sign_ins().await;
        });
        Ok(Some(ReceiverStream::new(rx)))
    }

    /// One round of the lease keeper: renew this replica's leases (stopping streams
    /// another replica took over), re-check for pending calls whose wake-up was lost,
    /// and sweep calls nobody else will end.
    async fn keep(&self) -> Result<(), StoreError> {
        // Streams registered before the renewal: one missing from its answer was taken
        // over.
        let local = self.lock().leases();
        let held = self
            .store
            .renew_call_streams(&self.replica, self.config.lease)
            .await?;
        // Streams here now, or being registered: a held lease that is neither has lost
        // its driver.
        let (present, registering) = {
            let state = self.lock();
            (state.leases(), state.registering.clone())
        };
        for lease in &held {
            if !present.contains(&(lease.agent, lease.generation))
                && !registering.contains(&lease.agent)
            {
                // A stream whose driver is gone without releasing it (a failed write).
                for record in self.store.release_call_stream(lease).await? {
                    self.settle(&record, (record.status, record.reason), Origin::Store);
                }
            }
        }
        for (agent, generation) in &local {
            let still = held
                .iter()
                .any(|l| l.agent == *agent && l.generation == *generation);
            if !still {
                tracing::debug!(%agent, "another stream of the agent took over; closing ours");
                let entry = self.lock().streams.get(agent).cloned();
                if let Some(entry) = entry.filter(|e| e.lease.generation == *generation) {
                    entry.link.stop.notify_one();
                }
            }
        }
        if !held.is_empty() {
            self.recheck().await?;
        }
        self.run_sign_ins().await;
        // A replica that died releases nothing: its agents' chats hear it here, once
        // the lease runs out (issue 49).
        let mark = self.lock().lapse_mark;
        let mark = self.store.announce_lapsed_call_streams(mark).await?;
        self.lock().lapse_mark = Some(mark);
        let pending_limit = self.config.reconnect_grace + self.config.deadline_slack;
        for record in self.store.sweep_tool_calls(pending_limit).await? {
            self.ended_elsewhere(record.id);
            self.settle(&record, (record.status, record.reason), Origin::Store);
        }
        Ok(())
    }

    /// An event about a call, from this replica or another.
    fn changed(&self, call_id: ToolCallId, agent: Option<AgentId>, change: CallChange) {
        match change {
            CallChange::Pending => {
                if let Some(agent) = agent {
                    self.offer(call_id, agent);
                }
            }
            CallChange::CancelRequested => {
                if let Some(sent) = self.lock().sent.get_mut(&call_id) {
                    sent.cancel_sent = true;
                }
                if let Some(link) = self.link_of(call_id) {
                    link.try_send(ServerCall::Cancel { id: call_id });
                }
            }
            CallChange::Ended => {
                let foreign = {
                    let state = self.lock();
                    state.sent.get(&call_id).is_some_and(|sent| !sent.ending)
                        && !state.counted.contains(&call_id)
                };
                if foreign {
                    self.ended_elsewhere(call_id);
                }
                self.wake(call_id);
            }
            CallChange::Delivered | CallChange::Progress => self.wake(call_id),
        }
    }

    /// Events may have been missed: every waiter re-reads, and pending calls and cancel
    /// requests are looked for again.
    fn resync(&self) {
        self.wake_all();
        let Some(hub) = self.me.upgrade() else { return };
        tokio::spawn(async move {
            if let Err(error) = hub.recheck().await {
                tracing::warn!(%error, "re-reading pending calls failed");
            }
        });
    }

    /// What a lost wake-up would have brought: pending calls of the agents whose streams
    /// this replica holds are offered, and a cancel asked for elsewhere is sent (once).
    async fn recheck(&self) -> Result<(), StoreError> {
        for (id, agent, delivered) in self.store.calls_awaiting_replica(&self.replica).await? {
            if !delivered {
                self.offer(id, agent);
                continue;
            }
            let first = self
                .lock()
                .sent
                .get_mut(&id)
                .is_some_and(|sent| !std::mem::replace(&mut sent.cancel_sent, true));
            if first && let Some(link) = self.link_of(id) {
                link.try_send(ServerCall::Cancel { id });
            }
        }
        Ok(())
    }
}

/// The hub's event feed: wake-ups for calls, from this replica (in-process) and others
/// (NOTIFY).
async fn feed(hub: Weak<CallHub>, mut events: ChatCallSubscription) {
    while let Some(event) = events.next().await {
        let Some(hub) = hub.upgrade() else { return };
        match event {
            ChangeEvent::ToolCallChanged {
                call_id,
                agent_id,
                change,
                ..
            } => hub.changed(call_id, agent_id, change),
            ChangeEvent::Resync => hub.resync(),
            _ => {}
        }
    }
}

/// The hub's lease keeper: a round every fifth of the lease (one renewal, one re-check
/// and one sweep per replica, however many streams it holds).
async fn keep_leases(hub: Weak<CallHub>) {
    let period = match hub.upgrade() {
        Some(hub) => (hub.config.lease / 5).max(Duration::from_millis(10)),
        None => return,
    };
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(hub) = hub.upgrade() else { return };
        if let Err(error) = hub.keep().await {
            tracing::warn!(%error, "keeping the call-stream leases failed");
        }
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
    lease: StreamLease,
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
                        let was_idle = self.pending.is_empty();
                        self.received(message).await;
                        if was_idle && !self.pending.is_empty() {
                            // Coalesced from the first unwritten progress on.
                            flush.reset();
                        }
                    }
                    Some(Err(problem)) => {
                        last_heard = Instant::now();
                        tracing::debug!(agent = %self.lease.agent, %problem, "invalid call message ignored");
                    }
                    None => break "closed",
                },
                () = tokio::time::sleep_until(last_heard + config.silence_limit) => break "silent",
                // Only with progress to write: an idle stream (nearly all of them) wakes
                // for its heartbeat alone, not four times a second.
                _ = flush.tick(), if !self.pending.is_empty() => self.flush_all().await,
                _ = heartbeat.tick() => {
                    if self.link.idle_for() >= config.heartbeat / 2 {
                        self.link.try_send(ServerCall::Heartbeat);
                    }
                }
            }
        };
        tracing::debug!(agent = %self.lease.agent, why, "call stream ended");
        self.close().await;
    }

    async fn received(&mut self, message: AgentCall) {
        // Sign-ins are not calls: stored off the stream's task, so a slow write does not
        // hold its messages.
        let message = match message {
            AgentCall::SignIn { id, outcome } => {
                let (hub, agent) = (Arc::clone(&self.hub), self.lease.agent);
                tokio::spawn(async move { hub.sign_in_answered(agent, id, outcome).await });
                return;
            }
            AgentCall::Credential(stored) => {
                let (hub, agent) = (Arc::clone(&self.hub), self.lease.agent);
                tokio::spawn(async move { hub.credential_from_agent(agent, stored).await });
                return;
            }
            message => message,
        };
        let id = match &message {
            AgentCall::Accepted { id }
            | AgentCall::Progress { id, .. }
            | AgentCall::Ended { id, .. } => *id,
            AgentCall::Heartbeat | AgentCall::SignIn { .. } | AgentCall::Credential(_) => return,
            AgentCall::Hello { .. } => {
                tracing::debug!(agent = %self.lease.agent, "a second hello ignored");
                return;
            }
        };
        let Some(id) = self.own(id).await else {
            return;
        };
        let result = match message {
            // Proof of life only: the claim already recorded the delivery.
            AgentCall::Accepted { .. } => Ok(()),
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
            AgentCall::Heartbeat
            | AgentCall::Hello { .. }
            | AgentCall::SignIn { .. }
            | AgentCall::Credential(_) => Ok(()),
        };
        if let Err(error) = result {
            tracing::warn!(agent = %self.lease.agent, call = %id, %error, "recording an agent's call message failed");
        }
    }

    /// `id` as a call of this agent that is running; `None` (logged) otherwise: the
    /// agent is never trusted with another agent's call.
    async fn own(&mut self, id: ToolCallId) -> Option<ToolCallId> {
        if self.known.contains(&id) {
            return Some(id);
        }
        let sent_here = self
            .hub
            .lock()
            .sent
            .get(&id)
            .is_some_and(|sent| sent.agent == self.lease.agent);
        let ours = sent_here
            || match self.hub.store.get_tool_call_by_id(id).await {
                Ok(Some(record)) => {
                    record.agent_id == Some(self.lease.agent) && !record.status.is_end()
                }
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
            tracing::debug!(agent = %self.lease.agent, call = %id, "a message for a call not this agent's running one ignored");
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
    /// `stream_lost` (the agent cancels what it held), and its lease is released.
    async fn close(mut self) {
        self.flush_all().await;
        {
            let mut state = self.hub.lock();
            if state
                .streams
                .get(&self.lease.agent)
                .is_some_and(|entry| entry.lease.generation == self.lease.generation)
            {
                state.streams.remove(&self.lease.agent);
            }
        }
        match self.hub.store.release_call_stream(&self.lease).await {
            Ok(lost) => {
                for record in &lost {
                    self.hub
                        .settle(record, (record.status, record.reason), Origin::Store);
                }
            }
            // The lease lapses and a sweep ends its calls.
            Err(error) => {
                tracing::warn!(agent = %self.lease.agent, %error, "releasing a call stream failed");
            }
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
