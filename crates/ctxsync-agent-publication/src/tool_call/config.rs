//! How the agent takes tool calls: [`ToolCallConfig`] (`--no-tool-calls`,
//! `--allow-tool-calls`, `--tool-result-max-bytes`, the stream's heartbeat and silence
//! limit), checked once at start, and the call wing's fixed limits.

use std::time::Duration;

use ctxsync_protocol::tool_call::{CALL_HEARTBEAT, CALL_SILENCE_LIMIT, MAX_CALL_RESULT_BYTES};

use crate::error::PublishError;

use super::policy::CallPolicy;

/// Most calls running at once; more wait.
pub const MAX_RUNNING_CALLS: usize = 8;
/// Most calls waiting to run; beyond that a call is refused `busy`.
pub const MAX_WAITING_CALLS: usize = 32;
/// How many ended call ids a run remembers (besides every held one), so a re-sent call
/// is never run twice.
pub const REMEMBERED_CALL_IDS: usize = 4096;
/// The smallest `--tool-result-max-bytes`.
pub const MIN_TOOL_RESULT_BYTES: usize = 1024;
/// The default `--tool-result-max-bytes` (256 KiB).
pub const DEFAULT_TOOL_RESULT_MAX_BYTES: usize =
    ctxsync_agent_diagnostics::DEFAULT_MAX_RESULT_BYTES;

/// How the agent takes tool calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCallConfig {
    /// `--no-tool-calls`: the stream is still opened, and every call refused `denied`
    /// (so the caller learns it at once, not `agent_unsupported`).
    pub deny: bool,
    /// `--allow-tool-calls`: the calls that may run (default: every one); any other is
    /// refused `denied` as with [`Self::deny`], and its tool stays listed (whether a tool is
    /// offered and whether it may run are separate facts).
    pub policy: CallPolicy,
    /// `--tool-result-max-bytes`: the cap of a call's whole result, from
    /// [`MIN_TOOL_RESULT_BYTES`] to `ctxsync_protocol::tool_call::MAX_CALL_RESULT_BYTES`.
    pub max_result_bytes: usize,
    /// How often a heartbeat goes out when nothing else did (`CALL_HEARTBEAT`).
    pub heartbeat: Duration,
    /// How long the server may stay silent before the stream counts as lost
    /// (`CALL_SILENCE_LIMIT`).
    pub silence_limit: Duration,
}

impl Default for ToolCallConfig {
    fn default() -> Self {
        Self {
            deny: false,
            policy: CallPolicy::allow_all(),
            max_result_bytes: DEFAULT_TOOL_RESULT_MAX_BYTES,
            heartbeat: CALL_HEARTBEAT,
            silence_limit: CALL_SILENCE_LIMIT,
        }
    }
}

impl ToolCallConfig {
    pub(crate) fn check(&self) -> Result<(), PublishError> {
        let invalid = |reason: String| Err(PublishError::ToolCalls { reason });
        if self.deny && self.policy.globs().is_some() {
            // One would silently void the other.
            return invalid("--no-tool-calls and --allow-tool-calls cannot be combined".into());
        }
        if !(MIN_TOOL_RESULT_BYTES..=MAX_CALL_RESULT_BYTES).contains(&self.max_result_bytes) {
            return invalid(format!(
                "--tool-result-max-bytes is {}; it must be from {MIN_TOOL_RESULT_BYTES} to {MAX_CALL_RESULT_BYTES}",
                self.max_result_bytes
            ));
        }
        if self.heartbeat.is_zero() || self.silence_limit <= self.heartbeat {
            return invalid(format!(
                "the heartbeat ({:?}) must be above zero and below the silence limit ({:?})",
                self.heartbeat, self.silence_limit
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool_call::policy::CallGlob;

    #[test]
    fn the_result_cap_is_bounded_and_the_error_names_the_flag() {
        for bytes in [MIN_TOOL_RESULT_BYTES - 1, MAX_CALL_RESULT_BYTES + 1] {
            let config = ToolCallConfig {
                max_result_bytes: bytes,
                ..ToolCallConfig::default()
            };
            let error = config.check().unwrap_err().to_string();
            assert!(error.contains("--tool-result-max-bytes"), "{error}");
        }
        for bytes in [MIN_TOOL_RESULT_BYTES, MAX_CALL_RESULT_BYTES] {
            let config = ToolCallConfig {
                max_result_bytes: bytes,
                ..ToolCallConfig::default()
            };
            assert!(config.check().is_ok());
        }
    }

    #[test]
    fn denying_every_call_and_allowing_some_cannot_be_combined() {
        let glob = CallGlob::parse("files/*").unwrap();
        let config = ToolCallConfig {
            deny: true,
            policy: CallPolicy::allow_only([glob]),
            ..ToolCallConfig::default()
        };
        let error = config.check().unwrap_err().to_string();
        assert!(
            error.contains("--no-tool-calls") && error.contains("--allow-tool-calls"),
            "{error}"
        );
        let deny = ToolCallConfig {
            deny: true,
            ..ToolCallConfig::default()
        };
        assert!(deny.check().is_ok());
        assert!(format!("{deny:?}").contains("policy: CallPolicy(all)"));
    }
}
