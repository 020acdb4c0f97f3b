//! The `SKILL.md` front-matter parser: a small, total subset of YAML.
//!
//! Pure and panic-free on any input (a fuzz target drives [`parse_front_matter`]). It reads
//! top-level `key: value` pairs between a leading `---` line and the next `---` (or `...`)
//! line. Values may be plain (folded over indented continuation lines), single- or
//! double-quoted, or `|`/`>` block scalars. A key followed by a nested mapping or list
//! keeps an empty value: skills only need scalar fields.

/// The top-level scalar fields of a front matter block, in file order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FrontMatter {
    fields: Vec<(String, String)>,
}

impl FrontMatter {
    /// The value of a top-level key.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every top-level key and its value, in file order.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &str)> {
        self.fields.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

/// Why a front matter block could not be read. Line numbers count from 1 in the file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrontMatterError {
    /// The file does not start with a `---` line.
    #[error("no front matter: the file must start with a `---` line")]
    Missing,
    /// No `---` (or `...`) line closes the block.
    #[error("the front matter is never closed by a `---` line")]
    Unterminated,
    /// A line of the block is not a top-level `key: value` pair.
    #[error("line {line}: expected `key: value`")]
    ExpectedKey {
        /// The offending line.
        line: usize,
    },
    /// A top-level key appears a second time.
    #[error("line {line}: key `{key}` appears more than once")]
    DuplicateKey {
        /// The line of the repetition.
        line: usize,
        /// The repeated key.
        key: String,
    },
    /// A single- or double-quoted value does not end.
    #[error("line {line}: a quoted value is never closed")]
    UnterminatedQuote {
        /// The line the quoted value starts on.
        line: usize,
    },
}

/// Parses the front matter at the start of `text`.
pub fn parse_front_matter(text: &str) -> Result<FrontMatter, FrontMatterError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    if lines.next().map(str::trim_end) != Some("---") {
        return Err(FrontMatterError::Missing);
    }
    let mut block = Vec::new();
    let mut closed = false;
    for line in lines {
        let end = line.trim_end();
        if end == "---" || end == "..." {
            closed = true;
            break;
        }
        block.push(line);
    }
    if !closed {
        return Err(FrontMatterError::Unterminated);
    }
    parse_block(&block)
}

/// Parses the lines between the fences; `block[0]` is line 2 of the file.
fn parse_block(block: &[&str]) -> Result<FrontMatter, FrontMatterError> {
    let line_no = |i: usize| i + 2;
    let mut fields: Vec<(String, String)> = Vec::new();
    let mut i = 0;
    while i < block.len() {
        let line = block[i];
        if is_blank_or_comment(line) {
            i += 1;
            continue;
        }
        if indent_of(line) > 0 {
            return Err(FrontMatterError::ExpectedKey { line: line_no(i) });
        }
        let (key, rest) =
            split_key(line).ok_or(FrontMatterError::ExpectedKey { line: line_no(i) })?;
        // Continuation lines: blank, or indented further than the key.
        let mut end = i + 1;
        while end < block.len() && (block[end].trim().is_empty() || indent_of(block[end]) > 0) {
            end += 1;
        }
        let continuation = &block[i + 1..end];
        let value = parse_value(rest, continuation)
            .ok_or(FrontMatterError::UnterminatedQuote { line: line_no(i) })?;
        if fields.iter().any(|(k, _)| *k == key) {
            return Err(FrontMatterError::DuplicateKey {
                line: line_no(i),
                key,
            });
        }
        fields.push((key, value));
        i = end;
    }
    Ok(FrontMatter { fields })
}

fn is_blank_or_comment(line: &str) -> bool {
    let trimmed = line.trim_start();
    trimmed.is_empty() || trimmed.starts_with('#')
}

/// Leading spaces and tabs, in bytes (both are one byte, so this is a char boundary).
fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches([' ', '\t']).len()
}

/// Splits `key: rest` at the first colon followed by whitespace or the end of the line.
fn split_key(line: &str) -> Option<(String, &str)> {
    let mut chars = line.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if c != ':' {
            continue;
        }
        let next = chars.peek().map(|&(_, n)| n);
        if next.is_none_or(char::is_whitespace) {
            let key = unquote_key(line[..at].trim());
            if key.is_empty() || key.starts_with('-') {
                return None;
            }
            return Some((key, line[at + 1..].trim()));
        }
    }
    None
}

