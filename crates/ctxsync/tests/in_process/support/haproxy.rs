//! Two `ctxsync server` replicas on one PostgreSQL test database behind a real HAProxy
//! (Debian's package): HTTP mode, round-robin, health checks on `/healthz`, retries with
//! redispatch, timeouts long enough for event streams. HAProxy names the replica that
//! answered in [`SERVED_BY`], so the product needs no test-only header.
//!
//! A second frontend balances the agents' gRPC (h2 both ways, round-robin, each server
//! tracking its chat API's health) with an idle timeout of only [`GRPC_IDLE_TIMEOUT`], so a
//! call stream that carries no heartbeats dies there as behind a real balancer. An agent
//! talks gRPC through it ([`Via::Balancer`]) or to one replica directly ([`Via::Replica`]).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::Duration;

use ctxsync_persistence::test_support::TestDatabase;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The bearer token every replica shares.
pub(crate) const API_TOKEN: &str = "load-balanced-test-token-0123456789";
/// The response header HAProxy sets to the name of the replica that answered.
pub(crate) const SERVED_BY: &str = "x-served-by";
/// The replicas' names in HAProxy's configuration, in start order.
pub(crate) const REPLICAS: [&str; 2] = ["a", "b"];
/// The gRPC frontend's idle timeout: far below the product's default heartbeat (15 s),
/// so only a stream whose heartbeats are set below it survives.
pub(crate) const GRPC_IDLE_TIMEOUT: Duration = Duration::from_secs(3);
/// Bound on starting the replicas and HAProxy, and on HAProxy noticing a dead replica.
const START_WAIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(50);

const CTXSYNC: &str = env!("CARGO_BIN_EXE_ctxsync");

/// HAProxy: Debian's by default; `CTXSYNC_HAPROXY` points elsewhere.
pub(crate) fn haproxy_path() -> PathBuf {
    std::env::var_os("CTXSYNC_HAPROXY").map_or_else(|| "/usr/sbin/haproxy".into(), PathBuf::from)
}

/// Whether HAProxy is installed. In CI a missing HAProxy fails the test; elsewhere the
/// test says loudly that it skips.
pub(crate) fn haproxy_available() -> bool {
    let path = haproxy_path();
    if path.exists() {
        return true;
    }
    let path = path.display();
    if std::env::var_os("CI").is_some() {
        panic!(
            "{path} is required in CI (apt-get install haproxy, or set CTXSYNC_HAPROXY); `cargo xtask test` installs it as root"
        );
    }
    eprintln!(
        "\n!!!!! SKIPPED: the load-balanced test needs {path} (apt-get install haproxy) !!!!!\n"
    );
    false
}

/// Where HAProxy listens.
struct Ports {
    chat: u16,
    grpc: u16,
    stats: u16,
}

/// HAProxy's configuration: the chat API of both replicas behind one frontend, their
/// agent API behind another, and a stats listener the tests read per-server sessions and
/// states from.
fn haproxy_config(ports: &Ports, replicas: &[&Replica]) -> String {
    let Ports { chat, grpc, stats } = ports;
    let servers: String = replicas
        .iter()
        .map(|r| format!("    server {} {}\n", r.name, r.http_addr))
        .collect();
    // `track`: a gRPC server is down exactly when its replica's chat API is.
    let grpc_servers: String = replicas
        .iter()
        .map(|r| {
            format!(
                "    server {0} {1} proto h2 track replicas/{0}\n",
                r.name,
                r.grpc_addr()
            )
        })
        .collect();
    let idle = GRPC_IDLE_TIMEOUT.as_millis();
    format!(
        "global
    maxconn 256
    nbthread 1

defaults
    mode http
    timeout connect 1s
    timeout http-request 10s
    timeout queue 5s
    timeout check 1s
    # Event streams stay open for minutes; the replicas send a keep-alive every 15 s.
    timeout client 10m
    timeout server 10m
    timeout tunnel 10m
    # A refused connection (a killed replica not yet marked down) is retried on the other.
    retries 3
    option redispatch 1
    retry-on conn-failure empty-response

frontend chat_api
    bind 127.0.0.1:{chat}
    default_backend replicas

backend replicas
    balance roundrobin
    option httpchk GET /healthz
    http-check expect status 200
    default-server check inter 200ms fall 2 rise 1
    http-response set-header X-Served-By %[srv_name]
{servers}
# The agents' gRPC, h2 on both sides. The short timeouts are the point: a stream silent
# in both directions for {idle} ms is cut, as a cloud balancer's idle timeout would.
frontend agent_api
    bind 127.0.0.1:{grpc} proto h2
    timeout client {idle}ms
    default_backend agent_replicas

backend agent_replicas
    balance roundrobin
    timeout server {idle}ms
    # An h2 stream in HTTP mode is no tunnel; set anyway so the defaults' 10m cannot apply.
    timeout tunnel {idle}ms
{grpc_servers}
listen stats
    bind 127.0.0.1:{stats}
    stats enable
    stats uri /stats
"
    )
}

