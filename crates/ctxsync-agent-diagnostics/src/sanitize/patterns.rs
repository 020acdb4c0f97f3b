//! Secrets recognised by their shape rather than known in advance: bearer and Basic
//! credentials, PEM blocks, the userinfo of URLs, values of secret-named flags and
//! `-pVALUE`; and which names (of variables, flags, headers) look secret.

use super::{MIN_SECRET_CHARS, forms::base64_decode};

const BEARER: &str = "bearer ";
const BASIC: &str = "basic ";
const PEM_BEGIN: &str = "-----BEGIN ";
const PEM_DASHES: &str = "-----";
const PEM_END: &str = "-----END";
/// A name with one of these parts holds a secret (`GITHUB_TOKEN`, `api-key`, `DB_PASSWORD`).
const SECRET_NAME_PARTS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "KEY",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "PASS",
    "CREDENTIAL",
    "CREDS",
    "AUTH",
    "AUTHORIZATION",
    "COOKIE",
    "SESSION",
    "PRIVATE",
    "DSN",
];
/// A part that ends in one of these holds a secret too (`APIKEY`, `AUTHTOKEN`, `DBPASSWORD`).
const SECRET_NAME_ENDINGS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "KEY",
    "PASSWORD",
    "PASSWD",
    "COOKIE",
    "CREDENTIAL",
];
/// A name ending in one of these parts says where or what a secret is, not the secret
/// (`SSH_AUTH_SOCK`, `PASSWORD_FILE`, `XDG_SESSION_TYPE`).
const LOCATOR_NAME_PARTS: &[&str] = &[
    "FILE", "FILES", "PATH", "DIR", "SOCK", "SOCKET", "TYPE", "CLASS", "DESKTOP",
];
/// Well-known variables whose names look secret but whose values are not.
const NON_SECRET_NAMES: &[&str] = &[
    "DESKTOP_SESSION",
    "SESSION_MANAGER",
    "DBUS_SESSION_BUS_ADDRESS",
];

/// Whether a variable, flag or header name looks like it holds a secret.
pub(super) fn secret_name(name: &str) -> bool {
    let parts = name_parts(name);
    if NON_SECRET_NAMES.contains(&name.to_ascii_uppercase().as_str())
        || parts
            .last()
            .is_some_and(|last| LOCATOR_NAME_PARTS.contains(&last.as_str()))
    {
        return false;
    }
    parts.iter().any(|part| {
        let stem = part.strip_suffix('S').unwrap_or(part);
        // `PWD` alone is the working directory; `MYSQL_PWD` is a password.
        (part == "PWD" && parts.len() > 1)
            || [part.as_str(), stem].iter().any(|p| {
                SECRET_NAME_PARTS.contains(p) || SECRET_NAME_ENDINGS.iter().any(|e| p.ends_with(e))
            })
    })
}

/// `GITHUB_TOKEN` → `GITHUB`, `TOKEN`; `apiKey` → `API`, `KEY`; `--api-key` → `API`, `KEY`.
fn name_parts(name: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut part = String::new();
    let mut previous_lower = false;
    for c in name.chars() {
        let boundary = !c.is_ascii_alphanumeric() || (c.is_ascii_uppercase() && previous_lower);
        if boundary && !part.is_empty() {
            parts.push(std::mem::take(&mut part));
        }
        if c.is_ascii_alphanumeric() {
            part.push(c.to_ascii_uppercase());
        }
        previous_lower = c.is_ascii_lowercase();
    }
    if !part.is_empty() {
        parts.push(part);
    }
    parts
}

/// Byte ranges of every shape-recognised secret in `text` (they may overlap).
pub(super) fn pattern_ranges(text: &str) -> Vec<(usize, usize)> {
    let mut ranges = Vec::new();
    scheme_credentials(text, BEARER, |_| true, &mut ranges);
    scheme_credentials(text, BASIC, is_basic_credential, &mut ranges);
    pem_bodies(text, &mut ranges);
    url_userinfo(text, &mut ranges);
    flag_values(text, &mut ranges);
    ranges
}

/// Where a value in running text ends: quotes, separators and escapes end it.
fn ends_value(c: char) -> bool {
    c.is_whitespace()
        || matches!(
            c,
            '"' | '\'' | ',' | ';' | '\\' | '(' | ')' | '[' | ']' | '{' | '}' | '`' | '&'
        )
}

fn value_end(text: &str, start: usize) -> usize {
    text[start..]
        .find(ends_value)
        .map_or(text.len(), |len| start + len)
}

fn push_value(text: &str, start: usize, end: usize, ranges: &mut Vec<(usize, usize)>) {
    if text[start..end].chars().count() >= MIN_SECRET_CHARS {
        ranges.push((start, end));
    }
}

/// Credentials after `Bearer ` or `Basic ` (any case), e.g. in an echoed header.
fn scheme_credentials(
    text: &str,
    scheme: &str,
    accept: impl Fn(&str) -> bool,
    ranges: &mut Vec<(usize, usize)>,
) {
    let lower = text.to_ascii_lowercase();
    let mut from = 0;
    while let Some(offset) = lower[from..].find(scheme) {
        let start = from + offset + scheme.len();
        let end = value_end(text, start);
        if accept(&text[start..end]) {
            push_value(text, start, end, ranges);
        }
        from = end.max(start);
    }
}

