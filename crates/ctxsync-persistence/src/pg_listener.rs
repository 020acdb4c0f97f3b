//! PostgreSQL LISTEN/NOTIFY: how one replica's commit wakes another's waiters. Writers
//! `pg_notify` inside their transaction (delivered at commit); one dedicated
//! `tokio-postgres` connection per store LISTENs, event-driven with no polling loop,
//! and reconnects with backoff when it drops, telling subscribers to resync.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_postgres::{AsyncMessage, Client, NoTls};

use crate::db::{StoreOptions, TCP_KEEPALIVE_IDLE, TCP_KEEPALIVE_INTERVAL, TCP_KEEPALIVE_RETRIES};
use crate::error::StoreError;
use crate::ids::{AgentId, ChatId};
use crate::notify::{ChangeEvent, Hub};

/// The NOTIFY channel all stores of one database share.
pub(crate) const CHANNEL: &str = "ctxsync_changes";
/// Shown in `pg_stat_activity`, so operators (and tests) can find listener sessions.
pub(crate) const APPLICATION_NAME: &str = "ctxsync-listener";
const PAYLOAD_VERSION: &str = "1";

/// Encodes an event for NOTIFY: ids and versions only, tagged with the sending store so
/// it can skip its own events (it already delivered them in-process).
pub(crate) fn encode(origin: u64, event: &ChangeEvent) -> Option<String> {
    let (kind, id, extra) = match event {
        ChangeEvent::AgentContextChanged {
            agent_id,
            snapshot_version,
        } => (
            "a",
            agent_id.to_string(),
            snapshot_version.map(|v| v.to_string()).unwrap_or_default(),
        ),
        ChangeEvent::ChatChanged { chat_id, agent_id } => (
            "c",
            chat_id.to_string(),
            agent_id.map(|a| a.to_string()).unwrap_or_default(),
        ),
        ChangeEvent::Resync => return None,
    };
    Some(format!(
        "{PAYLOAD_VERSION};{origin:016x};{kind};{id};{extra}"
    ))
}

/// Parses [`encode`]'s output; anything else (another version, a foreign sender) is
/// ignored rather than trusted.
pub(crate) fn decode(payload: &str) -> Option<(u64, ChangeEvent)> {
    let mut parts = payload.split(';');
    let (version, origin, kind, id, extra) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    if version != PAYLOAD_VERSION || parts.next().is_some() {
        return None;
    }
    let origin = u64::from_str_radix(origin, 16).ok()?;
    let event = match kind {
        "a" => ChangeEvent::AgentContextChanged {
            agent_id: id.parse::<AgentId>().ok()?,
            snapshot_version: match extra {
                "" => None,
                v => Some(v.parse().ok()?),
            },
        },
        "c" => ChangeEvent::ChatChanged {
            chat_id: id.parse::<ChatId>().ok()?,
            agent_id: match extra {
                "" => None,
                a => Some(a.parse().ok()?),
            },
        },
        _ => return None,
    };
    Some((origin, event))
}

/// Aborts a task when dropped.
#[derive(Debug)]
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The running listener; dropping it closes the LISTEN connection.
#[derive(Debug)]
pub(crate) struct Listener {
    _task: AbortOnDrop,
}

/// A live LISTEN session: the client (dropping it closes the connection) and the task
/// that drives the connection and dispatches its notifications.
struct Session {
    _client: Client,
    driver: AbortOnDrop,
}

/// Connects and LISTENs before returning, so no commit after `open` is missed.
pub(crate) async fn start(
    url: &str,
    hub: Arc<Hub>,
    origin: u64,
    options: &StoreOptions,
) -> Result<Listener, StoreError> {
    let mut config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| StoreError::InvalidInput(format!("invalid PostgreSQL URL: {e}")))?;
    // Dead peers are noticed by TCP keepalive even when no notification is due.
    config
        .application_name(APPLICATION_NAME)
        .keepalives(true)
        .keepalives_idle(TCP_KEEPALIVE_IDLE)
        .keepalives_interval(TCP_KEEPALIVE_INTERVAL)
        .keepalives_retries(TCP_KEEPALIVE_RETRIES)
        .connect_timeout(options.connection_timeout);
    let attempt = Attempt {
        config,
        hub,
        origin,
        timeout: options.connection_timeout,
    };
    let session = attempt
        .listen()
        .await
        .map_err(|e| StoreError::Unavailable(format!("LISTEN connection failed: {e}")))?;
    let task = tokio::spawn(run(
        attempt,
        session,
        options.listener_initial_backoff,
        options.listener_max_backoff,
    ));
    Ok(Listener {
        _task: AbortOnDrop(task),
    })
}

