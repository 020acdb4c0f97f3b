//! `cargo xtask fuzz --seconds N`: half of N for the fuzz-style property tests (proptest,
//! the `fuzz` module of each crate's test binary, `tests/<binary>/fuzz.rs`) with a case budget scaled to the time, split evenly
//! over the targets, printing the cases each ran; the other half for the libFuzzer
//! targets in `fuzz/` ([`crate::libfuzzer`], `cargo fuzz` on the stable toolchain),
//! printing the executions each ran. Without cargo-fuzz (and no way to install it) the
//! property tests get all of N.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::libfuzzer;

/// One fuzz target: a proptest in the `fuzz` module of a crate's test binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    pub package: &'static str,
    pub test: &'static str,
}

/// Each package's integration-test binary (`tests/<binary>/main.rs`) that holds its
/// `fuzz` module.
pub(crate) const BINARIES: &[(&str, &str)] = &[
    ("ctxsync-agent-diagnostics", "diagnostics"),
    ("ctxsync-protocol", "protocol"),
    ("ctxsync-agent-publication", "publication"),
    ("ctxsync-chat-projection", "projection"),
];

/// The test binary of `package` that holds its fuzz targets.
pub(crate) fn binary_of(package: &str) -> Option<&'static str> {
    BINARIES
        .iter()
        .find(|(name, _)| *name == package)
        .map(|(_, binary)| *binary)
}

impl Target {
    /// The test's full name inside its binary.
    pub(crate) fn path(&self) -> String {
        format!("fuzz::{}", self.test)
    }
}

/// Every fuzz target, bottom layer first.
pub(crate) const TARGETS: &[Target] = &[
    t(
        "ctxsync-agent-diagnostics",
        "fuzz_mcp_config_arbitrary_bytes",
    ),
    t(
        "ctxsync-agent-diagnostics",
        "fuzz_mcp_config_structured_json",
    ),
    t("ctxsync-agent-diagnostics", "fuzz_mcp_config_mutated_json"),
    t("ctxsync-agent-diagnostics", "fuzz_sanitizer"),
    t("ctxsync-protocol", "fuzz_wire_arbitrary_bytes"),
    t("ctxsync-protocol", "fuzz_wire_structured_requests"),
    t(
        "ctxsync-agent-publication",
        "fuzz_front_matter_arbitrary_bytes",
    ),
    t("ctxsync-agent-publication", "fuzz_front_matter_structured"),
    t("ctxsync-chat-projection", "fuzz_find_tools"),
];

const fn t(package: &'static str, test: &'static str) -> Target {
    Target { package, test }
}

/// The first batch of cases a target runs; later batches grow to fill its time slice.
const FIRST_BATCH: u64 = 64;
const MAX_BATCH: u64 = 1 << 22;

/// How many cases the next batch runs: the measured rate times the time left (with a
/// little headroom), at most four times the last batch, at least one case.
pub(crate) fn next_batch(last_batch: u64, last_took: Duration, left: Duration) -> u64 {
    let rate = last_batch as f64 / last_took.as_secs_f64().max(0.001);
    let fits = (rate * left.as_secs_f64() * 0.9) as u64;
    fits.min(last_batch.saturating_mul(4)).clamp(1, MAX_BATCH)
}

/// What one target ran.
#[derive(Debug)]
pub(crate) struct Ran {
    pub target: Target,
    pub cases: u64,
    pub runs: u32,
    pub took: Duration,
}

pub(crate) fn run(root: &Path, cargo: &Path, seconds: u64) -> Result<()> {
    let libfuzzer = match libfuzzer::ensure_cargo_fuzz(root, cargo) {
        Ok(()) => true,
        Err(error) => {
            eprintln!("note: {error:#}; running the property tests only");
            false
        }
    };
    let proptest_seconds = if libfuzzer { seconds / 2 } else { seconds };
    run_schemathesis(root, cargo)?;
    run_property_tests(root, cargo, proptest_seconds)?;
    if !libfuzzer {
        return Ok(());
    }
    let built = libfuzzer::build(root, cargo)?;
    println!("fuzz: cargo fuzz build took {:.0}s", built.as_secs_f64());
    let slice = Duration::from_secs(seconds - proptest_seconds) / libfuzzer::TARGETS.len() as u32;
    let results = libfuzzer::run(root, cargo, slice)?;
    let total: u64 = results.iter().map(|r| r.executions).sum();
    let took: Duration = results.iter().map(|r| r.took).sum();
    println!(
        "fuzz: {total} libFuzzer executions over {} targets in {:.1}s, no crashes",
        results.len(),
        took.as_secs_f64()
    );
    Ok(())
}

