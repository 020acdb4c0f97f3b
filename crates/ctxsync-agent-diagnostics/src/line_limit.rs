//! A reader for a stdio server's stdout: fails once one line (one message) is too large, and
//! counts lines that cannot be JSON-RPC (a server logging to stdout). Once a connection is
//! up, a line over the limit but within [`MAX_TOLERATED_MESSAGE_BYTES`] is left to rmcp's
//! framing to drop, and its JSON-RPC id is noted, so that only the tool call it answered
//! fails ([`StdoutWatch::dropped`]).

use std::{
    collections::VecDeque,
    io,
    pin::Pin,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    task::{Context, Poll, ready},
};

use tokio::{
    io::{AsyncRead, ReadBuf},
    sync::Notify,
};

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
/// Rmcp must drop what this reader tolerates past [`MAX_MESSAGE_BYTES`], never parse it.
const _: () = assert!(MAX_MESSAGE_BYTES == rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH);

/// Longest oversized line a connected server may send without losing its connection (a
/// tool result over the limit fails only its call); a longer one is an endless line.
pub(crate) const MAX_TOLERATED_MESSAGE_BYTES: usize = 4 * MAX_MESSAGE_BYTES;
/// How much of each line is kept to find an oversized message's id.
const ID_PREFIX_BYTES: usize = 4096;
/// Ids of dropped messages remembered for the calls waiting on them.
const DROPPED_IDS: usize = 64;

/// What a [`LineLimit`] observed, readable after the reader was moved into a transport.
#[derive(Debug, Default)]
pub(crate) struct StdoutWatch {
    oversized: AtomicBool,
    not_json_lines: AtomicUsize,
    /// Set once connected: oversized lines up to [`MAX_TOLERATED_MESSAGE_BYTES`] pass.
    tolerant: AtomicBool,
    /// The ids (JSON text) of oversized messages let through for rmcp to drop.
    dropped: Mutex<VecDeque<String>>,
    dropped_changed: Notify,
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

    /// From now on (the connection is up) an oversized line within
    /// [`MAX_TOLERATED_MESSAGE_BYTES`] costs only the message, not the connection.
    pub(crate) fn tolerate_oversized(&self) {
        self.tolerant.store(true, Ordering::Relaxed);
    }

    /// Resolves once a message with JSON-RPC id `id` (as JSON text) was dropped for its
    /// size.
    pub(crate) async fn dropped(&self, id: &str) {
        loop {
            let changed = self.dropped_changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.lock_dropped().iter().any(|dropped| dropped == id) {
                return;
            }
            changed.await;
        }
    }

    fn lock_dropped(&self) -> std::sync::MutexGuard<'_, VecDeque<String>> {
        self.dropped.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn record_dropped(&self, id: Option<String>) {
        tracing::warn!(
            "a stdio server sent a message over {MAX_MESSAGE_BYTES} bytes; it was dropped"
        );
        let Some(id) = id else { return };
        let mut dropped = self.lock_dropped();
        if dropped.len() >= DROPPED_IDS {
            dropped.pop_front();
        }
        dropped.push_back(id);
        drop(dropped);
        self.dropped_changed.notify_waiters();
    }
}

/// The top-level `"id"` of a JSON-RPC message from its first bytes (as JSON text: `5`,
/// `"a"`), if it comes before anything too long; keys inside nested values are skipped.
fn message_id(prefix: &[u8]) -> Option<String> {
    let mut depth = 0usize;
    let mut at = 0;
    while at < prefix.len() {
        match prefix[at] {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            b'"' => {
                let end = string_end(prefix, at)?;
                if depth == 1 && &prefix[at..end] == b"\"id\"" {
                    let rest = &prefix[end..];
                    let colon = rest.iter().position(|b| !b.is_ascii_whitespace())?;
                    if rest[colon] != b':' {
                        at = end;
                        continue;
                    }
                    let value = &rest[colon + 1..];
                    let start = value.iter().position(|b| !b.is_ascii_whitespace())?;
                    let value = &value[start..];
                    let len = if value.first() == Some(&b'"') {
                        string_end(value, 0)?
                    } else {
                        value
                            .iter()
                            .position(|b| !(b.is_ascii_digit() || *b == b'-'))?
                    };
                    return std::str::from_utf8(&value[..len]).ok().map(str::to_owned);
                }
                at = end;
                continue;
            }
            _ => {}
        }
        at += 1;
    }
    None
}

