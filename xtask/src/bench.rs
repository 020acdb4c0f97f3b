//! `cargo xtask bench`: runs every benchmark program in release mode, collects the rows they
//! print (one JSON object per line on stdout) and shows them as one table.
//!
//! Benchmarks live beside the code they measure as examples; each compares against a
//! reference measured in the same run, so noisy machines still give honest ratios.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

/// The benchmark programs: (package, example). Each accepts `--quick`.
pub(crate) const PROGRAMS: &[(&str, &str)] = &[
    ("ctxsync-agent-diagnostics", "bench_discovery"),
    ("ctxsync-chat-projection", "bench_find_tools"),
    ("ctxsync-agent-api", "bench_push"),
    ("ctxsync-first-turn-gate", "bench_gate"),
    ("ctxsync", "bench_replicas"),
    ("ctxsync", "bench_agent"),
    ("ctxsync", "bench_scale"),
    ("ctxsync", "bench_tool_calls"),
    ("ctxsync", "bench_sign_in"),
];

/// One measured figure, as a benchmark program prints it and `--json` writes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct Row {
    pub name: String,
    pub value: f64,
    pub unit: String,
    pub reference: Option<f64>,
    pub ratio: Option<f64>,
    pub target: Option<String>,
    pub pass: Option<bool>,
}

/// Parses a program's stdout: JSON rows, one per line; other lines are an error, because a
/// silently dropped row would hide a missing figure.
pub(crate) fn parse_rows(program: &str, stdout: &str) -> Result<Vec<Row>> {
    stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            serde_json::from_str(line)
                .with_context(|| format!("{program} printed a line that is not a row: {line}"))
        })
        .collect()
}

fn figure(value: Option<f64>) -> String {
    match value {
        None => "-".into(),
        Some(v) if v.abs() >= 100.0 => format!("{v:.0}"),
        Some(v) if v.abs() >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.3}"),
    }
}

/// Renders rows as a Markdown table (readable in a terminal, pastable into BENCHMARKS.md).
pub(crate) fn table(rows: &[Row]) -> String {
    let mut out =
        String::from("| benchmark | figure | unit | reference | ratio | target | result |\n");
    out.push_str("|---|---:|---|---:|---:|---|---|\n");
    for row in rows {
        let result = match row.pass {
            Some(true) => "pass",
            Some(false) => "miss",
            None => "-",
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            row.name,
            figure(Some(row.value)),
            row.unit,
            figure(row.reference),
            figure(row.ratio),
            row.target.as_deref().unwrap_or("-"),
            result
        ));
    }
    out
}

/// The helper binaries benchmarks start: (package, binary, the variable naming its path).
/// They are built with the examples so that nothing is built twice (see [`build`]).
const HELPERS: &[(&str, &str, &str)] = &[
    ("ctxsync", "ctxsync", "CTXSYNC_BENCH_BINARY"),
    (
        "ctxsync-mcp-fixture",
        "ctxsync-mcp-fixture",
        "CTXSYNC_MCP_FIXTURE_BIN",
    ),
];

/// Builds every benchmark program and helper binary in one release build, and returns
/// their executables by target name (see [`Build`]).
pub(crate) fn build(
    root: &Path,
    cargo: &Path,
) -> Result<std::collections::HashMap<String, PathBuf>> {
    Build::start(root, cargo, Release::Everything, false)?.finish()
}

/// What a release [`Build`] builds.
#[derive(Clone, Copy)]
pub(crate) enum Release {
    /// Every benchmark program and helper binary (`cargo xtask bench`, `self-contained`).
    Everything,
    /// Only the `ctxsync` binary, as `cargo install` builds it: CI's one release build.
    /// CI's benchmark run drives it with the programs the tests' build already compiled
    /// ([`Programs::TestBuildAgainst`]); compiling those again at `-O3` was about a
    /// quarter of the release build, for figures CI never checks.
    ProductBinary,
}

/// Where the benchmark programs [`run`] runs come from.
pub(crate) enum Programs {
    /// One release build of every program and helper, here and now.
    Release,
    /// The programs and the MCP fixture from the tests' (debug) build, driving the
    /// `ctxsync` of a [`Release::ProductBinary`] build started earlier. The figures are
    /// a smoke run's: the programs' own side is unoptimized.
    TestBuildAgainst(Build),
}

