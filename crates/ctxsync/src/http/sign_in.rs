//! A person's sign-in to an agent's HTTP MCP server (issue 50): the route that starts
//! one (API token, or a page session of a chat bound to the agent), the OAuth callback
//! the person's browser comes back to on any replica, forgetting a sign-in, and the
//! client id metadata document.
//!
//! The server never makes an OAuth request: it writes a sign-in row, the replica holding
//! the agent's stream routes it to the agent (`ctxsync-agent-api`'s hub), and the handler
//! reads the row until it moves on. The callback's `state` is single use, bound to the
//! agent, the server and the issuer, and, for a sign-in a page started, to that browser.
//!
//! Must never: show a token, code, verifier or state in an answer, a page or a log.

use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use ctxsync_persistence::{
    AgentConnection, AgentId, CallbackOutcome, CallbackParams, NewSignIn, SecretString, SignInId,
    SignInStage, SignInStatus,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::Caller;
use super::{ApiError, AppState};

/// How long starting a sign-in waits for the agent's authorization URL.
const BEGIN_WAIT: Duration = Duration::from_secs(15);
/// How long the callback waits for the agent's token exchange before it answers that the
/// sign-in is still finishing.
const EXCHANGE_WAIT: Duration = Duration::from_secs(20);
/// How often a waiting handler re-reads the sign-in row.
const POLL: Duration = Duration::from_millis(25);
/// Longest query parameter the callback reads.
const MAX_CALLBACK_PARAM_BYTES: usize = 4096;
/// The callback's path under the public URL.
pub(crate) const CALLBACK_PATH: &str = "/oauth/callback";
/// The client id metadata document's path under the public URL.
pub(crate) const CLIENT_METADATA_PATH: &str = "/oauth/client-metadata.json";

/// `POST …/authorization`'s answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AuthorizationBody {
    /// Where the person signs in: the server's authorization server, with this server's
    /// callback as `redirect_uri`.
    pub authorization_url: String,
    /// When the sign-in's state expires (10 minutes on), RFC 3339.
    pub expires_at: String,
}

type ApiResult<T = Response> = Result<T, ApiError>;

/// Who started a sign-in, as the store and the panel say it; and the browser binding a
/// page's sign-in gets.
struct Starter {
    via: String,
    /// A page's sign-in is bound to its browser.
    binding: Option<()>,
}

/// Starts a person's sign-in to the agent's server `name`: the agent makes the OAuth
/// requests (discovery, registration) and builds the URL; this answers it.
#[utoipa::path(post, path = "/api/agents/{id}/mcp-servers/{name}/authorization", tag = "agents",
    params(
        ("id" = String, Path, format = Uuid, description = "The agent's id"),
        ("name" = String, Path, description = "The server's name as the panel shows it, percent-encoded"),
    ),
    responses(
        (status = 200, description = "Where the person signs in", body = AuthorizationBody),
        (status = 400, description = "The id is not a UUID, or the body is not empty or a JSON object", body = super::api::ErrorBody),
        (status = 401, description = "No API token and no page session", body = super::api::ErrorBody),
        (status = 403, description = "The page session is for a chat of another agent", body = super::api::ErrorBody),
        (status = 404, description = "No such agent, or no such server", body = super::api::ErrorBody),
        (status = 409, description = "The server does not need a sign-in", body = super::api::ErrorBody),
        (status = 502, description = "The agent could not start the sign-in (the reason in words)", body = super::api::ErrorBody),
        (status = 503, description = "Sign-in is not set up on this server, or the agent is not connected", body = super::api::ErrorBody),
    ))]
pub(super) async fn start(
    State(state): State<AppState>,
    Path((raw, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let agent: AgentId = super::handlers::parse_id(&raw, "agent")?;
    let starter = starter(&state, &headers, agent).await?;
    empty_body(&body)?;
    settings(&state)?;
    let (_, context, view) = super::handlers::agent_and_view(&state, &raw).await?;
    let server = view
        .servers()
        .iter()
        .find(|server| server.name == name)
        .ok_or_else(|| ApiError::not_found(format!("agent {agent} has no MCP server {name:?}")))?;
    if !server.needs_authorization {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "the MCP server {name:?} does not need a sign-in: it did not refuse the agent for want of one"
            ),
        ));
    }
    if context.connection != AgentConnection::Online {
        // Only the agent can start it (its network, its MCP client): say so at once
        // rather than wait for a stream nobody holds.
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the agent is not connected: start it (or wait for it to reconnect), then sign in",
        ));
    }
    let binding = starter.binding.map(|()| random_token()).transpose()?;
    let id = state
        .store
        .request_sign_in(&NewSignIn {
            agent,
            server_name: name.clone(),
            via: starter.via,
            browser: binding.clone(),
        })
        .await?;
    state.calls.poke_sign_ins();
    let status = wait(&state, id, BEGIN_WAIT, |s| s.stage != SignInStage::Asking).await?;
    match status.stage {
        SignInStage::Started => {
            let url = status.authorization_url.ok_or_else(|| {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "the sign-in has no URL")
            })?;
            let body = AuthorizationBody {
                authorization_url: url,
                expires_at: status.expires_at.to_rfc3339(),
            };
            let mut response = Json(body).into_response();
            if let Some(binding) = binding
                && let Ok(cookie) = HeaderValue::from_str(&state.auth.sign_in_cookie(&binding))
            {
                response.headers_mut().append(header::SET_COOKIE, cookie);
            }
            Ok(response)
        }
        SignInStage::Failed => Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            format!(
                "the agent could not start the sign-in to {name:?}: {}",
                status.error.as_deref().unwrap_or("no reason given")
            ),
        )),
        _ => {
            // Nobody holds the agent's stream, or it did not answer: the row must not
            // start later behind the caller's back.
            state
                .store
                .sign_in_failed(id, "the agent did not answer in time")
                .await?;
            Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the agent did not answer within {} s: is it running and connected?",
                    BEGIN_WAIT.as_secs()
                ),
            ))
        }
    }
}

