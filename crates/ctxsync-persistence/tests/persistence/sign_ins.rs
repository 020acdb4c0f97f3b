//! Sign-ins on both backends: the whole path from asking to a stored credential, each
//! step a compare-and-set (of two replicas claiming, or two browsers calling back, one
//! wins); a state is good once, expires, and serves only the browser that asked; a
//! refusal fails the sign-in and drops its secrets; an agent's rate limit and clean-up;
//! deleting an agent deletes its sign-ins; no code, pending state, binding or token
//! reaches the database in plaintext.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use ctxsync_mcp_model::SignInStart;
use ctxsync_persistence::test_support::TestStore;
use ctxsync_persistence::{
    AgentId, CallbackOutcome, CallbackParams, ClaimedSignIn, CredentialSecrets, CredentialSummary,
    Keyring, MAX_SIGN_INS_PER_WINDOW, McpCredential, NewSignIn, SIGN_IN_LIFETIME, SecretsKey,
    SignInId, SignInRef, SignInStage, SignInTask, StoreError,
};
use sha2::{Digest, Sha256};

use super::credentials::{RawConn, contains, pg_dump, sqlite_bytes};

ctxsync_test_support::on_both_backends! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    open = ctxsync_test_support::store;
    a_sign_in_goes_from_asking_to_a_stored_credential,
    a_new_sign_in_replaces_the_servers_credentials,
    requests_out_of_bounds_are_refused_before_the_database,
    an_agent_is_asked_for_a_bounded_number_of_sign_ins,
    one_replica_claims_a_sign_in,
    a_state_is_good_once,
    an_expired_sign_in_refuses_its_browser,
    only_the_asking_browser_finishes_a_sign_in,
    a_refused_sign_in_fails_and_keeps_no_secret,
    no_secret_of_a_sign_in_is_stored_in_plaintext,
    deleting_an_agent_deletes_its_sign_ins,
}

const STATE: &str = "state-canary-4b1d90";
pub(crate) const PENDING: &str = "pending-canary-93ae21";
const CODE: &str = "code-canary-c07e55";
const ACCESS: &str = "access-canary-5e12a8";
pub(crate) const REFRESH: &str = "refresh-canary-77aa03";
pub(crate) const CLIENT_SECRET: &str = "client-secret-canary-0f3b";
const BROWSER: &str = "browser-binding-canary-a1";
/// Plaintext metadata: it must be found where the secrets must not, or the scan saw
/// nothing.
const VISIBLE_ACCOUNT: &str = "visible-sign-in-account-6c";
pub(crate) const SERVER: &str = "docs";
const SERVER_URL: &str = "https://mcp.example.test/mcp";
pub(crate) const ISSUER: &str = "https://auth.example.test/";
/// Far in the past, in a form both backends read as a timestamp.
const LONG_AGO: &str = "2000-01-01 00:00:00+00:00";

pub(crate) fn keys() -> Keyring {
    Keyring::new(SecretsKey::from_bytes([9; 32]))
}

async fn agent(db: &TestStore) -> AgentId {
    db.create_agent("laptop").await.expect("create agent").id
}

fn request(agent: AgentId, server: &str, browser: Option<&str>) -> NewSignIn {
    NewSignIn {
        agent,
        server_name: server.into(),
        via: "api_token".into(),
        browser: browser.map(str::to_owned),
    }
}

pub(crate) fn start(state: &str) -> SignInStart {
    SignInStart {
        authorization_url: format!("https://auth.example.test/authorize?client_id=c&state={state}"),
        state: state.into(),
        issuer: Some(ISSUER.into()),
        server_url: SERVER_URL.into(),
        pending: PENDING.into(),
    }
}

pub(crate) fn code(code: &str) -> CallbackParams {
    CallbackParams::Code {
        code: code.into(),
        iss: Some(ISSUER.into()),
    }
}

pub(crate) fn denied() -> CallbackParams {
    CallbackParams::Error {
        error: "access_denied".into(),
        description: Some("The user\ndeclined\u{7} the request.".into()),
    }
}

fn at(hour: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 7, hour, 0, 0).unwrap()
}

