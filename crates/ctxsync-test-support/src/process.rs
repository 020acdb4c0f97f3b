//! Helpers for tests that run child processes (feature `process`).

use std::path::PathBuf;

/// Where child processes' output goes: files in a temp dir, so a full pipe never blocks a
/// child and a failing test can show what it wrote.
#[derive(Debug)]
pub struct Logs {
    dir: tempfile::TempDir,
}

impl Default for Logs {
    fn default() -> Self {
        Self::new()
    }
}

impl Logs {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("a temp dir for logs"),
        }
    }

    /// The log file of the process called `name`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.log"))
    }

    /// `name`'s log, opened for appending (a child's stdout or stderr).
    pub fn file(&self, name: &str) -> std::fs::File {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path(name))
            .expect("a log file")
    }

    /// What `name` has written so far (empty when nothing).
    pub fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }
}

/// Whether `pid` is a live process (a zombie or a dead one counts as gone).
pub fn process_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesized command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| !matches!(state, 'Z' | 'X')),
        Err(_) => false,
    }
}

/// An address `ctxsync server` announces on stdout, as printed (`http://host:port`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerAddress {
    /// The agent API (gRPC).
    Agent(String),
    /// The chat API (HTTP).
    Http(String),
}

/// The address a line of `ctxsync server`'s stdout announces, if any. The line is plain
/// text, or with JSON logs (`--log-format json`, `CTXSYNC_LOG_FORMAT=json`) an object
/// whose `message` is that text.
pub fn server_address(line: &str) -> Option<ServerAddress> {
    let line = line.trim();
    let json_message = serde_json::from_str::<serde_json::Value>(line)
        .ok()
        .and_then(|object| object["message"].as_str().map(str::to_owned));
    let text = json_message.as_deref().unwrap_or(line);
    if let Some(url) = text.strip_prefix("agent API (gRPC):") {
        Some(ServerAddress::Agent(url.trim().to_owned()))
    } else {
        text.strip_prefix("chat API (HTTP):")
            .map(|url| ServerAddress::Http(url.trim().to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_addresses_from_text_lines() {
        assert_eq!(
            server_address("agent API (gRPC): http://127.0.0.1:5001\n"),
            Some(ServerAddress::Agent("http://127.0.0.1:5001".into()))
        );
        assert_eq!(
            server_address("chat API (HTTP):  http://127.0.0.1:5002"),
            Some(ServerAddress::Http("http://127.0.0.1:5002".into()))
        );
        assert_eq!(server_address("API token: secret"), None);
    }

    #[test]
    fn reads_addresses_from_json_log_objects() {
        let line = r#"{"timestamp":"2026-12-05T01:00:00Z","level":"INFO","message":"chat API (HTTP):  http://127.0.0.1:5002","target":"ctxsync::operator"}"#;
        assert_eq!(
            server_address(line),
            Some(ServerAddress::Http("http://127.0.0.1:5002".into()))
        );
        let other = r#"{"level":"INFO","message":"listening","target":"ctxsync::server"}"#;
        assert_eq!(server_address(other), None);
    }
}
