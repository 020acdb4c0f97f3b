//! Benchmark: does find_tools find the tool a person asks for, in a catalog of real MCP
//! servers? And how fast does it rank a large catalog?
//!
//! - The catalog is the discovery report that `cargo xtask bench` makes by installing real
//!   MCP servers from npm and PyPI at pinned versions and running `ctxsync discover --json`
//!   on a workspace declaring them all (`CTXSYNC_BENCH_TOOL_CATALOG` names it). Its tools
//!   are projected exactly as a turn sees them (model-facing names `<server>__<tool>`).
//! - The queries are `queries.json` beside this file: tasks written as people ask for a
//!   capability, each with every catalog tool that does the task. The split is computed,
//!   not chosen: a query is held out when the first byte of the SHA-256 of its text is
//!   odd. Targets are judged on the held-out half only; the tuning half is reported so a
//!   reader can see how much tuning bought.
//! - The reference is plain Okapi BM25 (k1 = 1.2, b = 0.75, idf `ln(1 + (N - df + 0.5) /
//!   (df + 0.5))`) over one bag of the tool name's terms and the description's terms, with
//!   find_tools' own tokenizer ([`search_terms`]). It is never tuned.
//! - Recall@k: the share of queries with an acceptable tool among the first k matches.
//!   MRR: the mean of 1 / the rank of the first acceptable match (0 when none of the
//!   [`ctxsync_chat_projection::MAX_MATCHES`] matches is acceptable; the reference is cut
//!   at the same depth). Each is reported for find_tools' fused ranking and for its parts
//!   (BM25F alone, the embedding alone) beside the reference, for all queries and apart
//!   for those sharing a term (after stemming) with an acceptable tool's name, title,
//!   description or parameters and those sharing none; held-out figures carry a
//!   bootstrap 95 % interval (2000 resamples, fixed seed). `CTXSYNC_BENCH_TUNING_ONLY`
//!   leaves the held-out half out, so it is looked at only for a final configuration.
//! - Turn definitions: the bytes (JSON of name, description and input schema) of the tool
//!   definitions a first turn over the real catalog carries, every eligible tool against
//!   the server's default [`ToolBudget`] (which defers behind `find_tools` when exceeded).
//! - Latency: each query of the set through `find_tools_in` over a 1000-tool catalog made
//!   of the real catalog's tools under renamed servers, with the index built once (as a
//!   replica keeps it per catalog); p99 over all calls. Beside it: the index build alone,
//!   the index's bytes, and a cache lookup (hashing the catalog's indexed text).
//!
//! `cargo run --release -p ctxsync-chat-projection --example bench_find_tools -- [--quick]`
//! with `CTXSYNC_BENCH_TOOL_CATALOG` set prints one JSON row per line on stdout.

use std::collections::{HashMap, HashSet};
use std::error::Error;
use std::time::Instant;

use ctxsync_chat_projection::{
    ActiveTools, AgentState, Binding, EligibleTool, FindToolsRequest, MAX_MATCHES, Ranking,
    SnapshotState, ToolBudget, ToolCatalog, ToolIndex, ToolIndexCache, definition_bytes,
    find_tools_in, plan_turn_tools, project, rank_query, search_terms,
};
use ctxsync_protocol::{
    DiscoveryPhase, McpServerBody, McpTool, Resource, ResourceBody, ResourceStatus, RunId,
};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

type Result<T> = std::result::Result<T, Box<dyn Error>>;

const QUERIES: &str = include_str!("queries.json");
/// The catalog the latency row ranks.
const LARGE_CATALOG_TOOLS: usize = 1000;

#[derive(Deserialize)]
struct QuerySet {
    queries: Vec<TaskQuery>,
}

#[derive(Deserialize)]
struct TaskQuery {
    query: String,
    acceptable: Vec<String>,
}

