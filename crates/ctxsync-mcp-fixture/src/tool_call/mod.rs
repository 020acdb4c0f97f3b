//! The fixture's tool calls (`--call-tools`, `--call-log`): by role, [`tools`] are the
//! tools whose calls behave in ways tool-call routing must cope with, [`sampling`] the
//! `sample` tool's server-to-client request, and [`log`] the JSON line per call event that
//! tests read back.

mod log;
mod sampling;
mod tools;

pub(crate) use log::{CallEvent, CallRecorder};
pub(crate) use tools::{Answer, CallTool, Ending, specs};
