//! `cargo xtask`: code generation, the layer check, the CI entry point and test set-up.

mod bench;
mod codegen;
mod conformance;
mod distill;
mod embedding;
mod fuzz;
mod layers;
mod libfuzzer;
mod names;
mod portable;
mod tidy;
mod tool_catalog;
mod workspace_hack;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  codegen [--check]  regenerate the committed protocol code (--check: fail if it is stale)
  layers             check that crate dependencies point down the layer order (SPEC §2)
  tidy               check that every hand-written Rust file opens with a `//!` line
  workspace-hack [--check]
                     regenerate the dev-only crate that gives every crate's test build
                     the same third-party features (--check: fail if it is stale)
  embedding          the API docs without a warning, each library crate without its
                     default features, each database backend alone, and what those
                     builds leave out (no diesel under the gate, no SQLite with postgres)
  test               install what the tests need, then run every test in the workspace
  test-tools         only install what the tests need (browser, HAProxy, MCP servers)
  fuzz --seconds N   run the property-test and libFuzzer (cargo fuzz) targets for about
                     N seconds in all, half each
  bench [--quick] [--json FILE]
                     build in release mode and run every benchmark, printing one table
  self-contained     build the release binary with pg_config hidden (the benchmarks'
                     build, so it is shared) and check that it links only the C
                     runtime (ldd)
  tool-catalog CTXSYNC
                     assemble the retrieval benchmark's catalog of real MCP servers
                     with the given ctxsync binary, and print the report's path (for
                     tuning find_tools without running every benchmark)
  fuzz-check         `cargo check` the libFuzzer targets in `fuzz/` (their own
                     workspace) with the main target dir and a current lock file
  distill-model [--pooling mean|token] [--dims N] [--sif A] [--out DIR]
                     rebuild the static token-embedding model in
                     crates/ctxsync-chat-projection/model from all-MiniLM-L6-v2 (two
                     wheels pinned by sha256; numpy only, in target/tools/distill;
                     reproducible byte for byte; --out writes a variant elsewhere)
  conformance [--ctxsync BIN] [--scenario NAME]...
                     the official MCP conformance suite's client scenarios (Node 22 and
                     the pinned suite installed once under the target dir) against
                     BIN, or a debug ctxsync it builds; conformance-client is the
                     client command the suite starts
  ci                 everything CI runs: fmt, clippy, fuzz-check, codegen check, layers,
                     workspace-hack check, embedding, tidy, the README's test command (each crate's tests
                     alone, doctests included), `bench --quick` (the programs the
                     tests built, against a release ctxsync; completes, numbers not
                     checked), then `self-contained` and `conformance` on that
                     release ctxsync; each step's wall time is printed

Every command installs what it needs on a fresh machine (test, test-tools and ci: all
test prerequisites; fuzz: the Python clients; bench: the pinned Python MCP SDK;
distill-model: the pinned numpy and the model's wheels; conformance: Node 22 and the
pinned suite).";

/// The README line that precedes the test command's code block.
const README_TEST_MARKER: &str = "<!-- readme-test-command -->";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["codegen"] => codegen(&root, false),
        ["codegen", "--check"] => codegen(&root, true),
        ["layers"] => check_layers(&root),
        ["workspace-hack"] => workspace_hack::run(&root, false),
        ["workspace-hack", "--check"] => workspace_hack::run(&root, true),
        ["tidy"] => tidy(&root),
        ["embedding"] => embedding::check(&root, &cargo()),
        ["test"] => test(&root),
        ["test-tools"] => install_tools(&root, Tools::for_command("test-tools")),
        ["ci"] => ci(&root),
        ["conformance", rest @ ..] => conformance::command(&root, &cargo(), rest),
        ["conformance-client", rest @ ..] => conformance::client::run(rest),
        ["self-contained"] => portable::check(&root, &cargo()),
        ["fuzz-check"] => fuzz_check(&root),
        ["tool-catalog", ctxsync] => {
            install_tools(&root, Tools::for_command("bench"))?;
            let report = tool_catalog::assemble(&root, Path::new(ctxsync))?;
            println!("{}", report.display());
            Ok(())
        }
        ["fuzz", "--seconds", seconds] => {
            let seconds = seconds
                .parse()
                .context("--seconds takes a whole number of seconds")?;
            install_tools(&root, Tools::for_command("fuzz"))?;
            fuzz::run(&root, &cargo(), seconds)
        }
        ["bench", rest @ ..] => {
            let quick = rest.contains(&"--quick");
            let json = rest
                .iter()
                .position(|a| *a == "--json")
                .and_then(|i| rest.get(i + 1));
            if rest.iter().any(|a| !a.starts_with("--") && Some(a) != json)
                || (rest.contains(&"--json") && json.is_none())
            {
                bail!("usage: cargo xtask bench [--quick] [--json FILE]");
            }
            bench::run(
                &root,
                &cargo(),
                quick,
                json.map(Path::new),
                bench::Programs::Release,
            )
            .map(drop)
        }
        ["distill-model", rest @ ..] => distill::run(&root, rest),
        ["help" | "--help" | "-h"] | [] => {
            println!("{USAGE}");
            Ok(())
        }
        other => bail!("unknown arguments {other:?}\n\n{USAGE}"),
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

