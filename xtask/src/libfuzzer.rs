//! The libFuzzer half of `cargo xtask fuzz`: builds the `cargo fuzz` targets in `fuzz/`
//! on the stable toolchain (`--sanitizer none` needs no `RUSTC_BOOTSTRAP`), runs each from
//! a scratch copy of its committed seed corpus for its share of the time, and reports the
//! executions each ran or the crash it found.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// Every `cargo fuzz` target in `fuzz/fuzz_targets/`, bottom layer first.
pub(crate) const TARGETS: &[&str] = &[
    "mcp_config",
    "sanitizer",
    "wire_push",
    "front_matter",
    "find_tools",
];

/// cargo fuzz's sanitizer choice. With `none` it passes only stable flags (sancov
/// coverage through `-Cpasses`/`-Cllvm-args`, `--cfg fuzzing`, debug assertions), so it
/// builds on the stable toolchain as it is. ASan (`address`, cargo fuzz's default) adds
/// `-Zsanitizer=address`, which stable rustc takes only with `RUSTC_BOOTSTRAP=1`, and
/// took 2.4 times the CPU time to build; the targets are safe Rust, where ASan finds
/// little that debug assertions and overflow checks (both on) do not.
const SANITIZER: &str = "none";

/// An input running longer than this counts as a hang (libFuzzer writes it as `timeout-…`).
const INPUT_TIMEOUT_SECONDS: u64 = 10;

/// What one target ran.
#[derive(Debug)]
pub(crate) struct Ran {
    pub executions: u64,
    pub took: Duration,
}

