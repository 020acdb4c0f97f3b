//! What embedders rely on: the API docs build without a warning (broken intra-doc links
//! included), every library crate builds with its default features off, each database
//! backend builds alone, and those builds leave out what they promise to leave out.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Library crates checked with `--no-default-features`. Persistence is not among them:
/// it needs a backend, so it is checked with each one alone instead.
const WITHOUT_DEFAULTS: &[&str] = &[
    "ctxsync-mcp-fixture",
    "ctxsync-agent-diagnostics",
    "ctxsync-protocol",
    "ctxsync-agent-publication",
    "ctxsync-chat-projection",
    "ctxsync-first-turn-gate",
    "ctxsync-context-ui",
];

/// A build, and the crates its normal dependency tree must not contain.
struct Promise {
    package: &'static str,
    features: &'static [&'static str],
    absent: &'static [&'static str],
}

const PROMISES: &[Promise] = &[
    Promise {
        package: "ctxsync-first-turn-gate",
        features: &["--no-default-features"],
        absent: &["diesel", "pq-sys", "libsqlite3-sys", "ctxsync-persistence"],
    },
    Promise {
        package: "ctxsync-chat-projection",
        features: &["--no-default-features"],
        absent: &["diesel", "pq-sys", "libsqlite3-sys", "ctxsync-persistence"],
    },
    Promise {
        package: "ctxsync-persistence",
        features: &["--no-default-features", "--features", "postgres"],
        absent: &["libsqlite3-sys"],
    },
    Promise {
        package: "ctxsync-persistence",
        features: &["--no-default-features", "--features", "sqlite"],
        absent: &["pq-sys", "openssl-sys", "tokio-postgres"],
    },
];

pub fn check(root: &Path, cargo: &Path) -> Result<()> {
    let started = std::time::Instant::now();
    cargo_run(
        root,
        cargo,
        &["doc", "--workspace", "--no-deps"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    for package in WITHOUT_DEFAULTS {
        cargo_run(
            root,
            cargo,
            &["check", "-p", package, "--no-default-features"],
            &[],
        )?;
    }
    for backend in ["sqlite", "postgres"] {
        let args = [
            "check",
            "-p",
            "ctxsync-persistence",
            "--no-default-features",
        ];
        cargo_run(
            root,
            cargo,
            &[&args[..], &["--features", backend]].concat(),
            &[],
        )?;
    }
    for promise in PROMISES {
        let tree = normal_dependencies(root, cargo, promise)?;
        let present: Vec<&str> = promise
            .absent
            .iter()
            .copied()
            .filter(|name| tree.iter().any(|crate_name| crate_name == name))
            .collect();
        if !present.is_empty() {
            bail!(
                "`{}` with {} depends on {}, which that build promises to leave out",
                promise.package,
                promise.features.join(" "),
                present.join(", ")
            );
        }
        println!(
            "embedding: {} with {}: {} crates, none of {}",
            promise.package,
            promise.features.join(" "),
            tree.len(),
            promise.absent.join(", ")
        );
    }
    println!(
        "embedding: docs and feature builds checked in {:.0?}",
        started.elapsed()
    );
    Ok(())
}

/// The distinct crate names of the build's normal (not dev, not build) dependency tree.
fn normal_dependencies(root: &Path, cargo: &Path, promise: &Promise) -> Result<Vec<String>> {
    let output = Command::new(cargo)
        .args([
            "tree",
            "-p",
            promise.package,
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(promise.features)
        .args(["--format", "{p}"])
        .current_dir(root)
        .output()
        .context("running cargo tree")?;
    if !output.status.success() {
        bail!(
            "cargo tree -p {} failed: {}",
            promise.package,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let mut names: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

fn cargo_run(root: &Path, cargo: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<()> {
    let shown: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v:?} ")).collect();
    println!("$ {}cargo {}", shown.concat(), args.join(" "));
    let status = Command::new(cargo)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(root)
        .status()
        .context("starting cargo")?;
    if !status.success() {
        bail!("`cargo {}` failed with {status}", args.join(" "));
    }
    Ok(())
}