fn main() -> Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let path = std::env::var("CTXSYNC_BENCH_TOOL_CATALOG")
        .map_err(|_| "CTXSYNC_BENCH_TOOL_CATALOG must name the catalog's discovery report")?;
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    let servers = servers_of(&report)?;
    let catalog = catalog_of(&servers, |name| name.to_owned());
    let set: QuerySet = serde_json::from_str(QUERIES)?;
    check(&catalog, &set)?;
    eprintln!(
        "bench_find_tools: {} tools from {} servers, {} queries",
        catalog.len(),
        servers.len(),
        set.queries.len()
    );

    retrieval_rows(&catalog, &set);
    turn_definition_rows(&catalog);
    latency_rows(&large_catalog(&servers), &set, quick);
    Ok(())
}

/// The rankings compared: find_tools' fused one, its two parts, and the reference.
const METHODS: [&str; 4] = ["fused", "bm25f", "embedding", "okapi"];

/// Recall@1, Recall@5 and MRR of each method, for each half of the queries, and apart for
/// the queries sharing a term with an acceptable tool and those sharing none. Held-out
/// figures carry a bootstrap 95 % interval. `CTXSYNC_BENCH_TUNING_ONLY` leaves the
/// held-out half out (while tuning, so it is looked at only for a final configuration).
fn retrieval_rows(catalog: &ToolCatalog, set: &QuerySet) {
    let index = ToolIndex::build(catalog);
    let reference = Bm25::new(catalog);
    let rank = |method: &str, query: &str| -> Vec<String> {
        let ranking = match method {
            "fused" => Ranking::Fused,
            "bm25f" => Ranking::Lexical,
            "embedding" => Ranking::Semantic,
            _ => return reference.rank(query),
        };
        rank_query(&index, catalog, &[query], ranking)
            .into_iter()
            .map(str::to_owned)
            .collect()
    };
    let (tuning, held_out): (Vec<&TaskQuery>, Vec<&TaskQuery>) =
        set.queries.iter().partition(|q| !is_held_out(&q.query));
    let tuning_only = std::env::var_os("CTXSYNC_BENCH_TUNING_ONLY").is_some();
    for (half, queries) in [("held_out", &held_out), ("tuning", &tuning)] {
        if tuning_only && half == "held_out" {
            continue;
        }
        let judged = half == "held_out";
        let prefix = format!("find_tools.{half}");
        row(
            &format!("{prefix}.queries"),
            queries.len() as f64,
            "queries",
            None,
            None,
        );
        let overlapping: Vec<&TaskQuery> = queries
            .iter()
            .copied()
            .filter(|q| shares_a_term(catalog, q))
            .collect();
        let disjoint: Vec<&TaskQuery> = queries
            .iter()
            .copied()
            .filter(|q| !shares_a_term(catalog, q))
            .collect();
        let mut outcomes: HashMap<&str, Vec<Outcome>> = HashMap::new();
        for method in METHODS {
            outcomes.insert(
                method,
                queries
                    .iter()
                    .map(|q| outcome(q, &rank(method, &q.query)))
                    .collect(),
            );
        }
        headline_rows(&prefix, judged, &outcomes);
        subset_rows(&prefix, judged, queries, &outcomes, &overlapping, &disjoint);
        if std::env::var_os("CTXSYNC_BENCH_SHOW_MISSES").is_some() {
            for q in queries {
                let names = rank("fused", &q.query);
                if !names.iter().take(5).any(|n| q.acceptable.contains(n)) {
                    eprintln!(
                        "miss [{half}] {:?} -> {:?}",
                        q.query,
                        &names[..names.len().min(5)]
                    );
                }
            }
        }
    }
}