pub(crate) fn credential(server: &str, issuer: &str, access: &str) -> McpCredential {
    McpCredential {
        summary: CredentialSummary {
            server_name: server.into(),
            server_url: SERVER_URL.into(),
            issuer: issuer.into(),
            account: Some(VISIBLE_ACCOUNT.into()),
            scopes: "read".into(),
            access_expires_at: Some(at(11)),
            signed_in_at: at(10),
            signed_in_via: "api_token".into(),
        },
        secrets: CredentialSecrets {
            access_token: access.into(),
            refresh_token: Some(REFRESH.into()),
            token_type: "Bearer".into(),
            client_secret: Some(CLIENT_SECRET.into()),
            client_id: Some("client-7".into()),
        },
    }
}

/// A sign-in of `agent` to [`SERVER`], claimed and started with `state`.
async fn started(db: &TestStore, agent: AgentId, browser: Option<&str>, state: &str) -> SignInId {
    let id = db
        .request_sign_in(&request(agent, SERVER, browser))
        .await
        .unwrap();
    let claimed = db.claim_sign_in(id, "replica-a", &keys()).await.unwrap();
    assert_eq!(claimed.expect("claimable").task, SignInTask::Begin);
    assert!(
        db.sign_in_started(id, &start(state), &keys())
            .await
            .unwrap()
    );
    id
}

async fn stage(db: &TestStore, id: SignInId) -> SignInStage {
    db.sign_in_status(id).await.unwrap().expect("stored").stage
}

/// The sealed nonce of sign-in `id` in hex (changes with every seal), if it has one.
fn nonce(raw: &mut RawConn, id: SignInId) -> Vec<String> {
    let hex = match raw {
        RawConn::Pg(_) => "encode(nonce, 'hex')",
        RawConn::Sqlite(_) => "lower(hex(nonce))",
    };
    raw.texts(&format!(
        "SELECT {hex} AS text FROM mcp_sign_ins WHERE id = '{id}' AND nonce IS NOT NULL"
    ))
}

/// The one text column `column` of sign-in `id`, when not NULL.
fn column(raw: &mut RawConn, id: SignInId, column: &str) -> Vec<String> {
    raw.texts(&format!(
        "SELECT CAST({column} AS TEXT) AS text FROM mcp_sign_ins \
         WHERE id = '{id}' AND {column} IS NOT NULL"
    ))
}

pub(crate) fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

