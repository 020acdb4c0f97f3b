//! The agent listener's generic gRPC services, asked the way operators' tools ask them:
//! grpcio's health and reflection clients in Python (`tests/py/grpc_probes.py`) with no
//! token, while an agent RPC without a token is still refused; and a stopping server
//! turning health NOT_SERVING for an open Watch, which then ends so the drain does not
//! wait for it. (Health following a PostgreSQL outage is in `faults.rs`.)

use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use support::*;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

#[tokio::test]
async fn grpcio_clients_check_health_and_read_the_agent_service_by_reflection() {
    let h = Harness::start(TestBackend::Sqlite)
        .await
        .expect("a SQLite server");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py/grpc_probes.py");
    let output = tokio::process::Command::new(python())
        .arg(script)
        .arg(h.server.grpc_addr.to_string())
        .output()
        .await
        .expect("Python runs");
    assert!(
        output.status.success(),
        "the grpcio clients failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let answers: Value = serde_json::from_slice(&output.stdout).expect("the script's JSON");

    assert_eq!(
        answers["health"],
        json!({
            "": "SERVING",
            "ctxsync.agent.v1.Agent": "SERVING",
            "no.such.Service": "NOT_FOUND",
        })
    );
    let services = json!([
        "ctxsync.agent.v1.Agent",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
        "grpc.reflection.v1alpha.ServerReflection",
    ]);
    assert_eq!(answers["services_v1"], services);
    assert_eq!(answers["services_v1alpha"], services);
    let agent = &answers["agent"];
    assert_eq!(
        agent["methods"],
        json!(["PushContextState", "ToolCalls", "UpdateStartup"])
    );
    assert_eq!(agent["file"], "ctxsync/agent/v1/agent.proto");
    assert_eq!(
        agent["push_input"],
        "ctxsync.agent.v1.PushContextStateRequest"
    );
    let fields = agent["push_input_fields"].as_array().unwrap();
    assert!(
        fields.iter().any(|f| f == "resources") && fields.iter().any(|f| f == "delta"),
        "the request's fields come from the served descriptors: {fields:?}"
    );
    assert_eq!(
        answers["unauthenticated"], "UNAUTHENTICATED",
        "the probes are open, the agent service is not"
    );
}

#[tokio::test]
async fn a_stopping_server_reports_not_serving_then_ends_open_watches() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = ctxsync::server::ServerConfig::ephemeral(dir.path());
    config.api_token = Some("test-api-token-0123456789".into());
    // A drain that waited for the Watch stream would take the whole grace.
    config.limits.shutdown_grace = Duration::from_secs(120);
    config.health_interval = Duration::from_millis(50);
    let server = ctxsync::server::start(config).await.expect("server starts");

    let channel = tonic::transport::Endpoint::from_shared(server.agent_url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = HealthClient::new(channel);
    let request = || HealthCheckRequest {
        service: "ctxsync.agent.v1.Agent".into(),
    };
    let mut watch = client.watch(request()).await.unwrap().into_inner();
    let first = watch.message().await.unwrap().expect("a first status");
    assert_eq!(first.status(), ServingStatus::Serving);

    let stopping = tokio::spawn(server.shutdown());
    let next = tokio::time::timeout(Duration::from_secs(30), watch.message())
        .await
        .expect("the watch hears of the stop")
        .expect("a status, not an error");
    assert_eq!(
        next.map(|m| m.status()),
        Some(ServingStatus::NotServing),
        "NOT_SERVING arrives before the stream ends"
    );
    let end = tokio::time::timeout(Duration::from_secs(30), watch.message())
        .await
        .expect("the watch ends");
    assert!(
        matches!(end, Ok(None) | Err(_)),
        "no further status after NOT_SERVING: {end:?}"
    );
    tokio::time::timeout(Duration::from_secs(30), stopping)
        .await
        .expect("the drain finishes far inside the 120 s grace")
        .unwrap();
}
