//! Two `ctxsync server` replicas on one PostgreSQL test database behind a real HAProxy
//! (Debian's package): HTTP mode, round-robin, health checks on `/healthz`, retries with
//! redispatch, timeouts long enough for event streams. HAProxy names the replica that
//! answered in [`SERVED_BY`], so the product needs no test-only header. Agents talk gRPC to
//! a replica directly.

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

/// HAProxy's configuration: the chat API of both replicas behind one frontend, and a
/// stats listener the tests read per-server sessions and states from.
fn haproxy_config(frontend: u16, stats: u16, replicas: &[(&str, &str)]) -> String {
    let servers: String = replicas
        .iter()
        .map(|(name, addr)| format!("    server {name} {addr}\n"))
        .collect();
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
    bind 127.0.0.1:{frontend}
    default_backend replicas

backend replicas
    balance roundrobin
    option httpchk GET /healthz
    http-check expect status 200
    default-server check inter 200ms fall 2 rise 1
    http-response set-header X-Served-By %[srv_name]
{servers}
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
    async fn start(name: &'static str, database_url: &str, dir: &Path, extra: &[&str]) -> Self {
        let log = std::fs::File::create(dir.join(format!("replica-{name}.log"))).unwrap();
        let mut child = Command::new(CTXSYNC)
            .args(["server", "--database-url", database_url])
            .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
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
    stats_url: String,
    pub http: reqwest::Client,
    /// Who served each [`Self::call`], in order.
    served: Mutex<Vec<String>>,
    _haproxy: Child,
    dir: tempfile::TempDir,
    _database: TestDatabase,
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
        let mut replicas = Vec::new();
        for name in REPLICAS {
            replicas.push(Replica::start(name, database.url(), dir.path(), extra).await);
        }
        let (frontend, stats) = (free_port(), free_port());
        let servers: Vec<(&str, &str)> = replicas
            .iter()
            .map(|r| (r.name, r.http_addr.as_str()))
            .collect();
        let config = dir.path().join("haproxy.cfg");
        std::fs::write(&config, haproxy_config(frontend, stats, &servers)).unwrap();
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
            base: format!("http://127.0.0.1:{frontend}"),
            stats_url: format!("http://127.0.0.1:{stats}/stats;csv"),
            http: reqwest::Client::new(),
            served: Mutex::new(Vec::new()),
            _haproxy: haproxy,
            dir,
            _database: database,
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

    /// Starts `ctxsync agent` on `workspace`, talking gRPC to the replica `replica`
    /// directly; killed on drop.
    pub(crate) fn start_agent(&self, replica: &str, token: &str, workspace: &Path) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("agent.log"))
            .unwrap();
        Command::new(CTXSYNC)
            .args(["agent", "--server", &self.replica(replica).grpc_url])
            .arg("--workspace")
            .arg(workspace)
            .args(["--mcp-timeout-ms", "10000"])
            .env("CTXSYNC_AGENT_TOKEN", token)
            .env("RUST_LOG", "info,rmcp=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .expect("spawning ctxsync agent")
    }

    /// The replicas', HAProxy's and the agent's logs, for a failing assertion.
    pub(crate) fn logs(&self) -> String {
        let mut out = String::new();
        let mut names: Vec<String> = REPLICAS.iter().map(|r| format!("replica-{r}")).collect();
        names.extend(["haproxy".to_owned(), "agent".to_owned()]);
        for name in names {
            let text = std::fs::read_to_string(self.dir.path().join(format!("{name}.log")))
                .unwrap_or_default();
            out.push_str(&format!("--- {name} ---\n{text}\n"));
        }
        out
    }
}