async fn a_sign_in_goes_from_asking_to_a_stored_credential(db: TestStore) {
    let (agent, other) = (agent(&db).await, agent(&db).await);
    let keys = keys();
    let id = db
        .request_sign_in(&request(agent, SERVER, Some(BROWSER)))
        .await
        .unwrap();
    let status = db.sign_in_status(id).await.unwrap().expect("stored");
    assert_eq!(
        (status.agent, status.server_name.as_str(), status.stage),
        (agent, SERVER, SignInStage::Asking)
    );
    assert_eq!((status.authorization_url, status.error), (None, None));
    let left = (status.expires_at - Utc::now()).to_std().unwrap();
    assert!(
        left <= SIGN_IN_LIFETIME && left > SIGN_IN_LIFETIME - Duration::from_secs(60),
        "{left:?}"
    );
    assert_eq!(db.sign_in_tasks(&[other, agent]).await.unwrap(), vec![id]);
    assert!(db.sign_in_tasks(&[other]).await.unwrap().is_empty());
    assert!(db.sign_in_tasks(&[]).await.unwrap().is_empty());

    let claimed = db.claim_sign_in(id, "replica-a", &keys).await.unwrap();
    let expected = ClaimedSignIn {
        id,
        agent,
        server_name: SERVER.into(),
        via: "api_token".into(),
        task: SignInTask::Begin,
    };
    assert_eq!(claimed, Some(expected));
    assert!(
        db.sign_in_tasks(&[agent]).await.unwrap().is_empty(),
        "claimed"
    );

    assert!(db.sign_in_started(id, &start(STATE), &keys).await.unwrap());
    let again = db.sign_in_started(id, &start("state-2"), &keys).await;
    assert!(!again.unwrap(), "a sign-in starts once");
    let status = db.sign_in_status(id).await.unwrap().unwrap();
    assert_eq!(status.stage, SignInStage::Started);
    assert_eq!(
        status.authorization_url,
        Some(start(STATE).authorization_url)
    );
    assert!(
        db.sign_in_tasks(&[agent]).await.unwrap().is_empty(),
        "a started sign-in waits for the browser, not a replica"
    );

    let outcome = db
        .sign_in_callback(STATE, Some(BROWSER), code(CODE), &keys)
        .await
        .unwrap();
    let sign_in = SignInRef {
        id,
        agent,
        server_name: SERVER.into(),
    };
    assert_eq!(outcome, CallbackOutcome::Accepted(sign_in));
    let status = db.sign_in_status(id).await.unwrap().unwrap();
    assert_eq!(
        (status.stage, status.authorization_url),
        (SignInStage::Exchanging, None)
    );
    assert_eq!(db.sign_in_tasks(&[agent]).await.unwrap(), vec![id]);

    // A keyring that cannot open the code claims nothing.
    let wrong = Keyring::new(SecretsKey::from_bytes([8; 32]));
    let error = db.claim_sign_in(id, "replica-b", &wrong).await.unwrap_err();
    assert!(
        matches!(error, StoreError::CredentialsUnreadable { .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains(&format!("sign-in {id}")),
        "{error}"
    );
    assert_eq!(db.sign_in_tasks(&[agent]).await.unwrap(), vec![id]);

    let claimed = db.claim_sign_in(id, "replica-b", &keys).await.unwrap();
    let exchange = SignInTask::Exchange {
        pending: PENDING.into(),
        code: CODE.into(),
        iss: Some(ISSUER.into()),
    };
    assert_eq!(claimed.expect("claimable again").task, exchange);

    let saved = credential(SERVER, ISSUER, ACCESS);
    assert!(db.sign_in_completed(id, &saved, &keys).await.unwrap());
    let again = db.sign_in_completed(id, &saved, &keys).await;
    assert!(!again.unwrap(), "a sign-in completes once");
    assert_eq!(stage(&db, id).await, SignInStage::SignedIn);
    assert_eq!(
        db.agent_credentials(agent, &keys).await.unwrap(),
        vec![saved]
    );
    assert!(db.agent_credentials(other, &keys).await.unwrap().is_empty());
    assert!(db.latest_sign_in_failures(agent).await.unwrap().is_empty());
    assert!(!db.sign_in_failed(id, "too late").await.unwrap());
    assert!(db.sign_in_tasks(&[agent]).await.unwrap().is_empty());

    // Signed in, the row keeps no secret, URL or claim.
    let mut raw = RawConn::open(&db);
    for kept in [
        "key_id",
        "nonce",
        "ciphertext",
        "authorization_url",
        "claimed_by",
    ] {
        assert!(column(&mut raw, id, kept).is_empty(), "{kept} is kept");
    }
    assert_eq!(column(&mut raw, id, "state_hash"), vec![sha256_hex(STATE)]);
    assert_eq!(
        db.sign_in_status(SignInId::new_random()).await.unwrap(),
        None
    );
}

async fn a_new_sign_in_replaces_the_servers_credentials(db: TestStore) {
    let agent = agent(&db).await;
    let keys = keys();
    let older = credential(SERVER, "https://old-issuer.example.test/", "old-access");
    let mut wiki = credential("wiki", ISSUER, "wiki-access");
    wiki.summary.server_url = "https://wiki.example.test/mcp".into();
    db.save_credential(agent, &older, &keys).await.unwrap();
    db.save_credential(agent, &wiki, &keys).await.unwrap();

    let id = started(&db, agent, None, STATE).await;
    let outcome = db.sign_in_callback(STATE, None, code(CODE), &keys).await;
    assert!(matches!(outcome.unwrap(), CallbackOutcome::Accepted(_)));
    // A credential for another server than the sign-in's is refused; nothing changes.
    let error = db
        .sign_in_completed(id, &credential("wiki", ISSUER, ACCESS), &keys)
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::InvalidInput(_)), "{error:?}");
    assert!(!error.to_string().contains(ACCESS), "{error}");
    assert_eq!(stage(&db, id).await, SignInStage::Exchanging);
    assert_eq!(
        db.agent_credentials(agent, &keys).await.unwrap(),
        vec![older, wiki.clone()]
    );

    let new = credential(SERVER, ISSUER, ACCESS);
    assert!(db.sign_in_completed(id, &new, &keys).await.unwrap());
    assert_eq!(
        db.agent_credentials(agent, &keys).await.unwrap(),
        vec![new, wiki.clone()],
        "the server's credential under its old issuer is gone"
    );
    assert_eq!(
        db.forget_server_credentials(agent, SERVER, "api_token")
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        db.forget_server_credentials(agent, SERVER, "api_token")
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        db.agent_credentials(agent, &keys).await.unwrap(),
        vec![wiki]
    );
}

