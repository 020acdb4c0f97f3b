//! find_tools: search the eligible catalog by exact names and keyword queries (over name,
//! title, server, parameter names and description), and activate what was found for the
//! turn. Work is bounded on hostile input.

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
/// Only this many distinct terms of each query, and of the whole request, are scored.
const MAX_TERMS_PER_QUERY: usize = 8;
const MAX_TERMS: usize = 32;
/// Only this much of each description and title, and this many parameters, are searched.
const MAX_INDEXED_DESCRIPTION_BYTES: usize = 2048;
const MAX_INDEXED_TITLE_BYTES: usize = 512;
const MAX_INDEXED_PARAMETERS: usize = 64;
/// Enough of a description to fill [`MAX_DESCRIPTION_CHARS`] after folding whitespace.
const MAX_SHOWN_DESCRIPTION_BYTES: usize = 4096;
/// Substring matches need a term at least this long, so `a` does not match everything.
const MIN_SUBSTRING_TERM_CHARS: usize = 3;

/// A find_tools call: `names` are exact model-facing names; `queries` are keyword
/// searches, each optionally scoped to one server as `server: terms`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FindToolsRequest {
    /// Keyword searches, each optionally `server: terms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queries: Option<Vec<String>>,
    /// Exact model-facing names to activate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<String>>,
}

/// What find_tools returns to the model.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FindToolsResponse {
    /// Exact names first (in request order), then query matches best first; at most
    /// [`MAX_MATCHES`].
    pub matches: Vec<ToolMatch>,
    /// Names of matches that were not active for the turn before this call.
    pub activated: Vec<String>,
    /// How many tools matched before the cap.
    pub total: usize,
}

/// One tool find_tools found, as the model sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolMatch {
    /// The model-facing name.
    pub name: String,
    /// The description on one line, at most [`MAX_DESCRIPTION_CHARS`] characters.
    pub description: String,
    /// The tool's display title on one line, at most [`MAX_DESCRIPTION_CHARS`]
    /// characters; left out when it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// A find_tools request refused before searching; the message names the field.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FindToolsError {
    /// Neither `names` nor `queries` holds a non-empty entry.
    #[error("find_tools needs at least one of `names` or `queries`, with a non-empty entry")]
    NothingToFind,
    /// A list over its bound.
    #[error("find_tools accepts at most {max} {field}, got {got}")]
    TooMany {
        /// The list: `names` or `queries`.
        field: &'static str,
        /// Most entries allowed.
        max: usize,
        /// Entries given.
        got: usize,
    },
}

/// The tools activated for one turn by find_tools.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActiveTools(BTreeSet<String>);

impl ActiveTools {
    /// No active tools.
    pub fn new() -> Self {
        Self::default()
    }

    /// True when `name` (model-facing) is active.
    pub fn contains(&self, name: &str) -> bool {
        self.0.contains(name)
    }

    /// The active names, sorted; for keeping a turn's activations between requests.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(String::as_str)
    }

    /// The active tools that `catalog` still offers, in catalog order. A name activated
    /// earlier but no longer eligible (say, the view turned stale) is never returned.
    pub fn tools<'c>(&self, catalog: &'c ToolCatalog) -> Vec<&'c EligibleTool> {
        catalog.iter().filter(|t| self.contains(&t.name)).collect()
    }
}

