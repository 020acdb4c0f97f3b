//! The agent listener's generic gRPC services, which answer without a token so load
//! balancers, Kubernetes and `grpcurl` can use them: the standard health service
//! (`grpc.health.v1.Health`) and server reflection (v1 and v1alpha).
//!
//! Health follows the database: a background task asks it every interval (the same
//! query as `/healthz`, without `/healthz`'s one-second cache) and reports
//! `SERVING` or `NOT_SERVING` for the server (`""`) and for [`AGENT_SERVICE`]. When the
//! server starts to stop, both turn `NOT_SERVING` before requests drain, so a balancer
//! moves agents away first. Reflection describes only what is public anyway: the agent
//! proto, health and reflection itself.

use std::time::Duration;

use anyhow::{Context, Result};
use ctxsync_persistence::Store;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::http::bounds::database_answers;

/// The agent service's fully-qualified name, as health checks and reflection name it.
pub const AGENT_SERVICE: &str = "ctxsync.agent.v1.Agent";

/// How often the health service asks the database by default.
pub const DEFAULT_HEALTH_INTERVAL: Duration = Duration::from_secs(2);

/// The probe services, to serve beside the agent service.
#[derive(Debug)]
pub struct Probes {
    /// Health, reflection v1 and reflection v1alpha.
    pub routes: tonic::service::Routes,
    /// Keeps the health status following the database until the server stops.
    pub monitor: JoinHandle<()>,
}

/// Builds the probe services, asks the database once so health is known from the first
/// request, and starts the task that keeps it current.
pub async fn start(
    store: Store,
    interval: Duration,
    stopping: watch::Receiver<bool>,
) -> Result<Probes> {
    let reporter = HealthReporter::new();
    let health = tonic_health::pb::health_server::HealthServer::new(
        tonic_health::server::HealthService::from_health_reporter(reporter.clone()),
    );
    let routes = tonic::service::Routes::new(health)
        .add_service(
            reflection(tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET)
                .build_v1()
                .context("building gRPC reflection (v1)")?,
        )
        .add_service(
            reflection(tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET)
                .build_v1alpha()
                .context("building gRPC reflection (v1alpha)")?,
        );
    let first = database_status(&store).await;
    report(&reporter, first).await;
    let monitor = tokio::spawn(follow_database(reporter, first, store, interval, stopping));
    Ok(Probes { routes, monitor })
}

/// Both versions list every service served, the other reflection version included
/// (each builder adds its own).
fn reflection(other_version: &'static [u8]) -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(ctxsync_protocol::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(other_version)
}

async fn database_status(store: &Store) -> ServingStatus {
    if database_answers(store).await {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    }
}

async fn follow_database(
    reporter: HealthReporter,
    mut reported: ServingStatus,
    store: Store,
    interval: Duration,
    mut stopping: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            _ = stopping.wait_for(|stop| *stop) => break,
        }
        let status = database_status(&store).await;
        if status != reported {
            tracing::info!(%status, "gRPC health changed with the database");
            report(&reporter, status).await;
            reported = status;
        }
    }
    report(&reporter, ServingStatus::NotServing).await;
    // A Watch stream never ends by itself and would hold the drain for the whole grace:
    // replacing the entries ends the open ones (each saw NOT_SERVING first), and Check
    // still answers NOT_SERVING while requests drain.
    let mut reporter = reporter;
    for service in ["", AGENT_SERVICE] {
        reporter.clear_service_status(service).await;
        reporter
            .set_service_status(service, ServingStatus::NotServing)
            .await;
    }
}

async fn report(reporter: &HealthReporter, status: ServingStatus) {
    reporter.set_service_status("", status).await;
    reporter.set_service_status(AGENT_SERVICE, status).await;
}
