//! libFuzzer target: arbitrary bytes (lossy UTF-8) through the skill front-matter parser,
//! with the properties of `fuzz_front_matter_*` in the publication crate's `tests/publication/fuzz.rs`.

#![no_main]

use std::collections::BTreeSet;

use ctxsync_agent_publication::{FrontMatterError, parse_front_matter};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let text = String::from_utf8_lossy(bytes);
    let lines = text.split('\n').count();
    match parse_front_matter(&text) {
        Ok(front) => {
            let mut keys = BTreeSet::new();
            for (key, _) in front.fields() {
                assert!(!key.is_empty(), "empty key in {text:?}");
                assert!(keys.insert(key.to_owned()), "duplicate key {key:?}");
            }
        }
        Err(
            FrontMatterError::ExpectedKey { line }
            | FrontMatterError::DuplicateKey { line, .. }
            | FrontMatterError::UnterminatedQuote { line },
        ) => assert!((2..=lines).contains(&line), "line {line} of {lines}"),
        Err(FrontMatterError::Missing | FrontMatterError::Unterminated) => {}
    }
});
