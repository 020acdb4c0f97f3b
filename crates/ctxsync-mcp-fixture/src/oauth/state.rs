//! The authorization server's memory (clients, codes, tokens) and the test handle that
//! reads it back.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use tokio::time::Instant;

use super::config::OAuthConfig;

/// How long an authorization code may wait for its exchange (RFC 6749 §4.1.2: at most
/// ten minutes).
const CODE_TTL: Duration = Duration::from_secs(600);

/// How a token request authenticated its client (RFC 6749 §2.3, RFC 7591 §2 names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// HTTP Basic with the client id and secret (`client_secret_basic`).
    ClientSecretBasic,
    /// `client_id` and `client_secret` in the form (`client_secret_post`).
    ClientSecretPost,
    /// `client_id` alone, as a public client does (`none`).
    None,
}

impl ClientAuth {
    /// The method's registered name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClientSecretBasic => "client_secret_basic",
            Self::ClientSecretPost => "client_secret_post",
            Self::None => "none",
        }
    }
}

/// One request to `/authorize`, as the fixture read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizeRecord {
    /// `client_id`, when given.
    pub client_id: Option<String>,
    /// `redirect_uri`, when given.
    pub redirect_uri: Option<String>,
    /// `scope`, when given (space-separated, as sent).
    pub scope: Option<String>,
    /// `resource` (RFC 8707), when given.
    pub resource: Option<String>,
    /// The OAuth error it was answered with (`access_denied` when the person refused);
    /// `None` when a code was issued.
    pub error: Option<String>,
}

/// One request to `/token`, as the fixture read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRequestRecord {
    /// `grant_type`, when given.
    pub grant_type: Option<String>,
    /// The client id the request named (Basic user or `client_id`), when any.
    pub client_id: Option<String>,
    /// How it authenticated its client.
    pub client_auth: ClientAuth,
    /// The OAuth error it was answered with; `None` when tokens were issued.
    pub error: Option<String>,
}

/// A dynamically registered client.
#[derive(Clone)]
pub(super) struct RegisteredClient {
    pub(super) secret: Option<String>,
    pub(super) redirect_uris: Vec<String>,
}

/// A client the server knows, however it came to know it.
#[derive(Clone)]
pub(super) struct KnownClient {
    pub(super) secret: Option<String>,
    /// `None`: any redirect URI (pre-registered and metadata-document clients).
    pub(super) redirect_uris: Option<Vec<String>>,
}

/// What an authorization code stands for.
#[derive(Clone)]
pub(super) struct CodeGrant {
    pub(super) client_id: String,
    /// The `redirect_uri` the request named, which the exchange must repeat.
    pub(super) redirect_uri: Option<String>,
    pub(super) code_challenge: String,
    pub(super) scopes: Vec<String>,
    pub(super) expires_at: Instant,
}

/// What a refresh token stands for.
#[derive(Clone)]
pub(super) struct RefreshGrant {
    pub(super) client_id: String,
    pub(super) scopes: Vec<String>,
}

struct AccessGrant {
    scopes: Vec<String>,
    expires_at: Instant,
}

/// Why the MCP endpoint refuses a bearer token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum BearerRefusal {
    /// Unknown, expired or revoked.
    InvalidToken,
    /// Live, but without every required scope.
    InsufficientScope,
}

/// No `Debug`: secrets and tokens live here.
#[derive(Default)]
struct Memory {
    clients: HashMap<String, RegisteredClient>,
    codes: HashMap<String, CodeGrant>,
    access_tokens: HashMap<String, AccessGrant>,
    refresh_tokens: HashMap<String, RefreshGrant>,
    authorize_log: Vec<AuthorizeRecord>,
    token_log: Vec<TokenRequestRecord>,
    access_tokens_issued: usize,
    last_granted_scopes: Option<Vec<String>>,
    refused_bearers: usize,
}

