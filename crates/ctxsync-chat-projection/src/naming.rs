//! Model-facing tool names: `<server>__<tool>`, sanitized to `^[A-Za-z0-9_-]{1,64}$`,
//! shortened with a stable hash suffix on overflow or collision, never two tools with one
//! name, and always mapped back to the `(server, tool)` pair the agent invokes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use ctxsync_protocol::McpToolAnnotations;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The longest model-facing tool name.
pub const MAX_TOOL_NAME_LEN: usize = 64;
/// Hex digits of the hash suffix: 32 bits keep accidental clashes rare, and any clash is
/// resolved anyway.
const HASH_HEX_LEN: usize = 8;
const SEPARATOR: &str = "__";

/// One tool a turn may offer: its model-facing name and what invocation needs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EligibleTool {
    /// The model-facing name, unique in its catalog.
    pub name: String,
    /// The MCP server's name as the agent knows it.
    pub server: String,
    /// The tool's name on that server.
    pub tool: String,
    /// The tool's description, as the server reported it.
    pub description: String,
    /// The tool's input JSON Schema, as the server reported it.
    pub input_schema: Value,
    /// The tool's display name: its `title`, else its annotations' `title` (MCP's
    /// precedence); empty when it has neither. Never used as the model-facing name.
    pub title: String,
    /// The JSON Schema of the tool's structured result, when the server gave one.
    pub output_schema: Option<Value>,
    /// The tool's MCP annotations exactly as its server claimed them: unverified hints
    /// (a server can call any tool read-only), never a basis for trusting a call. `None`
    /// when the server gave none.
    pub annotations_untrusted: Option<McpToolAnnotations>,
    /// The tool's server asked (`alwaysLoad` in `.mcp.json`) to stay loaded in every turn,
    /// even one that defers tools. Never part of what the model sees
    /// ([`EligibleTool::model_definition`]).
    pub always_load: bool,
    /// The server's instructions for the model (untrusted), which find_tools also
    /// searches; empty when none. Never part of a tool's definition. One text per server,
    /// shared by its tools.
    pub server_instructions: Arc<str>,
}

impl EligibleTool {
    /// The tool as a turn hands it to the model (SPEC §7): `name`, `description` and
    /// `input_schema` always; beside them, only when the server gave them, `title`,
    /// `output_schema` and `annotations_untrusted` — the server's behaviour hints under a
    /// name that says they are its unverified claims (`read_only_hint`,
    /// `destructive_hint`, `idempotent_hint`, `open_world_hint`, `title`; absent ones left
    /// out).
    pub fn model_definition(&self) -> ModelTool<'_> {
        ModelTool(self)
    }
}

/// A tool as a turn hands it to the model (`EligibleTool::model_definition`): a view that
/// writes only the model-facing fields of its tool, so they are declared once, in
/// [`EligibleTool`].
#[derive(Clone, Copy, Debug)]
pub struct ModelTool<'a>(&'a EligibleTool);

impl Serialize for ModelTool<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let tool = self.0;
        let title = (!tool.title.is_empty()).then_some(&tool.title);
        let len = 3
            + usize::from(title.is_some())
            + usize::from(tool.output_schema.is_some())
            + usize::from(tool.annotations_untrusted.is_some());
        let mut s = serializer.serialize_struct("ModelTool", len)?;
        s.serialize_field("name", &tool.name)?;
        s.serialize_field("description", &tool.description)?;
        s.serialize_field("input_schema", &tool.input_schema)?;
        // Absent fields are left out rather than written as null: the model sees only
        // what the server gave.
        if let Some(title) = title {
            s.serialize_field("title", title)?;
        }
        if let Some(output_schema) = &tool.output_schema {
            s.serialize_field("output_schema", output_schema)?;
        }
        if let Some(annotations) = &tool.annotations_untrusted {
            s.serialize_field("annotations_untrusted", annotations)?;
        }
        s.end()
    }
}