async fn requests_out_of_bounds_are_refused_before_the_database(db: TestStore) {
    let agent = agent(&db).await;
    let chat = format!("chat:{}", uuid::Uuid::new_v4());
    let ok = NewSignIn {
        via: chat.clone(),
        ..request(agent, SERVER, Some(BROWSER))
    };
    db.request_sign_in(&ok).await.unwrap();
    let long_binding = "b".repeat(1025);
    let bad = [
        request(agent, "", None),
        request(agent, &"s".repeat(1025), None),
        NewSignIn {
            via: "web".into(),
            ..ok.clone()
        },
        NewSignIn {
            via: "chat:not-a-uuid".into(),
            ..ok.clone()
        },
        NewSignIn {
            via: format!("{chat}x"),
            ..ok.clone()
        },
        request(agent, SERVER, Some("")),
        request(agent, SERVER, Some(long_binding.as_str())),
    ];
    for request in bad {
        let error = db.request_sign_in(&request).await.unwrap_err();
        assert!(matches!(error, StoreError::InvalidInput(_)), "{error:?}");
        assert!(!error.to_string().contains("bbbb"), "{error}");
    }
    let unknown = db
        .request_sign_in(&request(AgentId::new_random(), SERVER, None))
        .await
        .unwrap_err();
    assert!(
        matches!(unknown, StoreError::AgentNotFound(_)),
        "{unknown:?}"
    );

    // A start out of bounds leaves the sign-in asking.
    let id = db
        .request_sign_in(&request(agent, SERVER, None))
        .await
        .unwrap();
    let long_url = SignInStart {
        authorization_url: format!("https://a.test/?{}", "q".repeat(8192)),
        ..start(STATE)
    };
    let no_state = SignInStart {
        state: String::new(),
        ..start(STATE)
    };
    let long_server = SignInStart {
        server_url: format!("https://a.test/{}", "p".repeat(2048)),
        ..start(STATE)
    };
    for bad in [long_url, no_state, long_server] {
        let error = db.sign_in_started(id, &bad, &keys()).await.unwrap_err();
        assert!(matches!(error, StoreError::InvalidInput(_)), "{error:?}");
        assert!(!error.to_string().contains(PENDING), "{error}");
    }
    assert_eq!(stage(&db, id).await, SignInStage::Asking);
    let error = db.claim_sign_in(id, "", &keys()).await.unwrap_err();
    assert!(matches!(error, StoreError::InvalidInput(_)), "{error:?}");

    // Two sign-ins cannot share a state.
    assert!(
        db.sign_in_started(id, &start(STATE), &keys())
            .await
            .unwrap()
    );
    let twin = db
        .request_sign_in(&request(agent, SERVER, None))
        .await
        .unwrap();
    let error = db
        .sign_in_started(twin, &start(STATE), &keys())
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::InvalidInput(_)), "{error:?}");
    assert!(error.to_string().contains("state"), "{error}");
    assert!(!error.to_string().contains(STATE), "{error}");
    assert_eq!(stage(&db, twin).await, SignInStage::Asking);
}

