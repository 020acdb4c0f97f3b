//! Sanitizing and bounding of every diagnostic that leaves the engine (SPEC §3.3).
//!
//! Two kinds of secret are redacted. Known ones are collected into a [`SecretSet`] from
//! where they come from (an entry's env and headers, its URL's userinfo and query, the
//! values of secret-named flags, the agent's token, secret-named variables of the agent's
//! environment) and found in every form a diagnostic may carry them: raw, base64,
//! percent-encoded and JSON-escaped ([`forms`]); arguments and URL path segments that look
//! like pasted keys (long, letters and digits mixed) count too. Others are recognised by
//! their shape ([`patterns`]): bearer and Basic credentials, PEM blocks, URL userinfo,
//! secret-named flag values and `-pVALUE`. Ordinary values (`true`, paths, log levels) are
//! never collected.

mod forms;
mod patterns;

use std::collections::BTreeSet;

use ctxsync_mcp_model::McpTool;

/// Upper bound of any diagnostic, in bytes.
pub const MAX_DIAGNOSTIC_BYTES: usize = 4096;
/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";
/// How a bounded diagnostic ends when it was cut.
const TRUNCATION_MARKER: &str = "... [truncated]";
/// Values shorter than this many characters are too common to redact ("1", "on").
const MIN_SECRET_CHARS: usize = 4;
/// Values that are never secrets, whatever holds them: blanking them would make every
/// diagnostic that mentions them unreadable (compared ignoring case).
const ORDINARY_VALUES: &[&str] = &[
    "true", "false", "null", "none", "yes", "trace", "debug", "info", "warn", "warning", "error",
];

/// Shortest value that [`token_like`] takes for a credential.
const MIN_TOKEN_LIKE_CHARS: usize = 16;

/// Whether a value with no secret name attached still looks like a credential (an API key
/// pasted as an argument or into a URL path): one long piece mixing letters and digits.
/// Words, paths, package names, versions and numbers do not.
fn token_like(value: &str) -> bool {
    value.len() >= MIN_TOKEN_LIKE_CHARS
        && value.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'+' | b'=')
        })
        && value.bytes().any(|b| b.is_ascii_digit())
        && value.bytes().any(|b| b.is_ascii_alphabetic())
}

/// The secrets to redact from diagnostics, as their raw values; the other forms of each are
/// derived when redacting. Its `Debug` shows how many, never which.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretSet {
    secrets: BTreeSet<String>,
}

impl std::fmt::Debug for SecretSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretSet")
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

