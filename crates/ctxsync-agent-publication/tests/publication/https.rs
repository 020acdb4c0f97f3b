//! The publisher over `https://` against a real TLS server: a certificate from a CA given
//! in `ca_cert_files` is trusted and the token travels inside TLS; a certificate from any
//! other CA is refused before a single request is sent, and retried.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use ctxsync_agent_publication::{ConnectionState, Publisher};
use ctxsync_test_support::TestCa;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use support::{FakeServer, Recorder, TOKEN, WAIT, Workspace, config};

/// A CA's PEM and a server configuration for `localhost` signed by it.
fn ca_and_server(name: &str) -> (String, Arc<rustls::ServerConfig>) {
    let ca = TestCa::new(name);
    let (leaf, key) = ca.server_cert(&["localhost"]);
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut server = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from_pem_slice(leaf.as_bytes()).unwrap()],
            PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
        )
        .unwrap();
    server.alpn_protocols = vec![b"h2".to_vec()];
    (ca.pem().to_owned(), Arc::new(server))
}

#[tokio::test]
async fn a_certificate_from_a_given_ca_is_trusted() {
    let (ca, server_config) = ca_and_server("test CA");
    let server = FakeServer::start_tls(Recorder::new(), server_config).await;
    let ws = Workspace::new();
    ws.write("AGENTS.md", "over tls");
    let ca_file = ws.write("ca.pem", &ca);
    let mut cfg = config(
        &format!("https://localhost:{}", server.addr.port()),
        &ws.path(),
    );
    cfg.ca_cert_files = vec![ca_file];
    let running = tokio::spawn(Publisher::new(cfg, None).unwrap().run());

    let pushes = server.recorder.wait_for_pushes(1).await;
    assert!(pushes[0].resources.iter().any(|r| r.source == "AGENTS.md"));
    let calls = server.recorder.calls();
    let support::Call::Startup { authorization, .. } = &calls[0] else {
        panic!("registration comes first: {calls:?}");
    };
    assert_eq!(
        authorization.as_deref(),
        Some(format!("Bearer {TOKEN}").as_str())
    );
    running.abort();
}

#[tokio::test]
async fn a_certificate_from_another_ca_is_refused_and_retried() {
    let (_, server_config) = ca_and_server("the server's CA");
    let (other_ca, _) = ca_and_server("another CA");
    let server = FakeServer::start_tls(Recorder::new(), server_config).await;
    let ws = Workspace::new();
    ws.write("AGENTS.md", "never sent");
    let ca_file = ws.write("other-ca.pem", &other_ca);
    let mut cfg = config(
        &format!("https://localhost:{}", server.addr.port()),
        &ws.path(),
    );
    cfg.ca_cert_files = vec![ca_file];
    let publisher = Publisher::new(cfg, None).unwrap();
    let mut status = publisher.status();
    let running = tokio::spawn(publisher.run());

    // Several attempts (the backoff is 10..80 ms), none of which reaches the service.
    for _ in 0..3 {
        tokio::time::timeout(
            WAIT,
            status.wait_for(|s| s.connection == ConnectionState::WaitingToRetry),
        )
        .await
        .expect("a refused certificate is a retried failure")
        .unwrap();
        tokio::time::timeout(
            WAIT,
            status.wait_for(|s| s.connection == ConnectionState::Connecting),
        )
        .await
        .expect("retried")
        .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        server.recorder.calls().is_empty(),
        "nothing crossed an untrusted connection"
    );
    assert!(
        !running.is_finished(),
        "a refused certificate never stops the publisher"
    );
    running.abort();
}