/// The offset just past the JSON string starting at `start` (a `"`), if it ends in `text`.
fn string_end(text: &[u8], start: usize) -> Option<usize> {
    let mut at = start + 1;
    while at < text.len() {
        match text[at] {
            b'\\' => at += 2,
            b'"' => return Some(at + 1),
            _ => at += 1,
        }
    }
    None
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
    /// The current line's first bytes, for an oversized message's id.
    line_prefix: Vec<u8>,
    /// Whether the current line went over the limit and is being let through to be dropped.
    line_dropped: bool,
    watch: Arc<StdoutWatch>,
}

impl<R> LineLimit<R> {
    pub(crate) fn new(inner: R, limit: usize) -> Self {
        Self {
            inner,
            limit,
            line_bytes: 0,
            line_classified: false,
            line_prefix: Vec::new(),
            line_dropped: false,
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
        let tolerant = this.watch.tolerant.load(Ordering::Relaxed);
        for piece in buf.filled()[before..].split_inclusive(|byte| *byte == b'\n') {
            if this.line_prefix.len() < ID_PREFIX_BYTES {
                let room = ID_PREFIX_BYTES - this.line_prefix.len();
                this.line_prefix
                    .extend_from_slice(&piece[..piece.len().min(room)]);
            }
            this.line_bytes += piece.len();
            if this.line_bytes > this.limit {
                let tolerated =
                    this.limit.saturating_mul(MAX_TOLERATED_MESSAGE_BYTES) / MAX_MESSAGE_BYTES;
                if !tolerant || this.line_bytes > tolerated {
                    oversized = true;
                    break;
                }
                if !this.line_dropped {
                    this.line_dropped = true;
                    this.watch.record_dropped(message_id(&this.line_prefix));
                }
            }
            this.classify(piece);
            if piece.ends_with(b"\n") {
                this.line_bytes = 0;
                this.line_classified = false;
                this.line_prefix.clear();
                this.line_dropped = false;
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

    #[test]
    fn a_message_id_is_read_from_the_top_level_only() {
        for (prefix, expect) in [
            (
                &br#"{"jsonrpc":"2.0","id":5,"result":{"content":[{"#[..],
                Some("5"),
            ),
            (
                br#"{"jsonrpc":"2.0", "id" : "a\"b","result":"#,
                Some(r#""a\"b""#),
            ),
            (br#"{"result":{"id":7,"text":"x"},"id":-3}"#, Some("-3")),
            (br#"{"result":{"text":"\"id\":9 ...."#, None),
            (
                br#"{"jsonrpc":"2.0","result":{"content":[{"type":"text","text":"abc"#,
                None,
            ),
        ] {
            assert_eq!(
                message_id(prefix).as_deref(),
                expect,
                "{}",
                String::from_utf8_lossy(prefix)
            );
        }
    }

    #[tokio::test]
    async fn once_tolerant_an_oversized_line_passes_and_its_id_is_noted() {
        let input = b"{\"id\":4,\"result\":\"0123456789\"}\n{\"id\":1}\n".to_vec();
        let mut reader = LineLimit::new(&input[..], 16);
        let watch = reader.watch();
        watch.tolerate_oversized();
        let mut out = Vec::new();
        reader.read_to_end(&mut out).await.expect("tolerated");
        assert_eq!(out, input, "rmcp's framing drops it");
        assert!(!watch.oversized());
        tokio::time::timeout(std::time::Duration::from_secs(5), watch.dropped("4"))
            .await
            .expect("noted");
        // Past the tolerated bound, the reader fails as before.
        let endless = [b'x'; 16 * 5];
        let mut reader = LineLimit::new(&endless[..], 16);
        reader.watch().tolerate_oversized();
        assert!(reader.read_to_end(&mut Vec::new()).await.is_err());
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
