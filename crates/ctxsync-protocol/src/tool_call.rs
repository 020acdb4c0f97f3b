//! Tool calls, the first kind of request the server routes to an agent: the channel's
//! messages as domain types (`ToolCalls` in the proto), their bounds, a call's id
//! ([`ToolCallId`]) and its arguments in canonical form ([`CallArguments`]).
//!
//! The server sends [`ServerCall`]s, the agent [`AgentCall`]s; both sides convert here,
//! so neither touches the prost structs, and every bound is checked on the way in. The
//! arguments travel as the one canonical text the HTTP route made: stored as it is, put
//! on the wire as it is, and parsed once, by the agent ([`CallArguments::parse`]).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use ctxsync_mcp_model::{CallEnd, CallError, CallProgress, CallReason, CallStatus};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::error::{Problem, WireError, bounded, required};
use crate::limits::{MAX_ERROR_BYTES, MAX_RUN_ID_BYTES};
use crate::run_id::RunId;
use crate::sign_in::{
    self, BeginSignIn, ExchangeSignIn, SignInOutcome, SignInRequestId, StoredSignIn,
};
use crate::v1;

/// Largest canonical arguments of one call.
pub const MAX_CALL_ARGUMENTS_BYTES: usize = 1024 * 1024;
/// Deepest nesting of a call's arguments (the object itself is level 1).
pub const MAX_CALL_ARGUMENTS_DEPTH: usize = 64;
/// Longest call id the server assigns (a UUID is 36).
pub const MAX_CALL_ID_BYTES: usize = 64;
/// Longest server or tool name on the channel.
pub const MAX_CALL_NAME_BYTES: usize = 1024;
/// Longest result a call may carry on the wire: the agent's cap is at most this, and
/// a `result_json` above it is refused.
pub const MAX_CALL_RESULT_BYTES: usize = 4 * 1024 * 1024;
/// Longest progress message.
pub const MAX_PROGRESS_MESSAGE_BYTES: usize = 1024;
/// Longest call deadline (the server's `--tool-call-max-ms` is at most this).
pub const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);
/// Largest message on the channel: a result at its cap plus its envelope.
pub const MAX_CALL_MESSAGE_BYTES: usize = MAX_CALL_RESULT_BYTES + 64 * 1024;
/// How often each side sends a heartbeat when nothing else moves.
pub const CALL_HEARTBEAT: Duration = Duration::from_secs(15);
/// How long either side waits without hearing anything before it treats the stream as
/// gone.
pub const CALL_SILENCE_LIMIT: Duration = Duration::from_secs(45);

/// The id the server assigns a tool call (a UUID): the agent runs one id at most once
/// per run. On the wire it is the UUID's hyphenated text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ToolCallId(Uuid);

impl ToolCallId {
    /// A fresh random (v4) id.
    pub fn new_random() -> Self {
        Self(Uuid::new_v4())
    }

    /// Wraps an existing UUID (any version).
    pub fn from_uuid(uuid: Uuid) -> Self {
        Self(uuid)
    }

    /// The underlying UUID.
    pub fn as_uuid(&self) -> Uuid {
        self.0
    }

    /// The id of wire field `field`: set, within [`MAX_CALL_ID_BYTES`] and a UUID.
    fn from_wire(field: &str, text: &str) -> Result<Self, WireError> {
        required(field, text, MAX_CALL_ID_BYTES)?;
        text.parse()
            .map_err(|_| WireError::new(field, Problem::Invalid("must be a UUID")))
    }
}

impl fmt::Display for ToolCallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

impl FromStr for ToolCallId {
    type Err = uuid::Error;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(text).map(Self)
    }
}

/// A call's arguments in canonical form: the text of a JSON object, keys sorted, no
/// whitespace, nested at most [`MAX_CALL_ARGUMENTS_DEPTH`] deep and at most
/// [`MAX_CALL_ARGUMENTS_BYTES`] long. The HTTP route makes it ([`Self::new`]), the store
/// keeps its text, the server sends that text as it is, and the agent parses it once
/// ([`Self::parse`]). `Debug` shows its size, never its text (arguments may carry a
/// user's secrets).
#[derive(Clone, PartialEq, Eq)]
pub struct CallArguments(String);