/// The headline rows: find_tools' fused ranking against the reference, judged on the
/// held-out half, with bootstrap intervals there.
fn headline_rows(prefix: &str, judged: bool, outcomes: &HashMap<&str, Vec<Outcome>>) {
    let ours = Scores::of(&outcomes["fused"]);
    let theirs = Scores::of(&outcomes["okapi"]);
    let interval =
        |metric: fn(&Scores) -> f64| judged.then(|| bootstrap(&outcomes["fused"], metric));
    for (metric, value, reference, target, pass, ci) in [
        (
            "recall_at_1",
            ours.recall_at_1,
            theirs.recall_at_1,
            ">= 0.45",
            ours.recall_at_1 >= 0.45,
            interval(|s| s.recall_at_1),
        ),
        (
            "recall_at_5",
            ours.recall_at_5,
            theirs.recall_at_5,
            ">= 0.80",
            ours.recall_at_5 >= 0.80,
            interval(|s| s.recall_at_5),
        ),
        (
            "mrr",
            ours.mrr,
            theirs.mrr,
            ">= 0.60",
            ours.mrr >= 0.60,
            interval(|s| s.mrr),
        ),
    ] {
        row(
            &format!("{prefix}.{metric}"),
            value,
            "share",
            Some(reference),
            judged.then(|| (target.to_owned(), pass)),
        );
        if let Some((low, high)) = ci {
            row(
                &format!("{prefix}.{metric}.ci95_low"),
                low,
                "share",
                None,
                None,
            );
            row(
                &format!("{prefix}.{metric}.ci95_high"),
                high,
                "share",
                None,
                None,
            );
        }
    }
}

/// Each method's figures over all queries, those sharing a term with an acceptable tool
/// and those sharing none.
fn subset_rows(
    prefix: &str,
    judged: bool,
    queries: &[&TaskQuery],
    outcomes: &HashMap<&str, Vec<Outcome>>,
    overlapping: &[&TaskQuery],
    disjoint: &[&TaskQuery],
) {
    for (subset, members) in [
        ("all", queries),
        ("overlap", overlapping),
        ("no_overlap", disjoint),
    ] {
        row(
            &format!("{prefix}.{subset}.queries"),
            members.len() as f64,
            "queries",
            None,
            None,
        );
        for method in METHODS {
            let picked: Vec<Outcome> = queries
                .iter()
                .zip(&outcomes[method])
                .filter(|(q, _)| members.iter().any(|m| std::ptr::eq(*m, **q)))
                .map(|(_, o)| *o)
                .collect();
            let scores = Scores::of(&picked);
            for (metric, value) in [
                ("recall_at_1", scores.recall_at_1),
                ("recall_at_5", scores.recall_at_5),
                ("mrr", scores.mrr),
            ] {
                let name = format!("{prefix}.{subset}.{method}.{metric}");
                match judged.then(|| {
                    bootstrap(&picked, |s| match metric {
                        "recall_at_1" => s.recall_at_1,
                        "recall_at_5" => s.recall_at_5,
                        _ => s.mrr,
                    })
                }) {
                    Some((low, high)) => ctxsync_test_support::bench_row(
                        &name,
                        value,
                        "share",
                        None,
                        None,
                        Some(&format!("95 % interval {low:.3}..{high:.3}")),
                        None,
                    ),
                    None => row(&name, value, "share", None, None),
                }
            }
        }
    }
}

/// Whether some term of the query occurs in an acceptable tool's name, title, description
/// or parameters (after stemming).
fn shares_a_term(catalog: &ToolCatalog, query: &TaskQuery) -> bool {
    let asked: HashSet<String> = search_terms(&query.query).into_iter().collect();
    query
        .acceptable
        .iter()
        .filter_map(|n| catalog.get(n))
        .any(|tool| {
            let mut text = format!("{} {} {}", tool.tool, tool.title, tool.description);
            if let Some(properties) = tool
                .input_schema
                .get("properties")
                .and_then(Value::as_object)
            {
                for (name, schema) in properties {
                    text.push(' ');
                    text.push_str(name);
                    if let Some(d) = schema.get("description").and_then(Value::as_str) {
                        text.push(' ');
                        text.push_str(d);
                    }
                }
            }
            search_terms(&text).iter().any(|t| asked.contains(t))
        })
}

/// Where a query's first acceptable match came (0-based), if among the first
/// [`MAX_MATCHES`].
#[derive(Clone, Copy)]
struct Outcome(Option<usize>);

fn outcome(query: &TaskQuery, names: &[String]) -> Outcome {
    Outcome(
        names
            .iter()
            .take(MAX_MATCHES)
            .position(|n| query.acceptable.contains(n)),
    )
}