/// The schema of what [`ModelTool`] writes, under the name its routes have always used.
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for ModelTool<'_> {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::ToSchema;
        use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, RefBuilder, SchemaType, Type};
        let typed = |kind: SchemaType, description: &str| {
            ObjectBuilder::new()
                .schema_type(kind)
                .description(Some(description))
        };
        let annotations = OneOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(Type::Null))
            .item(
                RefBuilder::new()
                    .ref_location_from_schema_name(McpToolAnnotations::name())
                    .description(Some("The server's behaviour hints: its unverified claims.")),
            );
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .description(Some(
                "A tool as a turn hands it to the model (`EligibleTool::model_definition`).",
            ))
            .property("name", typed(Type::String.into(), "The model-facing name."))
            .required("name")
            .property(
                "description",
                typed(
                    Type::String.into(),
                    "The tool's description, as its server reported it.",
                ),
            )
            .required("description")
            .property(
                "input_schema",
                typed(
                    Type::Object.into(),
                    "The tool's input JSON Schema, as its server reported it.",
                ),
            )
            .required("input_schema")
            .property(
                "title",
                typed(
                    SchemaType::from_iter([Type::String, Type::Null]),
                    "The tool's display name, when it has one (never the model-facing name).",
                ),
            )
            .property(
                "output_schema",
                typed(
                    Type::Object.into(),
                    "The JSON Schema of the tool's structured result, as its server reported it.",
                ),
            )
            .property("annotations_untrusted", annotations)
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for ModelTool<'_> {
    fn name() -> std::borrow::Cow<'static, str> {
        "ModelTool".into()
    }

    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        use utoipa::PartialSchema;
        schemas.push((
            McpToolAnnotations::name().into(),
            McpToolAnnotations::schema(),
        ));
        <McpToolAnnotations as utoipa::ToSchema>::schemas(schemas);
    }
}

/// The eligible tools of a view, ordered by server, then tool name. Empty when stale.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ToolCatalog {
    tools: Vec<EligibleTool>,
    by_name: HashMap<String, usize>,
}

impl ToolCatalog {
    /// The tool with this model-facing name.
    pub fn get(&self, name: &str) -> Option<&EligibleTool> {
        self.by_name.get(name).map(|&i| &self.tools[i])
    }

    /// Maps a model-facing name back to the `(server, tool)` pair to invoke.
    pub fn resolve(&self, name: &str) -> Option<(&str, &str)> {
        self.get(name).map(|t| (t.server.as_str(), t.tool.as_str()))
    }

    /// The tools, in catalog order.
    pub fn iter(&self) -> std::slice::Iter<'_, EligibleTool> {
        self.tools.iter()
    }

    /// How many tools the catalog holds.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// True when the catalog holds no tool.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Names every `(server, tool)` pair; `name` is assigned here, whatever it held.
    /// Pairs are deduplicated (the first occurrence wins), so callers pass them in a
    /// deterministic order.
    pub(crate) fn build(tools: Vec<EligibleTool>) -> Self {
        let mut unique: BTreeMap<(String, String), EligibleTool> = BTreeMap::new();
        for tool in tools {
            unique
                .entry((tool.server.clone(), tool.tool.clone()))
                .or_insert(tool);
        }
        let mut tools: Vec<EligibleTool> = unique.into_values().collect();
        let names = assign_names(&tools);
        for (tool, name) in tools.iter_mut().zip(names) {
            tool.name = name;
        }
        let by_name = tools
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        Self { tools, by_name }
    }
}

impl<'a> IntoIterator for &'a ToolCatalog {
    type Item = &'a EligibleTool;
    type IntoIter = std::slice::Iter<'a, EligibleTool>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl Serialize for ToolCatalog {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(&self.tools)
    }
}

