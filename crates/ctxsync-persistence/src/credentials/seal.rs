//! Sealing a secret for one row: ChaCha20-Poly1305 under the keyring's current key, with a
//! fresh random 96-bit nonce each time, and associated data that names what the secret is
//! (a purpose label), the key and the row it belongs to. A ciphertext copied to another
//! row, or relabelled with another key id, fails to open.
//!
//! Must never: reuse a nonce deliberately (each seal draws its own), or open a ciphertext
//! whose tag does not verify.

use chacha20poly1305::aead::{Aead, Payload};
use chacha20poly1305::{ChaCha20Poly1305, KeyInit, Nonce};

use super::keys::Keyring;
use crate::error::StoreError;

/// Bytes of a nonce.
pub(super) const NONCE_BYTES: usize = 12;

/// What a sealed secret is; its label starts the associated data, so a secret of one kind
/// never opens as another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// The secret part of a `mcp_credentials` row; the row is (agent id, server URL,
    /// issuer).
    Credential,
    /// The client secret of a `mcp_oauth_clients` row; the row is (issuer, redirect URI,
    /// client id).
    OAuthClientSecret,
    /// The pending state (and code) of a `mcp_sign_ins` row; the row is its id.
    SignIn,
}

impl Purpose {
    fn label(self) -> &'static [u8] {
        match self {
            Self::Credential => b"ctxsync mcp_credentials v1",
            Self::OAuthClientSecret => b"ctxsync mcp_oauth_clients.client_secret v1",
            Self::SignIn => b"ctxsync mcp_sign_ins v1",
        }
    }
}

/// A sealed secret as its columns hold it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Sealed {
    /// The [`super::keys::KeyId`] of the key that sealed it, in hex.
    pub(crate) key_id: String,
    pub(crate) nonce: Vec<u8>,
    /// The ciphertext with its 16-byte tag at the end.
    pub(crate) ciphertext: Vec<u8>,
}

/// Why a sealed secret did not open.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum OpenError {
    /// The keyring holds no key of the stored key id.
    UnknownKey,
    /// The key is there but the tag does not verify: another key of the same id (never in
    /// practice), or the row was altered or its ciphertext came from elsewhere.
    Rejected,
}

/// Seals `plaintext` for `row` under the keyring's current key.
pub(crate) fn seal(
    keyring: &Keyring,
    purpose: Purpose,
    row: &[&str],
    plaintext: &[u8],
) -> Result<Sealed, StoreError> {
    let key = keyring.current();
    let key_id = key.id().to_string();
    let mut nonce = [0u8; NONCE_BYTES];
    getrandom::fill(&mut nonce)
        .map_err(|e| StoreError::Unavailable(format!("no randomness for a nonce: {e}")))?;
    let aad = associated_data(purpose, &key_id, row);
    let ciphertext = ChaCha20Poly1305::new(key.bytes().into())
        .encrypt(
            &Nonce::from(nonce),
            Payload {
                msg: plaintext,
                aad: &aad,
            },
        )
        // Only a message beyond 256 GiB can fail; ours are capped far below.
        .map_err(|_| StoreError::InvalidInput("a secret too long to seal".into()))?;
    Ok(Sealed {
        key_id,
        nonce: nonce.to_vec(),
        ciphertext,
    })
}

/// Opens what [`seal`] sealed for the same purpose and row.
pub(crate) fn open(
    keyring: &Keyring,
    purpose: Purpose,
    row: &[&str],
    sealed: &Sealed,
) -> Result<Vec<u8>, OpenError> {
    let key = keyring.find(&sealed.key_id).ok_or(OpenError::UnknownKey)?;
    let nonce =
        <[u8; NONCE_BYTES]>::try_from(sealed.nonce.as_slice()).map_err(|_| OpenError::Rejected)?;
    let aad = associated_data(purpose, &sealed.key_id, row);
    ChaCha20Poly1305::new(key.bytes().into())
        .decrypt(
            &Nonce::from(nonce),
            Payload {
                msg: &sealed.ciphertext,
                aad: &aad,
            },
        )
        .map_err(|_| OpenError::Rejected)
}