impl SecretSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one secret value, ignored when shorter than 4 characters or an ordinary value
    /// such as `true`. A URL also adds its userinfo and query values.
    pub fn insert(&mut self, value: &str) {
        self.add(value);
        if value.contains("://") {
            self.insert_url_parts(value);
        }
    }

    fn add(&mut self, value: &str) {
        let ordinary = ORDINARY_VALUES
            .iter()
            .any(|word| value.eq_ignore_ascii_case(word));
        if value.chars().count() >= MIN_SECRET_CHARS && !ordinary {
            self.secrets.insert(value.to_owned());
        }
    }

    /// Removes one value, e.g. a command that a diagnostic must name.
    pub fn remove(&mut self, value: &str) {
        self.secrets.remove(value);
    }

    /// Whether no secret is known.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// Adds from the agent's environment (given as pairs, so callers and tests need not
    /// touch the process environment) the values of variables whose names look secret
    /// (`GITHUB_TOKEN`, `DB_PASSWORD`, `SESSION_COOKIE`, ...) and the userinfo of any URL
    /// value (`DATABASE_URL`, `HTTPS_PROXY`). Other values (`CI=true`, `HOME`, `RUST_LOG`)
    /// are not secrets.
    pub fn insert_environment<'a>(&mut self, env: impl IntoIterator<Item = (&'a str, &'a str)>) {
        for (name, value) in env {
            if patterns::secret_name(name) {
                self.insert(value);
            } else if value.contains("://") {
                self.insert_url_userinfo(value);
            }
        }
    }

    /// Adds an HTTP header value and the credential after its scheme (`Bearer <token>`,
    /// `token <token>`); for `Basic`, also the decoded `user:password` and the password.
    pub fn insert_header_value(&mut self, value: &str) {
        self.insert(value);
        let Some((scheme, credential)) = value.trim().split_once(' ') else {
            return;
        };
        if !scheme.bytes().all(|b| b.is_ascii_alphabetic()) {
            return;
        }
        let credential = credential.trim();
        self.add(credential);
        if scheme.eq_ignore_ascii_case("basic")
            && let Some(decoded) =
                forms::base64_decode(credential).and_then(|bytes| String::from_utf8(bytes).ok())
            && let Some((_, password)) = decoded.split_once(':')
        {
            self.add(password);
            self.add(&decoded);
        }
    }

    /// Adds the secret parts of an entry's URL: its userinfo (with the Basic credentials
    /// built from it), its query values and path segments that look like credentials
    /// (`/mcp/sk-1a2b3c4d5e6f7a8b/sse`). A string that does not parse is added whole.
    pub fn insert_url(&mut self, raw: &str) {
        let Ok(url) = url::Url::parse(raw) else {
            self.add(raw);
            return;
        };
        self.insert_url_parts(raw);
        for segment in url.path_segments().into_iter().flatten() {
            let decoded = forms::percent_decode(segment).unwrap_or_default();
            if token_like(segment) || token_like(&decoded) {
                self.add(segment);
                self.add(&decoded);
            }
        }
    }

    /// Adds the words of `text` that look like credentials.
    fn insert_token_like_words(&mut self, text: &str) {
        for word in text.split_whitespace().filter(|word| token_like(word)) {
            self.add(word);
        }
    }

    fn insert_url_parts(&mut self, raw: &str) {
        let Ok(url) = url::Url::parse(raw) else {
            return;
        };
        self.insert_url_userinfo(raw);
        if let Some(query) = url.query() {
            for pair in query.split('&') {
                if let Some((_, value)) = pair.split_once('=') {
                    self.add(value);
                }
            }
            for (_, value) in url.query_pairs() {
                self.add(&value);
            }
        }
    }

    /// The password of `user:password@` (and `user:password` and its Basic credentials),
    /// or the user when there is no password (`https://TOKEN@host`).
    fn insert_url_userinfo(&mut self, raw: &str) {
        let Ok(url) = url::Url::parse(raw) else {
            return;
        };
        let decode = |text: &str| forms::percent_decode(text).unwrap_or_else(|| text.to_owned());
        let user = url.username();
        let secret = match url.password() {
            Some(password) => {
                self.add(&format!("{user}:{password}"));
                password
            }
            None => user,
        };
        if secret.is_empty() {
            return;
        }
        self.add(secret);
        self.add(&decode(secret));
        let password = url.password().map(decode).unwrap_or_default();
        let basic = format!("{}:{password}", decode(user));
        self.add(&basic);
        self.add(&forms::base64(basic.as_bytes()));
    }

    /// Adds what a command line carries secretly: values of secret-named flags
    /// (`--token=…`, `--api-key …`, `-password=…`, `-pVALUE`), `NAME=value` and
    /// `Name: value` arguments with secret names, the userinfo and query values of URLs, and
    /// words that look like credentials (long, letters and digits mixed). Other arguments
    /// (paths, package names, `true`) are not secrets.
    pub fn insert_args<'a>(&mut self, args: impl IntoIterator<Item = &'a str>) {
        let args: Vec<&str> = args.into_iter().collect();
        for (i, arg) in args.iter().enumerate() {
            if let Some(flag) = arg.strip_prefix('-') {
                let double = flag.starts_with('-');
                let flag = flag.trim_start_matches('-');
                match flag.split_once('=') {
                    Some((name, value)) if patterns::secret_name(name) => self.insert(value),
                    Some((_, value)) => self.insert_token_like_words(value),
                    None if patterns::secret_name(flag) => {
                        if let Some(next) = args.get(i + 1).filter(|next| !next.starts_with('-')) {
                            self.insert(next);
                        }
                    }
                    _ => {}
                }
                if !double
                    && let Some(value) = flag.strip_prefix('p')
                    && !value.bytes().all(|b| b.is_ascii_digit())
                {
                    // `-pSECRET` as mysql takes it; `-p8080` is a port.
                    self.add(value);
                }
            } else if arg.contains("://") {
                self.insert_url_parts(arg);
            } else if let Some((name, value)) = arg.split_once('=')
                && patterns::secret_name(name)
            {
                self.insert(value);
            } else if let Some((name, value)) = arg.split_once(':')
                && patterns::secret_name(name.trim())
            {
                self.insert_header_value(value.trim());
            } else {
                self.insert_token_like_words(arg);
            }
        }
    }

    /// Adds every secret of `other`.
    pub fn extend(&mut self, other: &SecretSet) {
        self.secrets.extend(other.secrets.iter().cloned());
    }

    /// Every form of every secret, longest first.
    fn all_forms(&self) -> Vec<String> {
        let mut all: Vec<String> = self
            .secrets
            .iter()
            .flat_map(|secret| forms::forms(secret))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        all.sort_by_key(|form| std::cmp::Reverse(form.len()));
        all
    }
}

