//! What one caller can cost the server: connections, streams and time, each a
//! `ctxsync server` flag with a documented default (see RELIABILITY.md, "Hostile
//! traffic").

use std::time::Duration;

use anyhow::{Result, bail};
use clap::Args;

/// The bounds both listeners apply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Open agent API connections; past it new ones wait in the kernel's backlog.
    pub grpc_max_connections: usize,
    /// Concurrent HTTP/2 streams (calls) on one agent connection.
    pub grpc_max_streams_per_connection: u32,
    /// Bound on one agent API call, database work included.
    pub grpc_request_timeout: Duration,
    /// HTTP/2 ping interval on agent connections; a peer that does not answer within the
    /// same time is disconnected.
    pub grpc_keepalive: Duration,
    /// Open chat API connections.
    pub http_max_connections: usize,
    /// Time a client has to send a request's headers.
    pub http_header_read_timeout: Duration,
    /// Bound on one chat API request until its response headers (an event stream's
    /// headers come at once, so streams are not cut by it).
    pub http_request_timeout: Duration,
    /// Open context event streams on this server.
    pub max_event_streams: usize,
    /// Open context event streams of one chat.
    pub max_event_streams_per_chat: usize,
    /// After SIGTERM or SIGINT: how long in-flight requests may still finish.
    pub shutdown_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            grpc_max_connections: 20_000,
            grpc_max_streams_per_connection: 16,
            grpc_request_timeout: Duration::from_secs(30),
            grpc_keepalive: Duration::from_secs(30),
            http_max_connections: 4_096,
            http_header_read_timeout: Duration::from_secs(10),
            http_request_timeout: Duration::from_secs(60),
            max_event_streams: 1_000,
            max_event_streams_per_chat: 8,
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

/// The longest a tool-call request waits for the call's end (`wait_ms`); the request
/// timeout must leave it a 5 s margin too, so a waiting call is answered 202,
/// never cut.
pub const MAX_TOOL_CALL_WAIT: Duration = Duration::from_secs(55);

impl Limits {
    /// Refuses a request timeout that would cut a first turn still inside its wait
    /// (`first_turn_wait` = discovery budget + snapshot grace), or a tool call inside its
    /// longest wait ([`MAX_TOOL_CALL_WAIT`]), before a margin.
    pub fn check(&self, first_turn_wait: Duration) -> Result<()> {
        let call_needs = MAX_TOOL_CALL_WAIT + FIRST_TURN_MARGIN;
        if self.http_request_timeout < call_needs {
            bail!(
                "--http-request-timeout-ms {} is shorter than a tool call may wait ({} ms, plus {} ms margin); raise it to at least {}",
                self.http_request_timeout.as_millis(),
                MAX_TOOL_CALL_WAIT.as_millis(),
                FIRST_TURN_MARGIN.as_millis(),
                call_needs.as_millis()
            );
        }
        let needed = first_turn_wait + FIRST_TURN_MARGIN;
        if self.http_request_timeout < needed {
            bail!(
                "--http-request-timeout-ms {} is shorter than a first turn may wait ({} ms of discovery budget and snapshot grace, plus {} ms margin); raise it to at least {}",
                self.http_request_timeout.as_millis(),
                first_turn_wait.as_millis(),
                FIRST_TURN_MARGIN.as_millis(),
                needed.as_millis()
            );
        }
        Ok(())
    }
}

/// What a first turn needs beyond its waits: reading and projecting the state.
const FIRST_TURN_MARGIN: Duration = Duration::from_secs(5);

