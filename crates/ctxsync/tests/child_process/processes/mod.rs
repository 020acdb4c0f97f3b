//! End-to-end test support: the `ctxsync` binary as `server` and `agent` child processes,
//! temp workspaces whose `.mcp.json` declares fixture MCP servers, and bounded polling of
//! the database the server writes. The generic parts (backends, logs, workspaces, the
//! poller) are `ctxsync-test-support`'s.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use ctxsync_persistence::test_support::TestStore;
use ctxsync_persistence::{AgentContext, AgentId};
pub(crate) use ctxsync_test_support::{Logs, TestBackend, Workspace, poll, process_alive};
use ctxsync_test_support::{ServerAddress, server_address};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};

/// Bound on anything a test waits for; never reached when the code works.
pub(crate) const WAIT: Duration = Duration::from_secs(20);
/// How often the database is polled.
const POLL: Duration = Duration::from_millis(25);
/// Short MCP connect timeout, so a test never waits for the 30 s default.
pub(crate) const MCP_TIMEOUT_MS: &str = "4000";
/// A command that exists nowhere, for the "command not found" row.
pub(crate) const MISSING_COMMAND: &str = "no-such-mcp-server-e2e";

pub(crate) fn ctxsync() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ctxsync"));
    command
        .env_remove("CTXSYNC_AGENT_TOKEN")
        .env_remove("CTXSYNC_DATABASE_URL")
        .env_remove("CTXSYNC_API_TOKEN")
        .env("RUST_LOG", "info,rmcp=warn")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// A fresh database for one test; `None` only when PostgreSQL may be skipped locally.
pub(crate) async fn database(backend: TestBackend) -> Option<TestStore> {
    ctxsync_test_support::store(backend).await
}

/// A `ctxsync server` child process on the test's database.
#[derive(Debug)]
pub(crate) struct ServerProcess {
    child: Child,
    pub addr: SocketAddr,
    /// The chat API's address.
    pub http_addr: SocketAddr,
    // Kept open: the server's stdout is a pipe nobody else reads.
    _stdout: BufReader<ChildStdout>,
}

impl ServerProcess {
    /// Starts a server on an ephemeral loopback port.
    pub(crate) async fn start(store: &TestStore, logs: &Logs) -> Self {
        Self::start_at(store, logs, "127.0.0.1:0".parse().unwrap()).await
    }

    /// Starts a server on `addr`; retries briefly while a previous server's port is being
    /// released.
    pub(crate) async fn start_at(store: &TestStore, logs: &Logs, addr: SocketAddr) -> Self {
        Self::launch(logs, addr, |command| {
            match store.postgres_database() {
                Some(database) => command.args(["--database-url", database.url()]),
                None => command
                    .arg("--data-dir")
                    .arg(store.sqlite_data_dir().expect("a SQLite data dir")),
            };
        })
        .await
    }

    /// Starts a server on the test's database with `extra` flags, on ephemeral ports.
    pub(crate) async fn start_with(store: &TestStore, logs: &Logs, extra: &[&str]) -> Self {
        Self::launch(logs, "127.0.0.1:0".parse().unwrap(), |command| {
            match store.postgres_database() {
                Some(database) => command.args(["--database-url", database.url()]),
                None => command
                    .arg("--data-dir")
                    .arg(store.sqlite_data_dir().expect("a SQLite data dir")),
            };
            command.args(extra);
        })
        .await
    }

    /// Starts a server on `database_url` with `extra` flags, on ephemeral ports.
    pub(crate) async fn start_on(database_url: &str, logs: &Logs, extra: &[&str]) -> Self {
        Self::launch(logs, "127.0.0.1:0".parse().unwrap(), |command| {
            command.args(["--database-url", database_url]).args(extra);
        })
        .await
    }