/// Redacts every form of `secrets` and every shape-recognised secret from `text`, then
/// bounds it to [`MAX_DIAGNOSTIC_BYTES`] on a UTF-8 boundary. Pure: the fuzz target calls it
/// directly.
pub fn sanitize_diagnostic(text: &str, secrets: &SecretSet) -> String {
    bound(&redact(text, secrets))
}

/// Replaces secrets with [`REDACTED`]. Every occurrence of every form is found in the
/// original text, longest first, and the union of their ranges is replaced, so a secret
/// that overlaps another is never left half visible.
pub(crate) fn redact(text: &str, secrets: &SecretSet) -> String {
    let mut ranges = known_ranges(text, &secrets.all_forms());
    ranges.extend(patterns::pattern_ranges(text));
    replace_ranges(text, ranges)
}

/// `text` from a server with its own secrets (and the agent's) redacted, as for its tools.
pub(crate) fn redact_known(text: &str, secrets: &SecretSet) -> String {
    if secrets.is_empty() {
        return text.to_owned();
    }
    replace_ranges(text, known_ranges(text, &secrets.all_forms()))
}

/// Redacts a server's own secrets (and the agent's) from its tools in place: names,
/// descriptions, schemas, titles, icons and `_meta`. Only known secrets: a description that
/// documents `--token=<token>` is not leaking one, and another server's values are no
/// concern here.
pub(crate) fn redact_tools(tools: &mut [McpTool], secrets: &SecretSet) {
    if secrets.is_empty() {
        return;
    }
    let forms = secrets.all_forms();
    let redact = |text: &mut String| *text = replace_ranges(text, known_ranges(text, &forms));
    let redact_str = |text: &str| replace_ranges(text, known_ranges(text, &forms));
    let redact_value =
        |value: &mut serde_json::Value| *value = redact_json(std::mem::take(value), &redact_str);
    for tool in tools {
        redact(&mut tool.name);
        redact(&mut tool.description);
        redact_value(&mut tool.input_schema);
        redact(&mut tool.title);
        if let Some(annotations) = &mut tool.annotations {
            redact(&mut annotations.title);
        }
        if let Some(schema) = &mut tool.output_schema {
            redact_value(schema);
        }
        for icon in &mut tool.icons {
            redact(&mut icon.src);
            redact(&mut icon.mime_type);
            icon.sizes.iter_mut().for_each(&redact);
            redact(&mut icon.theme);
        }
        if let Some(meta) = &mut tool.meta {
            redact_value(meta);
        }
    }
}

fn redact_json(value: serde_json::Value, redact: &impl Fn(&str) -> String) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(text) => Value::String(redact(&text)),
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|item| redact_json(item, redact))
                .collect(),
        ),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(key, item)| (redact(&key), redact_json(item, redact)))
                .collect(),
        ),
        other => other,
    }
}

/// Byte ranges of every occurrence of every form, overlapping ones included: a
/// non-overlapping scan could pair its matches so that one straddles a longer secret and a
/// whole occurrence next to it goes unseen ("zzzza" then "aaaa" in "zzzzaaaaa").
fn known_ranges(text: &str, forms: &[String]) -> Vec<(usize, usize)> {
    forms
        .iter()
        .flat_map(|form| overlapping_matches(text, form).map(|start| (start, start + form.len())))
        .collect()
}

