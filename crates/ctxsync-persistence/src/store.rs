//! [`Store`]: the async face of persistence. Each operation takes a pooled connection
//! on tokio's blocking pool, runs one transaction, and after commit delivers change
//! events to in-process subscribers (PostgreSQL also NOTIFYs other processes).
//!
//! This module holds what every operation shares: opening, the pool hop and delivery.
//! The operations live with their concern (`agents`, `push`, `chats`, `turns`,
//! `page_sessions`, `gate_attempts`, `tool_calls`, `audit`), each module an
//! `impl Store` over its own private transaction functions.

use std::sync::Arc;

use crate::db::{Backend, DatabaseConfig, Pool, PooledConn, StoreOptions};
use crate::deployment_secrets::DigestKey;
use crate::error::StoreError;
use crate::ids::{AgentId, ChatId};
use crate::notify::{AgentSubscription, ChangeEvent, ChatCallSubscription, ChatSubscription, Hub};
#[cfg(feature = "postgres")]
use crate::pg_listener;

/// The persistence store. Cheap to clone; clones share one pool and one listener.
#[derive(Clone, Debug)]
pub struct Store {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    pool: Arc<Pool>,
    hub: Arc<Hub>,
    backend: Backend,
    /// Tags this store's NOTIFYs so its own listener skips what it delivered already.
    origin: u64,
    /// [`StoreOptions::operation_timeout`].
    operation_timeout: std::time::Duration,
    /// The deployment's key for the arguments' digest, read once at open.
    digest_key: DigestKey,
    #[cfg(feature = "postgres")]
    _listener: Option<pg_listener::Listener>,
}

impl Store {
    /// Opens the database with default options, applying pending migrations.
    pub async fn open(config: DatabaseConfig) -> Result<Self, StoreError> {
        Self::open_with(config, StoreOptions::default()).await
    }

    /// Opens the database, applies pending migrations and (PostgreSQL) starts
    /// listening for other processes' changes before returning.
    pub async fn open_with(
        config: DatabaseConfig,
        options: StoreOptions,
    ) -> Result<Self, StoreError> {
        // Before anything connects: a bad sslmode or unreadable root certificate is a
        // configuration error, not an unreachable database. (A backend this build lacks
        // is refused by `Pool::open`, before it connects.)
        #[cfg(feature = "postgres")]
        let listen = match &config {
            DatabaseConfig::Postgres { url } => Some(pg_listener::Connector::new(url, &options)?),
            DatabaseConfig::Sqlite { .. } => None,
        };
        let (pool, digest_key) = {
            let (config, options) = (config.clone(), options.clone());
            tokio::task::spawn_blocking(move || {
                let pool = Pool::open(&config, &options)?;
                // After the migrations that create its table.
                let key = crate::deployment_secrets::load_digest_key(&mut pool.get()?)?;
                Ok::<_, StoreError>((pool, key))
            })
            .await
            .map_err(|e| StoreError::Unavailable(format!("opening the store panicked: {e}")))??
        };
        let hub = Arc::new(Hub::default());
        let mut origin = [0u8; 8];
        getrandom::fill(&mut origin)
            .map_err(|e| StoreError::Unavailable(format!("no randomness: {e}")))?;
        let origin = u64::from_le_bytes(origin);
        #[cfg(feature = "postgres")]
        let listener = match listen {
            Some(connector) => {
                Some(pg_listener::start(connector, Arc::clone(&hub), origin, &options).await?)
            }
            None => None,
        };
        Ok(Self {
            inner: Arc::new(Inner {
                pool: Arc::new(pool),
                hub,
                backend: config.backend(),
                origin,
                operation_timeout: options.operation_timeout,
                digest_key,
                #[cfg(feature = "postgres")]
                _listener: listener,
            }),
        })
    }

    /// The backend this store was opened on.
    pub fn backend(&self) -> Backend {
        self.inner.backend
    }

    /// The key of the arguments' digest (`audit`).
    pub(crate) fn digest_key(&self) -> &DigestKey {
        &self.inner.digest_key
    }

    /// Runs `f` with a pooled connection on the blocking pool, answering
    /// [`StoreError::Unavailable`] once [`StoreOptions::operation_timeout`] has passed
    /// (the blocking thread is left to finish on its own).
    pub(crate) async fn with_conn<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut PooledConn, u64) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let pool = Arc::clone(&self.inner.pool);
        let origin = self.inner.origin;
        let task = tokio::task::spawn_blocking(move || f(&mut pool.get()?, origin));
        match tokio::time::timeout(self.inner.operation_timeout, task).await {
            Ok(joined) => {
                joined.map_err(|e| StoreError::Unavailable(format!("store task failed: {e}")))?
            }
            Err(_) => Err(StoreError::Unavailable(format!(
                "the database did not answer within {:?}",
                self.inner.operation_timeout
            ))),
        }
    }

    /// Tells this process's subscribers about a committed change.
    pub(crate) fn deliver(&self, event: &ChangeEvent) {
        self.inner.hub.publish(event);
    }

    /// [`Self::deliver`] for each of `events`, in order.
    pub(crate) fn deliver_all(&self, events: &[ChangeEvent]) {
        for event in events {
            self.deliver(event);
        }
    }

    // ---- notifications ---------------------------------------------------------------

    /// Events about `agent`, from now on. Subscribe before reading, then re-read on
    /// every event, so no change falls between the read and the subscription.
    pub fn subscribe_agent(&self, agent: AgentId) -> AgentSubscription {
        AgentSubscription::new(&self.inner.hub, agent)
    }

    /// Events about `chat` and its bound agent, following rebinding.
    pub async fn subscribe_chat(&self, chat: ChatId) -> Result<ChatSubscription, StoreError> {
        let mut subscription = ChatSubscription::new(&self.inner.hub, chat);
        let record = self
            .get_chat(chat)
            .await?
            .ok_or(StoreError::ChatNotFound(chat))?;
        subscription.follow_agent(record.agent_id);
        Ok(subscription)
    }

    /// Events about `chat`'s tool calls, from now on ([`ChangeEvent::ToolCallChanged`],
    /// and [`ChangeEvent::Resync`] when some may have been lost): subscribe, then read.
    pub fn subscribe_chat_calls(&self, chat: ChatId) -> ChatCallSubscription {
        ChatCallSubscription::chat(&self.inner.hub, chat)
    }

    /// Events about every tool call (the call hub's feed).
    pub fn subscribe_all_calls(&self) -> ChatCallSubscription {
        ChatCallSubscription::all(&self.inner.hub)
    }
}
