//! Fails when the committed generated code no longer matches `proto/`: the same check as
//! `cargo xtask codegen --check`, sharing its code.

#[path = "../../../xtask/src/codegen.rs"]
#[allow(dead_code)]
mod codegen;

use std::path::Path;

#[test]
fn committed_code_matches_the_protos() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let expected = codegen::generate(&root).expect("protos compile");
    assert!(!expected.is_empty(), "codegen produced files");
    let stale = codegen::stale_files(&root, &expected).expect("committed files are readable");
    assert!(
        stale.is_empty(),
        "stale generated code: {stale:?}; run `cargo xtask codegen` and commit"
    );
}
