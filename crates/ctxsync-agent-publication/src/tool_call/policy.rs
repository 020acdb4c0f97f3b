//! `--allow-tool-calls`: which tool calls the agent runs, by glob over the server's name
//! and the tool's name joined by `/`.
//!
//! Owns: the glob syntax ([`CallGlob`]) and the policy made of globs ([`CallPolicy`]),
//! both checked once, when the agent starts. A glob must match the whole
//! `server/tool` string. A plugin's server is named `<plugin>/<server>`, so its calls read
//! `<plugin>/<server>/<tool>`. `*` matches any run of characters except `/`, `?` one
//! character except `/`, and every other character only itself (there is no escape and no
//! class). So a glob matches names with as many `/`-separated segments as it has: `*/*`
//! covers every tool of every `.mcp.json` server, `*/*/*` every tool of every plugin server.
//!
//! `**` is refused rather than read as `*`: elsewhere (gitignore, globsets) it crosses
//! `/`, and a glob that silently allowed fewer calls than its author meant, or more, is
//! worse than a start-up error.
//!
//! Must never: backtrack without bound. Each segment is matched with the greedy two-pointer
//! algorithm, which retries only from the last `*` and moves forward in the name on every
//! retry, so a match costs at most the glob's length times the name's.

use std::fmt;
use std::str::FromStr;

/// The longest glob, in bytes.
pub const MAX_CALL_GLOB_BYTES: usize = 1024;

/// One `--allow-tool-calls` glob, checked and compiled.
#[derive(Clone, PartialEq, Eq)]
pub struct CallGlob {
    source: String,
    /// The glob split at `/`: never empty, and no segment is empty.
    segments: Vec<Vec<Token>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    Char(char),
    /// `?`
    One,
    /// `*`
    Any,
}

/// Why a glob was refused. Its message does not repeat the glob: the caller names the flag
/// and the value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct CallGlobError {
    reason: String,
}

impl CallGlob {
    /// Checks and compiles `glob`: refused when empty, longer than
    /// [`MAX_CALL_GLOB_BYTES`], holding whitespace or a control character, holding `**`, or
    /// with an empty segment (no server or tool name has one, so it could match nothing).
    pub fn parse(glob: &str) -> Result<Self, CallGlobError> {
        let refuse = |reason: String| Err(CallGlobError { reason });
        if glob.is_empty() {
            return refuse("a glob cannot be empty".into());
        }
        if glob.len() > MAX_CALL_GLOB_BYTES {
            return refuse(format!(
                "a glob is at most {MAX_CALL_GLOB_BYTES} bytes; this one is {}",
                glob.len()
            ));
        }
        if let Some((at, c)) = glob
            .char_indices()
            .find(|(_, c)| c.is_whitespace() || c.is_control())
        {
            return refuse(format!(
                "a glob cannot hold whitespace or control characters ({c:?} at byte {at})"
            ));
        }
        if glob.contains("**") {
            return refuse(
                "`**` is not supported: `*` never crosses `/`, so write one `*` per segment \
                 (`*/*` is every tool of every server, `*/*/*` every tool of every plugin server)"
                    .into(),
            );
        }
        if glob.split('/').any(str::is_empty) {
            return refuse(
                "a glob cannot have an empty segment (a `/` at its start or end, or `//`): \
                 no server or tool name has one"
                    .into(),
            );
        }
        let segments = glob
            .split('/')
            .map(|segment| {
                segment
                    .chars()
                    .map(|c| match c {
                        '*' => Token::Any,
                        '?' => Token::One,
                        c => Token::Char(c),
                    })
                    .collect()
            })
            .collect();
        Ok(Self {
            source: glob.to_owned(),
            segments,
        })
    }

    /// The glob as given.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the glob matches the whole of `server/tool`.
    pub fn matches(&self, server: &str, tool: &str) -> bool {
        // Splitting both sides at `/` is what keeps `*` and `?` from crossing it.
        let mut names = server.split('/').chain(tool.split('/'));
        self.segments.iter().all(|segment| {
            names
                .next()
                .is_some_and(|name| segment_matches(segment, name))
        }) && names.next().is_none()
    }
}

impl FromStr for CallGlob {
    type Err = CallGlobError;

    fn from_str(glob: &str) -> Result<Self, Self::Err> {
        Self::parse(glob)
    }
}

impl fmt::Debug for CallGlob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CallGlob").field(&self.source).finish()
    }
}