/// A free loopback port (released again for the process that binds it next).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// One `ctxsync server` replica process.
pub(crate) struct Replica {
    pub name: &'static str,
    child: Child,
    /// The agent API's URL (`http://…`), for agents that talk to this replica directly.
    pub grpc_url: String,
    /// The chat API's `host:port`.
    pub http_addr: String,
}

impl Replica {
    /// Starts the replica `name` on ports of its own, or on `addresses` (gRPC, HTTP) when
    /// it comes back where HAProxy expects it.
    async fn start(
        name: &'static str,
        database_url: &str,
        dir: &Path,
        extra: &[String],
        addresses: Option<(&str, &str)>,
    ) -> Self {
        let (grpc_addr, http_addr) = addresses.unwrap_or(("127.0.0.1:0", "127.0.0.1:0"));
        // Appended: a restarted replica's log follows its killed predecessor's.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(format!("replica-{name}.log")))
            .unwrap();
        let mut child = Command::new(CTXSYNC)
            .args(["server", "--database-url", database_url])
            .args(["--grpc-addr", grpc_addr, "--http-addr", http_addr])
            .args(["--api-token", API_TOKEN])
            .arg("--data-dir")
            .arg(dir.join(format!("data-{name}")))
            .args(extra)
            .env_remove("CTXSYNC_DATABASE_URL")
            .env_remove("CTXSYNC_API_TOKEN")
            .env("RUST_LOG", "info,rmcp=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("spawning ctxsync server");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut grpc, mut http) = (None, None);
        while grpc.is_none() || http.is_none() {
            let line = tokio::time::timeout(START_WAIT, lines.next_line())
                .await
                .expect("the replica prints its addresses")
                .unwrap()
                .unwrap_or_else(|| {
                    panic!(
                        "replica {name} exited at start:\n{}",
                        std::fs::read_to_string(dir.join(format!("replica-{name}.log")))
                            .unwrap_or_default()
                    )
                });
            if let Some(url) = line.strip_prefix("agent API (gRPC): ") {
                grpc = Some(url.trim().to_owned());
            } else if let Some(url) = line.strip_prefix("chat API (HTTP):") {
                http = Some(url.trim().trim_start_matches("http://").to_owned());
            }
        }
        // Nobody reads the rest of stdout; a task drains it so the replica never blocks.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self {
            name,
            child,
            grpc_url: grpc.unwrap(),
            http_addr: http.unwrap(),
        }
    }

    /// The agent API's `host:port`.
    pub(crate) fn grpc_addr(&self) -> &str {
        self.grpc_url.trim_start_matches("http://")
    }
}

/// Where an agent sends its gRPC.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Via<'a> {
    /// HAProxy's gRPC frontend: each of its requests may land on either replica.
    Balancer,
    /// The named replica, directly.
    Replica(&'a str),
}

/// One answer through the balancer.
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: u16,
    /// The replica HAProxy sent the request to.
    pub served_by: String,
    /// The JSON body, or `null`.
    pub body: Value,
}

/// A server's row in HAProxy's statistics.
#[derive(Debug)]
pub(crate) struct ServerStats {
    pub name: String,
    /// Requests it is serving now (an open event stream counts until it ends).
    pub current: u64,
    /// Requests it has been sent so far.
    pub total: u64,
    /// `UP`, `DOWN`, …
    pub status: String,
}

/// Two replicas on one database behind HAProxy.
pub(crate) struct LoadBalanced {
    pub replicas: Vec<Replica>,
    /// The balancer's base URL: every chat API call and the browser go here.
    pub base: String,
    /// The balancer's gRPC frontend (`http://…`), for agents.
    pub grpc_base: String,
    stats_url: String,
    /// The replicas' extra flags, for a restart.
    extra: Vec<String>,
    pub http: reqwest::Client,
    /// Who served each [`Self::call`], in order.
    served: Mutex<Vec<String>>,
    _haproxy: Child,
    dir: tempfile::TempDir,
    database: TestDatabase,
}

