//! Sanitizing and bounding of every diagnostic that leaves the engine (SPEC §3.3).

use std::collections::BTreeSet;

/// Upper bound of any diagnostic, in bytes.
pub const MAX_DIAGNOSTIC_BYTES: usize = 4096;
/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";
/// How a bounded diagnostic ends when it was cut.
const TRUNCATION_MARKER: &str = "... [truncated]";
/// Values shorter than this many characters are too common to redact ("1", "on").
const MIN_SECRET_CHARS: usize = 4;
/// Environment variables whose values are not secrets and help reading diagnostics.
/// Log settings and locale are here too: their short common values ("info", "C.UTF-8")
/// would otherwise be blanked out of every message that happens to contain them.
const NON_SECRET_ENV_NAMES: &[&str] = &[
    "PATH",
    "HOME",
    "PWD",
    "SHELL",
    "USER",
    "LANG",
    "TERM",
    "TMPDIR",
    "LOGNAME",
    "LC_ALL",
    "LC_CTYPE",
    "COLORTERM",
    "SHLVL",
    "RUST_LOG",
    "RUST_BACKTRACE",
];
/// Prefixes of variables that cargo sets to package metadata (name, version, authors).
const NON_SECRET_ENV_PREFIXES: &[&str] = &["CARGO_PKG_"];
const BEARER: &str = "bearer ";

/// The strings to redact from diagnostics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SecretSet {
    secrets: BTreeSet<String>,
}

impl SecretSet {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one secret value (ignored when shorter than 4 characters).
    pub fn insert(&mut self, value: &str) {
        if value.chars().count() >= MIN_SECRET_CHARS {
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

    /// Adds the values of the agent's environment, except non-secret names (PATH, HOME, ...).
    pub fn insert_environment<'a>(&mut self, env: impl IntoIterator<Item = (&'a str, &'a str)>) {
        for (name, value) in env {
            let not_secret = NON_SECRET_ENV_NAMES.contains(&name)
                || NON_SECRET_ENV_PREFIXES.iter().any(|p| name.starts_with(p));
            if !not_secret {
                self.insert(value);
            }
        }
    }

    /// Adds an HTTP header value and, for `Bearer <token>`, the token alone.
    pub fn insert_header_value(&mut self, value: &str) {
        self.insert(value);
        if let Some(token) = bearer_token(value) {
            self.insert(token);
        }
    }

    /// Adds the secret parts of a URL: userinfo, path and query (each also piecewise).
    pub fn insert_url(&mut self, raw: &str) {
        let Ok(url) = url::Url::parse(raw) else {
            // Unparseable: the whole string is all we can name.
            self.insert(raw);
            return;
        };
        self.insert(url.username());
        if let Some(password) = url.password() {
            self.insert(password);
        }
        if let Some(colon) = url.authority().rfind('@') {
            self.insert(&url.authority()[..colon]);
        }
        if url.path() != "/" {
            self.insert(url.path());
            for segment in url.path_segments().into_iter().flatten() {
                self.insert(segment);
            }
        }
        if let Some(query) = url.query() {
            self.insert(query);
            for pair in query.split('&') {
                self.insert(pair);
                if let Some((_, value)) = pair.split_once('=') {
                    self.insert(value);
                }
            }
            for (_, value) in url.query_pairs() {
                self.insert(&value);
            }
        }
        if let Some(fragment) = url.fragment() {
            self.insert(fragment);
        }
    }

    /// Adds command arguments: positional values and the values of `--flag=value` (flag names
    /// are kept readable).
    pub fn insert_args<'a>(&mut self, args: impl IntoIterator<Item = &'a str>) {
        for arg in args {
            if arg.starts_with('-') {
                if let Some((_, value)) = arg.split_once('=') {
                    self.insert(value);
                }
            } else {
                self.insert(arg);
            }
        }
    }

    /// Adds every secret of `other`.
    pub fn extend(&mut self, other: &SecretSet) {
        self.secrets.extend(other.secrets.iter().cloned());
    }

    fn longest_first(&self) -> Vec<&str> {
        let mut secrets: Vec<&str> = self.secrets.iter().map(String::as_str).collect();
        secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
        secrets
    }
}

/// The token of a `Bearer <token>` value.
fn bearer_token(value: &str) -> Option<&str> {
    let prefix = value.get(..BEARER.len())?;
    prefix
        .eq_ignore_ascii_case(BEARER)
        .then(|| value[BEARER.len()..].trim())
}

/// Redacts `secrets` (longest first) and any `Bearer <token>` from `text`, then bounds it to
/// [`MAX_DIAGNOSTIC_BYTES`] on a UTF-8 boundary. Pure: the fuzz target calls it directly.
pub fn sanitize_diagnostic(text: &str, secrets: &SecretSet) -> String {
    bound(&redact(text, secrets))
}