/// The 2.5th and 97.5th percentiles of `metric` over 2000 resamples (with replacement)
/// of the queries; a fixed seed, so a run repeats.
fn bootstrap(outcomes: &[Outcome], metric: impl Fn(&Scores) -> f64) -> (f64, f64) {
    if outcomes.is_empty() {
        return (0.0, 0.0);
    }
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        // xorshift64*
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let mut values: Vec<f64> = (0..2000)
        .map(|_| {
            let sample: Vec<Outcome> = (0..outcomes.len())
                .map(|_| outcomes[(next() % outcomes.len() as u64) as usize])
                .collect();
            metric(&Scores::of(&sample))
        })
        .collect();
    values.sort_by(f64::total_cmp);
    (values[49], values[1949])
}

/// What a first turn over the real catalog carries, with the server's default budget
/// and with a budget no catalog exceeds (every eligible tool, as before deferral).
fn turn_definition_rows(catalog: &ToolCatalog) {
    let eligible: Vec<EligibleTool> = catalog.iter().cloned().collect();
    let turn_bytes = |budget: &ToolBudget| {
        let turn = plan_turn_tools(&eligible, budget, &ActiveTools::new());
        (
            turn.tools.iter().map(definition_bytes).sum::<usize>(),
            turn.tools.len(),
        )
    };
    let unbounded = ToolBudget {
        max_tools: usize::MAX,
        max_bytes: usize::MAX,
    };
    let (all_bytes, all_tools) = turn_bytes(&unbounded);
    let default_budget = ToolBudget::default();
    let (deferred_bytes, deferred_tools) = turn_bytes(&default_budget);
    row(
        "turn.definitions_without_deferral.bytes",
        all_bytes as f64,
        "bytes",
        None,
        None,
    );
    row(
        "turn.definitions_without_deferral.tools",
        all_tools as f64,
        "tools",
        None,
        None,
    );
    row(
        "turn.definitions_with_deferral.bytes",
        deferred_bytes as f64,
        "bytes",
        Some(all_bytes as f64),
        Some((
            format!("<= {} bytes (the default budget)", default_budget.max_bytes),
            deferred_bytes <= default_budget.max_bytes,
        )),
    );
    row(
        "turn.definitions_with_deferral.tools",
        deferred_tools as f64,
        "tools",
        None,
        None,
    );
}

