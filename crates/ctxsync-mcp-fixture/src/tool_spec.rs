//! One tool the fixture offers. Apart from the config so that the call tools can describe
//! themselves without the config and the tool-call module importing each other.

use serde_json::Value;

/// One tool the fixture offers, as given with `--tool-json`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// Tool name.
    pub name: String,
    /// Tool description.
    pub description: String,
    /// JSON schema of the input (an object).
    pub input_schema: serde_json::Map<String, Value>,
}

impl ToolSpec {
    /// A tool with an object schema taking one optional string `value`.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {"value": {"type": "string"}}
        });
        let Value::Object(input_schema) = schema else {
            unreachable!("literal is an object")
        };
        Self {
            name: name.into(),
            description: description.into(),
            input_schema,
        }
    }

    /// The `--tool-json` form of this tool, which the config's argument parser reads back.
    pub(crate) fn to_json(&self) -> String {
        serde_json::json!({
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
        })
        .to_string()
    }
}
