//! A person's sign-in to an HTTP server (OAuth authorization code) against the fixture's
//! real authorization server: the start, the person's visit (followed by hand, its 302
//! read), the exchange, the server connecting with the bearer, a restart given the
//! credential back, renewals before expiry and after a 401, and a refused renewal that
//! asks for a person again. No token ever shows in the report.

use crate::support;

use ctxsync_agent_diagnostics::{Engine, EngineConfig, SignInUpdate};
use ctxsync_mcp_fixture::{
    ClientAuth, FixtureConfig, HttpFixture, OAuthClient, OAuthConfig, OAuthHandle, serve_http,
};
use ctxsync_mcp_model::{Report, SignInCredential};
use serde_json::{Value, json};
use support::*;
use tokio::sync::mpsc;

/// Where the control plane would take the person back; never visited here.
const REDIRECT_URI: &str = "http://127.0.0.1:9/oauth/callback";

/// What the authorization server's redirect carried back.
struct Callback {
    code: String,
    state: String,
    iss: Option<String>,
}

/// Plays the person: visits the authorization URL and reads the redirect it answers with.
async fn visit(authorization_url: &str) -> Callback {
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let response = browser
        .get(authorization_url)
        .send()
        .await
        .expect("the authorization endpoint answers");
    assert_eq!(
        response.status(),
        reqwest::StatusCode::FOUND,
        "{response:?}"
    );
    let location = response
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|value| value.to_str().ok())
        .expect("a Location");
    let location = url::Url::parse(location).expect("a URL");
    assert!(
        location.as_str().starts_with(REDIRECT_URI),
        "back to the redirect URI: {location}"
    );
    let parameter = |name: &str| {
        location
            .query_pairs()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.into_owned())
    };
    assert_eq!(parameter("error"), None, "{location}");
    Callback {
        code: parameter("code").expect("a code"),
        state: parameter("state").expect("a state"),
        iss: parameter("iss"),
    }
}

/// A fixture that is its own authorization server, offering two tools.
async fn oauth_fixture(config: OAuthConfig) -> (HttpFixture, OAuthHandle) {
    let fixture = serve_http(FixtureConfig::new().http().tools(2).oauth(config))
        .await
        .expect("serve");
    let oauth = fixture.oauth().expect("OAuth mode");
    (fixture, oauth)
}

/// An engine over `servers` whose sign-in updates come out of the receiver.
fn engine(ws: &Workspace, servers: Value) -> (Engine, mpsc::UnboundedReceiver<SignInUpdate>) {
    ws.write_servers(servers);
    let (updates, received) = mpsc::unbounded_channel();
    let config = EngineConfig {
        sign_in_updates: Some(updates),
        ..ws.engine_config()
    };
    (Engine::start(config), received)
}

/// A person's whole sign-in to `server` on `engine`.
async fn sign_in(engine: &Engine, server: &str) -> SignInCredential {
    let start = engine
        .begin_sign_in(server, REDIRECT_URI, None)
        .await
        .expect("begin");
    let callback = visit(&start.authorization_url).await;
    assert_eq!(callback.state, start.state);
    engine
        .finish_sign_in(
            server,
            &start.pending,
            &callback.code,
            callback.iss.as_deref(),
        )
        .await
        .expect("finish")
}

async fn next_update(updates: &mut mpsc::UnboundedReceiver<SignInUpdate>) -> SignInUpdate {
    tokio::time::timeout(PATIENCE, updates.recv())
        .await
        .expect("a sign-in update in time")
        .expect("the engine is open")
}

/// `server` connected with the fixture's two tools.
async fn connected(engine: &Engine, server: &str) -> std::sync::Arc<Report> {
    let mut rx = engine.subscribe();
    wait_for(&mut rx, &format!("{server} connected"), |report| {
        report
            .server(server)
            .is_some_and(|s| s.connected && s.tools.len() == 2)
    })
    .await
}

