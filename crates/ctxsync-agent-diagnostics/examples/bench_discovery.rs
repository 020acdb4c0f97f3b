//! Benchmark: parallel discovery of 20 slow stdio servers, against the official Python MCP
//! SDK on the same servers, and engine memory with 50 servers.
//!
//! The reference is `xtask/bench/mcp_sdk_discovery.py`, run on the tests' pinned Python MCP
//! SDK: the Python named by `CTXSYNC_PYTHON_MCP` (`cargo xtask bench` sets it after
//! installing the pin), else `target/tools/py` when `cargo xtask test-tools` made it. Only
//! without either does this program install `mcp` from PyPI into a temporary virtual
//! environment (`--quick` keeps it in `target/bench-python-mcp`); when that fails the row
//! says so and carries no reference figure.
//!
//! `cargo run --release -p ctxsync-agent-diagnostics --example bench_discovery -- [--quick]`
//! prints one JSON object per line on stdout; progress goes to stderr.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use ctxsync_agent_diagnostics::{Engine, EngineConfig, RetryPolicy};
use ctxsync_mcp_fixture::FixtureConfig;
use ctxsync_mcp_model::ReportPhase;
use ctxsync_test_support::bench_row_against as emit;
use serde_json::{Value, json};

/// Each benchmarked server takes this long to answer `initialize`.
const INIT_DELAY: Duration = Duration::from_millis(300);
/// Servers discovered together in the timing benchmark.
const PARALLEL_SERVERS: usize = 20;
/// Servers kept connected in the memory benchmark.
const MEMORY_SERVERS: usize = 50;
/// Target of the parallel/single ratio.
const RATIO_TARGET: f64 = 1.3;
/// Bound on one discovery; far above anything a healthy run needs.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// The fixture servers of the timing benchmark, as command lines.
fn server_args() -> Vec<String> {
    FixtureConfig::new()
        .tools(3)
        .init_delay(INIT_DELAY)
        .to_args()
}

/// The Python MCP SDK reference: a temporary virtual environment with `mcp` from PyPI.
struct PythonSdk {
    _venv: Option<tempfile::TempDir>,
    python: PathBuf,
    version: String,
}

fn run_quietly(command: &mut Command) -> Result<String, String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {command:?}: {e}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().last().unwrap_or("").trim().to_owned();
        return Err(format!(
            "{:?} failed ({}): {last}",
            command.get_program(),
            output.status
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn install_mcp(python: &Path) -> Result<(), String> {
    run_quietly(Command::new(python).args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "mcp",
    ]))
    .map(drop)
}

/// The tests' pinned SDK: `CTXSYNC_PYTHON_MCP`, else the environment `cargo xtask`
/// installs the pin into.
fn pinned_python() -> Option<PathBuf> {
    if let Some(python) = std::env::var_os("CTXSYNC_PYTHON_MCP") {
        return Some(PathBuf::from(python));
    }
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/py/bin/python");
    python.exists().then_some(python)
}

impl PythonSdk {
    fn install(quick: bool) -> Result<Self, String> {
        if let Some(python) = pinned_python() {
            return Self::at(None, python);
        }
        let (venv, dir) = if quick {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-python-mcp");
            (None, dir)
        } else {
            let venv = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
            let dir = venv.path().to_path_buf();
            (Some(venv), dir)
        };
        let python = dir.join("bin").join("python");
        let installed = quick
            && run_quietly(
                Command::new(&python)
                    .args(["-c", "import mcp"])
                    .stderr(Stdio::null()),
            )
            .is_ok();
        if !installed {
            let python3 = std::env::var_os("PYTHON").unwrap_or_else(|| "python3".into());
            run_quietly(Command::new(&python3).arg("-m").arg("venv").arg(&dir))?;
            install_mcp(&python)?;
        }
        Self::at(venv, python)
    }

    /// The SDK run by `python`, which keeps `venv` (if any) alive.
    fn at(venv: Option<tempfile::TempDir>, python: PathBuf) -> Result<Self, String> {
        let version = run_quietly(Command::new(&python).args([
            "-c",
            "import importlib.metadata as m; print(m.version('mcp'))",
        ]))?
        .trim()
        .to_owned();
        Ok(Self {
            _venv: venv,
            python,
            version,
        })
    }

    /// One timed discovery of `count` servers; milliseconds until the last tool list.
    fn discover(&self, fixture: &Path, count: usize) -> Result<f64, String> {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../xtask/bench/mcp_sdk_discovery.py");
        let servers = tempfile::NamedTempFile::new().map_err(|e| format!("tempfile: {e}"))?;
        let list: Vec<Value> = (0..count)
            .map(|_| json!({"command": fixture, "args": server_args()}))
            .collect();
        std::fs::write(servers.path(), Value::from(list).to_string())
            .map_err(|e| format!("writing the server list: {e}"))?;
        let stdout = run_quietly(
            Command::new(&self.python)
                .arg(&script)
                .arg(servers.path())
                .stderr(Stdio::piped()),
        )?;
        let result: Value =
            serde_json::from_str(stdout.trim()).map_err(|e| format!("script output: {e}"))?;
        let tools = result["tools"].as_u64().unwrap_or(0);
        if tools != 3 * count as u64 {
            return Err(format!(
                "the SDK listed {tools} tools, expected {}",
                3 * count
            ));
        }
        result["elapsed_s"]
            .as_f64()
            .map(|s| s * 1000.0)
            .ok_or_else(|| format!("script output has no elapsed_s: {stdout}"))
    }
}

