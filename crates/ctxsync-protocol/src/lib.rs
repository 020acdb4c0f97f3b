//! The ctxsync agent wire protocol (layer 2).
//!
//! Owns: the generated prost messages for `proto/ctxsync/agent/v1/agent.proto` ([`v1`])
//! and, with the `grpc` feature, the generated tonic client and server and their bounded
//! codec (`codec`), the wire limits of SPEC §4 ([`limits`])
//! and the encoded sizes they are measured in ([`encoded_size`]), the one error of wire
//! parsing ([`WireError`]), plain domain types ([`domain`]) and the conversions between
//! them and wire messages, so that higher layers never touch prost structs, the body
//! digest of delta pushes ([`BodyDigest`], [`DeltaBase`]), so agents and servers compute
//! it one way, and the requests the server routes to an agent: tool calls
//! ([`tool_call`]: their messages, [`ToolCallId`](tool_call::ToolCallId) and the
//! canonical [`CallArguments`](tool_call::CallArguments)) and a person's sign-ins to an
//! agent's HTTP servers ([`sign_in`]), whose messages travel the same stream. A further
//! kind of routed request (a prompt, a resource read) gets its own module beside them.
//!
//! Must never: touch a database, a file system or the MCP engine; hold state; check a
//! message in one pass and convert it in another. A wire message is parsed once: the
//! `TryFrom` that builds the domain value checks each limit as it takes the field, before
//! any I/O in the layers above, and returns the first [`WireError`].
//!
//! # Layers
//!
//! Each module imports only modules listed before it (bottom → top):
//!
//! 1. `limits`: the numbers; imports nothing.
//! 2. `error`: [`WireError`] and [`Problem`].
//! 3. `run_id`: [`RunId`].
//! 4. `codec`: the generic bounded codec the generated code names.
//! 5. `v1`: the generated messages, client and server.
//! 6. `domain`: the plain types; a startup from the wire, everything to the wire.
//! 7. `encoded_size`: wire and domain bodies' encoded sizes, JSON text lengths.
//! 8. `digest`: [`BodyDigest`] and [`DeltaBase`].
//! 9. `push`: [`Push`] and a push's conversion from the wire.
//! 10. `sign_in`: the sign-in messages.
//! 11. `tool_call`: the tool-call channel, which carries them too.
//! 12. `precheck`: each message's walk of its encoded bytes before decoding.
//!
//! # Example
//!
//! Validate a request as decoded from the wire and convert it to domain types; a bad
//! field is named with its path:
//!
//! ```
//! use ctxsync_protocol::{Problem, Startup, v1};
//!
//! let run = "4f1c1a52-6a43-4c39-9b59-0b8b1d0e0a01";
//! let wire = v1::UpdateStartupRequest {
//!     startup: Some(v1::Startup {
//!         version: "1.4.0".into(),
//!         expanded_directory: "/srv/workspace".into(),
//!         agent_run_id: run.into(),
//!         ..Default::default()
//!     }),
//! };
//! let startup = Startup::try_from(wire).expect("a valid request");
//! assert_eq!(startup.agent_run_id.as_deref(), Some(run));
//! // An empty run id on the wire is no run id in memory.
//! let legacy = v1::Startup { agent_run_id: String::new(), ..Default::default() };
//! assert_eq!(Startup::try_from(legacy).expect("valid").agent_run_id, None);
//!
//! let missing = Startup::try_from(v1::UpdateStartupRequest { startup: None }).unwrap_err();
//! assert_eq!((missing.field.as_str(), &missing.problem), ("startup", &Problem::Missing));
//!
//! let long = v1::Startup { agent_run_id: "r".repeat(65), ..Default::default() };
//! let error = Startup::try_from(long).unwrap_err();
//! assert_eq!(error.field, "startup.agent_run_id");
//! assert!(matches!(error.problem, Problem::TooLong { .. }));
//! ```

#![deny(missing_docs)]

#[cfg(feature = "grpc")]
pub mod codec;
mod digest;
pub mod domain;
pub mod encoded_size;
mod error;
pub mod limits;
#[cfg(feature = "grpc")]
mod precheck;
mod push;
mod run_id;
pub mod sign_in;
pub mod tool_call;

pub use digest::{BODY_DIGEST_BYTES, BodyDigest, DELTA_DIGEST_SCHEME, DeltaBase};
pub use domain::{
    BodyKind, DiscoveryPhase, InstructionFileBody, McpConnectTimings, McpIcon, McpServerBody,
    McpServerInfo, McpTool, McpToolAnnotations, Resource, ResourceBody, ResourceStatus, SkillBody,
    Snapshot, SnapshotPendingServer, Startup, plugin_of_source,
};
pub use encoded_size::body_len;
pub use error::{Problem, WireError};
pub use push::{KeptResource, Push};
pub use run_id::RunId;

/// Generated code for package `ctxsync.agent.v1`: messages, the `Agent` client and server.
#[allow(
    clippy::all,
    clippy::pedantic,
    missing_debug_implementations,
    missing_docs,
    unused_qualifications
)]
pub mod v1 {
    include!("gen/ctxsync.agent.v1.rs");
}

/// The encoded `FileDescriptorSet` of the agent proto (with its comments), for gRPC
/// server reflection; generated and checked for staleness with the code in [`v1`].
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!("gen/file_descriptor_set.bin");