/// Everything needed to open a LISTEN session.
struct Attempt {
    config: tokio_postgres::Config,
    hub: Arc<Hub>,
    origin: u64,
    /// Bound on connecting, the startup handshake and `LISTEN` together:
    /// `connect_timeout` covers only the TCP connect, and a peer that accepts but never
    /// answers would otherwise stall the reconnect loop for good.
    timeout: Duration,
}

impl Attempt {
    async fn listen(&self) -> Result<Session, String> {
        match tokio::time::timeout(self.timeout, listen(&self.config, &self.hub, self.origin)).await
        {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(_) => Err(format!("no answer within {:?}", self.timeout)),
        }
    }
}

async fn listen(
    config: &tokio_postgres::Config,
    hub: &Arc<Hub>,
    origin: u64,
) -> Result<Session, tokio_postgres::Error> {
    let (client, mut connection) = config.connect(NoTls).await?;
    let hub = Arc::clone(hub);
    let driver = AbortOnDrop(tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) if n.channel() == CHANNEL => {
                    match decode(n.payload()) {
                        Some((from, _)) if from == origin => {}
                        Some((_, event)) => hub.publish(&event),
                        None => tracing::debug!(payload = n.payload(), "ignored notification"),
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(error)) => {
                    tracing::warn!(%error, "LISTEN connection failed");
                    return;
                }
                None => return,
            }
        }
    }));
    client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
    Ok(Session {
        _client: client,
        driver,
    })
}

async fn run(
    attempt: Attempt,
    mut session: Session,
    initial_backoff: Duration,
    max_backoff: Duration,
) {
    loop {
        // The driver ends only when the connection is gone.
        let _ = (&mut session.driver.0).await;
        tracing::warn!("LISTEN connection lost; reconnecting");
        attempt.hub.resync_all();
        let mut delay = initial_backoff;
        session = loop {
            tokio::time::sleep(delay).await;
            match attempt.listen().await {
                Ok(session) => break session,
                Err(error) => {
                    tracing::warn!(%error, ?delay, "LISTEN reconnect failed");
                    delay = (delay * 2).min(max_backoff);
                }
            }
        };
        tracing::info!("LISTEN connection restored");
        // Whatever was committed while we were away was not delivered.
        attempt.hub.resync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_and_garbage_is_ignored() {
        let agent_id = AgentId::new_random();
        let chat_id = ChatId::new_random();
        let events = [
            ChangeEvent::AgentContextChanged {
                agent_id,
                snapshot_version: Some(42),
            },
            ChangeEvent::AgentContextChanged {
                agent_id,
                snapshot_version: None,
            },
            ChangeEvent::ChatChanged {
                chat_id,
                agent_id: Some(agent_id),
            },
            ChangeEvent::ChatChanged {
                chat_id,
                agent_id: None,
            },
        ];
        for event in events {
            let payload = encode(7, &event).expect("encodable");
            assert_eq!(decode(&payload), Some((7, event)), "{payload}");
        }
        assert_eq!(encode(7, &ChangeEvent::Resync), None);
        for garbage in [
            "",
            "1;zz;a;x;",
            "2;0000000000000007;a;00000000-0000-0000-0000-000000000000;",
            "1;0000000000000007;q;00000000-0000-0000-0000-000000000000;",
            "1;0000000000000007;a;not-a-uuid;",
            "1;0000000000000007;a;00000000-0000-0000-0000-000000000000;-1",
            "1;0000000000000007;a;00000000-0000-0000-0000-000000000000;;extra",
        ] {
            assert_eq!(decode(garbage), None, "{garbage:?}");
        }
    }
}
