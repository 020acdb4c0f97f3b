//! `cargo xtask conformance-client --ctxsync BIN URL`: the client command the conformance
//! suite starts for one client scenario (the scenario's server URL comes last, its name in
//! `MCP_CONFORMANCE_SCENARIO`). It drives ctxsync's real product path: a `ctxsync server`
//! (embedded SQLite in a temp dir, loopback ephemeral ports), an agent created through the
//! chat API, a `ctxsync agent` whose workspace's `.mcp.json` names the scenario's server,
//! discovery awaited through the chat API, a chat with a turn, and the scenario's tool
//! called through the turn's tool-call route. For an `auth/` scenario whose server asks a
//! person to sign in, the client plays that person: it starts the sign-in through the
//! chat API and follows the authorization URL like a browser ([`super::browser`]) back to
//! ctxsync's callback, then waits for the server's tools. Everything it starts is stopped with SIGTERM
//! before it exits (killed if it does not stop), and it finishes well inside the suite's
//! timeout, so the suite never has to kill it and orphan the server and agent.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use super::browser;
use super::http::{ChatApi, LoopbackUrl};

/// How long the client may work before it stops its processes: with two [`STOP_GRACE`]s
/// it stays below the suite's timeout ([`super::SUITE_TIMEOUT_MS`]), so the suite never
/// kills it and leaves the server and agent behind.
const BUDGET: Duration = Duration::from_secs(40);
/// How long a stopped process may take to exit after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(8);
/// The server's name in the workspace's `.mcp.json`.
const SERVER_NAME: &str = "scenario";
/// The client id the agent offers an authorization server that takes client id metadata
/// documents (SEP-991): the suite's CIMD scenario expects exactly this URL, and fetches
/// nothing from it.
const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";
/// How many times the person signs in during one run: once, and once more when the
/// server asks for more (a step-up to more scopes); then they give up, as a person would.
const MAX_SIGN_INS: usize = 2;
/// How long the person gives ctxsync to say where a server stands when the answer may
/// not change what it shows: after a sign-in to a server that refuses every token or
/// whose tools the panel showed already, and for a server to ask for a sign-in again
/// after a call it refused.
const SETTLE: Duration = Duration::from_secs(3);

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
/// only on the stream the client reopens after the server closed the first one; every
/// `auth/` scenario's server (the entry ending in `/` stands for the prefix) lists
/// `test-tool`, which answers "test" to a caller holding a token with the scopes it asks.
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
    ScenarioCall {
        scenario: "auth/",
        tool: "test-tool",
        arguments: || json!({}),
        expect: "test",
    },
];

impl ScenarioCall {
    /// The call `scenario` expects, if any.
    fn of(scenario: &str) -> Option<&'static ScenarioCall> {
        CALLS.iter().find(|call| {
            call.scenario == scenario
                || (call.scenario.ends_with('/') && scenario.starts_with(call.scenario))
        })
    }
}

/// What a scenario asks of the person at ctxsync's side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SignIn {
    /// Nothing: the server needs no sign-in, or the entry's `oauth` block carries a
    /// client the agent signs in with by itself (client credentials).
    NotNeeded,
    /// The person signs in whenever ctxsync asks ([`MAX_SIGN_INS`] times at most); the
    /// server then lists its tools and answers the scenario's call.
    Granted,
    /// The same person, but the server refuses every token (`auth/scope-retry-limit`):
    /// it must stay without tools, and the run ends once the person stopped signing in.
    /// The suite counts the authorization requests, which in ctxsync only a person makes.
    Refused,
}

