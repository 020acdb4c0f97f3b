//! The golden tool list several crates' golden vectors are computed over (the body digest,
//! the published server row): one literal, so those vectors all describe the same tools.

use ctxsync_mcp_model::{McpIcon, McpTool, McpToolAnnotations};
use serde_json::json;

/// A tool with every field set (JSON with a non-ASCII key, two icons), and one with
/// nothing but its name, its input schema and empty annotations.
pub fn tools() -> Vec<McpTool> {
    vec![
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
            output_schema: Some(json!({"type": "object", "required": ["text"]})),
            icons: vec![
                McpIcon {
                    src: "data:image/png;base64,AAAA".into(),
                    mime_type: "image/png".into(),
                    sizes: vec!["48x48".into(), "any".into()],
                    theme: "dark".into(),
                },
                McpIcon {
                    src: "https://example.com/i.svg".into(),
                    ..Default::default()
                },
            ],
            meta: Some(json!({"ui": {"resourceUri": "ui://read"}, "é": [1, null]})),
        },
        McpTool {
            name: "ping".into(),
            input_schema: json!({"type": "object"}),
            annotations: Some(McpToolAnnotations::default()),
            ..Default::default()
        },
    ]
}
