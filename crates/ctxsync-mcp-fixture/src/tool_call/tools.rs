//! `--call-tools`: tools whose calls behave in ways tool-call routing must cope with (slow
//! and cancellable, large, image, failing, progress, sampling, environment, counting).

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use rmcp::{
    ErrorData, RoleServer,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, JsonObject,
        ProgressNotificationParam,
    },
    service::RequestContext,
};
use serde_json::{Value, json};

use crate::tool_spec::ToolSpec;

use super::log::{CallEvent, CallRecorder};

/// How a call's handler ended: only a call that ran to its end logs `finished`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Ran to its end.
    Finished,
    /// Stopped early because the call was cancelled.
    Cancelled,
}

/// A call tool's answer and how it ended.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) ending: Ending,
    pub(crate) response: Result<CallToolResponse, ErrorData>,
}

impl Answer {
    pub(crate) fn finished(response: Result<CallToolResponse, ErrorData>) -> Self {
        Self {
            ending: Ending::Finished,
            response,
        }
    }

    pub(crate) fn text(text: impl Into<String>) -> Self {
        Self::finished(Ok(
            CallToolResult::success(vec![ContentBlock::text(text)]).into()
        ))
    }

    pub(crate) fn tool_error(text: impl Into<String>) -> Self {
        Self::finished(Ok(
            CallToolResult::error(vec![ContentBlock::text(text)]).into()
        ))
    }

    pub(crate) fn cancelled() -> Self {
        Self {
            ending: Ending::Cancelled,
            // The SDK drops the answer to a cancelled request; this is never sent.
            response: Ok(CallToolResult::error(vec![ContentBlock::text("cancelled")]).into()),
        }
    }
}

/// What one call tool needs from the request and the server.
pub(crate) struct CallTool<'a> {
    pub(crate) request: &'a CallToolRequestParams,
    pub(crate) context: &'a RequestContext<RoleServer>,
    pub(crate) recorder: &'a CallRecorder,
    pub(crate) counter: &'a AtomicU64,
}

impl CallTool<'_> {
    /// Runs the named call tool, or `None` if the name is not one of them.
    pub(crate) async fn run(&self) -> Option<Answer> {
        let arguments = self.request.arguments.clone().unwrap_or_default();
        let answer = match self.request.name.as_ref() {
            "sleep" => self.sleep(&arguments).await,
            "sized_result" => sized_result(&arguments),
            "image" => image(&arguments),
            "fail" => fail(&arguments),
            "progress" => self.progress(&arguments).await,
            "sample" => super::sampling::sample(self).await,
            "env" => env(&arguments),
            "count" => {
                let value = self.counter.fetch_add(1, Ordering::SeqCst) + 1;
                Answer::text(value.to_string())
            }
            _ => return None,
        };
        Some(answer)
    }

    /// Logs `cancelled` once the call's token fires.
    pub(crate) async fn cancelled(&self) {
        self.context.ct.cancelled().await;
        self.recorder.record(CallEvent::Cancelled);
    }

    async fn sleep(&self, arguments: &JsonObject) -> Answer {
        let ms = match integer(arguments, "ms") {
            Ok(ms) => ms,
            Err(error) => return Answer::finished(Err(error)),
        };
        let ignore_cancel = match boolean(arguments, "ignore_cancel") {
            Ok(ignore) => ignore,
            Err(error) => return Answer::finished(Err(error)),
        };
        let deadline = tokio::time::sleep(Duration::from_millis(ms));
        tokio::pin!(deadline);
        tokio::select! {
            () = &mut deadline => return Answer::text(format!("slept {ms} ms")),
            () = self.cancelled() => {}
        }
        if !ignore_cancel {
            return Answer::cancelled();
        }
        deadline.await;
        Answer::text(format!("slept {ms} ms (cancellation ignored)"))
    }

    async fn progress(&self, arguments: &JsonObject) -> Answer {
        let (steps, interval) = match (
            integer(arguments, "steps"),
            integer(arguments, "interval_ms"),
        ) {
            (Ok(steps), Ok(ms)) => (steps, Duration::from_millis(ms)),
            (Err(error), _) | (_, Err(error)) => return Answer::finished(Err(error)),
        };
        let token = self.context.meta.get_progress_token();
        for step in 1..=steps {
            tokio::select! {
                () = tokio::time::sleep(interval) => {}
                () = self.cancelled() => return Answer::cancelled(),
            }
            let Some(token) = token.clone() else { continue };
            // Step counts are far below 2^53, so exact as f64.
            let (progress, total) = (step as f64, steps as f64);
            let params = ProgressNotificationParam::new(token, progress)
                .with_total(total)
                .with_message(format!("step {step} of {steps}"));
            if self.context.peer.notify_progress(params).await.is_err() {
                break; // the client is gone
            }
        }
        Answer::text("done")
    }
}

