//! `cargo xtask conformance-client --ctxsync BIN URL`: the client command the conformance
//! suite starts for one client scenario (the scenario's server URL comes last, its name in
//! `MCP_CONFORMANCE_SCENARIO`). It drives ctxsync's real product path: a `ctxsync server`
//! (embedded SQLite in a temp dir, loopback ephemeral ports), an agent created through the
//! chat API, a `ctxsync agent` whose workspace's `.mcp.json` names the scenario's server,
//! discovery awaited through the chat API, a chat with a turn, and the scenario's tool
//! called through the turn's tool-call route. Everything it starts is stopped with SIGTERM
//! before it exits (killed if it does not stop), and it finishes well inside the suite's
//! timeout, so the suite never has to kill it and orphan the server and agent.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::http::ChatApi;

/// How long the client may work before it stops its processes: with two [`STOP_GRACE`]s
/// it stays below the suite's timeout ([`super::SUITE_TIMEOUT_MS`]), so the suite never
/// kills it and leaves the server and agent behind.
const BUDGET: Duration = Duration::from_secs(40);
/// How long a stopped process may take to exit after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(8);
/// The server's name in the workspace's `.mcp.json`.
const SERVER_NAME: &str = "scenario";

/// What a scenario expects the client to do beyond connecting and listing tools: call one
/// tool with these arguments, whose text result contains `expect`.
struct ScenarioCall {
    scenario: &'static str,
    tool: &'static str,
    arguments: fn() -> Value,
    expect: &'static str,
}

/// From each scenario's server in the suite: `tools_call` checks that `add_numbers` was
/// called with numbers and answers their sum; `sse-retry` answers `test_reconnection`
/// only on the stream the client reopens after the server closed the first one.
const CALLS: &[ScenarioCall] = &[
    ScenarioCall {
        scenario: "tools_call",
        tool: "add_numbers",
        arguments: || json!({"a": 5, "b": 3}),
        expect: "is 8",
    },
    ScenarioCall {
        scenario: "sse-retry",
        tool: "test_reconnection",
        arguments: || json!({}),
        expect: "Reconnection test completed",
    },
];

/// The prefix of the line the client's failure is printed on; the step quotes that line.
pub(crate) const FAILED: &str = "conformance-client: failed:";

/// Runs the client (`args` are `--ctxsync BIN URL`); on failure prints one line starting
/// with [`FAILED`] and exits 1, once everything it started has stopped.
pub(crate) fn run(args: &[&str]) -> Result<()> {
    if let Err(error) = run_inner(args) {
        eprintln!("{FAILED} {}", format!("{error:#}").replace('\n', " / "));
        std::process::exit(1);
    }
    Ok(())
}

fn run_inner(args: &[&str]) -> Result<()> {
    let [flag, ctxsync, url] = args else {
        bail!("usage: cargo xtask conformance-client --ctxsync BIN URL");
    };
    if *flag != "--ctxsync" {
        bail!("usage: cargo xtask conformance-client --ctxsync BIN URL");
    }
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let deadline = Instant::now() + BUDGET;
    let scratch = Scratch::new()?;
    let mut run = Run {
        ctxsync: PathBuf::from(ctxsync),
        scratch: &scratch,
        deadline,
        server: None,
        agent: None,
    };
    let outcome = run.drive(&scenario, url);
    // Stopped in this order whatever happened: the agent first, so the server sees it
    // leave; a process that does not stop cleanly fails a run that otherwise passed.
    let stopped = [run.agent.take(), run.server.take()]
        .into_iter()
        .flatten()
        .map(Process::stop)
        .collect::<Result<Vec<()>>>();
    outcome.and(stopped.map(drop))
}

/// One client run: the processes it started and its deadline.
struct Run<'a> {
    ctxsync: PathBuf,
    scratch: &'a Scratch,
    deadline: Instant,
    server: Option<Process>,
    agent: Option<Process>,
}

