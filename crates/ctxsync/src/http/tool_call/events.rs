//! The people's view of a chat's tool calls (issue 37): the `tool_call` events of the
//! chat's event stream and the recent calls its page lists. Both carry a
//! [`ToolCallItem`] — id, turn, name, status, progress, duration, truncated, phase — and
//! nothing else.
//!
//! Owns: turning a stored call into what a person may see, and pacing the events. Must
//! never: put a call's arguments, result, error, progress message or model text into an
//! event (a page session reads the stream; the type has no field for them), or read more
//! than once per notification (progress is paced per call, a resync re-reads a bounded
//! list).

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use axum::response::sse::Event;
use ctxsync_context_ui::{CallPhase, CallProgressItem, MAX_LISTED_CALLS, ToolCallItem};
use ctxsync_persistence::{
    CallChange, ChangeEvent, ChatCallSubscription, ChatId, Store, StoreError, ToolCallRecord,
};
use ctxsync_protocol::tool_call::ToolCallId;
use futures::Stream;
use tokio::time::{Instant, Interval};

/// Least time between two progress events of one call: a tool reporting every
/// millisecond costs a page a few updates a second.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);
/// Calls whose last event a stream remembers (to skip unchanged re-sends); past it, the
/// ended ones are forgotten first. Forgetting only costs a repeated event.
const REMEMBERED_CALLS: usize = 256;

/// What a person may see of `call`, reporting `phase`.
pub(crate) fn call_item(call: &ToolCallRecord, phase: CallPhase) -> ToolCallItem {
    ToolCallItem {
        id: call.call_id.clone(),
        turn: call.turn_id.to_string(),
        name: call.name.clone(),
        status: call.status.as_str().to_owned(),
        progress: call.progress.as_ref().map(|p| CallProgressItem {
            progress: p.progress,
            total: p.total,
        }),
        duration_ms: call.duration_ms,
        truncated: call.truncated,
        phase,
    }
}

/// The phase a read of `call` reports, after `change` (`None`: a re-read without one).
/// The stored state wins over the notification: a call read ended is `ended` whatever
/// woke the stream.
fn phase_of(call: &ToolCallRecord, change: Option<CallChange>) -> CallPhase {
    if call.status.is_end() {
        CallPhase::Ended
    } else if change == Some(CallChange::Progress) || (change.is_none() && call.progress.is_some())
    {
        CallPhase::Progress
    } else {
        CallPhase::Started
    }
}

/// `chat`'s recent calls as the page lists them, newest first.
pub(crate) async fn recent_items(
    store: &Store,
    chat: ChatId,
) -> Result<Vec<ToolCallItem>, StoreError> {
    Ok(store
        .chat_tool_calls(chat, MAX_LISTED_CALLS)
        .await?
        .iter()
        .map(|call| call_item(call, phase_of(call, None)))
        .collect())
}

/// What one stream last sent of a call.
struct Sent {
    item: ToolCallItem,
    json: String,
    at: Instant,
}

/// One stream's `tool_call` events: the recent calls' current state first (oldest
/// first, so a page putting each new call on top ends newest first), then one event per
/// change, re-reading the call each time.
struct CallFeed {
    store: Store,
    chat: ChatId,
    subscription: ChatCallSubscription,
    /// Re-reads the recent calls while one is running, in case a notification was lost.
    recheck: Interval,
    /// Re-read everything before waiting again (at the start and after a resync).
    resync: bool,
    sent: HashMap<ToolCallId, Sent>,
    /// Progress held back by [`PROGRESS_EVERY`]: the call is re-read at that time.
    deferred: HashMap<ToolCallId, Instant>,
    ready: VecDeque<Event>,
}

/// The `tool_call` events of `chat`, from `subscription` (taken before anything was read,
/// so no change falls in between). Ends when the store is gone.
pub(crate) fn call_events(
    store: Store,
    chat: ChatId,
    subscription: ChatCallSubscription,
    recheck_every: Duration,
) -> impl Stream<Item = Event> {
    let mut recheck = tokio::time::interval_at(Instant::now() + recheck_every, recheck_every);
    recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let feed = CallFeed {
        store,
        chat,
        subscription,
        recheck,
        resync: true,
        sent: HashMap::new(),
        deferred: HashMap::new(),
        ready: VecDeque::new(),
    };
    futures::stream::unfold(feed, |mut feed| async move {
        let event = feed.next().await?;
        Some((event, feed))
    })
}

