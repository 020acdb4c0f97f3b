//! What a sign-in keeps secret and how: the agent's pending state, and then the code,
//! sealed for the row's id ([`Purpose::SignIn`]); the OAuth `state` and the browser
//! binding only as their sha256, so the table cannot answer a callback by itself.
//!
//! Must never: store a state, binding, code or pending state in plaintext, or put one in
//! an error.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::credentials::seal::{self, OpenError, Purpose, Sealed};
use crate::credentials::{
    Keyring, MAX_SEALED_BYTES, SecretString, TAG_BYTES, check_len, unreadable,
};
use crate::error::StoreError;
use crate::ids::SignInId;

/// Longest `pending` the agent may leave, and longest code (the wire's bound for both).
pub(super) const MAX_SECRET_BYTES: usize = 16 * 1024;

/// The sealed plaintext of a sign-in under way.
#[derive(Serialize, Deserialize)]
struct Plaintext {
    pending: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    iss: Option<String>,
}

/// What a started sign-in keeps sealed: the pending state, and once the browser is back,
/// the code and `iss`. `Debug` shows neither secret.
#[derive(Debug)]
pub(super) struct Kept {
    pub(super) pending: SecretString,
    pub(super) code: Option<SecretString>,
    pub(super) iss: Option<String>,
}

/// Seals `kept` for sign-in `id` under the keyring's current key.
pub(super) fn seal_kept(
    keyring: &Keyring,
    id: SignInId,
    kept: &Kept,
) -> Result<Sealed, StoreError> {
    check_len("pending", kept.pending.expose(), 1..=MAX_SECRET_BYTES)?;
    let json = serde_json::to_vec(&Plaintext {
        pending: kept.pending.expose().to_owned(),
        code: kept.code.as_ref().map(|code| code.expose().to_owned()),
        iss: kept.iss.clone(),
    })
    .expect("strings serialize");
    if json.len() + TAG_BYTES > MAX_SEALED_BYTES {
        // Only escapes can swell bounded fields this far; the message shows no byte of them.
        return Err(StoreError::InvalidInput(format!(
            "a sign-in's pending state and code take {} bytes sealed; at most {} fit",
            json.len() + TAG_BYTES,
            MAX_SEALED_BYTES
        )));
    }
    seal::seal(keyring, Purpose::SignIn, &[&id.to_string()], &json)
}

/// Opens what [`seal_kept`] sealed for sign-in `id`.
pub(super) fn open_kept(
    keyring: &Keyring,
    id: SignInId,
    sealed: &Sealed,
) -> Result<Kept, StoreError> {
    let subject = || format!("sign-in {id}");
    let json = seal::open(keyring, Purpose::SignIn, &[&id.to_string()], sealed)
        .map_err(|e: OpenError| unreadable(subject(), keyring, sealed, e))?;
    let parsed: Plaintext = serde_json::from_slice(&json).map_err(|e| {
        // serde_json's message names a position and a kind, never the input.
        StoreError::Corrupt(format!(
            "the sealed state of {} is not what was sealed: {e}",
            subject()
        ))
    })?;
    Ok(Kept {
        pending: parsed.pending.into(),
        code: parsed.code.map(SecretString::from),
        iss: parsed.iss,
    })
}

/// The sealed columns of a row, when it has them all.
pub(super) fn sealed_of(
    key_id: Option<String>,
    nonce: Option<Vec<u8>>,
    ciphertext: Option<Vec<u8>>,
) -> Option<Sealed> {
    Some(Sealed {
        key_id: key_id?,
        nonce: nonce?,
        ciphertext: ciphertext?,
    })
}

/// sha256 of `text`, in lower-case hex: how a state or a browser binding is stored.
pub(super) fn hash_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// Whether `presented` is the binding whose hash is `stored`, in constant time.
pub(super) fn same_browser(stored: &str, presented: Option<&str>) -> bool {
    presented.is_some_and(|presented| {
        hash_hex(presented)
            .as_bytes()
            .ct_eq(stored.as_bytes())
            .into()
    })
}

/// `text` on one line without control characters (a line break or tab becomes a space,
/// others go), trimmed and cut to at most `max` bytes at a character boundary.
pub(super) fn bounded_text(text: &str, max: usize) -> String {
    let mut out = String::new();
    let chars = text
        .chars()
        .filter_map(|ch| match ch {
            '\n' | '\r' | '\t' => Some(' '),
            ch if ch.is_control() => None,
            ch => Some(ch),
        })
        .skip_while(|ch| ch.is_whitespace());
    for ch in chars {
        if out.len() + ch.len_utf8() > max {
            break;
        }
        out.push(ch);
    }
    out.truncate(out.trim_end().len());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::SecretsKey;

    fn ring(byte: u8) -> Keyring {
        Keyring::new(SecretsKey::from_bytes([byte; 32]))
    }

    #[test]
    fn kept_state_opens_only_for_its_sign_in() {
        let keys = ring(1);
        let id = SignInId::new_random();
        let kept = Kept {
            pending: "canary-pending".into(),
            code: Some("canary-code".into()),
            iss: Some("https://as.example".into()),
        };
        let sealed = seal_kept(&keys, id, &kept).unwrap();
        let opened = open_kept(&keys, id, &sealed).unwrap();
        assert_eq!(opened.pending.expose(), "canary-pending");
        assert_eq!(opened.code.unwrap().expose(), "canary-code");
        assert_eq!(opened.iss.as_deref(), Some("https://as.example"));

        let error = open_kept(&keys, SignInId::new_random(), &sealed).unwrap_err();
        assert!(
            matches!(error, StoreError::CredentialsUnreadable { .. }),
            "{error:?}"
        );
        let error = open_kept(&ring(2), id, &sealed).unwrap_err().to_string();
        assert!(error.contains(&format!("sign-in {id}")), "{error}");
        assert!(!error.contains("canary"), "{error}");
    }

    #[test]
    fn pending_state_is_bounded_without_showing_it() {
        let keys = ring(1);
        let kept = |pending: String| Kept {
            pending: pending.into(),
            code: None,
            iss: None,
        };
        assert!(seal_kept(&keys, SignInId::new_random(), &kept("p".into())).is_ok());
        for pending in [String::new(), "x".repeat(MAX_SECRET_BYTES + 1)] {
            let error = seal_kept(&keys, SignInId::new_random(), &kept(pending)).unwrap_err();
            assert!(matches!(error, StoreError::InvalidInput(_)), "{error:?}");
            assert!(!error.to_string().contains("xxxx"), "{error}");
        }
        // Control characters swell sixfold as JSON escapes: refused, not truncated.
        let escaped = kept("\u{1}".repeat(MAX_SECRET_BYTES));
        let error = seal_kept(&keys, SignInId::new_random(), &escaped).unwrap_err();
        assert!(error.to_string().contains("at most 65536 fit"), "{error}");
    }

    #[test]
    fn hashes_are_lower_hex_and_browsers_compare_by_hash() {
        let hash = hash_hex("abc");
        assert_eq!(
            hash,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(same_browser(&hash, Some("abc")));
        assert!(!same_browser(&hash, Some("abd")));
        assert!(!same_browser(&hash, None));
    }

    #[test]
    fn text_is_cut_at_a_character_boundary_without_controls() {
        assert_eq!(bounded_text(" a\nb\u{7}c\t", 10), "a bc");
        assert_eq!(bounded_text("ééé", 5), "éé");
        assert_eq!(bounded_text("abc", 0), "");
    }
}