/// The characters `sized_result` cycles through: ASCII with 2-, 3- and 4-byte UTF-8 ones.
const SIZED_PATTERN: &str = "abcdefgh é € 😀\n";

/// Exactly `bytes` bytes of [`SIZED_PATTERN`] repeated, padded with `.` where the next
/// multi-byte character would not fit.
fn sized_text(bytes: usize) -> String {
    let mut text = String::with_capacity(bytes);
    for ch in SIZED_PATTERN.chars().cycle() {
        if text.len() + ch.len_utf8() > bytes {
            break;
        }
        text.push(ch);
    }
    text.extend(std::iter::repeat_n('.', bytes - text.len()));
    text
}

fn sized_result(arguments: &JsonObject) -> Answer {
    let (bytes, structured) = match (
        integer(arguments, "bytes"),
        boolean(arguments, "structured"),
    ) {
        (Ok(bytes), Ok(structured)) => (bytes, structured),
        (Err(error), _) | (_, Err(error)) => return Answer::finished(Err(error)),
    };
    let Ok(bytes) = usize::try_from(bytes) else {
        return Answer::finished(Err(ErrorData::invalid_params("bytes is too large", None)));
    };
    let text = sized_text(bytes);
    let mut result = CallToolResult::success(vec![ContentBlock::text(text.clone())]);
    if structured {
        result.structured_content = Some(json!({ "text": text }));
    }
    Answer::finished(Ok(result.into()))
}

/// The PNG file signature: the image's raw bytes start with it.
const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];

fn image(arguments: &JsonObject) -> Answer {
    let bytes = match integer(arguments, "bytes").map(usize::try_from) {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(_)) => {
            return Answer::finished(Err(ErrorData::invalid_params("bytes is too large", None)));
        }
        Err(error) => return Answer::finished(Err(error)),
    };
    let raw: Vec<u8> = PNG_SIGNATURE
        .into_iter()
        .chain(std::iter::repeat(0))
        .take(bytes)
        .collect();
    let result = CallToolResult::success(vec![ContentBlock::image(base64(&raw), "image/png")]);
    Answer::finished(Ok(result.into()))
}

/// Standard base64 with padding (a few lines instead of a dependency for one test tool).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let byte = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
        let group = (byte(0) << 16) | (byte(1) << 8) | byte(2);
        for i in 0..4 {
            if i <= chunk.len() {
                let index = (group >> (18 - 6 * i)) & 0x3f;
                out.push(char::from(ALPHABET[index as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn fail(arguments: &JsonObject) -> Answer {
    let (mode, message) = match (string(arguments, "mode"), string(arguments, "message")) {
        (Ok(mode), Ok(message)) => (mode, message),
        (Err(error), _) | (_, Err(error)) => return Answer::finished(Err(error)),
    };
    match mode {
        "tool" => Answer::tool_error(message),
        "rpc" => Answer::finished(Err(ErrorData::invalid_params(message.to_owned(), None))),
        other => Answer::finished(Err(ErrorData::invalid_params(
            format!("mode must be \"tool\" or \"rpc\", not {other:?}"),
            None,
        ))),
    }
}

fn env(arguments: &JsonObject) -> Answer {
    let name = match string(arguments, "name") {
        Ok(name) => name,
        Err(error) => return Answer::finished(Err(error)),
    };
    match std::env::var(name) {
        Ok(value) => Answer::text(value),
        Err(error) => Answer::tool_error(format!("environment variable {name}: {error}")),
    }
}

fn invalid(name: &str, expected: &str) -> ErrorData {
    ErrorData::invalid_params(format!("argument {name:?} must be {expected}"), None)
}

/// A required non-negative integer argument.
fn integer(arguments: &JsonObject, name: &str) -> Result<u64, ErrorData> {
    arguments
        .get(name)
        .and_then(Value::as_u64)
        .ok_or_else(|| invalid(name, "a non-negative integer"))
}

/// An optional boolean argument (false when absent).
fn boolean(arguments: &JsonObject, name: &str) -> Result<bool, ErrorData> {
    match arguments.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(value) => value.as_bool().ok_or_else(|| invalid(name, "a boolean")),
    }
}

/// A required string argument.
fn string<'a>(arguments: &'a JsonObject, name: &str) -> Result<&'a str, ErrorData> {
    arguments
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(name, "a string"))
}

fn spec(name: &str, description: &str, schema: Value) -> ToolSpec {
    let Value::Object(input_schema) = schema else {
        unreachable!("literal schemas are objects")
    };
    ToolSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        input_schema,
    }
}