fn codegen(root: &Path, check: bool) -> Result<()> {
    let files = codegen::generate(root).context("generating protocol code")?;
    if check {
        let stale = codegen::stale_files(root, &files)?;
        if !stale.is_empty() {
            let list: Vec<String> = stale.iter().map(|p| p.display().to_string()).collect();
            bail!(
                "generated protocol code is stale: {}\nrun `cargo xtask codegen` and commit the result",
                list.join(", ")
            );
        }
        println!("codegen: committed code is up to date");
        return Ok(());
    }
    for file in &files {
        let path = root.join(&file.path);
        std::fs::create_dir_all(path.parent().expect("generated files live in a directory"))?;
        std::fs::write(&path, &file.contents)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("codegen: wrote {}", file.path.display());
    }
    Ok(())
}

/// What a cargo subcommand prints to stdout; its stderr becomes the error when it fails.
fn cargo_stdout(root: &Path, args: &[&str]) -> Result<Vec<u8>> {
    let output = Command::new(cargo())
        .args(args)
        .current_dir(root)
        .output()
        .with_context(|| format!("running cargo {}", args[0]))?;
    if !output.status.success() {
        bail!(
            "cargo {} failed: {}",
            args[0],
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(output.stdout)
}

fn check_layers(root: &Path) -> Result<()> {
    let output = cargo_stdout(root, &["metadata", "--format-version", "1", "--no-deps"])?;
    let metadata = serde_json::from_slice(&output).context("parsing cargo metadata")?;
    let violations = layers::check(&metadata);
    if !violations.is_empty() {
        bail!("layer violations:\n  {}", violations.join("\n  "));
    }
    println!("layers: every workspace dependency points down the layer order");
    Ok(())
}

fn tidy(root: &Path) -> Result<()> {
    let missing = tidy::files_without_module_doc(root);
    if !missing.is_empty() {
        let list: Vec<String> = missing.iter().map(|p| p.display().to_string()).collect();
        bail!(
            "files without a leading `//!` line saying what they are for:\n  {}",
            list.join("\n  ")
        );
    }
    println!("tidy: every Rust file opens with a module doc");
    let mut naming = names::shared_names(root);
    naming.extend(names::renaming_reexports(root));
    if !naming.is_empty() {
        bail!("one name per concept:\n  {}", naming.join("\n  "));
    }
    println!("tidy: no public type shares a name unexplained, nothing is re-exported renamed");
    Ok(())
}

/// The `[profile.dev…]` sections of a manifest, without comments and blank lines.
fn dev_profile(manifest: &str) -> String {
    let mut inside = false;
    let mut kept = String::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line.starts_with("[profile.dev]") || line.starts_with("[profile.dev.");
        }
        if inside && !line.is_empty() && !line.starts_with('#') {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    kept
}

/// The README's test command: installs what a fresh machine lacks, then runs every
/// crate's tests, each crate alone (`cargo test -p NAME`, bottom layer first), so a crate
/// whose tests pass only with features another member turns on fails here; CI runs each
/// test once, as this command.
fn test(root: &Path) -> Result<()> {
    install_tools(root, Tools::for_command("test"))?;
    let schemathesis = root.join("target/test-artifacts/schemathesis.txt");
    let _ = std::fs::remove_file(&schemathesis);
    for member in workspace_members(root)? {
        // One feature set for every crate's test build (see workspace_hack).
        let unify = workspace_hack::UNIFY;
        run(root, cargo(), &["test", "-p", &member, "--features", unify])?;
    }
    // The test's output is captured when it passes; its counts belong in the log.
    if let Ok(summary) = std::fs::read_to_string(&schemathesis) {
        print!("test: {summary}");
    }
    Ok(())
}

fn ci(root: &Path) -> Result<()> {
    let started = std::time::Instant::now();
    // Each step's wall time, printed as it ends and again as a table at the end, so CI's
    // log says where the time went.
    let mut steps: Vec<(&str, std::time::Duration)> = Vec::new();
    let mut step = |name: &'static str, work: &mut dyn FnMut() -> Result<()>| -> Result<()> {
        let step_started = std::time::Instant::now();
        work().with_context(|| format!("ci step `{name}`"))?;
        let took = step_started.elapsed();
        println!("ci: step `{name}` took {took:.0?}");
        steps.push((name, took));
        Ok(())
    };
    // At the lowest CPU priority (see `bench::Build::start`), as soon as clippy's build has
    // compiled OpenSSL, which the release build then links instead of compiling it again.
    let release_build = bench::PendingBuild::after_openssl(root, &cargo());
    // Downloads mostly (apt, npm, pip; the conformance suite and its Node): they run
    // while clippy compiles.
    let tools_root = root.to_owned();
    let tools = std::thread::spawn(move || {
        let started = std::time::Instant::now();
        install_tools(&tools_root, Tools::for_command("ci"))?;
        conformance::install_suite(&tools_root)?;
        // The benchmarks' tool catalog: its servers, not yet the discovery.
        tool_catalog::install(&tools_root)?;
        Ok::<_, anyhow::Error>(started.elapsed())
    });
    step("fmt", &mut || {
        run(root, cargo(), &["fmt", "--all", "--check"])?;
        // `fuzz/` is its own workspace, which `--all` does not reach.
        run(
            root,
            cargo(),
            &[
                "fmt",
                "--manifest-path",
                "fuzz/Cargo.toml",
                "--all",
                "--check",
            ],
        )
    })?;
    step("clippy", &mut || {
        run(
            root,
            cargo(),
            &[
                "clippy",
                "--workspace",
                "--all-targets",
                // The tests' feature set: its build scripts and proc-macros are theirs.
                "--features",
                workspace_hack::UNIFY,
                "--",
                "-D",
                "warnings",
            ],
        )
    })?;
    release_build.go();
    // The table shows the wait beyond clippy; the line below, the installs' own time.
    let mut tools = Some(tools);
    step("install test tools (the part after clippy)", &mut || {
        let took = tools
            .take()
            .context("the test tools were already waited for")?
            .join()
            .map_err(|_| anyhow::anyhow!("installing the test tools panicked"))??;
        println!("ci: installing the test tools took {took:.0?} (alongside fmt and clippy)");
        Ok(())
    })?;
    step("fuzz-check", &mut || fuzz_check(root))?;
    step("codegen --check", &mut || codegen(root, true))?;
    step("layers", &mut || check_layers(root))?;
    step("workspace-hack --check", &mut || {
        workspace_hack::run(root, true)
    })?;
    step("embedding", &mut || embedding::check(root, &cargo()))?;
    step("tidy", &mut || tidy(root))?;
    // The README's command runs every crate's tests alone (see `test`), so they run once.
    step("README test command", &mut || {
        let command = readme_test_command(root)?;
        println!("ci: running the README's test command: {command}");
        run(root, "bash".into(), &["-c", &command])
    })?;
    // A smoke run: the benchmark programs the tests built complete against the release
    // `ctxsync`; their numbers are printed for the log, never checked (CI machines are
    // too noisy to gate on them, and the programs' own side is unoptimized here).
    let mut executables = std::collections::HashMap::new();
    let mut release_build = Some(release_build.started()?);
    step(
        "bench --quick (the rest of the release build included)",
        &mut || {
            executables = bench::run(
                root,
                &cargo(),
                true,
                Some(&root.join("target").join("bench-quick.json")),
                bench::Programs::TestBuildAgainst(
                    release_build
                        .take()
                        .context("the release build was already taken")?,
                ),
            )?;
            Ok(())
        },
    )?;
    // The binary the benchmarks just ran, built with pg_config hidden: no second build.
    step("self-contained", &mut || {
        let binary = executables
            .get("ctxsync")
            .context("the benchmarks' build produced no ctxsync binary")?;
        portable::check_binary(binary)
    })?;
    step("conformance", &mut || {
        conformance::run(
            root,
            &cargo(),
            executables.get("ctxsync").map(PathBuf::as_path),
            &[],
        )
    })?;
    println!("ci: step wall times:");
    for (name, took) in &steps {
        println!("ci:   {:>6.0}s  {name}", took.as_secs_f64());
    }
    println!("ci: all checks passed in {:.0?}", started.elapsed());
    Ok(())
}

/// `cargo check` of the libFuzzer targets: `fuzz/` is its own workspace (so the main lock
/// file stays free of libFuzzer), which no other command compiles; `--locked` fails when
/// its lock file is not current, and the main target dir with the workspace-hack's
/// features lets it reuse what clippy checked. A check links nothing, so
/// libfuzzer-sys is pointed at a library path instead of compiling libFuzzer's C++ (minutes
/// on two cores) for a type check; `cargo xtask fuzz` builds the real one.
fn fuzz_check(root: &Path) -> Result<()> {
    let main_profile = dev_profile(&std::fs::read_to_string(root.join("Cargo.toml"))?);
    let fuzz_profile = dev_profile(&std::fs::read_to_string(root.join("fuzz/Cargo.toml"))?);
    if main_profile != fuzz_profile {
        bail!(
            "fuzz/Cargo.toml's [profile.dev*] sections differ from the workspace's; copy them \
             so fuzz-check reuses clippy's artifacts:\n{main_profile}"
        );
    }
    let unlinked = root.join("target/fuzz-check/libfuzzer.a");
    let unlinked = unlinked.to_str().context("target path is UTF-8")?;
    run_with_env(
        root,
        cargo(),
        &[
            "check",
            "--manifest-path",
            "fuzz/Cargo.toml",
            "--target-dir",
            "target",
            "--locked",
            "--bins",
            // The main workspace's features (and fuzz/'s copy of its dev profile): the
            // dependencies are the ones clippy just checked, not a second graph.
            "--features",
            workspace_hack::UNIFY,
        ],
        &[("CUSTOM_LIBFUZZER_PATH", unlinked)],
    )
}

/// Extracts the command from the code block that follows [`README_TEST_MARKER`].
fn readme_test_command(root: &Path) -> Result<String> {
    let readme = std::fs::read_to_string(root.join("README.md")).context("reading README.md")?;
    parse_readme_test_command(&readme)
        .context("README.md has no code block after the readme-test-command marker")
}

fn parse_readme_test_command(readme: &str) -> Option<String> {
    let after_marker = &readme[readme.find(README_TEST_MARKER)? + README_TEST_MARKER.len()..];
    let mut lines = after_marker
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("```"));
    lines.next()?;
    let command: Vec<&str> = lines
        .take_while(|l| !l.trim_start().starts_with("```"))
        .collect();
    let command = command.join("\n").trim().to_string();
    (!command.is_empty()).then_some(command)
}

