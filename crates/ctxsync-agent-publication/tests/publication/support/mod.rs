//! Test support: a real in-process tonic `Agent` server on 127.0.0.1 that records every
//! call (with its `authorization` header) and answers from a script, and on `ToolCalls`
//! records what the agent sends and sends what a test scripts; temp workspaces.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctxsync_agent_publication::{BackoffPolicy, PublisherConfig, ScanConfig, Timing};
use ctxsync_protocol::tool_call::{AgentCall, ServerCall};
use ctxsync_protocol::v1::agent_server::{Agent, AgentServer};
use ctxsync_protocol::{DELTA_DIGEST_SCHEME, Push, Startup, v1};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;
use tonic::{Code, Request, Response, Status};

/// Generous bound for anything a test waits on; never reached when the code works.
pub(crate) const WAIT: Duration = Duration::from_secs(20);

/// One call the server received.
#[derive(Clone, Debug)]
pub(crate) enum Call {
    Startup {
        startup: Startup,
        authorization: Option<String>,
    },
    Push {
        request: v1::PushContextStateRequest,
        authorization: Option<String>,
    },
}

/// A `ToolCalls` stream the agent opened.
#[derive(Clone, Debug)]
pub(crate) struct StreamOpened {
    pub authorization: Option<String>,
    /// How many `UpdateStartup` calls the server had answered by then.
    pub after_startups: usize,
}

impl Call {
    pub(crate) fn push(&self) -> Option<&v1::PushContextStateRequest> {
        match self {
            Call::Push { request, .. } => Some(request),
            Call::Startup { .. } => None,
        }
    }

    pub(crate) fn startup(&self) -> Option<&Startup> {
        match self {
            Call::Startup { startup, .. } => Some(startup),
            Call::Push { .. } => None,
        }
    }
}

/// How the server answers one call.
#[derive(Clone, Debug)]
pub(crate) enum Reply {
    /// Startup echoed, or push `accepted=true`.
    Accept,
    /// Push answered `accepted=false`.
    Reject,
    Fail(Code),
    /// Waits for the notification, then accepts.
    HoldThenAccept(Arc<Notify>),
    /// Push answered `accepted=false, delta_base_missing=true`.
    DeltaBaseMissing,
}

/// The server's sending half of one `ToolCalls` stream.
type ServerHalf = mpsc::Sender<Result<v1::ServerCallMessage, Status>>;

/// What the server recorded and will answer, shared across restarts.
#[derive(Debug)]
pub(crate) struct Recorder {
    calls: watch::Sender<Vec<Call>>,
    startup_replies: Mutex<VecDeque<Reply>>,
    push_replies: Mutex<VecDeque<Reply>>,
    /// Whether UpdateStartup answers offer delta pushes (off: a server predating them).
    offer_deltas: AtomicBool,
    /// The server's half of each `ToolCalls` stream, by index; `None` once ended.
    call_streams: Mutex<Vec<Option<ServerHalf>>>,
    /// Each `ToolCalls` stream as it was opened, by index.
    streams_opened: Mutex<Vec<StreamOpened>>,
    /// What the agent sent on `ToolCalls`, with the stream's index.
    agent_messages: watch::Sender<Vec<(usize, AgentCall)>>,
    /// Agent messages that failed the protocol's validation (must stay empty).
    invalid_agent_messages: Mutex<Vec<String>>,
    /// Answer `ToolCalls` UNIMPLEMENTED, as a server predating tool calls does.
    refuse_call_streams: AtomicBool,
    /// `ToolCalls` requests received, refused ones included.
    call_stream_attempts: AtomicUsize,
}

