//! A person's sign-in end to end (issue 50): a real `ctxsync server` with a secrets key
//! file, a real `ctxsync agent`, and the fixture as a remote MCP server behind its own
//! OAuth authorization server; the test plays the person's browser (it follows the
//! authorization URL's redirect to the server's callback).

use std::time::{Duration, Instant};

use ctxsync_mcp_fixture::{FixtureConfig, HttpFixture, OAuthConfig, serve_http};
use ctxsync_persistence::AgentId;
use ctxsync_persistence::test_support::TestStore;
use ctxsync_protocol::{ResourceBody, ResourceStatus};
use serde_json::Value;

use crate::processes::{
    AgentProcess, Logs, ServerProcess, TestBackend, WAIT, Workspace, bytes_under, contains,
    database, poll, wait_for_context,
};

const API_TOKEN: &str = "sign-in-e2e-api-token-0123456789abcdef";
/// The remote server's name in the workspace.
const REMOTE: &str = "remote";

struct World {
    store: TestStore,
    logs: Logs,
    server: ServerProcess,
    agent: AgentProcess,
    agent_id: AgentId,
    token: String,
    workspace: Workspace,
    fixture: HttpFixture,
    /// A browser: it does not follow redirects, so the test sees each hop.
    browser: reqwest::Client,
    /// The server's secrets key file (32 raw bytes).
    key: std::path::PathBuf,
    key_dir: tempfile::TempDir,
}

impl World {
    async fn start(backend: TestBackend, oauth: OAuthConfig) -> Option<Self> {
        let store = database(backend).await?;
        let agent = store.create_agent("remote-box").await.unwrap();
        let token = agent.token.expose().to_owned();
        let logs = Logs::new();
        let key_dir = tempfile::tempdir().unwrap();
        let key = key_dir.path().join("secrets.key");
        write_key(&key);
        let server = ServerProcess::start_with(
            &store,
            &logs,
            &[
                "--api-token",
                API_TOKEN,
                "--secrets-key-file",
                key.to_str().unwrap(),
            ],
        )
        .await;
        let fixture = serve_http(FixtureConfig::new().http().oauth(oauth))
            .await
            .expect("the OAuth fixture starts");
        let workspace = Workspace::new();
        workspace.write(
            ".mcp.json",
            serde_json::json!({"mcpServers": {REMOTE: {"type": "http", "url": fixture.url()}}})
                .to_string(),
        );
        let agent_process = AgentProcess::start(
            &logs,
            "agent",
            &server.url(),
            &workspace.path(),
            &token,
            &[],
        );
        let world = Self {
            store,
            logs,
            server,
            agent: agent_process,
            agent_id: agent.id,
            token,
            workspace,
            fixture,
            browser: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            key,
            key_dir,
        };
        world
            .wait_for_remote(ResourceStatus::NeedsAuthorization)
            .await;
        Some(world)
    }

    fn api(&self, path: &str) -> String {
        format!("{}{path}", self.server.http_url())
    }

    fn authorization_path(&self) -> String {
        format!(
            "/api/agents/{}/mcp-servers/{REMOTE}/authorization",
            self.agent_id
        )
    }

