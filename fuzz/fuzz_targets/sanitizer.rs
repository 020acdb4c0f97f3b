//! libFuzzer target: secrets and text built from them (structured by `arbitrary`) through
//! `sanitize_diagnostic`, with the properties of `fuzz_sanitizer` in the diagnostics
//! crate's `tests/diagnostics/fuzz.rs`: the output is at most 4096 bytes of valid UTF-8 and contains
//! no injected secret of 4 or more characters (ordinary values such as "true" are never
//! secrets); text without secrets or secret shapes is kept as it is.

#![no_main]

use arbitrary::Arbitrary;
use ctxsync_agent_diagnostics::{MAX_DIAGNOSTIC_BYTES, SecretSet, sanitize_diagnostic};
use libfuzzer_sys::fuzz_target;

/// Secrets shorter than this are not redacted by design ("1", "on").
const MIN_SECRET_CHARS: usize = 4;
/// Values never treated as secrets, whatever holds them (compared ignoring case).
const ORDINARY_VALUES: &[&str] = &[
    "true", "false", "null", "none", "yes", "trace", "debug", "info", "warn", "warning", "error",
];
/// Characters of the `[redacted]` and `... [truncated]` markers: a secret made of other
/// characters can only survive by a real leak, never by matching a marker.
const MARKER_CHARS: &str = "[redacted]... [truncated]";
/// Texts are capped so one input stays fast; the cap is far past the 4096-byte bound.
const MAX_TEXT_BYTES: usize = 64 * 1024;

#[derive(Arbitrary, Debug)]
struct Input {
    secrets: Vec<String>,
    pieces: Vec<Piece>,
}

/// One piece of the text; indices pick a secret modulo the number of secrets.
#[derive(Arbitrary, Debug)]
enum Piece {
    Secret(u8),
    /// The first `n` characters of a secret.
    Prefix(u8, u8),
    /// The last `n` characters of a secret.
    Suffix(u8, u8),
    Text(String),
    Bearer,
    /// A secret repeated (overlapping runs), up to 400 times.
    Repeat(u8, u16),
    /// One character repeated, up to 2000 times (long texts around the bound).
    Run(char, u16),
}

fuzz_target!(|input: Input| {
    let Input { secrets, pieces } = input;
    let mut set = SecretSet::new();
    for secret in &secrets {
        set.insert(secret);
    }
    let pick = |i: u8| secrets.get(usize::from(i) % secrets.len().max(1));
    let mut text = String::new();
    for piece in pieces {
        match piece {
            Piece::Secret(i) => text.extend(pick(i).map(String::as_str)),
            Piece::Prefix(i, n) => {
                text.extend(pick(i).into_iter().flat_map(|s| s.chars().take(n.into())));
            }
            Piece::Suffix(i, n) => {
                if let Some(s) = pick(i) {
                    let skip = s.chars().count().saturating_sub(n.into());
                    text.extend(s.chars().skip(skip));
                }
            }
            Piece::Text(s) => text.push_str(&s),
            Piece::Bearer => text.push_str("Bearer "),
            Piece::Repeat(i, n) => {
                if let Some(s) = pick(i) {
                    text.push_str(&s.repeat(usize::from(n % 400)));
                }
            }
            Piece::Run(c, n) => text.extend(std::iter::repeat_n(c, usize::from(n % 2000))),
        }
        if text.len() > MAX_TEXT_BYTES {
            break;
        }
    }

    let out = sanitize_diagnostic(&text, &set);
    assert!(out.len() <= MAX_DIAGNOSTIC_BYTES, "{} bytes", out.len());
    assert!(std::str::from_utf8(out.as_bytes()).is_ok());
    let redacted: Vec<&String> = secrets
        .iter()
        .filter(|s| s.chars().count() >= MIN_SECRET_CHARS)
        .filter(|s| !ORDINARY_VALUES.iter().any(|o| s.eq_ignore_ascii_case(o)))
        .collect();
    for secret in &redacted {
        if !secret.contains(|c| MARKER_CHARS.contains(c)) {
            assert!(
                !out.contains(secret.as_str()),
                "{secret:?} survives in {out:?}"
            );
        }
    }
    if text.len() <= MAX_DIAGNOSTIC_BYTES
        && redacted.iter().all(|s| !text.contains(s.as_str()))
        && !has_secret_shape(&text)
    {
        assert_eq!(out, text, "text without secrets is kept");
    }
});

/// Whether `text` holds something redacted by its shape alone (a credential after
/// `Bearer `/`Basic `, a PEM block, URL userinfo, a flag value), known secret or not.
fn has_secret_shape(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    ["bearer ", "basic ", "://", ":\\/\\/", "-"]
        .iter()
        .any(|shape| lower.contains(shape))
}
