//! PostgreSQL LISTEN/NOTIFY: how one replica's commit wakes another's waiters. Writers
//! `pg_notify` inside their transaction (delivered at commit); one dedicated
//! `tokio-postgres` connection per store LISTENs, event-driven with no polling loop,
//! and reconnects with backoff when it drops, telling subscribers to resync.

use std::sync::Arc;
use std::time::Duration;

use postgres_openssl::MakeTlsConnector;
use tokio::task::JoinHandle;
use tokio_postgres::config::SslMode as WireMode;
use tokio_postgres::{AsyncMessage, Client};

use crate::db::{StoreOptions, TCP_KEEPALIVE_IDLE, TCP_KEEPALIVE_INTERVAL, TCP_KEEPALIVE_RETRIES};
use crate::error::StoreError;
use crate::ids::{AgentId, ChatId};
use crate::notify::{ChangeEvent, Hub};
use crate::pg_tls;

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
        ChangeEvent::ToolCallChanged {
            call_id,
            chat_id,
            agent_id,
            change,
        } => {
            let agent = agent_id.map(|a| a.to_string()).unwrap_or_default();
            return Some(format!(
                "{PAYLOAD_VERSION};{origin:016x};t;{call_id};{chat_id},{agent},{}",
                change.code()
            ));
        }
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
        "t" => {
            let mut extra = extra.split(',');
            let (chat, agent, change) = (extra.next()?, extra.next()?, extra.next()?);
            if extra.next().is_some() {
                return None;
            }
            ChangeEvent::ToolCallChanged {
                call_id: id.parse().ok()?,
                chat_id: chat.parse().ok()?,
                agent_id: match agent {
                    "" => None,
                    a => Some(a.parse().ok()?),
                },
                change: crate::notify::CallChange::from_code(change)?,
            }
        }
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

/// How to open the LISTEN connection: everything checked and loaded (TLS roots
/// included) before anything connects.
pub(crate) struct Connector {
    config: tokio_postgres::Config,
    tls: MakeTlsConnector,
    /// tokio-postgres TLS modes to try in turn (see [`pg_tls`]).
    attempts: &'static [WireMode],
    /// Bound on connecting, the startup handshake and `LISTEN` together:
    /// `connect_timeout` covers only the TCP connect, and a peer that accepts but never
    /// answers would otherwise stall the reconnect loop for good.
    timeout: Duration,
}

impl Connector {
    /// Reads `url` (TLS as libpq reads it) without connecting.
    pub(crate) fn new(url: &str, options: &StoreOptions) -> Result<Self, StoreError> {
        let tls = pg_tls::listen_tls(url)?;
        let mut config: tokio_postgres::Config = tls
            .url
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
        Ok(Self {
            config,
            tls: tls.connector,
            attempts: tls.attempts,
            timeout: options.connection_timeout,
        })
    }

    /// One LISTEN session, trying each TLS mode in turn; the error names every failure.
    async fn listen(&self, hub: &Arc<Hub>, origin: u64) -> Result<Session, String> {
        let attempts = async {
            let mut failures = Vec::new();
            for &mode in self.attempts {
                let mut config = self.config.clone();
                config.ssl_mode(mode);
                match listen(&config, self.tls.clone(), hub, origin).await {
                    Ok(session) => return Ok(session),
                    Err(error) if self.attempts.len() == 1 => return Err(error_chain(&error)),
                    Err(error) => {
                        let how = if mode == WireMode::Disable {
                            "without TLS"
                        } else {
                            "with TLS"
                        };
                        failures.push(format!("{how}: {}", error_chain(&error)));
                    }
                }
            }
            Err(failures.join("; "))
        };
        match tokio::time::timeout(self.timeout, attempts).await {
            Ok(result) => result,
            Err(_) => Err(format!("no answer within {:?}", self.timeout)),
        }
    }
}

/// `error` with its causes: tokio-postgres's own message is only the error's kind
/// ("error performing TLS handshake"), the reason is in its source. A cause already
/// spelled out by the one before it (OpenSSL's often is) is not repeated.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Connects and LISTENs before returning, so no commit after `open` is missed.
pub(crate) async fn start(
    connector: Connector,
    hub: Arc<Hub>,
    origin: u64,
    options: &StoreOptions,
) -> Result<Listener, StoreError> {
    let attempt = Attempt {
        connector,
        hub,
        origin,
    };
    let session = attempt.listen().await.map_err(listen_failed)?;
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

fn listen_failed(reason: String) -> StoreError {
    StoreError::Unavailable(format!("LISTEN connection failed: {reason}"))
}

/// Opens one LISTEN session and closes it again (test support: the LISTEN path's TLS
/// on its own, where opening a store would fail on the pool first).
#[cfg(feature = "test-support")]
pub(crate) async fn probe(url: &str, options: &StoreOptions) -> Result<(), StoreError> {
    let connector = Connector::new(url, options)?;
    connector
        .listen(&Arc::new(Hub::default()), 0)
        .await
        .map(drop)
        .map_err(listen_failed)
}

/// Everything needed to open a LISTEN session.
struct Attempt {
    connector: Connector,
    hub: Arc<Hub>,
    origin: u64,
}

impl Attempt {
    async fn listen(&self) -> Result<Session, String> {
        self.connector.listen(&self.hub, self.origin).await
    }
}

async fn listen(
    config: &tokio_postgres::Config,
    tls: MakeTlsConnector,
    hub: &Arc<Hub>,
    origin: u64,
) -> Result<Session, tokio_postgres::Error> {
    let (client, mut connection) = config.connect(tls).await?;
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
        let call_id = ctxsync_protocol::tool_call::ToolCallId::new_random();
        let mut events = vec![
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
        for (n, change) in crate::notify::CallChange::ALL.into_iter().enumerate() {
            events.push(ChangeEvent::ToolCallChanged {
                call_id,
                chat_id,
                agent_id: (n % 2 == 0).then_some(agent_id),
                change,
            });
        }
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
