//! A reader for a stdio server's stdout that fails once one line (one message) is too large.

use std::{
    io,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll, ready},
};

use tokio::io::{AsyncRead, ReadBuf};

/// Largest JSON-RPC message (one line, newline included) accepted from a stdio server.
///
/// rmcp's stdio framing caps a line at the same 16 MiB, but it drops a longer line and keeps
/// reading, so a server writing an endless line turns into a silent timeout (and a CPU-bound
/// discard of everything it sends). Failing the connection at the cap names the cause at once.
/// The cap must not be below rmcp's, or rmcp would drop the line before this reader saw it end.
/// 16 MiB holds a `tools/list` page of 1000 tools (the most kept per server) with 16 KiB of
/// name, description and schema each, several times what real servers send.
pub(crate) const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Wraps a reader; once a line exceeds the limit, every read fails and [`Self::tripped`]
/// reports it.
#[derive(Debug)]
pub(crate) struct LineLimit<R> {
    inner: R,
    limit: usize,
    /// Bytes of the current, unfinished line.
    line_bytes: usize,
    tripped: Arc<AtomicBool>,
}

impl<R> LineLimit<R> {
    pub(crate) fn new(inner: R, limit: usize) -> Self {
        Self {
            inner,
            limit,
            line_bytes: 0,
            tripped: Arc::new(AtomicBool::new(false)),
        }
    }

    /// A flag that turns true when the limit was exceeded (shared, readable after the reader
    /// itself was moved into a transport).
    pub(crate) fn tripped(&self) -> Arc<AtomicBool> {
        self.tripped.clone()
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
        if this.tripped.load(Ordering::Relaxed) {
            return Poll::Ready(Err(too_large(this.limit)));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        for piece in buf.filled()[before..].split_inclusive(|byte| *byte == b'\n') {
            this.line_bytes += piece.len();
            if this.line_bytes > this.limit {
                // Hand nothing of the oversized line on; the reader is done for good.
                buf.set_filled(before);
                this.tripped.store(true, Ordering::Relaxed);
                return Poll::Ready(Err(too_large(this.limit)));
            }
            if piece.ends_with(b"\n") {
                this.line_bytes = 0;
            }
        }
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    /// Reads `input` through a limit of 8 bytes in reads of `chunk` bytes; `Err` if it tripped.
    async fn check(input: &[u8], chunk: usize) -> Result<Vec<u8>, ()> {
        let mut reader = LineLimit::new(input, 8);
        let tripped = reader.tripped();
        let mut out = Vec::new();
        let mut buf = vec![0; chunk];
        loop {
            match reader.read(&mut buf).await {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(error) => {
                    assert_eq!(error.kind(), io::ErrorKind::InvalidData);
                    assert!(tripped.load(Ordering::Relaxed));
                    // Once tripped, it stays failed.
                    assert!(reader.read(&mut buf).await.is_err());
                    return Err(());
                }
            }
        }
        assert!(!tripped.load(Ordering::Relaxed));
        Ok(out)
    }

    #[tokio::test]
    async fn lines_up_to_the_limit_pass_and_longer_ones_fail() {
        for chunk in [1, 3, 64] {
            let fits = b"1234567\nabcdefg\n\n12345678";
            assert_eq!(check(fits, chunk).await, Ok(fits.to_vec()), "chunk {chunk}");
            // Eight bytes plus the newline is nine.
            assert_eq!(
                check(b"ok\n12345678\n", chunk).await,
                Err(()),
                "chunk {chunk}"
            );
            assert_eq!(check(b"123456789", chunk).await, Err(()), "chunk {chunk}");
        }
    }
}
