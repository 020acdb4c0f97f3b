//! The forms a secret can take in a diagnostic besides its raw text: base64 (whole, or
//! inside a longer base64 blob), percent-encoded and JSON-escaped.

const BASE64_STANDARD: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const BASE64_URL_SAFE: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
/// A base64 fragment taken from inside a longer blob is only redacted from this length on:
/// shorter fragments are a few letters that ordinary words contain by chance.
const MIN_BASE64_FRAGMENT_CHARS: usize = 8;

/// Every form of `secret` worth looking for, the raw text first; no duplicates.
pub(super) fn forms(secret: &str) -> Vec<String> {
    let mut forms = vec![secret.to_owned()];
    let mut add = |form: String| {
        if !forms.contains(&form) {
            forms.push(form);
        }
    };
    for alphabet in [BASE64_STANDARD, BASE64_URL_SAFE] {
        let unpadded = base64_encode(secret.as_bytes(), alphabet);
        add(padded(&unpadded));
        add(unpadded);
        for fragment in base64_fragments(secret.as_bytes(), alphabet) {
            add(fragment);
        }
    }
    add(percent_encode(secret, Hex::Upper));
    add(percent_encode(secret, Hex::Lower));
    add(url::form_urlencoded::byte_serialize(secret.as_bytes()).collect());
    let json = json_escape(secret);
    add(json.replace('/', "\\/"));
    add(ascii_json(&json));
    add(json_escape(&json));
    add(json);
    forms
}

/// Standard base64 with padding (what HTTP Basic credentials use).
pub(super) fn base64(bytes: &[u8]) -> String {
    padded(&base64_encode(bytes, BASE64_STANDARD))
}

fn base64_encode(bytes: &[u8], alphabet: &[u8; 64]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let group = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        // One byte gives two characters, two give three, three give four.
        for i in 0..=chunk.len() {
            out.push(char::from(
                alphabet[((group >> (18 - 6 * i)) & 0x3f) as usize],
            ));
        }
    }
    out
}

fn padded(unpadded: &str) -> String {
    let mut out = unpadded.to_owned();
    while !out.len().is_multiple_of(4) {
        out.push('=');
    }
    out
}

/// The characters that encode `bytes` alone when they sit at byte offset 0, 1 or 2 of a
/// longer encoded blob: the characters that mix in neighbouring bits are left out.
fn base64_fragments(bytes: &[u8], alphabet: &[u8; 64]) -> Vec<String> {
    (0..3usize)
        .filter_map(|offset| {
            let mut shifted = vec![0u8; offset];
            shifted.extend_from_slice(bytes);
            let encoded = base64_encode(&shifted, alphabet);
            // Character i covers bits [6i, 6i + 6); the secret covers [8 offset, 8 len).
            let first = (8 * offset).div_ceil(6);
            let end = 8 * shifted.len() / 6;
            let fragment = encoded.get(first..end)?;
            (fragment.len() >= MIN_BASE64_FRAGMENT_CHARS).then(|| fragment.to_owned())
        })
        .collect()
}

/// Decodes standard or URL-safe base64, padded or not; `None` for anything else.
pub(super) fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    if text.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let value = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(value);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[derive(Clone, Copy)]
enum Hex {
    Upper,
    Lower,
}

/// RFC 3986 percent-encoding: everything but unreserved characters is escaped.
fn percent_encode(text: &str, hex: Hex) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            match hex {
                Hex::Upper => out.push_str(&format!("%{byte:02X}")),
                Hex::Lower => out.push_str(&format!("%{byte:02x}")),
            }
        }
    }
    out
}

/// Undoes percent-encoding; `None` when the result is not UTF-8.
pub(super) fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok())
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The text as it appears inside a JSON string (without the quotes).
fn json_escape(text: &str) -> String {
    let quoted = serde_json::Value::String(text.to_owned()).to_string();
    quoted[1..quoted.len() - 1].to_owned()
}

/// A JSON-escaped text with every non-ASCII character as `\uXXXX` (as Python writes it).
fn ascii_json(escaped: &str) -> String {
    let mut out = String::with_capacity(escaped.len());
    for c in escaped.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_and_matches_known_values() {
        for (text, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("alice:pw-9876", "YWxpY2U6cHctOTg3Ng=="),
        ] {
            assert_eq!(base64(text.as_bytes()), encoded);
            assert_eq!(base64_decode(encoded).as_deref(), Some(text.as_bytes()));
        }
        assert_eq!(base64_decode("not base64!"), None);
        assert_eq!(base64_decode("abcde"), None);
    }

    #[test]
    fn a_secret_inside_a_longer_blob_is_found_at_any_offset() {
        let secret = "s3cret-value-42";
        let all = forms(secret);
        for prefix in ["", "x", "xy", "xyz", "wxyz"] {
            let blob = base64(format!("{prefix}{secret}!tail").as_bytes());
            assert!(
                all.iter().any(|form| blob.contains(form.as_str())),
                "{prefix:?}: {blob} {all:?}"
            );
        }
    }

    #[test]
    fn percent_and_json_forms() {
        let all = forms("p@ss w/rd\"é\n");
        for expect in [
            "p%40ss%20w%2Frd%22%C3%A9%0A",
            "p%40ss%20w%2frd%22%c3%a9%0a",
            "p%40ss+w%2Frd%22%C3%A9%0A",
            "p@ss w/rd\\\"é\\n",
            "p@ss w\\/rd\\\"é\\n",
            "p@ss w/rd\\\"\\u00e9\\n",
            "p@ss w/rd\\\\\\\"é\\\\n",
        ] {
            assert!(all.iter().any(|f| f == expect), "{expect} not in {all:?}");
        }
        assert_eq!(percent_decode("a%40b%2"), Some("a@b%2".into()));
        assert_eq!(percent_decode("%ff"), None);
    }
}
