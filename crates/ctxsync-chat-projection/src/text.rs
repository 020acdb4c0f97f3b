//! Small text helpers shared by the note and find_tools: one-line folding and cutting on
//! UTF-8 boundaries. A byte cut is always the protocol's `truncate_to_boundary`, so a
//! title or description is cut at the same byte wherever it is cut.

use ctxsync_protocol::encoded_size::truncate_to_boundary;

/// Folds every run of whitespace (newlines and tabs included) and every control
/// character into one space, and trims both ends.
pub(crate) fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut pending_space = false;
    for c in text.chars() {
        if c.is_whitespace() || c.is_control() {
            pending_space = !out.is_empty();
            continue;
        }
        if pending_space {
            out.push(' ');
            pending_space = false;
        }
        out.push(c);
    }
    out
}

/// `text` cut to at most `max_bytes` bytes on a char boundary; a cut text ends in `…`
/// (counted in the budget).
pub(crate) fn cap_bytes(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let kept = truncate_to_boundary(text, max_bytes.saturating_sub('…'.len_utf8()));
    format!("{}…", kept.trim_end())
}

/// `text` cut to at most `max_chars` characters; a cut text ends in `…` (counted).
pub(crate) fn cap_chars(text: &str, max_chars: usize) -> String {
    if text.chars().count() <= max_chars {
        return text.to_owned();
    }
    let kept: String = text.chars().take(max_chars.saturating_sub(1)).collect();
    format!("{}…", kept.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(actual: String, expect: &str) {
        assert_eq!(actual, expect);
    }

    #[test]
    fn one_line_folds_whitespace_and_controls() {
        check(one_line("  a\n\tb \r\n c\u{7}d  "), "a b c d");
        check(one_line(""), "");
        check(one_line("\n\n"), "");
    }

    #[test]
    fn caps_cut_on_char_boundaries() {
        check(cap_bytes("abcdef", 6), "abcdef");
        check(cap_bytes("abcdefg", 6), "abc…");
        // 'é' is two bytes: a cut through it steps back to the boundary.
        check(cap_bytes("aéééé", 6), "aé…");
        check(cap_chars("héllo wörld", 11), "héllo wörld");
        check(cap_chars("héllo wörld", 7), "héllo…");
        check(truncate_to_boundary("aé", 2).to_owned(), "a");
    }
}