    async fn launch(logs: &Logs, addr: SocketAddr, configure: impl Fn(&mut Command)) -> Self {
        let deadline = Instant::now() + WAIT;
        loop {
            let mut command = ctxsync();
            command.arg("server");
            configure(&mut command);
            command
                .args(["--grpc-addr", &addr.to_string()])
                .args(["--http-addr", "127.0.0.1:0"])
                .stdout(Stdio::piped())
                .stderr(logs.file("server"));
            let mut child = command.spawn().expect("spawning ctxsync server");
            let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
            let mut line = String::new();
            let addresses = tokio::time::timeout(WAIT, async {
                let (mut grpc, mut http) = (None, None);
                while grpc.is_none() || http.is_none() {
                    line.clear();
                    match stdout.read_line(&mut line).await {
                        Ok(0) | Err(_) => return None,
                        Ok(_) => match server_address(&line) {
                            Some(ServerAddress::Agent(url)) => {
                                grpc = Some(url.trim_start_matches("http://").to_owned());
                            }
                            Some(ServerAddress::Http(url)) => {
                                http = Some(url.trim_start_matches("http://").to_owned());
                            }
                            None => {}
                        },
                    }
                }
                grpc.zip(http)
            })
            .await
            .ok()
            .flatten();
            if let Some((grpc, http)) = addresses {
                return Self {
                    child,
                    addr: grpc.parse().expect("the server prints a socket address"),
                    http_addr: http.parse().expect("the server prints a socket address"),
                    _stdout: stdout,
                };
            }
            let _ = child.wait().await;
            if Instant::now() > deadline {
                panic!(
                    "ctxsync server did not start; its log:\n{}",
                    logs.read("server")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Still running?
    pub(crate) fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("polling the server").is_none()
    }

    /// The chat API's base URL.
    pub(crate) fn http_url(&self) -> String {
        format!("http://{}", self.http_addr)
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id().expect("the server is running")
    }

    /// SIGTERM, then the exit status and how long the exit took (bounded by [`WAIT`]).
    pub(crate) async fn terminate(&mut self) -> (ExitStatus, Duration) {
        let started = Instant::now();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(self.pid()).unwrap()),
            nix::sys::signal::Signal::SIGTERM,
        )
        .expect("sending SIGTERM");
        let status = tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("the server stops after SIGTERM")
            .expect("waiting for the server");
        (status, started.elapsed())
    }

    /// Waits (bounded by [`WAIT`]) for the server to exit on its own.
    pub(crate) async fn wait_exit(&mut self) -> ExitStatus {
        tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("the server exits")
            .expect("waiting for the server")
    }

    /// SIGKILL: no clean shutdown, as in a crash.
    pub(crate) async fn kill(mut self) -> SocketAddr {
        self.child.kill().await.expect("killing the server");
        self.addr
    }
}

/// A `ctxsync agent` child process.
#[derive(Debug)]
pub(crate) struct AgentProcess {
    pub child: Child,
}

impl AgentProcess {
    /// Starts `ctxsync agent --server URL --workspace DIR ARGS...` with the token in the
    /// environment; stderr goes to the log `name`.
    pub(crate) fn start(
        logs: &Logs,
        name: &str,
        server: &str,
        workspace: &Path,
        token: &str,
        args: &[&str],
    ) -> Self {
        Self::start_timed(logs, name, server, workspace, token, args, MCP_TIMEOUT_MS)
    }

    /// [`Self::start`] with another MCP connect timeout (third-party servers start
    /// slower than the fixture).
    pub(crate) fn start_timed(
        logs: &Logs,
        name: &str,
        server: &str,
        workspace: &Path,
        token: &str,
        args: &[&str],
        mcp_timeout_ms: &str,
    ) -> Self {
        let child = ctxsync()
            .args(["agent", "--server", server, "--workspace"])
            .arg(workspace)
            .args(["--mcp-timeout-ms", mcp_timeout_ms])
            .args(args)
            .env("CTXSYNC_AGENT_TOKEN", token)
            .stdout(Stdio::null())
            .stderr(logs.file(name))
            .spawn()
            .expect("spawning ctxsync agent");
        Self { child }
    }

    /// SIGTERM, then the exit status (bounded).
    pub(crate) async fn terminate(&mut self) -> ExitStatus {
        let pid = self.child.id().expect("the agent is running");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
            nix::sys::signal::Signal::SIGTERM,
        )
        .expect("sending SIGTERM");
        tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("the agent stops after SIGTERM")
            .expect("waiting for the agent")
    }

    /// SIGKILL: the process gets no chance to clean up, as in a crash.
    pub(crate) async fn kill(&mut self) {
        self.child.kill().await.expect("killing the agent");
    }

    /// Still running?
    pub(crate) fn is_running(&mut self) -> bool {
        self.child.try_wait().expect("polling the agent").is_none()
    }
}

