//! One MCP tool as its server describes it, and the two spellings of its `_meta` key.

use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One tool of a server. Everything but the name and input schema is optional, and all of
/// it is the server's word: annotations in particular are hints, not guarantees.
///
/// Its wire form is protocol's generated `v1::McpTool`, whose schemas and meta are JSON text.
//
// `Serialize` is written by hand (below) only to choose the `_meta` key's spelling; the
// attributes here still say what it does, for `Deserialize` and the OpenAPI schema.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(
        description = "One tool of a server. Everything but the name and input schema is optional, and all of\nit is the server's word: annotations in particular are hints, not guarantees."
    )
)]
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct McpTool {
    /// The tool's name, unique within its server.
    pub name: String,
    /// What the tool does, for the model; empty when none.
    #[serde(default)]
    pub description: String,
    /// A JSON Schema document.
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub input_schema: serde_json::Value,
    /// A display name; empty when none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub title: String,
    /// Hints about the tool's behaviour, when the server gave any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<McpToolAnnotations>,
    /// The JSON Schema of the structured result, when the server gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub output_schema: Option<serde_json::Value>,
    /// The tool's icons; empty when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub icons: Vec<McpIcon>,
    /// The tool's `_meta` object (MCP Apps put their `ui` entry here).
    #[serde(default, alias = "_meta", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub meta: Option<serde_json::Value>,
}

/// A tool's behaviour hints, untrusted unless its server is.
///
/// Its wire form is protocol's generated `v1::McpToolAnnotations`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(description = "A tool's behaviour hints, untrusted unless its server is.")
)]
#[serde(default)]
pub struct McpToolAnnotations {
    /// A display name; empty when none.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub title: String,
    /// The tool does not modify its environment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// The tool may perform destructive updates (meaningful only when not read-only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Calling it again with the same arguments has no further effect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// The tool interacts with an open world of external entities.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

/// One icon of a tool: a URL or a bounded `data:` URI.
///
/// Its wire form is protocol's generated `v1::McpIcon`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(
    feature = "openapi",
    schema(description = "One icon of a tool: a URL or a bounded `data:` URI.")
)]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct McpIcon {
    /// A URL or a `data:` URI.
    pub src: String,
    /// The image's MIME type; empty when not given.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub mime_type: String,
    /// The sizes it suits (e.g. `48x48`, `any`); empty when not given.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sizes: Vec<String>,
    /// `light` or `dark`; empty for any background.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub theme: String,
}

impl McpTool {
    /// Writes the fields in declaration order, leaving out what is empty, with the meta
    /// key spelled `meta_key`.
    fn serialize_with_meta_key<S: Serializer>(
        &self,
        serializer: S,
        meta_key: &'static str,
    ) -> Result<S::Ok, S::Error> {
        let title = (!self.title.is_empty()).then_some(&self.title);
        let icons = (!self.icons.is_empty()).then_some(&self.icons);
        let present = [
            title.is_some(),
            self.annotations.is_some(),
            self.output_schema.is_some(),
            icons.is_some(),
            self.meta.is_some(),
        ];
        let len = 3 + present.iter().filter(|p| **p).count();
        let mut s = serializer.serialize_struct("McpTool", len)?;
        s.serialize_field("name", &self.name)?;
        s.serialize_field("description", &self.description)?;
        s.serialize_field("input_schema", &self.input_schema)?;
        optional(&mut s, "title", title)?;
        optional(&mut s, "annotations", self.annotations.as_ref())?;
        optional(&mut s, "output_schema", self.output_schema.as_ref())?;
        optional(&mut s, "icons", icons)?;
        optional(&mut s, meta_key, self.meta.as_ref())?;
        s.end()
    }
}

fn optional<S: SerializeStruct, T: Serialize + ?Sized>(
    s: &mut S,
    key: &'static str,
    value: Option<&T>,
) -> Result<(), S::Error> {
    match value {
        Some(value) => s.serialize_field(key, value),
        None => s.skip_field(key),
    }
}

