//! TLS for the server's two listeners (rustls, TLS 1.2 and 1.3).
//!
//! The certificate and key are read from PEM files and re-read when either file changes
//! (checked every [`DEFAULT_RELOAD_INTERVAL`]) or on SIGHUP. A reload swaps what new
//! handshakes get; open connections keep the session they negotiated, so nothing is
//! dropped. A reload that fails (a half-written file, a key that does not match) keeps
//! the previous certificate and logs why.
//!
//! Handshakes are bounded in time here and run on their own tasks, bounded in number, in
//! [`crate::listen`], so a client that connects and says nothing cannot stall the accept
//! loop for everyone else.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// How often the certificate and key files are checked for changes.
pub const DEFAULT_RELOAD_INTERVAL: Duration = Duration::from_secs(2);
/// Bound on one TLS handshake; a client that has not finished by then is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the server's certificate chain and private key live (PEM).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1). Its path is shown; its content never is.
    pub key: PathBuf,
}

/// The certificate new handshakes are given, replaced by reloads.
#[derive(Debug)]
pub struct ReloadingCert {
    files: TlsFiles,
    current: RwLock<Arc<CertifiedKey>>,
    provider: Arc<CryptoProvider>,
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

impl ReloadingCert {
    /// Loads the files once; an error names the file and the problem.
    pub fn load(files: TlsFiles) -> Result<Arc<Self>> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let key = load_key(&files, &provider)?;
        Ok(Arc::new(Self {
            files,
            current: RwLock::new(Arc::new(key)),
            provider,
        }))
    }

    /// Re-reads the files; on failure the previous certificate stays in use.
    pub fn reload(&self) -> Result<()> {
        let key = load_key(&self.files, &self.provider)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(key);
        Ok(())
    }

    /// The end-entity certificate now served (DER), for tests and logs.
    pub fn leaf(&self) -> CertificateDer<'static> {
        let current = self.current.read().unwrap_or_else(|e| e.into_inner());
        current.cert[0].clone()
    }

    /// An acceptor for a listener that offers `alpn` (e.g. `h2` for gRPC).
    pub fn acceptor(self: &Arc<Self>, alpn: &[&[u8]]) -> Result<TlsAcceptor> {
        let mut config = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .context("TLS protocol versions")?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(TlsAcceptor::from(Arc::new(config)))
    }

    /// Reloads whenever a file's metadata changes or the process gets SIGHUP, until
    /// `stop` turns true. The SIGHUP handler is installed before this returns, so a
    /// SIGHUP sent once the server is up never takes the default action (terminating).
    pub fn watch(
        self: Arc<Self>,
        interval: Duration,
        mut stop: watch::Receiver<bool>,
    ) -> impl Future<Output = ()> + Send + 'static {
        let mut hangup =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
        async move {
            let mut seen = stamp(&self.files);
            let mut ticker = tokio::time::interval(interval);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                let why = tokio::select! {
                    _ = stop.wait_for(|stop| *stop) => return,
                    Some(()) = recv_hangup(hangup.as_mut()) => "SIGHUP",
                    _ = ticker.tick() => {
                        let now = stamp(&self.files);
                        if now == seen {
                            continue;
                        }
                        seen = now;
                        "the files changed"
                    }
                };
                match self.reload() {
                    Ok(()) => tracing::info!(
                        cert = %self.files.cert.display(),
                        "reloaded the TLS certificate ({why})"
                    ),
                    Err(e) => tracing::warn!(
                        "cannot reload the TLS certificate ({why}); still serving the previous one: {e:#}"
                    ),
                }
            }
        }
    }
}

async fn recv_hangup(signal: Option<&mut tokio::signal::unix::Signal>) -> Option<()> {
    match signal {
        Some(signal) => signal.recv().await,
        None => std::future::pending().await,
    }
}

/// What identifies a file's version without reading it: a rename over it (how
/// certificate managers replace files) changes the inode, an edit the mtime or size.
type Stamp = [Option<(SystemTime, u64, u64)>; 2];

fn stamp(files: &TlsFiles) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let one = |path: &Path| {
        std::fs::metadata(path).ok().map(|m| {
            (
                m.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                m.len(),
                m.ino(),
            )
        })
    };
    [one(&files.cert), one(&files.key)]
}

fn load_key(files: &TlsFiles, provider: &CryptoProvider) -> Result<CertifiedKey> {
    let cert_path = files.cert.display();
    let chain = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| anyhow::anyhow!("TLS certificate {cert_path}: {}", pem_reason(&e)))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("TLS certificate {cert_path}: {}", pem_reason(&e)))?;
    anyhow::ensure!(
        !chain.is_empty(),
        "TLS certificate {cert_path}: no PEM certificate in the file"
    );
    let key_path = files.key.display();
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| anyhow::anyhow!("TLS key {key_path}: {}", pem_reason(&e)))?;
    CertifiedKey::from_der(chain, key, provider).map_err(|e| {
        anyhow::anyhow!(
            "TLS key {key_path} does not fit the certificate {cert_path} (or is of an unsupported type): {e}"
        )
    })
}

/// The PEM parser's error in words, never with file content.
fn pem_reason(error: &rustls_pki_types::pem::Error) -> String {
    use rustls_pki_types::pem::Error as E;
    match error {
        E::Io(e) => format!("cannot read the file: {e}"),
        E::NoItemsFound => "no PEM item of the expected kind in the file".to_owned(),
        E::MissingSectionEnd { .. } | E::IllegalSectionStart { .. } => {
            "a PEM section is not closed".to_owned()
        }
        E::Base64Decode(_) => "a PEM section is not valid base64".to_owned(),
        _ => "not a valid PEM file".to_owned(),
    }
}

/// A TLS connection from [`handshake`].
#[derive(Debug)]
pub struct TlsConn {
    stream: TlsStream<TcpStream>,
}

impl TlsConn {
    pub(crate) fn tcp(&self) -> &TcpStream {
        self.stream.get_ref().0
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for TlsConn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.tcp().connect_info()
    }
}

/// Completes one server handshake within 10 s. A failed handshake — a
/// plaintext client, a client that distrusts the certificate — is logged at debug and
/// gives `None`: a TLS listener never answers in plain text.
pub async fn handshake(
    acceptor: &TlsAcceptor,
    tcp: TcpStream,
    peer: std::net::SocketAddr,
) -> Option<TlsConn> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(stream)) => Some(TlsConn { stream }),
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            None
        }
    }
}