/// The tools `--call-tools` adds, with their input schemas.
pub(crate) fn specs() -> Vec<ToolSpec> {
    let count = |what: &str| json!({ "type": "integer", "minimum": 0, "description": what });
    vec![
        spec(
            "sleep",
            "Sleeps for `ms` milliseconds, then answers. A cancelled call stops at once unless \
             `ignore_cancel` is true, in which case it notes the cancellation and sleeps to the end.",
            json!({
                "type": "object",
                "properties": {
                    "ms": count("How long to sleep, in milliseconds"),
                    "ignore_cancel": { "type": "boolean", "default": false, "description": "Keep sleeping after the call is cancelled" },
                },
                "required": ["ms"],
            }),
        ),
        spec(
            "sized_result",
            "Returns one text block of exactly `bytes` UTF-8 bytes: ASCII with the multi-byte \
             characters \u{e9} (2 bytes), \u{20ac} (3 bytes) and \u{1f600} (4 bytes) mixed in, padded with \
             '.' at the end. With `structured`, also `structuredContent` {\"text\": <the same text>}.",
            json!({
                "type": "object",
                "properties": {
                    "bytes": count("Size of the text in bytes"),
                    "structured": { "type": "boolean", "default": false, "description": "Also return structuredContent" },
                },
                "required": ["bytes"],
            }),
        ),
        spec(
            "image",
            "Returns one image content block (image/png) whose base64 data decodes to exactly \
             `bytes` bytes: the PNG signature followed by zero bytes (not a decodable picture).",
            json!({
                "type": "object",
                "properties": { "bytes": count("Raw size of the image in bytes") },
                "required": ["bytes"],
            }),
        ),
        spec(
            "fail",
            "Fails with `message`: mode \"tool\" answers a result with isError true and the \
             message as text; mode \"rpc\" answers a JSON-RPC error (invalid params, -32602).",
            json!({
                "type": "object",
                "properties": {
                    "mode": { "type": "string", "enum": ["tool", "rpc"], "description": "How to fail" },
                    "message": { "type": "string", "description": "The error message" },
                },
                "required": ["mode", "message"],
            }),
        ),
        spec(
            "progress",
            "Sends `steps` progress notifications (progress 1..=steps, total steps, a message), \
             one every `interval_ms`, for the request's progress token if it has one; then \
             returns \"done\".",
            json!({
                "type": "object",
                "properties": {
                    "steps": count("Number of notifications"),
                    "interval_ms": count("Wait before each notification, in milliseconds"),
                },
                "required": ["steps", "interval_ms"],
            }),
        ),
        spec(
            "sample",
            super::sampling::DESCRIPTION,
            json!({ "type": "object", "properties": {} }),
        ),
        spec(
            "env",
            "Returns the value of the environment variable `name` as text (isError if unset).",
            json!({
                "type": "object",
                "properties": { "name": { "type": "string", "description": "Variable name" } },
                "required": ["name"],
            }),
        ),
        spec(
            "count",
            "Increments this fixture instance's call counter and returns its new value.",
            json!({ "type": "object", "properties": {} }),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sized_text_is_exact_and_mixes_widths() {
        for bytes in [0, 1, 9, 10, 11, 12, 13, 20, 21, 22, 1000, 65_537] {
            let text = sized_text(bytes);
            assert_eq!(text.len(), bytes);
        }
        let text = sized_text(1000);
        for wide in ['\u{e9}', '\u{20ac}', '\u{1f600}'] {
            assert!(text.contains(wide), "{wide}");
        }
    }

    #[test]
    fn base64_matches_the_standard_alphabet() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(&PNG_SIGNATURE), "iVBORw0KGgo=");
        assert_eq!(base64(&[0xff, 0xfe]), "//4=");
    }

    #[test]
    fn every_call_tool_has_an_object_schema() {
        let specs = specs();
        assert_eq!(specs.len(), 8);
        for spec in specs {
            assert_eq!(spec.input_schema["type"], "object", "{}", spec.name);
            assert!(!spec.description.is_empty(), "{}", spec.name);
        }
    }
}