impl fmt::Display for CallGlob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// Whether `pattern` matches all of `name`, neither holding `/`.
fn segment_matches(pattern: &[Token], name: &str) -> bool {
    // `p` indexes the pattern, `n` is a byte offset in the name. `retry` is the last `*`
    // passed: the pattern index after it and where in the name its run ends so far. On a
    // mismatch that run takes one more character and matching resumes after the `*`; an
    // earlier `*` never needs retrying, because the later one can absorb whatever a
    // longer run of the earlier would have.
    let (mut p, mut n) = (0, 0);
    let mut retry: Option<(usize, usize)> = None;
    while let Some(c) = name[n..].chars().next() {
        match pattern.get(p) {
            Some(Token::Any) => {
                p += 1;
                retry = Some((p, n));
                continue;
            }
            Some(Token::One) => {
                p += 1;
                n += c.len_utf8();
                continue;
            }
            Some(Token::Char(expected)) if *expected == c => {
                p += 1;
                n += c.len_utf8();
                continue;
            }
            _ => {}
        }
        let Some((after_star, run_end)) = retry else {
            return false;
        };
        let absorbed = name[run_end..].chars().next().map_or(0, char::len_utf8);
        retry = Some((after_star, run_end + absorbed));
        p = after_star;
        n = run_end + absorbed;
    }
    pattern[p..].iter().all(|token| *token == Token::Any)
}

/// Which tool calls the agent runs: every one (the default), or only those one of its
/// globs matches. A call outside it is refused `denied`; the tool is still listed.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct CallPolicy {
    /// `None`: every call.
    only: Option<Vec<CallGlob>>,
}

impl CallPolicy {
    /// Every call runs (no `--allow-tool-calls`).
    pub fn allow_all() -> Self {
        Self::default()
    }

    /// Only the calls one of `globs` matches run; with no glob, none does.
    pub fn allow_only(globs: impl IntoIterator<Item = CallGlob>) -> Self {
        Self {
            only: Some(globs.into_iter().collect()),
        }
    }

    /// The globs, or `None` when every call runs.
    pub fn globs(&self) -> Option<&[CallGlob]> {
        self.only.as_deref()
    }

    /// Whether a call of `tool` on `server` may run.
    pub fn allows(&self, server: &str, tool: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|globs| globs.iter().any(|glob| glob.matches(server, tool)))
    }
}

/// `all`, or the globs separated by spaces (a glob holds none).
impl fmt::Display for CallPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.only {
            None => f.write_str("all"),
            Some(globs) if globs.is_empty() => f.write_str("none"),
            Some(globs) => {
                for (i, glob) in globs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(" ")?;
                    }
                    f.write_str(glob.as_str())?;
                }
                Ok(())
            }
        }
    }
}

impl fmt::Debug for CallPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.only {
            None => f.write_str("CallPolicy(all)"),
            Some(globs) => f
                .debug_tuple("CallPolicy")
                .field(&globs.iter().map(CallGlob::as_str).collect::<Vec<_>>())
                .finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn glob(source: &str) -> CallGlob {
        CallGlob::parse(source).unwrap()
    }

    fn matches(source: &str, server: &str, tool: &str) -> bool {
        glob(source).matches(server, tool)
    }

    #[test]
    fn a_glob_matches_server_and_tool_joined_by_a_slash() {
        assert!(matches("github/create_issue", "github", "create_issue"));
        assert!(!matches("github/create_issue", "github", "create_issues"));
        assert!(!matches("github/create_issue", "gitlab", "create_issue"));
        assert!(matches("files/*", "files", "read"));
        assert!(!matches("files/*", "files2", "read"));
        assert!(matches("*/read_*", "files", "read_file"));
        assert!(matches("*/read_*", "docs", "read_"));
        assert!(!matches("*/read_*", "docs", "write_file"));
        assert!(matches("*/*", "any", "thing"));
        assert!(matches("f*s/*", "fs", "x"), "`*` may match nothing");
    }

    #[test]
    fn a_glob_is_anchored_at_both_ends() {
        assert!(!matches("files/read", "files", "read_file"));
        assert!(!matches("iles/read", "files", "read"));
        assert!(!matches("files/ead", "files", "read"));
        assert!(matches("files/*file", "files", "read_file"));
        assert!(!matches("files/*file", "files", "read_files"));
        assert!(matches("files/read*", "files", "read"));
    }

    #[test]
    fn a_question_mark_matches_exactly_one_character() {
        assert!(matches("files/rea?", "files", "read"));
        assert!(!matches("files/rea?", "files", "rea"));
        assert!(!matches("files/rea?", "files", "reads"));
        assert!(matches("??/x", "fs", "x"));
        assert!(
            matches("d?cs/x", "dœcs", "x"),
            "one character, not one byte"
        );
    }

    #[test]
    fn wildcards_never_cross_a_slash() {
        assert!(!matches("*", "files", "read"));
        assert!(!matches("files*", "files", "read"));
        assert!(!matches("*/*", "plugin/server", "tool"));
        assert!(!matches("files?read", "files", "read"));
        assert!(!matches("*/*/*", "files", "read"));
    }

