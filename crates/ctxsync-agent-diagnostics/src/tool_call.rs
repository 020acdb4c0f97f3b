//! Runs a tool call on a connected MCP server (issue 36): the one place the agent's
//! engine calls tools. It asks for progress, honours the call's deadline and its
//! cancellation (sending `notifications/cancelled`), caps the whole result and passes
//! every text and JSON value through the server's sanitizer before it leaves.
//!
//! It owns the registry of callable servers (`CallTargets`: each connection task
//! registers its peer and listing, the engine says which connection is current) and the
//! routing of `notifications/progress` to the call that asked for it (`ProgressRoutes`).
//!
//! Must never: change discovery (a call touches no report, phase or outcome), let a
//! server's request to the client (sampling, elicitation, roots, input) hang a call, or
//! let a result past the cap reach the caller.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use ctxsync_mcp_model::{CallEnd, CallProgress, CallReason, CallSpec, CallStatus};
use rmcp::{
    RoleClient, ServiceError,
    model::{
        CallToolRequest, CallToolRequestParams, ClientRequest, ProgressNotificationParam,
        ProgressToken, ServerResult,
    },
    service::{Peer, PeerRequestOptions},
};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::{
    failure::AccessRefused,
    line_limit::{MAX_MESSAGE_BYTES, StdoutWatch},
    sanitize::{SecretSet, redact, sanitize_diagnostic},
};

/// The default cap of a call's whole result, `structuredContent` included.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 256 * 1024;

/// How long sending `notifications/cancelled` may take: a wedged transport must not hold
/// a call past its end.
const CANCEL_NOTICE_BOUND: Duration = Duration::from_secs(1);
/// Progress for a token no call has registered yet (a fast server racing the caller's
/// registration) kept per connection, oldest dropped first.
const EARLY_PROGRESS: usize = 16;
/// A string longer than the cap is redacted only up to the cap and this much more: no
/// secret a server knows is anywhere near this long, and a 10 MiB result is not scanned
/// whole to keep 256 KiB of it.
const REDACTION_MARGIN: usize = 256 * 1024;
/// Ends a text cut to fit the cap, so the model sees that it was cut.
const CUT_MARKER: &str = "\n... [truncated]";
/// The error text of a call whose connection closed under it.
const CLOSED: &str = "the MCP server's connection closed during the call";
/// A call an HTTP server refused for want of a scope (it ends the connection).
const REFUSED_FOR_SCOPE: &str = "the MCP server refused the call for want of a scope the sign-in did not grant (403 insufficient_scope): a person must sign in again, then call it again";

/// Calls tools on the engine's connected servers. Cheap to clone; lives as long as any
/// clone, but calls only servers the engine holds connected.
#[derive(Clone, Debug, Default)]
pub struct ToolCaller {
    targets: Arc<CallTargets>,
}

impl ToolCaller {
    pub(crate) fn new(targets: Arc<CallTargets>) -> Self {
        Self { targets }
    }

    /// Whether `server` is connected and its current listing has `tool`.
    pub fn lists(&self, server: &str, tool: &str) -> bool {
        self.targets
            .current(server)
            .is_some_and(|target| target.tools.contains(tool))
    }

