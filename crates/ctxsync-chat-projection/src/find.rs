//! find_tools: search the eligible catalog by exact names and keyword queries, and
//! activate what was found for the turn. Work is bounded on hostile input.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::naming::{EligibleTool, ToolCatalog};
use crate::text::{cap_chars, one_line, prefix_within_bytes};

/// At most this many matches are returned (and activated) per call.
pub const MAX_MATCHES: usize = 20;
/// Match descriptions are cut to this many characters.
pub const MAX_DESCRIPTION_CHARS: usize = 80;
/// A request with more queries is refused.
pub const MAX_QUERIES: usize = 16;
/// A request with more names is refused.
pub const MAX_NAMES: usize = 64;
/// Only this much of each query is read.
const MAX_QUERY_BYTES: usize = 512;
/// Only this many distinct terms of each query are scored.
const MAX_TERMS_PER_QUERY: usize = 16;
/// Only this much of each description, and this many parameters, are searched.
const MAX_INDEXED_DESCRIPTION_BYTES: usize = 2048;
const MAX_INDEXED_PARAMETERS: usize = 64;
/// Substring matches need a term at least this long, so `a` does not match everything.
const MIN_SUBSTRING_TERM_CHARS: usize = 3;

/// A find_tools call: `names` are exact model-facing names; `queries` are keyword
/// searches, each optionally scoped to one server as `server: terms`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FindToolsRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queries: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<String>>,
}

/// What find_tools returns to the model.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FindToolsResponse {
    /// Exact names first (in request order), then query matches best first; at most
    /// [`MAX_MATCHES`].
    pub matches: Vec<ToolMatch>,
    /// Names of matches that were not active for the turn before this call.
    pub activated: Vec<String>,
    /// How many tools matched before the cap.
    pub total: usize,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ToolMatch {
    /// The model-facing name.
    pub name: String,
    /// The description on one line, at most [`MAX_DESCRIPTION_CHARS`] characters.
    pub description: String,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FindToolsError {
    #[error("find_tools needs at least one of `names` or `queries`, with a non-empty entry")]
    NothingToFind,
    #[error("find_tools accepts at most {max} {field}, got {got}")]
    TooMany {
        field: &'static str,
        max: usize,
        got: usize,
    },
}

/// The tools activated for one turn by find_tools.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActiveTools(BTreeSet<String>);

impl ActiveTools {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.0.contains(name)
    }

    /// The active tools that `catalog` still offers, in catalog order. A name activated
    /// earlier but no longer eligible (say, the view turned stale) is never returned.
    pub fn tools<'c>(&self, catalog: &'c ToolCatalog) -> Vec<&'c EligibleTool> {
        catalog.iter().filter(|t| self.contains(&t.name)).collect()
    }
}

/// Searches `catalog` and activates the matches in `active`. A stale view's catalog is
/// empty, so stale tools can never be found or activated.
pub fn find_tools(
    catalog: &ToolCatalog,
    request: &FindToolsRequest,
    active: &mut ActiveTools,
) -> Result<FindToolsResponse, FindToolsError> {
    let names = request.names.as_deref().unwrap_or_default();
    let queries = request.queries.as_deref().unwrap_or_default();
    for (field, got, max) in [
        ("names", names.len(), MAX_NAMES),
        ("queries", queries.len(), MAX_QUERIES),
    ] {
        if got > max {
            return Err(FindToolsError::TooMany { field, max, got });
        }
    }
    let names: Vec<&str> = names
        .iter()
        .map(|n| n.trim())
        .filter(|n| !n.is_empty())
        .collect();
    let queries: Vec<&str> = queries
        .iter()
        .map(|q| prefix_within_bytes(q, MAX_QUERY_BYTES).trim())
        .filter(|q| !q.is_empty())
        .collect();
    if names.is_empty() && queries.is_empty() {
        return Err(FindToolsError::NothingToFind);
    }

    let mut ordered: Vec<&EligibleTool> = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    for name in names {
        if let Some(tool) = catalog.get(name)
            && seen.insert(tool.name.as_str())
        {
            ordered.push(tool);
        }
    }

    if !queries.is_empty() {
        let parsed: Vec<Query<'_>> = {
            let scopes = ScopeIndex::new(catalog);
            queries.iter().map(|q| Query::parse(q, &scopes)).collect()
        };
        let mut ranked: Vec<(Rank, &EligibleTool)> = catalog
            .iter()
            .filter(|t| !seen.contains(t.name.as_str()))
            .filter_map(|tool| {
                let index = ToolIndex::new(tool);
                parsed
                    .iter()
                    .filter_map(|q| q.rank(tool, &index))
                    .max()
                    .map(|rank| (rank, tool))
            })
            .collect();
        ranked.sort_by(|(a, ta), (b, tb)| b.cmp(a).then_with(|| ta.name.cmp(&tb.name)));
        ordered.extend(ranked.into_iter().map(|(_, tool)| tool));
    }

    let total = ordered.len();
    ordered.truncate(MAX_MATCHES);
    let mut activated = Vec::new();
    for tool in &ordered {
        if active.0.insert(tool.name.clone()) {
            activated.push(tool.name.clone());
        }
    }
    Ok(FindToolsResponse {
        matches: ordered
            .into_iter()
            .map(|t| ToolMatch {
                name: t.name.clone(),
                description: cap_chars(&one_line(&t.description), MAX_DESCRIPTION_CHARS),
            })
            .collect(),
        activated,
        total,
    })
}