/// [`Limits`] as `ctxsync server` flags.
#[derive(Debug, Args)]
pub struct LimitArgs {
    /// Most open agent API connections (enough for 10,000 agents with reconnects).
    #[arg(long, default_value_t = Limits::default().grpc_max_connections, value_name = "N", value_parser = positive_usize)]
    pub grpc_max_connections: usize,
    /// Most concurrent calls on one agent API connection.
    #[arg(long, default_value_t = Limits::default().grpc_max_streams_per_connection, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub grpc_max_streams_per_connection: u32,
    /// Bound on one agent API call.
    #[arg(long, default_value_t = ms(Limits::default().grpc_request_timeout), value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub grpc_request_timeout_ms: u64,
    /// HTTP/2 keepalive ping interval (and answer timeout) on agent connections.
    #[arg(long, default_value_t = ms(Limits::default().grpc_keepalive), value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub grpc_keepalive_ms: u64,
    /// Most open chat API connections.
    #[arg(long, default_value_t = Limits::default().http_max_connections, value_name = "N", value_parser = positive_usize)]
    pub http_max_connections: usize,
    /// Time a chat API client has to send its request headers.
    #[arg(long, default_value_t = ms(Limits::default().http_header_read_timeout), value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub http_header_read_timeout_ms: u64,
    /// Bound on a chat API request until its response starts; must exceed the first
    /// turn's wait (discovery budget + snapshot grace) and a tool call's longest wait
    /// (55 s) by 5 s. Event streams are not cut.
    #[arg(long, default_value_t = ms(Limits::default().http_request_timeout), value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
    pub http_request_timeout_ms: u64,
    /// Most open context event streams on this server.
    #[arg(long, default_value_t = Limits::default().max_event_streams, value_name = "N", value_parser = positive_usize)]
    pub max_event_streams: usize,
    /// Most open context event streams of one chat.
    #[arg(long, default_value_t = Limits::default().max_event_streams_per_chat, value_name = "N", value_parser = positive_usize)]
    pub max_event_streams_per_chat: usize,
    /// After SIGTERM or SIGINT, how long in-flight requests may finish; a second signal
    /// exits at once.
    #[arg(long, default_value_t = ms(Limits::default().shutdown_grace), value_name = "MS")]
    pub shutdown_grace_ms: u64,
}

impl From<LimitArgs> for Limits {
    fn from(args: LimitArgs) -> Self {
        Self {
            grpc_max_connections: args.grpc_max_connections,
            grpc_max_streams_per_connection: args.grpc_max_streams_per_connection,
            grpc_request_timeout: Duration::from_millis(args.grpc_request_timeout_ms),
            grpc_keepalive: Duration::from_millis(args.grpc_keepalive_ms),
            http_max_connections: args.http_max_connections,
            http_header_read_timeout: Duration::from_millis(args.http_header_read_timeout_ms),
            http_request_timeout: Duration::from_millis(args.http_request_timeout_ms),
            max_event_streams: args.max_event_streams,
            max_event_streams_per_chat: args.max_event_streams_per_chat,
            shutdown_grace: Duration::from_millis(args.shutdown_grace_ms),
        }
    }
}

fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn positive_usize(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_request_timeout_leaves_the_default_first_turn_room() {
        let gate = ctxsync_first_turn_gate::GateConfig::default();
        Limits::default()
            .check(gate.discovery_budget + gate.snapshot_grace)
            .unwrap();
    }

    #[test]
    fn a_request_timeout_that_would_cut_a_waiting_turn_is_refused_naming_the_need() {
        let limits = Limits {
            http_request_timeout: Duration::from_secs(61),
            ..Limits::default()
        };
        let error = limits.check(Duration::from_secs(58)).unwrap_err();
        assert!(error.to_string().contains("at least 63000"), "{error}");
    }

    #[test]
    fn a_request_timeout_that_would_cut_a_waiting_tool_call_is_refused() {
        let limits = Limits {
            http_request_timeout: Duration::from_secs(59),
            ..Limits::default()
        };
        let error = limits.check(Duration::from_secs(1)).unwrap_err();
        assert!(error.to_string().contains("tool call"), "{error}");
        assert!(error.to_string().contains("at least 60000"), "{error}");
    }
}