/// The executables of `targets` in the tests' debug build (`--features` as the README's
/// test command, so nothing is compiled again), by target name; `what` names them in the
/// error when the build fails.
pub(crate) fn test_build(
    root: &Path,
    cargo: &Path,
    targets: &[&str],
    what: &str,
) -> Result<std::collections::HashMap<String, PathBuf>> {
    let mut args: Vec<&str> = vec![
        "build",
        "--features",
        crate::workspace_hack::UNIFY,
        "--message-format=json-render-diagnostics",
    ];
    args.extend(targets);
    eprintln!("$ cargo {}", args.join(" "));
    let output = Command::new(cargo)
        .args(&args)
        .current_dir(root)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo build")?;
    if !output.status.success() {
        bail!("building {what} failed (cargo's errors are above)");
    }
    Ok(executables_in(&String::from_utf8_lossy(&output.stdout)))
}

/// Cargo's target arguments for every benchmark program and helper binary.
fn program_targets() -> Vec<&'static str> {
    let mut args = Vec::new();
    let mut packages: Vec<&str> = PROGRAMS.iter().map(|(package, _)| *package).collect();
    packages.extend(HELPERS.iter().map(|(package, _, _)| *package));
    packages.sort_unstable();
    packages.dedup();
    for package in packages {
        args.extend(["-p", package]);
    }
    for (_, example) in PROGRAMS {
        args.extend(["--example", example]);
    }
    for (_, binary, _) in HELPERS {
        args.extend(["--bin", binary]);
    }
    args
}

/// The executables cargo's JSON messages name, by target name.
fn executables_in(messages: &str) -> std::collections::HashMap<String, PathBuf> {
    let mut executables = std::collections::HashMap::new();
    for line in messages.lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if message["reason"] != "compiler-artifact" {
            continue;
        }
        if let (Some(name), Some(path)) = (
            message["target"]["name"].as_str(),
            message["executable"].as_str(),
        ) {
            executables.insert(name.to_owned(), PathBuf::from(path));
        }
    }
    executables
}

/// A release build: of every benchmark program and helper binary, or of the product
/// binary alone ([`Release`]). One invocation means one feature resolution: built one by
/// one, each package's examples (and a binary built alone) unify their dependencies'
/// features differently, and each rebuild took minutes on CI. The build hides the
/// system's libpq and OpenSSL, so `self-contained` checks this very `ctxsync` (a second
/// release build with another `PATH` and target set rebuilt everything).
pub(crate) struct Build {
    child: Option<std::process::Child>,
    /// Cargo's JSON messages (in a file: a pipe nobody reads while the build runs in the
    /// background would fill and stall it).
    messages: PathBuf,
    /// Cargo's progress and diagnostics when the build runs in the background.
    log: Option<PathBuf>,
    started: std::time::Instant,
}

impl Build {
    /// Starts the build. In the `background` it runs at the lowest CPU priority with its
    /// progress in a file: CI starts it during the checks, and it takes the cores only
    /// while they would idle (tests waiting on processes, sockets and the database), so
    /// most of it is done by the time the benchmarks run. Release and debug builds lock
    /// separate profile directories, so it never blocks the checks' own builds.
    pub(crate) fn start(
        root: &Path,
        cargo: &Path,
        what: Release,
        background: bool,
    ) -> Result<Self> {
        let mut args: Vec<&str> = vec![
            "build",
            "--release",
            "--message-format=json-render-diagnostics",
        ];
        match what {
            Release::Everything => args.extend(program_targets()),
            Release::ProductBinary => args.extend(["-p", "ctxsync", "--bin", "ctxsync"]),
        }
        let dir = root.join("target").join("bench-build");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let messages = dir.join("messages.json");
        let log = background.then(|| dir.join("cargo.log"));
        eprintln!(
            "bench: $ cargo {} (pg_config hidden, no PQ_LIB_DIR){}",
            args.join(" "),
            if background {
                " in the background, at the lowest CPU priority; progress in target/bench-build/cargo.log"
            } else {
                ""
            }
        );
        let mut command = if background {
            let mut nice = Command::new("nice");
            nice.args(["-n", "19"]).arg(cargo);
            nice
        } else {
            Command::new(cargo)
        };
        crate::portable::hide_system_libraries(root, &mut command)?;
        // The debug build's OpenSSL when there is one (the same flags; see
        // `prebuilt_openssl`): compiling it again was the release build's longest step.
        let openssl = crate::embedding::prebuilt_openssl(root);
        if let Some((install, env)) = openssl
            .as_deref()
            .and_then(|install| Some((install, crate::embedding::prebuilt_openssl_env(install)?)))
        {
            eprintln!(
                "bench: the release build links the OpenSSL built in {}",
                install.display()
            );
            command.envs(env);
        }
        let stdout = std::fs::File::create(&messages)
            .with_context(|| format!("creating {}", messages.display()))?;
        let stderr = match &log {
            Some(log) => Stdio::from(
                std::fs::File::create(log)
                    .with_context(|| format!("creating {}", log.display()))?,
            ),
            None => Stdio::inherit(),
        };
        let child = command
            .args(&args)
            .current_dir(root)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .context("starting cargo build --release")?;
        Ok(Self {
            child: Some(child),
            messages,
            log,
            started: std::time::Instant::now(),
        })
    }