impl Recorder {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            calls: watch::channel(Vec::new()).0,
            startup_replies: Mutex::new(VecDeque::new()),
            push_replies: Mutex::new(VecDeque::new()),
            offer_deltas: AtomicBool::new(false),
            call_streams: Mutex::new(Vec::new()),
            streams_opened: Mutex::new(Vec::new()),
            agent_messages: watch::channel(Vec::new()).0,
            invalid_agent_messages: Mutex::new(Vec::new()),
            refuse_call_streams: AtomicBool::new(false),
            call_stream_attempts: AtomicUsize::new(0),
        })
    }

    /// From now on, `ToolCalls` answers UNIMPLEMENTED (a server predating tool calls).
    pub(crate) fn refuse_call_streams(&self) {
        self.refuse_call_streams.store(true, Ordering::Relaxed);
    }

    /// `ToolCalls` requests received, refused ones included.
    pub(crate) fn call_stream_attempts(&self) -> usize {
        self.call_stream_attempts.load(Ordering::Relaxed)
    }

    /// Sends `message` on the newest open `ToolCalls` stream.
    pub(crate) async fn send_to_agent(&self, message: ServerCall) {
        let sender = self
            .call_streams
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find_map(Clone::clone)
            .expect("an open call stream");
        sender
            .send(Ok(message.into()))
            .await
            .expect("the call stream is open");
    }

    /// Ends the newest open `ToolCalls` stream (the server's half ends with OK).
    pub(crate) fn end_call_stream(&self) {
        let mut streams = self.call_streams.lock().unwrap();
        if let Some(open) = streams.iter_mut().rev().find(|s| s.is_some()) {
            *open = None;
        }
    }

    /// The `ToolCalls` streams the agent opened, by index.
    pub(crate) fn streams_opened(&self) -> Vec<StreamOpened> {
        self.streams_opened.lock().unwrap().clone()
    }

    /// Everything the agent sent on `ToolCalls`, with each stream's index; every message
    /// passed the protocol's validation.
    pub(crate) fn agent_messages(&self) -> Vec<(usize, AgentCall)> {
        let invalid = self.invalid_agent_messages.lock().unwrap();
        assert!(invalid.is_empty(), "invalid agent messages: {invalid:?}");
        self.agent_messages.borrow().clone()
    }

    /// Waits (bounded by [`WAIT`]) until the agent's messages satisfy `done`.
    pub(crate) async fn wait_for_agent(
        &self,
        what: &str,
        done: impl Fn(&[(usize, AgentCall)]) -> bool,
    ) -> Vec<(usize, AgentCall)> {
        let mut messages = self.agent_messages.subscribe();
        if tokio::time::timeout(WAIT, messages.wait_for(|m| done(m)))
            .await
            .is_err()
        {
            panic!(
                "timed out waiting for {what}; agent messages: {:#?}",
                self.agent_messages()
            );
        }
        self.agent_messages()
    }

    /// From now on, UpdateStartup answers offer delta pushes (scheme 1).
    pub(crate) fn offer_deltas(&self) {
        self.offer_deltas.store(true, Ordering::Relaxed);
    }

    /// Answers the next UpdateStartup calls with `replies`, then accepts.
    pub(crate) fn script_startup(&self, replies: impl IntoIterator<Item = Reply>) {
        self.startup_replies.lock().unwrap().extend(replies);
    }

    /// Answers the next pushes with `replies`, then accepts.
    pub(crate) fn script_push(&self, replies: impl IntoIterator<Item = Reply>) {
        self.push_replies.lock().unwrap().extend(replies);
    }

    pub(crate) fn calls(&self) -> Vec<Call> {
        self.calls.borrow().clone()
    }

    pub(crate) fn pushes(&self) -> Vec<v1::PushContextStateRequest> {
        self.calls()
            .iter()
            .filter_map(|c| c.push().cloned())
            .collect()
    }

    /// Waits (bounded by [`WAIT`]) until the recorded calls satisfy `done`.
    pub(crate) async fn wait_for(&self, what: &str, done: impl Fn(&[Call]) -> bool) -> Vec<Call> {
        let mut calls = self.calls.subscribe();
        match tokio::time::timeout(WAIT, calls.wait_for(|c| done(c))).await {
            Ok(Ok(calls)) => calls.clone(),
            _ => panic!("timed out waiting for {what}; calls: {:#?}", self.calls()),
        }
    }

    /// Waits until `n` pushes were received and returns all pushes.
    pub(crate) async fn wait_for_pushes(&self, n: usize) -> Vec<v1::PushContextStateRequest> {
        self.wait_for(&format!("{n} pushes"), |calls| {
            calls.iter().filter(|c| c.push().is_some()).count() >= n
        })
        .await;
        self.pushes()
    }

    /// Waits until some push satisfies `done` and returns the first that does. File edits
    /// are not atomic (a write truncates first), so a test waits for the state it expects
    /// rather than for the n-th push.
    pub(crate) async fn wait_for_push(
        &self,
        what: &str,
        done: impl Fn(&v1::PushContextStateRequest) -> bool,
    ) -> v1::PushContextStateRequest {
        self.wait_for(what, |calls| calls.iter().filter_map(Call::push).any(&done))
            .await;
        self.pushes().into_iter().find(|p| done(p)).unwrap()
    }

    fn record(&self, call: Call) {
        self.calls.send_modify(|calls| calls.push(call));
    }
}