impl CallArguments {
    /// The canonical form of `arguments`. `Err` names the problem: not an object, nested
    /// deeper than [`MAX_CALL_ARGUMENTS_DEPTH`] or longer than [`MAX_CALL_ARGUMENTS_BYTES`].
    pub fn new(arguments: &Value) -> Result<Self, WireError> {
        if !arguments.is_object() {
            return Err(WireError::new(
                "arguments",
                Problem::Invalid("must be a JSON object"),
            ));
        }
        let depth = depth(arguments);
        if depth > MAX_CALL_ARGUMENTS_DEPTH {
            return Err(WireError::new(
                "arguments",
                Problem::OutOfRange {
                    value: depth as u64,
                    max: MAX_CALL_ARGUMENTS_DEPTH as u64,
                },
            ));
        }
        // serde_json's map is ordered by key (no `preserve_order` in this workspace), and
        // `to_string` writes no whitespace: that is the canonical form.
        let text = arguments.to_string();
        if text.len() > MAX_CALL_ARGUMENTS_BYTES {
            return Err(WireError::new(
                "arguments",
                Problem::TooLong {
                    bytes: text.len(),
                    max: MAX_CALL_ARGUMENTS_BYTES,
                },
            ));
        }
        Ok(Self(text))
    }

    /// Text [`Self::new`] made earlier, as the store kept it. Not read again here: the
    /// server only forwards it, and the agent refuses anything else when it parses it.
    pub fn from_canonical(text: String) -> Self {
        Self(text)
    }

    /// The canonical text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The canonical text, owned.
    pub fn into_string(self) -> String {
        self.0
    }

    /// The arguments as the JSON object an MCP call takes: the one parse of their text,
    /// on the agent. `Err` when the text is not a JSON object.
    pub fn parse(&self) -> Result<Map<String, Value>, WireError> {
        match serde_json::from_str::<Value>(&self.0) {
            Ok(Value::Object(map)) => Ok(map),
            _ => Err(WireError::new(
                "call.arguments_json",
                Problem::Invalid("must be a JSON object"),
            )),
        }
    }
}

impl fmt::Debug for CallArguments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CallArguments(<{} bytes>)", self.0.len())
    }
}

/// A call as the server sends it to the agent: the generated `v1::CallRequest`, checked
/// (a typed id and run, canonical arguments, a bounded deadline).
#[derive(Clone, Debug, PartialEq)]
pub struct CallRequest {
    /// The server-assigned id: the agent runs one id at most once per run.
    pub id: ToolCallId,
    /// The run the turn's tools came from.
    pub agent_run_id: RunId,
    /// The MCP server's name as the agent reported it.
    pub server: String,
    /// The tool's name on that server.
    pub tool: String,
    /// The call's arguments, as the route made them.
    pub arguments: CallArguments,
    /// The call's deadline, counted from when the agent received it.
    pub timeout: Duration,
}

/// What the server sends on the call stream.
#[derive(Clone, Debug, PartialEq)]
pub enum ServerCall {
    /// Run this call.
    Call(CallRequest),
    /// Cancel the call with this id.
    Cancel {
        /// The call's id.
        id: ToolCallId,
    },
    /// Nothing moved; the stream is alive.
    Heartbeat,
    /// Start a person's sign-in to one of the agent's HTTP servers.
    BeginSignIn(BeginSignIn),
    /// Finish one with the code the person's browser brought back.
    ExchangeSignIn(ExchangeSignIn),
    /// A credential the server kept for the agent, or one to forget.
    Credential(StoredSignIn),
}

/// What the agent sends on the call stream.
#[derive(Clone, Debug, PartialEq)]
pub enum AgentCall {
    /// The stream's first message: the run opening it.
    Hello {
        /// The agent process's run id.
        agent_run_id: RunId,
    },
    /// The call was delivered; the server may drop its arguments.
    Accepted {
        /// The call's id.
        id: ToolCallId,
    },
    /// The latest progress of a call.
    Progress {
        /// The call's id.
        id: ToolCallId,
        /// What the MCP server reported, sanitized.
        progress: CallProgress,
    },
    /// A call ended (or never started).
    Ended {
        /// The call's id.
        id: ToolCallId,
        /// How; never `running`, and never `unknown` (only the server decides that).
        end: CallEnd,
        /// How long the MCP call took on the agent.
        duration: Duration,
    },
    /// Nothing moved; the stream is alive.
    Heartbeat,
    /// What became of a sign-in the server asked for.
    SignIn {
        /// The sign-in's id.
        id: SignInRequestId,
        /// Its outcome.
        outcome: SignInOutcome,
    },
    /// A credential the agent refreshed, or lost (its refresh was refused).
    Credential(StoredSignIn),
}

