//! Test support (cargo feature `test-support`) for this crate and the layers above: the
//! agent API served on loopback over a test store, a client for it, and bearer metadata.

use std::net::SocketAddr;

use ctxsync_persistence::Store;
use ctxsync_protocol::v1::agent_client::AgentClient;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

use crate::metrics::{AgentApiCounters, AgentApiMetrics};
use crate::service::{AgentApi, MAX_REQUEST_BYTES};

/// HTTP/2 flow-control windows large enough that a snapshot of several MiB crosses
/// loopback without waiting for window updates (h2's default is 64 KiB).
const STREAM_WINDOW_BYTES: u32 = 4 * 1024 * 1024;
const CONNECTION_WINDOW_BYTES: u32 = 8 * 1024 * 1024;

/// The agent API served on `127.0.0.1:<ephemeral>`; shut down on drop.
#[derive(Debug)]
pub struct TestAgentApi {
    addr: SocketAddr,
    metrics: std::sync::Arc<AgentApiMetrics>,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

/// Serves [`AgentApi`] for `store` on loopback.
pub async fn serve_agent_api(store: Store) -> TestAgentApi {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding a loopback port");
    let addr = listener.local_addr().expect("bound address");
    let api = AgentApi::new(store);
    let metrics = api.metrics();
    let (shutdown, signal) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let result = tonic::transport::Server::builder()
            .initial_stream_window_size(STREAM_WINDOW_BYTES)
            .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
            .add_service(api.into_server())
            .serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                async {
                    let _ = signal.await;
                },
            )
            .await;
        if let Err(error) = result {
            eprintln!("test agent API server failed: {error}");
        }
    });
    TestAgentApi {
        addr,
        metrics,
        shutdown: Some(shutdown),
        task,
    }
}

impl TestAgentApi {
    /// The loopback address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A generated client connected to this server.
    pub async fn client(&self) -> AgentClient<Channel> {
        let channel = tonic::transport::Endpoint::from_shared(self.endpoint())
            .expect("a valid endpoint")
            .tcp_nodelay(true)
            .initial_stream_window_size(STREAM_WINDOW_BYTES)
            .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
            .connect()
            .await
            .expect("connecting to the test agent API");
        AgentClient::new(channel).max_decoding_message_size(MAX_REQUEST_BYTES)
    }

    /// The server's counters now.
    pub fn metrics(&self) -> AgentApiCounters {
        self.metrics.snapshot()
    }
}

impl Drop for TestAgentApi {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        self.task.abort();
    }
}

/// `message` with `authorization: Bearer <token>` metadata.
pub fn with_bearer<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}")
            .parse()
            .expect("a token is valid metadata"),
    );
    request
}
