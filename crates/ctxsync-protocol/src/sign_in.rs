//! Sign-ins, the second kind of request the server routes to an agent: a person's OAuth
//! sign-in to one of its HTTP MCP servers, begun and finished by the agent (which makes
//! every OAuth request) on the call stream, and the credentials that travel both ways
//! afterwards (kept ones to a restarted agent, refreshed ones back). The messages join
//! [`ServerCall`](crate::tool_call::ServerCall) and
//! [`AgentCall`](crate::tool_call::AgentCall); their bounds are checked here.
//!
//! Must never: print a token, secret, code or verifier (`Debug` of every type here and of
//! the records it carries shows none).

use std::fmt;

use ctxsync_mcp_model::{SignInCredential, SignInStart};
use uuid::Uuid;

use crate::error::{Problem, WireError, bounded, required};
use crate::limits::MAX_ERROR_BYTES;
use crate::v1;

/// Longest authorization URL or redirect URI (an authorization URL carries its query);
/// a credential's server URL is at most [`MAX_SIGN_IN_NAME_BYTES`], as the control plane
/// keeps it.
pub const MAX_SIGN_IN_URL_BYTES: usize = 8192;
/// Longest token, code, client secret or `pending` text.
pub const MAX_SIGN_IN_SECRET_BYTES: usize = 16 * 1024;
/// Longest issuer, client id, account, token type or scope.
pub const MAX_SIGN_IN_NAME_BYTES: usize = 2048;
/// Most scopes one credential carries.
pub const MAX_SIGN_IN_SCOPES: usize = 64;
/// Longest account name (what the control plane keeps).
pub const MAX_SIGN_IN_ACCOUNT_BYTES: usize = 1024;
/// Longest scope list, space-separated (what the control plane keeps).
pub const MAX_SIGN_IN_SCOPES_BYTES: usize = 4096;
/// Longest server name (as on a call).
const MAX_SERVER_NAME_BYTES: usize = 1024;

/// The id the server gives a sign-in (a UUID); the agent's answer names it.
pub type SignInRequestId = Uuid;

/// Start a person's sign-in to the agent's HTTP server `server`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BeginSignIn {
    /// The sign-in's id.
    pub id: SignInRequestId,
    /// The MCP server's name as the agent reported it.
    pub server: String,
    /// Where the authorization server sends the person back.
    pub redirect_uri: String,
    /// The client id metadata document's URL, when the server has one.
    pub client_metadata_url: Option<String>,
}

/// Finish a sign-in with the code the person's browser brought back.
#[derive(Clone, PartialEq, Eq)]
pub struct ExchangeSignIn {
    /// The sign-in's id.
    pub id: SignInRequestId,
    /// The MCP server's name as the agent reported it.
    pub server: String,
    /// What the agent's start carried in `pending`, unchanged.
    pub pending: String,
    /// The authorization code.
    pub code: String,
    /// The callback's `iss` parameter (RFC 9207), when it had one.
    pub iss: Option<String>,
}

impl fmt::Debug for ExchangeSignIn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExchangeSignIn")
            .field("id", &self.id)
            .field("server", &self.server)
            .field("iss", &self.iss)
            .finish_non_exhaustive()
    }
}

/// A server's credential as it travels on the stream: kept (to the agent when its stream
/// opens; to the server after a refresh), or `None`: forget it. Checked from the
/// generated `v1::StoredSignIn`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredSignIn {
    /// The MCP server's name as the agent reports it.
    pub server: String,
    /// The credential, or `None` to forget the server's.
    pub credential: Option<SignInCredential>,
}

/// What became of a sign-in the server asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SignInOutcome {
    /// [`BeginSignIn`]'s answer: where the person signs in.
    Started(SignInStart),
    /// [`ExchangeSignIn`]'s answer: the credential, which the agent already uses.
    SignedIn(SignInCredential),
    /// Why either failed, in words (sanitized by the agent).
    Failed(String),
}

fn optional(field: &str, text: Option<&String>, max: usize) -> Result<(), WireError> {
    text.map_or(Ok(()), |text| bounded(field, text, max))
}

fn id(field: &str, text: &str) -> Result<SignInRequestId, WireError> {
    Uuid::parse_str(text).map_err(|_| WireError::new(field, Problem::Invalid("must be a UUID")))
}

// ---- wire → domain -------------------------------------------------------------------

impl TryFrom<v1::SignInBegin> for BeginSignIn {
    type Error = WireError;

    fn try_from(wire: v1::SignInBegin) -> Result<Self, WireError> {
        required("begin_sign_in.server", &wire.server, MAX_SERVER_NAME_BYTES)?;
        required(
            "begin_sign_in.redirect_uri",
            &wire.redirect_uri,
            MAX_SIGN_IN_URL_BYTES,
        )?;
        optional(
            "begin_sign_in.client_metadata_url",
            wire.client_metadata_url.as_ref(),
            MAX_SIGN_IN_URL_BYTES,
        )?;
        Ok(Self {
            id: id("begin_sign_in.id", &wire.id)?,
            server: wire.server,
            redirect_uri: wire.redirect_uri,
            client_metadata_url: wire.client_metadata_url,
        })
    }
}

