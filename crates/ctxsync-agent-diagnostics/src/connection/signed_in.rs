//! A connection's side of a person's sign-in: the held token sent to an HTTP server,
//! renewed before it expires and once after the server refuses it, and a live
//! connection's renewal, after which the server connects anew.

use super::{Client, ConnectError, Connected, ConnectionTask, EventKind};
use crate::{
    config::TransportConfig,
    failure::AccessRefused,
    process::ServerProcess,
    sign_in::{self, AfterRefusal, LiveRenewal},
};

impl ConnectionTask {
    fn set_bearer(&self, token: Option<String>) {
        *self
            .bearer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = token;
    }

    /// The held sign-in's access token this connection sent, if any.
    pub(super) fn sent_bearer(&self) -> Option<String> {
        self.bearer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// [`Self::connect`], sending an HTTP server the held sign-in's token when it takes one
    /// (refreshed first when it is about to expire), and once more with a renewed one
    /// after the server refuses it. A sign-in that cannot be renewed is dropped, and the
    /// refusal then says that a person must sign in again.
    pub(super) async fn connect_signed_in(
        &self,
        client: Client,
        process: &mut Option<ServerProcess>,
    ) -> Result<Connected, ConnectError> {
        let TransportConfig::Http { url, .. } = &self.entry.transport else {
            return self.connect(client, process).await;
        };
        if !sign_in::applies(&self.entry) {
            return self.connect(client, process).await;
        }
        let name = &self.entry.name;
        let clean = |text: &str| self.sanitize(text);
        let token = sign_in::token_for_connect(&self.sign_ins, name, url, clean).await;
        self.set_bearer(token.clone());
        let first = self.connect(client.clone(), process).await;
        let challenge = match &first {
            Err(ConnectError::Initialize {
                refused: Some(AccessRefused::Unauthorized { challenge }),
                ..
            }) => challenge.clone(),
            _ => return first,
        };
        let Some(sent) = token else {
            return match self.sign_ins.lapsed(name) {
                Some(why) => Err(lapsed(url, &why, challenge)),
                None => first,
            };
        };
        match sign_in::after_refusal(&self.sign_ins, name, url, &sent, challenge.as_deref()).await {
            AfterRefusal::Retry(token) => {
                self.set_bearer(Some(token.clone()));
                match self.connect(client, process).await {
                    Err(ConnectError::Initialize {
                        refused: Some(AccessRefused::Unauthorized { challenge }),
                        ..
                    }) => {
                        let why = "the server refused the renewed sign-in too";
                        self.sign_ins.lapse(name, &token, why);
                        Err(lapsed(url, why, challenge))
                    }
                    again => again,
                }
            }
            AfterRefusal::Lapsed(why) => Err(lapsed(url, &why, challenge)),
            AfterRefusal::Failed(detail) => Err(ConnectError::Initialize {
                detail,
                closed: false,
                refused: None,
            }),
            AfterRefusal::NotHeld => first,
        }
    }

    /// When this live connection renews the sign-in it sent, if it sent one.
    pub(super) fn renewal_at(&self) -> Option<tokio::time::Instant> {
        let TransportConfig::Http { url, .. } = &self.entry.transport else {
            return None;
        };
        let sent = self.sent_bearer()?;
        let held = self
            .sign_ins
            .current(&self.entry.name, url)
            .filter(|held| held.access_token == sent)?;
        sign_in::renewal_at(&held)
    }

    /// Renews the sign-in this live connection sent (its renewal is due); the engine
    /// connects anew when it changed. When to try again, if it is to be tried again.
    pub(super) async fn renew(&self) -> Option<tokio::time::Instant> {
        let TransportConfig::Http { url, .. } = &self.entry.transport else {
            return None;
        };
        let sent = self.sent_bearer()?;
        let clean = |text: &str| self.sanitize(text);
        match sign_in::renew_live(&self.sign_ins, &self.entry.name, url, &sent, clean).await {
            LiveRenewal::Reconnect => {
                self.send(EventKind::SignInChanged);
                None
            }
            LiveRenewal::RetryAt(at) => Some(at),
            LiveRenewal::Done => None,
        }
    }
}

/// The refusal of a server whose sign-in could not be renewed (`why`) and was dropped.
fn lapsed(url: &str, why: &str, challenge: Option<String>) -> ConnectError {
    ConnectError::Initialize {
        detail: sign_in::lapsed_words(url, why),
        closed: false,
        refused: Some(AccessRefused::Unauthorized { challenge }),
    }
}
