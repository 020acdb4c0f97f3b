//! Canonical, length-prefixed encodings and their sha256 hashes: file contents, MCP server
//! rows and the snapshot's aggregate hash.
//!
//! Every field is written as its byte length (u64, big-endian) followed by its bytes, so
//! no two different field sequences encode alike. Each encoding starts with a domain tag
//! naming its version; changing an encoding means changing its tag.

use std::fmt::Write as _;

use ctxsync_protocol::{McpTool, Resource, ResourceBody};
use sha2::{Digest, Sha256};

/// A sha256 over length-prefixed fields.
pub(crate) struct Canonical {
    hasher: Sha256,
    bytes: u64,
}

impl Canonical {
    pub(crate) fn new(domain: &str) -> Self {
        let mut canonical = Self {
            hasher: Sha256::new(),
            bytes: 0,
        };
        canonical.field(domain.as_bytes());
        canonical
    }

    pub(crate) fn field(&mut self, bytes: &[u8]) {
        self.hasher.update((bytes.len() as u64).to_be_bytes());
        self.hasher.update(bytes);
        self.bytes += 8 + bytes.len() as u64;
    }

    pub(crate) fn number(&mut self, value: u64) {
        self.field(&value.to_be_bytes());
    }

    pub(crate) fn optional(&mut self, value: Option<&str>) {
        match value {
            None => self.number(0),
            Some(text) => {
                self.number(1);
                self.field(text.as_bytes());
            }
        }
    }

    /// The lower-case hex digest and how many bytes were hashed.
    pub(crate) fn finish(self) -> (String, u64) {
        (hex(&self.hasher.finalize()), self.bytes)
    }
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// A plain sha256 of file contents, fed in chunks (so it equals `sha256sum` of the file).
#[derive(Default)]
pub(crate) struct ContentHasher(Sha256);

impl ContentHasher {
    pub(crate) fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    pub(crate) fn finish(self) -> String {
        hex(&self.0.finalize())
    }
}

/// The content hash of a server row: its name and every tool it reported (name,
/// description, canonical schema). Warnings and errors are not part of it.
pub(crate) fn server_hash(name: &str, tools: &[McpTool]) -> (String, u64) {
    let mut canonical = Canonical::new("ctxsync.mcp-server.v1");
    canonical.field(name.as_bytes());
    canonical.number(tools.len() as u64);
    let mut schema = String::new();
    for tool in tools {
        canonical.field(tool.name.as_bytes());
        canonical.field(tool.description.as_bytes());
        schema.clear();
        canonical_json(&tool.input_schema, &mut schema);
        canonical.field(schema.as_bytes());
        canonical.field(tool.title.as_bytes());
        // The optional parts, each as canonical JSON (`null` or `[]` when absent).
        for part in [
            serde_json::to_value(&tool.annotations),
            serde_json::to_value(&tool.output_schema),
            serde_json::to_value(&tool.icons),
            serde_json::to_value(&tool.meta),
        ] {
            schema.clear();
            canonical_json(&part.expect("tool parts are JSON"), &mut schema);
            canonical.field(schema.as_bytes());
        }
    }
    canonical.finish()
}

/// True for the rows that never take part in the aggregate hash: MCP config files and MCP
/// servers, so an MCP-only change never dirties a chat's pinned context.
pub(crate) fn is_mcp(resource: &Resource) -> bool {
    matches!(
        resource.body,
        ResourceBody::McpConfig | ResourceBody::McpServer(_)
    )
}

/// sha256 over the canonical encoding of the non-MCP rows, sorted by source, so the result
/// depends only on the set of rows and never on the order they were found in.
/// `source_path` is left out: moving a workspace does not change what a chat sees.
pub(crate) fn aggregate_hash(resources: &[Resource]) -> String {
    let mut rows: Vec<&Resource> = resources.iter().filter(|r| !is_mcp(r)).collect();
    rows.sort_by(|a, b| a.source.cmp(&b.source));
    let mut canonical = Canonical::new("ctxsync.aggregate.v1");
    canonical.number(rows.len() as u64);
    for row in rows {
        canonical.field(row.source.as_bytes());
        canonical.field(row.body.kind().as_str().as_bytes());
        canonical.field(row.status.as_str().as_bytes());
        canonical.field(row.content_hash.as_bytes());
        canonical.number(row.size_bytes);
        canonical.optional(row.error.as_deref());
        match &row.body {
            ResourceBody::InstructionFile(body) => canonical.field(body.content.as_bytes()),
            ResourceBody::Skill(body) => {
                canonical.field(body.meta.as_bytes());
                canonical.field(body.name.as_bytes());
                canonical.field(body.description.as_bytes());
            }
            ResourceBody::McpConfig | ResourceBody::McpServer(_) => {}
        }
    }
    canonical.finish().0
}

/// JSON with object keys sorted at every level, whatever map order serde_json was built
/// with, so equal schemas always hash alike.
pub(crate) fn canonical_json(value: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical_json(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxsync_protocol::{InstructionFileBody, ResourceStatus};
    use serde_json::json;

    fn file(source: &str, content: &str) -> Resource {
        Resource {
            source: source.into(),
            source_path: None,
            content_hash: String::new(),
            size_bytes: content.len() as u64,
            status: ResourceStatus::Ok,
            error: None,
            body: ResourceBody::InstructionFile(InstructionFileBody {
                content: content.into(),
            }),
        }
    }

    #[test]
    fn length_prefixes_keep_field_boundaries() {
        let a = aggregate_hash(&[file("ab", "c")]);
        let b = aggregate_hash(&[file("a", "bc")]);
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
    }

    #[test]
    fn aggregate_ignores_order_source_path_and_mcp_rows() {
        let (x, y) = (file("x", "1"), file("y", "2"));
        let mut moved = x.clone();
        moved.source_path = Some("/elsewhere/x".into());
        let server = Resource {
            body: ResourceBody::McpServer(Default::default()),
            ..file("mcp:s", "")
        };
        let config = Resource {
            body: ResourceBody::McpConfig,
            ..file(".mcp.json", "")
        };
        let base = aggregate_hash(&[x.clone(), y.clone()]);
        assert_eq!(base, aggregate_hash(&[y.clone(), moved]));
        assert_eq!(base, aggregate_hash(&[server, x, config, y]));
    }

    #[test]
    fn canonical_json_sorts_keys() {
        let check = |value: serde_json::Value, expect: &str| {
            let mut out = String::new();
            canonical_json(&value, &mut out);
            assert_eq!(out, expect);
        };
        check(
            json!({"b": [1, {"d": null, "c": "é\""}], "a": true}),
            r#"{"a":true,"b":[1,{"c":"é\"","d":null}]}"#,
        );
        check(json!(1.5), "1.5");
    }

    #[test]
    fn server_hash_covers_tools() {
        let tool = |description: &str| McpTool {
            name: "read".into(),
            description: description.into(),
            input_schema: json!({"type": "object"}),
            ..Default::default()
        };
        assert_eq!(
            server_hash("fs", &[tool("a")]),
            server_hash("fs", &[tool("a")])
        );
        assert_ne!(
            server_hash("fs", &[tool("a")]),
            server_hash("fs", &[tool("b")])
        );
        assert_ne!(server_hash("fs", &[]), server_hash("fs2", &[]));
    }
}