    /// Runs `spec`: `refused`/`tool_gone` when the server is not connected or does not
    /// list the tool, `timed_out` or `canceled` (after `notifications/cancelled`) when
    /// the deadline passes or `cancel` fires, `error` for a JSON-RPC error or a
    /// connection that died, else `complete` with the capped, sanitized result. Each
    /// `notifications/progress` the server sends is passed to `progress` (sanitized;
    /// dropped when the receiver lags).
    pub async fn call(
        &self,
        spec: CallSpec,
        progress: mpsc::Sender<CallProgress>,
        cancel: CancellationToken,
    ) -> CallEnd {
        let Some(target) = self
            .targets
            .current(&spec.server)
            .filter(|target| target.tools.contains(&spec.tool))
        else {
            return CallEnd::with_reason(CallStatus::Refused, CallReason::ToolGone);
        };
        let deadline = tokio::time::Instant::now() + spec.timeout;
        let secrets = target.routes.secrets.clone();
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(
            CallToolRequestParams::new(spec.tool).with_arguments(spec.arguments),
        ));
        // rmcp puts a fresh `progressToken` into every request's `_meta`.
        let sent = tokio::select! {
            biased;
            () = cancel.cancelled() => return CallEnd::bare(CallStatus::Canceled),
            () = tokio::time::sleep_until(deadline) => return CallEnd::bare(CallStatus::TimedOut),
            sent = target.peer.send_request_with_option(request, PeerRequestOptions::no_options()) => sent,
        };
        let mut handle = match sent {
            Ok(handle) => handle,
            Err(error) => return service_error(&error, &secrets),
        };
        let _route = target
            .routes
            .register(handle.progress_token.clone(), progress);
        let id = serde_json::to_string(&handle.id).unwrap_or_default();
        let response = tokio::select! {
            biased;
            response = &mut handle.rx => response,
            () = dropped(target.stdout.as_deref(), &id) => {
                return CallEnd::error(0, format!(
                    "the tool result is larger than the stdio transport's {} MiB message limit",
                    MAX_MESSAGE_BYTES / (1024 * 1024)
                ));
            }
            () = cancel.cancelled() => {
                notify_cancelled(handle, "cancelled by the caller").await;
                return CallEnd::bare(CallStatus::Canceled);
            }
            () = tokio::time::sleep_until(deadline) => {
                notify_cancelled(handle, "request timeout").await;
                return CallEnd::bare(CallStatus::TimedOut);
            }
        };
        let refused = || target.refusals.last().filter(AccessRefused::needs_sign_in);
        match response {
            Err(_) | Ok(Err(ServiceError::TransportClosed | ServiceError::TransportSend(_)))
                if refused().is_some() =>
            {
                CallEnd::error(0, REFUSED_FOR_SCOPE)
            }
            Err(_) => CallEnd::error(0, CLOSED),
            Ok(Err(error)) => service_error(&error, &secrets),
            Ok(Ok(result)) => finish(result, spec.max_result_bytes, &secrets),
        }
    }
}

/// Resolves once the server's answer to request `id` was dropped for its size; never
/// without a stdout to watch (HTTP).
async fn dropped(stdout: Option<&StdoutWatch>, id: &str) {
    match stdout {
        Some(stdout) => stdout.dropped(id).await,
        None => std::future::pending().await,
    }
}

/// Sends `notifications/cancelled` for the call's request id (rmcp's
/// [`RequestHandle::cancel`](rmcp::service::RequestHandle::cancel)), bounded.
async fn notify_cancelled(handle: rmcp::service::RequestHandle<RoleClient>, reason: &str) {
    let sent = tokio::time::timeout(CANCEL_NOTICE_BOUND, handle.cancel(Some(reason.to_owned())));
    if !matches!(sent.await, Ok(Ok(()))) {
        tracing::debug!("notifications/cancelled could not be sent; the connection is going");
    }
}

fn service_error(error: &ServiceError, secrets: &SecretSet) -> CallEnd {
    match error {
        ServiceError::McpError(error) => CallEnd::error(
            i64::from(error.code.0),
            sanitize_diagnostic(&error.message, secrets),
        ),
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => CallEnd::error(0, CLOSED),
        ServiceError::UnexpectedResponse => CallEnd::error(
            0,
            "the MCP server's answer to tools/call is not a tool result",
        ),
        other => {
            let (words, _) =
                crate::failure::request(other, "tools/call", crate::failure::Place::Stdio);
            CallEnd::error(0, sanitize_diagnostic(&words, secrets))
        }
    }
}

/// The server's answer as the call's end: a `CallToolResult` sanitized and capped; an
/// answer the agent cannot finish (input required, a task) as an `error`.
fn finish(result: ServerResult, max_bytes: usize, secrets: &SecretSet) -> CallEnd {
    let result = match result {
        ServerResult::CallToolResult(result) => serde_json::to_value(result),
        // A result with nothing in it; rmcp reads an empty object this way.
        ServerResult::EmptyResult(_) => Ok(serde_json::json!({ "content": [] })),
        ServerResult::InputRequiredResult(_) => {
            return CallEnd::error(
                0,
                "the MCP server asked for input during the call (input_required), which the \
                 agent cannot give",
            );
        }
        ServerResult::CreateTaskResult(_) => {
            return CallEnd::error(
                0,
                "the MCP server answered with a task, which the agent does not run",
            );
        }
        _ => {
            return CallEnd::error(
                0,
                "the MCP server's answer to tools/call is not a tool result",
            );
        }
    };
    let result = match result {
        Ok(result) => result,
        Err(error) => {
            return CallEnd::error(0, format!("the tool result cannot be encoded: {error}"));
        }
    };
    let mut result = result;
    let replaced = replace_oversized_binaries(&mut result, max_bytes);
    let result = sanitize_value(result, secrets, max_bytes);
    match cap_result(result, max_bytes) {
        Some((result, truncated)) => CallEnd::complete(result, truncated || replaced),
        None => CallEnd::error(
            0,
            format!("no tool result fits in the result cap of {max_bytes} bytes"),
        ),
    }
}

