//! The ctxsync agent wire protocol (layer 2).
//!
//! Owns: the generated tonic/prost code for `proto/ctxsync/agent/v1/agent.proto`
//! ([`v1`]), the wire limits of SPEC §4 ([`limits`]), their validation ([`WireError`]),
//! conversions between wire messages and plain domain types ([`domain`]), so that
//! higher layers never touch prost structs, and the body digest of delta pushes
//! ([`BodyDigest`], [`DeltaBase`]), so agents and servers compute it one way; the
//! tool-call channel's messages and the canonical form of a call's arguments ([`call`]).
//!
//! Must never: touch a database, a file system or the MCP engine; hold state. Validation
//! is pure and runs before any I/O in the layers above.
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

pub mod call;
pub mod codec;
mod digest;
pub mod domain;
pub mod limits;
mod run_id;
mod validate;

pub use digest::{BODY_DIGEST_BYTES, BodyDigest, DELTA_DIGEST_SCHEME, DeltaBase};
pub use domain::{
    BodyKind, DiscoveryPhase, InstructionFileBody, KeptResource, McpConnectTimings, McpIcon,
    McpServerBody, McpServerInfo, McpTool, McpToolAnnotations, PendingServer, Push, Resource,
    ResourceBody, ResourceStatus, SkillBody, Snapshot, Startup, plugin_of_source,
};
pub use run_id::RunId;
pub use validate::{Problem, WireError, body_len};

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
