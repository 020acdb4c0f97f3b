//! What the chat API bounds per caller beyond the listener's limits: open event streams
//! (per server and per chat) and the database work behind `/healthz`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use ctxsync_persistence::{AgentId, ChatId, Store};

use super::ApiError;

/// How often an open context event stream re-reads its chat without a notification, so
/// a lost one (another process's write on SQLite, a dropped LISTEN connection) leaves a
/// page stale for this long at most.
pub const DEFAULT_EVENT_RECHECK: Duration = Duration::from_secs(5);
/// The event streams' re-check never runs more often than this, whatever is configured:
/// each tick is one read per open stream.
pub const MIN_EVENT_RECHECK: Duration = Duration::from_millis(100);

/// Counts open context event streams.
#[derive(Debug)]
pub struct EventStreams {
    max_total: usize,
    max_per_chat: usize,
    open: Mutex<OpenStreams>,
}

#[derive(Debug, Default)]
struct OpenStreams {
    total: usize,
    per_chat: HashMap<ChatId, usize>,
}

/// One open stream; dropping it (the stream ended or its client went away) frees it.
#[derive(Debug)]
pub struct StreamSlot {
    streams: Arc<EventStreams>,
    chat: ChatId,
}

impl EventStreams {
    /// Caps of at most `max_total` open streams on this server and `max_per_chat` per chat.
    pub fn new(max_total: usize, max_per_chat: usize) -> Self {
        Self {
            max_total,
            max_per_chat,
            open: Mutex::default(),
        }
    }

    /// A slot for one more stream of `chat`, or 429 naming the cap that is full.
    pub fn open(self: &Arc<Self>, chat: ChatId) -> Result<StreamSlot, ApiError> {
        let mut open = self.open.lock().expect("event stream table lock");
        let of_chat = open.per_chat.get(&chat).copied().unwrap_or(0);
        let full = if of_chat >= self.max_per_chat {
            Some(format!(
                "this chat already has {} open event streams",
                self.max_per_chat
            ))
        } else if open.total >= self.max_total {
            Some(format!(
                "the server already has {} open event streams",
                self.max_total
            ))
        } else {
            None
        };
        if let Some(message) = full {
            return Err(ApiError::new(StatusCode::TOO_MANY_REQUESTS, message));
        }
        open.total += 1;
        *open.per_chat.entry(chat).or_default() += 1;
        Ok(StreamSlot {
            streams: Arc::clone(self),
            chat,
        })
    }

    /// Streams open now.
    pub fn open_count(&self) -> usize {
        self.open.lock().map_or(0, |open| open.total)
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.streams.open.lock().expect("event stream table lock");
        open.total -= 1;
        if let Some(count) = open.per_chat.get_mut(&self.chat) {
            *count -= 1;
            if *count == 0 {
                open.per_chat.remove(&self.chat);
            }
        }
    }
}

/// `/healthz`'s database check, run at most once per [`HEALTH_TTL`] however often it is
/// asked: concurrent callers wait for the one check in flight.
#[derive(Debug, Default)]
pub struct HealthCheck {
    last: tokio::sync::Mutex<Option<(Instant, bool)>>,
}

/// How long one database check answers `/healthz`.
pub const HEALTH_TTL: Duration = Duration::from_secs(1);

impl HealthCheck {
    /// True when the database answered a cheap query within the last [`HEALTH_TTL`].
    pub async fn database_ok(&self, store: &Store) -> bool {
        let mut last = self.last.lock().await;
        if let Some((at, ok)) = *last
            && at.elapsed() < HEALTH_TTL
        {
            return ok;
        }
        let ok = database_answers(store).await;
        *last = Some((Instant::now(), ok));
        ok
    }
}

/// One indexed read of an id that is never there: true when the database answers it.
pub async fn database_answers(store: &Store) -> bool {
    store.get_agent(AgentId::new_random()).await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_chat_and_total_caps_refuse_with_429_and_free_on_drop() {
        let streams = Arc::new(EventStreams::new(3, 2));
        let (a, b) = (ChatId::new_random(), ChatId::new_random());
        let a1 = streams.open(a).unwrap();
        let _a2 = streams.open(a).unwrap();
        let refused = streams.open(a).unwrap_err();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        let _b1 = streams.open(b).unwrap();
        assert!(streams.open(b).is_err(), "the server-wide cap of 3 is full");
        drop(a1);
        assert_eq!(streams.open_count(), 2);
        assert!(streams.open(b).is_ok());
    }
}
