//! find_tools: search the eligible catalog by exact names and keyword queries (over name,
//! title, server, parameter names and description), and activate what was found for the
//! turn. Work is bounded on hostile input.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::index::ToolIndex;
use crate::naming::{EligibleTool, ToolCatalog};
use crate::rank::Term;
use crate::text::{cap_chars, one_line};
use ctxsync_protocol::encoded_size::truncate_to_boundary;

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
/// empty, so stale tools can never be found or activated. Indexes the catalog for this
/// one call; a caller searching a catalog again keeps its [`ToolIndex`] (or a
/// [`ToolIndexCache`](crate::ToolIndexCache)) and calls [`find_tools_in`].
pub fn find_tools(
    catalog: &ToolCatalog,
    request: &FindToolsRequest,
    active: &mut ActiveTools,
) -> Result<FindToolsResponse, FindToolsError> {
    find_tools_in(&ToolIndex::build(catalog), catalog, request, active)
}

/// [`find_tools`] over `index`, built from `catalog` (an index of another catalog is
/// not used: the catalog is indexed anew for the call).
pub fn find_tools_in(
    index: &ToolIndex,
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
    let queries = read_queries(queries);
    if names.is_empty() && queries.is_empty() {
        return Err(FindToolsError::NothingToFind);
    }
    let mut rebuilt = None;
    let index = fitting(index, catalog, &mut rebuilt);

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
        let best = rank_queries(index, catalog, &queries, Ranking::Fused);
        ordered.extend(
            best.into_iter()
                .map(|(_, tool)| tool)
                .filter(|t| !seen.contains(t.name.as_str())),
        );
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
                    &one_line(truncate_to_boundary(
                        &t.description,
                        MAX_SHOWN_DESCRIPTION_BYTES,
                    )),
                    MAX_DESCRIPTION_CHARS,
                ),
                title: Some(cap_chars(
                    &one_line(truncate_to_boundary(&t.title, MAX_SHOWN_DESCRIPTION_BYTES)),
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
    /// The unscoped text, for the embedding model.
    #[cfg_attr(not(feature = "semantic"), allow(dead_code))]
    text: &'a str,
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
            text,
            phrase: text.trim().to_lowercase(),
            terms,
        }
    }

    fn admits(&self, tool: &EligibleTool) -> bool {
        self.scope.is_none_or(|server| tool.server == server)
    }
}

/// Which evidence orders a query's matches. find_tools uses [`Ranking::Fused`]; the
/// others are its two parts, for comparing them ([`rank_query`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ranking {
    /// BM25F over the tools' words alone.
    Lexical,
    /// The static embedding model alone (nothing without the `semantic` feature).
    Semantic,
    /// Both, by reciprocal rank fusion; the embedding alone when no word of the query
    /// occurs in the catalog.
    Fused,
}

/// The names `ranking` orders for `queries` (read as find_tools reads them: trimmed,
/// cut, `server:` scopes and whole names included; the best score over the queries
/// counts), best first, at most [`MAX_MATCHES`]. find_tools' own order is
/// [`Ranking::Fused`]'s; the others show what each part would find alone.
pub fn rank_query<'c>(
    index: &ToolIndex,
    catalog: &'c ToolCatalog,
    queries: &[&str],
    ranking: Ranking,
) -> Vec<&'c str> {
    let queries = read_queries(&queries[..queries.len().min(MAX_QUERIES)]);
    if queries.is_empty() {
        return Vec::new();
    }
    let mut rebuilt = None;
    let index = fitting(index, catalog, &mut rebuilt);
    rank_queries(index, catalog, &queries, ranking)
        .into_iter()
        .take(MAX_MATCHES)
        .map(|(_, t)| t.name.as_str())
        .collect()
}

/// The queries as find_tools reads them: each cut to [`MAX_QUERY_BYTES`] (leading
/// whitespace does not count against the bytes read: a query padded past the limit is
/// still read, not refused as empty), trimmed, the empty ones dropped.
fn read_queries<S: AsRef<str>>(queries: &[S]) -> Vec<&str> {
    queries
        .iter()
        .map(|q| truncate_to_boundary(q.as_ref().trim_start(), MAX_QUERY_BYTES).trim())
        .filter(|q| !q.is_empty())
        .collect()
}

/// `index` when it was built from `catalog`, else a new index of it kept in `rebuilt`.
fn fitting<'i>(
    index: &'i ToolIndex,
    catalog: &ToolCatalog,
    rebuilt: &'i mut Option<ToolIndex>,
) -> &'i ToolIndex {
    if index.fits(catalog) {
        index
    } else {
        rebuilt.insert(ToolIndex::build(catalog))
    }
}

