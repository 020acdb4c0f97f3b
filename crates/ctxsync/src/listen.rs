//! Accepting and serving connections on both listeners, within [`crate::limits`].
//!
//! A connection slot is taken *before* `accept`, so past the cap new clients wait in the
//! kernel's backlog instead of costing memory here; the slot is freed when the connection
//! is dropped. TLS handshakes run on their own tasks, bounded in number and time. The
//! HTTP side is served by hyper directly (not `axum::serve`) for its header-read timeout
//! and a drain bounded by the shutdown grace.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};
use tokio_rustls::TlsAcceptor;

use crate::tls::TlsConn;

/// Most TLS handshakes in progress on one listener.
const MAX_PENDING_HANDSHAKES: usize = 256;

/// An accepted connection holding one of its listener's connection slots.
#[derive(Debug)]
pub struct Conn {
    io: Io,
    _slot: OwnedSemaphorePermit,
}

#[derive(Debug)]
enum Io {
    Plain(TcpStream),
    Tls(Box<TlsConn>),
}

impl Conn {
    fn tcp(&self) -> &TcpStream {
        match &self.io {
            Io::Plain(tcp) => tcp,
            Io::Tls(tls) => tls.tcp(),
        }
    }
}

/// Accepts on `listener` (completing a TLS handshake first when `tls` is given) while at
/// most `max_connections` accepted connections are open; they arrive on the returned
/// channel. Stops, closing the listener, when `stop` turns true or the receiver is
/// dropped.
pub fn accept(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    max_connections: usize,
    mut stop: watch::Receiver<bool>,
) -> mpsc::Receiver<Conn> {
    let (tx, rx) = mpsc::channel(64);
    let slots = Arc::new(Semaphore::new(max_connections));
    let handshakes = Arc::new(Semaphore::new(MAX_PENDING_HANDSHAKES));
    tokio::spawn(async move {
        loop {
            let slot = tokio::select! {
                _ = stop.wait_for(|stop| *stop) => return,
                _ = tx.closed() => return,
                slot = slots.clone().acquire_owned() => match slot {
                    Ok(slot) => slot,
                    Err(_) => return,
                },
            };
            let accepted = tokio::select! {
                _ = stop.wait_for(|stop| *stop) => return,
                _ = tx.closed() => return,
                accepted = listener.accept() => accepted,
            };
            let (tcp, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: pause instead of spinning.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            match &tls {
                None => {
                    let conn = Conn {
                        io: Io::Plain(tcp),
                        _slot: slot,
                    };
                    if tx.send(conn).await.is_err() {
                        return;
                    }
                }
                Some(acceptor) => {
                    let Ok(pending) = handshakes.clone().acquire_owned().await else {
                        return;
                    };
                    let (acceptor, tx) = (acceptor.clone(), tx.clone());
                    tokio::spawn(async move {
                        let _pending = pending;
                        if let Some(tls) = crate::tls::handshake(&acceptor, tcp, peer).await {
                            let conn = Conn {
                                io: Io::Tls(Box::new(tls)),
                                _slot: slot,
                            };
                            let _ = tx.send(conn).await;
                        }
                    });
                }
            }
        }
    });
    rx
}

/// HTTP/1.1 settings of the chat API's connections.
#[derive(Clone, Copy, Debug)]
pub struct HttpSettings {
    /// How long a client has to send its request headers.
    pub header_read_timeout: Duration,
    /// How long in-flight requests may finish once `stop` turns true.
    pub shutdown_grace: Duration,
}

/// Serves `app` on the connections from [`accept`] until `stop` turns true, then lets
/// in-flight requests finish within the grace and cuts what remains.
pub async fn serve_http(
    mut connections: mpsc::Receiver<Conn>,
    app: axum::Router,
    settings: HttpSettings,
    mut stop: watch::Receiver<bool>,
) {
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(settings.header_read_timeout);
    loop {
        let conn = tokio::select! {
            _ = stop.wait_for(|stop| *stop) => break,
            conn = connections.recv() => match conn {
                Some(conn) => conn,
                None => break,
            },
        };
        let service = TowerToHyperService::new(app.clone());
        let connection = graceful.watch(http.serve_connection(TokioIo::new(conn), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                // Timeouts and clients that went away: nothing to do, nothing to alarm.
                tracing::debug!(error = %e, "HTTP connection ended with an error");
            }
        });
    }
    drop(connections);
    if tokio::time::timeout(settings.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            grace_ms = settings.shutdown_grace.as_millis(),
            "HTTP requests still running after the shutdown grace were cut"
        );
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.io {
            Io::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Io::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.io {
            Io::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Io::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.io {
            Io::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Io::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.io {
            Io::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Io::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.io {
            Io::Plain(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            Io::Tls(tls) => Pin::new(tls.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.io {
            Io::Plain(tcp) => tcp.is_write_vectored(),
            Io::Tls(tls) => tls.is_write_vectored(),
        }
    }
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.tcp().connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn past_the_cap_a_connection_waits_until_a_slot_is_freed() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (_stop, stop_rx) = watch::channel(false);
        let mut accepted = accept(listener, None, 1, stop_rx);
        let _first = TcpStream::connect(addr).await.unwrap();
        let _second = TcpStream::connect(addr).await.unwrap();
        let first = accepted.recv().await.expect("the first connection");
        let waiting = tokio::time::timeout(Duration::from_millis(300), accepted.recv()).await;
        assert!(
            waiting.is_err(),
            "a second connection was accepted past the cap of 1"
        );
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(10), accepted.recv()).await;
        assert!(
            matches!(second, Ok(Some(_))),
            "the second connection is accepted once the first is gone"
        );
    }
}
