//! Hostile workspaces and servers end to end: `.mcp.json` as a FIFO, a symlink to
//! `/dev/zero` or an oversized file becomes an invalid config row (never a hang or an
//! out-of-memory), and `ctxsync agent` exits within seconds of SIGTERM whatever its MCP
//! servers do.

use crate::processes;

use std::io::Write as _;
use std::net::TcpListener;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use processes::{Logs, WAIT, Workspace, ctxsync, wait_for_log, wait_until_gone};

/// The agent's shutdown target is 5 s; the assertion allows far more, so a slow machine
/// never fails it while a hang (the bug) always does.
const SIGTERM_EXIT_BOUND: Duration = Duration::from_secs(30);
/// A connect timeout no test reaches: the servers are still connecting at SIGTERM.
const LONG_MCP_TIMEOUT_MS: &str = "120000";
/// An address where no ctxsync server listens; the agent keeps retrying it.
const NO_SERVER: &str = "http://127.0.0.1:9";

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("running mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

async fn discover(workspace: &Path, extra: &[&Path]) -> Output {
    let mut command = ctxsync();
    command
        .args(["discover", "--workspace"])
        .arg(workspace)
        // These files are meant to be invalid: the rows matter here, not the exit code.
        .args(["--mcp-timeout-ms", "4000", "--allow-failures"]);
    for path in extra {
        command.arg("--mcp-config").arg(path);
    }
    tokio::time::timeout(WAIT, command.output())
        .await
        .expect("discover ends instead of hanging")
        .expect("running ctxsync discover")
}

/// The `ERROR OR WARNING` cell of the config table's row for `path`.
fn config_row(stdout: &str, path: &Path) -> String {
    let path = path.display().to_string();
    stdout
        .lines()
        .find_map(|line| line.strip_prefix(&path))
        .map(|rest| rest.trim().to_owned())
        .unwrap_or_else(|| panic!("no config row for {path}:\n{stdout}"))
}

#[tokio::test]
async fn discover_on_a_fifo_mcp_json_ends_with_an_invalid_config_row() {
    let workspace = Workspace::new();
    let config = workspace.path().join(".mcp.json");
    mkfifo(&config);
    let out = discover(&workspace.path(), &[]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("No MCP servers."), "{stdout}");
    assert_eq!(
        config_row(&stdout, &config),
        "error: not a regular file (a FIFO)"
    );
}

#[tokio::test]
async fn discover_refuses_devices_escaping_symlinks_and_oversized_files() {
    let workspace = Workspace::new();
    let elsewhere = tempfile::tempdir().expect("a temp dir");
    let elsewhere = elsewhere.path().canonicalize().unwrap();
    // The workspace's own file may not lead out of the workspace at all. (Another device
    // than the named one below: the same file named twice is read once.)
    let own = workspace.path().join(".mcp.json");
    symlink("/dev/urandom", &own).unwrap();
    // Named files may lead anywhere, but only to a regular file of at most 1 MiB.
    let zero = elsewhere.join("zero.json");
    symlink("/dev/zero", &zero).unwrap();
    let fifo = elsewhere.join("fifo.json");
    mkfifo(&fifo);
    let big = elsewhere.join("big.json");
    let mut file = std::fs::File::create(&big).unwrap();
    file.write_all(br#"{"mcpServers": {}}"#).unwrap();
    file.write_all(&vec![b' '; 1024 * 1024]).unwrap();
    drop(file);
    let good = elsewhere.join("good.json");
    std::fs::write(&good, r#"{"mcpServers": {"bad": {}}}"#).unwrap();
    let good_link = elsewhere.join("good-link.json");
    symlink(&good, &good_link).unwrap();

    let out = discover(&workspace.path(), &[&zero, &fifo, &big, &good_link]).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(
        config_row(&stdout, &own),
        "error: resolves outside the workspace, to /dev/urandom"
    );
    assert_eq!(
        config_row(&stdout, &zero),
        "error: not a regular file (a character device)"
    );
    assert_eq!(
        config_row(&stdout, &fifo),
        "error: not a regular file (a FIFO)"
    );
    assert_eq!(config_row(&stdout, &big), "error: larger than 1 MiB");
    // A named symlink to a regular file is read: its entry's own error shows.
    assert!(
        config_row(&stdout, &good_link).contains("\"bad\""),
        "{stdout}"
    );
}

/// A loopback port that accepts connections and never answers; counts them.
fn silent_http_server() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("binding a port");
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            counter.fetch_add(1, Ordering::SeqCst);
            held.push(stream); // open, silent, forever
        }
    });
    (url, accepted)
}

