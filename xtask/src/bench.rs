//! `cargo xtask bench`: runs every benchmark program in release mode, collects the rows they
//! print (one JSON object per line on stdout) and shows them as one table.
//!
//! Benchmarks live beside the code they measure as examples; each compares against a
//! reference measured in the same run, so noisy machines still give honest ratios.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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
/// their executables by target name. One invocation means one feature resolution: built
/// one by one, each package's examples (and a binary built alone) unify their
/// dependencies' features differently, and each rebuild took minutes on CI. The build
/// hides the system's libpq and OpenSSL, so `self-contained` checks this very `ctxsync`
/// (a second release build with another `PATH` and target set rebuilt everything).
pub(crate) fn build(
    root: &Path,
    cargo: &Path,
) -> Result<std::collections::HashMap<String, PathBuf>> {
    let mut args: Vec<&str> = vec![
        "build",
        "--release",
        "--message-format=json-render-diagnostics",
    ];
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
    eprintln!(
        "bench: $ cargo {} (pg_config hidden, no PQ_LIB_DIR)",
        args.join(" ")
    );
    let mut command = Command::new(cargo);
    crate::portable::hide_system_libraries(root, &mut command)?;
    let output = command
        .args(&args)
        .current_dir(root)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo build")?;
    if !output.status.success() {
        bail!("building the benchmarks failed with {}", output.status);
    }
    let mut executables = std::collections::HashMap::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
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
    Ok(executables)
}

/// Builds and runs every benchmark; returns the executables built (by target name), so a
/// caller can check the very binary that ran.
pub(crate) fn run(
    root: &Path,
    cargo: &Path,
    quick: bool,
    json: Option<&Path>,
) -> Result<std::collections::HashMap<String, PathBuf>> {
    let started = std::time::Instant::now();
    crate::install_tools(root, crate::Tools::for_command("bench"))?;
    let build_started = std::time::Instant::now();
    let executables = build(root, cargo)?;
    eprintln!("bench: release build took {:.0?}", build_started.elapsed());
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
