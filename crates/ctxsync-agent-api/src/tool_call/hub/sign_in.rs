//! Sign-ins on the call stream (issue 50): the hub holding an agent's stream claims the
//! agent's sign-in rows the HTTP layer wrote on any replica (`asking`: begin one;
//! `exchanging`: finish one with the person's code), sends each to the agent, and stores
//! what comes back; it hands a newly opened stream the credentials the store keeps for
//! the agent, and keeps the ones the agent refreshes.
//!
//! The sign-in row is the request: an HTTP handler writes it, pokes its own hub, and
//! reads the row until it moves on; the holder finds it at once when it is local, or on
//! its next round (each second) when another replica wrote it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use ctxsync_mcp_model::SignInCredential;
use ctxsync_persistence::{
    AgentId, ClaimedSignIn, CredentialSecrets, CredentialSummary, Keyring, McpCredential,
    SecretString, SignInId, SignInTask,
};
use ctxsync_protocol::sign_in::{
    BeginSignIn, ExchangeSignIn, SignInOutcome, SignInRequestId, StoredSignIn,
};
use ctxsync_protocol::tool_call::ServerCall;
use tokio::time::Instant;

use super::CallHub;

/// How long the agent may take to answer a begin or an exchange (each makes a few OAuth
/// requests, bounded by the agent) before the sign-in fails.
pub(super) const SIGN_IN_ANSWER_LIMIT: Duration = Duration::from_secs(30);

/// What a hub needs to route sign-ins: the secrets key the store seals with, and what
/// the agent tells the authorization server.
#[derive(Clone, Debug)]
pub struct SignInSettings {
    /// Seals and opens credentials and sign-in state.
    pub keyring: Keyring,
    /// Where the person's browser comes back: `{public-url}/oauth/callback`.
    pub redirect_uri: String,
    /// The client id metadata document's URL (SEP-991), when the server has one.
    pub client_metadata_url: Option<String>,
}

/// A sign-in sent to an agent and not yet answered.
#[derive(Debug)]
pub(super) struct SignInFlight {
    agent: AgentId,
    server: String,
    via: String,
    sent_at: Instant,
}

impl CallHub {
    /// Looks for sign-ins of the agents whose streams are here at once (after the HTTP
    /// layer wrote one), instead of at the next round.
    pub fn poke_sign_ins(&self) {
        let Some(hub) = self.me.upgrade() else { return };
        tokio::spawn(async move { hub.run_sign_ins().await });
    }

    /// Tells `agent` to forget its credential for `server` (signing out), when its
    /// stream is here; an agent connected elsewhere forgets it when it restarts, since
    /// the store no longer hands it over.
    pub fn forget_sign_in(&self, agent: AgentId, server: &str) {
        let link = self
            .lock()
            .streams
            .get(&agent)
            .map(|entry| entry.link.clone());
        if let Some(link) = link {
            link.try_send(ServerCall::Credential(StoredSignIn {
                server: server.to_owned(),
                credential: None,
            }));
        }
    }

    /// Claims and sends the sign-ins of the agents whose streams are here, and fails the
    /// ones an agent left unanswered.
    pub(super) async fn run_sign_ins(&self) {
        let Some(settings) = self.config.sign_in.clone() else {
            return;
        };
        self.expire_sign_in_flights().await;
        let agents: Vec<AgentId> = self.lock().streams.keys().copied().collect();
        if agents.is_empty() {
            return;
        }
        let ids = match self.store.sign_in_tasks(&agents).await {
            Ok(ids) => ids,
            Err(error) => {
                tracing::warn!(%error, "reading sign-ins to route failed");
                return;
            }
        };
        for id in ids {
            let claimed = self
                .store
                .claim_sign_in(id, &self.replica, &settings.keyring)
                .await;
            match claimed {
                Ok(Some(claimed)) => self.send_sign_in(claimed, &settings).await,
                Ok(None) => {}
                Err(error) => tracing::warn!(sign_in = %id, %error, "claiming a sign-in failed"),
            }
        }
    }

