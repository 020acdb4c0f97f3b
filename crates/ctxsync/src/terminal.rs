//! Text from MCP servers and workspaces made safe to print on a terminal: control
//! characters and escape sequences (which could move the cursor, retitle the window, hide
//! text or write to the clipboard) are removed, newlines and tabs kept.

use std::borrow::Cow;
use std::fmt::Write as _;

const ESC: char = '\u{1b}';
const BEL: char = '\u{7}';
/// C1 introducers, the 8-bit forms of `ESC [`, `ESC ]`, `ESC P`, `ESC X`, `ESC ^`, `ESC _`.
const C1_CSI: char = '\u{9b}';
const C1_OSC: char = '\u{9d}';
const C1_STRINGS: [char; 4] = ['\u{90}', '\u{98}', '\u{9e}', '\u{9f}'];
/// The 8-bit string terminator.
const C1_ST: char = '\u{9c}';

/// `text` without control characters (C0 but newline and tab, DEL, C1), escape sequences
/// (CSI such as colours and cursor moves, OSC such as titles, hyperlinks and clipboard
/// writes, DCS/SOS/PM/APC strings, two- and three-character escapes) and bidirectional
/// overrides, which could make a line read differently from what it holds.
pub fn for_terminal(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ESC => match chars.peek().copied() {
                Some('[') => {
                    chars.next();
                    skip_csi(&mut chars);
                }
                Some(']' | 'P' | 'X' | '^' | '_') => {
                    chars.next();
                    skip_string(&mut chars);
                }
                // nF escapes (character sets and the like): intermediates, then a final.
                Some(' '..='/') => {
                    while chars.next_if(|c| matches!(c, ' '..='/')).is_some() {}
                    chars.next_if(|c| matches!(c, '0'..='~'));
                }
                // Two-character escapes: ESC 7, ESC c (reset), ESC M, …
                Some('0'..='~') => {
                    chars.next();
                }
                _ => {}
            },
            C1_CSI => skip_csi(&mut chars),
            C1_OSC => skip_string(&mut chars),
            c if C1_STRINGS.contains(&c) => skip_string(&mut chars),
            c if is_unsafe(c) => {}
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// JSON text with every character [`for_terminal`] would remove written as a `\uXXXX`
/// escape instead: the same JSON value, safe to print. (serde_json already escapes C0
/// characters, but not DEL, C1 or bidirectional overrides.)
pub fn json_for_terminal(json: &str) -> Cow<'_, str> {
    if !json.chars().any(is_unsafe) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if is_unsafe(c) {
            // Outside strings JSON holds none of these, so each one is inside a string.
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

fn is_unsafe(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Skips a CSI sequence's parameters and intermediates and its final byte. A character
/// that cannot belong to it ends it unconsumed, so no visible text is eaten.
fn skip_csi(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while chars
        .next_if(|c| matches!(c, '0'..='?' | ' '..='/'))
        .is_some()
    {}
    chars.next_if(|c| matches!(c, '@'..='~'));
}

/// Skips an OSC, DCS, SOS, PM or APC string up to its terminator (ST as `ESC \` or the
/// C1 byte, or BEL, which xterm accepts for OSC), or to the end of the text.
fn skip_string(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while let Some(c) = chars.next() {
        match c {
            BEL | C1_ST => return,
            ESC => {
                chars.next_if_eq(&'\\');
                return;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(input: &str, expect: &str) {
        assert_eq!(for_terminal(input), expect, "{input:?}");
    }

    #[test]
    fn plain_text_is_untouched() {
        check("", "");
        check("fs: 3 tools — ok ✓", "fs: 3 tools — ok ✓");
        check("line one\n\tline two", "line one\n\tline two");
        assert!(matches!(for_terminal("plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn csi_sequences_are_removed() {
        check("\x1b[31mred\x1b[0m", "red");
        check("\x1b[2J\x1b[Hcleared", "cleared");
        check("\x1b[38;2;255;0;0mtrue colour\x1b[m", "true colour");
        check("up\x1b[1Aover", "upover");
        check("\x1b[?25lhidden cursor", "hidden cursor");
        check("8-bit \u{9b}31mcsi", "8-bit csi");
        // An unfinished sequence eats no visible text after it.
        check("cut \x1b[12", "cut ");
        check("\x1b[1\nnext", "\nnext");
    }

    #[test]
    fn osc_and_string_sequences_are_removed() {
        check("\x1b]0;owned title\x07name", "name");
        check("\x1b]0;owned title\x1b\\name", "name");
        check(
            "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\",
            "click",
        );
        check("\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x07tool", "tool");
        check("\x1bPq#0;2;0;0;0\x1b\\sixel", "sixel");
        check("\x1b_apc payload\x1b\\ok", "ok");
        check("\u{9d}0;title\u{9c}ok", "ok");
        check("unterminated \x1b]0;title", "unterminated ");
    }

    #[test]
    fn other_escapes_and_controls_are_removed() {
        check("\x1bcreset", "reset");
        check("\x1b(0line drawing\x1b(B", "line drawing");
        check("\x1b7saved\x1b8", "saved");
        check("trailing \x1b", "trailing ");
        check(
            "bell\x07 back\x08space\rreturn\x7fdel\x00nul",
            "bell backspacereturndelnul",
        );
        check("c1 \u{85}next \u{9c}st", "c1 next st");
        check("admin\u{202e}txt.exe", "admintxt.exe");
        check("\u{2066}isolate\u{2069}", "isolate");
    }

    #[test]
    fn json_keeps_its_value_and_loses_its_escapes() {
        let value = serde_json::json!({"name": "a\u{9b}31m\u{7f}\u{202e}b\x1b[0m"});
        let json = serde_json::to_string(&value).unwrap();
        let safe = json_for_terminal(&json);
        assert!(!safe.chars().any(is_unsafe), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, value);
        assert!(matches!(json_for_terminal("{\"a\":1}"), Cow::Borrowed(_)));
    }
}