    /// Waits for the build and returns the executables it produced, by target name.
    pub(crate) fn finish(mut self) -> Result<std::collections::HashMap<String, PathBuf>> {
        let mut child = self
            .child
            .take()
            .context("the release build was already waited for")?;
        let status = child.wait().context("waiting for cargo build --release")?;
        let took = self.started.elapsed();
        if !status.success() {
            if let Some(log) = &self.log {
                let text = std::fs::read_to_string(log).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(60).collect();
                for line in tail.into_iter().rev() {
                    eprintln!("{line}");
                }
            }
            bail!("building the benchmarks failed with {status}");
        }
        eprintln!("bench: the release build finished {took:.0?} after it started");
        let messages = std::fs::read_to_string(&self.messages)
            .with_context(|| format!("reading {}", self.messages.display()))?;
        Ok(executables_in(&messages))
    }
}

/// CI's release build before it starts: it waits for the debug build's OpenSSL (which
/// it links, see [`Build::start`]) or for [`PendingBuild::go`], whichever comes first.
/// Dropped before it started, it never starts; dropped after, the build is stopped.
pub(crate) struct PendingBuild {
    signal: Arc<(Mutex<Signal>, Condvar)>,
    thread: Option<std::thread::JoinHandle<Result<Option<Build>>>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Signal {
    Wait,
    Go,
    Abandon,
}

impl PendingBuild {
    /// Starts waiting, in the background (see [`PendingBuild`]).
    pub(crate) fn after_openssl(root: &Path, cargo: &Path) -> Self {
        let signal = Arc::new((Mutex::new(Signal::Wait), Condvar::new()));
        let (root, cargo, shared) = (root.to_owned(), cargo.to_owned(), Arc::clone(&signal));
        let thread = std::thread::spawn(move || {
            let (lock, wake) = &*shared;
            let mut state = lock
                .lock()
                .map_err(|_| anyhow::anyhow!("a lock was poisoned"))?;
            while *state == Signal::Wait && crate::embedding::prebuilt_openssl(&root).is_none() {
                state = wake
                    .wait_timeout(state, std::time::Duration::from_secs(2))
                    .map_err(|_| anyhow::anyhow!("a lock was poisoned"))?
                    .0;
            }
            if *state == Signal::Abandon {
                return Ok(None);
            }
            drop(state);
            Build::start(&root, &cargo, Release::ProductBinary, true).map(Some)
        });
        Self {
            signal,
            thread: Some(thread),
        }
    }

    /// Starts the build now if it has not started (no OpenSSL to wait for any more).
    pub(crate) fn go(&self) {
        self.signal(Signal::Go);
    }

    /// The started build.
    pub(crate) fn started(mut self) -> Result<Build> {
        self.go();
        self.thread
            .take()
            .context("the release build was already taken")?
            .join()
            .map_err(|_| anyhow::anyhow!("starting the release build panicked"))??
            .context("the release build was abandoned")
    }