/// Replaces secrets with [`REDACTED`]. Matches are found in the original text, longest
/// secret first, so a shorter secret never matches inside an earlier replacement.
pub(crate) fn redact(text: &str, secrets: &SecretSet) -> String {
    let mut covered = vec![false; text.len()];
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    let mut claim = |start: usize, end: usize, ranges: &mut Vec<(usize, usize)>| {
        if covered[start..end].iter().any(|c| *c) {
            return;
        }
        covered[start..end].iter_mut().for_each(|c| *c = true);
        ranges.push((start, end));
    };
    for secret in secrets.longest_first() {
        // Every occurrence, overlapping ones included: a non-overlapping scan could pair its
        // matches so that one straddles a longer secret's range and is skipped, leaving a
        // whole occurrence next to it unredacted ("zzzza" then "aaaa" in "zzzzaaaaa").
        for start in overlapping_matches(text, secret) {
            claim(start, start + secret.len(), &mut ranges);
        }
    }
    for (start, end) in bearer_tokens(text) {
        claim(start, end, &mut ranges);
    }
    ranges.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (start, end) in ranges {
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

/// Byte ranges of tokens that follow `Bearer ` anywhere in `text` (e.g. echoed headers).
fn bearer_tokens(text: &str) -> Vec<(usize, usize)> {
    let lower = text.to_ascii_lowercase();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(offset) = lower[from..].find(BEARER) {
        let start = from + offset + BEARER.len();
        let end = text[start..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ',' | ';'))
            .map_or(text.len(), |len| start + len);
        if text[start..end].chars().count() >= MIN_SECRET_CHARS {
            found.push((start, end));
        }
        from = end.max(start);
    }
    found
}

/// Cuts `text` to at most [`MAX_DIAGNOSTIC_BYTES`], ending in `... [truncated]` when cut.
pub(crate) fn bound(text: &str) -> String {
    if text.len() <= MAX_DIAGNOSTIC_BYTES {
        return text.to_owned();
    }
    let mut cut = MAX_DIAGNOSTIC_BYTES - TRUNCATION_MARKER.len();
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

    #[test]
    fn redacts_each_secret_kind() {
        let set = secrets(|s| {
            s.insert("env-value-1");
            s.insert_header_value("Bearer tok-123456");
            s.insert_url("https://alice:pw-9876@example.com/v1/key-abcdef?token=qv-5555&x=1");
            s.insert_args(["--api-key=arg-secret", "-v", "positional-secret", "--flag"]);
            s.insert_environment([
                ("AWS_SECRET", "ambient-42"),
                ("HOME", "/root/home"),
                ("RUST_LOG", "info"),
                ("CARGO_PKG_NAME", "ctxsync"),
            ]);
        });
        check(
            "for more information on ctxsync see /root/home",
            &set,
            "for more information on ctxsync see /root/home",
        );
        check("value env-value-1 here", &set, "value [redacted] here");
        check(
            "Authorization: Bearer tok-123456",
            &set,
            "Authorization: [redacted]",
        );
        check("token tok-123456", &set, "token [redacted]");
        check(
            "user alice pw pw-9876",
            &set,
            "user [redacted] pw [redacted]",
        );
        check("GET /v1/key-abcdef", &set, "GET [redacted]");
        check("segment key-abcdef", &set, "segment [redacted]");
        check("q=token=qv-5555", &set, "q=[redacted]");
        check("v qv-5555", &set, "v [redacted]");
        check("--api-key=arg-secret", &set, "--api-key=[redacted]");
        check("arg positional-secret", &set, "arg [redacted]");
        check("--flag -v stay", &set, "--flag -v stay");
        check(
            "ambient-42 and /root/home",
            &set,
            "[redacted] and /root/home",
        );
    }

    #[test]
    fn short_values_stay_and_longest_wins() {
        let set = secrets(|s| {
            s.insert("abc");
            s.insert("dact");
            s.insert("secret-dact-long");
        });
        check(
            "abc secret-dact-long dact",
            &set,
            "abc [redacted] [redacted]",
        );
        // A shorter secret never matches inside an earlier replacement.
        let set = secrets(|s| {
            s.insert("edac");
            s.insert("xx-redacted-xx");
        });
        check("xx-redacted-xx", &set, "[redacted]");
    }

    #[test]
    fn bearer_tokens_are_redacted_without_being_known() {
        let empty = SecretSet::new();
        check(
            "sent \"authorization: bearer abcdefgh\" ok",
            &empty,
            "sent \"authorization: bearer [redacted]\" ok",
        );
        check("Bearer abc", &empty, "Bearer abc");
        check("Bearer", &empty, "Bearer");
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
