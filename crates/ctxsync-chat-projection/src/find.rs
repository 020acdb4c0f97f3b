//! find_tools: search the eligible catalog by exact names and keyword queries (over name,
//! title, server, parameter names and description), and activate what was found for the
//! turn. Work is bounded on hostile input.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::naming::{EligibleTool, ToolCatalog};
use crate::rank::{Scores, Term};
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
/// Only this much of a title is compared with a whole query.
const MAX_PHRASE_TITLE_BYTES: usize = 512;
/// Enough of a description to fill [`MAX_DESCRIPTION_CHARS`] after folding whitespace.
const MAX_SHOWN_DESCRIPTION_BYTES: usize = 4096;

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
    /// Exact names first (in request order), then query matches best first; at most 20
    /// (`MAX_MATCHES`).
    pub matches: Vec<ToolMatch>,
    /// Names of matches that were not active for the turn before this call.
    pub activated: Vec<String>,
    /// How many tools matched before the cap.
    pub total: usize,
    /// Names that resolved to no tool, or to more than one (never guessed between).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unresolved: Vec<UnresolvedName>,
}

/// A requested name find_tools did not resolve.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UnresolvedName {
    /// The name as asked (cut to 80 characters).
    pub name: String,
    /// The tools it could mean when it is ambiguous (at most five); empty when it
    /// matches none.
    pub candidates: Vec<String>,
}

/// One tool find_tools found, as the model sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolMatch {
    /// The model-facing name.
    pub name: String,
    /// The description on one line, at most 80 characters (`MAX_DESCRIPTION_CHARS`).
    pub description: String,
    /// The tool's display title on one line, at most 80 characters
    /// (`MAX_DESCRIPTION_CHARS`); left out when it has none.
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
    let mut unresolved = Vec::new();
    for name in names {
        match resolve_name(catalog, name) {
            Ok(tool) => {
                if seen.insert(tool.name.as_str()) {
                    ordered.push(tool);
                }
            }
            Err(candidates) => unresolved.push(UnresolvedName {
                name: cap_chars(name, MAX_UNRESOLVED_NAME_CHARS),
                candidates,
            }),
        }
    }

    if !queries.is_empty() {
        let scopes = ScopeIndex::new(catalog);
        let mut vocabulary = Vec::new();
        let parsed: Vec<Query<'_>> = queries
            .iter()
            .map(|q| Query::parse(q, &scopes, &mut vocabulary))
            .collect();
        // Each distinct term is scored once per tool, whatever the queries.
        let scores = Scores::new(catalog, &vocabulary);
        let mut ranked: Vec<(f32, &EligibleTool)> = catalog
            .iter()
            .enumerate()
            .filter(|(_, t)| !seen.contains(t.name.as_str()))
            .filter(|(_, t)| parsed.iter().any(|q| q.admits(t)))
            .filter_map(|(position, tool)| {
                let lowered = [
                    tool.name.to_lowercase(),
                    tool.tool.to_lowercase(),
                    one_line(prefix_within_bytes(&tool.title, MAX_PHRASE_TITLE_BYTES))
                        .to_lowercase(),
                ];
                parsed
                    .iter()
                    .filter_map(|q| q.rank(tool, position, &scores, &lowered))
                    .max_by(f32::total_cmp)
                    .map(|rank| (rank, tool))
            })
            .collect();
        // Ties go by name, so equal scores always come out in one order.
        ranked.sort_by(|(a, ta), (b, tb)| b.total_cmp(a).then_with(|| ta.name.cmp(&tb.name)));
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
        unresolved,
    })
}

/// An unresolved name is quoted back cut to this many characters.
const MAX_UNRESOLVED_NAME_CHARS: usize = 80;
/// At most this many candidates are named for an ambiguous name.
const MAX_CANDIDATES: usize = 5;