/// `text` with each union of overlapping or touching ranges replaced by one [`REDACTED`].
fn replace_ranges(text: &str, mut ranges: Vec<(usize, usize)>) -> String {
    if ranges.is_empty() {
        return text.to_owned();
    }
    ranges.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    let mut ranges = ranges.into_iter().peekable();
    while let Some((start, mut end)) = ranges.next() {
        while let Some(&(next_start, next_end)) = ranges.peek() {
            if next_start > end {
                break;
            }
            end = end.max(next_end);
            ranges.next();
        }
        out.push_str(&text[at..start]);
        out.push_str(REDACTED);
        at = end;
    }
    out.push_str(&text[at..]);
    out
}

/// Start offsets of every occurrence of `needle` in `text`, overlapping ones included.
fn overlapping_matches<'a>(text: &'a str, needle: &'a str) -> impl Iterator<Item = usize> + 'a {
    let mut from = 0;
    std::iter::from_fn(move || {
        let start = from + text.get(from..)?.find(needle)?;
        // Resume one character later; `needle` is non-empty, so this always advances.
        from = start + text[start..].chars().next().map_or(1, char::len_utf8);
        Some(start)
    })
}

/// Cuts `text` to at most [`MAX_DIAGNOSTIC_BYTES`], ending in `... [truncated]` when cut.
pub(crate) fn bound(text: &str) -> String {
    bound_to(text, MAX_DIAGNOSTIC_BYTES)
}

