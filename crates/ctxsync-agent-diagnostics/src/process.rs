//! stdio server processes: own process group, bounded stderr tail, group kill on every exit path.

use std::{
    collections::{BTreeMap, HashSet, VecDeque},
    io,
    path::Path,
    process::{ExitStatus, Stdio},
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use nix::{sys::signal::Signal, unistd::Pid};

use crate::line_limit::{LineLimit, MAX_MESSAGE_BYTES, StdoutWatch};
use tokio::{
    io::AsyncReadExt,
    process::{Child, ChildStdin, ChildStdout, Command},
};

/// How much of a server's stderr is kept for diagnostics (the last bytes).
pub(crate) const STDERR_TAIL_BYTES: usize = 4096;
/// How long reaping a killed process may take before we stop waiting for it.
const REAP_TIMEOUT: Duration = Duration::from_secs(2);
/// After a process exited, how long its stderr may take to be read to the end.
const STDERR_SETTLE: Duration = Duration::from_millis(300);

/// Every live process group the engine started, so the engine can kill them synchronously
/// (e.g. from `Drop`) even when the tasks that own them are gone.
#[derive(Debug, Default)]
pub(crate) struct ProcessGroups {
    groups: Mutex<HashSet<i32>>,
}

impl ProcessGroups {
    fn register(&self, pgid: i32) {
        self.groups
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(pgid);
    }

    fn unregister(&self, pgid: i32) {
        self.groups
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&pgid);
    }

    /// SIGKILLs every registered group.
    pub(crate) fn kill_all(&self) {
        let groups: Vec<i32> = self
            .groups
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .collect();
        for pgid in groups {
            kill_group(pgid);
        }
    }
}

fn kill_group(pgid: i32) {
    // ESRCH (already gone) is the expected result for a group that exited by itself.
    let _ = nix::sys::signal::killpg(Pid::from_raw(pgid), Signal::SIGKILL);
}

/// The last [`STDERR_TAIL_BYTES`] bytes a process wrote to stderr.
#[derive(Debug, Default)]
pub(crate) struct StderrTail {
    state: Mutex<(VecDeque<u8>, bool)>,
}

impl StderrTail {
    fn push(&self, bytes: &[u8]) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (buffer, truncated) = &mut *state;
        buffer.extend(bytes);
        if buffer.len() > STDERR_TAIL_BYTES {
            let excess = buffer.len() - STDERR_TAIL_BYTES;
            buffer.drain(..excess);
            *truncated = true;
        }
    }

    /// The tail as text. When older output was dropped, the first (partial) line is dropped
    /// too, so a secret cut in half cannot slip past redaction.
    pub(crate) fn text(&self) -> String {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (buffer, truncated) = &*state;
        let bytes: Vec<u8> = buffer.iter().copied().collect();
        let text = String::from_utf8_lossy(&bytes);
        let text = if *truncated {
            match text.find('\n') {
                Some(newline) => &text[newline + 1..],
                None => "",
            }
        } else {
            &text
        };
        text.trim().to_owned()
    }
}

/// A spawned stdio server: leader of its own process group.
#[derive(Debug)]
pub(crate) struct ServerProcess {
    child: Child,
    pgid: Option<i32>,
    groups: Arc<ProcessGroups>,
    stderr: Arc<StderrTail>,
    stderr_reader: Option<tokio::task::JoinHandle<()>>,
    /// What the stdout reader saw (oversized message, lines that are not JSON).
    stdout: Arc<StdoutWatch>,
}

/// What spawning needs to know.
pub(crate) struct SpawnSpec<'a> {
    pub command: &'a str,
    pub args: &'a [String],
    pub agent_env: &'a BTreeMap<String, String>,
    pub entry_env: &'a BTreeMap<String, String>,
    pub cwd: &'a Path,
}

impl ServerProcess {
    /// Spawns the server in `cwd` with exactly the agent env plus the entry env. Its stdout is
    /// bounded per message by [`MAX_MESSAGE_BYTES`].
    pub(crate) fn spawn(
        spec: SpawnSpec<'_>,
        groups: Arc<ProcessGroups>,
    ) -> io::Result<(Self, LineLimit<ChildStdout>, ChildStdin)> {
        let mut command = Command::new(spec.command);
        command
            .args(spec.args)
            .env_clear()
            .envs(spec.agent_env)
            .envs(spec.entry_env)
            .current_dir(spec.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own group, so closing kills helpers it started (npx, shells) too.
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command.spawn()?;
        let pgid = child.id().and_then(|pid| i32::try_from(pid).ok());
        if let Some(pgid) = pgid {
            groups.register(pgid);
        }
        let stderr = Arc::new(StderrTail::default());
        let stderr_reader = child.stderr.take().map(|mut pipe| {
            let tail = stderr.clone();
            tokio::spawn(async move {
                let mut chunk = vec![0u8; 8192];
                // Keep draining until EOF so a chatty server never blocks on a full pipe.
                while let Ok(read) = pipe.read(&mut chunk).await {
                    if read == 0 {
                        break;
                    }
                    tail.push(&chunk[..read]);
                }
            })
        });
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            return Err(io::Error::other("stdio pipes were not created"));
        };
        let stdout = LineLimit::new(stdout, MAX_MESSAGE_BYTES);
        let process = Self {
            child,
            pgid,
            groups,
            stderr,
            stderr_reader,
            stdout: stdout.watch(),
        };
        Ok((process, stdout, stdin))
    }

    /// Waits for the leader to exit.
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Waits briefly for stderr to be read to its end, so that after an exit the tail holds
    /// the process's last words.
    pub(crate) async fn settle_stderr(&mut self) {
        if let Some(reader) = self.stderr_reader.as_mut()
            && tokio::time::timeout(STDERR_SETTLE, reader).await.is_ok()
        {
            self.stderr_reader = None;
        }
    }

    /// What the stdout reader observes, shared (tool calls wait on dropped messages).
    pub(crate) fn stdout_watch(&self) -> Arc<StdoutWatch> {
        self.stdout.clone()
    }

    /// Whether the connection was failed because stdout carried an oversized message.
    pub(crate) fn sent_oversized_message(&self) -> bool {
        self.stdout.oversized()
    }

    /// How many lines on stdout could not be JSON-RPC (e.g. a server logging to stdout).
    pub(crate) fn not_json_lines(&self) -> usize {
        self.stdout.not_json_lines()
    }

    /// The stderr tail as text.
    pub(crate) fn stderr_tail(&self) -> String {
        self.stderr.text()
    }

    /// Kills the whole group and reaps the leader.
    pub(crate) async fn shutdown(mut self) {
        self.kill();
        // A killed process is reaped at once; the bound only guards against a stuck kernel.
        let _ = tokio::time::timeout(REAP_TIMEOUT, self.child.wait()).await;
    }

    fn kill(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            kill_group(pgid);
            self.groups.unregister(pgid);
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(writes: &[&str], expect: &str) {
        let tail = StderrTail::default();
        for write in writes {
            tail.push(write.as_bytes());
        }
        assert_eq!(tail.text(), expect);
    }

    #[test]
    fn stderr_tail_keeps_the_end() {
        check(&[], "");
        check(&["hello\n", "world\n"], "hello\nworld");
        let long = "x".repeat(STDERR_TAIL_BYTES);
        check(&["secret-start", &long, "\nlast line\n"], "last line");
        check(&[&long, "y"], "");
        let text = StderrTail::default();
        text.push(&[0xff, b'o', b'k']);
        assert_eq!(text.text(), "\u{fffd}ok");
    }
}