fn workspace_members(root: &Path) -> Result<Vec<String>> {
    let output = Command::new(cargo())
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(root)
        .output()
        .context("running cargo metadata")?;
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let mut names: Vec<String> = metadata["packages"]
        .as_array()
        .context("cargo metadata lists packages")?
        .iter()
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    // Bottom layer first, so a failure points at the lowest broken crate.
    names.sort_by_key(|n| {
        layers::LAYERS
            .iter()
            .position(|l| l == n)
            .unwrap_or(usize::MAX)
    });
    Ok(names)
}

/// Debian packages the tests need: a real browser and its WebDriver for the web page test,
/// and HAProxy for the load-balanced replica tests, as (path, the variable that may point
/// elsewhere instead, package).
const APT_PACKAGES: &[(&str, &str, &str)] = &[
    ("/usr/bin/chromium", "CTXSYNC_CHROMIUM", "chromium"),
    (
        "/usr/bin/chromedriver",
        "CTXSYNC_CHROMEDRIVER",
        "chromium-driver",
    ),
    ("/usr/sbin/haproxy", "CTXSYNC_HAPROXY", "haproxy"),
];

/// The variable naming the Python with the MCP SDK (tests and `bench_discovery` read it).
pub const PYTHON_MCP_ENV: &str = "CTXSYNC_PYTHON_MCP";
/// Where `cargo xtask` installs the pinned Python MCP SDK's environment.
pub const PYTHON_MCP_DIR: &str = "target/tools/py";