    async fn send_sign_in(&self, claimed: ClaimedSignIn, settings: &SignInSettings) {
        let request: SignInRequestId = claimed.id.as_uuid();
        let message = match claimed.task {
            SignInTask::Begin => ServerCall::BeginSignIn(BeginSignIn {
                id: request,
                server: claimed.server_name.clone(),
                redirect_uri: settings.redirect_uri.clone(),
                client_metadata_url: settings.client_metadata_url.clone(),
            }),
            SignInTask::Exchange { pending, code, iss } => {
                ServerCall::ExchangeSignIn(ExchangeSignIn {
                    id: request,
                    server: claimed.server_name.clone(),
                    pending: pending.expose().to_owned(),
                    code: code.expose().to_owned(),
                    iss,
                })
            }
        };
        let link = self
            .lock()
            .streams
            .get(&claimed.agent)
            .map(|entry| entry.link.clone());
        let sent = link.is_some_and(|link| link.try_send(message));
        if !sent {
            // The stream went (or is full) between the look and the claim.
            self.fail_sign_in(
                claimed.id,
                "the agent's connection went away during the sign-in; try again",
            )
            .await;
            return;
        }
        tracing::info!(agent = %claimed.agent, server = %claimed.server_name, "sign-in sent to the agent");
        self.lock().sign_ins.insert(
            request,
            SignInFlight {
                agent: claimed.agent,
                server: claimed.server_name,
                via: claimed.via,
                sent_at: Instant::now(),
            },
        );
    }

    async fn fail_sign_in(&self, id: SignInId, reason: &str) {
        if let Err(error) = self.store.sign_in_failed(id, reason).await {
            tracing::warn!(sign_in = %id, %error, "recording a failed sign-in failed");
        }
    }

    /// Sign-ins an agent left unanswered past [`SIGN_IN_ANSWER_LIMIT`] fail (an older
    /// agent ignores the message it does not know).
    async fn expire_sign_in_flights(&self) {
        let lapsed: Vec<SignInRequestId> = {
            let mut state = self.lock();
            let lapsed: Vec<SignInRequestId> = state
                .sign_ins
                .iter()
                .filter(|(_, flight)| flight.sent_at.elapsed() > SIGN_IN_ANSWER_LIMIT)
                .map(|(id, _)| *id)
                .collect();
            for id in &lapsed {
                state.sign_ins.remove(id);
            }
            lapsed
        };
        for id in lapsed {
            self.fail_sign_in(
                SignInId::from_uuid(id),
                "the agent did not answer the sign-in in time (is it older than this server?)",
            )
            .await;
        }
    }

    /// The agent's answer to a sign-in sent on its stream; another agent's is ignored.
    pub(super) async fn sign_in_answered(
        &self,
        agent: AgentId,
        id: SignInRequestId,
        outcome: SignInOutcome,
    ) {
        let flight = {
            let mut state = self.lock();
            match state.sign_ins.get(&id) {
                Some(flight) if flight.agent == agent => state.sign_ins.remove(&id),
                _ => None,
            }
        };
        let Some(flight) = flight else {
            tracing::debug!(%agent, sign_in = %id, "an answer to a sign-in not sent to this agent ignored");
            return;
        };
        let Some(settings) = self.config.sign_in.clone() else {
            return;
        };
        let row = SignInId::from_uuid(id);
        let stored = match outcome {
            SignInOutcome::Started(start) => self
                .store
                .sign_in_started(row, &start, &settings.keyring)
                .await
                .map(drop),
            SignInOutcome::SignedIn(credential) => {
                let credential = stored_credential(&flight.server, &flight.via, credential);
                self.store
                    .sign_in_completed(row, &credential, &settings.keyring)
                    .await
                    .map(drop)
            }
            SignInOutcome::Failed(reason) => {
                self.store.sign_in_failed(row, &reason).await.map(drop)
            }
        };
        match stored {
            Ok(()) => {
                tracing::info!(%agent, server = %flight.server, "sign-in step recorded");
            }
            Err(error) => {
                tracing::warn!(%agent, server = %flight.server, %error, "recording a sign-in step failed");
                self.fail_sign_in(row, "the server could not keep the sign-in; try again")
                    .await;
            }
        }
    }