async fn an_agent_is_asked_for_a_bounded_number_of_sign_ins(db: TestStore) {
    let (agent, other) = (agent(&db).await, agent(&db).await);
    for _ in 0..MAX_SIGN_INS_PER_WINDOW {
        db.request_sign_in(&request(agent, SERVER, None))
            .await
            .unwrap();
    }
    let error = db
        .request_sign_in(&request(agent, SERVER, None))
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::LimitReached(_)), "{error:?}");
    let text = error.to_string();
    assert!(
        text.contains("20 sign-ins within the last 60 seconds"),
        "{text}"
    );
    assert!(text.contains(&agent.to_string()), "{text}");
    let mut raw = RawConn::open(&db);
    let rows = |raw: &mut RawConn, agent: AgentId| {
        raw.texts(&format!(
            "SELECT CAST(id AS TEXT) AS text FROM mcp_sign_ins WHERE agent_id = '{agent}'"
        ))
        .len()
    };
    assert_eq!(rows(&mut raw, agent), 20, "the refused one is not stored");
    // Another agent has its own limit.
    db.request_sign_in(&request(other, SERVER, None))
        .await
        .unwrap();

    // Asked for over a minute ago, they no longer count.
    raw.execute(&format!(
        "UPDATE mcp_sign_ins SET created_at = '{LONG_AGO}' WHERE agent_id = '{agent}'"
    ));
    let fresh = db
        .request_sign_in(&request(agent, SERVER, None))
        .await
        .unwrap();
    assert_eq!(rows(&mut raw, agent), 21);

    // Expired for over an hour, they are deleted when the agent is asked for the next; one
    // expired just now is kept, and so is the other agent's.
    raw.execute(&format!(
        "UPDATE mcp_sign_ins SET expires_at = '{LONG_AGO}' \
         WHERE agent_id = '{agent}' AND id <> '{fresh}'"
    ));
    raw.execute(&format!(
        "UPDATE mcp_sign_ins SET expires_at = created_at WHERE id = '{fresh}'"
    ));
    raw.execute(&format!(
        "UPDATE mcp_sign_ins SET expires_at = '{LONG_AGO}' WHERE agent_id = '{other}'"
    ));
    let newest = db
        .request_sign_in(&request(agent, SERVER, None))
        .await
        .unwrap();
    let mut left = raw.texts(&format!(
        "SELECT CAST(id AS TEXT) AS text FROM mcp_sign_ins WHERE agent_id = '{agent}'"
    ));
    left.sort();
    let mut expected = vec![fresh.to_string(), newest.to_string()];
    expected.sort();
    assert_eq!(left, expected);
    assert_eq!(rows(&mut raw, other), 1);

    // Asked for all at once (from two stores, as from two replicas), the limit still holds.
    let busy = db.create_agent("busy").await.unwrap().id;
    let second = db.open_another().await;
    let mut requests = tokio::task::JoinSet::new();
    for n in 0..30 {
        let store = if n % 2 == 0 {
            db.store().clone()
        } else {
            second.clone()
        };
        requests.spawn(async move { store.request_sign_in(&request(busy, SERVER, None)).await });
    }
    let (mut granted, mut limited) = (0, 0);
    while let Some(answer) = requests.join_next().await {
        match answer.unwrap() {
            Ok(_) => granted += 1,
            Err(StoreError::LimitReached(_)) => limited += 1,
            Err(other) => panic!("{other:?}"),
        }
    }
    assert_eq!((granted, limited), (MAX_SIGN_INS_PER_WINDOW, 10));
    assert_eq!(rows(&mut raw, busy), 20);
}

