//! The resolver's MCP server rows: one row per server of the engine's report, hashed once,
//! with its self-description and tool definitions fitted to the wire's limits and the
//! snapshot's remaining budget (icons, then `_meta`, then output schemas shed before whole
//! tools are left out).

use ctxsync_mcp_model::{Report, ServerReport};
use ctxsync_protocol::encoded_size::{
    encoded_server_len_without_tools, encoded_tool_entry_len, truncate_to_boundary,
};
use ctxsync_protocol::limits::{
    MAX_BODY_BYTES, MAX_ICON_FIELD_BYTES, MAX_ICON_SIZES, MAX_ICON_SRC_BYTES, MAX_ICONS_PER_TOOL,
    MAX_INSTRUCTIONS_BYTES, MAX_PROTOCOL_VERSION_BYTES, MAX_SERVER_DESCRIPTION_BYTES,
    MAX_SERVER_INFO_BYTES, MAX_SOURCE_BYTES, MAX_TOOL_META_BYTES, MAX_TOOL_TITLE_BYTES,
};
use ctxsync_protocol::{
    McpServerBody, McpServerInfo, McpTool, Resource, ResourceBody, ResourceStatus,
};

use crate::hash::{Canonical, server_hash};

use super::rows::{bound_error, exclude, flag_long_source};

/// The error of a failed server that gave no reason.
pub const DEFAULT_SERVER_ERROR: &str = "failed to connect";
/// Prefix of an MCP server row's source: `mcp:<server name>`.
pub const SERVER_SOURCE_PREFIX: &str = "mcp:";

/// A server of the report with its content hash (computed once: tool lists can be large).
pub(super) struct HashedServer<'a> {
    pub(super) outcome: &'a ServerReport,
    content_hash: String,
    size_bytes: u64,
}

/// Servers sorted by name (ties by their content, so equal reports resolve alike whatever
/// order the engine listed them in), each hashed once.
pub(super) fn sorted_servers(report: &Report) -> Vec<HashedServer<'_>> {
    let mut servers: Vec<(String, HashedServer<'_>)> = report
        .servers
        .iter()
        .map(|outcome| {
            let (content_hash, size_bytes) = server_hash(&outcome.name, &outcome.tools);
            let mut key = Canonical::new("ctxsync.server-order.v1");
            key.field(content_hash.as_bytes());
            key.number(u64::from(outcome.connected));
            key.optional(outcome.error.as_deref());
            key.optional(outcome.warning.as_deref());
            // Everything else the row carries, so two outcomes under one name (the later
            // is dropped as a duplicate) sort the same whatever order discovery gave.
            key.number(u64::from(outcome.always_load));
            key.number(u64::from(outcome.needs_authorization));
            let details = outcome
                .details
                .as_ref()
                .map(|d| serde_json::to_string(d).expect("server details serialize to JSON"));
            key.optional(details.as_deref());
            let server = HashedServer {
                outcome,
                content_hash,
                size_bytes,
            };
            (key.finish().0, server)
        })
        .collect();
    servers.sort_by(|a, b| {
        a.1.outcome
            .name
            .cmp(&b.1.outcome.name)
            .then_with(|| a.0.cmp(&b.0))
    });
    servers.into_iter().map(|(_, s)| s).collect()
}

