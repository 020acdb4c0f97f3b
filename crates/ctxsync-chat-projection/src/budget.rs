//! Deferral within a budget: a turn's tool definitions have a budget (a count and a size in
//! bytes of what the model receives). Under it, a turn carries every eligible tool. Over
//! it, the turn carries the tools that must stay loaded (servers with `alwaysLoad`, and
//! what find_tools activated for the turn) plus `find_tools` itself, whose description
//! lists the rest compactly: names with one-line descriptions, else names only, else
//! per-server counts, whichever is the richest that fits.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use serde_json::json;

use crate::find::{ActiveTools, MAX_NAMES, MAX_QUERIES};
use crate::naming::{EligibleTool, ModelTool};
use crate::text::{cap_chars, one_line};
use ctxsync_protocol::encoded_size::truncate_to_boundary;

/// The model-facing name of the search tool a deferring turn carries. Eligible tools are
/// always named `<server>__<tool>` or cut to 64 characters, so none can take it.
pub const FIND_TOOLS_NAME: &str = "find_tools";

/// Catalog lines cut descriptions to this many characters.
const CATALOG_DESCRIPTION_CHARS: usize = 80;

/// A turn's budget for tool definitions.
///
/// The defaults follow what large MCP setups measured: 88 definitions cost about 40,000
/// tokens (about 1.8 KB each), clients start grouping past 64 tools and refuse past 128,
/// and deferring once definitions pass about 10 % of a context is common. 64 tools or
/// 64 KiB (about 16,000 tokens, 8 % of a 200,000-token context) keeps a turn well inside
/// all of those.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolBudget {
    /// Most tool definitions a turn carries.
    pub max_tools: usize,
    /// Most bytes of tool definitions (as JSON) a turn carries.
    pub max_bytes: usize,
}

impl Default for ToolBudget {
    fn default() -> Self {
        Self {
            max_tools: 64,
            max_bytes: 64 * 1024,
        }
    }
}

/// How much of the catalog a deferring turn's find_tools description lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum CatalogDetail {
    /// Each deferred tool's name and one-line description.
    Descriptions,
    /// Each deferred tool's name.
    Names,
    /// How many tools each server has.
    ServerCounts,
    /// Only the totals (not even the counts fit).
    Totals,
}

/// What a turn over budget deferred.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Deferral {
    /// Eligible tools in all.
    pub eligible: usize,
    /// Eligible tools the turn carries anyway: `alwaysLoad` servers' and activated ones.
    pub loaded: usize,
    /// Eligible tools reachable only through find_tools.
    pub deferred: usize,
    /// How much of the catalog find_tools' description lists.
    pub catalog: CatalogDetail,
    /// Bytes of the turn's tool definitions, find_tools included.
    pub definition_bytes: usize,
}

/// A turn's tool definitions, and what was deferred when the catalog was over budget.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnTools {
    /// The tools the model receives, in catalog order (find_tools last when deferring);
    /// [`TurnTools::definitions`] is what it is handed.
    pub tools: Vec<EligibleTool>,
    /// `None` when every eligible tool is carried.
    pub deferral: Option<Deferral>,
}

impl TurnTools {
    /// The tools as the model receives them, in order.
    pub fn definitions(&self) -> Vec<ModelTool<'_>> {
        self.tools
            .iter()
            .map(EligibleTool::model_definition)
            .collect()
    }
}

/// Bytes of one tool's definition as the model receives it (compact JSON).
pub fn definition_bytes(tool: &EligibleTool) -> usize {
    serde_json::to_vec(&tool.model_definition()).map_or(0, |v| v.len())
}

/// The tool definitions for a turn over `tools` (the eligible tools, in catalog order)
/// within `budget`; `active` holds what find_tools activated for the turn.
pub fn plan_turn_tools(
    tools: &[EligibleTool],
    budget: &ToolBudget,
    active: &ActiveTools,
) -> TurnTools {
    let total: usize = tools.iter().map(definition_bytes).sum();
    if tools.len() <= budget.max_tools && total <= budget.max_bytes {
        return TurnTools {
            tools: tools.to_vec(),
            deferral: None,
        };
    }
    let mut loaded = Vec::new();
    let mut deferred = Vec::new();
    for tool in tools {
        if tool.always_load || active.contains(&tool.name) {
            loaded.push(tool.clone());
        } else {
            deferred.push(tool);
        }
    }
    let loaded_bytes: usize = loaded.iter().map(definition_bytes).sum();
    let empty = find_tools_definition(&preamble(deferred.len(), tools.len()));
    let room = budget
        .max_bytes
        .saturating_sub(loaded_bytes + definition_bytes(&empty));
    let (catalog, detail) = compact_catalog(&deferred, room);
    let find = find_tools_definition(&format!(
        "{}\n{catalog}",
        preamble(deferred.len(), tools.len())
    ));
    let loaded_count = loaded.len();
    loaded.push(find);
    let definition_bytes = loaded.iter().map(definition_bytes).sum();
    TurnTools {
        tools: loaded,
        deferral: Some(Deferral {
            eligible: tools.len(),
            loaded: loaded_count,
            deferred: deferred.len(),
            catalog: detail,
            definition_bytes,
        }),
    }
}

