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
