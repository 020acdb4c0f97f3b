//! Fuzz-style property tests (proptest; the libFuzzer twins are `fuzz/fuzz_targets/
//! mcp_config.rs` and `sanitizer.rs`): the `.mcp.json` parser on arbitrary bytes and on
//! structured random JSON, and the diagnostic sanitizer. `PROPTEST_CASES` raises the case
//! budget (`cargo xtask fuzz`).

use std::collections::BTreeMap;
use std::path::Path;

use ctxsync_agent_diagnostics::{
    MAX_DIAGNOSTIC_BYTES, MAX_SERVER_NAME_BYTES, SecretSet, TransportConfig, parse_config_bytes,
    sanitize_diagnostic,
};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// The case budget: small by default so `cargo test` stays fast.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

const CANARY: &str = "CANARY-7f3a9c";
const PATH: &str = "/work space/é/.mcp.json";

/// Arbitrary JSON, shallow and small.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        "\\PC{0,12}".prop_map(Value::String),
        Just(json!("${TOKEN}")),
        Just(json!("${MISSING:-dflt}")),
        Just(json!("${MISSING}")),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("\\PC{0,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A value in a secret position: the canary alone, embedded, or through a variable.
fn secret_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(CANARY.to_owned()),
        "[a-z]{0,4}".prop_map(|p| format!("{p}{CANARY}")),
        Just("${TOKEN}".to_owned()),
        Just(format!("Bearer {CANARY}")),
    ]
}

/// A server entry shaped like a real one, with random field types and the canary in every
/// secret position (env and header values, URL userinfo/path/query, args, `--flag=value`).
fn entry() -> impl Strategy<Value = Value> {
    let field = |v: BoxedStrategy<Value>| prop::option::of(v);
    (
        field(
            prop_oneof![
                Just(json!("stdio")),
                Just(json!("http")),
                Just(json!("sse")),
                Just(json!("streamable-http")),
                any_json()
            ]
            .boxed(),
        ),
        field(prop_oneof![Just(json!("npx")), Just(json!("")), any_json()].boxed()),
        field(
            prop_oneof![
                Just(json!(format!(
                    "https://user:{CANARY}@h.example/{CANARY}?k={CANARY}"
                ))),
                Just(json!("http://${TOKEN}@127.0.0.1:9/p")),
                Just(json!(format!("ftp://{CANARY}@x"))),
                Just(json!(format!("not a url {CANARY}"))),
                any_json(),
            ]
            .boxed(),
        ),
        field(
            prop_oneof![
                prop::collection::vec(
                    secret_value().prop_flat_map(|s| prop_oneof![
                        Just(json!(s.clone())),
                        Just(json!(format!("--key={s}"))),
                    ]),
                    0..4
                )
                .prop_map(Value::Array),
                any_json(),
            ]
            .boxed(),
        ),
        field(
            prop_oneof![
                prop::collection::btree_map("[A-Z_]{1,6}", secret_value(), 0..3)
                    .prop_map(|m| json!(m)),
                any_json(),
            ]
            .boxed(),
        ),
        field(
            prop_oneof![
                prop::collection::btree_map("[A-Za-z-]{0,8}|\\PC{1,4}", secret_value(), 0..3)
                    .prop_map(|m| json!(m)),
                any_json(),
            ]
            .boxed(),
        ),
    )
        .prop_map(|(kind, command, url, args, env, headers)| {
            let mut entry = Map::new();
            for (key, value) in [
                ("type", kind),
                ("command", command),
                ("url", url),
                ("args", args),
                ("env", env),
                ("headers", headers),
            ] {
                if let Some(value) = value {
                    entry.insert(key.to_owned(), value);
                }
            }
            Value::Object(entry)
        })
}

fn document() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => prop::collection::btree_map("[a-z]{1,4}|\\PC{0,8}|[a-z]{1030}", prop_oneof![4 => entry(), 1 => any_json()], 0..5)
            .prop_map(|servers| json!({ "mcpServers": servers })),
        1 => prop::collection::btree_map("[a-z]{1,4}", entry(), 0..3)
            .prop_map(|servers| json!({ "servers": servers, "inputs": [] })),
        1 => any_json().prop_map(|v| json!({ "mcpServers": v })),
        1 => any_json(),
    ]
}

