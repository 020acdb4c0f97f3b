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
//!   at the same depth).
//! - Turn definitions: the bytes (JSON of name, description and input schema) of the tool
//!   definitions a first turn over the real catalog carries, every eligible tool against
//!   the server's default [`ToolBudget`] (which defers behind `find_tools` when exceeded).
//! - Latency: each query of the set through `find_tools` (parsing, indexing and ranking
//!   included; nothing is cached between calls) over a 1000-tool catalog made of the real
//!   catalog's tools under renamed servers; p99 over all calls.
//!
//! `cargo run --release -p ctxsync-chat-projection --example bench_find_tools -- [--quick]`
//! with `CTXSYNC_BENCH_TOOL_CATALOG` set prints one JSON row per line on stdout.

use std::collections::{HashMap, HashSet};
use std::error::Error;
use std::time::Instant;

use ctxsync_chat_projection::{
    ActiveTools, AgentState, Binding, EligibleTool, FindToolsRequest, MAX_MATCHES, SnapshotState,
    ToolBudget, ToolCatalog, definition_bytes, find_tools, plan_turn_tools, project, search_terms,
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

/// Recall@1, Recall@5 and MRR of ours and the reference, for each half of the queries.
fn retrieval_rows(catalog: &ToolCatalog, set: &QuerySet) {
    let reference = Bm25::new(catalog);
    let (tuning, held_out): (Vec<&TaskQuery>, Vec<&TaskQuery>) =
        set.queries.iter().partition(|q| !is_held_out(&q.query));
    for (half, queries) in [("held_out", &held_out), ("tuning", &tuning)] {
        let ours = score(queries, |q| ranked_names(catalog, q));
        let theirs = score(queries, |q| reference.rank(q));
        let judged = half == "held_out";
        let prefix = format!("find_tools.{half}");
        row(
            &format!("{prefix}.queries"),
            queries.len() as f64,
            "queries",
            None,
            None,
        );
        row(
            &format!("{prefix}.recall_at_1"),
            ours.recall_at_1,
            "share",
            Some(theirs.recall_at_1),
            judged.then(|| (">= 0.80".to_owned(), ours.recall_at_1 >= 0.80)),
        );
        row(
            &format!("{prefix}.recall_at_5"),
            ours.recall_at_5,
            "share",
            Some(theirs.recall_at_5),
            judged.then(|| {
                (
                    ">= 0.93 and >= reference + 0.05".to_owned(),
                    ours.recall_at_5 >= 0.93 && ours.recall_at_5 >= theirs.recall_at_5 + 0.05,
                )
            }),
        );
        row(
            &format!("{prefix}.mrr"),
            ours.mrr,
            "mrr",
            Some(theirs.mrr),
            None,
        );
        if std::env::var_os("CTXSYNC_BENCH_SHOW_MISSES").is_some() {
            for q in queries {
                let names = ranked_names(catalog, &q.query);
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

/// find_tools latency over a catalog of about 1000 tools, indexing included.
fn latency_rows(large: &ToolCatalog, set: &QuerySet, quick: bool) {
    let rounds = if quick { 1 } else { 10 };
    let mut samples = Vec::new();
    for _ in 0..rounds {
        for q in &set.queries {
            let started = Instant::now();
            let found = ranked_names(large, &q.query);
            samples.push(started.elapsed().as_secs_f64() * 1000.0);
            std::hint::black_box(found);
        }
    }
    samples.sort_by(f64::total_cmp);
    let quantile = |q: usize| samples[(samples.len() * q).div_ceil(100) - 1];
    let p99 = quantile(99);
    row(
        &format!("find_tools.latency_{}_tools.p50", large.len()),
        quantile(50),
        "ms",
        None,
        None,
    );
    row(
        &format!("find_tools.latency_{}_tools.p99", large.len()),
        p99,
        "ms",
        None,
        Some(("<= 2 ms".to_owned(), p99 <= 2.0)),
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

/// The names find_tools returns for one query, best first.
fn ranked_names(catalog: &ToolCatalog, query: &str) -> Vec<String> {
    let request = FindToolsRequest {
        queries: Some(vec![query.to_owned()]),
        names: None,
    };
    match find_tools(catalog, &request, &mut ActiveTools::new()) {
        Ok(found) => found.matches.into_iter().map(|m| m.name).collect(),
        Err(_) => Vec::new(),
    }
}

struct Scores {
    recall_at_1: f64,
    recall_at_5: f64,
    mrr: f64,
}

fn score(queries: &[&TaskQuery], rank: impl Fn(&str) -> Vec<String>) -> Scores {
    let (mut at_1, mut at_5, mut reciprocal) = (0.0, 0.0, 0.0);
    for q in queries {
        let names = rank(&q.query);
        if let Some(position) = names
            .iter()
            .take(MAX_MATCHES)
            .position(|n| q.acceptable.contains(n))
        {
            at_1 += f64::from(position == 0);
            at_5 += f64::from(position < 5);
            reciprocal += 1.0 / (position + 1) as f64;
        }
    }
    let n = queries.len().max(1) as f64;
    Scores {
        recall_at_1: at_1 / n,
        recall_at_5: at_5 / n,
        mrr: reciprocal / n,
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