/// One server's row. `tool_budget` is what the whole snapshot can still spend on tools.
pub(super) fn server_row(
    source: String,
    hashed: &HashedServer<'_>,
    excluded: bool,
    tool_budget: &mut usize,
) -> Resource {
    let server = hashed.outcome;
    let (content_hash, size_bytes) = (hashed.content_hash.clone(), hashed.size_bytes);
    let server_name = truncate_to_boundary(&server.name, MAX_SOURCE_BYTES).to_owned();
    let mut row = Resource {
        source,
        source_path: None,
        content_hash,
        size_bytes,
        status: ResourceStatus::Ok,
        error: None,
        body: ResourceBody::McpServer(McpServerBody {
            server_name,
            description: String::new(),
            tools: Vec::new(),
            // A fixed-size flag: no size limit ever leaves it out.
            always_load: server.always_load,
            ..Default::default()
        }),
    };
    if let Some(flagged) = flag_long_source(&mut row) {
        return flagged;
    }
    if excluded {
        exclude(
            &mut row,
            "not included: the snapshot already holds 500 resources with content",
        );
        return row;
    }
    let mut notes: Vec<String> = Vec::new();
    if server.connected {
        notes.extend(server.error.clone());
        notes.extend(server.warning.clone());
        let ResourceBody::McpServer(body) = &mut row.body else {
            unreachable!("built above as a server body")
        };
        notes.extend(add_details(body, server, tool_budget));
        notes.extend(fit_tools(body, &server.tools, tool_budget));
    } else {
        row.status = if server.needs_authorization {
            ResourceStatus::NeedsAuthorization
        } else {
            ResourceStatus::Unreadable
        };
        notes.push(
            server
                .error
                .clone()
                .filter(|e| !e.is_empty())
                .unwrap_or_else(|| DEFAULT_SERVER_ERROR.into()),
        );
        notes.extend(server.warning.clone());
    }
    notes.retain(|n| !n.is_empty());
    row.error = (!notes.is_empty()).then(|| bound_error(notes.join("; ")));
    row
}

/// Sets the server's revision, self-description and timings, within the wire's limits and
/// what the snapshot can still spend; long instructions go first when it cannot.
fn add_details(
    body: &mut McpServerBody,
    server: &ServerReport,
    budget: &mut usize,
) -> Option<String> {
    let details = server.details.as_ref()?;
    // What the server left unsaid is stored as an empty string.
    let bound = |text: Option<&str>, max: usize| {
        truncate_to_boundary(text.unwrap_or_default(), max).to_owned()
    };
    let bare = server_body_len(body);
    body.protocol_version = bound(Some(&details.protocol_version), MAX_PROTOCOL_VERSION_BYTES);
    body.server_info = Some(McpServerInfo {
        name: bound(Some(&details.name), MAX_SERVER_INFO_BYTES),
        version: bound(Some(&details.version), MAX_SERVER_INFO_BYTES),
        title: bound(details.title.as_deref(), MAX_SERVER_INFO_BYTES),
        description: bound(details.description.as_deref(), MAX_SERVER_DESCRIPTION_BYTES),
    });
    body.timings = Some(details.timings);
    body.instructions = bound(details.instructions.as_deref(), MAX_INSTRUCTIONS_BYTES);
    let mut note = None;
    if server_body_len(body) - bare > *budget && !body.instructions.is_empty() {
        body.instructions.clear();
        note = Some("the server's instructions left out: the snapshot's size limits".to_owned());
    }
    let cost = server_body_len(body) - bare;
    if cost > *budget {
        *body = McpServerBody {
            server_name: std::mem::take(&mut body.server_name),
            always_load: body.always_load,
            ..Default::default()
        };
        return Some("the server's details left out: the snapshot's size limits".into());
    }
    *budget -= cost;
    note
}