impl LoadBalanced {
    /// Starts both replicas (each with `extra` flags) and HAProxy in front of them; returns
    /// once HAProxy has sent a health check answer from each. `None` when PostgreSQL may be
    /// skipped locally.
    pub(crate) async fn start(extra: &[&str]) -> Option<Self> {
        let database = tokio::task::spawn_blocking(TestDatabase::create)
            .await
            .expect("create task")?;
        let dir = tempfile::tempdir().expect("a temp dir");
        let extra: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
        let mut replicas = Vec::new();
        for name in REPLICAS {
            replicas.push(Replica::start(name, database.url(), dir.path(), &extra, None).await);
        }
        let ports = Ports {
            chat: free_port(),
            grpc: free_port(),
            stats: free_port(),
        };
        let config = dir.path().join("haproxy.cfg");
        let all: Vec<&Replica> = replicas.iter().collect();
        std::fs::write(&config, haproxy_config(&ports, &all)).unwrap();
        let log = std::fs::File::create(dir.path().join("haproxy.log")).unwrap();
        let haproxy = Command::new(haproxy_path())
            .arg("-f")
            .arg(&config)
            .arg("-db")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("spawning haproxy");
        let lb = Self {
            replicas,
            base: format!("http://127.0.0.1:{}", ports.chat),
            grpc_base: format!("http://127.0.0.1:{}", ports.grpc),
            stats_url: format!("http://127.0.0.1:{}/stats;csv", ports.stats),
            extra,
            http: reqwest::Client::new(),
            served: Mutex::new(Vec::new()),
            _haproxy: haproxy,
            dir,
            database,
        };
        lb.wait_until_all_up().await;
        Some(lb)
    }

    async fn wait_until_all_up(&self) {
        ctxsync_test_support::poll("HAProxy to see both replicas up")
            .within(START_WAIT)
            .every(POLL)
            .explain(|| format!("logs:\n{}", self.logs()))
            .until(|| async {
                let stats = self.try_stats().await;
                match &stats {
                    Some(seen)
                        if REPLICAS.iter().all(|name| {
                            seen.iter().any(|s| s.name == *name && s.status == "UP")
                        }) =>
                    {
                        Ok(())
                    }
                    _ => Err(stats),
                }
            })
            .await;
    }

