//! Agent bearer tokens: `<agent id>.<32 random bytes, base64url>`. Only the sha256 of a
//! token is stored; verification compares digests in constant time.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::StoreError;
use crate::ids::AgentId;

/// Random bytes in a token's secret part.
const SECRET_BYTES: usize = 32;

/// A freshly issued bearer token. Shown once; `Debug` never prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct AgentToken(String);

impl AgentToken {
    /// Issues a new random token for `agent`.
    pub(crate) fn issue(agent: AgentId) -> Result<Self, StoreError> {
        let mut secret = [0u8; SECRET_BYTES];
        getrandom::fill(&mut secret)
            .map_err(|e| StoreError::Unavailable(format!("no randomness for a token: {e}")))?;
        Ok(Self(format!("{agent}.{}", URL_SAFE_NO_PAD.encode(secret))))
    }

    /// The token text, to hand to the agent (e.g. `CTXSYNC_AGENT_TOKEN`).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The token text, consuming the token.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Debug for AgentToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AgentToken([redacted])")
    }
}

/// The SHA-256 of a token, as `workspace_agents.token_hash` holds it. Compared in
/// constant time; `Debug` prints no byte of it.
#[derive(Clone, Copy)]
pub struct TokenDigest([u8; 32]);

impl TokenDigest {
    /// The digest of `token`.
    pub fn of(token: &str) -> Self {
        Self(Sha256::digest(token.as_bytes()).into())
    }

    /// True when `self` equals `other`, compared in constant time.
    pub fn matches(&self, other: &Self) -> bool {
        digest_matches(&self.0, &other.0)
    }

    /// True when `self` equals the stored bytes, compared in constant time.
    pub(crate) fn matches_stored(&self, stored: &[u8]) -> bool {
        digest_matches(&self.0, stored)
    }

    pub(crate) fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for TokenDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenDigest([redacted])")
    }
}

/// A bearer token as a caller presented it: the agent it claims and its digest. The claim
/// means nothing until the digest matches the agent's stored one
/// ([`Store::authenticate_presented`](crate::Store::authenticate_presented)).
#[derive(Clone, Copy, Debug)]
pub struct PresentedToken {
    agent: AgentId,
    digest: TokenDigest,
}

impl PresentedToken {
    /// Parses `token` (`<agent id>.<secret>`) and hashes it once; `InvalidToken` when it
    /// is malformed.
    pub fn parse(token: &str) -> Result<Self, StoreError> {
        Ok(Self {
            agent: claimed_agent(token)?,
            digest: TokenDigest::of(token),
        })
    }

    /// The agent the token claims to belong to.
    pub fn claimed_agent(&self) -> AgentId {
        self.agent
    }

    /// The token's digest.
    pub fn digest(&self) -> TokenDigest {
        self.digest
    }
}

/// The digest stored in `workspace_agents.token_hash`.
pub(crate) fn digest(token: &str) -> [u8; 32] {
    *TokenDigest::of(token).as_bytes()
}

/// The agent a token claims to belong to, or `InvalidToken` when it is malformed. The
/// claim means nothing until its [`digest`] matches the stored one ([`digest_matches`]).
pub(crate) fn claimed_agent(token: &str) -> Result<AgentId, StoreError> {
    let (id, secret) = token.split_once('.').ok_or(StoreError::InvalidToken)?;
    let decoded = URL_SAFE_NO_PAD
        .decode(secret)
        .map_err(|_| StoreError::InvalidToken)?;
    if decoded.len() != SECRET_BYTES {
        return Err(StoreError::InvalidToken);
    }
    id.parse().map_err(|_| StoreError::InvalidToken)
}

/// True when `digest` (a token's [`digest`]) equals `stored`, compared in constant time.
pub(crate) fn digest_matches(digest: &[u8; 32], stored: &[u8]) -> bool {
    digest.as_slice().ct_eq(stored).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// True when `token` hashes to `stored`, as authentication checks it.
    fn verify(token: &str, stored: &[u8]) -> bool {
        digest_matches(&digest(token), stored)
    }

    #[test]
    fn issued_tokens_verify_and_name_their_agent() {
        let agent = AgentId::new_random();
        let token = AgentToken::issue(agent).unwrap();
        let stored = digest(token.expose());
        assert_eq!(claimed_agent(token.expose()).unwrap(), agent);
        assert!(verify(token.expose(), &stored));
        assert_ne!(
            token,
            AgentToken::issue(agent).unwrap(),
            "tokens must be random"
        );
        assert_eq!(format!("{token:?}"), "AgentToken([redacted])");
    }

    #[test]
    fn tampered_or_malformed_tokens_are_refused() {
        let agent = AgentId::new_random();
        let token = AgentToken::issue(agent).unwrap();
        let stored = digest(token.expose());
        let mut tampered = token.expose().to_owned();
        let last = tampered.pop().unwrap();
        tampered.push(if last == 'A' { 'B' } else { 'A' });
        assert!(!verify(&tampered, &stored));
        assert!(!verify("", &stored));
        assert!(
            !verify(token.expose(), &stored[..31]),
            "short digest matched"
        );
        for malformed in [
            "",
            "no-dot",
            "not-a-uuid.AAAA",
            &format!("{agent}."),
            &format!("{agent}.!!!"),
            &format!("{agent}.QUJD"), // valid base64, too short
        ] {
            assert!(
                matches!(claimed_agent(malformed), Err(StoreError::InvalidToken)),
                "{malformed:?}"
            );
        }
    }
}
