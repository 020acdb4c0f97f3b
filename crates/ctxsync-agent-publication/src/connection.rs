//! One gRPC connection to the control plane, with the agent's bearer token on every call.
//!
//! A tonic `Channel` normally reconnects by itself, which would let a push travel on a new
//! connection that never saw `UpdateStartup`. The connector here therefore opens exactly
//! one TCP connection per channel and reports when it closes; the publisher then builds a
//! new channel and registers again before pushing.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use ctxsync_protocol::v1::agent_client::AgentClient;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tonic::codegen::http::Uri;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tower_service::Service;

use crate::error::PublishError;
use crate::publisher::Timing;

pub(crate) type Client = AgentClient<InterceptedService<Channel, BearerAuth>>;

/// Adds `authorization: Bearer <token>` to every request.
#[derive(Clone)]
pub(crate) struct BearerAuth(MetadataValue<Ascii>);

impl std::fmt::Debug for BearerAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerAuth([redacted])")
    }
}

impl BearerAuth {
    pub(crate) fn new(token: &str) -> Result<Self, PublishError> {
        let visible = !token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic());
        if !visible {
            return Err(PublishError::InvalidToken);
        }
        let mut value: MetadataValue<Ascii> = format!("Bearer {token}")
            .parse()
            .map_err(|_| PublishError::InvalidToken)?;
        value.set_sensitive(true);
        Ok(Self(value))
    }
}

impl Interceptor for BearerAuth {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        request
            .metadata_mut()
            .insert("authorization", self.0.clone());
        Ok(request)
    }
}

/// The server endpoint with the publisher's timeouts and keep-alive.
pub(crate) fn endpoint(
    url: &str,
    timing: &Timing,
    agent_version: &str,
) -> Result<Endpoint, PublishError> {
    let invalid = |reason: &str| PublishError::InvalidServerUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let endpoint = Endpoint::from_shared(url.to_owned()).map_err(|e| invalid(&e.to_string()))?;
    match endpoint.uri().scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(invalid(
                "https is not supported by this build; use http:// (loopback or a TLS-terminating proxy)",
            ));
        }
        _ => return Err(invalid("expected http://HOST:PORT")),
    }
    if endpoint.uri().host().is_none_or(str::is_empty) {
        return Err(invalid("the URL has no host"));
    }
    let endpoint = endpoint
        .connect_timeout(timing.connect_timeout)
        .timeout(timing.request_timeout)
        .http2_keep_alive_interval(timing.keepalive_interval)
        .keep_alive_timeout(timing.keepalive_timeout)
        .keep_alive_while_idle(true)
        .user_agent(format!("ctxsync-agent/{agent_version}"))
        .map_err(|e| invalid(&e.to_string()))?;
    Ok(endpoint)
}

/// An open connection: the client and a signal that fires once it has closed.
pub(crate) struct Connection {
    pub client: Client,
    closed: watch::Receiver<bool>,
}

impl Connection {
    /// Connects (bounded by the endpoint's connect timeout).
    pub(crate) async fn open(
        endpoint: &Endpoint,
        auth: BearerAuth,
    ) -> Result<Self, tonic::transport::Error> {
        let (closed_tx, closed) = watch::channel(false);
        let connector = SingleConnection {
            closed: Some(closed_tx),
        };
        let channel = endpoint.connect_with_connector(connector).await?;
        Ok(Self {
            client: AgentClient::with_interceptor(channel, auth),
            closed,
        })
    }

    /// Completes once the underlying TCP connection has been closed by either side.
    pub(crate) async fn closed(&mut self) {
        // An error means the sender is gone, which also means the connection is.
        let _ = self.closed.wait_for(|closed| *closed).await;
    }
}

/// Opens one TCP connection, then refuses to open another.
struct SingleConnection {
    closed: Option<watch::Sender<bool>>,
}

impl Service<Uri> for SingleConnection {
    type Response = TrackedIo;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TrackedIo>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let Some(closed) = self.closed.take() else {
            return Box::pin(async {
                Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    "the connection closed; the publisher reconnects and registers again",
                ))
            });
        };
        Box::pin(async move {
            let host = uri
                .host()
                .unwrap_or_default()
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned();
            let port = uri.port_u16().unwrap_or(80);
            let stream = TcpStream::connect((host.as_str(), port)).await?;
            stream.set_nodelay(true)?;
            Ok(TrackedIo {
                inner: TokioIo::new(stream),
                closed,
            })
        })
    }
}

/// A TCP stream that signals its connection's end when hyper drops it.
struct TrackedIo {
    inner: TokioIo<TcpStream>,
    closed: watch::Sender<bool>,
}

impl Drop for TrackedIo {
    fn drop(&mut self) {
        self.closed.send_replace(true);
    }
}

impl hyper::rt::Read for TrackedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for TrackedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
}