/// The stored and HTTP form: the meta key is `meta`.
impl Serialize for McpTool {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.serialize_with_meta_key(serializer, "meta")
    }
}

/// A tool serialized as MCP spells it (`_meta`), as the engine's report prints it.
#[derive(Clone, Copy, Debug)]
pub struct McpSpelling<'a>(pub &'a McpTool);

impl Serialize for McpSpelling<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize_with_meta_key(serializer, "_meta")
    }
}

/// Serde `with` module for a list of tools in MCP's spelling (`_meta`): writes it from
/// any slice, reads it into anything a `Vec` converts into (e.g. `Arc<[McpTool]>`).
pub mod mcp_spelling {
    use super::*;

    /// Writes `tools` with `_meta` keys.
    pub fn serialize<S: Serializer>(tools: &[McpTool], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(tools.iter().map(McpSpelling))
    }

    /// Reads tools spelled either way.
    pub fn deserialize<'de, D, T>(deserializer: D) -> Result<T, D::Error>
    where
        D: Deserializer<'de>,
        T: From<Vec<McpTool>>,
    {
        Vec::<McpTool>::deserialize(deserializer).map(T::from)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn full() -> McpTool {
        McpTool {
            name: "read".into(),
            description: "Reads a file.".into(),
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            title: "Read".into(),
            annotations: Some(McpToolAnnotations {
                title: "Read file".into(),
                read_only_hint: Some(true),
                destructive_hint: Some(false),
                idempotent_hint: None,
                open_world_hint: Some(false),
            }),
            output_schema: Some(json!({"type": "object"})),
            icons: vec![McpIcon {
                src: "data:image/png;base64,AAAA".into(),
                mime_type: "image/png".into(),
                sizes: vec!["48x48".into(), "any".into()],
                theme: "dark".into(),
            }],
            meta: Some(json!({"ui": {"resourceUri": "ui://read"}})),
        }
    }

    const STORED: &str = r#"{"name":"read","description":"Reads a file.","input_schema":{"properties":{"path":{"type":"string"}},"type":"object"},"title":"Read","annotations":{"title":"Read file","read_only_hint":true,"destructive_hint":false,"open_world_hint":false},"output_schema":{"type":"object"},"icons":[{"src":"data:image/png;base64,AAAA","mime_type":"image/png","sizes":["48x48","any"],"theme":"dark"}],"meta":{"ui":{"resourceUri":"ui://read"}}}"#;

    #[test]
    fn both_spellings_write_every_field_in_order_and_read_back() {
        let tool = full();
        assert_eq!(serde_json::to_string(&tool).unwrap(), STORED);
        let mcp = STORED.replace(r#""meta":"#, r#""_meta":"#);
        assert_eq!(serde_json::to_string(&McpSpelling(&tool)).unwrap(), mcp);
        for text in [STORED, mcp.as_str()] {
            assert_eq!(serde_json::from_str::<McpTool>(text).unwrap(), tool);
        }
    }

    #[test]
    fn empty_parts_are_left_out() {
        let tool = McpTool {
            name: "x".into(),
            input_schema: json!({}),
            ..Default::default()
        };
        let text = r#"{"name":"x","description":"","input_schema":{}}"#;
        assert_eq!(serde_json::to_string(&tool).unwrap(), text);
        assert_eq!(serde_json::to_string(&McpSpelling(&tool)).unwrap(), text);
        // Stored before `description` defaulted.
        let read: McpTool = serde_json::from_str(r#"{"name":"x","input_schema":{}}"#).unwrap();
        assert_eq!(read, tool);
    }

    #[test]
    fn a_list_round_trips_in_mcp_spelling() {
        #[derive(Serialize, Deserialize, PartialEq, Debug)]
        struct Server {
            #[serde(with = "mcp_spelling")]
            tools: Arc<[McpTool]>,
        }
        let server = Server {
            tools: vec![full()].into(),
        };
        let text = serde_json::to_string(&server).unwrap();
        assert!(text.contains(r#""_meta":"#) && !text.contains(r#""meta":"#));
        assert_eq!(serde_json::from_str::<Server>(&text).unwrap(), server);
    }
}