/// How deep `value` nests: 0 for a scalar, 1 for a flat object or array. Iterative, so
/// hostile nesting cannot overflow the stack.
fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 1usize)];
    while let Some((value, level)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Object(map) => Box::new(map.values()),
            Value::Array(items) => Box::new(items.iter()),
            _ => continue,
        };
        deepest = deepest.max(level);
        stack.extend(children.map(|child| (child, level + 1)));
    }
    deepest
}

fn run_id(field: &str, text: String) -> Result<RunId, WireError> {
    bounded(field, &text, MAX_RUN_ID_BYTES)?;
    RunId::new(text).ok_or_else(|| WireError::new(field, Problem::Empty))
}

// ---- wire → domain -------------------------------------------------------------------

impl TryFrom<v1::ServerCallMessage> for ServerCall {
    type Error = WireError;

    fn try_from(wire: v1::ServerCallMessage) -> Result<Self, WireError> {
        use v1::server_call_message::Kind;
        match wire.kind {
            Some(Kind::Call(call)) => {
                let id = ToolCallId::from_wire("call.id", &call.id)?;
                required("call.server", &call.server, MAX_CALL_NAME_BYTES)?;
                required("call.tool", &call.tool, MAX_CALL_NAME_BYTES)?;
                bounded(
                    "call.arguments_json",
                    &call.arguments_json,
                    MAX_CALL_ARGUMENTS_BYTES,
                )?;
                let timeout = Duration::from_millis(call.timeout_ms);
                if timeout.is_zero() || timeout > MAX_CALL_TIMEOUT {
                    return Err(WireError::new(
                        "call.timeout_ms",
                        Problem::OutOfRange {
                            value: call.timeout_ms,
                            max: MAX_CALL_TIMEOUT.as_millis() as u64,
                        },
                    ));
                }
                Ok(Self::Call(CallRequest {
                    agent_run_id: run_id("call.agent_run_id", call.agent_run_id)?,
                    id,
                    server: call.server,
                    tool: call.tool,
                    // Bounded, not parsed: the agent parses it once, when it runs the call.
                    arguments: CallArguments(call.arguments_json),
                    timeout,
                }))
            }
            Some(Kind::Cancel(cancel)) => Ok(Self::Cancel {
                id: ToolCallId::from_wire("cancel.id", &cancel.id)?,
            }),
            Some(Kind::Heartbeat(_)) => Ok(Self::Heartbeat),
            Some(Kind::BeginSignIn(begin)) => Ok(Self::BeginSignIn(begin.try_into()?)),
            Some(Kind::ExchangeSignIn(exchange)) => Ok(Self::ExchangeSignIn(exchange.try_into()?)),
            Some(Kind::Credential(stored)) => Ok(Self::Credential(stored.try_into()?)),
            None => Err(WireError::new("kind", Problem::Missing)),
        }
    }
}

impl TryFrom<v1::AgentCallMessage> for AgentCall {
    type Error = WireError;