/// What a command needs installed on a fresh machine; each part is skipped when present.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tools {
    /// Chromium, its WebDriver and HAProxy (apt, as root).
    pub system: bool,
    /// The npm MCP server and axe-core.
    pub npm: bool,
    /// The pinned Python MCP SDK ([`PYTHON_MCP_DIR`]).
    pub python_mcp: bool,
    /// The generic gRPC, Prometheus and OpenAPI clients (schemathesis).
    pub python_clients: bool,
}

impl Tools {
    /// Everything the tests need.
    pub const ALL: Self = Self {
        system: true,
        npm: true,
        python_mcp: true,
        python_clients: true,
    };
    /// `cargo xtask fuzz`: its schemathesis run needs the Python clients.
    pub const FUZZ: Self = Self {
        python_clients: true,
        ..Self::NONE
    };
    /// `cargo xtask bench`: `bench_discovery` compares with the pinned Python MCP SDK.
    pub const BENCH: Self = Self {
        python_mcp: true,
        ..Self::NONE
    };
    const NONE: Self = Self {
        system: false,
        npm: false,
        python_mcp: false,
        python_clients: false,
    };

    /// What `cargo xtask <command>` installs before it runs.
    pub fn for_command(command: &str) -> Self {
        match command {
            "test" | "test-tools" | "ci" => Self::ALL,
            "fuzz" => Self::FUZZ,
            "bench" => Self::BENCH,
            _ => Self::NONE,
        }
    }
}

