//! The context resolver: one discovery report plus one walk of the scan roots become the
//! rows of a snapshot, with every cap applied and every wire limit already respected.
//!
//! Priority (who keeps content when a cap bites) is deterministic and independent of the
//! order anything was discovered in: scan roots in configured order (the workspace first);
//! within a root its instruction files, its `.mcp.json`, then skills by container and
//! directory name; then configured MCP config files; then config files known only from the
//! report; then MCP servers by name. Servers come last so they can never push out a file.

//!
//! By job: [`files`] resolves instruction files, skills and MCP config file rows; [`servers`]
//! resolves MCP server rows (tool definitions fitted to the wire, shed when they do not
//! fit); [`rows`] holds what every row shares (wire sizes, exclusion, bounded errors). This
//! module orders the rows, applies the caps that span both and builds the [`Resolution`].

mod files;
mod rows;
mod servers;

use std::collections::HashSet;
use std::path::Path;

use ctxsync_mcp_model::{PendingServer, Report, ReportPhase};
use ctxsync_protocol::encoded_size::truncate_to_boundary;
use ctxsync_protocol::limits::{
    MAX_PENDING_SERVERS, MAX_RESOURCES, MAX_SOURCE_BYTES, MAX_TOTAL_BODY_BYTES,
};
use ctxsync_protocol::{DiscoveryPhase, Resource, RunId, Snapshot};

use crate::hash::aggregate_hash;

use crate::scan::{self, Candidate, WatchSet};
use files::Resolver;
use rows::{bound_error, exclude, has_content, wire_body_len};
use servers::{HashedServer, minimal_server_body_len, server_row, sorted_servers};

pub use files::{MAX_CONTEXT_BYTES, MAX_FILE_BYTES, ScanConfig};
pub(crate) use rows::merge_snapshot_errors;
pub use servers::{DEFAULT_SERVER_ERROR, SERVER_SOURCE_PREFIX};

/// Most rows that carry content; rows beyond it are `EXCLUDED` (not read), and rows beyond
/// the wire's [`MAX_RESOURCES`] are left out and counted in the snapshot error.
pub const MAX_CONTEXT_RESOURCES: usize = 500;
/// One resolve: what a snapshot will carry, before it gets a version and a run id.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolution {
    /// `Unspecified` without a report (no MCP discovery).
    pub phase: DiscoveryPhase,
    /// sha256 (hex) over the canonical encoding of the non-MCP rows.
    pub aggregate_hash: String,
    /// Sorted by source; unique sources; every limit of the wire already met.
    pub resources: Vec<Resource>,
    /// Why the snapshot is incomplete beyond one row's status (e.g. resources left out),
    /// within the wire's limit; `None` when nothing is missing.
    pub snapshot_error: Option<String>,
    /// While pending: the servers still connecting (names within the wire's limits, at
    /// most [`MAX_PENDING_SERVERS`]), with when each started.
    pub pending: Vec<PendingServer>,
}

impl Resolution {
    /// The snapshot to push: this resolution stamped with a version and the run id. How
    /// long each pending server has been connecting is measured now, at sending time.
    pub fn to_snapshot(
        &self,
        version: u64,
        agent_run_id: Option<&RunId>,
        initial: bool,
    ) -> Snapshot {
        let now = std::time::SystemTime::now();
        let pending_servers = self
            .pending
            .iter()
            .map(|pending| ctxsync_protocol::SnapshotPendingServer {
                server_name: pending.name.clone(),
                elapsed_ms: now
                    .duration_since(pending.since)
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                    .min(ctxsync_protocol::limits::MAX_COUNTER),
            })
            .collect();
        Snapshot {
            version,
            aggregate_hash: self.aggregate_hash.clone(),
            resources: self.resources.clone(),
            initial,
            snapshot_error: self.snapshot_error.clone(),
            agent_run_id: agent_run_id.cloned(),
            phase: self.phase,
            pending_servers,
        }
    }
}

/// The report's pending servers as the wire allows them: only while pending, names
/// non-empty and within the source limit, each once, at most [`MAX_PENDING_SERVERS`].
fn pending_servers(report: Option<&Report>) -> Vec<PendingServer> {
    let Some(report) = report.filter(|r| r.phase == ReportPhase::Pending) else {
        return Vec::new();
    };
    let mut seen = HashSet::new();
    report
        .pending
        .iter()
        .filter(|p| !p.name.is_empty())
        .map(|p| PendingServer {
            name: truncate_to_boundary(&p.name, MAX_SOURCE_BYTES).to_owned(),
            since: p.since,
        })
        .filter(|p| seen.insert(p.name.clone()))
        .take(MAX_PENDING_SERVERS)
        .collect()
}

/// Resolves the context of `scan` against one sampled `report` (`None` without MCP
/// discovery). Never fails: unreadable or invalid inputs become row statuses and errors.
pub fn resolve(scan: &ScanConfig, report: Option<&Report>) -> Resolution {
    resolve_with_watch(scan, report).0
}