/// Restores a turn's activations from [`ActiveTools::names`]. Only names the catalog
/// offers ever become tools ([`ActiveTools::tools`]).
impl FromIterator<String> for ActiveTools {
    fn from_iter<I: IntoIterator<Item = String>>(names: I) -> Self {
        Self(names.into_iter().collect())
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
        // Leading whitespace does not count against the bytes read: a query padded past
        // the limit is still read, not refused as empty.
        .map(|q| prefix_within_bytes(q.trim_start(), MAX_QUERY_BYTES).trim())
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
        let scopes = ScopeIndex::new(catalog);
        let mut vocabulary = Vec::new();
        let parsed: Vec<Query<'_>> = queries
            .iter()
            .map(|q| Query::parse(q, &scopes, &mut vocabulary))
            .collect();
        let mut ranked: Vec<(Rank, &EligibleTool)> = catalog
            .iter()
            .filter(|t| !seen.contains(t.name.as_str()))
            .filter(|t| parsed.iter().any(|q| q.admits(t)))
            .filter_map(|tool| {
                // Each distinct term is scored once per tool, whatever the queries.
                let scores: Vec<u32> = if vocabulary.is_empty() {
                    Vec::new()
                } else {
                    let index = ToolIndex::new(tool);
                    vocabulary.iter().map(|term| index.score(term)).collect()
                };
                let lowered = [
                    tool.name.to_lowercase(),
                    tool.tool.to_lowercase(),
                    one_line(prefix_within_bytes(&tool.title, MAX_INDEXED_TITLE_BYTES))
                        .to_lowercase(),
                ];
                parsed
                    .iter()
                    .filter_map(|q| q.rank(tool, &scores, &lowered))
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
                description: cap_chars(
                    &one_line(prefix_within_bytes(
                        &t.description,
                        MAX_SHOWN_DESCRIPTION_BYTES,
                    )),
                    MAX_DESCRIPTION_CHARS,
                ),
                title: Some(cap_chars(
                    &one_line(prefix_within_bytes(&t.title, MAX_SHOWN_DESCRIPTION_BYTES)),
                    MAX_DESCRIPTION_CHARS,
                ))
                .filter(|title| !title.is_empty()),
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
    /// Indices into the request's vocabulary.
    terms: Vec<usize>,
}

impl<'a> Query<'a> {
    /// Parses `query`, adding its terms to the request's `vocabulary` of distinct terms
    /// (at most [`MAX_TERMS_PER_QUERY`] per query and [`MAX_TERMS`] in all).
    fn parse(query: &'a str, scopes: &ScopeIndex<'a>, vocabulary: &mut Vec<String>) -> Self {
        let (scope, text) = match scopes.split(query) {
            Some((server, rest)) => (Some(server), rest),
            None => (None, query),
        };
        let mut terms = Vec::new();
        for token in tokens(text).into_iter().take(MAX_TERMS_PER_QUERY) {
            let index = match vocabulary.iter().position(|t| *t == token) {
                Some(index) => index,
                None if vocabulary.len() < MAX_TERMS => {
                    vocabulary.push(token);
                    vocabulary.len() - 1
                }
                None => continue,
            };
            terms.push(index);
        }
        Self {
            scope,
            phrase: text.trim().to_lowercase(),
            terms,
        }
    }

    fn admits(&self, tool: &EligibleTool) -> bool {
        self.scope.is_none_or(|server| tool.server == server)
    }

    /// `scores` holds the tool's score for each vocabulary term; `names` its lower-cased
    /// model-facing name, original name and title (empty when none).
    fn rank(&self, tool: &EligibleTool, scores: &[u32], names: &[String; 3]) -> Option<Rank> {
        if !self.admits(tool) {
            return None;
        }
        if self.scope.is_some() && self.terms.is_empty() {
            // `server:` alone lists the server's tools.
            return Some((0, 0));
        }
        let mut matched = 0;
        let mut score = 0;
        for &term in &self.terms {
            if scores[term] > 0 {
                matched += 1;
                score += scores[term];
            }
        }
        if !self.phrase.is_empty() && names.contains(&self.phrase) {
            score += WHOLE_NAME;
        }
        (score > 0).then_some((matched, score))
    }
}

/// Scores of a term's best match in each field: exact token, token prefix, substring.
const NAME: [u32; 3] = [12, 6, 3];
/// A title names the tool for people: nearly as telling as its name.
const TITLE: [u32; 3] = [10, 5, 2];
const SERVER: [u32; 3] = [8, 4, 2];
const PARAMETER: [u32; 3] = [6, 3, 1];
const DESCRIPTION: [u32; 3] = [4, 2, 0];
/// Bonus when a query is exactly a tool's name (or its title).
const WHOLE_NAME: u32 = 50;

/// The searchable tokens of one tool, lower-cased, sorted and deduplicated per field.
struct ToolIndex {
    fields: [(Vec<String>, [u32; 3]); 5],
}

impl ToolIndex {
    fn new(tool: &EligibleTool) -> Self {
        let parameters = tool
            .input_schema
            .get("properties")
            .and_then(serde_json::Value::as_object)
            .map(|props| {
                props
                    .keys()
                    .take(MAX_INDEXED_PARAMETERS)
                    .flat_map(|p| words(p))
                    .collect()
            })
            .unwrap_or_default();
        let description = prefix_within_bytes(&tool.description, MAX_INDEXED_DESCRIPTION_BYTES);
        let title = prefix_within_bytes(&tool.title, MAX_INDEXED_TITLE_BYTES);
        Self {
            fields: [
                (sorted(words(&tool.tool).collect()), NAME),
                (sorted(words(title).collect()), TITLE),
                (sorted(words(&tool.server).collect()), SERVER),
                (sorted(parameters), PARAMETER),
                (sorted(words(description).collect()), DESCRIPTION),
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

/// The terms find_tools ranks `text` by, in order, repeats kept. The retrieval benchmark's
/// reference ranking uses it too, so the two differ only in how they rank.
pub fn search_terms(text: &str) -> Vec<String> {
    words(text).collect()
}

/// Lower-cased alphanumeric runs of `text`.
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
}

fn sorted(mut words: Vec<String>) -> Vec<String> {
    words.sort_unstable();
    words.dedup();
    words
}

/// [`words`] of `text`, deduplicated in first-seen order.
fn tokens(text: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    words(text).filter(|t| seen.insert(t.clone())).collect()
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