async fn one_replica_claims_a_sign_in(db: TestStore) {
    let agent = agent(&db).await;
    let second = db.open_another().await;
    let keys = keys();
    let mut raw = RawConn::open(&db);
    for _ in 0..4 {
        let id = db
            .request_sign_in(&request(agent, SERVER, None))
            .await
            .unwrap();
        let (a, b) = tokio::join!(
            db.claim_sign_in(id, "replica-a", &keys),
            second.claim_sign_in(id, "replica-b", &keys)
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        let winner = match (&a, &b) {
            (Some(_), None) => "replica-a",
            (None, Some(_)) => "replica-b",
            _ => panic!("exactly one claim wins: {a:?} {b:?}"),
        };
        assert_eq!(column(&mut raw, id, "claimed_by"), vec![winner]);
        assert_eq!(
            db.claim_sign_in(id, "replica-c", &keys).await.unwrap(),
            None
        );

        // A claim over 30 s old is a replica that died: the sign-in is a task again.
        raw.execute(&format!(
            "UPDATE mcp_sign_ins SET claimed_at = '{LONG_AGO}' WHERE id = '{id}'"
        ));
        assert_eq!(db.sign_in_tasks(&[agent]).await.unwrap(), vec![id]);
        let claimed = db.claim_sign_in(id, "replica-c", &keys).await.unwrap();
        assert_eq!(claimed.map(|c| c.task), Some(SignInTask::Begin));
        assert_eq!(column(&mut raw, id, "claimed_by"), vec!["replica-c"]);

        // A failed sign-in is nobody's task.
        assert!(db.sign_in_failed(id, "the agent went away").await.unwrap());
        assert!(db.sign_in_tasks(&[agent]).await.unwrap().is_empty());
        assert_eq!(
            db.claim_sign_in(id, "replica-a", &keys).await.unwrap(),
            None
        );
        assert!(column(&mut raw, id, "claimed_by").is_empty());
    }
}

async fn a_state_is_good_once(db: TestStore) {
    let agent = agent(&db).await;
    let keys = keys();
    let id = started(&db, agent, None, STATE).await;
    for unknown in ["state-unknown", "", &"s".repeat(4096)] {
        let outcome = db.sign_in_callback(unknown, None, code(CODE), &keys).await;
        assert_eq!(outcome.unwrap(), CallbackOutcome::Unknown);
    }

    // Two browsers back with one state at once: one is taken.
    let second = db.open_another().await;
    let (a, b) = tokio::join!(
        db.sign_in_callback(STATE, None, code("code-a"), &keys),
        second.sign_in_callback(STATE, None, code("code-b"), &keys)
    );
    let taken = match (a.unwrap(), b.unwrap()) {
        (CallbackOutcome::Accepted(_), CallbackOutcome::Used) => "code-a",
        (CallbackOutcome::Used, CallbackOutcome::Accepted(_)) => "code-b",
        other => panic!("exactly one callback is taken: {other:?}"),
    };

    // A replay stores nothing, with a code or an error.
    let mut raw = RawConn::open(&db);
    let sealed = nonce(&mut raw, id);
    assert_eq!(sealed.len(), 1);
    for replay in [code(CODE), denied()] {
        let outcome = db.sign_in_callback(STATE, None, replay, &keys).await;
        assert_eq!(outcome.unwrap(), CallbackOutcome::Used);
    }
    assert_eq!(nonce(&mut raw, id), sealed, "a replay reseals nothing");
    assert_eq!(stage(&db, id).await, SignInStage::Exchanging);
    let claimed = db.claim_sign_in(id, "replica-a", &keys).await.unwrap();
    match claimed.expect("claimable").task {
        SignInTask::Exchange { code, .. } => assert_eq!(code.expose(), taken),
        other => panic!("{other:?}"),
    }
    // Ended, it is still used.
    assert!(db.sign_in_failed(id, "the exchange failed").await.unwrap());
    let outcome = db.sign_in_callback(STATE, None, code(CODE), &keys).await;
    assert_eq!(outcome.unwrap(), CallbackOutcome::Used);
}

async fn an_expired_sign_in_refuses_its_browser(db: TestStore) {
    let agent = agent(&db).await;
    let keys = keys();
    let id = started(&db, agent, None, STATE).await;
    let mut raw = RawConn::open(&db);
    let sealed = nonce(&mut raw, id);
    raw.execute(&format!(
        "UPDATE mcp_sign_ins SET expires_at = '{LONG_AGO}' WHERE id = '{id}'"
    ));
    for params in [code(CODE), denied()] {
        let outcome = db.sign_in_callback(STATE, None, params, &keys).await;
        assert_eq!(outcome.unwrap(), CallbackOutcome::Expired);
    }
    let status = db.sign_in_status(id).await.unwrap().unwrap();
    assert_eq!(status.stage, SignInStage::Started);
    assert!(status.expires_at < Utc::now(), "{:?}", status.expires_at);
    assert_eq!(nonce(&mut raw, id), sealed, "nothing stored");

    // An expired request is nobody's task either.
    let asking = db
        .request_sign_in(&request(agent, SERVER, None))
        .await
        .unwrap();
    assert_eq!(db.sign_in_tasks(&[agent]).await.unwrap(), vec![asking]);
    raw.execute(&format!(
        "UPDATE mcp_sign_ins SET expires_at = '{LONG_AGO}' WHERE id = '{asking}'"
    ));
    assert!(db.sign_in_tasks(&[agent]).await.unwrap().is_empty());
    assert_eq!(
        db.claim_sign_in(asking, "replica-a", &keys).await.unwrap(),
        None
    );
}

async fn only_the_asking_browser_finishes_a_sign_in(db: TestStore) {
    let agent = agent(&db).await;
    let keys = keys();
    let id = started(&db, agent, Some(BROWSER), STATE).await;
    let mut raw = RawConn::open(&db);
    // Only the binding's hash is stored.
    assert_eq!(column(&mut raw, id, "browser"), vec![sha256_hex(BROWSER)]);
    let sealed = nonce(&mut raw, id);
    for browser in [Some("browser-binding-b"), None] {
        for params in [code(CODE), denied()] {
            let outcome = db.sign_in_callback(STATE, browser, params, &keys).await;
            assert_eq!(
                outcome.unwrap(),
                CallbackOutcome::OtherBrowser,
                "{browser:?}"
            );
        }
    }
    assert_eq!(stage(&db, id).await, SignInStage::Started);
    assert_eq!(nonce(&mut raw, id), sealed, "nothing stored");
    let outcome = db
        .sign_in_callback(STATE, Some(BROWSER), code(CODE), &keys)
        .await;
    assert!(matches!(outcome.unwrap(), CallbackOutcome::Accepted(_)));

    // A sign-in no browser asked for takes any.
    let open = started(&db, agent, None, "state-open").await;
    let outcome = db
        .sign_in_callback("state-open", Some("any-browser"), code(CODE), &keys)
        .await
        .unwrap();
    let expected = SignInRef {
        id: open,
        agent,
        server_name: SERVER.into(),
    };
    assert_eq!(outcome, CallbackOutcome::Accepted(expected));
}

async fn a_refused_sign_in_fails_and_keeps_no_secret(db: TestStore) {
    let agent = agent(&db).await;
    let keys = keys();
    let id = started(&db, agent, Some(BROWSER), STATE).await;
    let outcome = db
        .sign_in_callback(STATE, Some(BROWSER), denied(), &keys)
        .await
        .unwrap();
    let sign_in = SignInRef {
        id,
        agent,
        server_name: SERVER.into(),
    };
    assert_eq!(outcome, CallbackOutcome::Refused(sign_in));
    let refusal = "the authorization server refused the sign-in: access_denied: The user declined the \
         request.";
    let status = db.sign_in_status(id).await.unwrap().unwrap();
    assert_eq!(status.stage, SignInStage::Failed);
    assert_eq!(status.error.as_deref(), Some(refusal));
    assert_eq!(status.authorization_url, None);
    let mut raw = RawConn::open(&db);
    for kept in ["key_id", "nonce", "ciphertext", "authorization_url"] {
        assert!(column(&mut raw, id, kept).is_empty(), "{kept} is kept");
    }
    assert!(!db.sign_in_failed(id, "again").await.unwrap());
    assert_eq!(
        db.claim_sign_in(id, "replica-a", &keys).await.unwrap(),
        None
    );

    // The agent's failure, on one line and cut at a character boundary.
    let wiki = db
        .request_sign_in(&request(agent, "wiki", None))
        .await
        .unwrap();
    let long = format!("{}\nmore", "é".repeat(1500));
    assert!(db.sign_in_failed(wiki, &long).await.unwrap());
    let error = db
        .sign_in_status(wiki)
        .await
        .unwrap()
        .unwrap()
        .error
        .unwrap();
    assert_eq!(error, "é".repeat(1024));

    let failures = db.latest_sign_in_failures(agent).await.unwrap();
    let named: Vec<(&str, &str)> = failures
        .iter()
        .map(|(server, error, _)| (server.as_str(), error.as_str()))
        .collect();
    assert_eq!(named, vec![(SERVER, refusal), ("wiki", error.as_str())]);
    let when = failures[0].2;
    assert!((Utc::now() - when).num_seconds().abs() < 60, "{when}");

    // A newer sign-in to the server hides the older failure.
    db.request_sign_in(&request(agent, SERVER, None))
        .await
        .unwrap();
    let failures = db.latest_sign_in_failures(agent).await.unwrap();
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].0, "wiki");
}

