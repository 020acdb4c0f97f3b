//! Rebuilds the crate when a migration changes (they are embedded from outside the
//! crate directory, which Cargo does not watch by itself) and fingerprints the
//! PostgreSQL migrations, so test-support names its template database after them.

use std::hash::{DefaultHasher, Hasher};
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
    let mut files = Vec::new();
    collect(Path::new("../../migrations/postgres"), &mut files);
    files.sort();
    let mut hasher = DefaultHasher::new();
    for file in files {
        hasher.write(file.to_string_lossy().as_bytes());
        hasher.write(&std::fs::read(&file).unwrap_or_default());
    }
    println!(
        "cargo:rustc-env=CTXSYNC_POSTGRES_MIGRATIONS_FINGERPRINT={:016x}",
        hasher.finish()
    );
}

fn collect(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(&path, out);
        } else {
            out.push(path);
        }
    }
}