/// `server` failed and needs a person's sign-in.
async fn needs_sign_in(engine: &Engine, server: &str) -> std::sync::Arc<Report> {
    let mut rx = engine.subscribe();
    wait_for(&mut rx, &format!("{server} needs a sign-in"), |report| {
        report
            .server(server)
            .is_some_and(|s| !s.connected && s.needs_authorization)
    })
    .await
}

/// No secret of `credential` shows anywhere in `report`.
fn assert_no_token(report: &Report, credential: &SignInCredential) {
    let text = format!("{report:?}");
    let secrets = [
        Some(&credential.access_token),
        credential.refresh_token.as_ref(),
        credential.client_secret.as_ref(),
    ];
    for secret in secrets.into_iter().flatten() {
        assert!(!text.contains(secret.as_str()), "a token in {text}");
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
        .try_into()
        .expect("fits")
}

#[tokio::test]
async fn a_person_signs_in_and_the_server_connects_with_its_tools() {
    let (fixture, oauth) = oauth_fixture(OAuthConfig::default()).await;
    let url = fixture.url();
    let ws = Workspace::new();
    let (engine, mut updates) = engine(&ws, json!({"docs": {"type": "http", "url": url}}));
    let before = needs_sign_in(&engine, "docs").await;
    let error = server(&before, "docs").error.clone().unwrap_or_default();
    assert!(
        error.contains(&format!(
            "the server at {url} answered 401 Unauthorized: it needs a person to sign in"
        )),
        "{error}"
    );
    assert!(
        engine.refused_access()["docs"]
            .challenge()
            .is_some_and(|challenge| challenge.contains(oauth.resource_metadata_url())),
        "{:?}",
        engine.refused_access()
    );

    let start = engine
        .begin_sign_in("docs", REDIRECT_URI, None)
        .await
        .expect("begin");
    assert_eq!(start.server_url, url);
    assert_eq!(start.issuer.as_deref(), Some(oauth.issuer()));
    assert!(
        start
            .authorization_url
            .contains("code_challenge_method=S256")
    );
    assert!(start.pending.len() <= 16 * 1024);
    let callback = visit(&start.authorization_url).await;
    assert_eq!(callback.state, start.state);
    let credential = engine
        .finish_sign_in("docs", &start.pending, &callback.code, None)
        .await
        .expect("finish");
    assert_eq!(credential.server_url, url);
    assert_eq!(credential.issuer, oauth.issuer());
    assert_eq!(credential.token_type, "Bearer");
    assert!(credential.refresh_token.is_some());
    let left = credential.expires_at.expect("an expiry") - unix_now();
    assert!((3000..=3600).contains(&left), "{left}");

    let report = connected(&engine, "docs").await;
    let docs = server(&report, "docs");
    assert_eq!(tool_names(docs), ["tool_0", "tool_1"]);
    assert!(
        !docs.needs_authorization && docs.error.is_none(),
        "{docs:?}"
    );
    assert_no_token(&report, &credential);
    // A dynamic registration, for this server, asking for no scope (none is defined).
    assert_eq!(oauth.registrations(), 1);
    let asked = oauth.authorize_requests();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(
        asked[0].client_id.as_deref(),
        Some(credential.client_id.as_str())
    );
    assert_eq!(asked[0].resource.as_deref(), Some(url.as_str()));
    assert_eq!(asked[0].scope, None);
    assert!(
        updates.try_recv().is_err(),
        "a fresh token needs no renewal"
    );

    // Forgotten: the server connects anew without it and needs a person again.
    engine.forget_sign_in("docs");
    let after = needs_sign_in(&engine, "docs").await;
    assert_no_token(&after, &credential);
    engine.close().await;
    fixture.shutdown().await;
}

#[tokio::test]
async fn scopes_come_from_the_challenge_else_the_resource_metadata_else_none() {
    let challenged = OAuthConfig {
        required_scopes: vec!["mcp:read".into()],
        scopes_supported: vec!["mcp:read".into(), "mcp:write".into()],
        ..OAuthConfig::default()
    };
    let advertised = OAuthConfig {
        scopes_supported: vec!["files:read".into(), "files:write".into()],
        ..OAuthConfig::default()
    };
    for (config, expect) in [
        (challenged, Some("mcp:read")),
        (advertised, Some("files:read files:write")),
        (OAuthConfig::default(), None),
    ] {
        let (fixture, oauth) = oauth_fixture(config).await;
        let ws = Workspace::new();
        let (engine, _updates) = engine(&ws, json!({"s": {"type": "http", "url": fixture.url()}}));
        needs_sign_in(&engine, "s").await;
        let credential = sign_in(&engine, "s").await;
        let asked = oauth.authorize_requests();
        assert_eq!(asked.last().and_then(|a| a.scope.as_deref()), expect);
        let granted: Vec<&str> = expect.map(|s| s.split(' ').collect()).unwrap_or_default();
        assert_eq!(credential.scopes, granted);
        connected(&engine, "s").await;
        engine.close().await;
        fixture.shutdown().await;
    }
}

#[tokio::test]
async fn the_entry_s_preregistered_client_and_scopes_are_used() {
    let (fixture, oauth) = oauth_fixture(OAuthConfig {
        registration: false,
        clients: vec![OAuthClient::confidential(
            "ctxsync-test",
            "client-secret-7f3a",
        )],
        scopes_supported: vec!["read".into(), "write".into()],
        issuer_in_response: true,
        ..OAuthConfig::default()
    })
    .await;
    let ws = Workspace::new();
    let entry = json!({
        "type": "http",
        "url": fixture.url(),
        "oauth": {"clientId": "ctxsync-test", "clientSecret": "client-secret-7f3a", "scopes": ["write"]},
    });
    let (engine, _updates) = engine(&ws, json!({"s": entry}));
    needs_sign_in(&engine, "s").await;
    let start = engine
        .begin_sign_in(
            "s",
            REDIRECT_URI,
            Some("https://ctxsync.example/client.json"),
        )
        .await
        .expect("begin");
    let callback = visit(&start.authorization_url).await;
    assert_eq!(callback.iss.as_deref(), Some(oauth.issuer()));
    // An `iss` naming another server is refused, in words and without a secret.
    let forged = engine
        .finish_sign_in(
            "s",
            &start.pending,
            &callback.code,
            Some("http://127.0.0.1:1"),
        )
        .await
        .expect_err("another issuer");
    ctxsync_test_support::assert_in_words(&forged);
    assert!(forged.contains("issuer"), "{forged}");
    assert!(!forged.contains("client-secret-7f3a"), "{forged}");
    let credential = engine
        .finish_sign_in("s", &start.pending, &callback.code, callback.iss.as_deref())
        .await
        .expect("finish");
    assert_eq!(credential.client_id, "ctxsync-test");
    assert_eq!(
        credential.client_secret.as_deref(),
        Some("client-secret-7f3a")
    );
    assert_eq!(credential.scopes, ["write"]);
    let asked = oauth.authorize_requests();
    assert_eq!(asked[0].client_id.as_deref(), Some("ctxsync-test"));
    assert_eq!(asked[0].scope.as_deref(), Some("write"));
    assert_eq!(oauth.registrations(), 0);
    let exchanged = oauth.token_requests();
    let exchange = exchanged.last().expect("a token request");
    assert_eq!(exchange.client_id.as_deref(), Some("ctxsync-test"));
    assert_ne!(exchange.client_auth, ClientAuth::None);
    assert_eq!(exchange.error, None);
    let report = connected(&engine, "s").await;
    assert_no_token(&report, &credential);
    engine.close().await;
    fixture.shutdown().await;
}

#[tokio::test]
async fn a_client_metadata_document_is_the_client_when_the_server_takes_one() {
    let (fixture, oauth) = oauth_fixture(OAuthConfig {
        client_id_metadata_documents: true,
        ..OAuthConfig::default()
    })
    .await;
    let ws = Workspace::new();
    let (engine, _updates) = engine(&ws, json!({"s": {"type": "http", "url": fixture.url()}}));
    needs_sign_in(&engine, "s").await;
    let document = "https://ctxsync.example/oauth/client.json";
    let start = engine
        .begin_sign_in("s", REDIRECT_URI, Some(document))
        .await
        .expect("begin");
    let callback = visit(&start.authorization_url).await;
    let credential = engine
        .finish_sign_in("s", &start.pending, &callback.code, None)
        .await
        .expect("finish");
    assert_eq!(credential.client_id, document);
    assert_eq!(oauth.registrations(), 0);
    connected(&engine, "s").await;
    engine.close().await;
    fixture.shutdown().await;
}

#[tokio::test]
async fn a_restarted_agent_given_the_credential_connects_without_a_person() {
    let (fixture, oauth) = oauth_fixture(OAuthConfig::default()).await;
    let servers = json!({"s": {"type": "http", "url": fixture.url()}});
    let ws = Workspace::new();
    let (first, _updates) = engine(&ws, servers.clone());
    needs_sign_in(&first, "s").await;
    let credential = sign_in(&first, "s").await;
    connected(&first, "s").await;
    first.close().await;
    let (asked, exchanged) = (oauth.authorize_requests(), oauth.token_requests());

    let (second, mut updates) = engine(&ws, servers);
    needs_sign_in(&second, "s").await;
    second.restore_sign_in("s", credential.clone());
    let report = connected(&second, "s").await;
    assert_no_token(&report, &credential);
    // No person, no token request: the credential as it was.
    assert_eq!(oauth.authorize_requests(), asked);
    assert_eq!(oauth.token_requests(), exchanged);
    assert!(updates.try_recv().is_err());
    second.close().await;
    fixture.shutdown().await;
}

#[tokio::test]
async fn a_token_about_to_expire_is_renewed_before_it_is_sent() {
    let (fixture, oauth) = oauth_fixture(OAuthConfig::default()).await;
    let servers = json!({"s": {"type": "http", "url": fixture.url()}});
    let ws = Workspace::new();
    let (first, _updates) = engine(&ws, servers.clone());
    needs_sign_in(&first, "s").await;
    let mut credential = sign_in(&first, "s").await;
    first.close().await;

    // Kept by the control plane with 30 s left: within the minute before expiry.
    credential.expires_at = Some(unix_now() + 30);
    let (second, mut updates) = engine(&ws, servers);
    second.restore_sign_in("s", credential.clone());
    let update = next_update(&mut updates).await;
    assert_eq!(update.server, "s");
    let renewed = update.credential.expect("renewed");
    assert_ne!(renewed.access_token, credential.access_token);
    assert!(renewed.expires_at.expect("an expiry") > unix_now() + 600);
    assert_eq!(renewed.client_id, credential.client_id);
    let grants: Vec<Option<String>> = oauth
        .token_requests()
        .into_iter()
        .map(|request| request.grant_type)
        .collect();
    assert_eq!(
        grants.last().cloned().flatten().as_deref(),
        Some("refresh_token"),
        "{grants:?}"
    );
    let report = connected(&second, "s").await;
    assert_no_token(&report, &credential);
    assert_no_token(&report, &renewed);
    second.close().await;
    fixture.shutdown().await;
}

#[tokio::test]
async fn a_refused_token_is_renewed_once_and_the_server_connects() {
    let (fixture, oauth) = oauth_fixture(OAuthConfig::default()).await;
    let servers = json!({"s": {"type": "http", "url": fixture.url()}});
    let ws = Workspace::new();
    let (first, _updates) = engine(&ws, servers.clone());
    needs_sign_in(&first, "s").await;
    let credential = sign_in(&first, "s").await;
    connected(&first, "s").await;
    first.close().await;

    // The authorization server ended every access token; the refresh token still works.
    oauth.expire_access_tokens();
    let refused_before = oauth.refused_requests();
    let (second, mut updates) = engine(&ws, servers);
    second.restore_sign_in("s", credential.clone());
    let update = next_update(&mut updates).await;
    let renewed = update.credential.expect("renewed after the 401");
    assert_ne!(renewed.access_token, credential.access_token);
    let report = connected(&second, "s").await;
    assert!(oauth.refused_requests() > refused_before);
    assert_no_token(&report, &credential);
    assert_no_token(&report, &renewed);
    second.close().await;
    fixture.shutdown().await;
}

#[tokio::test]
async fn a_sign_in_that_cannot_be_renewed_is_dropped_and_a_person_is_asked_again() {
    let (revoked, revoked_oauth) = oauth_fixture(OAuthConfig::default()).await;
    let (unrenewable, unrenewable_oauth) = oauth_fixture(OAuthConfig {
        refresh_tokens: false,
        ..OAuthConfig::default()
    })
    .await;
    let servers = json!({
        "revoked": {"type": "http", "url": revoked.url()},
        "unrenewable": {"type": "http", "url": unrenewable.url()},
    });
    let ws = Workspace::new();
    let (first, _updates) = engine(&ws, servers.clone());
    needs_sign_in(&first, "revoked").await;
    needs_sign_in(&first, "unrenewable").await;
    let revoked_credential = sign_in(&first, "revoked").await;
    let unrenewable_credential = sign_in(&first, "unrenewable").await;
    assert_eq!(unrenewable_credential.refresh_token, None);
    first.close().await;

    revoked_oauth.expire_access_tokens();
    revoked_oauth.revoke_refresh_tokens();
    unrenewable_oauth.expire_access_tokens();
    let (second, mut updates) = engine(&ws, servers);
    second.restore_sign_in("revoked", revoked_credential.clone());
    second.restore_sign_in("unrenewable", unrenewable_credential.clone());
    let mut dropped = vec![
        next_update(&mut updates).await,
        next_update(&mut updates).await,
    ];
    dropped.sort_by(|a, b| a.server.cmp(&b.server));
    assert_eq!(
        dropped,
        [
            SignInUpdate {
                server: "revoked".into(),
                credential: None
            },
            SignInUpdate {
                server: "unrenewable".into(),
                credential: None
            },
        ]
    );
    let mut rx = second.subscribe();
    let report = wait_for(&mut rx, "both asking a person again", |report| {
        ["revoked", "unrenewable"].iter().all(|name| {
            report.server(name).is_some_and(|s| {
                s.needs_authorization
                    && s.error
                        .as_deref()
                        .is_some_and(|e| e.contains("a person must sign in again"))
            })
        })
    })
    .await;
    assert!(
        server(&report, "revoked")
            .error
            .as_deref()
            .is_some_and(|e| e.contains("refused to renew it")),
        "{report:#?}"
    );
    assert!(
        server(&report, "unrenewable")
            .error
            .as_deref()
            .is_some_and(|e| e.contains("issued no refresh token")),
        "{report:#?}"
    );
    assert_no_token(&report, &revoked_credential);
    assert_no_token(&report, &unrenewable_credential);
    assert!(second.refused_access().contains_key("revoked"));
    second.close().await;
    revoked.shutdown().await;
    unrenewable.shutdown().await;
}

#[tokio::test]
async fn a_sign_in_needs_an_http_server_that_a_person_signs_in_to() {
    let ws = Workspace::new();
    let (engine, _updates) = engine(
        &ws,
        json!({
            "local": fixture_entry(&FixtureConfig::new()),
            "machine": {
                "type": "http",
                "url": "http://127.0.0.1:1/mcp",
                "oauth": {"clientId": "c", "clientSecret": "machine-secret-1", "grant": "client_credentials"},
            },
        }),
    );
    complete(&engine).await;
    // The agent runs these on its own tasks.
    fn sendable<T: Send>(future: T) -> T {
        future
    }
    for (server, expect) in [
        ("local", "runs as a process on stdio"),
        ("machine", "no person needs to sign in"),
        ("nobody", "no server is named \"nobody\""),
    ] {
        let error = sendable(engine.begin_sign_in(server, REDIRECT_URI, None))
            .await
            .expect_err("refused");
        assert!(error.contains(expect), "{server}: {error}");
        ctxsync_test_support::assert_in_words(&error);
        let error = sendable(engine.finish_sign_in(server, "{}", "code", None))
            .await
            .expect_err("refused");
        assert!(error.contains(expect), "{server}: {error}");
    }
    engine.close().await;
}