impl TryFrom<v1::SignInExchange> for ExchangeSignIn {
    type Error = WireError;

    fn try_from(wire: v1::SignInExchange) -> Result<Self, WireError> {
        required(
            "exchange_sign_in.server",
            &wire.server,
            MAX_SERVER_NAME_BYTES,
        )?;
        required(
            "exchange_sign_in.pending",
            &wire.pending,
            MAX_SIGN_IN_SECRET_BYTES,
        )?;
        required(
            "exchange_sign_in.code",
            &wire.code,
            MAX_SIGN_IN_SECRET_BYTES,
        )?;
        optional(
            "exchange_sign_in.iss",
            wire.iss.as_ref(),
            MAX_SIGN_IN_NAME_BYTES,
        )?;
        Ok(Self {
            id: id("exchange_sign_in.id", &wire.id)?,
            server: wire.server,
            pending: wire.pending,
            code: wire.code,
            iss: wire.iss,
        })
    }
}

/// A credential from the wire, every field bounded.
pub(crate) fn credential(
    field: &str,
    wire: v1::SignInCredential,
) -> Result<SignInCredential, WireError> {
    let at = |name: &str| format!("{field}.{name}");
    required(&at("server_url"), &wire.server_url, MAX_SIGN_IN_NAME_BYTES)?;
    required(&at("issuer"), &wire.issuer, MAX_SIGN_IN_NAME_BYTES)?;
    required(&at("client_id"), &wire.client_id, MAX_SIGN_IN_NAME_BYTES)?;
    optional(
        &at("client_secret"),
        wire.client_secret.as_ref(),
        MAX_SIGN_IN_SECRET_BYTES,
    )?;
    required(
        &at("access_token"),
        &wire.access_token,
        MAX_SIGN_IN_SECRET_BYTES,
    )?;
    optional(
        &at("refresh_token"),
        wire.refresh_token.as_ref(),
        MAX_SIGN_IN_SECRET_BYTES,
    )?;
    required(&at("token_type"), &wire.token_type, MAX_SIGN_IN_NAME_BYTES)?;
    optional(
        &at("account"),
        wire.account.as_ref(),
        MAX_SIGN_IN_ACCOUNT_BYTES,
    )?;
    if wire.scopes.len() > MAX_SIGN_IN_SCOPES {
        return Err(WireError::new(
            at("scopes"),
            Problem::TooMany {
                count: wire.scopes.len(),
                max: MAX_SIGN_IN_SCOPES,
            },
        ));
    }
    for scope in &wire.scopes {
        required(&at("scopes"), scope, MAX_SIGN_IN_NAME_BYTES)?;
    }
    bounded(
        &at("scopes"),
        &wire.scopes.join(" "),
        MAX_SIGN_IN_SCOPES_BYTES,
    )?;
    Ok(SignInCredential {
        server_url: wire.server_url,
        issuer: wire.issuer,
        client_id: wire.client_id,
        client_secret: wire.client_secret,
        access_token: wire.access_token,
        refresh_token: wire.refresh_token,
        token_type: wire.token_type,
        expires_at: wire.expires_at,
        scopes: wire.scopes,
        account: wire.account,
    })
}

impl TryFrom<v1::StoredSignIn> for StoredSignIn {
    type Error = WireError;

    fn try_from(wire: v1::StoredSignIn) -> Result<Self, WireError> {
        required("credential.server", &wire.server, MAX_SERVER_NAME_BYTES)?;
        Ok(Self {
            server: wire.server,
            credential: wire
                .credential
                .map(|c| credential("credential.credential", c))
                .transpose()?,
        })
    }
}

/// A sign-in's answer from the wire: its id and outcome.
pub(crate) fn answer(
    wire: v1::SignInAnswer,
) -> Result<(SignInRequestId, SignInOutcome), WireError> {
    use v1::sign_in_answer::Kind;
    let id = id("sign_in.id", &wire.id)?;
    let outcome = match wire.kind {
        Some(Kind::Started(started)) => {
            required(
                "sign_in.started.authorization_url",
                &started.authorization_url,
                MAX_SIGN_IN_URL_BYTES,
            )?;
            required(
                "sign_in.started.state",
                &started.state,
                MAX_SIGN_IN_NAME_BYTES,
            )?;
            optional(
                "sign_in.started.issuer",
                started.issuer.as_ref(),
                MAX_SIGN_IN_NAME_BYTES,
            )?;
            required(
                "sign_in.started.server_url",
                &started.server_url,
                MAX_SIGN_IN_URL_BYTES,
            )?;
            required(
                "sign_in.started.pending",
                &started.pending,
                MAX_SIGN_IN_SECRET_BYTES,
            )?;
            SignInOutcome::Started(SignInStart {
                authorization_url: started.authorization_url,
                state: started.state,
                issuer: started.issuer,
                server_url: started.server_url,
                pending: started.pending,
            })
        }
        Some(Kind::SignedIn(signed_in)) => {
            SignInOutcome::SignedIn(credential("sign_in.signed_in", signed_in)?)
        }
        Some(Kind::Error(error)) => {
            required("sign_in.error", &error, MAX_ERROR_BYTES)?;
            SignInOutcome::Failed(error)
        }
        None => return Err(WireError::new("sign_in.kind", Problem::Missing)),
    };
    Ok((id, outcome))
}

