//! The deployment's secrets in its database (`deployment_secrets`): today the key of a
//! call's arguments' digest, 32 random bytes created by whichever replica opens the store
//! first, so every replica computes the same keyed digest of a call's arguments (the one a
//! repeated `call_id` is compared by, and the audit log keeps) and short arguments cannot
//! be recovered from it by guessing.
//!
//! Must never: print a key (`Debug` hides it), or let a replica use a key another does not.

use std::fmt;

use chrono::Utc;
use diesel::prelude::*;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::db::{PooledConn, on_backend};
use crate::error::StoreError;
use crate::schema::deployment_secrets;
use crate::sql_types::DbTime;

/// `deployment_secrets.name` of the arguments' digest key.
const DIGEST_KEY_NAME: &str = "tool_call_arguments_digest";
/// Length of the digest key.
const DIGEST_KEY_BYTES: usize = 32;

/// The key of the arguments' digest. `Debug` never shows it.
pub(crate) struct DigestKey([u8; DIGEST_KEY_BYTES]);

impl fmt::Debug for DigestKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DigestKey(<redacted>)")
    }
}

impl DigestKey {
    /// HMAC-SHA256 of `text` under the key, lower-case hex (64 characters).
    pub(crate) fn hex_digest(&self, text: &str) -> String {
        use fmt::Write;
        // HMAC takes a key of any length: this cannot fail.
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("an HMAC key of any length");
        mac.update(text.as_bytes());
        mac.finalize()
            .into_bytes()
            .iter()
            .fold(String::with_capacity(64), |mut hex, byte| {
                let _ = write!(hex, "{byte:02x}");
                hex
            })
    }
}

/// The deployment's digest key, created first if no replica has yet. Two statements, each
/// committed on its own: of replicas opening together one insert wins and all read it.
pub(crate) fn load_digest_key(conn: &mut PooledConn) -> Result<DigestKey, StoreError> {
    let mut fresh = [0u8; DIGEST_KEY_BYTES];
    getrandom::fill(&mut fresh)
        .map_err(|e| StoreError::Unavailable(format!("no randomness for the digest key: {e}")))?;
    conn.single_statement(|tx| {
        let insert = diesel::insert_into(deployment_secrets::table)
            .values((
                deployment_secrets::name.eq(DIGEST_KEY_NAME),
                deployment_secrets::value.eq(&fresh[..]),
                deployment_secrets::created_at.eq(DbTime(Utc::now())),
            ))
            .on_conflict_do_nothing();
        on_backend!(tx, |c| insert.execute(c))?;
        Ok(())
    })?;
    let stored: Vec<u8> = conn.single_statement(|tx| {
        let query = deployment_secrets::table
            .find(DIGEST_KEY_NAME)
            .select(deployment_secrets::value);
        Ok(on_backend!(tx, |c| query.first(c))?)
    })?;
    let key = <[u8; DIGEST_KEY_BYTES]>::try_from(stored.as_slice()).map_err(|_| {
        StoreError::Corrupt(format!(
            "deployment secret {DIGEST_KEY_NAME}: {} bytes, not {DIGEST_KEY_BYTES}",
            stored.len()
        ))
    })?;
    Ok(DigestKey(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_shows_nowhere_and_digests_are_keyed_hex() {
        let key = DigestKey([7; DIGEST_KEY_BYTES]);
        assert_eq!(format!("{key:?}"), "DigestKey(<redacted>)");
        let digest = key.hex_digest("{}");
        assert_eq!(digest.len(), 64);
        assert!(
            digest
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        );
        assert_ne!(digest, DigestKey([8; DIGEST_KEY_BYTES]).hex_digest("{}"));
        assert_eq!(digest, key.hex_digest("{}"));
    }
}