async fn no_secret_of_a_sign_in_is_stored_in_plaintext(db: TestStore) {
    let agent = agent(&db).await;
    let keys = keys();
    let scan = |db: &TestStore| -> Option<Vec<u8>> {
        match (db.sqlite_data_dir(), db.postgres_database()) {
            (Some(dir), _) => Some(sqlite_bytes(dir)),
            (None, Some(database)) => pg_dump(database.url()),
            (None, None) => unreachable!("a test store is on one backend"),
        }
    };
    let check = |stored: &[u8], secrets: &[&str]| {
        for secret in secrets {
            assert!(
                !contains(stored, secret.as_bytes()),
                "{secret} is stored in plaintext"
            );
        }
    };

    let id = started(&db, agent, Some(BROWSER), STATE).await;
    let outcome = db
        .sign_in_callback(STATE, Some(BROWSER), code(CODE), &keys)
        .await
        .unwrap();
    assert!(matches!(outcome, CallbackOutcome::Accepted(_)));
    // Waiting for the exchange: the code and the pending state are sealed.
    let Some(stored) = scan(&db) else {
        return;
    };
    assert!(
        contains(&stored, sha256_hex(STATE).as_bytes()),
        "the scan must see the state's hash ({} bytes scanned)",
        stored.len()
    );
    check(&stored, &[CODE, PENDING, BROWSER]);

    let claimed = db.claim_sign_in(id, "replica-a", &keys).await.unwrap();
    assert!(matches!(
        claimed.expect("claimable").task,
        SignInTask::Exchange { .. }
    ));
    let saved = credential(SERVER, ISSUER, ACCESS);
    assert!(db.sign_in_completed(id, &saved, &keys).await.unwrap());
    let stored = scan(&db).expect("scanned before");
    assert!(
        contains(&stored, VISIBLE_ACCOUNT.as_bytes()),
        "the scan must see the credential's plaintext ({} bytes scanned)",
        stored.len()
    );
    check(
        &stored,
        &[CODE, PENDING, BROWSER, ACCESS, REFRESH, CLIENT_SECRET],
    );
}

async fn deleting_an_agent_deletes_its_sign_ins(db: TestStore) {
    let (gone, kept) = (agent(&db).await, agent(&db).await);
    let started_gone = started(&db, gone, None, STATE).await;
    let asking_gone = db
        .request_sign_in(&request(gone, SERVER, None))
        .await
        .unwrap();
    let started_kept = started(&db, kept, None, "state-kept").await;
    db.delete_agent(gone).await.unwrap();
    for id in [started_gone, asking_gone] {
        assert_eq!(db.sign_in_status(id).await.unwrap(), None);
    }
    assert_eq!(stage(&db, started_kept).await, SignInStage::Started);
    let outcome = db.sign_in_callback(STATE, None, code(CODE), &keys()).await;
    assert_eq!(outcome.unwrap(), CallbackOutcome::Unknown);
    // Gone from the table itself, not only from the store's answers.
    let mut raw = RawConn::open(&db);
    assert_eq!(
        raw.texts("SELECT CAST(agent_id AS TEXT) AS text FROM mcp_sign_ins"),
        vec![kept.to_string()]
    );
}