    fn try_from(wire: v1::AgentCallMessage) -> Result<Self, WireError> {
        use v1::agent_call_message::Kind;
        match wire.kind {
            Some(Kind::Hello(hello)) => Ok(Self::Hello {
                agent_run_id: run_id("hello.agent_run_id", hello.agent_run_id)?,
            }),
            Some(Kind::Accepted(accepted)) => Ok(Self::Accepted {
                id: ToolCallId::from_wire("accepted.id", &accepted.id)?,
            }),
            Some(Kind::Progress(progress)) => {
                let id = ToolCallId::from_wire("progress.id", &progress.id)?;
                if let Some(message) = &progress.message {
                    bounded("progress.message", message, MAX_PROGRESS_MESSAGE_BYTES)?;
                }
                if !progress.progress.is_finite() || !progress.total.is_none_or(f64::is_finite) {
                    return Err(WireError::new(
                        "progress.progress",
                        Problem::Invalid("must be a finite number"),
                    ));
                }
                Ok(Self::Progress {
                    id,
                    progress: CallProgress {
                        progress: progress.progress,
                        total: progress.total,
                        message: progress.message,
                    },
                })
            }
            Some(Kind::Ended(ended)) => {
                let id = ToolCallId::from_wire("ended.id", &ended.id)?;
                let end = call_end(&ended)?;
                Ok(Self::Ended {
                    id,
                    end,
                    duration: Duration::from_millis(ended.duration_ms),
                })
            }
            Some(Kind::Heartbeat(_)) => Ok(Self::Heartbeat),
            Some(Kind::SignIn(answer)) => {
                let (id, outcome) = sign_in::answer(answer)?;
                Ok(Self::SignIn { id, outcome })
            }
            Some(Kind::Credential(stored)) => Ok(Self::Credential(stored.try_into()?)),
            None => Err(WireError::new("kind", Problem::Missing)),
        }
    }
}

fn call_end(ended: &v1::CallEnded) -> Result<CallEnd, WireError> {
    let status = CallStatus::parse(&ended.status)
        .filter(|s| !matches!(s, CallStatus::Running | CallStatus::Unknown))
        .ok_or_else(|| WireError::new("ended.status", Problem::Invalid("unknown label")))?;
    let reason = if ended.reason.is_empty() {
        None
    } else {
        Some(
            CallReason::parse(&ended.reason)
                .ok_or_else(|| WireError::new("ended.reason", Problem::Invalid("unknown label")))?,
        )
    };
    if status == CallStatus::Refused && reason.is_none() {
        return Err(WireError::new("ended.reason", Problem::Empty));
    }
    bounded("ended.error_message", &ended.error_message, MAX_ERROR_BYTES)?;
    bounded(
        "ended.result_json",
        &ended.result_json,
        MAX_CALL_RESULT_BYTES,
    )?;
    let error = (status == CallStatus::Error).then(|| CallError {
        code: ended.error_code,
        message: ended.error_message.clone(),
    });
    let result = if status == CallStatus::Complete {
        match serde_json::from_str::<Value>(&ended.result_json) {
            Ok(value @ Value::Object(_)) => Some(value),
            _ => {
                return Err(WireError::new(
                    "ended.result_json",
                    Problem::Invalid("must be a JSON object"),
                ));
            }
        }
    } else {
        None
    };
    Ok(CallEnd {
        status,
        reason,
        error,
        result,
        truncated: ended.truncated,
    })
}

// ---- domain → wire -------------------------------------------------------------------

impl From<ServerCall> for v1::ServerCallMessage {
    fn from(call: ServerCall) -> Self {
        use v1::server_call_message::Kind;
        let kind = match call {
            ServerCall::Call(call) => Kind::Call(v1::CallRequest {
                id: call.id.to_string(),
                agent_run_id: call.agent_run_id.into_string(),
                server: call.server,
                tool: call.tool,
                arguments_json: call.arguments.into_string(),
                timeout_ms: call.timeout.as_millis() as u64,
            }),
            ServerCall::Cancel { id } => Kind::Cancel(v1::CallCancel { id: id.to_string() }),
            ServerCall::Heartbeat => Kind::Heartbeat(v1::Heartbeat {}),
            ServerCall::BeginSignIn(begin) => Kind::BeginSignIn(begin.into()),
            ServerCall::ExchangeSignIn(exchange) => Kind::ExchangeSignIn(exchange.into()),
            ServerCall::Credential(stored) => Kind::Credential(stored.into()),
        };
        Self { kind: Some(kind) }
    }
}