    #[test]
    fn a_plugin_servers_calls_read_plugin_server_tool() {
        assert!(matches("acme/*/*", "acme/tracker", "create"));
        assert!(matches("acme/tracker/create", "acme/tracker", "create"));
        assert!(matches("*/*/create", "acme/tracker", "create"));
        assert!(!matches("acme/*", "acme/tracker", "create"));
        assert!(!matches("acme/*/*", "acme", "tracker"));
        assert!(!matches("acme/*/*", "other/tracker", "create"));
    }

    #[test]
    fn every_other_character_is_literal() {
        assert!(matches("a.b/[x]", "a.b", "[x]"));
        assert!(!matches("a.b/[x]", "aXb", "x"));
        assert!(matches("s/\\*", "s", "\\anything"), "no escapes");
        assert!(matches("s/ünï", "s", "ünï"));
    }

    #[test]
    fn a_pathological_glob_against_a_long_name_finishes_at_once() {
        // An exponential matcher tries every way to split the `a`s among the `*`s.
        let long = "a".repeat(100_000);
        let started = std::time::Instant::now();
        assert!(!matches("*/*a*a*a*a*a*a*a*a*a*a*b", "s", &long));
        assert!(!matches("*a*a*a*a*a*a*a*a*a*a*b/*", &long, "t"));
        assert!(matches("*/*a*a*a*a*a*a*a*a*a*a*", "s", &long));
        let elapsed = started.elapsed();
        assert!(elapsed < std::time::Duration::from_secs(5), "{elapsed:?}");
    }

    #[test]
    fn bad_globs_are_refused_saying_why() {
        let error = |source: &str| CallGlob::parse(source).unwrap_err().to_string();
        assert!(error("").contains("empty"));
        assert!(error("files/ read").contains("whitespace"));
        assert!(error("files/\tread").contains("'\\t' at byte 6"));
        assert!(error("files/\u{7}").contains("control"));
        assert!(error("files/**").contains("`**` is not supported"));
        assert!(error("**").contains("`**`"));
        for empty_segment in ["/read", "files/", "a//b", "/"] {
            assert!(
                error(empty_segment).contains("empty segment"),
                "{empty_segment}"
            );
        }
        let longest = format!("s/{}", "x".repeat(MAX_CALL_GLOB_BYTES - 2));
        assert!(CallGlob::parse(&longest).is_ok());
        assert!(error(&format!("{longest}x")).contains("at most 1024 bytes"));
    }

    #[test]
    fn the_default_policy_allows_every_call_and_an_empty_list_none() {
        assert!(CallPolicy::default().allows("any", "thing"));
        assert!(CallPolicy::allow_all().allows("p/s", "t"));
        assert_eq!(CallPolicy::allow_all().globs(), None);
        assert!(!CallPolicy::allow_only([]).allows("any", "thing"));
    }

    #[test]
    fn a_policy_allows_what_any_of_its_globs_matches() {
        let policy = CallPolicy::allow_only([glob("github/create_issue"), glob("files/*")]);
        assert!(policy.allows("github", "create_issue"));
        assert!(policy.allows("files", "write"));
        assert!(!policy.allows("github", "delete_repo"));
        assert_eq!(policy.to_string(), "github/create_issue files/*");
        assert_eq!(
            format!("{policy:?}"),
            r#"CallPolicy(["github/create_issue", "files/*"])"#
        );
        assert_eq!(CallPolicy::allow_all().to_string(), "all");
        assert_eq!(format!("{:?}", CallPolicy::allow_all()), "CallPolicy(all)");
    }

    /// The obvious exponential matcher, over characters, as the reference.
    fn reference(pattern: &[char], name: &[char]) -> bool {
        match pattern.split_first() {
            None => name.is_empty(),
            Some(('*', rest)) => (0..=name.len())
                .take_while(|&i| i == 0 || name[i - 1] != '/')
                .any(|i| reference(rest, &name[i..])),
            Some(('?', rest)) => name
                .split_first()
                .is_some_and(|(c, name)| *c != '/' && reference(rest, name)),
            Some((p, rest)) => name
                .split_first()
                .is_some_and(|(c, name)| c == p && reference(rest, name)),
        }
    }

    proptest! {
        #[test]
        fn the_matcher_agrees_with_the_reference(
            pattern in "[ab*?/]{1,8}",
            server in "[ab/]{1,6}",
            tool in "[ab/]{1,4}",
        ) {
            let Ok(compiled) = CallGlob::parse(&pattern) else {
                return Ok(());
            };
            let pattern: Vec<char> = pattern.chars().collect();
            let name: Vec<char> = format!("{server}/{tool}").chars().collect();
            prop_assert_eq!(compiled.matches(&server, &tool), reference(&pattern, &name));
        }
    }
}