impl CallFeed {
    async fn next(&mut self) -> Option<Event> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(event);
            }
            if std::mem::take(&mut self.resync) {
                self.reread_recent().await;
                continue;
            }
            let due = self.deferred.values().min().copied();
            tokio::select! {
                event = self.subscription.next() => match event? {
                    ChangeEvent::ToolCallChanged { call_id, chat_id, change, .. }
                        if chat_id == self.chat => self.changed(call_id, change).await,
                    ChangeEvent::Resync => self.resync = true,
                    _ => {}
                },
                () = sleep_until(due) => {
                    let now = Instant::now();
                    let ready: Vec<ToolCallId> = self
                        .deferred
                        .iter()
                        .filter(|(_, at)| **at <= now)
                        .map(|(id, _)| *id)
                        .collect();
                    for id in ready {
                        self.deferred.remove(&id);
                        self.read(id, Some(CallChange::Progress)).await;
                    }
                }
                _ = self.recheck.tick() => {
                    self.resync = self.sent.values().any(|s| s.item.is_running());
                }
            }
        }
    }

    async fn changed(&mut self, id: ToolCallId, change: CallChange) {
        match change {
            // Not a state a person sees: the call's end follows.
            CallChange::CancelRequested => {}
            CallChange::Progress => {
                let next = self.sent.get(&id).map(|s| s.at + PROGRESS_EVERY);
                match next {
                    Some(at) if at > Instant::now() => {
                        self.deferred.entry(id).or_insert(at);
                    }
                    _ => self.read(id, Some(change)).await,
                }
            }
            CallChange::Pending | CallChange::Delivered | CallChange::Ended => {
                self.deferred.remove(&id);
                self.read(id, Some(change)).await;
            }
        }
    }

    async fn read(&mut self, id: ToolCallId, change: Option<CallChange>) {
        match self.store.get_tool_call_by_id(id).await {
            Ok(Some(call)) if call.chat_id == self.chat => {
                let phase = phase_of(&call, change);
                self.send(id, call_item(&call, phase));
            }
            Ok(Some(_)) => {}
            // Gone at its end: its turn was pruned, which cancels a running call in the
            // same transaction that deletes it. The page's row ends as the call did.
            Ok(None) => {
                let gone = (change == Some(CallChange::Ended))
                    .then(|| self.sent.get(&id))
                    .flatten()
                    .filter(|s| s.item.is_running())
                    .map(|s| s.item.clone());
                if let Some(mut item) = gone {
                    item.status = "canceled".to_owned();
                    item.phase = CallPhase::Ended;
                    self.send(id, item);
                }
            }
            Err(e) => {
                tracing::warn!(chat = %self.chat, call = %id, error = %e, "reading a call for the event stream failed; the next re-check reads it again");
            }
        }
    }

    /// The recent calls' current state, oldest first; unchanged ones are not re-sent.
    async fn reread_recent(&mut self) {
        match self
            .store
            .chat_tool_calls(self.chat, MAX_LISTED_CALLS)
            .await
        {
            Ok(calls) => {
                for call in calls.iter().rev() {
                    self.deferred.remove(&call.id);
                    self.send(call.id, call_item(call, phase_of(call, None)));
                }
            }
            Err(e) => {
                tracing::warn!(chat = %self.chat, error = %e, "reading a chat's calls for the event stream failed; the next re-check reads them again");
            }
        }
    }

    /// Queues `item`'s event unless it is what this stream last sent of call `id`.
    fn send(&mut self, id: ToolCallId, item: ToolCallItem) {
        let json = serde_json::to_string(&item).expect("a call item serializes");
        if self.sent.get(&id).is_some_and(|s| s.json == json) {
            return;
        }
        self.ready
            .push_back(Event::default().event("tool_call").data(json.clone()));
        let at = Instant::now();
        self.sent.insert(id, Sent { item, json, at });
        if self.sent.len() > REMEMBERED_CALLS {
            self.sent.retain(|_, s| s.item.is_running());
            if self.sent.len() > REMEMBERED_CALLS {
                self.sent.clear();
            }
        }
    }
}

/// Sleeps until `at`; forever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