/// The median of `trials` SDK discoveries, with the SDK's version.
fn python_reference(
    fixture: &Path,
    count: usize,
    trials: usize,
    quick: bool,
) -> Result<(f64, String), String> {
    eprintln!("python MCP SDK: creating a virtual environment and installing mcp from PyPI");
    let sdk = PythonSdk::install(quick)?;
    eprintln!("python MCP SDK {}: warm-up", sdk.version);
    sdk.discover(fixture, 1)?;
    let mut times = Vec::with_capacity(trials);
    for trial in 0..trials {
        let ms = sdk.discover(fixture, count)?;
        eprintln!(
            "  python SDK, {count} servers, trial {}: {ms:.1} ms",
            trial + 1
        );
        times.push(ms);
    }
    times.sort_by(f64::total_cmp);
    Ok((times[times.len() / 2], sdk.version))
}

/// Starts an engine on `count` fixture servers and waits for the phase to complete.
async fn discover(fixture: &Path, count: usize) -> (Engine, Duration, tempfile::TempDir) {
    let workspace = tempfile::tempdir().expect("tempdir");
    let server = json!({"command": fixture, "args": server_args()});
    let servers: serde_json::Map<String, Value> = (0..count)
        .map(|i| (format!("server-{i}"), server.clone()))
        .collect();
    let config_file = workspace.path().join(".mcp.json");
    std::fs::write(&config_file, json!({"mcpServers": servers}).to_string()).expect("write");

    let mut config = EngineConfig::new(workspace.path());
    config.watch = false;
    config.connect_timeout = CONNECT_TIMEOUT;
    config.retry = RetryPolicy {
        enabled: false,
        ..RetryPolicy::default()
    };
    let started = Instant::now();
    let engine = Engine::start(config);
    let mut reports = engine.subscribe();
    let report = reports
        .wait_for(|report| report.phase == ReportPhase::Complete)
        .await
        .expect("engine alive")
        .clone();
    let elapsed = started.elapsed();
    let connected = report.servers.iter().filter(|s| s.connected).count();
    assert_eq!(connected, count, "every server must connect: {report:#?}");
    (engine, elapsed, workspace)
}

async fn median_discovery(fixture: &Path, count: usize, trials: usize) -> Duration {
    let mut times = Vec::with_capacity(trials);
    for trial in 0..trials {
        let (engine, elapsed, _workspace) = discover(fixture, count).await;
        engine.close().await;
        eprintln!("  {count} server(s), trial {}: {elapsed:?}", trial + 1);
        times.push(elapsed);
    }
    times.sort();
    times[times.len() / 2]
}

fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(f64::NAN);
    kib / 1024.0
}

#[tokio::main]
async fn main() {
    let quick = std::env::args().any(|arg| arg == "--quick");
    let trials = if quick { 3 } else { 7 };
    let fixture = ctxsync_mcp_fixture::binary_path().expect("fixture binary");
    eprintln!("bench_discovery: fixture {}", fixture.display());

    // Warm the page cache and the binary's first start before timing anything.
    let (engine, _, _workspace) = discover(fixture, 1).await;
    engine.close().await;

    eprintln!("single server ({trials} trials)");
    let single = median_discovery(fixture, 1, trials).await;
    eprintln!("{PARALLEL_SERVERS} servers ({trials} trials)");
    let parallel = median_discovery(fixture, PARALLEL_SERVERS, trials).await;
    let single_ms = single.as_secs_f64() * 1000.0;
    let parallel_ms = parallel.as_secs_f64() * 1000.0;
    let ratio = parallel_ms / single_ms;
    emit(
        "discovery_1_stdio_server_300ms_init",
        single_ms,
        "ms",
        None,
        None,
        None,
    );
    emit(
        "discovery_20_stdio_servers_300ms_init",
        parallel_ms,
        "ms",
        Some(single_ms),
        Some("ratio to the slowest single server <= 1.3"),
        Some(ratio <= RATIO_TARGET),
    );

    match python_reference(fixture, PARALLEL_SERVERS, trials, quick) {
        Ok((python_ms, version)) => emit(
            "discovery_20_stdio_servers_vs_python_mcp_sdk",
            parallel_ms,
            "ms",
            Some(python_ms),
            Some(&format!(
                "reference: official Python MCP SDK (mcp {version}) on the same servers; ratio < 1 is faster"
            )),
            None,
        ),
        Err(reason) => {
            eprintln!("python MCP SDK unavailable: {reason}");
            emit(
                "discovery_20_stdio_servers_vs_python_mcp_sdk",
                parallel_ms,
                "ms",
                None,
                Some(&format!(
                    "reference not measured: Python MCP SDK unavailable ({reason})"
                )),
                None,
            );
        }
    }

    let baseline = rss_mib();
    eprintln!("memory: {MEMORY_SERVERS} connected servers");
    let (engine, _, _workspace) = discover(fixture, MEMORY_SERVERS).await;
    let with_servers = rss_mib();
    emit(
        "engine_rss_50_connected_servers",
        with_servers,
        "MiB",
        Some(baseline),
        None,
        None,
    );
    engine.close().await;
}