/// How well a tool matches a query: more matched terms first, then a higher score.
type Rank = (usize, u32);

/// The catalog's server names, for resolving `server: terms` scopes.
struct ScopeIndex<'c> {
    exact: HashSet<&'c str>,
    /// Lower-cased name → the servers with it, in name order.
    folded: HashMap<String, Vec<&'c str>>,
}

impl<'c> ScopeIndex<'c> {
    fn new(catalog: &'c ToolCatalog) -> Self {
        let exact: HashSet<&str> = catalog.iter().map(|t| t.server.as_str()).collect();
        let mut folded: HashMap<String, Vec<&str>> = HashMap::new();
        for server in &exact {
            folded
                .entry(server.to_lowercase())
                .or_default()
                .push(server);
        }
        for servers in folded.values_mut() {
            servers.sort_unstable();
        }
        Self { exact, folded }
    }

    /// Splits `query` at the colon ending the longest prefix that names a server: an
    /// exact name first, then a case-insensitive one. Server names may contain `:`.
    fn split<'q>(&self, query: &'q str) -> Option<(&'c str, &'q str)> {
        let colons: Vec<usize> = query.match_indices(':').map(|(i, _)| i).rev().collect();
        let rest = |at: usize| &query[at + 1..];
        for &at in &colons {
            if let Some(server) = self.exact.get(query[..at].trim()) {
                return Some((server, rest(at)));
            }
        }
        for &at in &colons {
            if let Some(servers) = self.folded.get(&query[..at].trim().to_lowercase()) {
                return Some((servers[0], rest(at)));
            }
        }
        None
    }
}

/// One parsed query.
struct Query<'a> {
    scope: Option<&'a str>,
    /// The unscoped text, lower-cased, for whole-name matches.
    phrase: String,
    terms: Vec<String>,
}

impl<'a> Query<'a> {
    fn parse(query: &'a str, scopes: &ScopeIndex<'a>) -> Self {
        let (scope, text) = match scopes.split(query) {
            Some((server, rest)) => (Some(server), rest),
            None => (None, query),
        };
        let mut terms = tokens(text);
        terms.truncate(MAX_TERMS_PER_QUERY);
        Self {
            scope,
            phrase: text.trim().to_lowercase(),
            terms,
        }
    }

    fn rank(&self, tool: &EligibleTool, index: &ToolIndex) -> Option<Rank> {
        if let Some(server) = self.scope {
            if tool.server != server {
                return None;
            }
            if self.terms.is_empty() {
                // `server:` alone lists the server's tools.
                return Some((0, 0));
            }
        }
        let mut matched = 0;
        let mut score = 0;
        for term in &self.terms {
            let best = index.score(term);
            if best > 0 {
                matched += 1;
                score += best;
            }
        }
        if !self.phrase.is_empty()
            && (self.phrase == tool.name.to_lowercase() || self.phrase == tool.tool.to_lowercase())
        {
            score += WHOLE_NAME;
        }
        (score > 0).then_some((matched, score))
    }
}

/// Scores of a term's best match in each field: exact token, token prefix, substring.
const NAME: [u32; 3] = [12, 6, 3];
const SERVER: [u32; 3] = [8, 4, 2];
const PARAMETER: [u32; 3] = [6, 3, 1];
const DESCRIPTION: [u32; 3] = [4, 2, 0];
/// Bonus when a query is exactly a tool's name.
const WHOLE_NAME: u32 = 50;

/// The searchable tokens of one tool, lower-cased, sorted and deduplicated per field.
struct ToolIndex {
    fields: [(Vec<String>, [u32; 3]); 4],
}

impl ToolIndex {
    fn new(tool: &EligibleTool) -> Self {
        let parameters: String = tool
            .input_schema
            .get("properties")
            .and_then(serde_json::Value::as_object)
            .map(|props| {
                props
                    .keys()
                    .take(MAX_INDEXED_PARAMETERS)
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        let description = prefix_within_bytes(&tool.description, MAX_INDEXED_DESCRIPTION_BYTES);
        let field = |text: &str, weights| {
            let mut tokens = tokens(text);
            tokens.sort_unstable();
            (tokens, weights)
        };
        Self {
            fields: [
                field(&tool.tool, NAME),
                field(&tool.server, SERVER),
                field(&parameters, PARAMETER),
                field(description, DESCRIPTION),
            ],
        }
    }

    /// The term's best score over all fields (0 when it matches nowhere).
    fn score(&self, term: &str) -> u32 {
        self.fields
            .iter()
            .map(|(tokens, [exact, prefix, substring])| {
                let start = tokens.partition_point(|t| t.as_str() < term);
                match tokens.get(start) {
                    Some(t) if t == term => return *exact,
                    Some(t) if t.starts_with(term) => return *prefix,
                    _ => {}
                }
                if *substring > 0
                    && term.chars().count() >= MIN_SUBSTRING_TERM_CHARS
                    && tokens.iter().any(|t| t.contains(term))
                {
                    *substring
                } else {
                    0
                }
            })
            .max()
            .unwrap_or(0)
    }
}

/// Lower-cased alphanumeric runs of `text`, deduplicated in first-seen order.
fn tokens(text: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
        .filter(|t| seen.insert(t.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_split_on_anything_but_letters_and_digits() {
        assert_eq!(
            tokens("Read_File, read-file;  path2 ÜBER"),
            ["read", "file", "path2", "über"]
        );
    }
}