/// Starts `ctxsync agent` on `workspace` with no reachable control plane.
fn start_agent(logs: &Logs, workspace: &Path, extra: &[&Path]) -> tokio::process::Child {
    let mut command = ctxsync();
    command
        .args(["agent", "--server", NO_SERVER, "--workspace"])
        .arg(workspace)
        .args(["--mcp-timeout-ms", LONG_MCP_TIMEOUT_MS])
        .env("CTXSYNC_AGENT_TOKEN", "hostile-input-test-token")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(logs.path("agent")).expect("the agent's log file"));
    for path in extra {
        command.arg("--mcp-config").arg(path);
    }
    command.spawn().expect("spawning ctxsync agent")
}

/// Sends SIGTERM and returns how long the agent took to exit (failing past the bound).
async fn terminate(agent: &mut tokio::process::Child, logs: &Logs) -> Duration {
    let pid = i32::try_from(agent.id().expect("the agent is running")).unwrap();
    let sent = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("sending SIGTERM");
    let status = tokio::time::timeout(SIGTERM_EXIT_BOUND, agent.wait())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the agent did not exit within {SIGTERM_EXIT_BOUND:?} of SIGTERM; its log:\n{}",
                logs.read("agent")
            )
        })
        .expect("waiting for the agent");
    let took = sent.elapsed();
    assert!(status.success(), "{status}; log:\n{}", logs.read("agent"));
    took
}

#[tokio::test]
async fn agent_exits_soon_after_sigterm_while_its_servers_hang() {
    let workspace = Workspace::new();
    let pid_file = workspace.path().join("stubborn.pid");
    let (url, accepted) = silent_http_server();
    // A stdio server that ignores SIGTERM and never answers, and an HTTP server that
    // accepts and never answers.
    let stubborn = format!(
        "trap '' TERM; echo $$ > '{}'; exec sleep 1000",
        pid_file.display()
    );
    workspace.write(
        ".mcp.json",
        serde_json::json!({"mcpServers": {
            "stubborn": {"command": "sh", "args": ["-c", stubborn]},
            "silent": {"url": url},
        }})
        .to_string(),
    );
    let logs = Logs::new();
    let mut agent = start_agent(&logs, &workspace.path(), &[]);
    wait_for_log(&logs, "agent", "agent started").await;
    let stubborn_pid =
        processes::poll("the servers to be contacted (the stubborn one's pid, if written)")
            .within(WAIT)
            .every(Duration::from_millis(25))
            .explain(|| format!("log:\n{}", logs.read("agent")))
            .until(|| async {
                let pid = std::fs::read_to_string(&pid_file)
                    .ok()
                    .and_then(|text| text.trim().parse::<i32>().ok());
                match pid {
                    Some(pid) if accepted.load(Ordering::SeqCst) > 0 => Ok(pid),
                    _ => Err(pid),
                }
            })
            .await;

    let took = terminate(&mut agent, &logs).await;
    eprintln!("agent with hanging servers exited {took:?} after SIGTERM");
    wait_until_gone(&[stubborn_pid]).await;
}

#[tokio::test]
async fn agent_exits_soon_after_sigterm_with_fifo_configs() {
    let workspace = Workspace::new();
    mkfifo(&workspace.path().join(".mcp.json"));
    workspace.write("AGENTS.md", "# Agents\n");
    let elsewhere = tempfile::tempdir().expect("a temp dir");
    let named = elsewhere.path().join("named.json");
    mkfifo(&named);
    let logs = Logs::new();
    let mut agent = start_agent(&logs, &workspace.path(), &[&named]);
    wait_for_log(&logs, "agent", "agent started").await;
    let took = terminate(&mut agent, &logs).await;
    eprintln!("agent with FIFO configs exited {took:?} after SIGTERM");
}