    /// A credential the agent refreshed (kept in place of the old one, which keeps who
    /// signed in and when) or lost (forgotten). A refresh of a credential that was
    /// forgotten meanwhile is dropped: signing out wins.
    pub(super) async fn credential_from_agent(&self, agent: AgentId, stored: StoredSignIn) {
        let Some(settings) = self.config.sign_in.clone() else {
            return;
        };
        let result = match stored.credential {
            None => self
                .store
                .forget_server_credentials(agent, &stored.server, "agent")
                .await
                .map(drop),
            Some(credential) => match self.store.credential_summaries(agent).await {
                Ok(summaries) => {
                    let earlier = summaries.into_iter().find(|s| {
                        s.server_name == stored.server
                            && s.server_url == credential.server_url
                            && s.issuer == credential.issuer
                    });
                    match earlier {
                        Some(earlier) => {
                            let mut kept = stored_credential(
                                &stored.server,
                                &earlier.signed_in_via,
                                credential,
                            );
                            kept.summary.signed_in_at = earlier.signed_in_at;
                            if kept.summary.account.is_none() {
                                kept.summary.account = earlier.account;
                            }
                            self.store
                                .save_credential(agent, &kept, &settings.keyring)
                                .await
                        }
                        None => Ok(()),
                    }
                }
                Err(error) => Err(error),
            },
        };
        if let Err(error) = result {
            tracing::warn!(%agent, server = %stored.server, %error, "keeping a refreshed credential failed");
        }
    }

    /// The credentials the store keeps for `agent`, for its new stream: a restarted
    /// agent's servers come back signed in without the person.
    pub(super) async fn kept_credentials(&self, agent: AgentId) -> Vec<ServerCall> {
        let Some(settings) = self.config.sign_in.clone() else {
            return Vec::new();
        };
        match self.store.agent_credentials(agent, &settings.keyring).await {
            Ok(credentials) => credentials
                .into_iter()
                .map(|credential| {
                    ServerCall::Credential(StoredSignIn {
                        server: credential.summary.server_name.clone(),
                        credential: Some(wire_credential(credential)),
                    })
                })
                .collect(),
            Err(error) => {
                tracing::warn!(%agent, %error, "reading the agent's kept credentials failed");
                Vec::new()
            }
        }
    }
}

/// What the store keeps of a credential the agent got.
fn stored_credential(server: &str, via: &str, credential: SignInCredential) -> McpCredential {
    let expires_at = credential
        .expires_at
        .and_then(|secs| DateTime::<Utc>::from_timestamp(secs, 0));
    McpCredential {
        summary: CredentialSummary {
            server_name: server.to_owned(),
            server_url: credential.server_url,
            issuer: credential.issuer,
            account: credential.account,
            scopes: credential.scopes.join(" "),
            access_expires_at: expires_at,
            signed_in_at: Utc::now(),
            signed_in_via: via.to_owned(),
        },
        secrets: CredentialSecrets {
            access_token: SecretString::new(credential.access_token),
            refresh_token: credential.refresh_token.map(SecretString::new),
            token_type: credential.token_type,
            client_secret: credential.client_secret.map(SecretString::new),
            client_id: Some(credential.client_id),
        },
    }
}

/// A kept credential as the agent uses it.
fn wire_credential(credential: McpCredential) -> SignInCredential {
    let McpCredential { summary, secrets } = credential;
    SignInCredential {
        client_id: secrets.client_id.unwrap_or_default(),
        client_secret: secrets.client_secret.map(|s| s.expose().to_owned()),
        access_token: secrets.access_token.expose().to_owned(),
        refresh_token: secrets.refresh_token.map(|s| s.expose().to_owned()),
        token_type: secrets.token_type,
        expires_at: summary.access_expires_at.map(|at| at.timestamp()),
        scopes: summary
            .scopes
            .split_whitespace()
            .map(str::to_owned)
            .collect(),
        account: summary.account,
        server_url: summary.server_url,
        issuer: summary.issuer,
    }
}