/// Added when a query is exactly a tool's name (or its title): more than any other
/// score, so the tool named comes first.
const WHOLE_NAME: f32 = 1000.0;
/// Reciprocal rank fusion's constant: a match at rank r adds 1 / (K + r). Chosen on the
/// retrieval benchmark's tuning half (10, 20, 30 and 60 tried), as is the weight.
const FUSION_K: f32 = 20.0;
/// How much the embedding's ranking counts beside the words' one (0.5 to 3 tried).
const SEMANTIC_WEIGHT: f32 = 1.5;
/// At most this many of the embedding's nearest tools take part, each at least this
/// similar to the query.
#[cfg(feature = "semantic")]
const SEMANTIC_DEPTH: usize = 20;
#[cfg(feature = "semantic")]
const MIN_SIMILARITY: f32 = 0.2;

/// Every tool some query matches, with its best score over the queries, best first
/// (ties by name, so equal scores always come out in one order).
fn rank_queries<'c>(
    index: &ToolIndex,
    catalog: &'c ToolCatalog,
    queries: &[&str],
    ranking: Ranking,
) -> Vec<(f32, &'c EligibleTool)> {
    let tools: Vec<&EligibleTool> = catalog.iter().collect();
    let scopes = ScopeIndex::new(catalog);
    let mut vocabulary = Vec::new();
    let parsed: Vec<Query<'_>> = queries
        .iter()
        .map(|q| Query::parse(q, &scopes, &mut vocabulary))
        .collect();
    // Each distinct term is scored once per tool, whatever the queries.
    let term_scores = if ranking == Ranking::Semantic {
        Vec::new()
    } else {
        index.lexical.score_terms(&vocabulary)
    };
    let mut best: Vec<Option<f32>> = vec![None; tools.len()];
    let mut keep = |i: usize, score: f32| {
        let slot = &mut best[i];
        *slot = Some(slot.map_or(score, |s| s.max(score)));
    };
    // Orders tools by score, best first, ties by name.
    let by_score = |list: &mut Vec<(f32, usize)>| {
        list.sort_by(|(a, i), (b, j)| {
            b.total_cmp(a)
                .then_with(|| tools[*i].name.cmp(&tools[*j].name))
        });
    };
    for query in &parsed {
        if query.scope.is_some() && query.terms.is_empty() {
            // `server:` alone lists the server's tools.
            for (i, _) in tools.iter().enumerate().filter(|(_, t)| query.admits(t)) {
                keep(i, 0.0);
            }
            continue;
        }
        let whole = index.whole_names(&query.phrase);
        let mut lexical: Vec<(f32, usize)> = Vec::new();
        if ranking != Ranking::Semantic {
            for (i, tool) in tools.iter().enumerate() {
                if !query.admits(tool) {
                    continue;
                }
                let score: f32 = query.terms.iter().map(|&t| term_scores[t][i]).sum();
                if score > 0.0 {
                    lexical.push((score, i));
                }
            }
            by_score(&mut lexical);
        }
        let semantic = if ranking == Ranking::Lexical {
            Vec::new()
        } else {
            semantic_ranking(index, query, &tools, by_score)
        };
        let mut fused: HashMap<usize, f32> = HashMap::new();
        match ranking {
            Ranking::Lexical => fused.extend(lexical.iter().map(|&(s, i)| (i, s))),
            Ranking::Semantic | Ranking::Fused => {
                for (rank, &(_, i)) in lexical.iter().enumerate() {
                    *fused.entry(i).or_default() += 1.0 / (FUSION_K + rank as f32 + 1.0);
                }
                // With no word of the query in the catalog, the embedding decides alone.
                let weight = if lexical.is_empty() {
                    1.0
                } else {
                    SEMANTIC_WEIGHT
                };
                for (rank, &(_, i)) in semantic.iter().enumerate() {
                    *fused.entry(i).or_default() += weight / (FUSION_K + rank as f32 + 1.0);
                }
            }
        }
        for &i in whole.iter().filter(|&&i| query.admits(tools[i])) {
            *fused.entry(i).or_default() += WHOLE_NAME;
        }
        for (i, score) in fused {
            keep(i, score);
        }
    }
    let mut ranked: Vec<(f32, usize)> = best
        .into_iter()
        .enumerate()
        .filter_map(|(i, s)| s.map(|s| (s, i)))
        .collect();
    by_score(&mut ranked);
    ranked.into_iter().map(|(s, i)| (s, tools[i])).collect()
}

/// The tools nearest `query` by the embedding model, best first, at most
/// [`SEMANTIC_DEPTH`]; none without the model or when it knows no word of the query.
#[cfg_attr(not(feature = "semantic"), allow(unused_variables))]
fn semantic_ranking(
    index: &ToolIndex,
    query: &Query<'_>,
    tools: &[&EligibleTool],
    by_score: impl Fn(&mut Vec<(f32, usize)>),
) -> Vec<(f32, usize)> {
    #[cfg(feature = "semantic")]
    if let Some(similarities) = index
        .semantic
        .as_ref()
        .and_then(|s| s.similarities(query.text))
    {
        let mut near: Vec<(f32, usize)> = similarities
            .into_iter()
            .enumerate()
            .filter(|&(i, s)| s >= MIN_SIMILARITY && query.admits(tools[i]))
            .map(|(i, s)| (s, i))
            .collect();
        by_score(&mut near);
        near.truncate(SEMANTIC_DEPTH);
        return near;
    }
    Vec::new()
}

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