/// find_tools latency over a catalog of about 1000 tools with a warm index (the index
/// built once, as a replica keeps it per snapshot), the index build alone, and a cache
/// lookup (hashing the catalog's indexed text).
fn latency_rows(large: &ToolCatalog, set: &QuerySet, quick: bool) {
    let rounds = if quick { 1 } else { 10 };
    let tools = large.len();
    let quantile = |samples: &mut Vec<f64>, q: usize| {
        samples.sort_by(f64::total_cmp);
        samples[(samples.len() * q).div_ceil(100) - 1]
    };

    let mut builds = Vec::new();
    for _ in 0..rounds.max(3) {
        let started = Instant::now();
        std::hint::black_box(ToolIndex::build(large));
        builds.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    row(
        &format!("find_tools.index_build_{tools}_tools.p50"),
        quantile(&mut builds, 50),
        "ms",
        None,
        None,
    );
    let index = ToolIndex::build(large);
    row(
        &format!("find_tools.index_{tools}_tools.bytes"),
        index.heap_bytes() as f64,
        "bytes",
        None,
        None,
    );

    let cache = ToolIndexCache::default();
    cache.index(large);
    let mut lookups = Vec::new();
    for _ in 0..rounds * 20 {
        let started = Instant::now();
        std::hint::black_box(cache.index(large));
        lookups.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    row(
        &format!("find_tools.cache_lookup_{tools}_tools.p50"),
        quantile(&mut lookups, 50),
        "ms",
        None,
        None,
    );

    let mut samples = Vec::new();
    for _ in 0..rounds {
        for q in &set.queries {
            let request = FindToolsRequest {
                queries: Some(vec![q.query.clone()]),
                names: None,
            };
            let started = Instant::now();
            let found = find_tools_in(&index, large, &request, &mut ActiveTools::new());
            samples.push(started.elapsed().as_secs_f64() * 1000.0);
            std::hint::black_box(found.ok());
        }
    }
    let p50 = quantile(&mut samples, 50);
    let p99 = quantile(&mut samples, 99);
    row(
        &format!("find_tools.latency_{tools}_tools.p50"),
        p50,
        "ms",
        None,
        None,
    );
    row(
        &format!("find_tools.latency_{tools}_tools.p99"),
        p99,
        "ms",
        None,
        Some(("<= 1 ms (warm index)".to_owned(), p99 <= 1.0)),
    );
    row(
        "find_tools.semantic_model",
        f64::from(u8::from(index.is_semantic())),
        "bool",
        None,
        None,
    );
}

/// Prints one row in the shape `cargo xtask bench` collects.
fn row(name: &str, value: f64, unit: &str, reference: Option<f64>, target: Option<(String, bool)>) {
    let ratio = reference.filter(|r| *r != 0.0).map(|r| value / r);
    let (target, pass) = match target {
        Some((target, pass)) => (Some(target), Some(pass)),
        None => (None, None),
    };
    ctxsync_test_support::bench_row(name, value, unit, reference, ratio, target.as_deref(), pass);
}

/// The held-out half: the first byte of the query's SHA-256 is odd.
fn is_held_out(query: &str) -> bool {
    Sha256::digest(query.as_bytes())[0] % 2 == 1
}

/// Every acceptable name is a catalog tool, so a renamed or missing tool in a new server
/// release fails the run instead of silently lowering a figure.
fn check(catalog: &ToolCatalog, set: &QuerySet) -> Result<()> {
    let mut unknown = Vec::new();
    for q in &set.queries {
        if q.acceptable.is_empty() {
            return Err(format!("query {:?} names no acceptable tool", q.query).into());
        }
        unknown.extend(
            q.acceptable
                .iter()
                .filter(|n| catalog.get(n).is_none())
                .map(|n| format!("{n} (for {:?})", q.query)),
        );
    }
    if !unknown.is_empty() {
        return Err(format!(
            "acceptable tools not in the catalog: {}",
            unknown.join(", ")
        )
        .into());
    }
    Ok(())
}

struct Scores {
    recall_at_1: f64,
    recall_at_5: f64,
    mrr: f64,
}

impl Scores {
    fn of(outcomes: &[Outcome]) -> Self {
        let (mut at_1, mut at_5, mut reciprocal) = (0.0, 0.0, 0.0);
        for Outcome(position) in outcomes {
            if let Some(position) = *position {
                at_1 += f64::from(position == 0);
                at_5 += f64::from(position < 5);
                reciprocal += 1.0 / (position + 1) as f64;
            }
        }
        let n = outcomes.len().max(1) as f64;
        Self {
            recall_at_1: at_1 / n,
            recall_at_5: at_5 / n,
            mrr: reciprocal / n,
        }
    }
}

/// The connected servers of a `ctxsync discover --json` report, as snapshot bodies.
fn servers_of(report: &Value) -> Result<Vec<McpServerBody>> {
    let listed = report["servers"]
        .as_array()
        .ok_or("the report has no servers")?;
    let mut servers = Vec::new();
    for server in listed.iter().filter(|s| s["connected"] == true) {
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let tools = server["tools"]
            .as_array()
            .ok_or("a server has no tool list")?
            .iter()
            .map(|t| McpTool {
                name: text(&t["name"]),
                description: text(&t["description"]),
                input_schema: t["input_schema"].clone(),
                title: text(&t["title"]),
                ..Default::default()
            })
            .collect();
        servers.push(McpServerBody {
            server_name: text(&server["name"]),
            tools,
            instructions: text(&server["details"]["instructions"]),
            ..Default::default()
        });
    }
    if servers.is_empty() {
        return Err("the report has no connected server".into());
    }
    Ok(servers)
}

/// The catalog a turn would see for these servers, each renamed by `rename`.
fn catalog_of(servers: &[McpServerBody], rename: impl Fn(&str) -> String) -> ToolCatalog {
    let resources = servers
        .iter()
        .map(|body| {
            let mut body = body.clone();
            body.server_name = rename(&body.server_name);
            Resource {
                source: format!("mcp:{}", body.server_name),
                source_path: None,
                content_hash: String::new(),
                size_bytes: 0,
                status: ResourceStatus::Ok,
                error: None,
                body: ResourceBody::McpServer(body),
            }
        })
        .collect();
    let snapshot = SnapshotState {
        agent_run_id: RunId::new("bench"),
        phase: DiscoveryPhase::Complete,
        resources,
        ..Default::default()
    };
    let binding = Binding::Agent(AgentState {
        agent_run_id: RunId::new("bench"),
        snapshot: Some(snapshot),
        ..Default::default()
    });
    project(&binding).tools().clone()
}

/// At least [`LARGE_CATALOG_TOOLS`] tools: copies of the real servers under new names
/// (`github-2`, …), the last copy cut so the total is exact.
fn large_catalog(servers: &[McpServerBody]) -> ToolCatalog {
    let mut copies = Vec::new();
    let mut total = 0;
    let mut round = 1;
    while total < LARGE_CATALOG_TOOLS {
        for server in servers {
            if total >= LARGE_CATALOG_TOOLS {
                break;
            }
            let mut copy = server.clone();
            copy.server_name = format!("{}-{round}", server.server_name);
            copy.tools.truncate(LARGE_CATALOG_TOOLS - total);
            total += copy.tools.len();
            copies.push(copy);
        }
        round += 1;
    }
    catalog_of(&copies, |name| name.to_owned())
}

/// Okapi BM25 over one bag per tool: its name's terms and its description's terms.
struct Bm25<'c> {
    tools: Vec<(&'c EligibleTool, HashMap<String, usize>, usize)>,
    document_frequency: HashMap<String, usize>,
    average_length: f64,
}

impl<'c> Bm25<'c> {
    const K1: f64 = 1.2;
    const B: f64 = 0.75;

    fn new(catalog: &'c ToolCatalog) -> Self {
        let mut document_frequency: HashMap<String, usize> = HashMap::new();
        let mut tools = Vec::new();
        let mut total_length = 0;
        for tool in catalog {
            let mut terms = search_terms(&tool.tool);
            terms.extend(search_terms(&tool.description));
            let mut frequency: HashMap<String, usize> = HashMap::new();
            for term in &terms {
                *frequency.entry(term.clone()).or_default() += 1;
            }
            for term in frequency.keys() {
                *document_frequency.entry(term.clone()).or_default() += 1;
            }
            total_length += terms.len();
            tools.push((tool, frequency, terms.len()));
        }
        let average_length = total_length as f64 / tools.len().max(1) as f64;
        Self {
            tools,
            document_frequency,
            average_length,
        }
    }

    fn rank(&self, query: &str) -> Vec<String> {
        let terms: HashSet<String> = search_terms(query).into_iter().collect();
        let n = self.tools.len() as f64;
        let mut scored: Vec<(f64, &str)> = self
            .tools
            .iter()
            .map(|(tool, frequency, length)| {
                let norm = 1.0 - Self::B + Self::B * *length as f64 / self.average_length;
                let score: f64 = terms
                    .iter()
                    .filter_map(|term| {
                        let tf = *frequency.get(term)? as f64;
                        let df = self.document_frequency[term] as f64;
                        let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                        Some(idf * tf * (Self::K1 + 1.0) / (tf + Self::K1 * norm))
                    })
                    .sum();
                (score, tool.name.as_str())
            })
            .filter(|(score, _)| *score > 0.0)
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1)));
        scored
            .into_iter()
            .take(MAX_MATCHES)
            .map(|(_, name)| name.to_owned())
            .collect()
    }
}
