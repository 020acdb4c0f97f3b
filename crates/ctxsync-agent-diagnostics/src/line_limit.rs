//! A reader for a stdio server's stdout: fails once one line (one message) is too large, and
//! counts lines that cannot be JSON-RPC (a server logging to stdout).

use std::{
    io,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    task::{Context, Poll, ready},
};

use tokio::io::{AsyncRead, ReadBuf};

/// Largest JSON-RPC message (one line, newline included) accepted from a stdio server.
///
/// rmcp's stdio framing caps a line at the same 16 MiB, but it drops a longer line and keeps
/// reading, so a server writing an endless line turns into a silent timeout (and a CPU-bound
/// discard of everything it sends). Failing the connection at the cap names the cause at once.
/// The cap must not be above rmcp's, or rmcp would drop a line this reader let through.
/// 16 MiB holds a `tools/list` page of 1000 tools (the most kept per server) with 16 KiB of
/// name, description and schema each, several times what real servers send.
pub(crate) const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

const _: () = assert!(MAX_MESSAGE_BYTES <= rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH);

/// What a [`LineLimit`] observed, readable after the reader was moved into a transport.
#[derive(Debug, Default)]
pub(crate) struct StdoutWatch {
    oversized: AtomicBool,
    not_json_lines: AtomicUsize,
}

impl StdoutWatch {
    /// Whether a line exceeded the limit (the reader failed then).
    pub(crate) fn oversized(&self) -> bool {
        self.oversized.load(Ordering::Relaxed)
    }

    /// Lines whose first non-blank byte cannot start a JSON-RPC message (`{` or `[`).
    pub(crate) fn not_json_lines(&self) -> usize {
        self.not_json_lines.load(Ordering::Relaxed)
    }
}

/// Wraps a reader; once a line exceeds the limit, every read fails and
/// [`StdoutWatch::oversized`] reports it.
#[derive(Debug)]
pub(crate) struct LineLimit<R> {
    inner: R,
    limit: usize,
    /// Bytes of the current, unfinished line.
    line_bytes: usize,
    /// Whether the current line's first non-blank byte was looked at.
    line_classified: bool,
    watch: Arc<StdoutWatch>,
}

impl<R> LineLimit<R> {
    pub(crate) fn new(inner: R, limit: usize) -> Self {
        Self {
            inner,
            limit,
            line_bytes: 0,
            line_classified: false,
            watch: Arc::default(),
        }
    }

    /// What this reader observes, shared.
    pub(crate) fn watch(&self) -> Arc<StdoutWatch> {
        self.watch.clone()
    }

    fn classify(&mut self, piece: &[u8]) {
        if self.line_classified {
            return;
        }
        if let Some(first) = piece.iter().find(|byte| !byte.is_ascii_whitespace()) {
            self.line_classified = true;
            if !matches!(first, b'{' | b'[') {
                self.watch.not_json_lines.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

fn too_large(limit: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("a message exceeded {limit} bytes"),
    )
}

impl<R: AsyncRead + Unpin> AsyncRead for LineLimit<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.watch.oversized() {
            return Poll::Ready(Err(too_large(this.limit)));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let mut oversized = false;
        for piece in buf.filled()[before..].split_inclusive(|byte| *byte == b'\n') {
            this.line_bytes += piece.len();
            if this.line_bytes > this.limit {
                oversized = true;
                break;
            }
            this.classify(piece);
            if piece.ends_with(b"\n") {
                this.line_bytes = 0;
                this.line_classified = false;
            }
        }
        if oversized {
            // Hand nothing of the oversized line on; the reader is done for good.
            buf.set_filled(before);
            this.watch.oversized.store(true, Ordering::Relaxed);
            return Poll::Ready(Err(too_large(this.limit)));
        }
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    /// Reads `input` through a line limit of `limit` bytes in reads of `chunk` bytes: what
    /// came through (`Err` if it tripped), and what the reader observed.
    async fn check(
        input: &[u8],
        limit: usize,
        chunk: usize,
    ) -> (Result<Vec<u8>, ()>, Arc<StdoutWatch>) {
        let mut reader = LineLimit::new(input, limit);
        let watch = reader.watch();
        let mut out = Vec::new();
        let mut buf = vec![0; chunk];
        loop {
            match reader.read(&mut buf).await {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(error) => {
                    assert_eq!(error.kind(), io::ErrorKind::InvalidData);
                    assert!(watch.oversized());
                    // Once tripped, it stays failed.
                    assert!(reader.read(&mut buf).await.is_err());
                    return (Err(()), watch);
                }
            }
        }
        assert!(!watch.oversized());
        (Ok(out), watch)
    }

    #[tokio::test]
    async fn lines_that_cannot_be_json_rpc_are_counted() {
        for chunk in [1, 2, 64] {
            let input: &[u8] = b"{\"a\":1}\n  [1]\nlog\n\n  \n x\n{";
            let (out, watch) = check(input, 1024, chunk).await;
            assert_eq!(out, Ok(input.to_vec()), "chunk {chunk}");
            assert_eq!(watch.not_json_lines(), 2, "chunk {chunk}");
        }
    }

    #[tokio::test]
    async fn lines_up_to_the_limit_pass_and_longer_ones_fail() {
        for chunk in [1, 3, 64] {
            let fits = b"1234567\nabcdefg\n\n12345678";
            assert_eq!(
                check(fits, 8, chunk).await.0,
                Ok(fits.to_vec()),
                "chunk {chunk}"
            );
            // Eight bytes plus the newline is nine.
            assert_eq!(
                check(b"ok\n12345678\n", 8, chunk).await.0,
                Err(()),
                "chunk {chunk}"
            );
            assert_eq!(
                check(b"123456789", 8, chunk).await.0,
                Err(()),
                "chunk {chunk}"
            );
        }
    }
}