/// The chat API's schemathesis test with a fuzzing budget: at least
/// [`SCHEMATHESIS_MIN_REQUESTS`] generated requests (CI's run makes at least 200).
fn run_schemathesis(root: &Path, cargo: &Path) -> Result<()> {
    let started = Instant::now();
    let status = Command::new(cargo)
        .args([
            "test",
            "-p",
            "ctxsync",
            "--test",
            "in_process",
            "openapi::schemathesis",
            "--",
            "--nocapture",
        ])
        .env("CTXSYNC_SCHEMATHESIS_EXAMPLES", "80")
        .env(
            "CTXSYNC_SCHEMATHESIS_MIN_REQUESTS",
            SCHEMATHESIS_MIN_REQUESTS.to_string(),
        )
        .current_dir(root)
        .status()
        .context("running the schemathesis test")?;
    anyhow::ensure!(status.success(), "the schemathesis run failed ({status})");
    println!(
        "fuzz: schemathesis run passed in {:.0}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

const SCHEMATHESIS_MIN_REQUESTS: u64 = 1000;

/// Runs every proptest target for its share of `seconds`.
pub(crate) fn run_property_tests(root: &Path, cargo: &Path, seconds: u64) -> Result<Vec<Ran>> {
    let binaries = build(root, cargo)?;
    let slice = Duration::from_secs(seconds) / TARGETS.len() as u32;
    let mut results = Vec::new();
    for &target in TARGETS {
        let binary = binaries
            .get(target.package)
            .with_context(|| format!("no fuzz test binary built for {}", target.package))?;
        let started = Instant::now();
        let (mut cases, mut runs, mut batch) = (0u64, 0u32, FIRST_BATCH);
        loop {
            let took = run_batch(root, binary, target, batch)?;
            cases += batch;
            runs += 1;
            let elapsed = started.elapsed();
            if elapsed >= slice {
                break;
            }
            batch = next_batch(batch, took, slice - elapsed);
        }
        let ran = Ran {
            target,
            cases,
            runs,
            took: started.elapsed(),
        };
        println!(
            "fuzz: {:<28} {:<36} {:>9} cases in {:>3} runs, {:>6.1}s",
            ran.target.package,
            ran.target.test,
            ran.cases,
            ran.runs,
            ran.took.as_secs_f64()
        );
        results.push(ran);
    }
    let total: u64 = results.iter().map(|r| r.cases).sum();
    let took: Duration = results.iter().map(|r| r.took).sum();
    println!(
        "fuzz: {total} cases over {} targets in {:.1}s, no failures",
        results.len(),
        took.as_secs_f64()
    );
    Ok(results)
}

/// Runs one batch of `cases` cases (a fresh random seed each run) and fails on any failure.
fn run_batch(root: &Path, binary: &Path, target: Target, cases: u64) -> Result<Duration> {
    let started = Instant::now();
    let output = Command::new(binary)
        .args([target.path().as_str(), "--exact", "--test-threads=1"])
        .env("PROPTEST_CASES", cases.to_string())
        .current_dir(root.join("crates").join(target.package))
        .output()
        .with_context(|| format!("running {}", binary.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "fuzz target {}::{} failed after {cases} cases:\n{stdout}\n{}",
            target.package,
            target.test,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    if !stdout.contains("1 passed") {
        bail!(
            "fuzz target {}::{} did not run (renamed?):\n{stdout}",
            target.package,
            target.test
        );
    }
    Ok(started.elapsed())
}

/// Builds each package's `fuzz` test binary and returns the executables by package.
fn build(root: &Path, cargo: &Path) -> Result<BTreeMap<String, PathBuf>> {
    let mut args = vec!["test", "--no-run", "--message-format=json"];
    let mut packages: Vec<&str> = TARGETS.iter().map(|t| t.package).collect();
    packages.dedup();
    for package in &packages {
        let binary =
            binary_of(package).with_context(|| format!("no test binary named for {package}"))?;
        args.extend(["-p", package, "--test", binary]);
    }
    println!("$ {} {}", cargo.display(), args.join(" "));
    let output = Command::new(cargo)
        .args(&args)
        .current_dir(root)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("building the fuzz tests")?;
    if !output.status.success() {
        bail!("building the fuzz tests failed");
    }
    Ok(fuzz_executables(&String::from_utf8_lossy(&output.stdout)))
}

/// The executables of the test binaries holding fuzz targets ([`BINARIES`]) in cargo's
/// JSON messages, by package name.
pub(crate) fn fuzz_executables(messages: &str) -> BTreeMap<String, PathBuf> {
    messages
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
        .filter_map(|m| {
            let executable = m["executable"].as_str()?;
            // package_id looks like `path+file:///…/crates/NAME#0.1.0`.
            let id = m["package_id"].as_str()?;
            let name = id.rsplit('/').next()?.split(['#', '@']).next()?;
            let binary = binary_of(name)?;
            (m["target"]["name"] == binary && m["profile"]["test"] == true)
                .then(|| (name.to_owned(), PathBuf::from(executable)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_grow_to_fill_the_slice_but_not_past_it() {
        let ms = Duration::from_millis;
        // 100 cases in 100 ms, 10 s left: capped at four times the last batch.
        assert_eq!(next_batch(100, ms(100), ms(10_000)), 400);
        // 1000 cases in 1 s, 0.5 s left: about 450 cases fit.
        assert_eq!(next_batch(1000, ms(1000), ms(500)), 450);
        // Nothing left: still one case, never zero.
        assert_eq!(next_batch(1000, ms(1000), ms(0)), 1);
    }

    #[test]
    fn every_target_exists_in_its_crates_fuzz_tests() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        for target in TARGETS {
            let binary = binary_of(target.package).expect("every target's package is listed");
            let file = root
                .join("crates")
                .join(target.package)
                .join("tests")
                .join(binary)
                .join("fuzz.rs");
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            assert!(
                text.contains(&format!("fn {}(", target.test)),
                "{} has no fuzz target {}",
                file.display(),
                target.test
            );
        }
    }

    #[test]
    fn finds_fuzz_executables_in_cargo_messages() {
        let messages = [
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/ctxsync-protocol#0.1.0","target":{"name":"protocol"},"profile":{"test":true},"executable":"/t/protocol-1"}"#,
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/ctxsync-protocol#0.1.0","target":{"name":"ctxsync_protocol"},"profile":{"test":true},"executable":"/t/ctxsync_protocol-1"}"#,
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/xtask#xtask@0.1.0","target":{"name":"protocol"},"profile":{"test":true},"executable":null}"#,
            "not json",
        ]
        .join("\n");
        let found = fuzz_executables(&messages);
        assert_eq!(
            found.into_iter().collect::<Vec<_>>(),
            vec![(
                "ctxsync-protocol".to_owned(),
                PathBuf::from("/t/protocol-1")
            )]
        );
    }
}