impl Run<'_> {
    fn drive(&mut self, scenario: &str, url: &str) -> Result<()> {
        let (agent_url, api) = self.start_server()?;
        let created = self.expect(
            &api,
            "POST",
            "/api/agents",
            Some(&json!({"name": "conformance"})),
            201,
        )?;
        let agent_id = text(&created, "id")?;
        let agent_token = text(&created, "token")?;

        let workspace = self.scratch.path.join("workspace");
        std::fs::create_dir_all(&workspace)?;
        let secrets = write_workspace(&workspace, scenario, url)?;
        self.start_agent(&agent_url, &agent_token, &workspace, &secrets)?;

        self.await_discovery(&api, &agent_id)?;
        let chat = self.expect(
            &api,
            "POST",
            "/api/chats",
            Some(&json!({"agent_id": agent_id})),
            201,
        )?;
        let chat_id = text(&chat, "id")?;
        let server = chat["context"]["mcp"]["servers"]
            .as_array()
            .and_then(|servers| servers.iter().find(|s| s["name"] == SERVER_NAME))
            .with_context(|| {
                format!("the chat's context panel does not list the server `{SERVER_NAME}`")
            })?;
        if server["state"] != "tools" && server["state"] != "no_tools" {
            bail!(
                "the agent did not connect to the scenario's server: {}",
                server["diagnostic"]
                    .as_str()
                    .unwrap_or("no diagnostic given")
            );
        }
        eprintln!(
            "conformance-client: connected ({}), {} tool(s)",
            server["connection"].as_str().unwrap_or("no details"),
            server["tool_count"]
        );

        let turn = self.expect(
            &api,
            "POST",
            &format!("/api/chats/{chat_id}/turns"),
            Some(&json!({"mode": "default"})),
            200,
        )?;
        let Some(turn_id) = turn["turn_id"].as_str() else {
            bail!(
                "the chat's turn was not stored: {}",
                turn["turn_error"].as_str().unwrap_or("no reason given")
            );
        };
        let names: Vec<&str> = turn["tools"]
            .as_array()
            .map(|tools| tools.iter().filter_map(|t| t["name"].as_str()).collect())
            .unwrap_or_default();
        eprintln!("conformance-client: the turn carries {names:?}");

        let Some(call) = CALLS.iter().find(|c| c.scenario == scenario) else {
            // Connecting and listing is all the other scenarios ask of a client.
            return Ok(());
        };
        let wanted = format!("{SERVER_NAME}__{}", call.tool);
        let Some(name) = names
            .iter()
            .find(|n| **n == wanted || n.ends_with(&format!("__{}", call.tool)))
        else {
            bail!(
                "the turn does not carry the scenario's tool `{}` (it carries {names:?})",
                call.tool
            );
        };
        let answer = self.expect(
            &api,
            "POST",
            &format!("/api/chats/{chat_id}/turns/{turn_id}/tool-calls"),
            Some(&json!({
                "call_id": "conformance-1",
                "name": name,
                "arguments": (call.arguments)(),
                "timeout_ms": 20_000,
                "wait_ms": 25_000,
            })),
            200,
        )?;
        let status = answer["status"].as_str().unwrap_or("missing");
        if status != "complete" {
            bail!(
                "the call of `{name}` ended `{status}` ({}): {}",
                answer["reason"].as_str().unwrap_or("no reason"),
                answer["model_text"].as_str().unwrap_or_default()
            );
        }
        let result = &answer["result"];
        let texts: Vec<&str> = result["content"]
            .as_array()
            .map(|blocks| blocks.iter().filter_map(|b| b["text"].as_str()).collect())
            .unwrap_or_default();
        if result["isError"] == true || !texts.iter().any(|t| t.contains(call.expect)) {
            bail!(
                "the call of `{name}` answered {texts:?}, not a result containing {:?}",
                call.expect
            );
        }
        eprintln!("conformance-client: `{name}` answered {texts:?}");
        Ok(())
    }

    /// Starts `ctxsync server` on loopback ephemeral ports with a fresh API token, and
    /// answers its agent API URL and its chat API.
    fn start_server(&mut self) -> Result<(String, ChatApi)> {
        let token = random_hex()?;
        let out = self.scratch.path.join("server.out");
        let mut command = Command::new(&self.ctxsync);
        command
            .arg("server")
            .arg("--data-dir")
            .arg(self.scratch.path.join("data"))
            .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
            // The token by the environment: arguments show in `ps`.
            .env("CTXSYNC_API_TOKEN", &token);
        for inherited in [
            "CTXSYNC_DATABASE_URL",
            "CTXSYNC_TLS_CERT",
            "CTXSYNC_TLS_KEY",
            "CTXSYNC_LOG_FORMAT",
        ] {
            command.env_remove(inherited);
        }
        let server = self.server.insert(Process::spawn(
            "ctxsync server",
            command,
            &out,
            &self.scratch.path.join("server.log"),
        )?);
        let (mut agent_url, mut http_url) = (None, None);
        while agent_url.is_none() || http_url.is_none() {
            for line in std::fs::read_to_string(&out).unwrap_or_default().lines() {
                if let Some(url) = line.strip_prefix("agent API (gRPC):") {
                    agent_url = Some(url.trim().to_owned());
                } else if let Some(url) = line.strip_prefix("chat API (HTTP):") {
                    http_url = Some(url.trim().to_owned());
                }
            }
            server.check_running()?;
            pause(self.deadline, "the server to announce its addresses")?;
        }
        let http_url = http_url.unwrap_or_default();
        let authority = http_url
            .strip_prefix("http://")
            .with_context(|| format!("the server's chat API is not plain http: {http_url}"))?;
        let api = ChatApi {
            authority: authority.trim_end_matches('/').to_owned(),
            token,
        };
        Ok((agent_url.unwrap_or_default(), api))
    }

    fn start_agent(
        &mut self,
        agent_url: &str,
        token: &str,
        workspace: &Path,
        env: &[(&str, String)],
    ) -> Result<()> {
        let mut command = Command::new(&self.ctxsync);
        command.envs(env.iter().map(|(name, value)| (name, value)));
        command
            .arg("agent")
            .args(["--server", agent_url, "--no-plugins"])
            .arg("--workspace")
            .arg(workspace)
            .env("CTXSYNC_AGENT_TOKEN", token)
            // Nothing of this machine's home (skills, plugins) in the scenario's workspace.
            .env("HOME", &self.scratch.path)
            .env_remove("CTXSYNC_CA_CERT")
            .env_remove("CTXSYNC_LOG_FORMAT");
        let log = self.scratch.path.join("agent.log");
        self.agent = Some(Process::spawn("ctxsync agent", command, &log, &log)?);
        Ok(())
    }

    /// Waits until the chat API says the agent's current run finished discovery.
    fn await_discovery(&self, api: &ChatApi, agent_id: &str) -> Result<()> {
        loop {
            let context = self.expect(
                api,
                "GET",
                &format!("/api/agents/{agent_id}/context"),
                None,
                200,
            )?;
            let discovery = &context["mcp_discovery"];
            if discovery["phase"] == "complete" && discovery["stale"] == false {
                return Ok(());
            }
            for process in [&self.agent, &self.server].into_iter().flatten() {
                process.check_running()?;
            }
            pause(self.deadline, "discovery to complete")
                .with_context(|| format!("the agent's discovery was last {discovery}"))?;
        }
    }

    /// Sends one request and answers its body when its status is `want`.
    fn expect(
        &self,
        api: &ChatApi,
        method: &str,
        path: &str,
        body: Option<&Value>,
        want: u16,
    ) -> Result<Value> {
        let left = self
            .deadline
            .checked_duration_since(Instant::now())
            .filter(|left| !left.is_zero())
            .with_context(|| {
                format!("out of time before {method} {path}: the client's budget is {BUDGET:?}")
            })?;
        let answer = api.call(method, path, body, left)?;
        if answer.status != want {
            bail!(
                "{method} {path} answered {} instead of {want}: {}",
                answer.status,
                answer.body["error"]
                    .as_str()
                    .map_or_else(|| answer.body.to_string(), str::to_owned)
            );
        }
        Ok(answer.body)
    }
}

