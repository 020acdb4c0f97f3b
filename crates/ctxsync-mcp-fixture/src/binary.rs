//! Locating (building once if needed) the `ctxsync-mcp-fixture` binary for other crates' tests.

use std::{
    io::BufRead,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::OnceLock,
};

use crate::FixtureError;

/// Environment variable naming a prebuilt fixture binary; skips the build when set.
pub const FIXTURE_BIN_ENV: &str = "CTXSYNC_MCP_FIXTURE_BIN";

const PACKAGE: &str = "ctxsync-mcp-fixture";

/// The path of the `ctxsync-mcp-fixture` binary.
///
/// Runs `cargo build -p ctxsync-mcp-fixture --bin ctxsync-mcp-fixture` once per process (in the
/// profile this library was built with) and reads the executable path from cargo's JSON
/// messages, so the target dir and profile need not be guessed. A `cargo test` releases the
/// build lock before running tests, so the nested build does not deadlock; concurrent test
/// binaries serialize on cargo's own build lock. [`FIXTURE_BIN_ENV`] overrides the build.
pub fn binary_path() -> Result<&'static Path, FixtureError> {
    static PATH: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PATH.get_or_init(locate)
        .as_ref()
        .map(PathBuf::as_path)
        .map_err(|message| FixtureError::Build(message.clone()))
}

fn locate() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os(FIXTURE_BIN_ENV) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!(
                "{FIXTURE_BIN_ENV}={} is not a file",
                path.display()
            ))
        };
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let mut command = Command::new(cargo);
    command
        .args([
            "build",
            "--quiet",
            "--message-format=json-render-diagnostics",
        ])
        .args(["-p", PACKAGE, "--bin", PACKAGE, "--manifest-path"])
        .arg(&manifest)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if !cfg!(debug_assertions) {
        command.arg("--release");
    }
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot run cargo to build {PACKAGE}: {e}"))?;
    let stdout = child.stdout.take().ok_or("cargo stdout was not piped")?;
    let mut executable = None;
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.map_err(|e| format!("reading cargo output: {e}"))?;
        if let Some(path) = executable_of(&line) {
            executable = Some(path);
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for cargo: {e}"))?;
    if !status.success() {
        return Err(format!("`cargo build -p {PACKAGE}` failed: {status}"));
    }
    executable.ok_or_else(|| format!("cargo reported no executable for {PACKAGE}"))
}

/// The executable path from one cargo JSON message, if it is the fixture binary's artifact.
fn executable_of(line: &str) -> Option<PathBuf> {
    let message: serde_json::Value = serde_json::from_str(line).ok()?;
    if message.get("reason")?.as_str()? != "compiler-artifact" {
        return None;
    }
    let target = message.get("target")?;
    let is_bin = target
        .get("kind")?
        .as_array()?
        .iter()
        .any(|kind| kind.as_str() == Some("bin"));
    if !is_bin || target.get("name")?.as_str()? != PACKAGE {
        return None;
    }
    message.get("executable")?.as_str().map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(line: &str, expect: Option<&str>) {
        assert_eq!(executable_of(line), expect.map(PathBuf::from), "{line}");
    }

    #[test]
    fn reads_the_executable_from_cargo_messages() {
        check(
            r#"{"reason":"compiler-artifact","target":{"name":"ctxsync-mcp-fixture","kind":["bin"]},"executable":"/t/debug/ctxsync-mcp-fixture"}"#,
            Some("/t/debug/ctxsync-mcp-fixture"),
        );
        check(
            r#"{"reason":"compiler-artifact","target":{"name":"ctxsync-mcp-fixture","kind":["lib"]},"executable":null}"#,
            None,
        );
        check(
            r#"{"reason":"compiler-artifact","target":{"name":"other","kind":["bin"]},"executable":"/t/other"}"#,
            None,
        );
        check(r#"{"reason":"build-finished","success":true}"#, None);
        check("not json", None);
    }
}
