//! The store's operations, each run inside one transaction opened by the caller
//! ([`crate::db::PooledConn::write`] / [`crate::db::PooledConn::read`]). Written once;
//! `on_backend!` type-checks every query against both backends.
//!
//! One file per concern: [`agents`] (agent rows, tokens, UpdateStartup), [`push`]
//! (PushContextState, SPEC §5.4), [`chats`] (chats and their pins), [`reads`]
//! (consistent reads) and [`shared`] (what several of them use). The store calls them
//! through the re-exports below.

mod agents;
mod chats;
mod push;
mod reads;
mod shared;

pub(crate) use agents::{
    agent_phase_groups, delete_agent, get_agent, insert_agent, list_agents, replace_token_hash,
    token_hash, update_startup,
};
pub(crate) use chats::{bind_chat, clear_chat_dirty, create_chat, get_chat, refresh_chat};
pub(crate) use push::{prepare_push, push};
pub(crate) use reads::{read_agent_context, read_chat_context};
pub(crate) use shared::agent_event;