impl SignIn {
    fn of(scenario: &str) -> Self {
        match scenario {
            "auth/scope-retry-limit" => Self::Refused,
            s if s.starts_with("auth/client-credentials") => Self::NotNeeded,
            s if s.starts_with("auth/") => Self::Granted,
            _ => Self::NotNeeded,
        }
    }
}

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
        let sign_in = SignIn::of(scenario);
        let mut sign_ins = 0;
        let server = match sign_in {
            SignIn::NotNeeded => panel_server(&chat)?.clone(),
            SignIn::Granted | SignIn::Refused => self.sign_in_as_asked(
                &api,
                &agent_id,
                &chat_id,
                panel_server(&chat)?,
                sign_in,
                &mut sign_ins,
            )?,
        };
        if sign_in == SignIn::Refused {
            // No call: the server refuses it too. The suite judges the sign-ins.
            return Ok(());
        }
        if server["state"] != "tools" && server["state"] != "no_tools" {
            bail!(
                "the agent did not connect to the scenario's server (`{}`): {}",
                server["state"].as_str().unwrap_or("missing"),
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

        let Some(call) = ScenarioCall::of(scenario) else {
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
        let calls = format!("/api/chats/{chat_id}/turns/{turn_id}/tool-calls");
        let mut answer = self.call_tool(&api, &calls, name, call, 1)?;
        if answer["status"] != "complete"
            && sign_in == SignIn::Granted
            && sign_ins < MAX_SIGN_INS
            && self.asks_sign_in_after(&api, &agent_id, &answer)?
        {
            // A step-up: the server wants more scopes for the call than for the listing.
            self.sign_in_again(&api, &agent_id, &chat_id, &mut sign_ins)?;
            answer = self.call_tool(&api, &calls, name, call, 2)?;
        }
        check_answer(name, call, &answer)
    }

    /// Calls `name` through the turn's tool-call route (`calls`), waiting for its end.
    fn call_tool(
        &self,
        api: &ChatApi,
        calls: &str,
        name: &str,
        call: &ScenarioCall,
        attempt: usize,
    ) -> Result<Value> {
        self.expect(
            api,
            "POST",
            calls,
            Some(&json!({
                "call_id": format!("conformance-{attempt}"),
                "name": name,
                "arguments": (call.arguments)(),
                "timeout_ms": 20_000,
                "wait_ms": 25_000,
            })),
            200,
        )
    }

    /// Whether a call that did not complete was refused for want of a sign-in: its
    /// reason says so, or the agent's MCP servers soon do (a 403 `insufficient_scope`
    /// reaches the server's state with the agent's next report).
    fn asks_sign_in_after(&self, api: &ChatApi, agent_id: &str, answer: &Value) -> Result<bool> {
        eprintln!(
            "conformance-client: the call ended `{}` ({}): {}",
            answer["status"].as_str().unwrap_or("missing"),
            answer["reason"].as_str().unwrap_or("no reason"),
            answer["model_text"].as_str().unwrap_or_default()
        );
        let patience = Instant::now() + SETTLE;
        loop {
            let (state, reason) = self.sign_in_state(api, agent_id)?;
            if state == "needs_authorization" {
                eprintln!("conformance-client: the server needs a sign-in again: {reason}");
                return Ok(true);
            }
            if Instant::now() >= patience {
                // The call's own reason is enough: the sign-in route says if it is not.
                return Ok(answer["reason"] == "needs_authorization");
            }
            pause(self.deadline, "the server to ask for a sign-in again")?;
        }
    }

    /// The person's part before the call: ctxsync must say the server needs a sign-in
    /// (its `panel` item says what the chat shows), and the person signs in as often as
    /// it asks, [`MAX_SIGN_INS`] times at most. Answers the server's panel item as the
    /// agent reported it after the last sign-in.
    fn sign_in_as_asked(
        &self,
        api: &ChatApi,
        agent_id: &str,
        chat_id: &str,
        panel: &Value,
        sign_in: SignIn,
        sign_ins: &mut usize,
    ) -> Result<Value> {
        let (asked, reason) = self.sign_in_state(api, agent_id)?;
        if asked != "needs_authorization" {
            bail!(
                "the agent did not find that the scenario's server needs a sign-in: the agent's \
                 MCP servers say `{asked}` ({reason}), the panel `{}` ({})",
                panel["state"].as_str().unwrap_or("missing"),
                panel["diagnostic"].as_str().unwrap_or("no diagnostic")
            );
        }
        eprintln!("conformance-client: the server needs a sign-in: {reason}");
        let mut shown = panel.clone();
        let server = loop {
            let since = self.snapshot_version(api, agent_id)?;
            self.sign_in(api, agent_id, sign_ins)?;
            // A server that refuses every token may leave the report as it was.
            let patience = match sign_in {
                SignIn::Refused => Instant::now() + SETTLE,
                SignIn::Granted | SignIn::NotNeeded => self.deadline,
            };
            let server = self.await_report(api, agent_id, chat_id, &shown, since, patience)?;
            shown = server.clone();
            if server["state"] == "tools" || *sign_ins >= MAX_SIGN_INS {
                break server;
            }
            let (state, reason) = self.sign_in_state(api, agent_id)?;
            if state != "needs_authorization" {
                break server;
            }
            eprintln!("conformance-client: the server needs a sign-in again: {reason}");
        };
        if sign_in == SignIn::Refused {
            if server["state"] == "tools" {
                bail!(
                    "the server lists its tools though it refuses every token: the panel says {server}"
                );
            }
            eprintln!(
                "conformance-client: after {sign_ins} sign-in(s) the server stays `{}`: {}",
                server["state"].as_str().unwrap_or("missing"),
                server["diagnostic"]
                    .as_str()
                    .unwrap_or("no diagnostic given")
            );
        }
        Ok(server)
    }

    /// Signs in once more (the server asked for it after a call) and waits for its tools.
    fn sign_in_again(
        &self,
        api: &ChatApi,
        agent_id: &str,
        chat_id: &str,
        sign_ins: &mut usize,
    ) -> Result<()> {
        let since = self.snapshot_version(api, agent_id)?;
        let chat = self.expect(api, "GET", &format!("/api/chats/{chat_id}"), None, 200)?;
        let shown = panel_server(&chat)?.clone();
        self.sign_in(api, agent_id, sign_ins)?;
        // The panel may have shown the tools all along: the wait is for the agent's
        // report after the sign-in, or, if it reports nothing new, a little while.
        let patience = match shown["state"].as_str() {
            Some("tools") => Instant::now() + SETTLE,
            _ => self.deadline,
        };
        let server = self.await_report(api, agent_id, chat_id, &shown, since, patience)?;
        if server["state"] != "tools" {
            bail!(
                "after sign-in {sign_ins} the agent reported the server `{}`: {}",
                server["state"].as_str().unwrap_or("missing"),
                server["diagnostic"]
                    .as_str()
                    .unwrap_or("no diagnostic given")
            );
        }
        Ok(())
    }

    /// One sign-in, as a person does it: asks ctxsync to start it, then opens the
    /// authorization URL in the browser, which comes back to ctxsync's callback.
    fn sign_in(&self, api: &ChatApi, agent_id: &str, sign_ins: &mut usize) -> Result<()> {
        *sign_ins += 1;
        let attempt = *sign_ins;
        let started = self.expect(
            api,
            "POST",
            &format!("/api/agents/{agent_id}/mcp-servers/{SERVER_NAME}/authorization"),
            None,
            200,
        )?;
        let url = LoopbackUrl::parse(&text(&started, "authorization_url")?)
            .context("the authorization URL ctxsync answered")?;
        // The URL's query carries the state: only what the scenarios judge is shown.
        eprintln!(
            "conformance-client: sign-in {attempt}: the browser opens {url} (client_id {}, \
             scope {})",
            url.query_param("client_id").as_deref().unwrap_or("none"),
            url.query_param("scope").as_deref().unwrap_or("none")
        );
        let page = browser::sign_in(&url, api_port(api)?, self.deadline)
            .with_context(|| format!("sign-in {attempt}"))?;
        eprintln!("conformance-client: ctxsync's callback says: {page}");
        Ok(())
    }

    /// Where the agent's MCP servers say the scenario's server stands on sign-in, and
    /// why.
    fn sign_in_state(&self, api: &ChatApi, agent_id: &str) -> Result<(String, String)> {
        let servers = self.expect(
            api,
            "GET",
            &format!("/api/agents/{agent_id}/mcp-servers"),
            None,
            200,
        )?;
        let server = servers["servers"]
            .as_array()
            .and_then(|servers| servers.iter().find(|s| s["name"] == SERVER_NAME))
            .with_context(|| {
                format!("the agent's MCP servers do not list `{SERVER_NAME}`: {servers}")
            })?;
        Ok((
            server["sign_in"].as_str().unwrap_or("missing").to_owned(),
            server["reason"]
                .as_str()
                .unwrap_or("no reason given")
                .to_owned(),
        ))
    }

    /// The version of the agent's stored snapshot (0 before its first).
    fn snapshot_version(&self, api: &ChatApi, agent_id: &str) -> Result<u64> {
        let context = self.expect(
            api,
            "GET",
            &format!("/api/agents/{agent_id}/context"),
            None,
            200,
        )?;
        Ok(context["snapshot"]["version"].as_u64().unwrap_or(0))
    }

    /// Waits after a sign-in until the chat's panel shows the server's tools where it
    /// showed something else before (`shown`), or the agent reported again (a snapshot
    /// newer than `since`, its discovery complete); at `patience`, when that comes before
    /// the deadline, answers the panel's item as it is.
    fn await_report(
        &self,
        api: &ChatApi,
        agent_id: &str,
        chat_id: &str,
        shown: &Value,
        since: u64,
        patience: Instant,
    ) -> Result<Value> {
        loop {
            let chat = self.expect(api, "GET", &format!("/api/chats/{chat_id}"), None, 200)?;
            let server = panel_server(&chat).ok().cloned().unwrap_or(Value::Null);
            if server["state"] == "tools" && shown["state"] != "tools" {
                return Ok(server);
            }
            let context = self.expect(
                api,
                "GET",
                &format!("/api/agents/{agent_id}/context"),
                None,
                200,
            )?;
            let discovery = &context["mcp_discovery"];
            let reported = context["snapshot"]["version"].as_u64().unwrap_or(0) > since
                && discovery["phase"] == "complete"
                && discovery["stale"] == false;
            let now = Instant::now();
            if (reported && !server.is_null()) || (now >= patience && patience < self.deadline) {
                return Ok(server);
            }
            for process in [&self.agent, &self.server].into_iter().flatten() {
                process.check_running()?;
            }
            pause(self.deadline, "the server's tools after the sign-in").with_context(|| {
                format!(
                    "the panel last showed the server as {server}; the agent's discovery was \
                     {discovery}"
                )
            })?;
        }
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
            .args(["--oauth-client-metadata-url", CLIENT_METADATA_URL])
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

/// The scenario's server as the chat's context panel (`chat["context"]`) shows it.
fn panel_server(chat: &Value) -> Result<&Value> {
    chat["context"]["mcp"]["servers"]
        .as_array()
        .and_then(|servers| servers.iter().find(|s| s["name"] == SERVER_NAME))
        .with_context(|| {
            format!("the chat's context panel does not list the server `{SERVER_NAME}`")
        })
}

/// Fails unless the call of `name` completed with a text containing what `call` expects.
fn check_answer(name: &str, call: &ScenarioCall, answer: &Value) -> Result<()> {
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

/// The chat API's port: the browser knows ctxsync's callback by it.
fn api_port(api: &ChatApi) -> Result<u16> {
    api.authority
        .rsplit_once(':')
        .and_then(|(_, port)| port.parse().ok())
        .with_context(|| format!("the chat API's address {} has no port", api.authority))
}

fn text(body: &Value, field: &str) -> Result<String> {
    body[field]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("the chat API's answer has no `{field}`"))
}

/// Writes the workspace's `.mcp.json` naming the scenario's server; answers the
/// environment the agent needs for it (the client the suite registered, if it did).
fn write_workspace(
    workspace: &Path,
    scenario: &str,
    url: &str,
) -> Result<Vec<(&'static str, String)>> {
    let mut entry = json!({"type": "http", "url": url});
    let client_credentials = scenario.starts_with("auth/client-credentials");
    let context = std::env::var("MCP_CONFORMANCE_CONTEXT").ok();
    let mut secrets = Vec::new();
    if let Some(client) = suite_client(context.as_deref(), client_credentials)? {
        // The workspace is given the client the suite registered, as a person would
        // configure it: the id and secret in the agent's environment, named by the
        // entry's `oauth` block, never written into the file. Without a `grant` the
        // agent uses it for the authorization code a person's sign-in brings.
        secrets.push(("CONFORMANCE_CLIENT_ID", client.id));
        let mut oauth = json!({"clientId": "${CONFORMANCE_CLIENT_ID}"});
        if let Some(secret) = client.secret {
            secrets.push(("CONFORMANCE_CLIENT_SECRET", secret));
            oauth["clientSecret"] = json!("${CONFORMANCE_CLIENT_SECRET}");
        }
        if client_credentials {
            oauth["grant"] = json!("client_credentials");
        }
        entry["oauth"] = oauth;
    }
    let config = json!({"mcpServers": {SERVER_NAME: entry}});
    std::fs::write(workspace.join(".mcp.json"), config.to_string())
        .context("writing the workspace's .mcp.json")?;
    Ok(secrets)
}

/// A client the suite registered for a scenario (`auth/pre-registration`, the client
/// credentials ones).
#[derive(Debug, PartialEq, Eq)]
struct SuiteClient {
    id: String,
    secret: Option<String>,
}

/// The client in the suite's `MCP_CONFORMANCE_CONTEXT` (`context`), if it names one; a
/// client credentials scenario needs one with a secret.
fn suite_client(context: Option<&str>, client_credentials: bool) -> Result<Option<SuiteClient>> {
    let context: Value = match context {
        Some(context) => serde_json::from_str(context)
            .context("the suite's MCP_CONFORMANCE_CONTEXT is not JSON")?,
        None if client_credentials => bail!("the suite gave no client in MCP_CONFORMANCE_CONTEXT"),
        None => return Ok(None),
    };
    let field = |name: &str| context[name].as_str().map(str::to_owned);
    let client = field("client_id").map(|id| SuiteClient {
        id,
        secret: field("client_secret"),
    });
    match client {
        Some(SuiteClient { secret: None, .. }) | None if client_credentials => {
            bail!("the suite's MCP_CONFORMANCE_CONTEXT has no `client_id` and `client_secret`")
        }
        client => Ok(client),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scenario_has_its_sign_in_and_call() {
        for (scenario, sign_in, tool) in [
            ("initialize", SignIn::NotNeeded, None),
            ("tools_call", SignIn::NotNeeded, Some("add_numbers")),
            ("sse-retry", SignIn::NotNeeded, Some("test_reconnection")),
            (
                "auth/client-credentials-basic",
                SignIn::NotNeeded,
                Some("test-tool"),
            ),
            ("auth/metadata-default", SignIn::Granted, Some("test-tool")),
            ("auth/scope-step-up", SignIn::Granted, Some("test-tool")),
            ("auth/pre-registration", SignIn::Granted, Some("test-tool")),
            ("auth/scope-retry-limit", SignIn::Refused, Some("test-tool")),
            ("authorize", SignIn::NotNeeded, None),
        ] {
            assert_eq!(SignIn::of(scenario), sign_in, "{scenario}");
            assert_eq!(
                ScenarioCall::of(scenario).map(|c| c.tool),
                tool,
                "{scenario}"
            );
        }
    }

    #[test]
    fn the_suites_client_comes_from_its_context() {
        let both = r#"{"name":"auth/pre-registration","client_id":"pre","client_secret":"s"}"#;
        let client = |id: &str, secret: Option<&str>| {
            Some(SuiteClient {
                id: id.into(),
                secret: secret.map(str::to_owned),
            })
        };
        assert_eq!(
            suite_client(Some(both), false).unwrap(),
            client("pre", Some("s"))
        );
        assert_eq!(
            suite_client(Some(both), true).unwrap(),
            client("pre", Some("s"))
        );
        let public = r#"{"client_id":"pub"}"#;
        assert_eq!(
            suite_client(Some(public), false).unwrap(),
            client("pub", None)
        );
        assert_eq!(suite_client(None, false).unwrap(), None);
        assert_eq!(suite_client(Some(r#"{"name":"x"}"#), false).unwrap(), None);
        for (context, words) in [
            (None, "gave no client"),
            (Some(public), "no `client_id` and `client_secret`"),
            (Some("{}"), "no `client_id` and `client_secret`"),
            (Some("not json"), "is not JSON"),
        ] {
            let error = suite_client(context, true).unwrap_err().to_string();
            assert!(error.contains(words), "{context:?}: {error}");
        }
    }
}