/// A tool within the wire's per-field limits: long titles cut, icons and `_meta` that do not
/// fit left out (counted in `dropped`), a non-object input schema replaced.
fn bounded_tool(tool: &McpTool, dropped: &mut Dropped) -> McpTool {
    let mut tool = tool.clone();
    if !tool.input_schema.is_object() {
        dropped.schemas += 1;
        tool.input_schema = serde_json::json!({ "type": "object" });
    }
    tool.title = truncate_to_boundary(&tool.title, MAX_TOOL_TITLE_BYTES).to_owned();
    if let Some(annotations) = &mut tool.annotations {
        annotations.title =
            truncate_to_boundary(&annotations.title, MAX_TOOL_TITLE_BYTES).to_owned();
    }
    if tool.output_schema.as_ref().is_some_and(|s| !s.is_object()) {
        tool.output_schema = None;
        dropped.output_schemas += 1;
    }
    let offered = tool.icons.len();
    tool.icons.retain(|icon| {
        !icon.src.is_empty()
            && icon.src.len() <= MAX_ICON_SRC_BYTES
            && icon.mime_type.len() <= MAX_ICON_FIELD_BYTES
            && icon.theme.len() <= MAX_ICON_FIELD_BYTES
    });
    tool.icons.truncate(MAX_ICONS_PER_TOOL);
    for icon in &mut tool.icons {
        icon.sizes.retain(|size| size.len() <= MAX_ICON_FIELD_BYTES);
        icon.sizes.truncate(MAX_ICON_SIZES);
    }
    dropped.icons += offered - tool.icons.len();
    let meta_fits = |meta: &serde_json::Value| {
        meta.is_object() && meta.to_string().len() <= MAX_TOOL_META_BYTES
    };
    if tool.meta.as_ref().is_some_and(|meta| !meta_fits(meta)) {
        tool.meta = None;
        dropped.metas += 1;
    }
    tool
}

/// What [`bounded_tool`] left out, for one warning.
#[derive(Default)]
struct Dropped {
    schemas: usize,
    output_schemas: usize,
    icons: usize,
    metas: usize,
}