    /// The replica called `name`.
    pub(crate) fn replica(&self, name: &str) -> &Replica {
        self.replicas
            .iter()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("no replica {name}"))
    }

    /// The other replica's name.
    pub(crate) fn other(name: &str) -> &'static str {
        REPLICAS
            .into_iter()
            .find(|r| *r != name)
            .expect("two replicas")
    }

    /// `base` + `path`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// An authenticated JSON request through the balancer, recorded in [`Self::served`].
    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Answer {
        let mut request = self
            .http
            .request(method, self.url(path))
            .bearer_auth(API_TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("the balancer answers");
        let answer = Self::answer(response).await;
        self.served.lock().unwrap().push(answer.served_by.clone());
        answer
    }

    /// Reads a response through the balancer into an [`Answer`].
    pub(crate) async fn answer(response: reqwest::Response) -> Answer {
        let status = response.status().as_u16();
        let served_by = response
            .headers()
            .get(SERVED_BY)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let text = response.text().await.unwrap_or_default();
        Answer {
            status,
            served_by,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
        }
    }

    /// Who served each [`Self::call`] so far, in order.
    pub(crate) fn served(&self) -> Vec<String> {
        self.served.lock().unwrap().clone()
    }

    /// Asserts that consecutive calls so far landed on different replicas (round-robin
    /// with both up and no other client) and that there were some.
    pub(crate) fn assert_calls_alternated(&self) {
        let served = self.served();
        assert!(served.len() >= 2, "too few calls to tell: {served:?}");
        assert!(
            served.windows(2).all(|pair| pair[0] != pair[1]),
            "consecutive requests landed on the same replica: {served:?}"
        );
        for name in REPLICAS {
            assert!(
                served.iter().any(|s| s == name),
                "{name} served nothing: {served:?}"
            );
        }
    }

    async fn try_stats(&self) -> Option<Vec<ServerStats>> {
        let text = self
            .http
            .get(&self.stats_url)
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next()?.trim_start_matches("# ").split(',').collect();
        let column = |name: &str| header.iter().position(|h| *h == name);
        let (px, sv, cur, tot, status) = (
            column("pxname")?,
            column("svname")?,
            column("scur")?,
            column("stot")?,
            column("status")?,
        );
        Some(
            lines
                .map(|line| line.split(',').collect::<Vec<_>>())
                .filter(|row| row.get(px) == Some(&"replicas"))
                .filter(|row| REPLICAS.contains(&row[sv]))
                .map(|row| ServerStats {
                    name: row[sv].to_owned(),
                    current: row[cur].parse().unwrap_or(0),
                    total: row[tot].parse().unwrap_or(0),
                    // "UP 1/2" while a state change is being confirmed.
                    status: row[status].split(' ').next().unwrap_or("").to_owned(),
                })
                .collect(),
        )
    }

    /// HAProxy's view of each replica.
    pub(crate) async fn stats(&self) -> Vec<ServerStats> {
        self.try_stats().await.expect("HAProxy's statistics")
    }

    /// Waits (bounded) until `done` holds for HAProxy's statistics.
    pub(crate) async fn wait_for_stats(
        &self,
        what: &str,
        done: impl FnMut(&[ServerStats]) -> bool,
    ) -> Vec<ServerStats> {
        // Each probe's future borrows `done` in turn, hence the cell.
        let done = &std::cell::RefCell::new(done);
        ctxsync_test_support::poll(format!("{what} in HAProxy's statistics"))
            .within(START_WAIT)
            .every(POLL)
            .until(|| async {
                let stats = self.stats().await;
                if (done.borrow_mut())(&stats) {
                    Ok(stats)
                } else {
                    Err(stats)
                }
            })
            .await
    }

    /// SIGKILL to the replica `name`, as in a crash: no drain, its connections just break.
    pub(crate) async fn kill(&mut self, name: &str) {
        let replica = self
            .replicas
            .iter_mut()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("no replica {name}"));
        replica.child.kill().await.expect("killing the replica");
    }

    /// Starts the (killed) replica `name` again on its old ports, with the same flags, and
    /// waits until HAProxy sees both replicas up.
    pub(crate) async fn restart(&mut self, name: &str) {
        let index = self
            .replicas
            .iter()
            .position(|r| r.name == name)
            .unwrap_or_else(|| panic!("no replica {name}"));
        let old = &self.replicas[index];
        let (grpc, http) = (old.grpc_addr().to_owned(), old.http_addr.clone());
        let replica = Replica::start(
            old.name,
            self.database.url(),
            self.dir.path(),
            &self.extra,
            Some((&grpc, &http)),
        )
        .await;
        self.replicas[index] = replica;
        self.wait_until_all_up().await;
    }

    /// `path` on the replica `name`'s chat API, bypassing the balancer.
    pub(crate) fn replica_url(&self, name: &str, path: &str) -> String {
        format!("http://{}{path}", self.replica(name).http_addr)
    }

    /// An authenticated JSON request to the replica `name` directly (its [`Answer`]'s
    /// `served_by` is `name`); not recorded in [`Self::served`].
    pub(crate) async fn call_on(
        &self,
        name: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Answer {
        let mut request = self
            .http
            .request(method, self.replica_url(name, path))
            .bearer_auth(API_TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|e| panic!("replica {name} answers {path}: {e}"));
        Answer {
            served_by: name.to_owned(),
            ..Self::answer(response).await
        }
    }

    /// The value of the unlabelled metric `family` on the replica `name`; `None` when the
    /// replica does not answer (killed) or has no such line.
    pub(crate) async fn metric(&self, name: &str, family: &str) -> Option<f64> {
        let text = self
            .http
            .get(self.replica_url(name, "/metrics"))
            .bearer_auth(API_TOKEN)
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        text.lines()
            .filter_map(|line| line.strip_prefix(family)?.strip_prefix(' '))
            .find_map(|value| value.trim().parse().ok())
    }

    /// Starts `ctxsync agent` on `workspace`, talking gRPC to the replica `replica`
    /// directly; killed on drop.
    pub(crate) fn start_agent(&self, replica: &str, token: &str, workspace: &Path) -> Child {
        self.spawn_agent(Via::Replica(replica), token, workspace, &[], "agent")
    }

    /// Starts `ctxsync agent` on `workspace` with `extra` flags, its gRPC sent `via`, its
    /// log in `{log}.log` (see [`Self::log`]); killed on drop.
    pub(crate) fn spawn_agent(
        &self,
        via: Via<'_>,
        token: &str,
        workspace: &Path,
        extra: &[&str],
        log: &str,
    ) -> Child {
        let server = match via {
            Via::Balancer => self.grpc_base.clone(),
            Via::Replica(name) => self.replica(name).grpc_url.clone(),
        };
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{log}.log")))
            .unwrap();
        Command::new(CTXSYNC)
            .args(["agent", "--server", &server])
            .arg("--workspace")
            .arg(workspace)
            .args(["--mcp-timeout-ms", "10000"])
            .args(extra)
            .env("CTXSYNC_AGENT_TOKEN", token)
            .env("RUST_LOG", "info,rmcp=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("spawning ctxsync agent")
    }

    /// The log `{name}.log` so far (`replica-a`, `haproxy`, an agent's), empty if none.
    pub(crate) fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{name}.log"))).unwrap_or_default()
    }

    /// Every log (the replicas', HAProxy's and the agents'), for a failing assertion.
    pub(crate) fn logs(&self) -> String {
        let mut names: Vec<String> = std::fs::read_dir(self.dir.path())
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter_map(|f| f.strip_suffix(".log").map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        let mut out = String::new();
        for name in names {
            out.push_str(&format!("--- {name} ---\n{}\n", self.log(&name)));
        }
        out
    }
}