/// Workspaces that declare fixture MCP servers served by the binary under test.
pub(crate) trait FixtureWorkspace: Sized {
    /// `AGENTS.md` and a `.mcp.json` declaring `servers` (name → fixture flags), plus an
    /// entry whose command does not exist (`missing`) and an invalid one (`bad`). Each
    /// fixture writes its pid under `pids/`.
    fn with_servers(servers: &[(&str, &[&str])]) -> Self;

    /// The pids the fixture servers wrote.
    fn fixture_pids(&self) -> Vec<i32>;
}

impl FixtureWorkspace for Workspace {
    fn with_servers(servers: &[(&str, &[&str])]) -> Self {
        let workspace = Self::new();
        // The binary under test serves the fixture (`ctxsync mcp-fixture`): nothing is built
        // while a test runs.
        let ctxsync = env!("CARGO_BIN_EXE_ctxsync");
        let pids = workspace.path().join("pids");
        std::fs::create_dir_all(&pids).unwrap();
        let mut declared = serde_json::Map::new();
        for (name, flags) in servers {
            let mut args = vec!["mcp-fixture".to_owned()];
            args.extend(flags.iter().map(|f| (*f).to_owned()));
            args.push("--pid-file".into());
            args.push(pids.join(name).to_string_lossy().into_owned());
            declared.insert(
                (*name).to_owned(),
                serde_json::json!({"command": ctxsync, "args": args}),
            );
        }
        declared.insert(
            "missing".into(),
            serde_json::json!({"command": MISSING_COMMAND}),
        );
        declared.insert(
            "bad".into(),
            serde_json::json!({"command": "x", "url": "http://127.0.0.1:9/mcp"}),
        );
        workspace.write(
            ".mcp.json",
            serde_json::json!({ "mcpServers": declared }).to_string(),
        );
        workspace.write("AGENTS.md", "# Agents\nBe brief.\n");
        workspace
    }

    fn fixture_pids(&self) -> Vec<i32> {
        let Ok(entries) = std::fs::read_dir(self.path().join("pids")) else {
            return Vec::new();
        };
        entries
            .filter_map(|entry| std::fs::read_to_string(entry.ok()?.path()).ok())
            .filter_map(|text| text.trim().parse().ok())
            .collect()
    }
}

/// Waits until no process in `pids` is alive.
pub(crate) async fn wait_until_gone(pids: &[i32]) {
    poll("the MCP server processes to exit with the agent")
        .within(WAIT)
        .every(POLL)
        .until(move || async move {
            let alive: Vec<i32> = pids.iter().copied().filter(|p| process_alive(*p)).collect();
            if alive.is_empty() { Ok(()) } else { Err(alive) }
        })
        .await;
}

/// Polls `read_agent_context` until `done` holds (bounded by [`WAIT`]); on timeout the
/// panic shows the last state and the logs.
pub(crate) async fn wait_for_context(
    store: &TestStore,
    agent: AgentId,
    logs: &Logs,
    what: &str,
    done: impl FnMut(&AgentContext) -> bool,
) -> AgentContext {
    let done = &std::cell::RefCell::new(done);
    poll(what)
        .within(WAIT)
        .every(POLL)
        .explain(|| {
            format!(
                "server log:\n{}\nagent logs:\n{}\n{}",
                logs.read("server"),
                logs.read("agent"),
                logs.read("agent2"),
            )
        })
        .until(move || async move {
            let context = store
                .read_agent_context(agent)
                .await
                .expect("reading the agent context")
                .expect("the agent exists");
            let finished = (*done.borrow_mut())(&context);
            if finished { Ok(context) } else { Err(context) }
        })
        .await
}

/// Waits until the log `name` contains `needle` (bounded by [`WAIT`]).
pub(crate) async fn wait_for_log(logs: &Logs, name: &str, needle: &str) -> String {
    poll(format!("`{needle}` in the {name} log"))
        .within(WAIT)
        .every(POLL)
        .explain(|| format!("the {name} log:\n{}", logs.read(name)))
        .until_some(move || async move {
            let text = logs.read(name);
            text.contains(needle).then_some(text)
        })
        .await
}

/// Whether `haystack` holds `needle` anywhere.
pub(crate) fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Every file under `dir`, concatenated (the SQLite database, its WAL and journal).
pub(crate) fn bytes_under(dir: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).expect("the data dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            all.extend(bytes_under(&path));
        } else if let Ok(bytes) = std::fs::read(&path) {
            all.extend(bytes);
        }
    }
    all
}
