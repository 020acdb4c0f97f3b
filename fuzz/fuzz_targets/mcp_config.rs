//! libFuzzer target: arbitrary bytes as a `.mcp.json` file through `parse_config_bytes`,
//! with the properties of `fuzz_mcp_config_*` in the diagnostics crate's `tests/diagnostics/fuzz.rs`.

#![no_main]

use std::collections::BTreeMap;
use std::path::Path;

use ctxsync_agent_diagnostics::{MAX_SERVER_NAME_BYTES, TransportConfig, parse_config_bytes};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

/// The value of `${TOKEN}`; the seeds also put it literally in every secret position.
const CANARY: &str = "CANARY-7f3a9c";
const PATH: &str = "/work space/é/.mcp.json";

fuzz_target!(|bytes: &[u8]| {
    let path = Path::new(PATH);
    let env: BTreeMap<String, String> = [("TOKEN", CANARY), ("HOME", "/home/u")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let (entries, outcome) = parse_config_bytes(path, bytes, &env);
    for entry in &entries {
        assert_eq!(entry.source.as_path(), path);
        assert!(
            entry.name.len() <= MAX_SERVER_NAME_BYTES,
            "accepted a {}-byte name",
            entry.name.len()
        );
        if let TransportConfig::Stdio { command, .. } = &entry.transport {
            assert!(!command.trim().is_empty(), "accepted an empty command");
        }
    }
    if let Some(outcome) = outcome {
        assert_eq!(outcome.path.as_path(), path);
        assert!(outcome.error.is_some() || outcome.warning.is_some());
        let message = format!("{:?} {:?}", outcome.error, outcome.warning);
        if !canary_in_quotable_position(bytes) {
            assert!(
                !message.contains(CANARY),
                "outcome quotes a secret: {message}"
            );
        }
    }
});

/// Whether the document itself puts the canary where an outcome rightly quotes it: an
/// object key (server names, env and header names), a `type` value, or a `${...}`
/// variable reference. The proptest generator never does; libFuzzer can.
fn canary_in_quotable_position(bytes: &[u8]) -> bool {
    fn walk(value: &Value) -> bool {
        match value {
            Value::Object(map) => map.iter().any(|(key, value)| {
                key.contains(CANARY)
                    || (key == "type" && value.as_str().is_some_and(|t| t.contains(CANARY)))
                    || walk(value)
            }),
            Value::Array(items) => items.iter().any(walk),
            Value::String(s) => s
                .split("${")
                .skip(1)
                .any(|rest| rest.split('}').next().is_some_and(|v| v.contains(CANARY))),
            _ => false,
        }
    }
    serde_json::from_slice::<Value>(bytes).is_ok_and(|doc| walk(&doc))
}