fn unquote_key(key: &str) -> String {
    for quote in ['"', '\''] {
        if let Some(inner) = key.strip_prefix(quote).and_then(|k| k.strip_suffix(quote)) {
            return inner.to_owned();
        }
    }
    key.to_owned()
}

/// The value starting with `rest` on the key's line; `None` for an unclosed quote.
fn parse_value(rest: &str, continuation: &[&str]) -> Option<String> {
    if let Some(header) = rest.strip_prefix('|') {
        let _ = header; // chomping and indentation indicators: values are trimmed anyway
        return Some(block_scalar(continuation, false));
    }
    if let Some(header) = rest.strip_prefix('>') {
        let _ = header;
        return Some(block_scalar(continuation, true));
    }
    if rest.starts_with('"') || rest.starts_with('\'') {
        let mut joined = rest.to_owned();
        for line in continuation {
            let line = line.trim();
            joined.push(if line.is_empty() { '\n' } else { ' ' });
            joined.push_str(line);
        }
        return quoted(&joined);
    }
    let first_nested = continuation
        .iter()
        .map(|l| l.trim())
        .find(|l| !l.is_empty());
    if rest.is_empty() && first_nested.is_some_and(looks_nested) {
        // A nested mapping or list: not a scalar field.
        return Some(String::new());
    }
    let mut value = strip_comment(rest).to_owned();
    for line in continuation {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if !value.is_empty() {
            value.push(' ');
        }
        value.push_str(strip_comment(line));
    }
    Some(value.trim().to_owned())
}

fn looks_nested(line: &str) -> bool {
    line == "-" || line.starts_with("- ") || split_key(line).is_some()
}

/// A plain scalar ends where ` #` starts a comment.
fn strip_comment(text: &str) -> &str {
    match text.find(" #").or_else(|| text.find("\t#")) {
        Some(at) => text[..at].trim_end(),
        None if text.starts_with('#') => "",
        None => text,
    }
}

/// A `|` (literal) or `>` (folded) block: the continuation lines less their common indent.
fn block_scalar(lines: &[&str], folded: bool) -> String {
    let indent = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| indent_of(l))
        .min()
        .unwrap_or(0);
    let texts: Vec<&str> = lines
        .iter()
        .map(|l| {
            if l.trim().is_empty() {
                ""
            } else {
                l.get(indent..).unwrap_or("").trim_end()
            }
        })
        .collect();
    let mut out = String::new();
    if folded {
        let mut previous_blank = true;
        for text in texts {
            if text.is_empty() {
                out.push('\n');
                previous_blank = true;
            } else {
                if !previous_blank {
                    out.push(' ');
                }
                out.push_str(text);
                previous_blank = false;
            }
        }
    } else {
        out = texts.join("\n");
    }
    out.trim().to_owned()
}

/// A single- or double-quoted scalar at the start of `text`; what follows the closing quote
/// is ignored (a comment, or stray text YAML would reject). `None` when never closed.
fn quoted(text: &str) -> Option<String> {
    let mut chars = text.chars();
    let quote = chars.next()?;
    let mut out = String::new();
    if quote == '\'' {
        let mut chars = chars.peekable();
        while let Some(c) = chars.next() {
            if c == '\'' {
                if chars.peek() == Some(&'\'') {
                    chars.next();
                    out.push('\'');
                } else {
                    return Some(out);
                }
            } else {
                out.push(c);
            }
        }
        return None;
    }
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                '0' => out.push('\0'),
                'x' => out.push(hex_char(&mut chars, 2)),
                'u' => out.push(hex_char(&mut chars, 4)),
                'U' => out.push(hex_char(&mut chars, 8)),
                other => out.push(other), // `\"`, `\\`, `\/` and anything unknown
            },
            c => out.push(c),
        }
    }
    None
}