/// What a shedding step removes, and the removal (true when the tool had any).
type Shed = (&'static str, fn(&mut McpTool) -> bool);

/// Ways to make a server's tool definitions smaller, in the order they are used when the
/// definitions do not fit: what a model needs least goes first.
const SHEDDING: [Shed; 3] = [
    ("icons", |tool| !std::mem::take(&mut tool.icons).is_empty()),
    ("_meta", |tool| tool.meta.take().is_some()),
    ("output schemas", |tool| tool.output_schema.take().is_some()),
];

/// Adds as many of `tools` (in the server's order) as fit both this body's limit and the
/// snapshot's remaining budget: when all do not, it sheds icons, then `_meta`, then output
/// schemas, and only then leaves whole tools out. Returns warnings for what was changed.
fn fit_tools(body: &mut McpServerBody, tools: &[McpTool], tool_budget: &mut usize) -> Vec<String> {
    let mut notes = Vec::new();
    let base = server_body_len(body);
    let room = MAX_BODY_BYTES.saturating_sub(base).min(*tool_budget);
    let mut dropped = Dropped::default();
    let mut fitted: Vec<McpTool> = tools
        .iter()
        .map(|t| bounded_tool(t, &mut dropped))
        .collect();
    let mut costs: Vec<usize> = fitted.iter().map(tool_len).collect();
    let mut shed = Vec::new();
    for (what, strip) in SHEDDING {
        if costs.iter().sum::<usize>() <= room {
            break;
        }
        let mut any = false;
        for (tool, cost) in fitted.iter_mut().zip(&mut costs) {
            if strip(tool) {
                any = true;
                *cost = tool_len(tool);
            }
        }
        if any {
            shed.push(what);
        }
    }
    let mut used = 0usize;
    let mut left_out = 0usize;
    for (tool, cost) in fitted.into_iter().zip(costs) {
        if used + cost <= room {
            used += cost;
            body.tools.push(tool);
        } else {
            left_out += 1;
        }
    }
    *tool_budget -= used;
    if dropped.schemas > 0 {
        notes.push(format!(
            "{} tools had an input schema that is not a JSON object; sent with an empty object schema",
            dropped.schemas
        ));
    }
    let over_limits: Vec<String> = [
        (dropped.icons, "icons"),
        (dropped.metas, "_meta objects"),
        (
            dropped.output_schemas,
            "output schemas that are not objects",
        ),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect();
    if !over_limits.is_empty() {
        notes.push(format!(
            "left out as over the wire's limits: {}",
            over_limits.join(", ")
        ));
    }
    if !shed.is_empty() {
        notes.push(format!(
            "{} left out: the tool definitions exceed the snapshot's size limits",
            join_words(&shed)
        ));
    }
    if left_out > 0 {
        notes.push(format!(
            "{left_out} of {} tools left out: the tool list exceeds the snapshot's size limits",
            tools.len()
        ));
    }
    notes
}

/// "a", "a and b", "a, b and c".
fn join_words(words: &[&str]) -> String {
    match words {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// The wire size one tool adds to a server body: its field key, length and message, as the
/// protocol measures it (without building the wire message).
fn tool_len(tool: &McpTool) -> usize {
    encoded_tool_entry_len(tool)
}

/// A server body's size without its tools.
fn server_body_len(body: &McpServerBody) -> usize {
    encoded_server_len_without_tools(body)
}

pub(super) fn minimal_server_body_len(name: &str) -> usize {
    server_body_len(&McpServerBody {
        server_name: truncate_to_boundary(name, MAX_SOURCE_BYTES).to_owned(),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use ctxsync_protocol::limits::MAX_TOTAL_BODY_BYTES;

    use super::*;
    use ctxsync_protocol::{McpIcon, v1};

    /// Tools whose icons, `_meta`, output schemas and titles each weigh about `icon`,
    /// `meta`, `output` and `title` bytes, fitted into a fresh server body with the whole snapshot's budget.
    fn fit(
        count: usize,
        icon: usize,
        meta: usize,
        output: usize,
        title: usize,
    ) -> (McpServerBody, Vec<String>) {
        let tools: Vec<McpTool> = (0..count)
            .map(|i| McpTool {
                name: format!("tool_{i:03}"),
                input_schema: serde_json::json!({"type": "object"}),
                title: format!("Tool {i} {}", "t".repeat(title)),
                icons: vec![McpIcon {
                    src: format!("data:image/png;base64,{}", "A".repeat(icon)),
                    ..Default::default()
                }],
                meta: Some(serde_json::json!({"ui": "m".repeat(meta)})),
                output_schema: Some(serde_json::json!({"description": "o".repeat(output)})),
                ..Default::default()
            })
            .collect();
        let mut body = McpServerBody {
            server_name: "big".into(),
            ..Default::default()
        };
        let mut budget = MAX_TOTAL_BODY_BYTES;
        let notes = fit_tools(&mut body, &tools, &mut budget);
        assert!(
            server_body_len(&body) + body.tools.iter().map(tool_len).sum::<usize>()
                <= MAX_BODY_BYTES
        );
        (body, notes)
    }

    #[test]
    fn definitions_shed_icons_then_meta_then_output_schemas_then_tools() {
        // 60 tools × ~3 KB each: fits as it is.
        let (body, notes) = fit(60, 1000, 1000, 1000, 0);
        assert_eq!(body.tools.len(), 60);
        assert!(
            body.tools
                .iter()
                .all(|t| !t.icons.is_empty() && t.meta.is_some())
        );
        assert!(notes.is_empty(), "{notes:?}");

        // Icons of 14 KiB each break the limit; without them the rest fits.
        let (body, notes) = fit(60, 14_000, 1000, 1000, 0);
        assert_eq!(body.tools.len(), 60);
        assert!(
            body.tools
                .iter()
                .all(|t| t.icons.is_empty() && t.meta.is_some())
        );
        assert!(body.tools.iter().all(|t| t.output_schema.is_some()));
        assert_eq!(
            notes,
            ["icons left out: the tool definitions exceed the snapshot's size limits"]
        );

        // Then _meta.
        let (body, notes) = fit(60, 14_000, 4000, 1000, 0);
        assert!(
            body.tools
                .iter()
                .all(|t| t.meta.is_none() && t.output_schema.is_some())
        );
        assert_eq!(
            notes,
            ["icons and _meta left out: the tool definitions exceed the snapshot's size limits"]
        );

        // Then output schemas; titles and every tool stay.
        let (body, notes) = fit(60, 14_000, 4000, 5000, 0);
        assert_eq!(body.tools.len(), 60);
        assert!(
            body.tools
                .iter()
                .all(|t| t.output_schema.is_none() && !t.title.is_empty())
        );
        assert_eq!(
            notes,
            [
                "icons, _meta and output schemas left out: the tool definitions exceed the snapshot's size limits"
            ]
        );

        // Only then whole tools: 1000 tools whose bare definitions do not fit.
        let (body, notes) = fit(1000, 0, 0, 300, 300);
        assert!(
            body.tools.len() < 1000 && body.tools.len() > 500,
            "{}",
            body.tools.len()
        );
        assert!(body.tools.iter().all(|t| t.output_schema.is_none()));
        assert!(
            notes
                .last()
                .unwrap()
                .ends_with("tools left out: the tool list exceeds the snapshot's size limits")
        );
    }

    #[test]
    fn definitions_over_the_field_limits_are_cut_to_them() {
        let mut dropped = Dropped::default();
        let tool = bounded_tool(
            &McpTool {
                name: "t".into(),
                input_schema: serde_json::json!("not an object"),
                title: "é".repeat(MAX_TOOL_TITLE_BYTES),
                icons: vec![
                    McpIcon {
                        src: "s".into(),
                        sizes: vec!["16x16".into(); MAX_ICON_SIZES + 2],
                        ..Default::default()
                    };
                    MAX_ICONS_PER_TOOL + 1
                ],
                meta: Some(serde_json::json!({"k": "m".repeat(MAX_TOOL_META_BYTES)})),
                output_schema: Some(serde_json::json!([1])),
                ..Default::default()
            },
            &mut dropped,
        );
        assert!(tool.title.len() <= MAX_TOOL_TITLE_BYTES);
        assert_eq!(tool.icons.len(), MAX_ICONS_PER_TOOL);
        assert_eq!(tool.icons[0].sizes.len(), MAX_ICON_SIZES);
        assert_eq!((tool.meta, tool.output_schema), (None, None));
        assert_eq!(tool.input_schema, serde_json::json!({"type": "object"}));
        assert_eq!(
            (
                dropped.schemas,
                dropped.icons,
                dropped.metas,
                dropped.output_schemas
            ),
            (1, 1, 1, 1)
        );
    }

    #[test]
    fn tool_len_matches_prost() {
        let check = |name: &str, description: &str, schema: serde_json::Value| {
            let tool = McpTool {
                name: name.into(),
                description: description.into(),
                input_schema: schema.clone(),
                ..Default::default()
            };
            let wire = v1::McpTool {
                name: name.into(),
                description: description.into(),
                input_schema: schema.to_string(),
                ..Default::default()
            };
            let expect = prost::encoding::message::encoded_len(3, &wire);
            assert_eq!(tool_len(&tool), expect, "{name}");
        };
        check("", "", serde_json::json!({}));
        check(
            "read",
            "Reads a file.",
            serde_json::json!({"type": "object"}),
        );
        check(
            "x",
            &"é".repeat(70_000),
            serde_json::json!({"a": [1, 2, 3]}),
        );
        check(&"n".repeat(200), &"d".repeat(127), serde_json::json!({}));
    }

    #[test]
    fn always_load_is_kept_whatever_the_size_limits_leave_out() {
        let body = |connected: bool, budget: usize| {
            let outcome = ServerReport {
                name: "s".into(),
                connected,
                tools: vec![McpTool {
                    name: "t".into(),
                    input_schema: serde_json::json!({"type": "object"}),
                    ..Default::default()
                }]
                .into(),
                details: Some(ctxsync_mcp_model::ServerDetails {
                    instructions: Some("i".repeat(100)),
                    ..Default::default()
                }),
                always_load: true,
                ..Default::default()
            };
            let hashed = HashedServer {
                outcome: &outcome,
                content_hash: String::new(),
                size_bytes: 0,
            };
            let mut budget = budget;
            let row = server_row("mcp:s".into(), &hashed, false, &mut budget);
            let ResourceBody::McpServer(body) = row.body else {
                panic!("a server row")
            };
            body
        };
        let whole = body(true, MAX_TOTAL_BODY_BYTES);
        assert!(whole.always_load && whole.tools.len() == 1 && !whole.instructions.is_empty());
        // No room for details or tools: both left out, the flag stays.
        let bare = body(true, 0);
        assert!(bare.always_load && bare.tools.is_empty() && bare.server_info.is_none());
        assert!(body(false, MAX_TOTAL_BODY_BYTES).always_load);
    }
}

/// Golden vectors: today's server row (content hash, size, stored JSON, encoded size) and
/// per-tool wire sizes for tools with every field set, so a change in how they are built
/// or measured cannot change their bytes.
#[cfg(test)]
mod golden {
    use ctxsync_protocol::McpConnectTimings;
    use ctxsync_test_support::golden::tools;

    use ctxsync_mcp_model::ReportPhase;
    use ctxsync_protocol::limits::MAX_TOTAL_BODY_BYTES;

    use super::*;
    use crate::resolve::rows::wire_body_len;
    use ctxsync_mcp_model::ServerDetails;

    fn outcome() -> ServerReport {
        ServerReport {
            name: "fs".into(),
            connected: true,
            tools: tools().into(),
            error: None,
            warning: Some("kept".into()),
            details: Some(details()),
            always_load: true,
            needs_authorization: false,
        }
    }

    fn details() -> ServerDetails {
        ServerDetails {
            protocol_version: "2025-11-25".into(),
            name: "fs-server".into(),
            version: "1.2.3".into(),
            title: Some("Files".into()),
            description: Some("Serves files.".into()),
            instructions: Some("Read before you write.".into()),
            timings: McpConnectTimings {
                start_ms: Some(12),
                handshake_ms: 34,
                tools_ms: 56,
            },
        }
    }

    #[test]
    fn tool_sizes() {
        let sizes: Vec<usize> = tools().iter().map(tool_len).collect();
        assert_eq!(sizes, [285, 29]);
    }

    #[test]
    fn a_server_row_with_every_field_set() {
        let report = Report {
            phase: ReportPhase::Complete,
            servers: vec![outcome()],
            ..Default::default()
        };
        let servers = sorted_servers(&report);
        let mut budget = MAX_TOTAL_BODY_BYTES;
        let row = server_row("mcp:fs".into(), &servers[0], false, &mut budget);
        assert_eq!(
            row.content_hash,
            "d244d243fc0e2e87322fd71a5f5e9c3b2b4d55e7ab0da2586927ab5d677870a9"
        );
        assert_eq!(row.size_bytes, 608);
        assert_eq!(row.error.as_deref(), Some("kept"));
        assert_eq!(
            row.body.to_json().unwrap().to_string(),
            r#"{"always_load":true,"description":"","instructions":"Read before you write.","protocol_version":"2025-11-25","server_info":{"description":"Serves files.","name":"fs-server","title":"Files","version":"1.2.3"},"server_name":"fs","timings":{"handshake_ms":34,"start_ms":12,"tools_ms":56},"tools":[{"annotations":{"destructive_hint":false,"open_world_hint":false,"read_only_hint":true,"title":"Read file"},"description":"Reads a file.","icons":[{"mime_type":"image/png","sizes":["48x48","any"],"src":"data:image/png;base64,AAAA","theme":"dark"},{"src":"https://example.com/i.svg"}],"input_schema":{"properties":{"path":{"type":"string"}},"type":"object"},"meta":{"ui":{"resourceUri":"ui://read"},"é":[1,null]},"name":"read","output_schema":{"required":["text"],"type":"object"},"title":"Read"},{"annotations":{},"description":"","input_schema":{"type":"object"},"name":"ping"}]}"#
        );
        assert_eq!(wire_body_len(&row.body), 406);
        assert_eq!(MAX_TOTAL_BODY_BYTES - budget, 400);
    }
}