/// [`resolve`], plus the directories whose changes may change the result.
pub(crate) fn resolve_with_watch(
    scan: &ScanConfig,
    report: Option<&Report>,
) -> (Resolution, WatchSet) {
    let mut resolver = Resolver {
        workspace: scan::normalize(Path::new("/"), &scan.workspace_dir),
        watch: WatchSet::default(),
        notes: Vec::new(),
    };
    let candidates = resolver.candidates(scan, report);
    let servers = report.map(sorted_servers).unwrap_or_default();

    // Rows in priority order; later duplicates of a source are dropped.
    let mut used = HashSet::new();
    let mut planned: Vec<Planned<'_>> = Vec::new();
    let mut duplicates = 0usize;
    for (source, candidate) in candidates {
        if used.insert(source.clone()) {
            planned.push(Planned::File(source, candidate));
        } else {
            duplicates += 1;
        }
    }
    for server in servers {
        let source = format!("{SERVER_SOURCE_PREFIX}{}", server.outcome.name);
        if used.insert(source.clone()) {
            planned.push(Planned::Server(source, server));
        } else {
            duplicates += 1;
        }
    }
    if duplicates > 0 {
        resolver.notes.push(format!(
            "{duplicates} resources left out: their source duplicates another resource's"
        ));
    }
    if planned.len() > MAX_RESOURCES {
        let left_out = planned.len() - MAX_RESOURCES;
        planned.truncate(MAX_RESOURCES);
        resolver.notes.push(format!(
            "{left_out} resources left out: a snapshot carries at most {MAX_RESOURCES} resources"
        ));
    }
    let over_count = planned.len().saturating_sub(MAX_CONTEXT_RESOURCES);
    if over_count > 0 {
        resolver.notes.push(format!(
            "{over_count} resources excluded: at most {MAX_CONTEXT_RESOURCES} resources carry content"
        ));
    }

    // Files first: read, validate, then the aggregate content budget.
    let mut rows = Vec::with_capacity(planned.len());
    let mut server_rows = Vec::new();
    let mut context_bytes = 0usize;
    let mut over_budget = 0usize;
    for (index, plan) in planned.into_iter().enumerate() {
        let excluded = index >= MAX_CONTEXT_RESOURCES;
        match plan {
            Planned::File(source, candidate) => {
                let mut row = resolver.file_row(source, &candidate, excluded, report);
                if has_content(&row) {
                    let size = wire_body_len(&row.body);
                    if context_bytes + size > MAX_CONTEXT_BYTES {
                        exclude(
                            &mut row,
                            "not included: the snapshot's context files already fill the 2 MiB limit",
                        );
                        over_budget += 1;
                    } else {
                        context_bytes += size;
                    }
                }
                rows.push(row);
            }
            Planned::Server(source, server) => server_rows.push((source, server, excluded)),
        }
    }
    if over_budget > 0 {
        resolver.notes.push(format!(
            "{over_budget} context files excluded: their content would exceed the 2 MiB limit"
        ));
    }

    // Then servers, with what the wire leaves: each body within MAX_BODY_BYTES and all
    // bodies together within MAX_TOTAL_BODY_BYTES. Every server's minimal body (its name)
    // is reserved first so a large early server cannot starve a later one of its row.
    let file_bodies: usize = rows.iter().map(|r| wire_body_len(&r.body)).sum();
    let reserved: usize = server_rows
        .iter()
        .map(|(_, server, _)| minimal_server_body_len(&server.outcome.name))
        .sum();
    let mut tool_budget = MAX_TOTAL_BODY_BYTES.saturating_sub(file_bodies + reserved);
    for (source, server, excluded) in server_rows {
        rows.push(server_row(source, &server, excluded, &mut tool_budget));
    }

    let phase = match report.map(|r| r.phase) {
        None => DiscoveryPhase::Unspecified,
        Some(ReportPhase::Pending) => DiscoveryPhase::Pending,
        Some(ReportPhase::Complete) => DiscoveryPhase::Complete,
    };
    rows.sort_by(|a, b| a.source.cmp(&b.source));
    // Sources were unique before long ones were shortened; keep the wire's rule regardless.
    let before = rows.len();
    rows.dedup_by(|later, first| later.source == first.source);
    if rows.len() < before {
        resolver.notes.push(format!(
            "{} resources left out: their shortened source duplicates another resource's",
            before - rows.len()
        ));
    }
    let snapshot_error =
        (!resolver.notes.is_empty()).then(|| bound_error(resolver.notes.join("; ")));
    let resolution = Resolution {
        phase,
        aggregate_hash: aggregate_hash(&rows),
        resources: rows,
        snapshot_error,
        pending: pending_servers(report),
    };
    (resolution, resolver.watch)
}

enum Planned<'a> {
    File(String, Candidate),
    Server(String, HashedServer<'a>),
}
