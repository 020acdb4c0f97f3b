//! Shared helpers for engine tests: temp workspaces, fixture entries, report history, pids.

use std::{
    collections::BTreeMap,
    path::Path,
    sync::{Arc, Mutex},
    time::Duration,
};

use ctxsync_agent_diagnostics::{Engine, EngineConfig, RetryPolicy};
use ctxsync_mcp_fixture::FixtureConfig;
use ctxsync_mcp_model::{Report, ServerReport};
use serde_json::{Value, json};
use tokio::sync::watch;

pub(crate) use ctxsync_test_support::{Workspace, poll};

/// Upper bound for anything that should happen soon; tests never wait this long when passing.
pub(crate) const PATIENCE: Duration = Duration::from_secs(20);
/// Connect timeout for tests whose servers are expected to answer.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) fn fixture_bin() -> &'static Path {
    ctxsync_mcp_fixture::binary_path().expect("the ctxsync-mcp-fixture binary")
}

/// A `.mcp.json` entry that runs the fixture over stdio.
pub(crate) fn fixture_entry(config: &FixtureConfig) -> Value {
    json!({"command": fixture_bin(), "args": config.to_args()})
}

/// What engine tests do with a workspace.
pub(crate) trait EngineWorkspace {
    /// Writes `{"mcpServers": servers}` to `<workspace>/.mcp.json`.
    fn write_servers(&self, servers: Value);

    /// Engine config for this workspace: small env, no watching, no retries.
    fn engine_config(&self) -> EngineConfig;
}

impl EngineWorkspace for Workspace {
    fn write_servers(&self, servers: Value) {
        self.write(".mcp.json", json!({"mcpServers": servers}).to_string());
    }

    fn engine_config(&self) -> EngineConfig {
        let mut config = EngineConfig::new(self.path());
        config.env = base_env();
        config.watch = false;
        config.connect_timeout = CONNECT_TIMEOUT;
        config.retry = RetryPolicy {
            enabled: false,
            ..RetryPolicy::default()
        };
        // The machine's own ~/.agents/plugins must never leak into a test.
        config.plugin_dirs = vec![self.file(".agents/plugins")];
        config.plugin_data_dir = self.file(".plugin-data");
        config
    }
}

/// PATH and HOME only: enough to run `sh`, nothing that would be redacted.
pub(crate) fn base_env() -> BTreeMap<String, String> {
    ["PATH", "HOME"]
        .into_iter()
        .filter_map(|name| Some((name.to_owned(), std::env::var(name).ok()?)))
        .collect()
}

/// Waits until the report satisfies `done`.
pub(crate) async fn wait_for(
    rx: &mut watch::Receiver<Arc<Report>>,
    what: &str,
    done: impl Fn(&Report) -> bool,
) -> Arc<Report> {
    let waited = tokio::time::timeout(PATIENCE, rx.wait_for(|report| done(report)))
        .await
        .ok()
        .and_then(Result::ok)
        .map(|report| report.clone());
    match waited {
        Some(report) => {
            assert_report_in_words(&report);
            report
        }
        None => panic!(
            "timed out waiting for {what}; last report: {:#?}",
            rx.borrow()
        ),
    }
}

/// Every diagnostic of `report` reads as words (no Rust notation): every report a test
/// waits for is checked.
pub(crate) fn assert_report_in_words(report: &Report) {
    for server in &report.servers {
        for text in server.error.iter().chain(&server.warning) {
            ctxsync_test_support::assert_in_words(text);
        }
    }
    for outcome in &report.config_outcomes {
        for text in outcome.error.iter().chain(&outcome.warning) {
            ctxsync_test_support::assert_in_words(text);
        }
    }
}

pub(crate) async fn complete(engine: &Engine) -> Arc<Report> {
    let mut rx = engine.subscribe();
    wait_for(&mut rx, "phase complete", |r| {
        r.phase == ctxsync_mcp_model::ReportPhase::Complete
    })
    .await
}

pub(crate) fn server<'a>(report: &'a Report, name: &str) -> &'a ServerReport {
    report
        .server(name)
        .unwrap_or_else(|| panic!("no server {name} in {report:#?}"))
}

pub(crate) fn tool_names(server: &ServerReport) -> Vec<&str> {
    server.tools.iter().map(|tool| tool.name.as_str()).collect()
}

/// Every report the engine published, in order, from the moment of the call.
pub(crate) struct History {
    reports: Arc<Mutex<Vec<Arc<Report>>>>,
}

impl History {
    pub(crate) fn record(engine: &Engine) -> Self {
        let mut rx = engine.subscribe();
        let reports = Arc::new(Mutex::new(vec![rx.borrow_and_update().clone()]));
        let sink = reports.clone();
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let report = rx.borrow_and_update().clone();
                sink.lock().expect("history").push(report);
            }
        });
        Self { reports }
    }

    pub(crate) fn reports(&self) -> Vec<Arc<Report>> {
        self.reports.lock().expect("history").clone()
    }
}

/// Whether a process exists and is not a zombie.
pub(crate) fn alive(pid: u32) -> bool {
    ctxsync_test_support::process_alive(i32::try_from(pid).expect("a pid fits i32"))
}

/// Waits until the process is gone (killing is asynchronous in the kernel).
pub(crate) async fn assert_gone(pid: u32, what: &str) {
    poll(format!("{what} (pid {pid}) to be gone"))
        .within(Duration::from_secs(5))
        .every(Duration::from_millis(20))
        .until_true(|| async move { !alive(pid) })
        .await;
}

/// Reads a pid file once it has been written.
pub(crate) async fn read_pid(path: &Path) -> u32 {
    poll(format!("a pid in {}", path.display()))
        .within(PATIENCE)
        .every(Duration::from_millis(20))
        .until_some(|| async move {
            let text = std::fs::read_to_string(path).ok()?;
            text.trim().parse().ok()
        })
        .await
}
