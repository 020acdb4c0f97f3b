//! `cargo xtask self-contained`: the release binary builds without the system's
//! PostgreSQL or OpenSSL development files and links nothing beyond the C runtime, so it
//! can be copied into any workspace image of the same architecture.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Shared objects the binary may load: the C library, its math part, the unwinder and the
/// dynamic loader (plus the kernel's vDSO, which is no file).
const ALLOWED: &[&str] = &[
    "linux-vdso.so",
    "libc.so",
    "libm.so",
    "libgcc_s.so",
    "ld-linux-x86-64.so",
    "ld-linux-aarch64.so",
];

/// Builds `ctxsync` in release mode with `pg_config` hidden from `PATH` and no
/// `PQ_LIB_DIR` (so nothing can fall back to the system's libpq), then checks its `ldd`.
/// The build is the benchmarks' ([`crate::bench::build`]): one release build serves both,
/// so CI's `bench --quick` followed by this check builds nothing twice.
pub(crate) fn check(root: &Path, cargo: &Path) -> Result<()> {
    let started = std::time::Instant::now();
    let executables = crate::bench::build(root, cargo)?;
    let binary = executables
        .get("ctxsync")
        .context("the release build produced no ctxsync binary")?;
    check_binary(binary)?;
    println!(
        "self-contained: built and checked in {:.0?}",
        started.elapsed()
    );
    Ok(())
}

/// Hides the system's PostgreSQL and OpenSSL development files from a cargo `command`:
/// `pg_config` off `PATH`, and none of the variables that point the `-sys` crates at a
/// system library. Every release build runs this way, so the binary the benchmarks run
/// is the one [`check_binary`] checks.
pub(crate) fn hide_system_libraries(root: &Path, command: &mut Command) -> Result<()> {
    let path = path_without_pg_config(&root.join("target").join("path-without-pg-config"))?;
    command
        .env("PATH", &path)
        .env_remove("PQ_LIB_DIR")
        .env_remove("PQ_LIB_STATIC")
        .env_remove("PG_CONFIG")
        .env_remove("OPENSSL_DIR")
        .env_remove("OPENSSL_LIB_DIR");
    Ok(())
}

/// Checks that `binary` (built with [`hide_system_libraries`]) links only the C runtime.
pub(crate) fn check_binary(binary: &Path) -> Result<()> {
    let binary: PathBuf = binary.to_path_buf();
    let output = Command::new("ldd")
        .arg(&binary)
        .output()
        .context("running ldd")?;
    if !output.status.success() {
        bail!(
            "ldd {} failed: {}",
            binary.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let listing = String::from_utf8_lossy(&output.stdout);
    let unexpected = unexpected_libraries(&listing);
    if !unexpected.is_empty() {
        bail!(
            "the release binary links {} beyond the C runtime: {}\n{listing}",
            unexpected.len(),
            unexpected.join(", ")
        );
    }
    let size = std::fs::metadata(&binary)
        .with_context(|| format!("reading {}", binary.display()))?
        .len();
    println!(
        "self-contained: {} links only the C runtime ({} libraries), {:.1} MiB",
        binary.display(),
        listing.lines().filter(|l| !l.trim().is_empty()).count(),
        size as f64 / (1024.0 * 1024.0),
    );
    Ok(())
}

/// `PATH` with every directory that holds `pg_config` replaced by a stand-in under
/// `scratch` linking to all of that directory's entries but `pg_config` (dropping the
/// directory would also hide the C compiler, make and perl, which usually live beside it).
fn path_without_pg_config(scratch: &Path) -> Result<std::ffi::OsString> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    if scratch.exists() {
        std::fs::remove_dir_all(scratch)
            .with_context(|| format!("removing {}", scratch.display()))?;
    }
    let mut dirs = Vec::new();
    for (index, dir) in std::env::split_paths(&path).enumerate() {
        if !dir.join("pg_config").exists() {
            dirs.push(dir);
            continue;
        }
        let stand_in = scratch.join(index.to_string());
        std::fs::create_dir_all(&stand_in)
            .with_context(|| format!("creating {}", stand_in.display()))?;
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))?
        {
            let entry = entry?;
            if entry.file_name() != "pg_config" {
                std::os::unix::fs::symlink(entry.path(), stand_in.join(entry.file_name()))
                    .with_context(|| format!("linking {}", entry.path().display()))?;
            }
        }
        dirs.push(stand_in);
    }
    std::env::join_paths(dirs).context("rebuilding PATH")
}

/// The names in an `ldd` listing that [`ALLOWED`] does not cover.
fn unexpected_libraries(listing: &str) -> Vec<String> {
    listing
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(|name| name.rsplit('/').next().unwrap_or(name).to_owned())
        .filter(|name| !ALLOWED.iter().any(|allowed| name.starts_with(allowed)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_c_runtime_passes() {
        let good = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x1)\n\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x2)\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x3)\n\t/lib64/ld-linux-x86-64.so.2 (0x4)\n";
        assert!(unexpected_libraries(good).is_empty());
        let bad = format!(
            "{good}\tlibpq.so.5 => /lib/x86_64-linux-gnu/libpq.so.5 (0x5)\n\tlibssl.so.3 => /lib/libssl.so.3 (0x6)\n"
        );
        assert_eq!(unexpected_libraries(&bad), ["libpq.so.5", "libssl.so.3"]);
    }
}
