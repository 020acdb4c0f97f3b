//! Fuzz-style property tests for the skill front-matter parser (proptest; the libFuzzer
//! twin is `fuzz/fuzz_targets/front_matter.rs`). Beyond "never panics"
//! (`properties.rs`): parsed keys are non-empty and unique, and every error names a line
//! inside the block. `PROPTEST_CASES` raises the budget (`cargo xtask fuzz`).

use std::collections::BTreeSet;

use ctxsync_agent_publication::{FrontMatterError, parse_front_matter};
use proptest::prelude::*;

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

/// YAML-ish lines: keys, quotes, block scalars, indentation, comments, fences, CRLF, BOMs.
fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{1,6}: [^\\n]{0,20}",
        "[a-z]{1,4}: ['\"][^\\n]{0,12}",
        "[a-z]{1,4}: [|>][+-]?",
        "[ \t]{1,3}[^\\n]{0,16}",
        "#[^\\n]{0,8}",
        "['\"]?[a-z:]{0,5}['\"]?:",
        Just("---".to_owned()),
        Just("...".to_owned()),
        Just(String::new()),
        "\\PC{0,12}",
    ]
}

fn document() -> impl Strategy<Value = String> {
    (
        prop::option::of(Just("\u{feff}")),
        prop::collection::vec(line(), 0..16),
        any::<bool>(),
    )
        .prop_map(|(bom, lines, crlf)| {
            let end = if crlf { "\r\n" } else { "\n" };
            format!("{}---{end}{}", bom.unwrap_or(""), lines.join(end))
        })
}

fn check(text: &str) -> Result<(), TestCaseError> {
    let lines = text.split('\n').count();
    match parse_front_matter(text) {
        Ok(front) => {
            let mut keys = BTreeSet::new();
            for (key, _) in front.fields() {
                prop_assert!(!key.is_empty(), "empty key in {text:?}");
                prop_assert!(keys.insert(key.to_owned()), "duplicate key {key:?}");
            }
        }
        Err(
            FrontMatterError::ExpectedKey { line }
            | FrontMatterError::DuplicateKey { line, .. }
            | FrontMatterError::UnterminatedQuote { line },
        ) => prop_assert!((2..=lines).contains(&line), "line {line} of {lines}"),
        Err(FrontMatterError::Missing | FrontMatterError::Unterminated) => {}
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(512), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn fuzz_front_matter_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        check(&String::from_utf8_lossy(&bytes))?;
    }

    #[test]
    fn fuzz_front_matter_structured(text in document()) {
        check(&text)?;
    }
}
