//! The seam through which the gate records its attempts — per (chat, agent, run id),
//! when the wait started and how it ended — so that another replica, or a restarted
//! one, knows a run's first turn already waited (SPEC §8, §11).
//!
//! The gate keeps its in-process bookkeeping (one shared waiting attempt per key, a cache
//! of retained timed-out ones); the log is what outlives the process. [`MemoryAttemptLog`]
//! keeps records in memory, for a single process and for tests; the store-backed one is
//! the `store` module's `StoreAttemptLog`.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use ctxsync_protocol::RunId;
use tokio::time::Instant;

use crate::source::SourceError;

/// How a recorded attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttemptResult {
    /// Discovery completed (or became unnecessary) while the attempt waited.
    Completed,
    /// The budget or the grace ran out.
    TimedOut,
}

/// An attempt's end, as recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordedEnd {
    /// How long ago the attempt ended, by the log's clock.
    pub ago: Duration,
    /// Whether it ended with discovery complete or timed out.
    pub result: AttemptResult,
}

/// One attempt as the log holds it, with times as ages so the gate never compares its
/// clock with the log's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttemptRecord {
    /// How long ago the attempt started, by the log's clock.
    pub started_ago: Duration,
    /// The longest the attempt may wait from its start: once `started_ago` passes it,
    /// an attempt that never ended (its process died waiting) spent the run's wait.
    pub wait_limit: Duration,
    /// `None` while the attempt waits, or when whoever waited died first.
    pub end: Option<RecordedEnd>,
}

/// Where the gate records its attempts. `run` is the agent row's run id (`None` for a
/// legacy agent). Every call is bounded by the gate's read timeout; an error is logged
/// and the gate goes on as if nothing were recorded, so a failing log costs at most a
/// second wait, never a failed turn.
pub trait AttemptLog<C, A>: Send + Sync + 'static {
    /// The record of (chat, agent, run), if any.
    fn read(
        &self,
        chat: &C,
        agent: &A,
        run: Option<&RunId>,
    ) -> impl Future<Output = Result<Option<AttemptRecord>, SourceError>> + Send;

    /// Records that an attempt for (chat, agent, run) starts now and may wait up to
    /// `wait_limit`, replacing an earlier record of that key. The pair's records of other runs that ended (or started,
    /// never ending) more than `forget_after` ago may be forgotten.
    fn record_start(
        &self,
        chat: &C,
        agent: &A,
        run: Option<&RunId>,
        wait_limit: Duration,
        forget_after: Duration,
    ) -> impl Future<Output = Result<(), SourceError>> + Send;

    /// Records that the attempt for (chat, agent, run) ended now; without a recorded
    /// start, it is recorded as starting now too.
    fn record_end(
        &self,
        chat: &C,
        agent: &A,
        run: Option<&RunId>,
        result: AttemptResult,
    ) -> impl Future<Output = Result<(), SourceError>> + Send;
}

struct MemoryRecord {
    started: Instant,
    wait_limit: Duration,
    end: Option<(Instant, AttemptResult)>,
}

impl MemoryRecord {
    /// When the record was last touched.
    fn last(&self) -> Instant {
        self.end.map_or(self.started, |(at, _)| at)
    }
}

type MemoryKey<C, A> = (C, A, Option<RunId>);

/// An [`AttemptLog`] in this process's memory, on tokio's clock (so tests on the paused
/// clock see its ages move): the default of [`FirstTurnGate::new`](crate::FirstTurnGate::new).
/// Nothing outlives the process.
pub struct MemoryAttemptLog<C, A> {
    records: Mutex<HashMap<MemoryKey<C, A>, MemoryRecord>>,
}

impl<C, A> Default for MemoryAttemptLog<C, A> {
    fn default() -> Self {
        Self {
            records: Mutex::new(HashMap::new()),
        }
    }
}

impl<C, A> std::fmt::Debug for MemoryAttemptLog<C, A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryAttemptLog").finish_non_exhaustive()
    }
}

impl<C, A> MemoryAttemptLog<C, A> {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many records are held.
    pub fn len(&self) -> usize {
        self.records().len()
    }

    /// True when no record is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn records(&self) -> MutexGuard<'_, HashMap<MemoryKey<C, A>, MemoryRecord>> {
        // Every update is one step, so the map is consistent even after a panic.
        self.records
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn key<C: Clone, A: Clone>(chat: &C, agent: &A, run: Option<&RunId>) -> MemoryKey<C, A> {
    (chat.clone(), agent.clone(), run.cloned())
}

impl<C, A> AttemptLog<C, A> for MemoryAttemptLog<C, A>
where
    C: Clone + Eq + Hash + Send + Sync + 'static,
    A: Clone + Eq + Hash + Send + Sync + 'static,
{
    async fn read(
        &self,
        chat: &C,
        agent: &A,
        run: Option<&RunId>,
    ) -> Result<Option<AttemptRecord>, SourceError> {
        let now = Instant::now();
        let records = self.records();
        Ok(records
            .get(&key(chat, agent, run))
            .map(|record| AttemptRecord {
                started_ago: now.saturating_duration_since(record.started),
                wait_limit: record.wait_limit,
                end: record.end.map(|(at, result)| RecordedEnd {
                    ago: now.saturating_duration_since(at),
                    result,
                }),
            }))
    }

    async fn record_start(
        &self,
        chat: &C,
        agent: &A,
        run: Option<&RunId>,
        wait_limit: Duration,
        forget_after: Duration,
    ) -> Result<(), SourceError> {
        let now = Instant::now();
        let mut records = self.records();
        // Bounded by the keys touched within `forget_after`, whoever they belong to.
        records.retain(|_, record| now.saturating_duration_since(record.last()) <= forget_after);
        records.insert(
            key(chat, agent, run),
            MemoryRecord {
                started: now,
                wait_limit,
                end: None,
            },
        );
        Ok(())
    }

    async fn record_end(
        &self,
        chat: &C,
        agent: &A,
        run: Option<&RunId>,
        result: AttemptResult,
    ) -> Result<(), SourceError> {
        let now = Instant::now();
        self.records()
            .entry(key(chat, agent, run))
            .or_insert(MemoryRecord {
                started: now,
                wait_limit: Duration::ZERO,
                end: None,
            })
            .end = Some((now, result));
        Ok(())
    }
}

/// One log shared by several gates (as one store is shared by several replicas).
impl<C, A, L: AttemptLog<C, A>> AttemptLog<C, A> for std::sync::Arc<L> {
    fn read(
        &self,
        chat: &C,
        agent: &A,
        run: Option<&RunId>,
    ) -> impl Future<Output = Result<Option<AttemptRecord>, SourceError>> + Send {
        (**self).read(chat, agent, run)
    }

    fn record_start(
        &self,
        chat: &C,
        agent: &A,
        run: Option<&RunId>,
        wait_limit: Duration,
        forget_after: Duration,
    ) -> impl Future<Output = Result<(), SourceError>> + Send {
        (**self).record_start(chat, agent, run, wait_limit, forget_after)
    }

    fn record_end(
        &self,
        chat: &C,
        agent: &A,
        run: Option<&RunId>,
        result: AttemptResult,
    ) -> impl Future<Output = Result<(), SourceError>> + Send {
        (**self).record_end(chat, agent, run, result)
    }
}
