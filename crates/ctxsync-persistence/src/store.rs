//! [`Store`]: the async face of persistence. Each operation takes a pooled connection
//! on tokio's blocking pool, runs one transaction, and after commit delivers change
//! events to in-process subscribers (PostgreSQL also NOTIFYs other processes).

use std::sync::Arc;

use chrono::Utc;
use ctxsync_protocol::{Push, Startup};

use crate::db::{Backend, DatabaseConfig, Pool, PooledConn, StoreOptions};
use crate::error::StoreError;
use crate::ids::{AgentId, ChatId};
use crate::model::*;
use crate::notify::{AgentSubscription, ChangeEvent, ChatSubscription, Hub};
use crate::ops;
#[cfg(feature = "postgres")]
use crate::pg_listener;
use crate::sql_types::DbTime;
use crate::token::{self, AgentToken};

/// Longest agent name.
pub const MAX_AGENT_NAME_BYTES: usize = 256;

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
        let pool = {
            let (config, options) = (config.clone(), options.clone());
            tokio::task::spawn_blocking(move || Pool::open(&config, &options))
                .await
                .map_err(|e| {
                    StoreError::Unavailable(format!("opening the store panicked: {e}"))
                })??
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
                #[cfg(feature = "postgres")]
                _listener: listener,
            }),
        })
    }

    /// The backend this store was opened on.
    pub fn backend(&self) -> Backend {
        self.inner.backend
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

    fn deliver(&self, event: &ChangeEvent) {
        self.inner.hub.publish(event);
    }

    // ---- agents ----------------------------------------------------------------------

    /// Creates an agent and issues its bearer token; only the token's hash is stored.
    pub async fn create_agent(&self, name: &str) -> Result<NewAgent, StoreError> {
        if name.is_empty() || name.len() > MAX_AGENT_NAME_BYTES {
            return Err(StoreError::InvalidInput(format!(
                "agent name must be 1..={MAX_AGENT_NAME_BYTES} bytes"
            )));
        }
        let id = AgentId::new_random();
        let token = AgentToken::issue(id)?;
        let hash = token::digest(token.expose());
        let name = name.to_owned();
        self.with_conn(move |conn, _| {
            conn.write(|tx| ops::insert_agent(tx, id, &name, &hash, DbTime(Utc::now())))
        })
        .await?;
        Ok(NewAgent { id, token })
    }

    /// The agent a bearer token belongs to. Malformed, unknown and wrong tokens all give
    /// [`StoreError::InvalidToken`]; the digest comparison is constant-time.
    pub async fn authenticate(&self, token: &str) -> Result<AgentId, StoreError> {
        let claimed = token::claimed_agent(token)?;
        let stored = self
            .with_conn(move |conn, _| conn.single_statement(|tx| ops::token_hash(tx, claimed)))
            .await?;
        match stored {
            Some(stored) if token::verify(token, &stored) => Ok(claimed),
            _ => Err(StoreError::InvalidToken),
        }
    }

    /// Issues the agent a new bearer token in place of its current one: from the
    /// commit on, the old token is refused (every authentication reads the stored
    /// hash). [`StoreError::AgentNotFound`] for an unknown agent. After
    /// [`StoreError::Unavailable`] the rotation may still have committed: rotate again.
    pub async fn rotate_agent_token(&self, id: AgentId) -> Result<NewAgent, StoreError> {
        let token = AgentToken::issue(id)?;
        let hash = token::digest(token.expose());
        let replaced = self
            .with_conn(move |conn, _| {
                conn.write(|tx| ops::replace_token_hash(tx, id, &hash, DbTime(Utc::now())))
            })
            .await?;
        if !replaced {
            return Err(StoreError::AgentNotFound(id));
        }
        Ok(NewAgent { id, token })
    }

    /// Deletes the agent with its snapshot and resources. Its chats stay, bound to the
    /// missing id, so readers report the agent as unknown. [`StoreError::AgentNotFound`]
    /// for an unknown agent.
    pub async fn delete_agent(&self, id: AgentId) -> Result<(), StoreError> {
        let deleted = self
            .with_conn(move |conn, origin| conn.write(|tx| ops::delete_agent(tx, id, origin)))
            .await?;
        if !deleted {
            return Err(StoreError::AgentNotFound(id));
        }
        self.deliver(&ops::agent_event(id, None));
        Ok(())
    }

    /// All agents, oldest first.
    pub async fn list_agents(&self) -> Result<Vec<AgentRecord>, StoreError> {
        self.with_conn(|conn, _| conn.read(ops::list_agents)).await
    }

    /// Every agent counted by run freshness and snapshot phase, in one aggregate query
    /// that reads no resource (for `/metrics`: never a read of every agent's context).
    pub async fn agent_phase_groups(&self) -> Result<Vec<AgentPhaseGroup>, StoreError> {
        self.with_conn(|conn, _| conn.read(ops::agent_phase_groups))
            .await
    }

    /// The agent row; `None` for an unknown agent.
    pub async fn get_agent(&self, id: AgentId) -> Result<Option<AgentRecord>, StoreError> {
        self.with_conn(move |conn, _| conn.read(|tx| ops::get_agent(tx, id)))
            .await
    }

    // ---- agent API writes ------------------------------------------------------------

    /// SPEC §5.3. Refuses a run id over 64 bytes ([`StoreError::InvalidInput`]) and a
    /// retired one ([`StoreError::SupersededRun`]), writing nothing; otherwise
    /// overwrites the row's run id (empty included) and notifies when it changed.
    pub async fn update_startup(
        &self,
        agent: AgentId,
        startup: Startup,
    ) -> Result<StartupOutcome, StoreError> {
        let outcome = self
            .with_conn(move |conn, origin| {
                conn.write(|tx| {
                    ops::update_startup(tx, agent, &startup, DbTime(Utc::now()), origin)
                })
            })
            .await?;
        if outcome.run_id_changed() {
            self.deliver(&ops::agent_event(agent, None));
        }
        Ok(outcome)
    }

    /// SPEC §5.4, in one transaction: the run gate, the version gate, the snapshot and
    /// resource upserts, chat dirty-marking; commit; then notify when anything changed.
    ///
    /// Takes a [`ctxsync_protocol::Snapshot`] (a full push) or a [`Push`] as decoded from the wire, which may
    /// be a delta: applied under the same rules, or refused with
    /// [`PushOutcome::DeltaBaseMissing`] when its base is not stored.
    pub async fn push_context_state(
        &self,
        agent: AgentId,
        push: impl Into<Push>,
    ) -> Result<PushOutcome, StoreError> {
        let push = push.into();
        let version = push.snapshot.version;
        let outcome = self
            .with_conn(move |conn, origin| {
                let prepared = ops::prepare_push(push)?;
                conn.write(|tx| ops::push(tx, agent, &prepared, DbTime(Utc::now()), origin))
            })
            .await?;
        if let PushOutcome::Accepted(changes) = &outcome
            && changes.is_change()
        {
            self.deliver(&ops::agent_event(agent, Some(version)));
        }
        Ok(outcome)
    }

    // ---- reads -----------------------------------------------------------------------

    /// The agent row, its snapshot and resources from one snapshot-consistent read
    /// transaction; `None` for an unknown agent.
    pub async fn read_agent_context(
        &self,
        agent: AgentId,
    ) -> Result<Option<AgentContext>, StoreError> {
        self.with_conn(move |conn, _| conn.read(|tx| ops::read_agent_context(tx, agent)))
            .await
    }

    // ---- chats -----------------------------------------------------------------------

    /// Creates a chat, bound to `agent` (which must exist) or unbound, pinning the
    /// agent's current instruction files and skills if it has a snapshot.
    pub async fn create_chat(&self, agent: Option<AgentId>) -> Result<ChatRecord, StoreError> {
        let id = ChatId::new_random();
        let chat = self
            .with_conn(move |conn, origin| {
                conn.write(|tx| ops::create_chat(tx, id, agent, DbTime(Utc::now()), origin))
            })
            .await?;
        self.deliver(&chat_event(&chat));
        Ok(chat)
    }

    /// The chat row, without its pins; `None` for an unknown chat.
    pub async fn get_chat(&self, chat: ChatId) -> Result<Option<ChatRecord>, StoreError> {
        self.with_conn(move |conn, _| conn.read(|tx| ops::get_chat(tx, chat)))
            .await
    }

    /// Binds the chat to another agent (or none) and pins that agent's current snapshot.
    pub async fn bind_chat(
        &self,
        chat: ChatId,
        agent: Option<AgentId>,
    ) -> Result<ChatRecord, StoreError> {
        let record = self
            .with_conn(move |conn, origin| {
                conn.write(|tx| ops::bind_chat(tx, chat, agent, DbTime(Utc::now()), origin))
            })
            .await?;
        self.deliver(&chat_event(&record));
        Ok(record)
    }

    /// Re-pins the bound agent's current instruction files and skills; clears dirty.
    pub async fn refresh_chat(&self, chat: ChatId) -> Result<ChatRecord, StoreError> {
        let record = self
            .with_conn(move |conn, origin| {
                conn.write(|tx| ops::refresh_chat(tx, chat, DbTime(Utc::now()), origin))
            })
            .await?;
        self.deliver(&chat_event(&record));
        Ok(record)
    }

    /// Clears the dirty flag without re-pinning.
    pub async fn clear_chat_dirty(&self, chat: ChatId) -> Result<ChatRecord, StoreError> {
        let record = self
            .with_conn(move |conn, origin| {
                conn.write(|tx| ops::clear_chat_dirty(tx, chat, DbTime(Utc::now()), origin))
            })
            .await?;
        self.deliver(&chat_event(&record));
        Ok(record)
    }

    /// The chat row and its pinned resources, read together; `None` for an unknown chat.
    pub async fn read_chat_context(&self, chat: ChatId) -> Result<Option<ChatContext>, StoreError> {
        self.with_conn(move |conn, _| conn.read(|tx| ops::read_chat_context(tx, chat)))
            .await
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
}

fn chat_event(chat: &ChatRecord) -> ChangeEvent {
    ChangeEvent::ChatChanged {
        chat_id: chat.id,
        agent_id: chat.agent_id,
    }
}
