//! Shared by the `ctxsync` benchmark examples: the row format `cargo xtask bench` reads,
//! `/proc` readings, percentiles, and the `ctxsync` binary as a server process.
//!
//! Each example uses a different subset, hence the `dead_code` allowance.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use ctxsync_test_support::ServerAddress;
use tokio::io::{AsyncBufReadExt, BufReader};

/// A `kB` line of `/proc/<pid>/status` in KiB, e.g. `VmRSS` or `VmHWM`.
pub(crate) fn status_kib(pid: u32, key: &str) -> Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|value| value.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("no {key} in /proc/{pid}/status"))
}

/// CPU time (user + system) `pid` has used so far, in seconds: `/proc/<pid>/stat` fields
/// 14 and 15 over the clock tick rate. All its threads; not its children.
pub(crate) fn process_cpu_seconds(pid: u32) -> Result<f64> {
    let (_, _, own, _) = process_stat(pid).with_context(|| format!("no /proc/{pid}/stat"))?;
    Ok(own)
}

/// `/proc/<pid>/stat`'s (parent, start time in clock ticks since boot, own CPU seconds,
/// CPU seconds of its children that ended and were waited for); `None` for a process
/// that is gone or a malformed line.
pub(crate) fn process_stat(pid: u32) -> Option<(u32, u64, f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesized command name, which may contain spaces; `rest`
    // starts at field 3 (state), so field n is at index n - 3.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let number = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    let hz = clock_ticks_hz();
    Some((
        u32::try_from(number(4)?).ok()?,
        number(22)?,
        (number(14)? + number(15)?) as f64 / hz,
        (number(16)? + number(17)?) as f64 / hz,
    ))
}

/// `getconf CLK_TCK` (asked once), else Linux's usual 100.
pub(crate) fn clock_ticks_hz() -> f64 {
    static HZ: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *HZ.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok()?.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// The whole machine's CPU time from `/proc/stat`'s `cpu` line, in clock ticks summed
/// over all cores: (busy, total), where idle and iowait are not busy.
pub(crate) fn machine_cpu_ticks() -> Result<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .context("no cpu line in /proc/stat")?;
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let ticks: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    let total: u64 = ticks.iter().sum();
    let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
    Ok((total - idle, total))
}

/// This process's (soft, hard) limits on open files from `/proc/self/limits`;
/// `unlimited` reads as `u64::MAX`.
pub(crate) fn open_files_limits() -> Option<(u64, u64)> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let mut values = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?
        .split_whitespace()
        .map(|v| match v {
            "unlimited" => Some(u64::MAX),
            v => v.parse().ok(),
        });
    Some((values.next()??, values.next()??))
}

/// Raises this process's soft limit on open files to its hard limit (children, such as a
/// server started afterwards, inherit it), with util-linux's `prlimit` since no `libc`
/// binding is at hand; best effort. Returns the soft limit in force afterwards.
pub(crate) fn raise_open_files_limit() -> Option<u64> {
    let (soft, hard) = open_files_limits()?;
    if soft < hard {
        let hard = if hard == u64::MAX {
            "unlimited".to_owned()
        } else {
            hard.to_string()
        };
        let _ = std::process::Command::new("prlimit")
            .arg(format!("--pid={}", std::process::id()))
            .arg(format!("--nofile={hard}:{hard}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    Some(open_files_limits()?.0)
}

/// The `p`-th percentile (0–100, nearest rank) in milliseconds; NaN without samples.
pub(crate) fn percentile_ms(samples: &[Duration], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64() * 1000.0
}

/// The `ctxsync` binary of this build's profile: `cargo run --example` does not build the
/// package's binaries, so build it and take cargo's path for it. Built together with
/// `example` (the one running), so every dependency keeps the features this run already
/// compiled with dev-dependencies (the binary alone would unify them differently and
/// rebuild the world): only the binary is linked.
pub(crate) fn ctxsync_binary(example: &str) -> Result<PathBuf> {
    // `cargo xtask bench` builds it with every benchmark in one build and says where.
    if let Some(path) = std::env::var_os("CTXSYNC_BENCH_BINARY") {
        let path = PathBuf::from(path);
        if !path.is_file() {
            bail!("CTXSYNC_BENCH_BINARY={} is not a file", path.display());
        }
        return Ok(path);
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let mut command = std::process::Command::new(cargo);
    command
        .args([
            "build",
            "--quiet",
            "--message-format=json-render-diagnostics",
        ])
        .args(["-p", "ctxsync", "--bin", "ctxsync", "--example", example])
        .arg("--manifest-path")
        .arg(&manifest)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    if !cfg!(debug_assertions) {
        command.arg("--release");
    }
    let output = command.output().context("running cargo build")?;
    if !output.status.success() {
        bail!("building ctxsync failed: {}", output.status);
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "ctxsync")
        .filter(|m| {
            m["target"]["kind"]
                .as_array()
                .is_some_and(|kinds| kinds.iter().any(|k| k == "bin"))
        })
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .context("cargo reported no ctxsync executable")
}

/// A `ctxsync server` process on a PostgreSQL database, and the addresses it printed.
pub(crate) struct ServerProcess {
    child: tokio::process::Child,
    pub pid: u32,
    pub agent_url: String,
    pub http_url: String,
}

impl ServerProcess {
    /// Starts `ctxsync server` on `database_url` with ephemeral ports and `extra` flags,
    /// and waits (bounded) for it to print both addresses.
    pub(crate) async fn start(
        ctxsync: &Path,
        database_url: &str,
        data_dir: &Path,
        extra: &[&str],
    ) -> Result<Self> {
        let mut child = tokio::process::Command::new(ctxsync)
            .args(["server", "--database-url", database_url, "--data-dir"])
            .arg(data_dir)
            .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"])
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("starting ctxsync server")?;
        let pid = child.id().context("the server's pid")?;
        let mut lines = BufReader::new(child.stdout.take().context("server stdout")?).lines();
        let (agent_url, http_url) = tokio::time::timeout(Duration::from_secs(60), async {
            let (mut grpc, mut http) = (None, None);
            while grpc.is_none() || http.is_none() {
                let Some(line) = lines.next_line().await? else {
                    bail!("the server exited before printing its addresses");
                };
                // Text or a JSON object, whichever `CTXSYNC_LOG_FORMAT` chose.
                match ctxsync_test_support::server_address(&line) {
                    Some(ServerAddress::Agent(url)) => grpc = Some(url),
                    Some(ServerAddress::Http(url)) => http = Some(url),
                    None => {}
                }
            }
            Ok((grpc.unwrap_or_default(), http.unwrap_or_default()))
        })
        .await
        .context("waiting for the server's addresses")??;
        // Keep reading so the server never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Self {
            child,
            pid,
            agent_url,
            http_url,
        })
    }

    /// Stops the process and waits for it.
    pub(crate) async fn stop(mut self) -> Result<()> {
        self.child.start_kill()?;
        self.child.wait().await?;
        Ok(())
    }
}