/// Basic credentials are base64 of `user:password`; "basic auth" in a sentence is not.
fn is_basic_credential(token: &str) -> bool {
    base64_decode(token)
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .is_some_and(|decoded| decoded.contains(':'))
}

/// Everything between a PEM header line and its footer (or the end of the text, when the
/// footer was cut off), raw or JSON-escaped.
fn pem_bodies(text: &str, ranges: &mut Vec<(usize, usize)>) {
    let mut from = 0;
    while let Some(offset) = text[from..].find(PEM_BEGIN) {
        let label = from + offset + PEM_BEGIN.len();
        let Some(label_len) = text[label..].find(PEM_DASHES) else {
            return;
        };
        let body_start = label + label_len + PEM_DASHES.len();
        let body_end = text[body_start..]
            .find(PEM_END)
            .map_or(text.len(), |len| body_start + len);
        let body = &text[body_start..body_end];
        let start = body_start + (body.len() - body.trim_start().len());
        let end = body_end - (body.len() - body.trim_end().len());
        if start < end {
            ranges.push((start, end));
        }
        from = body_end;
    }
}

/// The userinfo of every URL (`scheme://user:password@host`), also JSON-escaped (`:\/\/`).
fn url_userinfo(text: &str, ranges: &mut Vec<(usize, usize)>) {
    for separator in ["://", ":\\/\\/"] {
        for (at, _) in text.match_indices(separator) {
            let start = at + separator.len();
            let end = text[start..]
                .find(|c: char| {
                    c.is_whitespace()
                        || matches!(
                            c,
                            '/' | '?'
                                | '#'
                                | '"'
                                | '\''
                                | '<'
                                | '>'
                                | '`'
                                | '\\'
                                | '('
                                | ')'
                                | '['
                                | ']'
                                | '{'
                                | '}'
                        )
                })
                .map_or(text.len(), |len| start + len);
            if let Some(userinfo) = text[start..end].rfind('@') {
                push_value(text, start, start + userinfo, ranges);
            }
        }
    }
}

/// Whether a flag may start at byte `at`: at the start, or after a space, quote or opener.
fn starts_token(text: &str, at: usize) -> bool {
    text[..at].chars().next_back().is_none_or(|c| {
        c.is_whitespace() || matches!(c, '"' | '\'' | '=' | '(' | '[' | '{' | ',' | '`')
    })
}

/// Values of secret-named flags (`--token=…`, `--api-key …`, `-password=…`) and `-pVALUE`.
fn flag_values(text: &str, ranges: &mut Vec<(usize, usize)>) {
    for (at, _) in text.match_indices('-') {
        if !starts_token(text, at) {
            continue;
        }
        let double = text[at..].starts_with("--");
        let name_start = at + if double { 2 } else { 1 };
        let name_end = text[name_start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
            .map_or(text.len(), |len| name_start + len);
        let name = &text[name_start..name_end];
        if name.is_empty() {
            continue;
        }
        let after = &text[name_end..];
        if secret_name(name) {
            if after.starts_with('=') {
                push_value(text, name_end + 1, value_end(text, name_end + 1), ranges);
                continue;
            }
            if double
                && after.starts_with(' ')
                && !after[1..].starts_with(|c: char| c == '-' || ends_value(c))
            {
                push_value(text, name_end + 1, value_end(text, name_end + 1), ranges);
                continue;
            }
        }
        if !double && name.starts_with('p') && name.len() > 1 {
            // `-pSECRET` as mysql takes it; `-p8080` is a port, not a password.
            let start = name_start + 1;
            let end = value_end(text, start);
            if !text[start..end].bytes().all(|b| b.is_ascii_digit()) {
                push_value(text, start, end, ranges);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_names() {
        for name in [
            "GITHUB_TOKEN",
            "OPENAI_API_KEY",
            "apiKey",
            "api-key",
            "DB_PASSWORD",
            "MYSQL_PWD",
            "AWS_SECRET_ACCESS_KEY",
            "CLIENT_SECRETS",
            "NPM_AUTHTOKEN",
            "SENTRY_DSN",
            "Authorization",
            "Cookie",
            "SESSION",
            "PRIVATE_KEY",
            "CREDENTIALS",
            "PGPASSWORD",
        ] {
            assert!(secret_name(name), "{name}");
        }
        for name in [
            "CI",
            "PATH",
            "PWD",
            "OLDPWD",
            "HOME",
            "RUST_LOG",
            "CARGO_PKG_AUTHORS",
            "GIT_AUTHOR_NAME",
            "XAUTHORITY",
            "SSH_AUTH_SOCK",
            "PASSWORD_FILE",
            "GOOGLE_APPLICATION_CREDENTIALS_PATH",
            "XDG_SESSION_TYPE",
            "DESKTOP_SESSION",
            "KEYBOARD_LAYOUT",
            "nonce",
            "pid-file",
        ] {
            assert!(!secret_name(name), "{name}");
        }
    }
}