/// Cuts `text` to at most `max` bytes (at least the marker's length), ending in
/// `... [truncated]` when cut.
pub(crate) fn bound_to(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut cut = max.saturating_sub(TRUNCATION_MARKER.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{TRUNCATION_MARKER}", &text[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets(build: impl FnOnce(&mut SecretSet)) -> SecretSet {
        let mut set = SecretSet::new();
        build(&mut set);
        set
    }

    fn check(text: &str, secrets: &SecretSet, expect: &str) {
        assert_eq!(sanitize_diagnostic(text, secrets), expect, "input: {text}");
    }

    /// Each line of `cases` is `input => expected output`.
    fn check_all(secrets: &SecretSet, cases: &[(&str, &str)]) {
        for (text, expect) in cases {
            check(text, secrets, expect);
        }
    }

    const SECRET: &str = "s3cr3t/v@lue+é";

    #[test]
    fn every_form_of_a_known_secret_is_redacted() {
        let set = secrets(|s| s.insert(SECRET));
        check_all(
            &set,
            &[
                ("raw s3cr3t/v@lue+é end", "raw [redacted] end"),
                ("b64 czNjcjN0L3ZAbHVlK8Op end", "b64 [redacted] end"),
                // percent-encoded, upper and lower hex, and form-encoded.
                ("pct s3cr3t%2Fv%40lue%2B%C3%A9 end", "pct [redacted] end"),
                ("pct s3cr3t%2fv%40lue%2b%c3%a9 end", "pct [redacted] end"),
                ("form s3cr3t%2Fv%40lue%2B%C3%A9&x=1", "form [redacted]&x=1"),
                // JSON-escaped: slash escaped, non-ASCII as \u, and escaped twice.
                (r#"{"e":"s3cr3t\/v@lue+é"}"#, r#"{"e":"[redacted]"}"#),
                (r#"{"e":"s3cr3t/v@lue+\u00e9"}"#, r#"{"e":"[redacted]"}"#),
            ],
        );
        let quoted = serde_json::json!({ "k": "line1\n\"s3cr3t\"\tx" }).to_string();
        let set = secrets(|s| s.insert("line1\n\"s3cr3t\"\tx"));
        check(&quoted, &set, r#"{"k":"[redacted]"}"#);
        let twice = serde_json::Value::String(quoted).to_string();
        assert!(!sanitize_diagnostic(&twice, &set).contains("s3cr3t"));
    }

    #[test]
    fn a_secret_inside_a_longer_base64_blob_is_redacted() {
        let set = secrets(|s| s.insert("api-secret-0123456789"));
        for prefix in ["", "a", "ab", "abc"] {
            let blob = forms::base64(format!("{prefix}api-secret-0123456789 tail").as_bytes());
            let out = sanitize_diagnostic(&format!("payload {blob}"), &set);
            assert!(out.contains(REDACTED), "{prefix:?}: {out}");
            let left: String = out.replace(REDACTED, "");
            assert!(left.len() < "payload ".len() + 14, "{prefix:?}: {out}");
        }
    }

    #[test]
    fn pem_blocks_are_redacted_known_or_not() {
        let key = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\nBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----";
        let expect = "-----BEGIN PRIVATE KEY-----\n[redacted]\n-----END PRIVATE KEY-----";
        let empty = SecretSet::new();
        check(
            &format!("key: {key}\nnext"),
            &empty,
            &format!("key: {expect}\nnext"),
        );
        // JSON-escaped, as a server quoting its config would print it.
        let escaped = serde_json::Value::String(key.into()).to_string();
        let out = sanitize_diagnostic(&escaped, &empty);
        assert!(!out.contains("MIIEvQ") && !out.contains("BKcw"), "{out}");
        // Cut before its footer: the rest of the text goes.
        check(
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEvQIBADANBgkq",
            &empty,
            "-----BEGIN RSA PRIVATE KEY-----\n[redacted]",
        );
        // Known (an env value): each line alone is redacted too, e.g. in a CRLF copy.
        let set = secrets(|s| s.insert(key));
        let crlf = key.replace('\n', "\r\n");
        assert!(!sanitize_diagnostic(&crlf, &set).contains("MIIEvQ"));
    }

    #[test]
    fn flag_values_with_secret_names() {
        let set = secrets(|s| {
            s.insert_args([
                "--api-key",
                "arg-key-1234",
                "--token=arg-token-5678",
                "-psql-pass-9",
                "-password=go-style-pw",
                "DB_PASSWORD=env-style-pw",
                "Authorization: Bearer header-arg-tok",
                "--nonce",
                "not-a-secret",
                "/srv/data",
                "-p8080",
                "pasted-key-0123456789abcdef",
                "--message=failed with pasted-word-0123456789",
            ]);
        });
        check_all(
            &set,
            &[
                ("saw arg-key-1234", "saw [redacted]"),
                ("saw arg-token-5678", "saw [redacted]"),
                ("saw sql-pass-9", "saw [redacted]"),
                ("saw go-style-pw", "saw [redacted]"),
                ("saw env-style-pw", "saw [redacted]"),
                ("saw header-arg-tok", "saw [redacted]"),
                // Credential-looking words, wherever they are in the arguments.
                ("saw pasted-key-0123456789abcdef", "saw [redacted]"),
                ("saw pasted-word-0123456789", "saw [redacted]"),
                // Other arguments are not secrets.
                (
                    "nonce not-a-secret in /srv/data on 8080",
                    "nonce not-a-secret in /srv/data on 8080",
                ),
            ],
        );
        // Unknown values of secret-named flags in text are redacted by their shape.
        let empty = SecretSet::new();
        check_all(
            &empty,
            &[
                ("run --token=abcd1234 now", "run --token=[redacted] now"),
                ("run --api-key abcd1234 now", "run --api-key [redacted] now"),
                (
                    "run \"--client-secret=abcd1234\"",
                    "run \"--client-secret=[redacted]\"",
                ),
                ("mysql -uroot -phunter22 db", "mysql -uroot -p[redacted] db"),
                ("listen -p8080 --port 9000", "listen -p8080 --port 9000"),
                ("--pid-file /run/x --verbose", "--pid-file /run/x --verbose"),
                ("a well-formed re-parse", "a well-formed re-parse"),
            ],
        );
    }

    #[test]
    fn basic_credentials_from_url_userinfo() {
        let set =
            secrets(|s| s.insert_url("https://alice:pw%2D9876@example.com/mcp?key=qv-5555&x=1"));
        check_all(
            &set,
            &[
                // base64("alice:pw-9876"), as an Authorization header built from the URL.
                (
                    "Authorization: Basic YWxpY2U6cHctOTg3Ng==",
                    "Authorization: Basic [redacted]",
                ),
                ("sent YWxpY2U6cHctOTg3Ng==", "sent [redacted]"),
                (
                    "password pw-9876 / pw%2D9876",
                    "password [redacted] / [redacted]",
                ),
                ("query qv-5555", "query [redacted]"),
                // The user alone and the path are not secrets when there is a password.
                ("user alice at /mcp", "user alice at /mcp"),
            ],
        );
        // A path segment that looks like a key is one.
        let set = secrets(|s| s.insert_url("https://mcp.example.com/api/sk-1a2b3c4d5e6f7a8b/sse"));
        check_all(
            &set,
            &[(
                "POST /api/sk-1a2b3c4d5e6f7a8b/sse",
                "POST /api/[redacted]/sse",
            )],
        );
        // Without a password the user is the credential (https://TOKEN@host).
        let set = secrets(|s| s.insert_url("https://ghp_tok123@github.com/org/repo"));
        check("ghp_tok123 Z2hwX3RvazEyMzo=", &set, "[redacted] [redacted]");
    }

    #[test]
    fn url_userinfo_in_any_text_is_redacted() {
        let empty = SecretSet::new();
        check_all(
            &empty,
            &[
                (
                    "connect postgres://app:pa55w0rd@db:5432/x failed",
                    "connect postgres://[redacted]@db:5432/x failed",
                ),
                (
                    r#"{"url":"https:\/\/user:pw-x@h\/p"}"#,
                    r#"{"url":"https:\/\/[redacted]@h\/p"}"#,
                ),
                (
                    "ssh://git@github.com/x and https://example.com/a@b",
                    "ssh://git@github.com/x and https://example.com/a@b",
                ),
            ],
        );
    }

    #[test]
    fn header_values_and_credentials() {
        let set = secrets(|s| {
            s.insert_header_value("Bearer tok-123456");
            s.insert_header_value("token ghp-abcdef");
            s.insert_header_value("Basic Ym9iOnMzY3JldC1wdw==");
            s.insert_header_value("plain-header-value");
        });
        check_all(
            &set,
            &[
                ("token tok-123456", "token [redacted]"),
                ("gh ghp-abcdef", "gh [redacted]"),
                (
                    "decoded bob:s3cret-pw and s3cret-pw",
                    "decoded [redacted] and [redacted]",
                ),
                ("v plain-header-value", "v [redacted]"),
            ],
        );
        let empty = SecretSet::new();
        check_all(
            &empty,
            &[
                (
                    "sent \"authorization: bearer abcdefgh\" ok",
                    "sent \"authorization: bearer [redacted]\" ok",
                ),
                (
                    "Authorization: Basic Ym9iOnMzY3JldC1wdw==",
                    "Authorization: Basic [redacted]",
                ),
                // Not credentials: too short, or English.
                ("Bearer abc", "Bearer abc"),
                ("Bearer", "Bearer"),
                ("basic authentication failed", "basic authentication failed"),
            ],
        );
    }

    #[test]
    fn only_secret_named_environment_values_are_secrets() {
        let env = [
            ("CI", "true"),
            ("HOME", "/home/builder"),
            ("PWD", "/work/project"),
            ("RUST_LOG", "info"),
            ("LANG", "C.UTF-8"),
            ("CARGO_PKG_NAME", "ctxsync"),
            ("SSH_AUTH_SOCK", "/tmp/ssh-agent.sock"),
            ("XDG_SESSION_TYPE", "wayland"),
            ("GITHUB_TOKEN", "ghp-ambient-42"),
            ("OPENAI_API_KEY", "sk-ambient-43"),
            ("MYSQL_PWD", "mysql-pw-44"),
            ("SESSION_COOKIE", "cookie-45"),
            ("LOG_SECRET", "true"),
            ("DATABASE_URL", "postgres://app:db-pw-46@db/app"),
        ];
        let set = secrets(|s| s.insert_environment(env));
        check_all(
            &set,
            &[
                // The demo's "stderr: ctxsync-true" stays readable with CI=true.
                ("stderr: ctxsync-true", "stderr: ctxsync-true"),
                (
                    "exists=true cwd=/work/project home=/home/builder level=info lang=C.UTF-8 wayland",
                    "exists=true cwd=/work/project home=/home/builder level=info lang=C.UTF-8 wayland",
                ),
                (
                    "ctxsync at /tmp/ssh-agent.sock",
                    "ctxsync at /tmp/ssh-agent.sock",
                ),
                (
                    "ghp-ambient-42 sk-ambient-43 mysql-pw-44 cookie-45 db-pw-46",
                    "[redacted] [redacted] [redacted] [redacted] [redacted]",
                ),
            ],
        );
    }

    #[test]
    fn short_and_ordinary_values_stay_and_overlaps_are_covered() {
        let set = secrets(|s| {
            for value in ["abc", "true", "INFO", "dact", "secret-dact-long"] {
                s.insert(value);
            }
        });
        assert_eq!(
            set,
            secrets(|s| {
                s.insert("dact");
                s.insert("secret-dact-long");
            })
        );
        check(
            "abc true INFO secret-dact-long dact",
            &set,
            "abc true INFO [redacted] [redacted]",
        );
        // A shorter secret never matches inside an earlier replacement.
        let set = secrets(|s| {
            s.insert("edac");
            s.insert("xx-redacted-xx");
        });
        check("xx-redacted-xx", &set, "[redacted]");
        // Overlapping secrets are redacted as one.
        let set = secrets(|s| {
            s.insert("zzzza");
            s.insert("aaaa");
        });
        check("zzzzaaaaa!", &set, "[redacted]!");
    }

    #[test]
    fn tools_are_checked_against_their_own_secrets_only() {
        let own = secrets(|s| {
            s.insert("own-env-secret");
            s.insert("agent-token-123");
        });
        let mut out = vec![McpTool {
            name: "read_own-env-secret".into(),
            description: "uses agent-token-123; pass --token=<token>; CI is true".into(),
            input_schema: serde_json::json!({
                "type": "object",
                "properties": { "own-env-secret": { "default": "b3duLWVudi1zZWNyZXQ=" } },
            }),
            title: "Read own-env-secret".into(),
            annotations: Some(ctxsync_mcp_model::McpToolAnnotations {
                title: "agent-token-123".into(),
                read_only_hint: Some(true),
                ..Default::default()
            }),
            output_schema: Some(serde_json::json!({"description": "own-env-secret"})),
            icons: vec![ctxsync_mcp_model::McpIcon {
                src: "https://x/i.png?key=own-env-secret".into(),
                ..Default::default()
            }],
            meta: Some(serde_json::json!({"ui": {"token": "agent-token-123"}})),
        }];
        redact_tools(&mut out, &own);
        let rest = serde_json::to_string(&(
            &out[0].title,
            &out[0].annotations,
            &out[0].output_schema,
            &out[0].icons,
            &out[0].meta,
        ))
        .unwrap();
        assert!(
            !rest.contains("own-env-secret") && !rest.contains("agent-token-123"),
            "{rest}"
        );
        assert_eq!(out[0].title, "Read [redacted]");
        assert_eq!(
            out[0].annotations.as_ref().unwrap().read_only_hint,
            Some(true)
        );
        assert_eq!(out[0].name, "read_[redacted]");
        assert_eq!(
            out[0].description,
            "uses [redacted]; pass --token=<token>; CI is true"
        );
        assert_eq!(
            out[0].input_schema,
            serde_json::json!({
                "type": "object",
                "properties": { "[redacted]": { "default": "[redacted]" } },
            })
        );
    }

    #[test]
    fn debug_never_shows_a_secret() {
        let set = secrets(|s| s.insert("debug-shown-secret"));
        assert_eq!(format!("{set:?}"), "SecretSet { secrets: 1 }");
    }

    #[test]
    fn bounds_on_a_utf8_boundary() {
        let empty = SecretSet::new();
        for text in [
            "a".repeat(MAX_DIAGNOSTIC_BYTES),
            "a".repeat(MAX_DIAGNOSTIC_BYTES + 1),
            "é".repeat(MAX_DIAGNOSTIC_BYTES),
            "😀".repeat(3000),
            format!("a{}", "😀".repeat(3000)),
        ] {
            let out = sanitize_diagnostic(&text, &empty);
            assert!(out.len() <= MAX_DIAGNOSTIC_BYTES, "{}", out.len());
            if text.len() > MAX_DIAGNOSTIC_BYTES {
                assert!(out.ends_with("... [truncated]"));
                assert!(out.len() > MAX_DIAGNOSTIC_BYTES - 20);
            } else {
                assert_eq!(out, text);
            }
        }
    }

    #[test]
    fn redaction_happens_before_bounding() {
        let secret = "s".repeat(5000);
        let set = secrets(|s| s.insert(&secret));
        check(&format!("x{secret}y"), &set, "x[redacted]y");
    }

    #[test]
    fn unparseable_url_is_redacted_whole() {
        let set = secrets(|s| s.insert_url("not a url with secret"));
        check("bad: not a url with secret", &set, "bad: [redacted]");
    }
}