/// Whether `cargo fuzz` is installed, installing it (from crates.io) when it is not.
pub(crate) fn ensure_cargo_fuzz(root: &Path, cargo: &Path) -> Result<()> {
    let installed = |cargo: &Path| {
        Command::new(cargo)
            .args(["fuzz", "--version"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if installed(cargo) {
        return Ok(());
    }
    crate::run(
        root,
        cargo.to_path_buf(),
        &["install", "cargo-fuzz", "--locked"],
    )
    .context("installing cargo-fuzz")?;
    if !installed(cargo) {
        bail!("cargo-fuzz was installed but `cargo fuzz --version` still fails");
    }
    Ok(())
}

/// A `cargo fuzz` command with what every invocation needs on the stable toolchain.
fn cargo_fuzz(root: &Path, cargo: &Path, subcommand: &str) -> Command {
    let mut command = Command::new(cargo);
    command
        .args(["fuzz", subcommand, "--sanitizer", SANITIZER])
        // Its own target directory whatever CARGO_TARGET_DIR says: the instrumented
        // release build shares nothing with the workspace's builds.
        .arg("--target-dir")
        .arg(root.join("fuzz/target"))
        .current_dir(root);
    if needs_unstable_flags(SANITIZER) {
        // Lets stable rustc accept `-Zsanitizer`. Only then: dependencies' build scripts
        // (proc-macro2, anyhow, ...) probe for nightly features when it is set, so it
        // would change what they compile and rebuild everything each time it flips.
        command.env("RUSTC_BOOTSTRAP", "1");
    }
    command
}

/// Whether cargo fuzz passes `-Z` flags for this sanitizer (all but `none` do).
pub(crate) fn needs_unstable_flags(sanitizer: &str) -> bool {
    sanitizer != "none"
}

/// Builds every target (release, debug assertions on) and returns how long it took.
pub(crate) fn build(root: &Path, cargo: &Path) -> Result<Duration> {
    let started = Instant::now();
    println!("$ cargo fuzz build --sanitizer {SANITIZER}");
    let status = cargo_fuzz(root, cargo, "build")
        .status()
        .context("running cargo fuzz build")?;
    if !status.success() {
        bail!("cargo fuzz build failed with {status}");
    }
    Ok(started.elapsed())
}

/// Runs every target for `slice` each and fails on the first crash, naming its input.
pub(crate) fn run(root: &Path, cargo: &Path, slice: Duration) -> Result<Vec<Ran>> {
    let mut results = Vec::new();
    for &target in TARGETS {
        let corpus = scratch_corpus(root, target)?;
        let started = Instant::now();
        let output = cargo_fuzz(root, cargo, "run")
            .arg(target)
            .arg(&corpus)
            .arg("--")
            .arg(format!("-max_total_time={}", slice.as_secs().max(1)))
            .arg(format!("-timeout={INPUT_TIMEOUT_SECONDS}"))
            .arg("-print_final_stats=1")
            .output()
            .with_context(|| format!("running cargo fuzz run {target}"))?;
        let took = started.elapsed();
        let log = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            match crash_artifact(&log) {
                Some(artifact) => bail!(
                    "fuzz target {target} crashed; input: {}\n{}\n{}",
                    root.join("fuzz").join(artifact).display(),
                    panic_message(&log).unwrap_or_default(),
                    tail.join("\n")
                ),
                None => bail!(
                    "fuzz target {target} failed with {}:\n{}",
                    output.status,
                    tail.join("\n")
                ),
            }
        }
        let executions = executions(&log)
            .with_context(|| format!("no execution count in {target}'s libFuzzer output"))?;
        println!(
            "fuzz: libFuzzer {target:<14} {executions:>11} executions in {:>6.1}s",
            took.as_secs_f64()
        );
        results.push(Ran { executions, took });
    }
    Ok(results)
}

/// A fresh copy of `fuzz/corpus/<target>` under `target/`: libFuzzer adds what it finds
/// to its corpus directory, and only the hand-picked seeds are committed.
fn scratch_corpus(root: &Path, target: &str) -> Result<PathBuf> {
    let seeds = root.join("fuzz/corpus").join(target);
    let scratch = root.join("target/fuzz-corpus").join(target);
    if scratch.exists() {
        std::fs::remove_dir_all(&scratch)
            .with_context(|| format!("clearing {}", scratch.display()))?;
    }
    std::fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    for entry in
        std::fs::read_dir(&seeds).with_context(|| format!("reading {}", seeds.display()))?
    {
        let entry = entry?;
        std::fs::copy(entry.path(), scratch.join(entry.file_name()))
            .with_context(|| format!("copying {}", entry.path().display()))?;
    }
    Ok(scratch)
}

/// The executions libFuzzer reports at the end of a run: `stat::number_of_executed_units`
/// (with `-print_final_stats=1`), else the `Done N runs` line.
pub(crate) fn executions(log: &str) -> Option<u64> {
    let stat = log.lines().find_map(|line| {
        line.strip_prefix("stat::number_of_executed_units:")?
            .trim()
            .parse()
            .ok()
    });
    stat.or_else(|| {
        log.lines().rev().find_map(|line| {
            line.strip_prefix("Done ")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
    })
}

/// The input libFuzzer saved for a crash, leak or hang (`Test unit written to PATH`),
/// relative to the fuzz directory cargo fuzz runs it in.
pub(crate) fn crash_artifact(log: &str) -> Option<&str> {
    log.lines().find_map(|line| {
        line.split_once("Test unit written to ")
            .map(|(_, p)| p.trim())
    })
}

/// The panic location and message (the line after `panicked at`, cut to 2000 bytes):
/// cargo fuzz's own summary at the end of the log does not repeat them.
pub(crate) fn panic_message(log: &str) -> Option<String> {
    let mut lines = log.lines().skip_while(|l| !l.contains("panicked at"));
    let location = lines.next()?;
    let message = lines.next().unwrap_or_default();
    let mut cut = message.len().min(2000);
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    Some(format!("{location}\n{}", &message[..cut]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executions_come_from_the_final_stats_or_the_done_line() {
        let stats = "#262144\tpulse  cov: 812 ft: 3101\nDone 301245 runs in 31 second(s)\n\
                     stat::number_of_executed_units: 301245\nstat::average_exec_per_sec:     9717\n";
        assert_eq!(executions(stats), Some(301_245));
        let done =
            "INFO: Seed: 1\n#301245\tDONE   cov: 812 ft: 3101\nDone 301245 runs in 31 second(s)\n";
        assert_eq!(executions(done), Some(301_245));
        assert_eq!(executions("==1== ERROR: libFuzzer: deadly signal\n"), None);
    }

    #[test]
    fn the_crash_artifact_is_the_test_unit_path() {
        let log = "thread '<unnamed>' panicked at fuzz_targets/sanitizer.rs:80:9:\n\
                   ==7== ERROR: libFuzzer: deadly signal\n\
                   artifact_prefix='/w/fuzz/artifacts/sanitizer/'; Test unit written to /w/fuzz/artifacts/sanitizer/crash-0a1b\n\
                   Base64: QUJD\n";
        assert_eq!(
            crash_artifact(log),
            Some("/w/fuzz/artifacts/sanitizer/crash-0a1b")
        );
        assert_eq!(crash_artifact("Done 5 runs in 1 second(s)\n"), None);
    }

    #[test]
    fn the_panic_message_is_the_two_lines_from_panicked_at() {
        let log = "Running: x\n\nthread '<unnamed>' (1) panicked at fuzz_targets/find_tools.rs:180:17:\n\
                   NothingToFind for FindToolsRequest\nstack backtrace:\n";
        assert_eq!(
            panic_message(log).as_deref(),
            Some(
                "thread '<unnamed>' (1) panicked at fuzz_targets/find_tools.rs:180:17:\nNothingToFind for FindToolsRequest"
            )
        );
        assert_eq!(panic_message("Done 5 runs in 1 second(s)\n"), None);
    }

    #[test]
    fn only_sanitizers_need_rustc_bootstrap() {
        assert!(!needs_unstable_flags("none"));
        assert!(needs_unstable_flags("address"));
        assert!(
            !needs_unstable_flags(SANITIZER),
            "the default runs on plain stable"
        );
    }

    #[test]
    fn every_target_has_a_source_file_a_bin_entry_and_seeds() {
        let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
        let manifest = std::fs::read_to_string(fuzz.join("Cargo.toml")).unwrap();
        for target in TARGETS {
            assert!(
                fuzz.join(format!("fuzz_targets/{target}.rs")).exists(),
                "{target}"
            );
            assert!(
                manifest.contains(&format!("name = \"{target}\"")),
                "{target}"
            );
            let seeds =
                std::fs::read_dir(fuzz.join("corpus").join(target)).map_or(0, |d| d.count());
            assert!(seeds > 0, "{target} has no seed corpus");
        }
    }
}