/// Reads up to `digits` hex digits; an invalid escape becomes U+FFFD rather than an error.
fn hex_char(chars: &mut std::str::Chars<'_>, digits: usize) -> char {
    let mut value: u32 = 0;
    for _ in 0..digits {
        let Some(digit) = chars.clone().next().and_then(|c| c.to_digit(16)) else {
            return char::REPLACEMENT_CHARACTER;
        };
        chars.next();
        value = value * 16 + digit;
    }
    char::from_u32(value).unwrap_or(char::REPLACEMENT_CHARACTER)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `text` and compares its fields (or error) with `expect`.
    fn check(text: &str, expect: Result<&[(&str, &str)], FrontMatterError>) {
        let got = parse_front_matter(text);
        match (got, expect) {
            (Ok(fm), Ok(fields)) => {
                let got: Vec<(&str, &str)> = fm.fields().collect();
                assert_eq!(got, fields, "input: {text:?}");
            }
            (got, expect) => assert_eq!(got.map(|_| ()), expect.map(|_| ()), "input: {text:?}"),
        }
    }

    #[test]
    fn plain_fields() {
        check(
            "---\nname: pdf-tools\ndescription: Reads PDFs.\n---\nbody",
            Ok(&[("name", "pdf-tools"), ("description", "Reads PDFs.")]),
        );
        check("---\r\nname: a\r\n---\r\n", Ok(&[("name", "a")]));
        check("\u{feff}---\nname: a\n...\n", Ok(&[("name", "a")]));
        check("---\n---\n", Ok(&[]));
        check(
            "---\nurl: http://x:80/a # note\n---",
            Ok(&[("url", "http://x:80/a")]),
        );
        check("---\n# comment\n\nname: a\n---", Ok(&[("name", "a")]));
    }

    #[test]
    fn folded_and_block_values() {
        check(
            "---\ndescription: first\n  second\n\n  third\nname: x\n---",
            Ok(&[("description", "first second third"), ("name", "x")]),
        );
        check(
            "---\ndescription: |\n  line one\n  line two\n---",
            Ok(&[("description", "line one\nline two")]),
        );
        check(
            "---\ndescription: >-\n  folded\n  text\n\n  para\n---",
            Ok(&[("description", "folded text\npara")]),
        );
        check(
            "---\nmetadata:\n  a: b\n  c: d\nname: n\n---",
            Ok(&[("metadata", ""), ("name", "n")]),
        );
        check("---\ntags:\n  - a\n  - b\n---", Ok(&[("tags", "")]));
    }

    #[test]
    fn quoted_values() {
        check(
            "---\nname: \"a \\\"b\\\" \\u00e9\"\n---",
            Ok(&[("name", "a \"b\" é")]),
        );
        check("---\nname: 'it''s' # c\n---", Ok(&[("name", "it's")]));
        check(
            "---\ndescription: \"multi\n  line\"\n---",
            Ok(&[("description", "multi line")]),
        );
        check("---\n\"name\": x\n---", Ok(&[("name", "x")]));
    }

    #[test]
    fn errors() {
        check("name: a\n", Err(FrontMatterError::Missing));
        check("", Err(FrontMatterError::Missing));
        check("---\nname: a\n", Err(FrontMatterError::Unterminated));
        check(
            "---\nname a\n---",
            Err(FrontMatterError::ExpectedKey { line: 2 }),
        );
        check(
            "---\n  name: a\n---",
            Err(FrontMatterError::ExpectedKey { line: 2 }),
        );
        check(
            "---\n- a\n---",
            Err(FrontMatterError::ExpectedKey { line: 2 }),
        );
        check(
            "---\nname: a\nname: b\n---",
            Err(FrontMatterError::DuplicateKey {
                line: 3,
                key: "name".into(),
            }),
        );
        check(
            "---\nname: \"open\n---",
            Err(FrontMatterError::UnterminatedQuote { line: 2 }),
        );
        check("---\nname: \"bad \\", Err(FrontMatterError::Unterminated));
    }

    #[test]
    fn odd_escapes_do_not_panic() {
        check("---\nname: \"\\u12\"\n---", Ok(&[("name", "\u{fffd}")]));
        check("---\nname: \"\\x\"\n---", Ok(&[("name", "\u{fffd}")]));
        check(
            "---\nname: \"\\UFFFFFFFF\"\n---",
            Ok(&[("name", "\u{fffd}")]),
        );
    }
}