/// Forgets the agent's credentials for the server `name` (on this replica's stream, the
/// agent forgets them at once; otherwise at its next restart).
#[utoipa::path(delete, path = "/api/agents/{id}/mcp-servers/{name}/authorization", tag = "agents",
    params(
        ("id" = String, Path, format = Uuid, description = "The agent's id"),
        ("name" = String, Path, description = "The server's name as the panel shows it, percent-encoded"),
    ),
    responses(
        (status = 204, description = "Forgotten (or there was nothing to forget)"),
        (status = 400, description = "The id is not a UUID", body = super::api::ErrorBody),
        (status = 401, description = "No API token and no page session", body = super::api::ErrorBody),
        (status = 403, description = "The page session is for a chat of another agent", body = super::api::ErrorBody),
        (status = 404, description = "No such agent", body = super::api::ErrorBody),
    ))]
pub(super) async fn forget(
    State(state): State<AppState>,
    Path((raw, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult {
    let agent: AgentId = super::handlers::parse_id(&raw, "agent")?;
    let starter = starter(&state, &headers, agent).await?;
    if state.store.get_agent(agent).await?.is_none() {
        return Err(ApiError::not_found(format!("agent {agent} not found")));
    }
    let forgotten = state
        .store
        .forget_server_credentials(agent, &name, &starter.via)
        .await?;
    state.calls.forget_sign_in(agent, &name);
    tracing::info!(%agent, server = %name, forgotten, "sign-in forgotten");
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The callback's query: a code or an error, with the state.
#[derive(Debug, Deserialize)]
pub(super) struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    iss: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// Where the person's browser comes back from the authorization server. Any replica may
/// take it; it answers a small page saying which server was signed in, or why not.
pub(super) async fn callback(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<CallbackQuery>,
) -> Response {
    match complete(&state, &headers, query).await {
        Ok((status, title, text)) => page(status, &title, &text),
        Err(error) => page(error.status(), "Sign-in failed", error.message()),
    }
}

async fn complete(
    state: &AppState,
    headers: &HeaderMap,
    query: CallbackQuery,
) -> Result<(StatusCode, String, String), ApiError> {
    for value in [&query.code, &query.state, &query.iss, &query.error]
        .into_iter()
        .chain([&query.error_description])
        .flatten()
    {
        if value.len() > MAX_CALLBACK_PARAM_BYTES {
            return Err(ApiError::bad_request(
                "a parameter of the callback is too long",
            ));
        }
    }
    let Some(oauth_state) = query.state.filter(|s| !s.is_empty()) else {
        return Err(ApiError::bad_request(
            "the callback has no state: open the sign-in link again from the chat",
        ));
    };
    let settings = settings(state)?;
    let params = match (query.code.filter(|c| !c.is_empty()), query.error) {
        (_, Some(error)) => CallbackParams::Error {
            error,
            description: query.error_description,
        },
        (Some(code), None) => CallbackParams::Code {
            code: SecretString::new(code),
            iss: query.iss,
        },
        (None, None) => {
            return Err(ApiError::bad_request(
                "the callback has neither a code nor an error",
            ));
        }
    };
    let bindings = state.auth.sign_in_bindings(headers);
    let mut outcome = CallbackOutcome::Unknown;
    // A browser may carry several bindings (several sign-ins at once); none is one too.
    for binding in bindings.into_iter().map(Some).chain([None]) {
        outcome = state
            .store
            .sign_in_callback(&oauth_state, binding, params.clone(), &settings.keyring)
            .await?;
        if !matches!(outcome, CallbackOutcome::OtherBrowser) {
            break;
        }
    }
    let sign_in = match outcome {
        CallbackOutcome::Unknown => {
            return Err(ApiError::bad_request(
                "this sign-in link is unknown: start the sign-in again from the chat",
            ));
        }
        CallbackOutcome::Used => {
            return Err(ApiError::bad_request(
                "this sign-in link was used already: start the sign-in again from the chat",
            ));
        }
        CallbackOutcome::Expired => {
            return Err(ApiError::bad_request(
                "this sign-in link expired (they last 10 minutes): start the sign-in again from the chat",
            ));
        }
        CallbackOutcome::OtherBrowser => {
            return Err(ApiError::bad_request(
                "this sign-in was started in another browser: finish it in the browser that started it",
            ));
        }
        CallbackOutcome::Refused(sign_in) => {
            let status = state.store.sign_in_status(sign_in.id).await?;
            let reason = status
                .and_then(|s| s.error)
                .unwrap_or_else(|| "the authorization server refused the sign-in".into());
            return Ok((
                StatusCode::BAD_REQUEST,
                format!("Sign-in to {} failed", sign_in.server_name),
                reason,
            ));
        }
        CallbackOutcome::Accepted(sign_in) => sign_in,
    };
    state.calls.poke_sign_ins();
    let status = wait(state, sign_in.id, EXCHANGE_WAIT, |s| {
        matches!(s.stage, SignInStage::SignedIn | SignInStage::Failed)
    })
    .await?;
    let server = sign_in.server_name;
    Ok(match status.stage {
        SignInStage::SignedIn => (
            StatusCode::OK,
            format!("Signed in to {server}"),
            format!(
                "The agent now connects to {server} with this sign-in; go back to the chat, whose panel shows the server's tools in a few seconds."
            ),
        ),
        SignInStage::Failed => (
            StatusCode::BAD_GATEWAY,
            format!("Sign-in to {server} failed"),
            status
                .error
                .unwrap_or_else(|| "the agent could not finish the sign-in".into()),
        ),
        _ => (
            StatusCode::ACCEPTED,
            format!("Signing in to {server}"),
            "The agent is still finishing the sign-in; the chat shows when it is done.".into(),
        ),
    })
}

/// The client id metadata document (SEP-991) that names this server as an OAuth client.
pub(super) async fn client_metadata(State(state): State<AppState>) -> ApiResult {
    let settings = settings(&state)?;
    let client_id = settings.client_metadata_url.clone().ok_or_else(|| {
        ApiError::not_found(
            "this server has no client id metadata document (it needs an https --public-url)",
        )
    })?;
    let document = serde_json::json!({
        "client_id": client_id,
        "client_name": "ctxsync",
        "redirect_uris": [settings.redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    });
    let mut response = Json(document).into_response();
    // Authorization servers fetch and cache it.
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=3600"),
    );
    Ok(response)
}

/// Who may start or forget a sign-in for `agent`: the API token, or a page session of a
/// chat bound to it (whose sign-in is bound to this browser).
async fn starter(state: &AppState, headers: &HeaderMap, agent: AgentId) -> ApiResult<Starter> {
    match state.auth.caller(headers).await? {
        Caller::Operator => Ok(Starter {
            via: "api_token".into(),
            binding: None,
        }),
        Caller::Page(chat) => {
            let bound = state
                .store
                .get_chat(chat)
                .await?
                .and_then(|chat| chat.agent_id);
            if bound != Some(agent) {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "this page session is for a chat of another agent",
                ));
            }
            // The session cookie is SameSite=Strict, so another site cannot make the
            // browser send it; a fetch from another origin is refused too.
            if headers
                .get("sec-fetch-site")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|site| site == "cross-site")
            {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "a sign-in cannot be started from another site",
                ));
            }
            Ok(Starter {
                via: format!("chat:{chat}"),
                binding: Some(()),
            })
        }
        Caller::Anonymous => Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "missing or invalid bearer token",
        )),
    }
}

