//! The `ctxsync` binary's library (layer 8): each command of the command line, the
//! control-plane server (gRPC agent API + HTTP chat API and web page) and the demo.
//!
//! Owns: composition. Every rule — validation, storage, projection, the gate, the
//! panel — lives in the layers below; this crate wires them to processes, sockets and a
//! terminal. Must never: re-decide what a lower layer decides, print a secret, or let a
//! failure end as a panic or backtrace instead of one clear line.

#![deny(missing_docs)]

pub mod agent;
pub mod agents;
pub mod api_client;
pub mod chats;
pub mod context;
pub mod demo;
pub mod discover;
pub mod http;
pub mod limits;
pub mod listen;
pub mod logging;
pub mod paths;
pub mod probes;
pub mod public_url;
pub mod secret;
pub mod server;
pub mod terminal;
pub mod tls;
pub mod wrong_port;
