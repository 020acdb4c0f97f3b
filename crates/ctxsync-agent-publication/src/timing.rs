//! Every delay and bound the publisher uses ([`Timing`]) and their defaults. Below both the
//! publisher and its connection, which each read them.

use std::time::Duration;

use crate::backoff::BackoffPolicy;
use crate::watcher::DEFAULT_DEBOUNCE;

/// Bound on establishing one connection to the server (TCP and, for https, the TLS
/// handshake).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on one RPC; a slower server is treated as gone and reconnected to.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// HTTP/2 ping interval, so a silently dead connection is noticed while idle.
pub const DEFAULT_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// How long a ping may go unanswered before the connection counts as dead.
pub const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often context files are re-read while some of them cannot be watched (the platform
/// file watcher cannot run, or a directory is over the watch budget or the system's limit).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(30);
/// Every delay and bound the publisher uses; tests shrink them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timing {
    /// Quiet period after a context-file event before resolving.
    pub debounce: Duration,
    /// Spacing of reconnects after a transient failure.
    pub backoff: BackoffPolicy,
    /// Bound on establishing one connection ([`DEFAULT_CONNECT_TIMEOUT`]).
    pub connect_timeout: Duration,
    /// Bound on one RPC ([`DEFAULT_REQUEST_TIMEOUT`]).
    pub request_timeout: Duration,
    /// HTTP/2 ping interval, also while idle ([`DEFAULT_KEEPALIVE_INTERVAL`]).
    pub keepalive_interval: Duration,
    /// How long a ping may go unanswered ([`DEFAULT_KEEPALIVE_TIMEOUT`]).
    pub keepalive_timeout: Duration,
    /// How often context files that cannot be watched are re-read
    /// ([`DEFAULT_POLL_INTERVAL`]).
    pub poll_interval: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            debounce: DEFAULT_DEBOUNCE,
            backoff: BackoffPolicy::default(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            keepalive_interval: DEFAULT_KEEPALIVE_INTERVAL,
            keepalive_timeout: DEFAULT_KEEPALIVE_TIMEOUT,
            poll_interval: DEFAULT_POLL_INTERVAL,
        }
    }
}
