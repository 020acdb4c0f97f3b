//! The records of a sign-in as callers see them: the request, the task a replica claims,
//! the callback's parameters and outcome, and the status the HTTP handler polls.
//!
//! Must never: show a secret in `Debug` — the code and pending state are
//! [`SecretString`]s, a browser binding is never printed, and an authorization URL shows
//! without its query (which carries the `state`).

use std::fmt;

use chrono::{DateTime, Utc};

use crate::credentials::SecretString;
use crate::ids::{AgentId, SignInId};

/// A person asks for a sign-in: what [`crate::Store::request_sign_in`] stores.
#[derive(Clone, PartialEq, Eq)]
pub struct NewSignIn {
    /// The agent whose server it is.
    pub agent: AgentId,
    /// The server's name as the agent reports it.
    pub server_name: String,
    /// How it was asked for: `api_token`, or `chat:<chat id>`.
    pub via: String,
    /// The asking browser's binding (a value only that browser presents again, such as a
    /// cookie's), when a browser asked; only its sha256 is stored, and then only that
    /// browser can finish the sign-in. `None`: any browser can.
    pub browser: Option<String>,
}

impl fmt::Debug for NewSignIn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewSignIn")
            .field("agent", &self.agent)
            .field("server_name", &self.server_name)
            .field("via", &self.via)
            .field("browser_bound", &self.browser.is_some())
            .finish()
    }
}

/// Where a sign-in stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SignInStage {
    /// Asked for; no replica has had the agent start it yet.
    Asking,
    /// The agent made the authorization URL; the person's browser has not come back.
    Started,
    /// The browser came back with a code; the agent has not exchanged it yet.
    Exchanging,
    /// The credential is stored.
    SignedIn,
    /// It ended without a credential (the error says why).
    Failed,
}

impl SignInStage {
    /// The stored label.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Asking => "asking",
            Self::Started => "started",
            Self::Exchanging => "exchanging",
            Self::SignedIn => "signed_in",
            Self::Failed => "failed",
        }
    }

    pub(crate) fn parse(label: &str) -> Option<Self> {
        [
            Self::Asking,
            Self::Started,
            Self::Exchanging,
            Self::SignedIn,
            Self::Failed,
        ]
        .into_iter()
        .find(|stage| stage.as_str() == label)
    }
}

/// A sign-in as the HTTP handler polls it ([`crate::Store::sign_in_status`]).
#[derive(Clone, PartialEq, Eq)]
pub struct SignInStatus {
    /// The agent whose server it is.
    pub agent: AgentId,
    /// The server's name.
    pub server_name: String,
    /// Where it stands.
    pub stage: SignInStage,
    /// Where the person signs in, while the sign-in waits for them (`Started`): the URL
    /// carries the `state`, so it is dropped when the browser comes back or it fails.
    pub authorization_url: Option<String>,
    /// When it expires: a browser coming back later is refused, and a replica no longer
    /// works on it.
    pub expires_at: DateTime<Utc>,
    /// Why it failed, in words.
    pub error: Option<String>,
}

impl fmt::Debug for SignInStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SignInStatus")
            .field("agent", &self.agent)
            .field("server_name", &self.server_name)
            .field("stage", &self.stage)
            .field(
                "authorization_url",
                &self.authorization_url.as_deref().map(without_query),
            )
            .field("expires_at", &self.expires_at)
            .field("error", &self.error)
            .finish()
    }
}

/// `url` up to its query or fragment.
fn without_query(url: &str) -> &str {
    url.find(['?', '#']).map_or(url, |end| &url[..end])
}

/// A sign-in a replica claimed ([`crate::Store::claim_sign_in`]): what it sends the agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimedSignIn {
    /// The sign-in.
    pub id: SignInId,
    /// The agent whose server it is.
    pub agent: AgentId,
    /// The server's name.
    pub server_name: String,
    /// How it was asked for (the credential's `signed_in_via`).
    pub via: String,
    /// What to ask of the agent.
    pub task: SignInTask,
}

/// What the agent is asked to do for a claimed sign-in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SignInTask {
    /// Start it: make the authorization URL.
    Begin,
    /// Finish it: exchange the code, with what the start left.
    Exchange {
        /// The start's `pending`, unchanged.
        pending: SecretString,
        /// The authorization code the browser brought back.
        code: SecretString,
        /// The callback's `iss` parameter (RFC 9207), when it had one.
        iss: Option<String>,
    },
}

/// What the person's browser brought back to the redirect URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallbackParams {
    /// The authorization server granted a code.
    Code {
        /// The authorization code.
        code: SecretString,
        /// The `iss` parameter (RFC 9207), when there was one.
        iss: Option<String>,
    },
    /// The authorization server refused (the person declined, or it failed).
    Error {
        /// The `error` parameter.
        error: String,
        /// The `error_description` parameter, when there was one.
        description: Option<String>,
    },
}

/// Which sign-in a callback was for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignInRef {
    /// The sign-in.
    pub id: SignInId,
    /// The agent whose server it is.
    pub agent: AgentId,
    /// The server's name.
    pub server_name: String,
}

/// What became of a callback ([`crate::Store::sign_in_callback`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallbackOutcome {
    /// No sign-in has this state. Nothing stored.
    Unknown,
    /// The sign-in is past waiting for its browser: the state was used already, or the
    /// sign-in ended. Nothing stored.
    Used,
    /// The sign-in expired before the browser came back. Nothing stored.
    Expired,
    /// The sign-in was asked for by another browser. Nothing stored.
    OtherBrowser,
    /// The code is kept (sealed) for the agent to exchange.
    Accepted(SignInRef),
    /// The authorization server refused: the sign-in failed, with its error.
    Refused(SignInRef),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_no_binding_query_or_code() {
        let request = NewSignIn {
            agent: AgentId::new_random(),
            server_name: "docs".into(),
            via: "api_token".into(),
            browser: Some("canary-browser".into()),
        };
        let status = SignInStatus {
            agent: AgentId::new_random(),
            server_name: "docs".into(),
            stage: SignInStage::Started,
            authorization_url: Some("https://as.example/authorize?state=canary-state".into()),
            expires_at: Utc::now(),
            error: None,
        };
        let task = SignInTask::Exchange {
            pending: "canary-pending".into(),
            code: "canary-code".into(),
            iss: Some("https://as.example".into()),
        };
        let params = CallbackParams::Code {
            code: "canary-code".into(),
            iss: None,
        };
        let debug = format!("{request:?} {status:?} {task:?} {params:#?}");
        assert!(!debug.contains("canary"), "{debug}");
        assert!(debug.contains("https://as.example/authorize"), "{debug}");
        assert!(debug.contains("browser_bound: true"), "{debug}");
    }

    #[test]
    fn stages_round_trip_their_labels() {
        for stage in [
            SignInStage::Asking,
            SignInStage::Started,
            SignInStage::Exchanging,
            SignInStage::SignedIn,
            SignInStage::Failed,
        ] {
            assert_eq!(SignInStage::parse(stage.as_str()), Some(stage));
        }
        assert_eq!(SignInStage::parse("done"), None);
    }
}