/// The purpose label, then the key id and each of the row's fields, each after its
/// length (4 bytes, big-endian), so no two different rows share associated data.
fn associated_data(purpose: Purpose, key_id: &str, row: &[&str]) -> Vec<u8> {
    let mut aad = purpose.label().to_vec();
    for field in std::iter::once(key_id).chain(row.iter().copied()) {
        // Fields are capped far below 4 GiB before anything is sealed.
        let len = u32::try_from(field.len()).unwrap_or(u32::MAX);
        aad.extend_from_slice(&len.to_be_bytes());
        aad.extend_from_slice(field.as_bytes());
    }
    aad
}

#[cfg(test)]
mod tests {
    use super::super::keys::{SECRETS_KEY_BYTES, SecretsKey};
    use super::*;

    fn ring(byte: u8) -> Keyring {
        Keyring::new(SecretsKey::from_bytes([byte; SECRETS_KEY_BYTES]))
    }

    const ROW: &[&str] = &["agent", "https://mcp.example/", "https://issuer.example/"];

    #[test]
    fn a_sealed_secret_opens_only_for_its_row_purpose_and_key() {
        let keys = ring(1);
        let sealed = seal(&keys, Purpose::Credential, ROW, b"canary").unwrap();
        assert_eq!(sealed.nonce.len(), NONCE_BYTES);
        assert_eq!(sealed.ciphertext.len(), b"canary".len() + 16);
        assert_eq!(sealed.key_id, keys.current().id().to_string());
        assert_eq!(
            open(&keys, Purpose::Credential, ROW, &sealed).unwrap(),
            b"canary"
        );

        let check = |keys: &Keyring, purpose, row: &[&str], sealed: &Sealed, expect| {
            assert_eq!(open(keys, purpose, row, sealed), Err(expect), "{row:?}");
        };
        let other_row = ["agent", "https://mcp.example/", "https://other.example/"];
        check(
            &keys,
            Purpose::Credential,
            &other_row,
            &sealed,
            OpenError::Rejected,
        );
        // Moving a boundary between fields changes the associated data too.
        let shifted = ["agenth", "ttps://mcp.example/", "https://issuer.example/"];
        check(
            &keys,
            Purpose::Credential,
            &shifted,
            &sealed,
            OpenError::Rejected,
        );
        for other in [Purpose::OAuthClientSecret, Purpose::SignIn] {
            check(&keys, other, ROW, &sealed, OpenError::Rejected);
        }
        check(
            &ring(2),
            Purpose::Credential,
            ROW,
            &sealed,
            OpenError::UnknownKey,
        );
        let mut tampered = sealed.clone();
        tampered.ciphertext[0] ^= 1;
        check(
            &keys,
            Purpose::Credential,
            ROW,
            &tampered,
            OpenError::Rejected,
        );
        let relabelled = Sealed {
            key_id: ring(2).current().id().to_string(),
            ..sealed.clone()
        };
        let both = ring(1).with_previous(SecretsKey::from_bytes([2; SECRETS_KEY_BYTES]));
        check(
            &both,
            Purpose::Credential,
            ROW,
            &relabelled,
            OpenError::Rejected,
        );
    }

    #[test]
    fn every_seal_draws_a_fresh_nonce() {
        let keys = ring(1);
        let a = seal(&keys, Purpose::Credential, ROW, b"same").unwrap();
        let b = seal(&keys, Purpose::Credential, ROW, b"same").unwrap();
        assert_ne!(a.nonce, b.nonce);
        assert_ne!(a.ciphertext, b.ciphertext);
    }

    #[test]
    fn an_older_key_of_the_ring_opens_what_it_sealed() {
        let old = ring(1);
        let sealed = seal(&old, Purpose::Credential, ROW, b"kept").unwrap();
        let rotated = ring(2).with_previous(SecretsKey::from_bytes([1; SECRETS_KEY_BYTES]));
        assert_eq!(
            open(&rotated, Purpose::Credential, ROW, &sealed).unwrap(),
            b"kept"
        );
        let resealed = seal(&rotated, Purpose::Credential, ROW, b"kept").unwrap();
        assert_eq!(resealed.key_id, rotated.current().id().to_string());
        assert_eq!(
            open(&ring(2), Purpose::Credential, ROW, &resealed).unwrap(),
            b"kept"
        );
    }
}