/// The npm MCP server the interoperability tests run (a revision before 2026-07-28).
const EVERYTHING_PACKAGE: &str = "@modelcontextprotocol/server-everything@2026.8.31";
/// The official Python MCP SDK those tests' Python server runs on (2026-07-28).
const PYTHON_MCP_PACKAGE: &str = "mcp==2.3.0";
/// Clients that are not ctxsync's own, in their own environment (beside the MCP SDK's, so
/// neither pins the other's dependencies): the official gRPC health and reflection
/// clients, Prometheus' text parser and schemathesis for the OpenAPI document.
const PYTHON_ECOSYSTEM_PACKAGES: &[&str] = &[
    "grpcio==1.85.1",
    "grpcio-health-checking==1.85.1",
    "grpcio-reflection==1.85.1",
    "prometheus-client==0.26.0",
    "schemathesis==4.32.5",
];
/// The accessibility engine the browser test injects into the page.
const AXE_PACKAGE: &str = "axe-core@4.14.1";

/// Installs the prerequisites in `tools` that a fresh machine lacks; each is skipped
/// when present.
fn install_tools(root: &Path, tools: Tools) -> Result<()> {
    if tools.system {
        install_system_packages(root)?;
    }
    if tools.npm {
        install_npm_packages(root)?;
    }
    if tools.python_mcp {
        python_env(root, PYTHON_MCP_DIR, &[PYTHON_MCP_PACKAGE])
            .context("installing the Python MCP SDK (needs python3 with venv and pip)")?;
    }
    if tools.python_clients {
        python_env(root, "target/tools/pyeco", PYTHON_ECOSYSTEM_PACKAGES).context(
            "installing the generic gRPC, Prometheus and OpenAPI clients (needs python3 with venv and pip)",
        )?;
    }
    Ok(())
}

/// The browser, its WebDriver and HAProxy, through apt when running as root.
fn install_system_packages(root: &Path) -> Result<()> {
    let missing: Vec<&str> = APT_PACKAGES
        .iter()
        .filter(|(path, var, _)| {
            let path = std::env::var_os(var).map_or_else(|| PathBuf::from(path), PathBuf::from);
            !path.exists()
        })
        .map(|(_, _, package)| *package)
        .collect();
    if !missing.is_empty() {
        let is_root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0"));
        if is_root {
            run(root, "apt-get".into(), &["update", "-qq"])?;
            let mut args = vec!["install", "-y", "-qq"];
            args.extend(&missing);
            run(root, "apt-get".into(), &args)
                .context("installing the browser and HAProxy for the tests")?;
        } else {
            eprintln!(
                "note: the web page and load-balanced tests need {} (apt-get install them as root)",
                missing.join(" ")
            );
        }
    }
    Ok(())
}