/// The fixture's authorization server: its configuration, its URLs and its memory.
pub(crate) struct AuthServer {
    pub(super) config: OAuthConfig,
    /// The issuer identifier: the fixture's origin, e.g. `http://127.0.0.1:41234`.
    pub(super) issuer: String,
    /// The protected resource: the MCP endpoint's URL.
    pub(super) resource: String,
    /// The protected-resource metadata URL the challenge names.
    pub(super) resource_metadata_url: String,
    /// Whether the person refuses (starts as `config.deny`; tests may flip it).
    pub(super) deny: AtomicBool,
    memory: Mutex<Memory>,
}

impl std::fmt::Debug for AuthServer {
    // The memory holds secrets and tokens: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthServer")
            .field("issuer", &self.issuer)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// A fresh unguessable token: 244 random bits, hex, with a prefix naming its kind.
pub(super) fn random_token(prefix: &str) -> String {
    let a = uuid::Uuid::new_v4().simple();
    let b = uuid::Uuid::new_v4().simple();
    format!("{prefix}_{a}{b}")
}

impl AuthServer {
    pub(crate) fn new(config: OAuthConfig, issuer: String, mcp_path: &str) -> Self {
        let resource = format!("{issuer}{mcp_path}");
        let resource_metadata_url =
            format!("{issuer}/.well-known/oauth-protected-resource{mcp_path}");
        Self {
            deny: AtomicBool::new(config.deny),
            config,
            issuer,
            resource,
            resource_metadata_url,
            memory: Mutex::default(),
        }
    }

    fn memory(&self) -> MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The client named `client_id`: registered here, pre-registered, or (with metadata
    /// documents on) an `https` URL with a path.
    pub(super) fn client(&self, client_id: &str) -> Option<KnownClient> {
        if let Some(client) = self.memory().clients.get(client_id) {
            return Some(KnownClient {
                secret: client.secret.clone(),
                redirect_uris: Some(client.redirect_uris.clone()),
            });
        }
        if let Some(client) = self.config.clients.iter().find(|c| c.id == client_id) {
            return Some(KnownClient {
                secret: client.secret.clone(),
                redirect_uris: None,
            });
        }
        let is_document_url = url::Url::parse(client_id)
            .is_ok_and(|url| url.scheme() == "https" && url.path() != "/");
        (self.config.client_id_metadata_documents && is_document_url).then_some(KnownClient {
            secret: None,
            redirect_uris: None,
        })
    }

    pub(super) fn register(&self, client: RegisteredClient) -> String {
        let client_id = random_token("fxclient");
        self.memory().clients.insert(client_id.clone(), client);
        client_id
    }

    pub(super) fn record_authorize(&self, record: AuthorizeRecord) {
        self.memory().authorize_log.push(record);
    }

    pub(super) fn record_token_request(&self, record: TokenRequestRecord) {
        self.memory().token_log.push(record);
    }

    pub(super) fn issue_code(&self, grant: CodeGrant) -> String {
        let code = random_token("fxcode");
        self.memory().codes.insert(code.clone(), grant);
        code
    }

    pub(super) fn code_expiry() -> Instant {
        Instant::now() + CODE_TTL
    }

    /// The grant of a live code (it stays until [`AuthServer::redeem_code`]).
    pub(super) fn code(&self, code: &str) -> Option<CodeGrant> {
        let memory = self.memory();
        let grant = memory.codes.get(code)?;
        (grant.expires_at > Instant::now()).then(|| grant.clone())
    }

    /// Uses a code up; false when it was already used (a concurrent exchange won).
    pub(super) fn redeem_code(&self, code: &str) -> bool {
        self.memory().codes.remove(code).is_some()
    }

    /// The grant of a live refresh token (it stays until [`AuthServer::rotate_refresh`]).
    pub(super) fn refresh_grant(&self, token: &str) -> Option<RefreshGrant> {
        self.memory().refresh_tokens.get(token).cloned()
    }

    /// Uses a refresh token up; false when it was already used.
    pub(super) fn rotate_refresh(&self, token: &str) -> bool {
        self.memory().refresh_tokens.remove(token).is_some()
    }

    /// Issues an access token for `scopes` (and, when configured, a refresh token for
    /// `refresh_scopes`); the token response's JSON.
    pub(super) fn issue_tokens(
        &self,
        client_id: &str,
        scopes: Vec<String>,
        refresh_scopes: Vec<String>,
    ) -> serde_json::Value {
        let access_token = random_token("fxat");
        let ttl = self.config.token_ttl;
        let mut memory = self.memory();
        memory.access_tokens.insert(
            access_token.clone(),
            AccessGrant {
                scopes: scopes.clone(),
                expires_at: Instant::now() + ttl,
            },
        );
        memory.access_tokens_issued += 1;
        memory.last_granted_scopes = Some(scopes.clone());
        let mut answer = serde_json::json!({
            "access_token": access_token,
            "token_type": "Bearer",
            "expires_in": ttl.as_secs(),
            "scope": scopes.join(" "),
        });
        if self.config.refresh_tokens {
            let refresh_token = random_token("fxrt");
            memory.refresh_tokens.insert(
                refresh_token.clone(),
                RefreshGrant {
                    client_id: client_id.to_owned(),
                    scopes: refresh_scopes,
                },
            );
            answer["refresh_token"] = refresh_token.into();
        }
        answer
    }

    /// Whether `token` is a live access token carrying every required scope.
    pub(super) fn check_bearer(&self, token: Option<&str>) -> Result<(), BearerRefusal> {
        let mut memory = self.memory();
        let verdict = match token.and_then(|token| memory.access_tokens.get(token)) {
            Some(grant) if grant.expires_at > Instant::now() => {
                let carries = |scope: &String| grant.scopes.contains(scope);
                if self.config.required_scopes.iter().all(carries) {
                    Ok(())
                } else {
                    Err(BearerRefusal::InsufficientScope)
                }
            }
            _ => Err(BearerRefusal::InvalidToken),
        };
        if verdict.is_err() {
            memory.refused_bearers += 1;
        }
        verdict
    }
}

/// What a test sees of, and does to, a fixture's authorization server (OAuth mode).
#[derive(Clone)]
pub struct OAuthHandle {
    server: Arc<AuthServer>,
}

impl std::fmt::Debug for OAuthHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthHandle")
            .field("issuer", &self.server.issuer)
            .finish_non_exhaustive()
    }
}

