//! The config parser's unit tests: every accepted shape and every error in words.
use super::*;

fn env() -> BTreeMap<String, String> {
    [
        ("TOKEN", "tok-1234"),
        ("EMPTY", ""),
        ("HOST", "example.com"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// Parses `json` and renders entries and the outcome as one line each.
fn check(json: &str, expect: &[&str]) {
    let (entries, outcome) = parse_config_bytes(Path::new("/w/.mcp.json"), json.as_bytes(), &env());
    let mut lines: Vec<String> = entries
        .iter()
        .map(|entry| match &entry.transport {
            TransportConfig::Stdio { command, args, env } => {
                format!("{} stdio {command} {args:?} {env:?}", entry.name)
            }
            TransportConfig::Http {
                url,
                headers,
                oauth,
            } => match oauth {
                Some(oauth) => format!("{} http {url} {headers:?} {oauth:?}", entry.name),
                None => format!("{} http {url} {headers:?}", entry.name),
            },
        })
        .collect();
    if let Some(outcome) = outcome {
        lines.extend(outcome.error.map(|error| format!("error: {error}")));
        lines.extend(outcome.warning.map(|warning| format!("warning: {warning}")));
    }
    // Messages are for people: no Rust paths and no `<...>`.
    for line in &lines {
        ctxsync_test_support::assert_in_words(line);
    }
    assert_eq!(lines, expect, "input: {json}");
}

/// The error a file without a server map gets.
const NO_MAP: &str = "error: no \"mcpServers\" or \"servers\" object: an MCP config file maps server names to entries under \"mcpServers\" (as Claude Code and Cursor write it) or \"servers\" (as VS Code writes it)";

#[test]
fn vs_code_servers_load_like_mcp_servers() {
    check(
        r#"{"servers": {"s": {"type": "stdio", "command": "srv", "args": ["${TOKEN}"], "env": {"K": "v"}}, "h": {"type": "http", "url": "https://${HOST}/mcp", "headers": {"A": "b"}}}}"#,
        &[
            r#"h http https://example.com/mcp {"A": "b"}"#,
            r#"s stdio srv ["tok-1234"] {"K": "v"}"#,
        ],
    );
    check(r#"{"servers": {}}"#, &[]);
    check(
        r#"{"servers": {"bad": {}}}"#,
        &["error: 1 invalid server entry: \"bad\": neither \"command\" nor \"url\" is set"],
    );
}

#[test]
fn the_server_map_is_required_and_single() {
    let cases: &[(&str, &[&str])] = &[
        ("{}", &[NO_MAP]),
        (
            r#"{"inputs": []}"#,
            &[
                NO_MAP,
                "warning: ignored the top-level key \"inputs\" (only \"mcpServers\" or \"servers\" is read)",
            ],
        ),
        (
            r#"{"mcpservers": {"a": {"command": "x"}}}"#,
            &[
                NO_MAP,
                "warning: ignored the top-level key \"mcpservers\" (only \"mcpServers\" or \"servers\" is read)",
            ],
        ),
        (
            r#"{"mcpServers": {"a": {"command": "x"}}, "servers": {"b": {"command": "y"}}}"#,
            &["error: has both \"mcpServers\" and \"servers\"; keep one"],
        ),
        (
            r#"{"servers": []}"#,
            &["error: \"servers\" is not an object"],
        ),
        (
            r#"{"servers": null}"#,
            &["error: \"servers\" is not an object"],
        ),
        (
            r#"{"mcpServers": "x"}"#,
            &["error: \"mcpServers\" is not an object"],
        ),
        (
            r#"{"servers": {"ok": {"command": "a"}, "bad": 3}}"#,
            &["error: server entry \"bad\" is not an object"],
        ),
    ];
    for (json, expect) in cases {
        check(json, expect);
    }
}

#[test]
fn other_top_level_keys_warn_and_the_servers_still_load() {
    let cases: &[(&str, &[&str])] = &[
        (
            r#"{"$schema": "https://example.com/s.json", "mcpServers": {"a": {"command": "x"}}}"#,
            &[
                "a stdio x [] {}",
                "warning: ignored the top-level key \"$schema\" (only \"mcpServers\" or \"servers\" is read)",
            ],
        ),
        (
            r#"{"servers": {"a": {"command": "x"}}, "inputs": [{"id": "k", "type": "promptString"}], "$schema": "s"}"#,
            &[
                "a stdio x [] {}",
                "warning: ignored the top-level keys \"$schema\" and \"inputs\" (only \"mcpServers\" or \"servers\" is read)",
            ],
        ),
        (
            r#"{"z": 1, "y": 2, "x": 3, "mcpServers": {}}"#,
            &[
                "warning: ignored the top-level keys \"x\", \"y\" and \"z\" (only \"mcpServers\" or \"servers\" is read)",
            ],
        ),
        (
            r#"{"a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "f": 1, "g": 1, "h": 1, "i": 1, "j": 1, "mcpServers": {}}"#,
            &[
                "warning: ignored the top-level keys \"a\", \"b\", \"c\", \"d\", \"e\", \"f\", \"g\", \"h\" and 2 more (only \"mcpServers\" or \"servers\" is read)",
            ],
        ),
        // An entry error and the warning, both on the file.
        (
            r#"{"inputs": [], "servers": {"ok": {"command": "a"}, "bad": {}}}"#,
            &[
                "ok stdio a [] {}",
                "error: 1 invalid server entry: \"bad\": neither \"command\" nor \"url\" is set",
                "warning: ignored the top-level key \"inputs\" (only \"mcpServers\" or \"servers\" is read)",
            ],
        ),
        // A file-level error and the warning.
        (
            r#"{"inputs": [], "servers": {}, "mcpServers": {}}"#,
            &[
                "error: has both \"mcpServers\" and \"servers\"; keep one",
                "warning: ignored the top-level key \"inputs\" (only \"mcpServers\" or \"servers\" is read)",
            ],
        ),
    ];
    for (json, expect) in cases {
        check(json, expect);
    }
}

#[test]
fn the_legacy_sse_transport_is_explained() {
    for json in [
        r#"{"mcpServers": {"a": {"type": "sse", "url": "http://h/sse"}}}"#,
        r#"{"servers": {"a": {"type": "sse", "url": "http://h/sse"}}}"#,
    ] {
        check(
            json,
            &[
                "error: 1 invalid server entry: \"a\": \"type\": \"sse\" is the legacy HTTP+SSE transport, which ctxsync does not speak (it speaks Streamable HTTP): use the server's Streamable HTTP endpoint with \"type\": \"http\"",
            ],
        );
    }
}

#[test]
fn structural_errors_reject_the_file() {
    check(
        "{",
        &["error: invalid JSON at line 1, column 1: EOF while parsing an object"],
    );
    check(
        "{\n  \"mcpServers\": {}\n",
        &["error: invalid JSON at the end of line 2: EOF while parsing an object"],
    );
    check("[]", &["error: the top level is not a JSON object"]);
    check(
        r#"{"mcpServers": []}"#,
        &["error: \"mcpServers\" is not an object"],
    );
    check(
        r#"{"mcpServers": {"ok": {"command": "a"}, "bad": 3}}"#,
        &["error: server entry \"bad\" is not an object"],
    );
    check("{}", &[NO_MAP]);
    check(r#"{"mcpServers": {}}"#, &[]);
}

#[test]
fn transports() {
    check(
        r#"{"mcpServers": {"a": {"command": "srv", "args": ["-x", "${TOKEN}"], "env": {"K": "v-${HOST}"}}}}"#,
        &[r#"a stdio srv ["-x", "tok-1234"] {"K": "v-example.com"}"#],
    );
    check(
        r#"{"mcpServers": {"h": {"url": "https://${HOST}/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}}}}"#,
        &[r#"h http https://example.com/mcp {"Authorization": "Bearer tok-1234"}"#],
    );
    check(
        r#"{"mcpServers": {"h": {"type": "streamable-http", "url": "http://127.0.0.1:1/mcp"}}}"#,
        &["h http http://127.0.0.1:1/mcp {}"],
    );
    check(
        r#"{"mcpServers": {"s": {"type": "stdio", "command": "x", "args": null}}}"#,
        &["s stdio x [] {}"],
    );
}

#[test]
fn semantic_errors_reject_only_the_entry() {
    check(
        r#"{"mcpServers": {"good": {"command": "ok"}, "none": {}, "both": {"command": "a", "url": "http://h"}}}"#,
        &[
            "good stdio ok [] {}",
            "error: 2 invalid server entries: \"both\": both \"command\" and \"url\" are set; \"none\": neither \"command\" nor \"url\" is set",
        ],
    );
    check(
        r#"{"mcpServers": {"a": {"type": "sse", "url": "http://h"}, "b": {"type": "ws", "url": "http://h"}, "c": {"type": "http", "command": "x"}}}"#,
        &[
            "error: 3 invalid server entries: \"a\": \"type\": \"sse\" is the legacy HTTP+SSE transport, which ctxsync does not speak (it speaks Streamable HTTP): use the server's Streamable HTTP endpoint with \"type\": \"http\"; \"b\": unknown type \"ws\"; \"c\": type \"http\" requires \"url\"",
        ],
    );
    check(
        r#"{"mcpServers": {"": {"command": "a"}, "a__b": {"command": "a"}, "_a": {"command": "a"}, "b_": {"command": "a"}}}"#,
        &[
            "error: 4 invalid server entries: \"\": empty name; \"_a\": name starts or ends with \"_\"; \"a__b\": name contains \"__\"; \"b_\": name starts or ends with \"_\"",
        ],
    );
    check(
        r#"{"mcpServers": {"kit/db": {"command": "a"}}}"#,
        &[
            "error: 1 invalid server entry: \"kit/db\": name contains \"/\", which only plugin servers (\"plugin/server\") have",
        ],
    );
    check(
        r#"{"mcpServers": {"v": {"command": "srv-${NOPE}", "env": {"A": "${ALSO_NOPE:-}", "B": "${EMPTY:-dflt}", "C": "${EMPTY}"}}}}"#,
        &["error: 1 invalid server entry: \"v\": variable NOPE is not set and has no default"],
    );
    check(
        r#"{"mcpServers": {"u": {"url": "ftp://${TOKEN}@h"}, "w": {"url": "http://h", "headers": {"bad name": "x", "ok": "line\nbreak"}}}}"#,
        &[
            "error: 2 invalid server entries: \"u\": \"url\" is not an http or https URL; \"w\": invalid header name \"bad name\", invalid value for header \"ok\"",
        ],
    );
    check(
        r#"{"mcpServers": {"t": {"command": 3, "args": "x", "env": {"A": 1}}}}"#,
        &["error: 1 invalid server entry: \"t\": \"command\" is not a string"],
    );
}

/// `(name, always_load)` of the entries `json` declares, and its outcome's error.
fn always_load(json: &str) -> (Vec<(String, bool)>, Option<String>) {
    let (entries, outcome) = parse_config_bytes(Path::new("/w/.mcp.json"), json.as_bytes(), &env());
    let entries = entries
        .into_iter()
        .map(|e| (e.name, e.always_load))
        .collect();
    (entries, outcome.and_then(|o| o.error))
}

#[test]
fn always_load_true_on_stdio_and_http_entries() {
    let (entries, error) = always_load(
        r#"{"mcpServers": {"s": {"command": "srv", "alwaysLoad": true}, "h": {"url": "https://h/mcp", "alwaysLoad": true}}}"#,
    );
    assert_eq!(entries, [("h".into(), true), ("s".into(), true)]);
    assert_eq!(error, None);
}

#[test]
fn always_load_false_or_absent_is_false() {
    let (entries, error) = always_load(
        r#"{"mcpServers": {"a": {"command": "srv"}, "f": {"command": "srv", "alwaysLoad": false}, "h": {"url": "https://h/mcp", "alwaysLoad": false}, "u": {"url": "https://h/mcp"}}}"#,
    );
    assert_eq!(
        entries,
        [
            ("a".into(), false),
            ("f".into(), false),
            ("h".into(), false),
            ("u".into(), false)
        ]
    );
    assert_eq!(error, None);
}

#[test]
fn always_load_of_another_type_rejects_the_entry_like_any_mistyped_field() {
    // As `"command": 3` or `"args": "x"`: the entry is rejected, its siblings kept.
    check(
        r#"{"mcpServers": {"good": {"command": "ok", "alwaysLoad": true}, "s": {"command": "srv", "alwaysLoad": "yes"}, "h": {"url": "https://h/mcp", "alwaysLoad": 1}, "n": {"command": "srv", "alwaysLoad": null}}}"#,
        &[
            "good stdio ok [] {}",
            "error: 3 invalid server entries: \"h\": \"alwaysLoad\" is not a boolean; \"n\": \"alwaysLoad\" is not a boolean; \"s\": \"alwaysLoad\" is not a boolean",
        ],
    );
    // Reported beside the entry's other problems.
    check(
        r#"{"mcpServers": {"t": {"command": 3, "alwaysLoad": "x"}}}"#,
        &[
            "error: 1 invalid server entry: \"t\": \"command\" is not a string, \"alwaysLoad\" is not a boolean",
        ],
    );
}

#[test]
fn long_names_are_rejected_and_quoted_short() {
    let name = "n".repeat(MAX_SERVER_NAME_BYTES + 1);
    let json = format!(r#"{{"mcpServers": {{"{name}": {{"command": "a"}}}}}}"#);
    let quoted = format!("\"{}…\"", "n".repeat(NAME_QUOTE_BYTES));
    check(
        &json,
        &[&format!(
            "error: 1 invalid server entry: {quoted}: name is longer than 1024 bytes"
        )],
    );
    let ok = "n".repeat(MAX_SERVER_NAME_BYTES);
    let json = format!(r#"{{"mcpServers": {{"{ok}": {{"command": "a"}}}}}}"#);
    let (entries, outcome) = parse_config_bytes(Path::new("x"), json.as_bytes(), &env());
    assert_eq!((entries.len(), outcome), (1, None));
}

#[test]
fn expansion() {
    let env = env();
    let cases = [
        ("plain", "plain", &[][..]),
        ("${TOKEN}", "tok-1234", &[]),
        ("a${HOST}b${TOKEN}", "aexample.combtok-1234", &[]),
        ("${MISSING:-fallback}", "fallback", &[]),
        ("${EMPTY:-fallback}", "fallback", &[]),
        ("${EMPTY}", "", &[]),
        ("${MISSING}", "", &["MISSING"]),
        ("$TOKEN ${ unterminated", "$TOKEN ${ unterminated", &[]),
        ("${not-a-name}", "${not-a-name}", &[]),
    ];
    for (input, expect, missing) in cases {
        let mut expander = Expander {
            env: &env,
            missing: BTreeSet::new(),
        };
        assert_eq!(expander.expand(input), expect, "{input}");
        let missing: BTreeSet<String> = missing.iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(expander.missing, missing, "{input}");
    }
}

#[test]
fn files_missing_duplicate_paths_and_names() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = dir.path().join("a.json");
    let second = dir.path().join("b.json");
    let missing = dir.path().join("missing.json");
    std::fs::write(
        &first,
        r#"{"mcpServers": {"x": {"command": "one"}, "bad": {}}}"#,
    )
    .expect("write");
    std::fs::write(
        &second,
        r#"{"mcpServers": {"x": {"command": "two"}, "y": {"command": "three"}}}"#,
    )
    .expect("write");
    let dotted = dir.path().join(".").join("a.json");
    let files = [first.clone(), missing, dotted, second.clone()].map(ConfigFile::named);
    let (entries, outcomes) = load_config_files(&files, &env());
    let names: Vec<(&str, &Path)> = entries
        .iter()
        .map(|e| (e.name.as_str(), e.source.as_path()))
        .collect();
    assert_eq!(names, [("x", first.as_path()), ("y", second.as_path())]);
    assert_eq!(outcomes.len(), 2, "{outcomes:?}");
    assert_eq!(outcomes[0].path, first);
    assert!(
        outcomes[0]
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("\"bad\"")
    );
    assert_eq!(outcomes[1].path, second);
    assert_eq!(outcomes[1].error, None);
    assert_eq!(
        outcomes[1].warning.as_deref(),
        Some(
            format!(
                "server \"x\" is already declared in {}; this declaration is ignored",
                first.display()
            )
            .as_str()
        )
    );
}

#[test]
fn a_files_ignored_keys_warning_comes_before_its_duplicates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = dir.path().join("a.json");
    let second = dir.path().join("b.json");
    std::fs::write(&first, r#"{"mcpServers": {"x": {"command": "one"}}}"#).expect("write");
    std::fs::write(
        &second,
        r#"{"inputs": [], "servers": {"x": {"command": "two"}, "y": {"command": "three"}}}"#,
    )
    .expect("write");
    let files = [first.clone(), second.clone()].map(ConfigFile::named);
    let (entries, outcomes) = load_config_files(&files, &env());
    let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["x", "y"]);
    assert_eq!(outcomes.len(), 1, "{outcomes:?}");
    assert_eq!(outcomes[0].path, second);
    assert_eq!(outcomes[0].error, None);
    assert_eq!(
            outcomes[0].warning.as_deref(),
            Some(
                format!(
                    "ignored the top-level key \"inputs\" (only \"mcpServers\" or \"servers\" is read); \
                     server \"x\" is already declared in {}; this declaration is ignored",
                    first.display()
                )
                .as_str()
            )
        );
}

/// The outcome of reading `name` in a fresh workspace prepared by `setup`, confined to
/// the workspace unless `named`; `ROOT` stands for the workspace in the message.
fn check_file(setup: impl FnOnce(&Path), name: &str, named: bool, expect: Option<&str>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().canonicalize().expect("canonical");
    setup(&root);
    let file = if named {
        ConfigFile::named(root.join(name))
    } else {
        ConfigFile::in_workspace(root.join(name), &root)
    };
    let started = std::time::Instant::now();
    let (entries, outcome) = parse_config_file(&file, &env());
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let error = outcome.and_then(|o| o.error);
    let error = error.map(|e| e.replace(&root.display().to_string(), "ROOT"));
    assert_eq!(error.as_deref(), expect, "{name}");
    assert_eq!(
        entries.len(),
        usize::from(expect.is_none() && name != "absent")
    );
}

#[test]
fn hostile_files_are_structural_errors() {
    use std::os::unix::fs::symlink;
    let valid = r#"{"mcpServers": {"x": {"command": "one"}}}"#;
    check_file(|_| {}, "absent", false, None);
    check_file(
        |d| std::fs::write(d.join("c"), valid).unwrap(),
        "c",
        false,
        None,
    );
    check_file(
        |d| std::fs::create_dir(d.join("c")).unwrap(),
        "c",
        false,
        Some("not a regular file (a directory)"),
    );
    let fifo = |d: &Path| {
        nix::unistd::mkfifo(&d.join("c"), nix::sys::stat::Mode::S_IRWXU).expect("mkfifo")
    };
    check_file(fifo, "c", false, Some("not a regular file (a FIFO)"));
    check_file(fifo, "c", true, Some("not a regular file (a FIFO)"));
    let zero = |d: &Path| symlink("/dev/zero", d.join("c")).unwrap();
    check_file(
        zero,
        "c",
        false,
        Some("resolves outside the workspace, to /dev/zero"),
    );
    check_file(
        zero,
        "c",
        true,
        Some("not a regular file (a character device)"),
    );
    let mut huge = valid.as_bytes().to_vec();
    huge.resize(1024 * 1024 + 1, b' ');
    check_file(
        |d| std::fs::write(d.join("c"), &huge).unwrap(),
        "c",
        false,
        Some("larger than 1 MiB"),
    );
    huge.truncate(1024 * 1024);
    check_file(
        |d| std::fs::write(d.join("c"), &huge).unwrap(),
        "c",
        false,
        None,
    );
    check_file(
        |d| symlink("gone", d.join("c")).unwrap(),
        "c",
        false,
        Some("is a symlink whose target does not exist"),
    );
    // A named file may lead outside the workspace; the workspace's own may not.
    let outside = tempfile::tempdir().expect("tempdir");
    let target = outside
        .path()
        .canonicalize()
        .unwrap()
        .join("elsewhere.json");
    std::fs::write(&target, valid).unwrap();
    let link = |d: &Path| symlink(&target, d.join("c")).unwrap();
    check_file(link, "c", true, None);
    let expect = format!("resolves outside the workspace, to {}", target.display());
    check_file(link, "c", false, Some(&expect));
}

#[test]
fn entry_secrets() {
    let entry = ServerEntry {
        name: "s".into(),
        transport: TransportConfig::Http {
            url: "https://u:pass-1234@h/p-secret?k=q-secret".into(),
            headers: [("authorization".into(), "Bearer tok-abcd".into())].into(),
            oauth: Some(PreregisteredClient {
                client_id: "c-1".into(),
                client_secret: Some("cs-secret".into()),
                scopes: Vec::new(),
                grant: OAuthGrant::ClientCredentials,
            }),
        },
        source: PathBuf::from("x"),
        always_load: false,
        plugin: None,
    };
    let out = crate::sanitize::sanitize_diagnostic(
        "pass-1234 at /p-secret q-secret tok-abcd Bearer tok-abcd cs-secret",
        &entry.secrets(),
    );
    assert_eq!(
        out,
        "[redacted] at /p-secret [redacted] [redacted] [redacted] [redacted]"
    );
    assert!(!format!("{entry:?}").contains("cs-secret"));
}

/// `(name, oauth block as Debug)` of the entries `json` declares, and its outcome's
/// error.
fn oauth_of(json: &str) -> (Vec<(String, String)>, Option<String>) {
    let (entries, outcome) = parse_config_bytes(Path::new("/w/.mcp.json"), json.as_bytes(), &env());
    let entries = entries
        .into_iter()
        .map(|e| match e.transport {
            TransportConfig::Http { oauth, .. } => (e.name, format!("{oauth:?}")),
            TransportConfig::Stdio { .. } => (e.name, "stdio".into()),
        })
        .collect();
    (entries, outcome.and_then(|o| o.error))
}

#[test]
fn an_oauth_block_is_read_with_its_variables_and_its_secret_kept_out_of_debug() {
    let (entries, error) = oauth_of(
        r#"{"mcpServers": {"a": {"url": "https://h/mcp", "oauth": {"clientId": "id-${HOST}", "clientSecret": "${TOKEN}", "scopes": ["read", "write"], "grant": "client_credentials"}}, "b": {"url": "https://h/mcp", "oauth": {"clientId": "pub", "scopes": "x y"}}, "c": {"url": "https://h/mcp"}}}"#,
    );
    assert_eq!(error, None);
    assert_eq!(
            entries,
            [
                (
                    "a".into(),
                    r#"Some(PreregisteredClient { client_id: "id-example.com", client_secret: Some("<redacted>"), scopes: ["read", "write"], grant: ClientCredentials })"#.into()
                ),
                (
                    "b".into(),
                    r#"Some(PreregisteredClient { client_id: "pub", client_secret: None, scopes: ["x", "y"], grant: AuthorizationCode })"#.into()
                ),
                ("c".into(), "None".into()),
            ]
        );
}

#[test]
fn a_wrong_oauth_block_rejects_its_entry_in_words() {
    let (entries, error) = oauth_of(
        r#"{"mcpServers": {"ok": {"url": "https://h/mcp"}, "s": {"command": "srv", "oauth": {"clientId": "x"}}, "n": {"url": "https://h/mcp", "oauth": {}}, "g": {"url": "https://h/mcp", "oauth": {"clientId": "x", "grant": "device"}}, "c": {"url": "https://h/mcp", "oauth": {"clientId": "x", "grant": "client_credentials"}}, "t": {"url": "https://h/mcp", "oauth": "x"}}}"#,
    );
    assert_eq!(entries, [("ok".to_owned(), "None".to_owned())]);
    let error = error.expect("the entries are rejected");
    ctxsync_test_support::assert_in_words(&error);
    for expect in [
        r#""s": "oauth" is only for an HTTP server (an entry with "url")"#,
        r#""n": "oauth" needs "clientId""#,
        r#""g": "oauth.grant" "device" is unknown (use "authorization_code" or "client_credentials")"#,
        r#""c": "oauth.grant" "client_credentials" needs "clientSecret""#,
        r#""t": "oauth" is not an object"#,
    ] {
        assert!(error.contains(expect), "{expect}\n{error}");
    }
}