// ---------------------------------------------------------------------------------------
// The registry of callable servers.

/// One connection a call can go to.
#[derive(Clone)]
struct Target {
    peer: Peer<RoleClient>,
    tools: Arc<HashSet<String>>,
    routes: Arc<ProgressRoutes>,
    /// A stdio server's stdout, which notes the messages dropped for their size.
    stdout: Option<Arc<StdoutWatch>>,
    /// An HTTP server's refusal of a request for want of credentials, which ends the
    /// connection: why a call that saw it close failed.
    refusals: crate::lifecycle::Refusals,
}

#[derive(Default)]
struct Targets {
    /// Every connected task's target, by task id.
    by_task: HashMap<u64, Target>,
    /// The task whose connection the engine reports, by server name.
    current: HashMap<String, u64>,
}

/// Which connection of each server calls go to. Connection tasks add their own target
/// once connected and remove it when they end; the engine names the current one.
#[derive(Default)]
pub(crate) struct CallTargets {
    inner: Mutex<Targets>,
}

impl std::fmt::Debug for CallTargets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        f.debug_struct("CallTargets")
            .field("servers", &inner.current.len())
            .field("connections", &inner.by_task.len())
            .finish()
    }
}

impl CallTargets {
    fn lock(&self) -> std::sync::MutexGuard<'_, Targets> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn current(&self, server: &str) -> Option<Target> {
        let inner = self.lock();
        let id = inner.current.get(server)?;
        inner.by_task.get(id).cloned()
    }

    /// A connection task's peer and listing, once connected (not yet current).
    pub(crate) fn insert(
        &self,
        task: u64,
        peer: Peer<RoleClient>,
        tools: impl IntoIterator<Item = String>,
        routes: Arc<ProgressRoutes>,
        stdout: Option<Arc<StdoutWatch>>,
        refusals: crate::lifecycle::Refusals,
    ) {
        let target = Target {
            peer,
            tools: Arc::new(tools.into_iter().collect()),
            routes,
            stdout,
            refusals,
        };
        self.lock().by_task.insert(task, target);
    }

    /// The engine made `task` the connection it reports for `server`.
    pub(crate) fn promote(&self, server: &str, task: u64) {
        self.lock().current.insert(server.to_owned(), task);
    }

    /// A re-list's tools.
    pub(crate) fn set_tools(&self, task: u64, tools: impl IntoIterator<Item = String>) {
        if let Some(target) = self.lock().by_task.get_mut(&task) {
            target.tools = Arc::new(tools.into_iter().collect());
        }
    }

    /// The task's connection is gone (closed, lost, replaced or removed).
    pub(crate) fn remove(&self, task: u64) {
        let mut inner = self.lock();
        inner.by_task.remove(&task);
        inner.current.retain(|_, current| *current != task);
    }
}

// ---------------------------------------------------------------------------------------
// Progress routing.

#[derive(Default)]
struct Routes {
    senders: HashMap<ProgressToken, mpsc::Sender<CallProgress>>,
    early: VecDeque<(ProgressToken, CallProgress)>,
}

/// Routes one connection's `notifications/progress` to the call whose token it names,
/// sanitized. Also holds what sanitizes that server's call results.
pub(crate) struct ProgressRoutes {
    secrets: Arc<SecretSet>,
    routes: Mutex<Routes>,
}

impl std::fmt::Debug for ProgressRoutes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressRoutes")
            .field("calls", &self.lock().senders.len())
            .finish_non_exhaustive()
    }
}