fn authorization<T>(request: &Request<T>) -> Option<String> {
    request
        .metadata()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

#[derive(Debug)]
struct Service(Arc<Recorder>);

#[tonic::async_trait]
impl Agent for Service {
    async fn update_startup(
        &self,
        request: Request<v1::UpdateStartupRequest>,
    ) -> Result<Response<v1::Startup>, Status> {
        let authorization = authorization(&request);
        let startup = Startup::try_from(request.into_inner()).map_err(Status::from)?;
        self.0.record(Call::Startup {
            startup: startup.clone(),
            authorization,
        });
        let reply = self.0.startup_replies.lock().unwrap().pop_front();
        let mut answer = v1::Startup::from(startup);
        if self.0.offer_deltas.load(Ordering::Relaxed) {
            answer.delta_digest_scheme = DELTA_DIGEST_SCHEME;
        }
        match reply.unwrap_or(Reply::Accept) {
            Reply::Fail(code) => Err(Status::new(code, "scripted failure")),
            Reply::HoldThenAccept(notify) => {
                notify.notified().await;
                Ok(Response::new(answer))
            }
            Reply::Accept | Reply::Reject | Reply::DeltaBaseMissing => Ok(Response::new(answer)),
        }
    }

    async fn push_context_state(
        &self,
        request: Request<v1::PushContextStateRequest>,
    ) -> Result<Response<v1::PushContextStateResponse>, Status> {
        let authorization = authorization(&request);
        let wire = request.into_inner();
        // Validate exactly as the real server does: a push over any limit is refused whole,
        // and a delta may leave bodies out.
        let valid = Push::try_from(wire.clone());
        self.0.record(Call::Push {
            request: wire,
            authorization,
        });
        valid.map_err(Status::from)?;
        let reply = self.0.push_replies.lock().unwrap().pop_front();
        let mut delta_base_missing = false;
        let accepted = match reply.unwrap_or(Reply::Accept) {
            Reply::Accept => true,
            Reply::Reject => false,
            Reply::DeltaBaseMissing => {
                delta_base_missing = true;
                false
            }
            Reply::Fail(code) => return Err(Status::new(code, "scripted failure")),
            Reply::HoldThenAccept(notify) => {
                notify.notified().await;
                true
            }
        };
        Ok(Response::new(v1::PushContextStateResponse {
            accepted,
            delta_base_missing,
        }))
    }

    type ToolCallsStream = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = Result<v1::ServerCallMessage, Status>> + Send>,
    >;

    async fn tool_calls(
        &self,
        request: Request<tonic::Streaming<v1::AgentCallMessage>>,
    ) -> Result<Response<Self::ToolCallsStream>, Status> {
        self.0.call_stream_attempts.fetch_add(1, Ordering::Relaxed);
        if self.0.refuse_call_streams.load(Ordering::Relaxed) {
            return Err(Status::unimplemented("ToolCalls is not implemented"));
        }
        let authorization = authorization(&request);
        let mut inbound = request.into_inner();
        let (sender, outbound) = mpsc::channel(64);
        let stream = {
            let mut streams = self.0.call_streams.lock().unwrap();
            streams.push(Some(sender));
            streams.len() - 1
        };
        let after_startups = self
            .0
            .calls()
            .iter()
            .filter(|c| c.startup().is_some())
            .count();
        self.0.streams_opened.lock().unwrap().push(StreamOpened {
            authorization,
            after_startups,
        });
        let recorder = self.0.clone();
        tokio::spawn(async move {
            while let Ok(Some(message)) = inbound.message().await {
                match AgentCall::try_from(message) {
                    Ok(message) => recorder
                        .agent_messages
                        .send_modify(|all| all.push((stream, message))),
                    Err(error) => recorder
                        .invalid_agent_messages
                        .lock()
                        .unwrap()
                        .push(error.to_string()),
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(outbound),
        )))
    }
}

/// A running fake server; stop it (gracefully, closing connections) with [`Self::stop`].
#[derive(Debug)]
pub(crate) struct FakeServer {
    pub addr: SocketAddr,
    pub recorder: Arc<Recorder>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl FakeServer {
    pub(crate) async fn start(recorder: Arc<Recorder>) -> Self {
        Self::bind(recorder, "127.0.0.1:0".parse().unwrap()).await
    }

    pub(crate) async fn bind(recorder: Arc<Recorder>, addr: SocketAddr) -> Self {
        let listener = TcpListener::bind(addr).await.expect("bind the fake server");
        let addr = listener.local_addr().unwrap();
        let (shutdown, signal) = oneshot::channel::<()>();
        let service =
            AgentServer::new(Service(recorder.clone())).max_decoding_message_size(64 * 1024 * 1024);
        let task = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(TcpIncoming::from(listener), async {
                    let _ = signal.await;
                })
                .await
                .expect("fake server");
        });
        Self {
            addr,
            recorder,
            shutdown: Some(shutdown),
            task: Some(task),
        }
    }

    /// Serves over TLS with `config` (its ALPN should offer `h2`); the URL to use is
    /// `https://localhost:PORT` (the name the test certificate carries).
    pub(crate) async fn start_tls(
        recorder: Arc<Recorder>,
        config: Arc<rustls::ServerConfig>,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let (connections, incoming) = mpsc::channel(16);
        let accepting = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, connections) = (acceptor.clone(), connections.clone());
                tokio::spawn(async move {
                    // A refused handshake (the client distrusts us) just drops the socket.
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        let _ = connections.send(Ok::<_, std::io::Error>(TlsIo(tls))).await;
                    }
                });
            }
        });
        let (shutdown, signal) = oneshot::channel::<()>();
        let service = AgentServer::new(Service(recorder.clone()));
        let task = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::ReceiverStream::new(incoming),
                    async {
                        let _ = signal.await;
                    },
                )
                .await
                .expect("fake TLS server");
            accepting.abort();
        });
        Self {
            addr,
            recorder,
            shutdown: Some(shutdown),
            task: Some(task),
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops accepting and closes every connection.
    pub(crate) async fn stop(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        // A graceful shutdown waits for open streams: end the call streams.
        for stream in self.recorder.call_streams.lock().unwrap().iter_mut() {
            *stream = None;
        }
        if let Some(task) = self.task.take() {
            let _ = tokio::time::timeout(WAIT, task).await;
        }
    }

    /// Stops, then serves again on the same address with the same recorder.
    pub(crate) async fn restart(self) -> Self {
        let (addr, recorder) = (self.addr, self.recorder.clone());
        self.stop().await;
        Self::bind(recorder, addr).await
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Small, real-clock delays so tests finish fast without sleeping for real budgets.
pub(crate) fn fast_timing() -> Timing {
    Timing {
        debounce: Duration::from_millis(20),
        backoff: BackoffPolicy {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(80),
            jitter: false,
        },
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(10),
        keepalive_interval: Duration::from_secs(30),
        keepalive_timeout: Duration::from_secs(10),
        poll_interval: Duration::from_secs(1),
    }
}

pub(crate) const TOKEN: &str = "test-token-123";

pub(crate) fn config(url: &str, workspace: &Path) -> PublisherConfig {
    PublisherConfig {
        server_url: url.to_owned(),
        ca_cert_files: Vec::new(),
        token: TOKEN.to_owned(),
        agent_version: "9.9.9-test".to_owned(),
        scan: ScanConfig {
            workspace_dir: workspace.to_path_buf(),
            ..ScanConfig::default()
        },
        timing: fast_timing(),
        max_watched_dirs: ctxsync_agent_publication::DEFAULT_MAX_WATCHED_DIRS,
    }
}

pub(crate) use ctxsync_test_support::Workspace;

/// A server-side TLS connection tonic can serve (tonic only knows rustls streams with its
/// own TLS features on).
struct TlsIo(tokio_rustls::server::TlsStream<tokio::net::TcpStream>);

impl tonic::transport::server::Connected for TlsIo {
    type ConnectInfo = ();

    fn connect_info(&self) {}
}

impl tokio::io::AsyncRead for TlsIo {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for TlsIo {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