impl OAuthHandle {
    pub(crate) fn new(server: Arc<AuthServer>) -> Self {
        Self { server }
    }

    /// The issuer identifier (the fixture's origin, e.g. `http://127.0.0.1:41234`).
    pub fn issuer(&self) -> &str {
        &self.server.issuer
    }

    /// The protected-resource metadata URL the 401 challenge names.
    pub fn resource_metadata_url(&self) -> &str {
        &self.server.resource_metadata_url
    }

    /// Every `/authorize` request so far, oldest first.
    pub fn authorize_requests(&self) -> Vec<AuthorizeRecord> {
        self.server.memory().authorize_log.clone()
    }

    /// Every `/token` request so far, oldest first.
    pub fn token_requests(&self) -> Vec<TokenRequestRecord> {
        self.server.memory().token_log.clone()
    }

    /// How many access tokens have been issued (code exchanges and refreshes).
    pub fn access_tokens_issued(&self) -> usize {
        self.server.memory().access_tokens_issued
    }

    /// The scopes of the last issued access token (`None` before the first).
    pub fn last_granted_scopes(&self) -> Option<Vec<String>> {
        self.server.memory().last_granted_scopes.clone()
    }

    /// How many clients have registered dynamically.
    pub fn registrations(&self) -> usize {
        self.server.memory().clients.len()
    }

    /// How many MCP requests were refused for want of a live, sufficient token.
    pub fn refused_requests(&self) -> usize {
        self.server.memory().refused_bearers
    }

    /// Every access token issued so far stops working (401 `invalid_token`); refresh
    /// tokens still work.
    pub fn expire_access_tokens(&self) {
        self.server.memory().access_tokens.clear();
    }

    /// Every refresh token issued so far is refused (400 `invalid_grant`).
    pub fn revoke_refresh_tokens(&self) {
        self.server.memory().refresh_tokens.clear();
    }

    /// From now on the person refuses (`true`: `error=access_denied`) or agrees.
    pub fn set_deny(&self, deny: bool) {
        self.server.deny.store(deny, Ordering::SeqCst);
    }
}