impl ProgressRoutes {
    /// Routes for a server whose secrets (SPEC §3.3's set) are `secrets`.
    pub(crate) fn new(secrets: SecretSet) -> Self {
        Self {
            secrets: Arc::new(secrets),
            routes: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Routes> {
        self.routes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Passes one notification on to its call; one for no call is kept briefly, in case
    /// its call is just registering; unsolicited floods only cycle that small buffer.
    pub(crate) fn relay(&self, params: ProgressNotificationParam) {
        let progress = CallProgress {
            progress: params.progress,
            total: params.total,
            message: params
                .message
                .map(|message| sanitize_diagnostic(&message, &self.secrets)),
        };
        let mut routes = self.lock();
        match routes.senders.get(&params.progress_token) {
            // A lagging receiver loses this report; a later one supersedes it anyway.
            Some(sender) => drop(sender.try_send(progress)),
            None => {
                if routes.early.len() >= EARLY_PROGRESS {
                    routes.early.pop_front();
                }
                routes.early.push_back((params.progress_token, progress));
            }
        }
    }

    /// Routes `token`'s progress to `sender` until the guard is dropped.
    fn register(
        self: &Arc<Self>,
        token: ProgressToken,
        sender: mpsc::Sender<CallProgress>,
    ) -> RouteGuard {
        let mut routes = self.lock();
        let early: Vec<CallProgress> = {
            let (mine, rest) = std::mem::take(&mut routes.early)
                .into_iter()
                .partition(|(early, _)| *early == token);
            routes.early = rest;
            mine.into_iter().map(|(_, progress)| progress).collect()
        };
        for progress in early {
            let _ = sender.try_send(progress);
        }
        routes.senders.insert(token.clone(), sender);
        RouteGuard {
            routes: self.clone(),
            token,
        }
    }
}

struct RouteGuard {
    routes: Arc<ProgressRoutes>,
    token: ProgressToken,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        self.routes.lock().senders.remove(&self.token);
    }
}

// ---------------------------------------------------------------------------------------
// Sanitizing and capping results.

/// Every string in `value` (object keys too) with the server's secrets redacted; strings
/// longer than `max_bytes` are cut to it, since no longer one can survive the cap.
fn sanitize_value(value: Value, secrets: &SecretSet, max_bytes: usize) -> Value {
    match value {
        Value::String(text) => Value::String(sanitize_long(&text, secrets, max_bytes)),
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|item| sanitize_value(item, secrets, max_bytes))
                .collect(),
        ),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(key, item)| {
                    (
                        sanitize_long(&key, secrets, max_bytes),
                        sanitize_value(item, secrets, max_bytes),
                    )
                })
                .collect(),
        ),
        other => other,
    }
}

