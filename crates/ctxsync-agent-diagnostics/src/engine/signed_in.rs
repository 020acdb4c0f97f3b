//! The engine's side of a person's sign-in: the calls the agent makes for the control
//! plane (start, exchange, restore, forget), and the actor connecting a server anew when
//! its held sign-in changes.

use ctxsync_mcp_model::{SignInCredential, SignInStart};
use tokio::sync::oneshot;

use super::{Actor, Command, Engine, EngineError};
use crate::{
    config::quote_name,
    failure::AccessRefused,
    sign_in::{self, Target},
};

impl Engine {
    /// Starts an authorization-code sign-in to the HTTP server named `server` (as the
    /// report names it): discovers its authorization server (from the challenge of its
    /// last 401 or 403, when there was one), picks a client (the entry's `oauth` block,
    /// else the Client ID Metadata Document at `client_metadata_url` when the server takes
    /// one, else a dynamic registration) and builds the URL a person signs in at, which
    /// comes back to `redirect_uri`. Err: a sentence in words, without the engine's
    /// secrets.
    pub async fn begin_sign_in(
        &self,
        server: &str,
        redirect_uri: &str,
        client_metadata_url: Option<&str>,
    ) -> Result<SignInStart, String> {
        let target = self.sign_in_target(server).await?;
        sign_in::authorize::begin(&target, redirect_uri, client_metadata_url)
            .await
            .map_err(|error| target.sanitize(&error, &self.sign_ins))
    }

    /// Exchanges `code` (and the authorization response's `iss`, when it had one) for
    /// tokens, with what [`Engine::begin_sign_in`] put in `pending`. On success the engine
    /// holds the credential (in memory only) and connects the server with it at once.
    pub async fn finish_sign_in(
        &self,
        server: &str,
        pending: &str,
        code: &str,
        iss: Option<&str>,
    ) -> Result<SignInCredential, String> {
        let target = self.sign_in_target(server).await?;
        let clean = |error: String| target.sanitize(&error, &self.sign_ins);
        let (url, _) = target.http().map_err(clean)?;
        let credential = sign_in::authorize::finish(url, pending, code, iss)
            .await
            .map_err(clean)?;
        self.sign_ins.hold(server, credential.clone());
        // Closed only when the engine is: nothing to connect then.
        let _ = self
            .commands
            .send(Command::SignInChanged(server.to_owned()));
        Ok(credential)
    }

    /// Holds a credential the control plane kept (after an agent restart) and connects the
    /// server with it at once, unless it is what the engine holds already or older than
    /// a renewal of it the engine holds.
    pub fn restore_sign_in(&self, server: &str, credential: SignInCredential) {
        if self.sign_ins.restore(server, credential) {
            let _ = self
                .commands
                .send(Command::SignInChanged(server.to_owned()));
        }
    }

    /// Drops the credential held for `server`; the server connects anew without it (and
    /// then, typically, needs a sign-in).
    pub fn forget_sign_in(&self, server: &str) {
        if self.sign_ins.forget(server) {
            let _ = self
                .commands
                .send(Command::SignInChanged(server.to_owned()));
        }
    }

    async fn sign_in_target(&self, server: &str) -> Result<Target, String> {
        let closed = || EngineError::Closed.to_string();
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::SignInTarget(server.to_owned(), tx))
            .map_err(|_| closed())?;
        rx.await
            .map_err(|_| closed())?
            .ok_or_else(|| format!("no server is named {}", quote_name(server)))
    }
}

impl Actor {
    /// What a sign-in to `name` needs: its entry as the file holds it now and the
    /// challenge of its last refusal.
    pub(super) fn sign_in_target(&self, name: &str) -> Option<Target> {
        let slot = self.slots.get(name)?;
        Some(Target {
            entry: slot.current_entry()?.clone(),
            challenge: slot
                .refused
                .as_ref()
                .and_then(AccessRefused::challenge)
                .map(str::to_owned),
            secrets: self.secrets.clone(),
        })
    }

    /// Connects `name` anew at once because its sign-in changed (signed in, restored,
    /// renewed or forgotten). An attempt under way sent the old one: it is replaced (and
    /// a reload that waited for it waits for the new one); a live connection stays until
    /// the new one connects.
    pub(super) fn reconnect_signed_in(&mut self, name: &str) {
        let Some(slot) = self.slots.get_mut(name) else {
            return;
        };
        let Some(entry) = slot
            .current_entry()
            .filter(|e| sign_in::applies(e))
            .cloned()
        else {
            return;
        };
        slot.retry_due = None;
        let replaced = slot.attempt.take().map(|(_, task)| task);
        let waited = replaced.as_ref().and_then(|task| {
            let run = self.reload.as_ref()?;
            run.waiting.get(&task.id).map(|(_, since)| *since)
        });
        if let Some(task) = replaced {
            let join = self.cancel(task);
            self.closing.push(join);
        }
        let id = self.spawn_attempt(name, entry);
        if let (Some(run), Some(since)) = (&mut self.reload, waited) {
            run.waiting.insert(id, (name.to_owned(), since));
        }
        self.publish();
    }
}