    fn signal(&self, to: Signal) {
        let (lock, wake) = &*self.signal;
        if let Ok(mut state) = lock.lock()
            && *state == Signal::Wait
        {
            *state = to;
        }
        wake.notify_all();
    }
}

impl Drop for PendingBuild {
    fn drop(&mut self) {
        self.signal(Signal::Abandon);
        if let Some(thread) = self.thread.take() {
            // A build that had started is dropped here, which stops it.
            let _ = thread.join();
        }
    }
}

impl Drop for Build {
    /// A CI step that fails before the benchmarks leaves no build running behind it.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Builds and runs every benchmark; returns the executables built (by target name), so a
/// caller can check the very binary that ran.
pub(crate) fn run(
    root: &Path,
    cargo: &Path,
    quick: bool,
    json: Option<&Path>,
    programs: Programs,
) -> Result<std::collections::HashMap<String, PathBuf>> {
    let started = std::time::Instant::now();
    crate::install_tools(root, crate::Tools::for_command("bench"))?;
    let build_started = std::time::Instant::now();
    let executables = match programs {
        Programs::Release => build(root, cargo)?,
        Programs::TestBuildAgainst(release) => {
            let mut executables =
                test_build(root, cargo, &program_targets(), "the benchmark programs")?;
            let product = release
                .finish()?
                .remove("ctxsync")
                .context("the release build produced no ctxsync binary")?;
            executables.insert("ctxsync".to_owned(), product);
            executables
        }
    };
    eprintln!(
        "bench: waited {:.0?} for the release build",
        build_started.elapsed()
    );
    let path_of = |name: &str| {
        executables
            .get(name)
            .with_context(|| format!("cargo reported no executable for {name}"))
    };
    // The retrieval benchmark's catalog: real servers, discovered by the binary just built.
    let catalog_started = std::time::Instant::now();
    let catalog = crate::tool_catalog::assemble(root, path_of("ctxsync")?)?;
    eprintln!(
        "bench: tool catalog assembled in {:.0?}",
        catalog_started.elapsed()
    );
    let mut rows = Vec::new();
    for (package, example) in PROGRAMS {
        eprintln!("bench: {package} {example}");
        let program_started = std::time::Instant::now();
        let mut command = Command::new(path_of(example)?);
        if quick {
            command.arg("--quick");
        }
        for (_, binary, variable) in HELPERS {
            command.env(variable, path_of(binary)?);
        }
        command.env("CTXSYNC_BENCH_TOOL_CATALOG", &catalog);
        // The Python MCP SDK reference runs on the tests' pinned SDK.
        command.env(
            crate::PYTHON_MCP_ENV,
            root.join(crate::PYTHON_MCP_DIR).join("bin/python"),
        );
        let output = command
            .current_dir(root)
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("running {example}"))?;
        if !output.status.success() {
            bail!(
                "benchmark {package}/{example} failed with {}",
                output.status
            );
        }
        rows.extend(parse_rows(
            example,
            &String::from_utf8_lossy(&output.stdout),
        )?);
        // Where a CI run's bench step spends its time.
        eprintln!("bench: {example} took {:.0?}", program_started.elapsed());
    }
    if rows.is_empty() {
        bail!("no benchmark produced a row");
    }
    println!("{}", table(&rows));
    // Builds included: on a warm target directory this is the suite's own running time.
    eprintln!(
        "bench: {} rows from {} programs in {:.0?}",
        rows.len(),
        PROGRAMS.len(),
        started.elapsed()
    );
    if let Some(path) = json {
        let doc = serde_json::json!({ "rows": rows });
        std::fs::write(path, serde_json::to_string_pretty(&doc)?)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("bench: wrote {}", path.display());
    }
    Ok(executables)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_parse_and_render() {
        let stdout = r#"{"name":"discovery","value":0.41,"unit":"s","reference":1.9,"ratio":0.21,"target":"<= 1.3 x slowest","pass":true}

{"name":"rss","value":38.2,"unit":"MiB","reference":null,"ratio":null,"target":null,"pass":null}
"#;
        let rows = parse_rows("x", stdout).expect("rows parse");
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].pass, Some(true));
        let table = table(&rows);
        assert!(
            table.contains("| discovery | 0.410 | s | 1.900 | 0.210 | <= 1.3 x slowest | pass |"),
            "{table}"
        );
        assert!(
            table.contains("| rss | 38.2 | MiB | - | - | - | - |"),
            "{table}"
        );
    }

    #[test]
    fn a_stray_line_is_an_error() {
        let err = parse_rows("bench_x", "took 3s\n").unwrap_err();
        assert!(format!("{err:#}").contains("bench_x printed a line that is not a row"));
    }
}
