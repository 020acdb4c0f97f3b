//! Benchmark: the resident memory and idle CPU time of a real `ctxsync agent` process with
//! 50 MCP servers and 200 instruction and skill files, in steady state after discovery.
//!
//! Prints one JSON row per figure on stdout (`cargo xtask bench` collects them); progress
//! goes to stderr. `--quick` measures CPU over a shorter idle window, scaled to a minute.

mod support;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use ctxsync::server::{ServerConfig, start};
use ctxsync_protocol::DiscoveryPhase;

use ctxsync_test_support::bench_row_against;
use support::{ctxsync_binary, status_kib};

const SERVERS: usize = 50;
const TOOLS_PER_SERVER: usize = 5;
/// Instruction files (AGENTS.md, CLAUDE.md) plus skills, 200 in all.
const FILES: usize = 200;
const SKILL_BODY_BYTES: usize = 1024;
/// Bound on discovery of every server and its publication.
const DISCOVERY_DEADLINE: Duration = Duration::from_secs(120);
/// Quiet time after the complete snapshot before measuring (late pushes, allocator trim).
const SETTLE: Duration = Duration::from_secs(2);
const IDLE_WINDOW: Duration = Duration::from_secs(60);
const QUICK_IDLE_WINDOW: Duration = Duration::from_secs(10);

#[tokio::main]
async fn main() -> Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let ctxsync = ctxsync_binary("bench_agent")?;
    eprintln!("bench_agent: agent binary {}", ctxsync.display());

    let data = tempfile::tempdir()?;
    let server = start(ServerConfig::ephemeral(data.path())).await?;
    let agent = server.store.create_agent("bench").await?;

    let workspace = tempfile::tempdir()?;
    write_workspace(workspace.path(), &ctxsync)?;
    let log = data.path().join("agent.log");
    let started = Instant::now();
    let mut child = tokio::process::Command::new(&ctxsync)
        .args(["agent", "--server", &server.agent_url(), "--workspace"])
        .arg(workspace.path())
        .env("CTXSYNC_AGENT_TOKEN", agent.token.expose())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .kill_on_drop(true)
        .spawn()
        .context("starting ctxsync agent")?;
    let pid = child.id().context("the agent's pid")?;

    // Steady state: the complete snapshot with every server is in the database.
    loop {
        let context = server.store.read_agent_context(agent.id).await?;
        let done = context.as_ref().is_some_and(|c| {
            c.snapshot
                .as_ref()
                .is_some_and(|s| s.phase == DiscoveryPhase::Complete)
                && c.resources
                    .iter()
                    .filter(|r| r.source.starts_with("mcp:"))
                    .count()
                    == SERVERS
        });
        if done {
            break;
        }
        if started.elapsed() > DISCOVERY_DEADLINE {
            bail!(
                "discovery did not complete in {DISCOVERY_DEADLINE:?}; agent log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let discovery = started.elapsed();
    eprintln!("bench_agent: complete snapshot stored after {discovery:.2?}");
    tokio::time::sleep(SETTLE).await;

    let window = if quick {
        QUICK_IDLE_WINDOW
    } else {
        IDLE_WINDOW
    };
    let ticks = clock_ticks_per_second();
    let cpu_before = cpu_ticks(pid)?;
    let measured = Instant::now();
    eprintln!("bench_agent: idle for {window:?}");
    tokio::time::sleep(window).await;
    let cpu_after = cpu_ticks(pid)?;
    let idle = measured.elapsed().as_secs_f64();
    let rss = status_kib(pid, "VmRSS")? / 1024.0;
    let peak = status_kib(pid, "VmHWM")? / 1024.0;
    let cpu_per_minute = (cpu_after - cpu_before) as f64 / ticks * 60.0 / idle;

    bench_row_against(
        "agent_idle_rss_50_servers_200_files",
        rss,
        "MiB",
        None,
        None,
        None,
    );
    bench_row_against(
        "agent_peak_rss_50_servers_200_files",
        peak,
        "MiB",
        None,
        None,
        None,
    );
    bench_row_against(
        "agent_idle_cpu_per_minute",
        cpu_per_minute,
        "s/min",
        None,
        None,
        None,
    );
    bench_row_against(
        "agent_discovery_to_complete_snapshot",
        discovery.as_secs_f64(),
        "s",
        None,
        None,
        None,
    );

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid)?),
        nix::sys::signal::Signal::SIGTERM,
    )?;
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait()).await??;
    if !status.success() {
        bail!("the agent exited with {status}");
    }
    server.shutdown().await;
    Ok(())
}

/// 50 fixture servers (served by this same binary) and 200 context files.
fn write_workspace(dir: &Path, ctxsync: &Path) -> Result<()> {
    let servers: serde_json::Map<String, serde_json::Value> = (0..SERVERS)
        .map(|i| {
            let entry = serde_json::json!({
                "command": ctxsync,
                "args": ["mcp-fixture", "--tools", TOOLS_PER_SERVER.to_string()],
            });
            (format!("server-{i:02}"), entry)
        })
        .collect();
    std::fs::write(
        dir.join(".mcp.json"),
        serde_json::json!({ "mcpServers": servers }).to_string(),
    )?;
    std::fs::write(dir.join("AGENTS.md"), "# Agents\nKeep changes small.\n")?;
    std::fs::write(dir.join("CLAUDE.md"), "# Claude\nRun the tests.\n")?;
    let filler = "Step by step, with care. ".repeat(SKILL_BODY_BYTES / 24);
    for i in 0..FILES - 2 {
        let name = format!("skill-{i:03}");
        let skill = dir.join("skills").join(&name);
        std::fs::create_dir_all(&skill)?;
        std::fs::write(
            skill.join("SKILL.md"),
            format!("---\nname: {name}\ndescription: Skill number {i}.\n---\n{filler}\n"),
        )?;
    }
    Ok(())
}

/// utime + stime of `pid`, in clock ticks (`/proc/<pid>/stat` fields 14 and 15).
fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the parenthesized command name, which may contain spaces.
    let rest = stat.rsplit_once(')').context("malformed stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state), so field n is at index n - 3.
    let utime: u64 = fields.get(11).context("no utime")?.parse()?;
    let stime: u64 = fields.get(12).context("no stime")?.parse()?;
    Ok(utime + stime)
}

/// `getconf CLK_TCK`, else Linux's usual 100.
fn clock_ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok()?.trim().parse().ok())
        .unwrap_or(100.0)
}