    /// The agent's servers as `GET …/mcp-servers` lists them.
    async fn servers(&self) -> Value {
        let path = format!("/api/agents/{}/mcp-servers", self.agent_id);
        let response = self
            .browser
            .get(self.api(&path))
            .bearer_auth(API_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        body["servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == REMOTE)
            .cloned()
            .expect("the remote server is listed")
    }

    /// Starts a sign-in with the API token: the authorization URL.
    async fn start_sign_in(&self) -> String {
        self.start_sign_in_at(&self.server.http_url()).await
    }

    /// [`Self::start_sign_in`] on the server whose chat API is at `base`.
    async fn start_sign_in_at(&self, base: &str) -> String {
        let response = self
            .browser
            .post(format!("{base}{}", self.authorization_path()))
            .bearer_auth(API_TOKEN)
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        assert_eq!(status, 200, "{body}\n{}", self.logs.read("agent"));
        assert!(body["expires_at"].is_string(), "{body}");
        body["authorization_url"].as_str().unwrap().to_owned()
    }

    /// The person's browser at the authorization server: where it is sent back to.
    async fn authorize(&self, authorization_url: &str) -> String {
        let response = self.browser.get(authorization_url).send().await.unwrap();
        assert_eq!(response.status(), 302, "{}", response.text().await.unwrap());
        response.headers()["location"].to_str().unwrap().to_owned()
    }

    /// The browser at the server's callback: its status and page.
    async fn come_back(&self, callback: &str) -> (u16, String) {
        let response = self.browser.get(callback).send().await.unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    /// Waits until the stored snapshot of the agent's current run shows the remote
    /// server with `status`.
    async fn wait_for_remote(&self, status: ResourceStatus) {
        wait_for_context(
            &self.store,
            self.agent_id,
            &self.logs,
            "the remote server's state",
            |context| {
                let current = context
                    .snapshot
                    .as_ref()
                    .is_some_and(|s| s.agent_run_id == context.agent.agent_run_id);
                current
                    && context.resources.iter().any(|r| {
                        matches!(&r.body, ResourceBody::McpServer(s) if s.server_name == REMOTE)
                            && r.status == status
                    })
            },
        )
        .await;
    }

    /// Stops the agent and starts another process of it; returns once the new process
    /// has registered (so the next wait sees its snapshots, not the old run's).
    async fn restart_agent(&mut self) {
        let old = self.run().await;
        let status = self.agent.terminate().await;
        assert!(status.success(), "{status:?}\n{}", self.logs.read("agent"));
        self.agent = AgentProcess::start(
            &self.logs,
            "agent2",
            &self.server.url(),
            &self.workspace.path(),
            &self.token,
            &[],
        );
        wait_for_context(
            &self.store,
            self.agent_id,
            &self.logs,
            "the new agent process to register",
            |context| context.agent.agent_run_id != old,
        )
        .await;
    }

    /// The fixture's tokens, codes and client secrets carry these prefixes: none may be
    /// in the database's bytes, the logs or the API's answers.
    async fn assert_no_secret_anywhere(&self) {
        const SECRETS: [&str; 4] = ["fxat_", "fxrt_", "fxcode_", "fxsecret_"];
        let database = match self.store.postgres_database() {
            Some(database) => {
                let dump = std::process::Command::new("pg_dump")
                    .arg(database.url())
                    .output()
                    .expect("pg_dump runs (PostgreSQL's client tools are installed)");
                assert!(dump.status.success(), "{dump:?}");
                dump.stdout
            }
            None => bytes_under(self.store.sqlite_data_dir().expect("a SQLite data dir")),
        };
        assert!(
            contains(&database, b"mcp_credentials"),
            "the database's bytes were read"
        );
        let mut api = String::new();
        for path in [
            format!("/api/agents/{}/mcp-servers", self.agent_id),
            format!("/api/agents/{}/context", self.agent_id),
            "/api/agents".to_owned(),
        ] {
            let response = self
                .browser
                .get(self.api(&path))
                .bearer_auth(API_TOKEN)
                .send()
                .await
                .unwrap();
            api.push_str(&response.text().await.unwrap());
        }
        let logs = format!(
            "{}{}{}",
            self.logs.read("server"),
            self.logs.read("agent"),
            self.logs.read("agent2")
        );
        for (place, text) in [
            ("the database", database.as_slice()),
            ("the API's answers", api.as_bytes()),
            ("the logs", logs.as_bytes()),
        ] {
            for secret in SECRETS {
                assert!(
                    !contains(text, secret.as_bytes()),
                    "{place} hold a {secret}… value"
                );
            }
        }
        // Exercised: the credential's row is there, sealed.
        let servers = self.servers().await;
        assert_eq!(servers["sign_in"], "signed_in", "{servers}");
    }

    async fn run(&self) -> Option<ctxsync_protocol::RunId> {
        self.store
            .read_agent_context(self.agent_id)
            .await
            .unwrap()
            .unwrap()
            .agent
            .agent_run_id
    }
}

/// 32 random bytes, raw, readable by the owner alone (as `head -c 32 /dev/urandom` makes).
fn write_key(path: &std::path::Path) {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let mut key = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut key)
        .unwrap();
    std::fs::write(path, key).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_signs_in_and_the_agent_keeps_the_tools_across_restarts_sqlite() {
    signs_in_and_keeps_the_tools(TestBackend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_signs_in_and_the_agent_keeps_the_tools_across_restarts_postgres() {
    signs_in_and_keeps_the_tools(TestBackend::Postgres).await;
}

async fn signs_in_and_keeps_the_tools(backend: TestBackend) {
    let Some(mut world) = World::start(backend, OAuthConfig::default()).await else {
        return;
    };
    assert_eq!(world.servers().await["sign_in"], "needs_authorization");
    let oauth = world.fixture.oauth().expect("the fixture speaks OAuth");

    let url = world.start_sign_in().await;
    let callback = world.authorize(&url).await;
    assert!(
        callback.starts_with(&world.api("/oauth/callback?")),
        "{callback}"
    );
    let came_back = Instant::now();
    let (status, page) = world.come_back(&callback).await;
    assert_eq!(status, 200, "{page}\n{}", world.logs.read("agent"));
    assert!(page.contains("Signed in to remote"), "{page}");
    world.wait_for_remote(ResourceStatus::Ok).await;
    eprintln!("callback to tools: {} ms", came_back.elapsed().as_millis());
    let signed_in = world.servers().await;
    assert_eq!(signed_in["sign_in"], "signed_in", "{signed_in}");
    assert_eq!(signed_in["signed_in"]["signed_in_via"], "api_token");
    // Every chat of the agent shows it, in its panel.
    let chat = world
        .store
        .create_chat(Some(world.agent_id))
        .await
        .unwrap()
        .id;
    let read: Value = world
        .browser
        .get(world.api(&format!("/api/chats/{chat}")))
        .bearer_auth(API_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let item = read["context"]["mcp"]["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == REMOTE)
        .cloned()
        .unwrap();
    assert_eq!(item["signed_in"], "signed in with the API token", "{item}");
    assert!(
        signed_in["signed_in"]["expires_at"].is_string(),
        "{signed_in}"
    );
    assert_eq!(oauth.authorize_requests().len(), 1);

    world.assert_no_secret_anywhere().await;

    // The state is single-use: the same callback again stores nothing and says why.
    let (status, page) = world.come_back(&callback).await;
    assert_eq!(status, 400, "{page}");
    assert!(page.contains("used already"), "{page}");
    // A server that needs no sign-in now is a conflict.
    let again = world
        .browser
        .post(world.api(&world.authorization_path()))
        .bearer_auth(API_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 409);

    // A restarted agent gets its credential back over its stream: no person involved.
    world.restart_agent().await;
    world.wait_for_remote(ResourceStatus::Ok).await;
    assert_eq!(oauth.authorize_requests().len(), 1);

    // The authorization server stops taking the access token: the restarted agent's
    // connect gets 401, refreshes, and connects.
    oauth.expire_access_tokens();
    world.restart_agent().await;
    world.wait_for_remote(ResourceStatus::Ok).await;
    let refreshes = oauth
        .token_requests()
        .iter()
        .filter(|r| r.grant_type.as_deref() == Some("refresh_token") && r.error.is_none())
        .count();
    assert!(refreshes >= 1, "{:?}", oauth.token_requests());

    // With the refresh token revoked too, the server needs a person again, and the
    // credential is forgotten.
    oauth.expire_access_tokens();
    oauth.revoke_refresh_tokens();
    world.restart_agent().await;
    world
        .wait_for_remote(ResourceStatus::NeedsAuthorization)
        .await;
    poll("the refused credential to be forgotten")
        .within(WAIT)
        .every(Duration::from_millis(50))
        .until_true(|| async { world.servers().await["sign_in"] == "needs_authorization" })
        .await;
}

/// Two replicas on one database: a sign-in started on the replica that does not hold the
/// agent's stream, and finished there too (the other routes both steps to the agent);
/// then a key rotation: every credential resealed under the new key at start, and the
/// old key dropped without the person signing in again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_in_crosses_replicas_and_survives_a_key_rotation() {
    let Some(mut world) = World::start(TestBackend::Postgres, OAuthConfig::default()).await else {
        return;
    };
    let database = world
        .store
        .postgres_database()
        .expect("PostgreSQL")
        .url()
        .to_owned();
    let old_key = world.key.to_str().unwrap().to_owned();
    let flags = |keys: &[&str]| {
        let mut flags = vec!["--api-token", API_TOKEN];
        for (flag, key) in ["--secrets-key-file", "--previous-secrets-key-file"]
            .into_iter()
            .zip(keys)
        {
            flags.extend([flag, *key]);
        }
        flags.into_iter().map(str::to_owned).collect::<Vec<_>>()
    };
    let mut other =
        ServerProcess::start_on(&database, &world.logs, &as_args(&flags(&[&old_key]))).await;

    let url = world.start_sign_in_at(&other.http_url()).await;
    let callback = world.authorize(&url).await;
    // The redirect URI names the replica that asked the agent; the person's browser may
    // come back through any replica (behind one balancer they share one public URL).
    let elsewhere = callback.replacen(&world.server.http_url(), &other.http_url(), 1);
    assert_ne!(elsewhere, callback);
    let (status, page) = world.come_back(&elsewhere).await;
    assert_eq!(status, 200, "{page}\n{}", world.logs.read("server"));
    world.wait_for_remote(ResourceStatus::Ok).await;
    other.terminate().await;

    // The rotation: a new key beside the old one (everything resealed), then alone.
    let new_key = world.key_dir.path().join("new.key");
    write_key(&new_key);
    let new_key = new_key.to_str().unwrap().to_owned();
    world.server.terminate().await;
    world.server = ServerProcess::start_on(
        &database,
        &world.logs,
        &as_args(&flags(&[&new_key, &old_key])),
    )
    .await;
    wait_for_log_line(
        &world.logs,
        "sealed under the current secrets key resealed=1",
    )
    .await;
    world.server.terminate().await;
    world.server =
        ServerProcess::start_on(&database, &world.logs, &as_args(&flags(&[&new_key]))).await;
    world.restart_agent().await;
    world.wait_for_remote(ResourceStatus::Ok).await;
    let oauth = world.fixture.oauth().unwrap();
    assert_eq!(
        oauth.authorize_requests().len(),
        1,
        "no person signed in again"
    );
}

fn as_args(flags: &[String]) -> Vec<&str> {
    flags.iter().map(String::as_str).collect()
}

/// Waits until the server log holds `needle` (its words and fields, in any order).
async fn wait_for_log_line(logs: &Logs, needle: &str) {
    let words: Vec<&str> = needle.split(' ').collect();
    poll(format!("`{needle}` in the server log"))
        .within(WAIT)
        .every(Duration::from_millis(50))
        .explain(|| logs.read("server"))
        .until_true(|| {
            let log = logs.read("server");
            let found = log
                .lines()
                .any(|line| words.iter().all(|w| line.contains(w)));
            async move { found }
        })
        .await;
}
