//! Tool calls on the agent's side (issue 36): the `ToolCalls` stream to the control plane
//! and the tool calls it carries, run through a [`CallRunner`] (the binary wires the MCP
//! engine's `ToolCaller` to it).
//!
//! By role: [`config`] is how the agent takes calls ([`ToolCallConfig`] and the wing's
//! limits), [`policy`] which calls may run ([`CallPolicy`] of `--allow-tool-calls`
//! globs), [`runner`] the seam to what runs them, and [`wing`] the stream and each call's
//! admission, deadline, cancellation, progress and end. Another kind of request the
//! control plane routes to the agent would get its own module beside this one, sharing the
//! registered connection the same way.
//!
//! Owns: opening the stream on the publisher's registered connection (after an
//! `UpdateStartup` that declared `accepts_tool_calls`) with `Hello`, heartbeats, the
//! server's silence limit and reopening with backoff; which calls run (the run id,
//! `--no-tool-calls`, the [`CallPolicy`] of `--allow-tool-calls`, the runner's listing,
//! [`MAX_RUNNING_CALLS`] running and [`MAX_WAITING_CALLS`] waiting, each call id at most
//! once per run); each call's deadline (counted from receipt), its cancellation and its
//! progress.
//!
//! Must never: run a call id twice within a run, or a call addressed to another run; log
//! a call's arguments; let a call outlive the stream that carried it (its end could no
//! longer be reported, so it is cancelled); lose an end while its stream lives; make the
//! push loop wait on, or fail with, the call stream.

mod config;
mod policy;
mod runner;
mod wing;

pub use config::{
    DEFAULT_TOOL_RESULT_MAX_BYTES, MAX_RUNNING_CALLS, MAX_WAITING_CALLS, MIN_TOOL_RESULT_BYTES,
    REMEMBERED_CALL_IDS, ToolCallConfig,
};
pub use policy::{CallGlob, CallGlobError, CallPolicy, MAX_CALL_GLOB_BYTES};
pub use runner::CallRunner;
pub(crate) use wing::{CallWing, Registered};
