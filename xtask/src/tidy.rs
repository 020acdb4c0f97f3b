//! Tidy checks over the source tree: every hand-written Rust file opens with a `//!` line
//! saying what it is for, and the GitHub workflow tests every workspace crate.

use std::path::{Path, PathBuf};

/// Hand-written `.rs` files under `dir` (generated code under `src/gen/` is skipped).
pub(crate) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if name != "target" && name != "gen" && !name.to_string_lossy().starts_with('.') {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Files under `root`'s `crates/`, `xtask/` and `fuzz/` whose first line is not a `//!`
/// comment.
pub(crate) fn files_without_module_doc(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    rust_files(&root.join("xtask"), &mut files);
    rust_files(&root.join("fuzz"), &mut files);
    files
        .into_iter()
        .filter(|f| {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            !text.lines().next().is_some_and(|l| l.starts_with("//!"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap()
            .to_path_buf()
    }

    #[test]
    fn every_rust_file_opens_with_a_module_doc() {
        let missing = files_without_module_doc(&root());
        assert!(
            missing.is_empty(),
            "files without a leading `//!` line: {missing:#?}"
        );
    }

    #[test]
    fn module_doc_check_notices_a_missing_doc() {
        let dir = std::env::temp_dir().join(format!("ctxsync-tidy-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("crates/x/src")).unwrap();
        std::fs::write(dir.join("crates/x/src/lib.rs"), "//! Documented.\n").unwrap();
        std::fs::write(dir.join("crates/x/src/bad.rs"), "fn main() {}\n").unwrap();
        std::fs::create_dir_all(dir.join("fuzz/fuzz_targets")).unwrap();
        std::fs::write(dir.join("fuzz/fuzz_targets/t.rs"), "#![no_main]\n").unwrap();
        let mut missing = files_without_module_doc(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        missing.sort();
        assert_eq!(missing.len(), 2);
        assert!(missing[0].ends_with("crates/x/src/bad.rs"));
        assert!(missing[1].ends_with("fuzz/fuzz_targets/t.rs"));
    }

    #[test]
    fn the_workflow_tests_every_crate() {
        let workflow = std::fs::read_to_string(root().join(".github/workflows/ci.yml")).unwrap();
        let members = crate::workspace_members(&root()).unwrap();
        let missing: Vec<&String> = members
            .iter()
            .filter(|m| !workflow.lines().any(|l| l.trim() == format!("- {m}")))
            .collect();
        assert!(
            missing.is_empty(),
            "crates missing from the ci.yml test matrix: {missing:?}"
        );
    }
}