/// Sleeps a little, or fails when `deadline` has passed while waiting for `what`.
fn pause(deadline: Instant, what: &str) -> Result<()> {
    if Instant::now() >= deadline {
        bail!("gave up waiting for {what} after the client's budget of {BUDGET:?}");
    }
    std::thread::sleep(Duration::from_millis(100));
    Ok(())
}

fn text(body: &Value, field: &str) -> Result<String> {
    body[field]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("the chat API's answer has no `{field}`"))
}

/// Writes the workspace's `.mcp.json` naming the scenario's server; answers the
/// environment the agent needs for it (a client-credentials scenario's client).
fn write_workspace(
    workspace: &Path,
    scenario: &str,
    url: &str,
) -> Result<Vec<(&'static str, String)>> {
    let mut entry = json!({"type": "http", "url": url});
    let mut secrets = Vec::new();
    if scenario.starts_with("auth/client-credentials") {
        // The workspace is given the client the suite registered, as a person would
        // configure it: the id and secret in the agent's environment, named by the
        // entry's `oauth` block, never written into the file.
        let context: Value =
            serde_json::from_str(&std::env::var("MCP_CONFORMANCE_CONTEXT").unwrap_or_default())
                .context("the suite gave no client in MCP_CONFORMANCE_CONTEXT")?;
        let field = |name: &str| {
            context[name]
                .as_str()
                .map(str::to_owned)
                .with_context(|| format!("the suite's MCP_CONFORMANCE_CONTEXT has no `{name}`"))
        };
        secrets.push(("CONFORMANCE_CLIENT_ID", field("client_id")?));
        secrets.push(("CONFORMANCE_CLIENT_SECRET", field("client_secret")?));
        entry["oauth"] = json!({
            "clientId": "${CONFORMANCE_CLIENT_ID}",
            "clientSecret": "${CONFORMANCE_CLIENT_SECRET}",
            "grant": "client_credentials",
        });
    }
    let config = json!({"mcpServers": {SERVER_NAME: entry}});
    std::fs::write(workspace.join(".mcp.json"), config.to_string())
        .context("writing the workspace's .mcp.json")?;
    Ok(secrets)
}