/// `text` redacted, at most `max_bytes` long. A text far over the cap is redacted only up
/// to the cap and [`REDACTION_MARGIN`]; then the end of that window, where a secret may be
/// cut in half and so escape redaction, is dropped: the bytes after the last redaction
/// (the window's unchanged end, found as the common suffix), or the margin, whichever is
/// shorter. Any cut of what remains is safe, since every secret it touches was whole in
/// the window.
fn sanitize_long(text: &str, secrets: &SecretSet, max_bytes: usize) -> String {
    let window_end = max_bytes.saturating_add(REDACTION_MARGIN);
    if text.len() <= window_end {
        return cut_str(&redact(text, secrets), max_bytes).to_owned();
    }
    let window = cut_str(text, window_end);
    let redacted = redact(window, secrets);
    let unchanged = redacted
        .bytes()
        .rev()
        .zip(window.bytes().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let keep = redacted.len() - unchanged.min(REDACTION_MARGIN);
    let safe = cut_str(&redacted, keep);
    cut_str(safe, max_bytes).to_owned()
}

/// `text` cut to at most `max` bytes on a character boundary.
fn cut_str(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn json_size(value: &Value) -> usize {
    // Serializing a Value cannot fail; a failure would only be counted as too large.
    serde_json::to_vec(value).map_or(usize::MAX, |bytes| bytes.len())
}

/// Bytes `c` takes inside a JSON string as serde_json writes it.
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

fn escaped_size(text: &str) -> usize {
    text.chars().map(escaped_len).sum()
}

/// The longest prefix of `text` whose JSON-escaped form fits `budget` bytes.
fn prefix_within(text: &str, budget: usize) -> &str {
    let mut used = 0;
    for (at, c) in text.char_indices() {
        used += escaped_len(c);
        if used > budget {
            return &text[..at];
        }
    }
    text
}

/// `text` cut so that its JSON-escaped form fits `budget` bytes, ending in [`CUT_MARKER`]
/// when that fits too; `None` when nothing of it fits.
fn cut_text(text: &str, budget: usize) -> Option<String> {
    let marker = escaped_size(CUT_MARKER);
    let cut = if budget > marker {
        let mut cut = prefix_within(text, budget - marker).to_owned();
        cut.push_str(CUT_MARKER);
        cut
    } else {
        prefix_within(text, budget).to_owned()
    };
    (!cut.is_empty()).then_some(cut)
}

/// The result within `max_bytes` serialized, and whether anything was cut; `None` when
/// not even an empty result fits.
fn cap_result(result: Value, max_bytes: usize) -> Option<(Value, bool)> {
    if json_size(&result) <= max_bytes {
        return Some((result, false));
    }
    let Value::Object(mut map) = result else {
        // Not a CallToolResult object; nothing of it can be kept in part.
        return fits(serde_json::json!({ "content": [] }), max_bytes).map(|v| (v, true));
    };
    let structured = map.remove("structuredContent");
    let content = match map.remove("content") {
        Some(Value::Array(blocks)) => blocks,
        _ => Vec::new(),
    };
    map.insert("content".into(), Value::Array(Vec::new()));
    let mut used = json_size(&Value::Object(map.clone()));
    if used > max_bytes {
        // An oversized `_meta` or unknown field: only what the model needs stays.
        map.retain(|key, _| key == "content" || key == "isError");
        used = json_size(&Value::Object(map.clone()));
        if used > max_bytes {
            return None;
        }
    }
    let mut kept = Vec::new();
    for block in content {
        let separator = usize::from(!kept.is_empty());
        let Some(room) = max_bytes.checked_sub(used + separator) else {
            break;
        };
        let size = json_size(&block);
        let block = if size <= room {
            Some(block)
        } else {
            shrink_block(block, size, room)
        };
        if let Some(block) = block {
            used += separator + json_size(&block);
            kept.push(block);
        }
    }
    map.insert("content".into(), Value::Array(kept));
    if let Some(structured) = structured {
        let field = json_size(&Value::String("structuredContent".into())) + 1;
        if used + 1 + field + json_size(&structured) <= max_bytes {
            map.insert("structuredContent".into(), structured);
        }
    }
    fits(Value::Object(map), max_bytes).map(|v| (v, true))
}

fn fits(value: Value, max_bytes: usize) -> Option<Value> {
    (json_size(&value) <= max_bytes).then_some(value)
}

/// A content block that does not fit `room` bytes as one that does: text cut, an
/// embedded resource's text cut, anything else (image, audio, blob, link) replaced by a
/// text placeholder naming its type and size; `None` when not even that fits.
fn shrink_block(mut block: Value, size: usize, room: usize) -> Option<Value> {
    let kind = block
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_owned();
    let text_at: Option<&[&str]> = match kind.as_str() {
        "text" => Some(&["text"]),
        "resource"
            if block
                .pointer("/resource/text")
                .is_some_and(Value::is_string) =>
        {
            Some(&["resource", "text"])
        }
        _ => None,
    };
    if let Some(path) = text_at {
        let pointer: String = path.iter().map(|part| format!("/{part}")).collect();
        let text = block.pointer_mut(&pointer)?;
        let full = std::mem::take(text);
        let overhead = json_size(&block);
        let cut = cut_text(full.as_str()?, room.checked_sub(overhead)?)?;
        *block.pointer_mut(&pointer)? = Value::String(cut);
        return Some(block);
    }
    fits(placeholder(&block, &kind, size), room)
}

/// Binary blocks whose data alone is over the cap replaced by their placeholders, before
/// the sanitizer cuts their data (and so their size) down; whether any was.
fn replace_oversized_binaries(result: &mut Value, max_bytes: usize) -> bool {
    let Some(blocks) = result.get_mut("content").and_then(Value::as_array_mut) else {
        return false;
    };
    let mut replaced = false;
    for block in blocks {
        let data = block
            .get("data")
            .or_else(|| block.pointer("/resource/blob"))
            .and_then(Value::as_str);
        if data.is_some_and(|data| data.len() > max_bytes) {
            let kind = block
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("unknown")
                .to_owned();
            *block = placeholder(block, &kind, 0);
            replaced = true;
        }
    }
    replaced
}

/// A text block standing for `block` (of `kind`, `size` bytes serialized): its type,
/// MIME type and size (decoded, for base64 data).
fn placeholder(block: &Value, kind: &str, size: usize) -> Value {
    let mime = block
        .get("mimeType")
        .or_else(|| block.pointer("/resource/mimeType"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let data = block
        .get("data")
        .or_else(|| block.pointer("/resource/blob"))
        .and_then(Value::as_str);
    // Base64 carries three bytes in four characters.
    let bytes = data.map_or(size, |data| data.trim_end_matches('=').len() * 3 / 4);
    let what = match mime {
        Some(mime) => format!("{kind} content ({mime}, {bytes} bytes)"),
        None => format!("{kind} content ({bytes} bytes)"),
    };
    serde_json::json!({
        "type": "text",
        "text": format!("[{what} omitted: larger than the result cap]"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text_result(text: &str) -> Value {
        json!({"content": [{"type": "text", "text": text}], "isError": false})
    }

    #[test]
    fn a_result_within_the_cap_is_untouched() {
        let result = text_result("hello");
        let (capped, truncated) = cap_result(result.clone(), 1000).expect("fits");
        assert_eq!(capped, result);
        assert!(!truncated);
    }

    #[test]
    fn text_is_cut_on_a_character_boundary_within_the_cap() {
        let text = "é\"\n😀".repeat(1000);
        for cap in [60, 61, 62, 63, 100, 1000, 4321] {
            let (capped, truncated) = cap_result(text_result(&text), cap).expect("fits");
            assert!(truncated);
            assert!(
                json_size(&capped) <= cap,
                "cap {cap}: {}",
                json_size(&capped)
            );
            let cut = capped["content"][0]["text"].as_str().unwrap_or_default();
            let body = cut.strip_suffix(CUT_MARKER).unwrap_or(cut);
            assert!(text.starts_with(body), "cap {cap}");
        }
    }

    #[test]
    fn structured_content_is_dropped_when_it_does_not_fit() {
        let result = json!({
            "content": [{"type": "text", "text": "short"}],
            "structuredContent": {"text": "x".repeat(500)},
        });
        let (capped, truncated) = cap_result(result, 200).expect("fits");
        assert!(truncated);
        assert!(capped.get("structuredContent").is_none());
        assert_eq!(capped["content"][0]["text"], "short");
    }

    #[test]
    fn a_binary_block_over_the_cap_becomes_a_placeholder() {
        let result = json!({"content": [
            {"type": "image", "data": "A".repeat(4000), "mimeType": "image/png"},
        ]});
        let (capped, truncated) = cap_result(result, 300).expect("fits");
        assert!(truncated);
        let text = capped["content"][0]["text"].as_str().unwrap_or_default();
        assert!(
            text.contains("image content (image/png, 3000 bytes)"),
            "{text}"
        );
        assert!(json_size(&capped) <= 300);
    }

    #[test]
    fn nothing_fits_a_tiny_cap() {
        assert_eq!(cap_result(text_result("hello"), 5), None);
    }

    #[test]
    fn a_secret_cut_by_the_window_is_not_left_half_visible() {
        let mut secrets = SecretSet::new();
        let secret = "s3cr3t-value-0123456789";
        secrets.insert(secret);
        // Back-to-back secrets shrink when redacted, pulling the window's end (where one
        // is cut in half) below the cap unless that end is dropped.
        let max = 4 * REDACTION_MARGIN;
        for shift in [0, 1, 5, 11, 22] {
            let mut text = "x".repeat(shift);
            while text.len() <= max + REDACTION_MARGIN + 100 {
                text.push_str(secret);
            }
            let clean = sanitize_long(&text, &secrets, max);
            assert!(!clean.contains(&secret[..4]), "shift {shift}");
            assert!(clean.len() <= max);
        }
        let text = format!(
            "{}{secret}{}",
            "a".repeat(50),
            "b".repeat(3 * REDACTION_MARGIN)
        );
        let clean = sanitize_long(&text, &secrets, 100);
        assert!(
            clean.starts_with(&format!("{}[redacted]", "a".repeat(50))),
            "{clean}"
        );
        assert!(clean.len() <= 100);
    }
}