// ---- domain → wire -------------------------------------------------------------------

impl From<BeginSignIn> for v1::SignInBegin {
    fn from(begin: BeginSignIn) -> Self {
        Self {
            id: begin.id.to_string(),
            server: begin.server,
            redirect_uri: begin.redirect_uri,
            client_metadata_url: begin.client_metadata_url,
        }
    }
}

impl From<ExchangeSignIn> for v1::SignInExchange {
    fn from(exchange: ExchangeSignIn) -> Self {
        Self {
            id: exchange.id.to_string(),
            server: exchange.server,
            pending: exchange.pending,
            code: exchange.code,
            iss: exchange.iss,
        }
    }
}

impl From<SignInCredential> for v1::SignInCredential {
    fn from(c: SignInCredential) -> Self {
        Self {
            server_url: c.server_url,
            issuer: c.issuer,
            client_id: c.client_id,
            client_secret: c.client_secret,
            access_token: c.access_token,
            refresh_token: c.refresh_token,
            token_type: c.token_type,
            expires_at: c.expires_at,
            scopes: c.scopes,
            account: c.account,
        }
    }
}

impl From<StoredSignIn> for v1::StoredSignIn {
    fn from(stored: StoredSignIn) -> Self {
        Self {
            server: stored.server,
            credential: stored.credential.map(Into::into),
        }
    }
}

/// A sign-in's answer on the wire.
pub(crate) fn answer_to_wire(id: SignInRequestId, outcome: SignInOutcome) -> v1::SignInAnswer {
    use v1::sign_in_answer::Kind;
    let outcome = match outcome {
        SignInOutcome::Started(start) => Kind::Started(v1::SignInStarted {
            authorization_url: start.authorization_url,
            state: start.state,
            issuer: start.issuer,
            server_url: start.server_url,
            pending: start.pending,
        }),
        SignInOutcome::SignedIn(credential) => Kind::SignedIn(credential.into()),
        SignInOutcome::Failed(error) => Kind::Error(error),
    };
    v1::SignInAnswer {
        id: id.to_string(),
        kind: Some(outcome),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credential_record() -> SignInCredential {
        SignInCredential {
            server_url: "https://mcp.example/mcp".into(),
            issuer: "https://as.example".into(),
            client_id: "client".into(),
            client_secret: None,
            access_token: "canary-access".into(),
            refresh_token: Some("canary-refresh".into()),
            token_type: "Bearer".into(),
            expires_at: Some(1_800_000_000),
            scopes: vec!["read".into(), "write".into()],
            account: Some("ada".into()),
        }
    }

    #[test]
    fn answers_round_trip_and_are_bounded() {
        let id = Uuid::new_v4();
        for outcome in [
            SignInOutcome::SignedIn(credential_record()),
            SignInOutcome::Failed("the authorization server said no".into()),
            SignInOutcome::Started(SignInStart {
                authorization_url: "https://as.example/authorize?state=s".into(),
                state: "s".into(),
                issuer: None,
                server_url: "https://mcp.example/mcp".into(),
                pending: "{}".into(),
            }),
        ] {
            let wire = answer_to_wire(id, outcome.clone());
            assert_eq!(answer(wire).unwrap(), (id, outcome));
        }
        let mut long = v1::SignInCredential::from(credential_record());
        long.access_token = "a".repeat(MAX_SIGN_IN_SECRET_BYTES + 1);
        let error = credential("c", long).unwrap_err();
        assert_eq!(error.field, "c.access_token");
        let bad_id = v1::SignInAnswer {
            id: "nope".into(),
            kind: Some(v1::sign_in_answer::Kind::Error("x".into())),
        };
        assert_eq!(answer(bad_id).unwrap_err().field, "sign_in.id");
    }

    #[test]
    fn an_exchange_never_prints_its_code_or_pending_state() {
        let exchange = ExchangeSignIn {
            id: Uuid::new_v4(),
            server: "github".into(),
            pending: "canary-pending".into(),
            code: "canary-code".into(),
            iss: None,
        };
        let wire = v1::SignInExchange::from(exchange.clone());
        assert_eq!(ExchangeSignIn::try_from(wire).unwrap(), exchange);
        let debug = format!("{exchange:?}");
        assert!(!debug.contains("canary"), "{debug}");
    }
}
