//! The check that an error a person or the model reads is in words, not in Rust's own
//! notation: no type path (`::` before an uppercase name, as in `std::io::Error`) and no
//! `<` (generics like `Option<String>`, or debug output). Tests call it on every
//! user-facing error text they read.

/// Whether `text` reads as words: no `::` followed by an uppercase identifier, and no `<`.
pub fn is_in_words(text: &str) -> bool {
    !text.contains('<')
        && !text
            .match_indices("::")
            .any(|(at, _)| text[at + 2..].starts_with(|c: char| c.is_ascii_uppercase()))
}

/// Panics (naming the offending text) unless [`is_in_words`] holds for `text`.
#[track_caller]
pub fn assert_in_words(text: &str) {
    assert!(
        is_in_words(text),
        "a user-facing error carries Rust notation (a `::Type` path or `<`): {text}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_notation_is_caught_and_plain_words_pass() {
        for text in [
            "invalid JSON at line 3, column 5: expected `,` or `}`",
            "no response within 30s",
            "command not found: docs-mcp (is it on PATH?)",
            "see https://example.com/a::b for more",
            "",
        ] {
            assert!(is_in_words(text), "{text}");
        }
        for text in [
            "transport error: std::io::Error { kind: BrokenPipe }",
            "Request(JsonRpcRequest { id: String(\"x\") })::Roots",
            "expected Option<String>",
            "rmcp::service::ServiceError",
            "a::<B>",
        ] {
            assert!(!is_in_words(text), "{text}");
        }
    }
}