impl From<AgentCall> for v1::AgentCallMessage {
    fn from(call: AgentCall) -> Self {
        use v1::agent_call_message::Kind;
        let kind = match call {
            AgentCall::Hello { agent_run_id } => Kind::Hello(v1::CallHello {
                agent_run_id: agent_run_id.into_string(),
            }),
            AgentCall::Accepted { id } => Kind::Accepted(v1::CallAccepted { id: id.to_string() }),
            AgentCall::Progress { id, progress } => Kind::Progress(v1::CallProgress {
                id: id.to_string(),
                progress: progress.progress,
                total: progress.total,
                message: progress.message,
            }),
            AgentCall::Ended { id, end, duration } => {
                let (error_code, error_message) =
                    end.error.map(|e| (e.code, e.message)).unwrap_or_default();
                Kind::Ended(v1::CallEnded {
                    id: id.to_string(),
                    status: end.status.as_str().to_owned(),
                    reason: end
                        .reason
                        .map(|r| r.as_str().to_owned())
                        .unwrap_or_default(),
                    error_code,
                    error_message,
                    result_json: end.result.map(|r| r.to_string()).unwrap_or_default(),
                    truncated: end.truncated,
                    duration_ms: duration.as_millis() as u64,
                })
            }
            AgentCall::Heartbeat => Kind::Heartbeat(v1::Heartbeat {}),
            AgentCall::SignIn { id, outcome } => Kind::SignIn(sign_in::answer_to_wire(id, outcome)),
            AgentCall::Credential(stored) => Kind::Credential(stored.into()),
        };
        Self { kind: Some(kind) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run() -> RunId {
        RunId::new("4f1c1a52-6a43-4c39-9b59-0b8b1d0e0a01").unwrap()
    }

    /// A call id whose text reads `…000n`.
    fn id(n: u128) -> ToolCallId {
        ToolCallId::from_uuid(Uuid::from_u128(n))
    }

    fn canonical_arguments(value: &Value) -> Result<String, WireError> {
        CallArguments::new(value).map(CallArguments::into_string)
    }

    #[test]
    fn canonical_arguments_sort_keys_and_drop_whitespace() {
        let value: Value =
            serde_json::from_str(r#"{ "b": 1, "a": {"d": [1, 2], "c": null} }"#).unwrap();
        assert_eq!(
            canonical_arguments(&value).unwrap(),
            r#"{"a":{"c":null,"d":[1,2]},"b":1}"#
        );
    }

    #[test]
    fn canonical_arguments_name_each_problem() {
        let error = canonical_arguments(&json!([1])).unwrap_err();
        assert_eq!(error.problem, Problem::Invalid("must be a JSON object"));
        let mut deep = json!(1);
        for _ in 0..MAX_CALL_ARGUMENTS_DEPTH {
            deep = json!({ "a": deep });
        }
        assert!(canonical_arguments(&deep).is_ok());
        let deeper = json!({ "a": deep });
        let error = canonical_arguments(&deeper).unwrap_err();
        assert!(matches!(
            error.problem,
            Problem::OutOfRange { value: 65, max: 64 }
        ));
        let big = json!({ "a": "x".repeat(MAX_CALL_ARGUMENTS_BYTES) });
        assert!(matches!(
            canonical_arguments(&big).unwrap_err().problem,
            Problem::TooLong { .. }
        ));
    }

    #[test]
    fn server_calls_round_trip_and_are_bounded() {
        let call = ServerCall::Call(CallRequest {
            id: id(1),
            agent_run_id: run(),
            server: "fs".into(),
            tool: "read".into(),
            arguments: CallArguments::new(&json!({"path": "a"})).unwrap(),
            timeout: Duration::from_secs(60),
        });
        let wire = v1::ServerCallMessage::from(call.clone());
        assert_eq!(ServerCall::try_from(wire.clone()).unwrap(), call);
        let mut zero = wire;
        if let Some(v1::server_call_message::Kind::Call(c)) = &mut zero.kind {
            c.timeout_ms = 0;
        }
        assert_eq!(
            ServerCall::try_from(zero).unwrap_err().field,
            "call.timeout_ms"
        );
        let empty = v1::ServerCallMessage { kind: None };
        assert_eq!(
            ServerCall::try_from(empty).unwrap_err().problem,
            Problem::Missing
        );
    }

    #[test]
    fn agent_calls_round_trip_and_refuse_bad_ends() {
        let ends = [
            AgentCall::Hello {
                agent_run_id: run(),
            },
            AgentCall::Ended {
                id: id(1),
                end: CallEnd::complete(json!({"content": [], "isError": false}), true),
                duration: Duration::from_millis(12),
            },
            AgentCall::Ended {
                id: id(2),
                end: CallEnd::with_reason(CallStatus::Refused, CallReason::ToolGone),
                duration: Duration::ZERO,
            },
            AgentCall::Ended {
                id: id(3),
                end: CallEnd::error(-32601, "no such tool"),
                duration: Duration::from_millis(3),
            },
            AgentCall::Progress {
                id: id(4),
                progress: CallProgress {
                    progress: 1.0,
                    total: Some(3.0),
                    message: Some("one".into()),
                },
            },
        ];
        for message in ends {
            let wire = v1::AgentCallMessage::from(message.clone());
            assert_eq!(AgentCall::try_from(wire).unwrap(), message);
        }
        let unknown = v1::AgentCallMessage {
            kind: Some(v1::agent_call_message::Kind::Ended(v1::CallEnded {
                id: id(5).to_string(),
                status: "unknown".into(),
                ..Default::default()
            })),
        };
        assert_eq!(
            AgentCall::try_from(unknown).unwrap_err().field,
            "ended.status"
        );
    }

    #[test]
    fn a_call_id_is_a_uuid_on_the_wire() {
        let text = "4f1c1a52-6a43-4c39-9b59-0b8b1d0e0a01";
        let parsed: ToolCallId = text.parse().unwrap();
        assert_eq!(parsed.to_string(), text);
        assert_eq!(ToolCallId::from_uuid(parsed.as_uuid()), parsed);
        assert_ne!(ToolCallId::new_random(), ToolCallId::new_random());
        let accepted = |id: &str| v1::AgentCallMessage {
            kind: Some(v1::agent_call_message::Kind::Accepted(v1::CallAccepted {
                id: id.into(),
            })),
        };
        assert_eq!(
            AgentCall::try_from(accepted(text)).unwrap(),
            AgentCall::Accepted { id: parsed }
        );
        let error = AgentCall::try_from(accepted("c1")).unwrap_err();
        assert_eq!(error.to_string(), "invalid accepted.id: must be a UUID");
        let error = AgentCall::try_from(accepted("")).unwrap_err();
        assert_eq!(
            (error.field.as_str(), error.problem),
            ("accepted.id", Problem::Empty)
        );
        let cancel = v1::ServerCallMessage {
            kind: Some(v1::server_call_message::Kind::Cancel(v1::CallCancel {
                id: "not-a-uuid".into(),
            })),
        };
        let error = ServerCall::try_from(cancel).unwrap_err();
        assert_eq!(error.to_string(), "invalid cancel.id: must be a UUID");
    }

    #[test]
    fn arguments_travel_as_the_text_the_route_made() {
        let value: Value =
            serde_json::from_str(r#"{ "b": [1, {"y": 2, "x": "é"}], "a": null }"#).unwrap();
        let arguments = CallArguments::new(&value).unwrap();
        let text = arguments.as_str().to_owned();
        assert_eq!(text, r#"{"a":null,"b":[1,{"x":"é","y":2}]}"#);
        // Stored, read back and sent: the wire carries the very text, not a re-encoding.
        let call = CallRequest {
            id: id(7),
            agent_run_id: run(),
            server: "fs".into(),
            tool: "read".into(),
            arguments: CallArguments::from_canonical(text.clone()),
            timeout: Duration::from_secs(1),
        };
        let wire = v1::ServerCallMessage::from(ServerCall::Call(call.clone()));
        let Some(v1::server_call_message::Kind::Call(sent)) = &wire.kind else {
            panic!("a call");
        };
        assert_eq!(sent.arguments_json, text);
        assert_eq!(sent.id, "00000000-0000-0000-0000-000000000007");
        // The agent takes the same text and parses it once into the object it calls with.
        let ServerCall::Call(received) = ServerCall::try_from(wire).unwrap() else {
            panic!("a call");
        };
        assert_eq!(received, call);
        assert_eq!(received.arguments.into_string(), text);
        assert_eq!(Value::Object(call.arguments.parse().unwrap()), value);
        // Arguments that are not an object are refused where they are parsed.
        let error = CallArguments::from_canonical("[1]".into())
            .parse()
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid call.arguments_json: must be a JSON object"
        );
        assert_eq!(format!("{:?}", call.arguments), "CallArguments(<35 bytes>)");
    }
}