/// The tool `name` means. Exact model-facing names always resolve. Otherwise, as models
/// write them slightly wrong: without a `functions.` prefix; `server.tool`, `server/tool`
/// or `server__tool` by the original server and tool names; or a bare tool name — each
/// only when exactly one eligible tool matches (case-sensitively first, then ignoring
/// case). Never guesses between two: `Err` holds the candidates (empty when none).
fn resolve_name<'c>(catalog: &'c ToolCatalog, name: &str) -> Result<&'c EligibleTool, Vec<String>> {
    if let Some(tool) = catalog.get(name) {
        return Ok(tool);
    }
    let bare = name
        .strip_prefix("functions.")
        .or_else(|| name.strip_prefix("functions/"))
        .unwrap_or(name);
    if let Some(tool) = catalog.get(bare) {
        return Ok(tool);
    }
    for fold in [false, true] {
        let same = |a: &str, b: &str| {
            a == b
                || (fold
                    && a.chars()
                        .flat_map(char::to_lowercase)
                        .eq(b.chars().flat_map(char::to_lowercase)))
        };
        // `server<sep>tool` by the original names.
        let qualified = |t: &EligibleTool| {
            let Some(head) = bare.get(..t.server.len()) else {
                return false;
            };
            let rest = &bare[t.server.len()..];
            same(head, &t.server)
                && [".", "/", "__", ":"].iter().any(|sep| {
                    rest.strip_prefix(sep)
                        .is_some_and(|tool| same(tool, &t.tool))
                })
        };
        let mut matches: Vec<&EligibleTool> = catalog
            .iter()
            .filter(|t| same(&t.name, bare) || same(&t.tool, bare) || qualified(t))
            .collect();
        matches.dedup_by(|a, b| a.name == b.name);
        match matches.as_slice() {
            [only] => return Ok(only),
            [] => continue,
            several => {
                return Err(several
                    .iter()
                    .take(MAX_CANDIDATES)
                    .map(|t| t.name.clone())
                    .collect());
            }
        }
    }
    Err(Vec::new())
}

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
    fn parse(query: &'a str, scopes: &ScopeIndex<'a>, vocabulary: &mut Vec<Term>) -> Self {
        let (scope, text) = match scopes.split(query) {
            Some((server, rest)) => (Some(server), rest),
            None => (None, query),
        };
        let mut terms = Vec::new();
        for stem in crate::terms::terms(text) {
            if terms.len() == MAX_TERMS_PER_QUERY {
                break;
            }
            let index = match vocabulary.iter().position(|t| t.stem() == stem) {
                Some(index) => index,
                None if vocabulary.len() < MAX_TERMS => {
                    vocabulary.push(Term::new(stem));
                    vocabulary.len() - 1
                }
                None => continue,
            };
            if !terms.contains(&index) {
                terms.push(index);
            }
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

    /// The query's score for the tool at catalog `position`; `names` holds its
    /// lower-cased model-facing name, original name and title (empty when none). `None`
    /// when the tool does not match.
    fn rank(
        &self,
        tool: &EligibleTool,
        position: usize,
        scores: &Scores,
        names: &[String; 3],
    ) -> Option<f32> {
        if !self.admits(tool) {
            return None;
        }
        if self.scope.is_some() && self.terms.is_empty() {
            // `server:` alone lists the server's tools.
            return Some(0.0);
        }
        let (_, mut score) = scores.score(position, &self.terms);
        if !self.phrase.is_empty() && names.contains(&self.phrase) {
            score += WHOLE_NAME;
        }
        (score > 0.0).then_some(score)
    }
}

/// Added when a query is exactly a tool's name (or its title): more than any sum of
/// term scores, so the tool named comes first.
const WHOLE_NAME: f32 = 1000.0;

/// The terms find_tools ranks `text` by, in order, repeats kept: words split at
/// punctuation and case changes, lower-cased, stop words dropped, stemmed. The retrieval
/// benchmark's reference ranking uses it too, so the two differ only in how they rank.
pub fn search_terms(text: &str) -> Vec<String> {
    crate::terms::terms(text).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_terms_split_stem_and_drop_stop_words() {
        assert_eq!(
            search_terms("Read_File, readFiles;  the path2 ÜBER"),
            ["read", "file", "read", "file", "path2", "über"]
        );
    }
}
