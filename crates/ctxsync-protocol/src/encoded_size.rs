//! The encoded sizes the wire limits of [`limits`](crate::limits) are measured in, on
//! both sides: [`body_len`] of a wire body (what the server measures), the same computed
//! from a domain body without building its wire copy (what the agent bounds itself
//! with), and JSON text lengths counted without building the text.

use prost::Message;
use prost::encoding::{encoded_len_varint, key_len};

use crate::domain::{
    InstructionFileBody, McpConnectTimings, McpIcon, McpServerBody, McpServerInfo, McpTool,
    McpToolAnnotations, ResourceBody, SkillBody,
};
use crate::v1::context_resource::Body;

/// The encoded size of a body variant's message, the measure both sides use.
pub fn body_len(body: &Body) -> usize {
    match body {
        Body::InstructionFile(m) => m.encoded_len(),
        Body::Skill(m) => m.encoded_len(),
        Body::McpConfig(m) => m.encoded_len(),
        Body::McpServer(m) => m.encoded_len(),
    }
}

/// The longest prefix of `text` that fits in `max_bytes` and ends on a UTF-8 boundary.
pub fn truncate_to_boundary(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The length of a JSON value's wire text (compact, as `to_string` writes it), counted
/// without building the text.
pub fn json_text_len(value: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    write_json(&mut count, value);
    count.0
}

/// Writes a JSON value's compact text into `out`, a sink that never refuses bytes (a
/// counter, a hasher): serializing a `Value` fails only when its writer does, so there
/// is no error to report.
pub(crate) fn write_json(out: impl std::io::Write, value: &serde_json::Value) {
    let _infallible = serde_json::to_writer(out, value);
}

// Encoded sizes of domain bodies, equal to prost's `encoded_len` of their wire form (what
// the server measures against the limits above) but computed from the domain types, so
// measuring never builds a throwaway wire copy. Field numbers are agent.proto's.

/// The encoded size of a body's message, as [`body_len`] measures the
/// wire body it converts to.
pub fn encoded_body_len(body: &ResourceBody) -> usize {
    match body {
        ResourceBody::InstructionFile(InstructionFileBody { content }) => string_len(1, content),
        ResourceBody::Skill(SkillBody {
            meta,
            name,
            description,
        }) => string_len(1, meta) + string_len(2, name) + string_len(3, description),
        ResourceBody::McpConfig => 0,
        ResourceBody::McpServer(server) => {
            encoded_server_len_without_tools(server)
                + server
                    .tools
                    .iter()
                    .map(encoded_tool_entry_len)
                    .sum::<usize>()
        }
    }
}

/// The encoded size of a server body's message without its tools.
pub fn encoded_server_len_without_tools(server: &McpServerBody) -> usize {
    let McpServerBody {
        server_name,
        description,
        tools: _,
        protocol_version,
        server_info,
        instructions,
        timings,
        always_load,
    } = server;
    let info = server_info.as_ref().map(|info| {
        let McpServerInfo {
            name,
            version,
            title,
            description,
        } = info;
        string_len(1, name)
            + string_len(2, version)
            + string_len(3, title)
            + string_len(4, description)
    });
    let timings = timings.as_ref().map(|t| {
        let McpConnectTimings {
            start_ms,
            handshake_ms,
            tools_ms,
        } = t;
        start_ms.map_or(0, |ms| key_len(1) + encoded_len_varint(ms))
            + number_len(2, *handshake_ms)
            + number_len(3, *tools_ms)
    });
    string_len(1, server_name)
        + string_len(2, description)
        + string_len(4, protocol_version)
        + info.map_or(0, |len| entry_len(5, len))
        + string_len(6, instructions)
        + timings.map_or(0, |len| entry_len(7, len))
        + if *always_load { key_len(8) + 1 } else { 0 }
}

/// What one tool adds to a server body's message: its field key, length and message.
pub fn encoded_tool_entry_len(tool: &McpTool) -> usize {
    entry_len(3, encoded_tool_len(tool))
}

/// The encoded size of a tool's message.
pub fn encoded_tool_len(tool: &McpTool) -> usize {
    let McpTool {
        name,
        description,
        input_schema,
        title,
        annotations,
        output_schema,
        icons,
        meta,
    } = tool;
    let annotations = annotations.as_ref().map(|a| {
        let McpToolAnnotations {
            title,
            read_only_hint,
            destructive_hint,
            idempotent_hint,
            open_world_hint,
        } = a;
        let flag = |tag: u32, value: &Option<bool>| value.map_or(0, |_| key_len(tag) + 1);
        string_len(1, title)
            + flag(2, read_only_hint)
            + flag(3, destructive_hint)
            + flag(4, idempotent_hint)
            + flag(5, open_world_hint)
    });
    let icons: usize = icons
        .iter()
        .map(|icon| {
            let McpIcon {
                src,
                mime_type,
                sizes,
                theme,
            } = icon;
            let sizes: usize = sizes.iter().map(|size| entry_len(3, size.len())).sum();
            entry_len(
                7,
                string_len(1, src) + string_len(2, mime_type) + sizes + string_len(4, theme),
            )
        })
        .sum();
    string_len(1, name)
        + string_len(2, description)
        + json_len(3, Some(input_schema))
        + string_len(4, title)
        + annotations.map_or(0, |len| entry_len(5, len))
        + json_len(6, output_schema.as_ref())
        + icons
        + json_len(8, meta.as_ref())
}

/// A length-delimited field that is always sent (a set message, a repeated entry).
fn entry_len(tag: u32, len: usize) -> usize {
    key_len(tag) + encoded_len_varint(len as u64) + len
}

/// A proto3 string: left out when empty.
fn string_len(tag: u32, text: &str) -> usize {
    if text.is_empty() {
        0
    } else {
        entry_len(tag, text.len())
    }
}

/// A JSON field sent as its text; absent is the empty string.
fn json_len(tag: u32, value: Option<&serde_json::Value>) -> usize {
    match value.map(json_text_len) {
        Some(len) if len > 0 => entry_len(tag, len),
        _ => 0,
    }
}

/// A proto3 integer: left out when zero.
fn number_len(tag: u32, value: u64) -> usize {
    if value == 0 {
        0
    } else {
        key_len(tag) + encoded_len_varint(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_whole_characters() {
        let check = |text: &str, max: usize, expect: &str| {
            assert_eq!(
                truncate_to_boundary(text, max),
                expect,
                "{text:?} to {max} bytes"
            )
        };
        check("abc", 3, "abc");
        check("abc", 2, "ab");
        check("aé", 2, "a"); // é is two bytes
        check("aé", 3, "aé");
        check("€€", 5, "€"); // € is three bytes
        check("", 0, "");
    }
}

#[cfg(test)]
mod encoded_len_tests {
    use serde_json::json;

    use super::*;
    use crate::domain::fixtures;
    use crate::v1;

    fn wire(body: &ResourceBody) -> Body {
        v1::ContextResource::from(crate::Resource {
            source: String::new(),
            source_path: None,
            content_hash: String::new(),
            size_bytes: 0,
            status: crate::ResourceStatus::Ok,
            error: None,
            body: body.clone(),
        })
        .body
        .expect("a body")
    }

    fn check(body: ResourceBody) {
        assert_eq!(encoded_body_len(&body), body_len(&wire(&body)), "{body:?}");
    }

    #[test]
    fn domain_sizes_equal_prost_sizes_of_the_wire_form() {
        check(ResourceBody::McpConfig);
        check(ResourceBody::InstructionFile(InstructionFileBody {
            content: "é".repeat(70_000),
        }));
        check(ResourceBody::Skill(SkillBody {
            meta: "m".into(),
            name: String::new(),
            description: "d".repeat(200),
        }));
        check(ResourceBody::McpServer(McpServerBody::default()));
        let mut server = fixtures::server();
        check(ResourceBody::McpServer(server.clone()));
        server.timings = Some(McpConnectTimings::default());
        server.server_info = Some(McpServerInfo::default());
        server.always_load = false;
        server.tools.push(McpTool {
            input_schema: json!({}),
            output_schema: Some(json!({"x": "y".repeat(300)})),
            icons: vec![McpIcon {
                sizes: vec![String::new(), "any".into()],
                ..Default::default()
            }],
            annotations: Some(McpToolAnnotations {
                idempotent_hint: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        });
        check(ResourceBody::McpServer(server));
    }

    #[test]
    fn json_text_len_is_the_length_of_the_text() {
        for value in [json!({}), json!({"é": ["\u{1}", 1.5, null]}), json!("x")] {
            assert_eq!(json_text_len(&value), value.to_string().len());
        }
    }
}
