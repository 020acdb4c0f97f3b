//! `--call-log`: one JSON line per `tools/call` event, so tests can see what reached the server.

use std::{io::Write, path::PathBuf};

use rmcp::model::RequestId;

/// What happened to a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallEvent {
    /// The call reached the tool handler.
    Started,
    /// The fixture saw the call cancelled (its cancellation token fired).
    Cancelled,
    /// The handler ran to its end and answered.
    Finished,
}

impl CallEvent {
    fn name(self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::Cancelled => "cancelled",
            Self::Finished => "finished",
        }
    }
}

/// Records the events of one call (a no-op without `--call-log`).
#[derive(Debug, Clone)]
pub(crate) struct CallRecorder {
    path: Option<PathBuf>,
    tool: String,
    request_id: RequestId,
}

impl CallRecorder {
    pub(crate) fn new(path: Option<PathBuf>, tool: &str, request_id: RequestId) -> Self {
        Self {
            path,
            tool: tool.to_owned(),
            request_id,
        }
    }

    /// Appends `{"event":..,"tool":..,"request_id":..}` and a newline.
    pub(crate) fn record(&self, event: CallEvent) {
        let Some(path) = &self.path else { return };
        let line = serde_json::json!({
            "event": event.name(),
            "tool": self.tool,
            "request_id": self.request_id,
        });
        let mut bytes = line.to_string().into_bytes();
        bytes.push(b'\n');
        // Opened per event in append mode and written in one call, so several processes
        // sharing one log never interleave inside a line.
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut file| file.write_all(&bytes));
        if let Err(error) = written {
            eprintln!(
                "ctxsync-mcp-fixture: cannot append to call log {}: {error}",
                path.display()
            );
        }
    }
}