/// The route takes no body: empty, or a JSON object (whose fields are ignored).
fn empty_body(body: &[u8]) -> ApiResult<()> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Object(_)) => Ok(()),
        _ => Err(ApiError::bad_request(
            "the body must be empty or a JSON object",
        )),
    }
}

fn settings(state: &AppState) -> ApiResult<ctxsync_agent_api::SignInSettings> {
    state.calls.config().sign_in.clone().ok_or_else(|| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "sign-in is not set up on this server: with --database-url it needs --secrets-key-file (32 random bytes, the same file on every replica), and it needs a --public-url",
        )
    })
}

/// Reads the sign-in row until `done` holds or `budget` passes; the last row read.
async fn wait(
    state: &AppState,
    id: SignInId,
    budget: Duration,
    done: impl Fn(&SignInStatus) -> bool,
) -> ApiResult<SignInStatus> {
    let deadline = tokio::time::Instant::now() + budget;
    loop {
        let status =
            state.store.sign_in_status(id).await?.ok_or_else(|| {
                ApiError::not_found("the sign-in is gone (its agent was deleted)")
            })?;
        if done(&status) || tokio::time::Instant::now() >= deadline {
            return Ok(status);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// 256 random bits as hex (a cookie value).
fn random_token() -> Result<String, ApiError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|_| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the system has no randomness to bind the sign-in to this browser",
        )
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The callback's small page, in the chat page's shell (its stylesheet, no script).
fn page(status: StatusCode, title: &str, text: &str) -> Response {
    use ctxsync_context_ui::{PageShell, escape};
    let shell = PageShell {
        title: &format!("{} · ctxsync", escape(title)),
        sub: None,
        script: false,
    };
    let main = format!(
        "<h2 class=\"sign-in-result\">{}</h2>\n<p>{}</p>",
        escape(title),
        escape(text)
    );
    (status, Html(shell.render(&main))).into_response()
}