/// 128 random bits, hex: the run's API token.
fn random_hex() -> Result<String> {
    let mut bytes = [0u8; 16];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").context("opening /dev/urandom")?,
        &mut bytes,
    )?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// A temp directory for one run (database, workspace, logs), removed when dropped.
struct Scratch {
    path: PathBuf,
}

impl Scratch {
    fn new() -> Result<Self> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos();
        let path = std::env::temp_dir().join(format!(
            "ctxsync-conformance-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&path)
            .with_context(|| format!("creating the temp directory {}", path.display()))?;
        Ok(Self { path })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A child process with its log; killed when dropped unless stopped.
struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
    done: bool,
}

impl Process {
    fn spawn(name: &'static str, mut command: Command, out: &Path, log: &Path) -> Result<Self> {
        let out_file = std::fs::File::create(out)?;
        let log_file = if out == log {
            out_file.try_clone()?
        } else {
            std::fs::File::create(log)?
        };
        let child = command
            .stdin(Stdio::null())
            .stdout(out_file)
            .stderr(log_file)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        Ok(Self {
            name,
            child,
            log: log.to_path_buf(),
            done: false,
        })
    }

    /// Fails, with the end of its log, when the process has exited.
    fn check_running(&self) -> Result<()> {
        let pid = self.child.id();
        // `/proc` rather than `try_wait`, which needs `&mut` and would reap it.
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let running = state
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| !matches!(state, 'Z' | 'X'));
        if !running {
            bail!("{} exited early; its log ends:\n{}", self.name, self.tail());
        }
        Ok(())
    }

    /// SIGTERM, then waits [`STOP_GRACE`] for a clean exit; kills it past that.
    fn stop(mut self) -> Result<()> {
        self.done = true;
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "{} had exited before it was stopped ({}); its log ends:\n{}",
                self.name,
                describe(status),
                self.tail()
            );
        }
        // `kill` as the shell's builtin: there is no signal API in std, and a minimal
        // system may lack the kill program.
        let pid = self.child.id().to_string();
        Command::new("sh")
            .args(["-c", "kill -TERM \"$1\"", "sh", &pid])
            .status()
            .with_context(|| format!("sending SIGTERM to {}", self.name))?;
        let started = Instant::now();
        while started.elapsed() < STOP_GRACE {
            if let Some(status) = self.child.try_wait()? {
                if !status.success() {
                    bail!(
                        "{} did not exit cleanly after SIGTERM ({}); its log ends:\n{}",
                        self.name,
                        describe(status),
                        self.tail()
                    );
                }
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        bail!(
            "{} was still running {STOP_GRACE:?} after SIGTERM and was killed",
            self.name
        )
    }

    /// The last lines of its log.
    fn tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn describe(status: ExitStatus) -> String {
    match status.code() {
        Some(code) => format!("exit code {code}"),
        None => "ended by a signal".into(),
    }
}