/// Whether `name` is a valid model-facing tool name.
#[cfg(test)]
pub(crate) fn is_valid_name(name: &str) -> bool {
    (1..=MAX_TOOL_NAME_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn sanitize(part: &str) -> String {
    part.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Names for `specs`, which must be sorted by `(server, tool)` and free of duplicates.
///
/// The result depends only on the set of pairs, never on their order:
/// 1. every pair gets a candidate `sanitize(server)__sanitize(tool)`;
/// 2. a candidate within the length limit is kept when no other pair has it, or, among
///    pairs sharing it, by the only pair whose unsanitized name it is (a tool's natural
///    name beats a sanitized look-alike);
/// 3. every other pair gets the candidate cut short plus `_` and a hash of the original
///    pair, re-hashed with an attempt counter while that name is taken, in pair order.
fn assign_names(specs: &[EligibleTool]) -> Vec<String> {
    let candidates: Vec<String> = specs
        .iter()
        .map(|s| format!("{}{SEPARATOR}{}", sanitize(&s.server), sanitize(&s.tool)))
        .collect();
    let natural: Vec<bool> = specs
        .iter()
        .zip(&candidates)
        .map(|(s, c)| *c == format!("{}{SEPARATOR}{}", s.server, s.tool))
        .collect();

    let mut groups: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, candidate) in candidates.iter().enumerate() {
        groups.entry(candidate.as_str()).or_default().push(i);
    }

    let mut names: Vec<Option<String>> = vec![None; specs.len()];
    let mut used: HashSet<String> = HashSet::new();
    for (candidate, members) in &groups {
        if candidate.len() > MAX_TOOL_NAME_LEN {
            continue;
        }
        let keeper = match members.as_slice() {
            [only] => Some(*only),
            _ => {
                let mut naturals = members.iter().filter(|&&i| natural[i]);
                match (naturals.next(), naturals.next()) {
                    (Some(&i), None) => Some(i),
                    _ => None,
                }
            }
        };
        if let Some(i) = keeper {
            names[i] = Some((*candidate).to_owned());
            used.insert((*candidate).to_owned());
        }
    }

    let prefix_len = MAX_TOOL_NAME_LEN - 1 - HASH_HEX_LEN;
    for (i, spec) in specs.iter().enumerate() {
        if names[i].is_some() {
            continue;
        }
        // Candidates are ASCII, so any byte index is a char boundary.
        let prefix = &candidates[i][..candidates[i].len().min(prefix_len)];
        let mut attempt = 0u32;
        let name = loop {
            let name = format!(
                "{prefix}_{}",
                hash_suffix(&spec.server, &spec.tool, attempt)
            );
            if !used.contains(&name) {
                break name;
            }
            attempt += 1;
        };
        used.insert(name.clone());
        names[i] = Some(name);
    }
    names
        .into_iter()
        .map(|n| n.expect("every pair is named"))
        .collect()
}

/// The first [`HASH_HEX_LEN`] hex digits of sha256 over a length-prefixed encoding of the
/// original pair (and the attempt, after the first).
fn hash_suffix(server: &str, tool: &str, attempt: u32) -> String {
    let mut hasher = Sha256::new();
    for part in [server, tool] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
    if attempt > 0 {
        hasher.update(attempt.to_be_bytes());
    }
    let digest = hasher.finalize();
    digest
        .iter()
        .take(HASH_HEX_LEN / 2)
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog(pairs: &[(&str, &str)]) -> ToolCatalog {
        ToolCatalog::build(
            pairs
                .iter()
                .map(|(server, tool)| EligibleTool {
                    name: String::new(),
                    server: (*server).to_owned(),
                    tool: (*tool).to_owned(),
                    description: String::new(),
                    input_schema: serde_json::json!({"type": "object"}),
                    title: String::new(),
                    output_schema: None,
                    annotations_untrusted: None,
                    always_load: false,
                    server_instructions: Arc::default(),
                })
                .collect(),
        )
    }

    /// Checks the name of every pair, given as `server/tool => name` lines in pair order.
    fn check(pairs: &[(&str, &str)], expect: &str) {
        let catalog = catalog(pairs);
        let mut actual = String::new();
        for (server, tool) in pairs {
            let named = catalog
                .iter()
                .find(|t| t.server == *server && t.tool == *tool)
                .expect("every pair is in the catalog");
            assert!(is_valid_name(&named.name), "invalid name {:?}", named.name);
            assert_eq!(
                catalog.resolve(&named.name),
                Some((*server, *tool)),
                "the name maps back to its pair"
            );
            actual.push_str(&format!("{server}/{tool} => {}\n", named.name));
        }
        assert_eq!(actual.trim_end(), expect.trim());
        // Any order of the same pairs names them the same way.
        let mut reversed = pairs.to_vec();
        reversed.reverse();
        assert_eq!(self::catalog(&reversed), catalog, "names depend on order");
    }

    fn hash(server: &str, tool: &str) -> String {
        hash_suffix(server, tool, 0)
    }

    #[test]
    fn natural_names_are_kept() {
        check(
            &[("fs", "read_file"), ("git-hub", "list-prs")],
            "fs/read_file => fs__read_file\ngit-hub/list-prs => git-hub__list-prs",
        );
    }

    #[test]
    fn other_characters_are_sanitized() {
        check(
            &[("my.server", "read file"), ("fs", "héllo")],
            "my.server/read file => my_server__read_file\nfs/héllo => fs__h_llo",
        );
    }

    #[test]
    fn hash_suffix_is_stable() {
        // Pinned so names stay stable across releases: sha256 of the length-prefixed pair.
        assert_eq!(hash("fs", "read"), hash("fs", "read"));
        assert_ne!(hash("fs", "read"), hash("fsr", "ead"));
        assert_eq!(hash("a", "b").len(), HASH_HEX_LEN);
        assert_ne!(hash_suffix("a", "b", 1), hash("a", "b"));
    }

    #[test]
    fn long_names_are_shortened_with_a_hash() {
        let tool = "t".repeat(70);
        let name = format!("srv__{}_{}", "t".repeat(50), hash("srv", &tool));
        assert_eq!(name.len(), MAX_TOOL_NAME_LEN);
        check(&[("srv", &tool)], &format!("srv/{tool} => {name}"));
        // Exactly 64 characters still fits.
        let tool = "t".repeat(59);
        check(&[("srv", &tool)], &format!("srv/{tool} => srv__{tool}"));
    }

    #[test]
    fn a_natural_name_beats_a_sanitized_look_alike() {
        let hashed = format!("a_b__c_{}", hash("a.b", "c"));
        check(
            &[("a.b", "c"), ("a_b", "c")],
            &format!("a.b/c => {hashed}\na_b/c => a_b__c"),
        );
    }

    #[test]
    fn sanitized_look_alikes_are_all_hashed() {
        let first = format!("a_b__c_{}", hash("a.b", "c"));
        let second = format!("a_b__c_{}", hash("a b", "c"));
        check(
            &[("a.b", "c"), ("a b", "c")],
            &format!("a.b/c => {first}\na b/c => {second}"),
        );
    }

    #[test]
    fn two_natural_claims_to_one_name_are_both_hashed() {
        // `a__b` + `c` and `a` + `b__c` both spell `a__b__c`.
        let first = format!("a__b__c_{}", hash("a", "b__c"));
        let second = format!("a__b__c_{}", hash("a__b", "c"));
        check(
            &[("a", "b__c"), ("a__b", "c")],
            &format!("a/b__c => {first}\na__b/c => {second}"),
        );
    }

    #[test]
    fn a_tool_named_like_a_hashed_name_keeps_it_and_the_hashed_one_moves() {
        // An adversarial server names its tool exactly what `x.y/z` would be hashed to.
        let taken = format!("x_y__z_{}", hash("x.y", "z"));
        let (server, tool) = taken.split_once("__").expect("has separator");
        let moved = format!("x_y__z_{}", hash_suffix("x.y", "z", 1));
        check(
            &[("x.y", "z"), ("x_y", "z"), (server, tool)],
            &format!("x.y/z => {moved}\nx_y/z => x_y__z\n{server}/{tool} => {taken}"),
        );
    }

    #[test]
    fn duplicate_pairs_are_offered_once() {
        let catalog = catalog(&[("fs", "read"), ("fs", "read")]);
        assert_eq!(catalog.len(), 1);
        assert_eq!(catalog.resolve("fs__read"), Some(("fs", "read")));
        assert_eq!(catalog.resolve("fs__write"), None);
    }

    #[test]
    fn validity() {
        for (name, valid) in [
            ("a", true),
            ("A-z_09", true),
            ("", false),
            ("a.b", false),
            ("é", false),
            (&"x".repeat(64), true),
            (&"x".repeat(65), false),
        ] {
            assert_eq!(is_valid_name(name), valid, "{name:?}");
        }
    }
}