fn env() -> BTreeMap<String, String> {
    [("TOKEN", CANARY), ("HOME", "/home/u")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// Properties of every parse: no panic (the call returns), entries and the outcome name
/// the file, and no outcome message quotes a secret.
fn check_parse(bytes: &[u8]) -> Result<(), TestCaseError> {
    let path = Path::new(PATH);
    let (entries, outcome) = parse_config_bytes(path, bytes, &env());
    for entry in &entries {
        prop_assert_eq!(entry.source.as_path(), path);
        prop_assert!(
            entry.name.len() <= MAX_SERVER_NAME_BYTES,
            "accepted a {}-byte name",
            entry.name.len()
        );
        if let TransportConfig::Stdio { command, .. } = &entry.transport {
            prop_assert!(!command.trim().is_empty(), "accepted an empty command");
        }
    }
    if let Some(outcome) = outcome {
        prop_assert_eq!(outcome.path.as_path(), path);
        let message = format!("{:?} {:?}", outcome.error, outcome.warning);
        prop_assert!(outcome.error.is_some() || outcome.warning.is_some());
        prop_assert!(
            !message.contains(CANARY),
            "outcome quotes a secret: {message}"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(256), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn fuzz_mcp_config_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        check_parse(&bytes)?;
    }

    #[test]
    fn fuzz_mcp_config_structured_json(doc in document(), pretty in any::<bool>()) {
        let bytes = if pretty { serde_json::to_vec_pretty(&doc) } else { serde_json::to_vec(&doc) };
        check_parse(&bytes.expect("serializable"))?;
    }

    #[test]
    fn fuzz_mcp_config_mutated_json(doc in document(), cut in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut bytes = serde_json::to_vec(&doc).expect("serializable");
        if !bytes.is_empty() {
            let at = cut.index(bytes.len());
            bytes[at] = byte;
        }
        check_parse(&bytes)?;
    }
}

/// Secrets over a tiny alphabet (so they overlap each other and the text), never able to
/// match inside the `[redacted]`/`[truncated]` markers.
fn secrets() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec("[A-C]{4,7}|[A-Cé€]{4,6}", 1..5)
}

/// Text built from secrets, their fragments, noise and multi-byte characters.
fn text(secrets: Vec<String>) -> impl Strategy<Value = (Vec<String>, String)> {
    let pieces = secrets.clone();
    let piece = prop_oneof![
        3 => prop::sample::select(pieces.clone()),
        2 => (prop::sample::select(pieces), any::<prop::sample::Index>()).prop_map(|(s, i)| {
            let chars: Vec<char> = s.chars().collect();
            chars[..i.index(chars.len())].iter().collect::<String>()
        }),
        2 => "[A-C ]{0,6}",
        1 => "\\PC{0,8}",
        1 => Just("Bearer ".to_owned()),
        1 => "[A-C€]{1000,1500}",
    ];
    prop::collection::vec(piece, 0..24).prop_map(move |p| (secrets.clone(), p.concat()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(512), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn fuzz_sanitizer((secrets, text) in secrets().prop_flat_map(text)) {
        let mut set = SecretSet::new();
        for secret in &secrets {
            set.insert(secret);
        }
        let out = sanitize_diagnostic(&text, &set);
        prop_assert!(out.len() <= MAX_DIAGNOSTIC_BYTES, "{} bytes", out.len());
        // A String is valid UTF-8 by construction; the cut is on a char boundary of the input.
        for secret in &secrets {
            prop_assert!(!out.contains(secret.as_str()), "{secret:?} survives in {out:?}");
        }
        if text.len() <= MAX_DIAGNOSTIC_BYTES && secrets.iter().all(|s| !text.contains(s.as_str())) && !has_secret_shape(&text) {
            prop_assert_eq!(&out, &text, "text without secrets is kept");
        }
    }
}

/// Whether `text` holds something the sanitizer redacts by its shape alone (a credential
/// after `Bearer `/`Basic `, a PEM block, URL userinfo, a flag value); such text may change
/// even without a known secret in it.
fn has_secret_shape(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    ["bearer ", "basic ", "://", ":\\/\\/", "-"]
        .iter()
        .any(|shape| lower.contains(shape))
}

/// The overlap case the property found: a longer secret ends inside a run that still holds
/// a whole shorter secret.
#[test]
fn a_secret_left_over_after_an_overlapping_longer_one_is_redacted() {
    let mut set = SecretSet::new();
    set.insert("zzzza");
    set.insert("aaaa");
    let out = sanitize_diagnostic("zzzzaaaaa", &set);
    assert!(!out.contains("aaaa"), "{out}");
    assert!(!out.contains("zzzz"), "{out}");
}

/// A plugin `mcp.json` entry with random field types and values, real keys mostly.
fn plugin_entry() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("type".to_owned()),
        Just("command".to_owned()),
        Just("args".to_owned()),
        Just("env".to_owned()),
        Just("cwd".to_owned()),
        Just("url".to_owned()),
        Just("headers".to_owned()),
        "\\PC{0,6}",
    ];
    let value = prop_oneof![
        Just(json!("stdio")),
        Just(json!("streamable-http")),
        Just(json!("./bin/server")),
        Just(json!("../escape")),
        Just(json!("${PLUGIN_ROOT}/x")),
        Just(json!("${PLUGIN_DATA}/../..")),
        Just(json!("http://example.com/mcp")),
        Just(json!("https://u:p@example.com/#f")),
        Just(json!({"PLUGIN_ROOT": "x", "A": "${PLUGIN_DATA}"})),
        any_json(),
    ];
    prop::collection::btree_map(key, value, 0..6)
        .prop_map(|m| Value::Object(m.into_iter().collect()))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(256)))]

    /// Whatever a plugin's `mcp.json` holds, parsing never panics, and every entry it
    /// accepts is named under the plugin and obeys the specification's launch rules.
    #[test]
    fn plugin_mcp_json_never_accepts_what_the_specification_forbids(
        servers in prop::collection::btree_map("\\PC{0,8}", plugin_entry(), 0..5),
        top in prop::option::of(any_json()),
    ) {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("bin")).unwrap();
        std::fs::write(root.path().join("bin/server"), "#!/bin/sh\n").unwrap();
        let plugin = ctxsync_agent_diagnostics::Plugin {
            name: "kit".into(),
            display_name: None,
            version: None,
            spec_version: "1.0.0",
            dir: root.path().to_path_buf(),
            root: std::fs::canonicalize(root.path()).unwrap(),
        };
        let mut document = json!({
            "$schema": "https://agent-plugins.org/schemas/1.0.0/mcp.schema.json",
            "mcpServers": Value::Object(servers.into_iter().collect()),
        });
        if let Some(top) = top {
            document["extra"] = top;
        }
        let bytes = serde_json::to_vec(&document).unwrap();
        let (entries, _) = ctxsync_agent_diagnostics::parse_plugin_servers(
            &plugin, Path::new("/data"), &root.path().join("mcp.json"), &bytes);
        for entry in &entries {
            prop_assert!(entry.name.starts_with("kit/"));
            let launch = entry.plugin.as_ref().unwrap();
            match &entry.transport {
                TransportConfig::Stdio { command, env, .. } => {
                    prop_assert!(!command.contains('/') || command.starts_with(plugin.root.to_str().unwrap()));
                    prop_assert!(!env.contains_key("PLUGIN_ROOT") && !env.contains_key("PLUGIN_DATA"));
                    prop_assert!(launch.cwd.starts_with(&plugin.root) || launch.cwd.starts_with(&launch.data_dir));
                }
                TransportConfig::Http { url, .. } => {
                    let parsed = url::Url::parse(url).unwrap();
                    prop_assert!(parsed.username().is_empty() && parsed.fragment().is_none());
                    prop_assert!(parsed.scheme() == "https" || parsed.host_str() == Some("localhost") || parsed.host_str().is_some_and(|h| h.starts_with("127.") || h == "[::1]"));
                }
            }
        }
    }
}