fn preamble(deferred: usize, eligible: usize) -> String {
    format!(
        "Search the workspace's MCP tools and load the ones you need for this turn. \
         {deferred} of {eligible} tools are not loaded yet; they are listed below. Call \
         with `names` for tools you know (exact names) or `queries` describing what you \
         need (`server: terms` searches one server). Tools found are loaded for the rest \
         of this turn."
    )
}

/// The richest listing of `deferred` within `room` bytes of JSON string content.
fn compact_catalog(deferred: &[&EligibleTool], room: usize) -> (String, CatalogDetail) {
    let descriptions: String = deferred
        .iter()
        .map(|t| {
            let text = cap_chars(
                &one_line(truncate_to_boundary(&t.description, 4096)),
                CATALOG_DESCRIPTION_CHARS,
            );
            if text.is_empty() {
                format!("- {}\n", t.name)
            } else {
                format!("- {}: {text}\n", t.name)
            }
        })
        .collect();
    if json_len(&descriptions) <= room {
        return (descriptions, CatalogDetail::Descriptions);
    }
    let names = deferred
        .iter()
        .map(|t| t.name.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    if json_len(&names) <= room {
        return (names, CatalogDetail::Names);
    }
    let mut per_server: BTreeMap<&str, usize> = BTreeMap::new();
    for tool in deferred {
        *per_server.entry(tool.server.as_str()).or_default() += 1;
    }
    let counts = per_server
        .iter()
        .map(|(server, n)| format!("{server} ({n})"))
        .collect::<Vec<_>>()
        .join(", ");
    if json_len(&counts) <= room {
        return (
            format!("Tools per server: {counts}"),
            CatalogDetail::ServerCounts,
        );
    }
    (
        format!(
            "{} tools from {} servers; search to see them.",
            deferred.len(),
            per_server.len()
        ),
        CatalogDetail::Totals,
    )
}

/// Bytes `text` takes inside a JSON string.
fn json_len(text: &str) -> usize {
    serde_json::to_string(text).map_or(usize::MAX, |s| s.len())
}

/// find_tools as a tool, with `description`. It is this server's own, so it has no MCP
/// server; only its model definition is ever written.
pub(crate) fn find_tools_definition(description: &str) -> EligibleTool {
    EligibleTool {
        name: FIND_TOOLS_NAME.to_owned(),
        server: String::new(),
        tool: FIND_TOOLS_NAME.to_owned(),
        description: description.to_owned(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "queries": {
                    "type": "array",
                    "items": {"type": "string"},
                    "maxItems": MAX_QUERIES,
                    "description": "What you need, in a few words; `server: terms` searches one server."
                },
                "names": {
                    "type": "array",
                    "items": {"type": "string"},
                    "maxItems": MAX_NAMES,
                    "description": "Exact tool names to load."
                }
            }
        }),
        title: String::new(),
        output_schema: None,
        annotations_untrusted: None,
        always_load: true,
        server_instructions: Arc::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools(count: usize, description: &str) -> Vec<EligibleTool> {
        (0..count)
            .map(|i| EligibleTool {
                name: format!("srv{}__tool_{i}", i % 3),
                server: format!("srv{}", i % 3),
                tool: format!("tool_{i}"),
                description: description.to_owned(),
                input_schema: json!({"type": "object"}),
                title: String::new(),
                output_schema: None,
                annotations_untrusted: None,
                always_load: i == 0,
                server_instructions: "".into(),
            })
            .collect()
    }

    #[test]
    fn under_budget_every_tool_is_carried() {
        let all = tools(5, "d");
        let planned = plan_turn_tools(&all, &ToolBudget::default(), &ActiveTools::new());
        assert_eq!(planned.tools.len(), 5);
        assert!(planned.deferral.is_none());
    }

    #[test]
    fn the_catalog_degrades_until_it_fits() {
        let all = tools(
            200,
            "A fairly long description of what this tool does for you",
        );
        for (max_bytes, detail) in [
            (64 * 1024, CatalogDetail::Descriptions),
            (6 * 1024, CatalogDetail::Names),
            (1800, CatalogDetail::ServerCounts),
            (700, CatalogDetail::Totals),
        ] {
            let budget = ToolBudget {
                max_tools: 10,
                max_bytes,
            };
            let planned = plan_turn_tools(&all, &budget, &ActiveTools::new());
            let deferral = planned.deferral.expect("over budget");
            assert_eq!(deferral.catalog, detail, "{max_bytes}");
            assert_eq!((deferral.loaded, deferral.deferred), (1, 199));
            let names: Vec<&str> = planned.tools.iter().map(|t| t.name.as_str()).collect();
            assert_eq!(names, ["srv0__tool_0", FIND_TOOLS_NAME]);
            if detail != CatalogDetail::Totals {
                assert!(deferral.definition_bytes <= max_bytes, "{deferral:?}");
            }
        }
    }

    #[test]
    fn activated_tools_stay_loaded() {
        let all = tools(100, "d");
        let active: ActiveTools = ["srv1__tool_4".to_owned()].into_iter().collect();
        let budget = ToolBudget {
            max_tools: 10,
            max_bytes: 64 * 1024,
        };
        let planned = plan_turn_tools(&all, &budget, &active);
        let names: Vec<&str> = planned.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["srv0__tool_0", "srv1__tool_4", FIND_TOOLS_NAME]);
    }
}