/// The npm MCP server (the diagnostics crate's interoperability tests) and axe-core (the
/// page's accessibility check), at pinned versions.
fn install_npm_packages(root: &Path) -> Result<()> {
    // Real third-party MCP servers, at pinned versions, for the diagnostics crate's
    // interoperability tests.
    let everything = root.join("target/tools/node_modules/.bin/mcp-server-everything");
    if !everything.exists() {
        npm_install(root, &root.join("target/tools"), &[EVERYTHING_PACKAGE])
            .context("installing @modelcontextprotocol/server-everything (needs npm)")?;
    }
    let axe = root.join("target/tools/node_modules/axe-core/axe.min.js");
    if !axe.exists() {
        npm_install(root, &root.join("target/tools"), &[AXE_PACKAGE])
            .context("installing axe-core for the page's accessibility check (needs npm)")?;
    }
    Ok(())
}

/// `npm install` of pinned `packages` into `prefix`'s `node_modules`, without npm's audit
/// and funding requests (they only slow a test-tool install down).
fn npm_install(root: &Path, prefix: &Path, packages: &[&str]) -> Result<()> {
    let prefix = prefix.to_str().context("target path is UTF-8")?;
    let mut args = vec!["install", "--no-audit", "--no-fund", "--prefix", prefix];
    args.extend(packages);
    run(root, "npm".into(), &args)
}

/// A virtual environment at `dir` (under `root`) holding exactly `packages`: made when
/// missing, or anew when the pinned list changed (then it returns true). The list is
/// written last, so a half installed environment is never taken for a whole one.
fn python_env(root: &Path, dir: &str, packages: &[&str]) -> Result<bool> {
    let venv = root.join(dir);
    let stamp = venv.join("ctxsync-packages.txt");
    let wanted = packages.join("\n");
    if std::fs::read_to_string(&stamp).is_ok_and(|had| had == wanted) {
        return Ok(false);
    }
    let _ = std::fs::remove_dir_all(&venv);
    let venv_arg = venv.to_str().context("target path is UTF-8")?;
    run(root, "python3".into(), &["-m", "venv", venv_arg])?;
    let mut args = vec![
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ];
    args.extend(packages);
    if let Err(error) = run(root, venv.join("bin/python"), &args) {
        let _ = std::fs::remove_dir_all(&venv);
        return Err(error);
    }
    std::fs::write(&stamp, wanted).context("recording the Python packages installed")?;
    Ok(true)
}

fn cargo() -> PathBuf {
    std::env::var_os("CARGO").map_or_else(|| "cargo".into(), PathBuf::from)
}

fn run(root: &Path, program: PathBuf, args: &[&str]) -> Result<()> {
    run_with_env(root, program, args, &[])
}

/// [`run`] with `env` added to the child's environment (and shown in the log line).
fn run_with_env(root: &Path, program: PathBuf, args: &[&str], env: &[(&str, &str)]) -> Result<()> {
    let shown: String = env.iter().map(|(k, v)| format!("{k}={v:?} ")).collect();
    println!("$ {shown}{} {}", program.display(), args.join(" "));
    let status = Command::new(&program)
        .args(args)
        .envs(env.iter().copied())
        .current_dir(root)
        .status()
        .with_context(|| format!("starting {}", program.display()))?;
    if !status.success() {
        bail!(
            "`{} {}` failed with {status}",
            program.display(),
            args.join(" ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_installs_what_it_runs_needs() {
        // `fuzz` runs the schemathesis test, which runs the Python clients.
        assert!(Tools::for_command("fuzz").python_clients);
        // `bench` runs bench_discovery against the pinned Python MCP SDK.
        assert!(Tools::for_command("bench").python_mcp);
        assert_eq!(Tools::for_command("ci"), Tools::for_command("test"));
        assert_eq!(
            Tools::for_command("test-tools"),
            Tools {
                system: true,
                npm: true,
                python_mcp: true,
                python_clients: true
            }
        );
    }

    #[test]
    fn readme_test_command_is_the_block_after_the_marker() {
        let readme = "# x\n```sh\ncargo run\n```\n<!-- readme-test-command -->\nRun the tests:\n```sh\ncargo xtask test\n```\n";
        assert_eq!(
            parse_readme_test_command(readme).as_deref(),
            Some("cargo xtask test")
        );
        assert_eq!(parse_readme_test_command("```sh\ncargo test\n```"), None);
    }

    #[test]
    fn the_real_readme_names_the_test_command() {
        let command = readme_test_command(&workspace_root()).expect("README has a test command");
        assert_eq!(command, "cargo xtask test");
        assert!(
            std::fs::read_to_string(workspace_root().join("README.md"))
                .unwrap()
                .contains("cargo run --release -p ctxsync -- demo"),
            "the README opens with the demo command"
        );
    }
}
