//! One gRPC connection to the control plane, with the agent's bearer token on every call.
//!
//! A tonic `Channel` normally reconnects by itself, which would let a push travel on a new
//! connection that never saw `UpdateStartup`. The connector here therefore opens exactly
//! one TCP connection per channel (the TLS handshake, for `https://`, runs on it inside the
//! connector) and reports when it closes; the publisher then builds a new channel and
//! registers again before pushing.

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};

use ctxsync_protocol::v1::agent_client::AgentClient;
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::TlsConnector;
use tonic::codegen::http::Uri;
use tonic::codegen::http::uri::InvalidUri;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tower_service::Service;

use crate::error::PublishError;
use crate::timing::Timing;
use crate::tls;

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

/// The server as configured: where to connect, and with which TLS, checked once at start.
pub(crate) struct ServerTarget {
    /// Always `http://HOST:PORT` with the port spelled out: tonic must never see `https`,
    /// which it refuses without its own TLS features whenever another crate in the build
    /// turns them on. TLS happens in the connector; the requests' origin keeps the URL.
    endpoint: Endpoint,
    /// The URL as given, for logs.
    url: String,
    /// The URL's host, IPv6 without brackets.
    host: String,
    port: u16,
    tls: Option<Tls>,
}

/// What an `https://` connection handshakes with.
#[derive(Clone)]
struct Tls {
    connector: TlsConnector,
    /// The URL's host: sent as SNI (unless an IP address) and checked against the
    /// certificate.
    name: ServerName<'static>,
}

impl std::fmt::Debug for ServerTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTarget")
            .field("url", &self.url)
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl ServerTarget {
    /// Checks the URL and loads what TLS trusts: `ca_cert_files` always (a bad file is an
    /// error even with `http://`, before anyone relies on it), the platform's roots for
    /// `https://` only.
    pub(crate) fn new(
        url: &str,
        timing: &Timing,
        agent_version: &str,
        ca_cert_files: &[PathBuf],
    ) -> Result<Self, PublishError> {
        let invalid = |reason: &str| PublishError::InvalidServerUrl {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let uri: Uri = url
            .parse()
            .map_err(|e: InvalidUri| invalid(&e.to_string()))?;
        let (https, default_port) = match uri.scheme_str() {
            Some("http") => (false, 80),
            Some("https") => (true, 443),
            _ => return Err(invalid("expected http://HOST:PORT or https://HOST[:PORT]")),
        };
        let Some(url_host) = uri.host().filter(|h| !h.is_empty()) else {
            return Err(invalid("the URL has no host"));
        };
        let port = uri.port_u16().unwrap_or(default_port);
        let host = url_host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let extra_roots = tls::load_ca_files(ca_cert_files)?;
        let tls = if https {
            let name = ServerName::try_from(host.clone()).map_err(|e| {
                invalid(&format!(
                    "the host cannot be checked against a certificate: {e}"
                ))
            })?;
            Some(Tls {
                connector: TlsConnector::from(tls::client_config(url, extra_roots)?),
                name,
            })
        } else {
            None
        };
        let endpoint = Endpoint::from_shared(format!("http://{url_host}:{port}"))
            .map_err(|e| invalid(&e.to_string()))?
            .origin(uri)
            .connect_timeout(timing.connect_timeout)
            .timeout(timing.request_timeout)
            .http2_keep_alive_interval(timing.keepalive_interval)
            .keep_alive_timeout(timing.keepalive_timeout)
            .keep_alive_while_idle(true)
            .user_agent(format!("ctxsync-agent/{agent_version}"))
            .map_err(|e| invalid(&e.to_string()))?;
        Ok(Self {
            endpoint,
            url: url.to_owned(),
            host,
            port,
            tls,
        })
    }

    /// The URL as configured.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The URL's host (IPv6 without brackets), for logs.
    pub(crate) fn host(&self) -> &str {
        &self.host
    }

    /// `http://` to a host that is not this machine: the token and the workspace's content
    /// would cross a network in clear.
    pub(crate) fn is_plaintext_over_network(&self) -> bool {
        self.tls.is_none() && !tls::is_loopback(&self.host)
    }
}

/// An open connection: the client and a signal that fires once it has closed.
pub(crate) struct Connection {
    pub client: Client,
    closed: watch::Receiver<bool>,
}

impl Connection {
    /// Connects and, for `https://`, completes the TLS handshake (both bounded by the
    /// connect timeout).
    pub(crate) async fn open(
        server: &ServerTarget,
        auth: BearerAuth,
    ) -> Result<Self, tonic::transport::Error> {
        let (closed_tx, closed) = watch::channel(false);
        let connector = SingleConnection {
            host: server.host.clone(),
            port: server.port,
            tls: server.tls.clone(),
            closed: Some(closed_tx),
        };
        let channel = server.endpoint.connect_with_connector(connector).await?;
        Ok(Self {
            client: AgentClient::with_interceptor(channel, auth),
            closed,
        })
    }

    /// Completes once the underlying connection has been closed by either side.
    pub(crate) async fn closed(&mut self) {
        // An error means the sender is gone, which also means the connection is.
        let _ = self.closed.wait_for(|closed| *closed).await;
    }
}

/// Opens one TCP connection (with TLS over it for `https://`), then refuses to open
/// another.
struct SingleConnection {
    host: String,
    port: u16,
    tls: Option<Tls>,
    closed: Option<watch::Sender<bool>>,
}

impl Service<Uri> for SingleConnection {
    type Response = TrackedIo;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TrackedIo>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Ignores `_uri`: it is the `http://` stand-in (see [`ServerTarget`]); the real host,
    /// port and TLS are this connector's own.
    fn call(&mut self, _uri: Uri) -> Self::Future {
        let Some(closed) = self.closed.take() else {
            return Box::pin(async {
                Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    "the connection closed; the publisher reconnects and registers again",
                ))
            });
        };
        let (host, port, tls) = (self.host.clone(), self.port, self.tls.clone());
        Box::pin(async move {
            let stream = TcpStream::connect((host.as_str(), port)).await?;
            stream.set_nodelay(true)?;
            let stream: Box<dyn Stream> = match tls {
                None => Box::new(stream),
                Some(Tls { connector, name }) => Box::new(connector.connect(name, stream).await?),
            };
            Ok(TrackedIo {
                inner: TokioIo::new(stream),
                closed,
            })
        })
    }
}

/// A connection's byte stream: plain TCP or TLS over it.
trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}

/// A connection that signals its end when hyper drops it.
struct TrackedIo {
    inner: TokioIo<Box<dyn Stream>>,
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
