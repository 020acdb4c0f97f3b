//! The context resolver: one discovery report plus one walk of the scan roots become the
//! rows of a snapshot, with every cap applied and every wire limit already respected.
//!
//! Priority (who keeps content when a cap bites) is deterministic and independent of the
//! order anything was discovered in: scan roots in configured order (the workspace first);
//! within a root its instruction files, its `.mcp.json`, then skills by container and
//! directory name; then configured MCP config files; then config files known only from the
//! report; then MCP servers by name. Servers come last so they can never push out a file.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use ctxsync_protocol::encoded_size::{
    encoded_body_len, encoded_server_len_without_tools, encoded_tool_entry_len,
    truncate_to_boundary,
};
use ctxsync_protocol::limits::{
    MAX_BODY_BYTES, MAX_ERROR_BYTES, MAX_ICON_FIELD_BYTES, MAX_ICON_SIZES, MAX_ICON_SRC_BYTES,
    MAX_ICONS_PER_TOOL, MAX_INSTRUCTIONS_BYTES, MAX_PENDING_SERVERS, MAX_PROTOCOL_VERSION_BYTES,
    MAX_RESOURCES, MAX_SERVER_DESCRIPTION_BYTES, MAX_SERVER_INFO_BYTES, MAX_SOURCE_BYTES,
    MAX_TOOL_META_BYTES, MAX_TOOL_TITLE_BYTES, MAX_TOTAL_BODY_BYTES,
};
use ctxsync_protocol::{
    DiscoveryPhase, InstructionFileBody, McpServerBody, McpServerInfo, McpTool, PendingServer,
    Resource, ResourceBody, ResourceStatus, RunId, SkillBody, Snapshot,
};

use crate::front_matter::parse_front_matter;
use crate::hash::{Canonical, aggregate_hash, server_hash};
use crate::report::{DiscoveryReport, PendingOutcome, ReportPhase, ServerOutcome};
use crate::scan::{self, Candidate, FileRead, Kind, WatchSet};

/// Largest context file whose content is sent; larger files are `OVERSIZE` (still hashed).
pub const MAX_FILE_BYTES: u64 = 64 * 1024;
/// Largest total of file bodies (instruction files and skills) in one snapshot; files
/// beyond it are `EXCLUDED`.
pub const MAX_CONTEXT_BYTES: usize = 2 * 1024 * 1024;
/// Most rows that carry content; rows beyond it are `EXCLUDED` (not read), and rows beyond
/// the wire's [`MAX_RESOURCES`] are left out and counted in the snapshot error.
pub const MAX_CONTEXT_RESOURCES: usize = 500;
/// The error of a failed server that gave no reason.
pub const DEFAULT_SERVER_ERROR: &str = "failed to connect";
/// Prefix of an MCP server row's source: `mcp:<server name>`.
pub const SERVER_SOURCE_PREFIX: &str = "mcp:";

const TRUNCATED: &str = "... [truncated]";

/// What the resolver scans.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScanConfig {
    /// The workspace directory: the first scan root, and the base of relative sources.
    pub workspace_dir: PathBuf,
    /// More scan roots, searched like the workspace directory.
    pub extra_roots: Vec<PathBuf>,
    /// MCP config files beyond each root's `.mcp.json` (the agent's `--mcp-config`); each
    /// gets an `mcp_config` row when it exists.
    pub mcp_config_paths: Vec<PathBuf>,
    /// Where Agent Plugins packages are found, in precedence order (the engine's
    /// `plugin_dirs`). Each loaded plugin's `mcp.json` gets an `mcp_config` row
    /// `<plugin>/mcp.json`, and its skills rows `<plugin>/skills/<dir>/SKILL.md`.
    pub plugin_dirs: Vec<PathBuf>,
}

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
    pub pending: Vec<PendingOutcome>,
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
            .map(|pending| PendingServer {
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
fn pending_servers(report: Option<&DiscoveryReport>) -> Vec<PendingOutcome> {
    let Some(report) = report.filter(|r| r.phase == ReportPhase::Pending) else {
        return Vec::new();
    };
    let mut seen = HashSet::new();
    report
        .pending
        .iter()
        .filter(|p| !p.name.is_empty())
        .map(|p| PendingOutcome {
            name: truncate_to_boundary(&p.name, MAX_SOURCE_BYTES).to_owned(),
            since: p.since,
        })
        .filter(|p| seen.insert(p.name.clone()))
        .take(MAX_PENDING_SERVERS)
        .collect()
}

/// Resolves the context of `scan` against one sampled `report` (`None` without MCP
/// discovery). Never fails: unreadable or invalid inputs become row statuses and errors.
pub fn resolve(scan: &ScanConfig, report: Option<&DiscoveryReport>) -> Resolution {
    resolve_with_watch(scan, report).0
}

/// [`resolve`], plus the directories whose changes may change the result.
pub(crate) fn resolve_with_watch(
    scan: &ScanConfig,
    report: Option<&DiscoveryReport>,
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

/// A server of the report with its content hash (computed once: tool lists can be large).
struct HashedServer<'a> {
    outcome: &'a ServerOutcome,
    content_hash: String,
    size_bytes: u64,
}

struct Resolver {
    workspace: PathBuf,
    watch: WatchSet,
    notes: Vec<String>,
}

impl Resolver {
    /// Every file candidate with its source, in priority order.
    fn candidates(
        &mut self,
        scan: &ScanConfig,
        report: Option<&DiscoveryReport>,
    ) -> Vec<(String, Candidate)> {
        let mut out = Vec::new();
        let mut roots_seen = HashSet::new();
        let roots = std::iter::once(&scan.workspace_dir).chain(&scan.extra_roots);
        for root in roots {
            let root = scan::normalize(&self.workspace, root);
            let canonical = match std::fs::canonicalize(&root) {
                Ok(canonical) if canonical.is_dir() => canonical,
                Ok(_) => {
                    self.notes
                        .push(format!("scan root {} is not a directory", root.display()));
                    continue;
                }
                Err(e) => {
                    self.notes
                        .push(format!("scan root {} is not readable: {e}", root.display()));
                    self.watch.file(&root); // notice the root appearing
                    continue;
                }
            };
            if !roots_seen.insert(canonical.clone()) {
                continue;
            }
            for candidate in scan::list_root(&root, &canonical, &mut self.watch, &mut self.notes) {
                out.push((self.source_of(&candidate.path), candidate));
            }
        }

        // Plugin packages: their MCP config and skills, attributed to the plugin. Its
        // manifest gets a row only when the report has something to say about it.
        let plugin_dirs: Vec<PathBuf> = scan
            .plugin_dirs
            .iter()
            .map(|dir| scan::normalize(&self.workspace, dir))
            .collect();
        let mut plugin_sources = std::collections::HashMap::new();
        for dir in &plugin_dirs {
            self.watch.any(dir.clone());
            self.watch.file(dir);
        }
        for plugin in ctxsync_agent_diagnostics::discover_plugins(&plugin_dirs).plugins {
            for file in [
                ctxsync_agent_diagnostics::PLUGIN_MANIFEST,
                ctxsync_agent_diagnostics::PLUGIN_MCP_CONFIG,
            ] {
                plugin_sources.insert(plugin.dir.join(file), format!("{}/{file}", plugin.name));
            }
            out.extend(scan::list_plugin(&plugin, &mut self.watch));
        }

        // Config files outside the roots: configured ones, then those only the report knows.
        let mut extra: Vec<PathBuf> = scan
            .mcp_config_paths
            .iter()
            .map(|p| scan::normalize(&self.workspace, p))
            .collect();
        let mut from_report: Vec<PathBuf> = report
            .map(|r| r.config_outcomes.iter())
            .into_iter()
            .flatten()
            .map(|o| scan::normalize(&self.workspace, &o.path))
            .collect();
        from_report.sort();
        extra.extend(from_report);
        let mut used: HashSet<String> = out.iter().map(|(s, _)| s.clone()).collect();
        for path in extra {
            let source = plugin_sources
                .get(&path)
                .cloned()
                .unwrap_or_else(|| self.source_of(&path));
            self.watch.file(&path);
            if used.contains(&source) {
                continue;
            }
            let known_to_report = report.is_some_and(|r| {
                r.config_outcomes
                    .iter()
                    .any(|o| scan::normalize(&self.workspace, &o.path) == path)
            });
            if !scan::exists(&path) && !known_to_report {
                continue; // a missing config file is not an error
            }
            used.insert(source.clone());
            out.push((
                source,
                Candidate {
                    path,
                    root: None,
                    kind: Kind::McpConfig,
                },
            ));
        }
        out
    }

    /// A path's source: relative (with `/`) inside the workspace, absolute elsewhere.
    fn source_of(&self, path: &Path) -> String {
        match path.strip_prefix(&self.workspace) {
            Ok(relative) if !relative.as_os_str().is_empty() => relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/"),
            _ => path.to_string_lossy().into_owned(),
        }
    }

    fn file_row(
        &mut self,
        source: String,
        candidate: &Candidate,
        excluded: bool,
        report: Option<&DiscoveryReport>,
    ) -> Resource {
        let source_path = Some(candidate.path.to_string_lossy().into_owned());
        let mut row = Resource {
            source,
            source_path,
            content_hash: String::new(),
            size_bytes: 0,
            status: ResourceStatus::Ok,
            error: None,
            body: empty_body(&candidate.kind),
        };
        if let Some(flagged) = flag_long_source(&mut row) {
            return flagged;
        }
        if excluded {
            exclude(
                &mut row,
                "not read: the snapshot already holds 500 resources with content",
            );
            return row;
        }
        if candidate.kind == Kind::EscapingSkillContainer {
            row.status = ResourceStatus::Invalid;
            row.error = Some(
                "this skills directory is a symlink that leads outside the scan root (or the plugin root), or not a directory; its skills were not read"
                    .into(),
            );
            return row;
        }
        let (read, target) = scan::read(candidate, MAX_FILE_BYTES);
        if let Some(target) = target {
            self.watch.file(&target);
        }
        match read {
            FileRead::Content { bytes, hash } => {
                row.size_bytes = bytes.len() as u64;
                row.content_hash = hash;
                self.fill_content(&mut row, &candidate.kind, bytes);
            }
            FileRead::Oversize { size, hash } => {
                row.size_bytes = size;
                row.content_hash = hash;
                if candidate.kind == Kind::McpConfig {
                    // Never sent anyway: a large config file is not over any limit.
                } else {
                    row.status = ResourceStatus::Oversize;
                    row.error = Some(format!(
                        "the file is {size} bytes; context files over {MAX_FILE_BYTES} bytes are not sent"
                    ));
                }
            }
            FileRead::Missing => {
                row.status = ResourceStatus::Unreadable;
                row.error = Some("the file does not exist".into());
            }
            FileRead::Escapes => {
                row.status = ResourceStatus::Invalid;
                row.error =
                    Some("the file is a symlink that leads outside the scan root; not read".into());
            }
            FileRead::Dangling => {
                row.status = ResourceStatus::Unreadable;
                row.error = Some("the file is a symlink whose target does not exist".into());
            }
            FileRead::NotRegular { kind } => {
                row.status = ResourceStatus::Unreadable;
                row.error = Some(format!("not a regular file ({kind})"));
            }
            FileRead::Failed(e) => {
                row.status = ResourceStatus::Unreadable;
                row.error = Some(format!("could not read the file: {e}"));
            }
        }
        if candidate.kind == Kind::McpConfig
            && let Some(report) = report
        {
            let path = &candidate.path;
            let outcomes = report
                .config_outcomes
                .iter()
                .filter(|o| scan::normalize(&self.workspace, &o.path) == *path);
            apply_config_outcomes(&mut row, outcomes);
        }
        row.error = row.error.map(bound_error);
        row
    }

    /// Turns a read file into its body, or an `INVALID` row with the reason.
    fn fill_content(&self, row: &mut Resource, kind: &Kind, bytes: Vec<u8>) {
        if *kind == Kind::McpConfig {
            return; // hash and size only: the file holds secrets
        }
        let text = match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(_) => {
                row.status = ResourceStatus::Invalid;
                row.error = Some("the file is not UTF-8 text".into());
                return;
            }
        };
        match kind {
            Kind::Instruction => {
                row.body = ResourceBody::InstructionFile(InstructionFileBody { content: text });
            }
            Kind::Skill { dir_name } => match validate_skill(&text, dir_name) {
                Ok((name, description, warning)) => {
                    row.error = warning;
                    row.body = ResourceBody::Skill(SkillBody {
                        meta: text,
                        name,
                        description,
                    });
                }
                Err(problem) => {
                    row.status = ResourceStatus::Invalid;
                    row.error = Some(problem);
                }
            },
            Kind::McpConfig | Kind::EscapingSkillContainer => {}
        }
    }
}

/// Applies diagnostics' outcomes for one config file: an error turns an OK row `INVALID`
/// (a row already failing keeps its status), a warning is added to the row's `error`.
fn apply_config_outcomes<'a>(
    row: &mut Resource,
    outcomes: impl Iterator<Item = &'a crate::report::ConfigOutcome>,
) {
    // Sorted, so the report's order of outcomes never changes the row.
    let mut errors: Vec<&str> = Vec::new();
    let mut warnings: Vec<&str> = Vec::new();
    for outcome in outcomes {
        errors.extend(outcome.error.as_deref().filter(|e| !e.is_empty()));
        warnings.extend(outcome.warning.as_deref().filter(|w| !w.is_empty()));
    }
    errors.sort_unstable();
    warnings.sort_unstable();
    if !errors.is_empty() && row.status == ResourceStatus::Ok {
        row.status = ResourceStatus::Invalid;
    }
    let notes: Vec<String> = row
        .error
        .take()
        .into_iter()
        .chain(errors.into_iter().chain(warnings).map(str::to_owned))
        .collect();
    row.error = (!notes.is_empty()).then(|| notes.join("; "));
}

/// Checks a skill's front matter: `name` present, kebab-case and equal to its directory's
/// name. Returns name, description and a warning for an OK row, or the reason it is invalid.
fn validate_skill(text: &str, dir_name: &str) -> Result<(String, String, Option<String>), String> {
    let front =
        parse_front_matter(text).map_err(|e| format!("invalid SKILL.md front matter: {e}"))?;
    let name = front.get("name").unwrap_or_default();
    if name.is_empty() {
        return Err("SKILL.md front matter has no `name`".into());
    }
    let mut problems = Vec::new();
    if !is_kebab_case(name) {
        problems.push(format!(
            "skill name `{name}` is not kebab-case (lower-case letters and digits separated by single hyphens)"
        ));
    }
    if name != dir_name {
        problems.push(format!(
            "skill name `{name}` does not match its directory name `{dir_name}`"
        ));
    }
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    let description = front.get("description").unwrap_or_default().to_owned();
    let warning = description
        .is_empty()
        .then(|| "SKILL.md front matter has no `description`".to_owned());
    Ok((name.to_owned(), description, warning))
}

/// `lower-case-words-and-digits`, hyphen-separated, no leading, trailing or double hyphen.
pub(crate) fn is_kebab_case(name: &str) -> bool {
    !name.is_empty()
        && name.split('-').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

/// Servers sorted by name (ties by their content, so equal reports resolve alike whatever
/// order the engine listed them in), each hashed once.
fn sorted_servers(report: &DiscoveryReport) -> Vec<HashedServer<'_>> {
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
fn server_row(
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
        row.status = ResourceStatus::Unreadable;
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
    server: &ServerOutcome,
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

fn minimal_server_body_len(name: &str) -> usize {
    server_body_len(&McpServerBody {
        server_name: truncate_to_boundary(name, MAX_SOURCE_BYTES).to_owned(),
        ..Default::default()
    })
}

/// The body's size as the server measures it.
fn wire_body_len(body: &ResourceBody) -> usize {
    encoded_body_len(body)
}

fn has_content(row: &Resource) -> bool {
    row.status == ResourceStatus::Ok
        && matches!(
            row.body,
            ResourceBody::InstructionFile(_) | ResourceBody::Skill(_)
        )
}

/// The body a row of this kind carries when it carries no content.
fn empty_body(kind: &Kind) -> ResourceBody {
    match kind {
        Kind::Instruction => ResourceBody::InstructionFile(InstructionFileBody::default()),
        Kind::McpConfig => ResourceBody::McpConfig,
        Kind::Skill { dir_name } => ResourceBody::Skill(SkillBody {
            name: dir_name.clone(),
            ..Default::default()
        }),
        Kind::EscapingSkillContainer => ResourceBody::Skill(SkillBody::default()),
    }
}

/// Marks a row `EXCLUDED`: its content is dropped, its hash and size stay.
fn exclude(row: &mut Resource, reason: &str) {
    row.status = ResourceStatus::Excluded;
    row.error = Some(reason.to_owned());
    row.body = match &row.body {
        ResourceBody::InstructionFile(_) => {
            ResourceBody::InstructionFile(InstructionFileBody::default())
        }
        ResourceBody::Skill(body) => ResourceBody::Skill(SkillBody {
            name: body.name.clone(),
            ..Default::default()
        }),
        ResourceBody::McpConfig => ResourceBody::McpConfig,
        ResourceBody::McpServer(body) => ResourceBody::McpServer(McpServerBody {
            server_name: body.server_name.clone(),
            ..Default::default()
        }),
    };
}

/// A row whose source (or path) is over the wire limit: the path is dropped, and a source
/// over the limit is shortened to a unique stand-in and the row flagged `INVALID` without
/// content. Returns the flagged row, or `None` when the source fits.
fn flag_long_source(row: &mut Resource) -> Option<Resource> {
    if row
        .source_path
        .as_ref()
        .is_some_and(|p| p.len() > MAX_SOURCE_BYTES)
    {
        row.source_path = None;
    }
    if row.source.len() <= MAX_SOURCE_BYTES {
        return None;
    }
    let mut digest = Canonical::new("ctxsync.long-source.v1");
    digest.field(row.source.as_bytes());
    let digest = digest.finish().0;
    let suffix = format!("#{}", &digest[..16]);
    let prefix = truncate_to_boundary(&row.source, MAX_SOURCE_BYTES - suffix.len());
    let mut flagged = row.clone();
    flagged.source = format!("{prefix}{suffix}");
    exclude(&mut flagged, "");
    flagged.status = ResourceStatus::Invalid;
    flagged.error = Some(format!(
        "the source is {} bytes, over the protocol's {MAX_SOURCE_BYTES}-byte limit; shortened and not read",
        row.source.len()
    ));
    if let ResourceBody::McpServer(body) = &mut flagged.body {
        body.server_name = truncate_to_boundary(&body.server_name, MAX_SOURCE_BYTES).to_owned();
    }
    Some(flagged)
}

/// Bounds a diagnostic to the wire's error limit on a UTF-8 boundary, marking the cut.
pub(crate) fn bound_error(text: String) -> String {
    if text.len() <= MAX_ERROR_BYTES {
        return text;
    }
    let kept = truncate_to_boundary(&text, MAX_ERROR_BYTES - TRUNCATED.len());
    format!("{kept}{TRUNCATED}")
}

/// One snapshot error from the resolver's and the watcher's, within the wire's limit. The
/// watcher's note is short and kept whole (it says why changes may arrive late); the
/// resolver's part is shortened if both do not fit.
pub(crate) fn merge_snapshot_errors(
    resolver: Option<String>,
    watching: Option<&str>,
) -> Option<String> {
    const SEPARATOR: &str = "; ";
    let Some(watching) = watching else {
        return resolver.map(bound_error);
    };
    // Never more than half the limit, so the resolver's part always keeps some room.
    let watching = truncate_to_boundary(watching, MAX_ERROR_BYTES / 2);
    let Some(resolver) = resolver else {
        return Some(watching.to_owned());
    };
    let room = MAX_ERROR_BYTES - SEPARATOR.len() - watching.len();
    let resolver = if resolver.len() <= room {
        resolver
    } else {
        let kept = truncate_to_boundary(&resolver, room - TRUNCATED.len());
        format!("{kept}{TRUNCATED}")
    };
    Some(format!("{resolver}{SEPARATOR}{watching}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ctxsync_protocol::{McpIcon, v1};

    #[test]
    fn snapshot_errors_merge_within_the_limit() {
        let check = |resolver: Option<&str>, watching: Option<&str>, expect: Option<&str>| {
            let merged = merge_snapshot_errors(resolver.map(str::to_owned), watching);
            assert_eq!(merged.as_deref(), expect);
        };
        check(None, None, None);
        check(Some("caps"), None, Some("caps"));
        check(None, Some("watching"), Some("watching"));
        check(Some("caps"), Some("watching"), Some("caps; watching"));

        // A long resolver error is shortened; the watcher's note survives whole.
        let long = "é".repeat(MAX_ERROR_BYTES); // two bytes each: cut on a char boundary
        let note = "watching context files: polling every 2 s";
        let merged = merge_snapshot_errors(Some(long), Some(note)).unwrap();
        assert!(merged.len() <= MAX_ERROR_BYTES, "{}", merged.len());
        assert!(merged.len() >= MAX_ERROR_BYTES - 1, "{}", merged.len());
        assert!(
            merged.ends_with(&format!("{TRUNCATED}; {note}")),
            "{merged}"
        );

        // Neither part alone can take the whole limit.
        let huge_note = "n".repeat(2 * MAX_ERROR_BYTES);
        let merged =
            merge_snapshot_errors(Some("x".repeat(MAX_ERROR_BYTES)), Some(&huge_note)).unwrap();
        assert_eq!(merged.len(), MAX_ERROR_BYTES);
        assert!(merged.starts_with("xxx") && merged.ends_with("nnn"));
        let alone = merge_snapshot_errors(None, Some(&huge_note)).unwrap();
        assert_eq!(alone.len(), MAX_ERROR_BYTES / 2);
        let resolver_alone = merge_snapshot_errors(Some("y".repeat(2 * MAX_ERROR_BYTES)), None);
        assert_eq!(resolver_alone.unwrap().len(), MAX_ERROR_BYTES);
    }

    #[test]
    fn kebab_case() {
        for good in ["a", "pdf-tools", "v2", "a-1-b"] {
            assert!(is_kebab_case(good), "{good}");
        }
        for bad in ["", "-a", "a-", "a--b", "A", "a_b", "a b", "é"] {
            assert!(!is_kebab_case(bad), "{bad}");
        }
    }

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
            let outcome = ServerOutcome {
                name: "s".into(),
                connected,
                tools: vec![McpTool {
                    name: "t".into(),
                    input_schema: serde_json::json!({"type": "object"}),
                    ..Default::default()
                }]
                .into(),
                details: Some(crate::report::ServerDetails {
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

    #[test]
    fn errors_are_bounded_on_char_boundaries() {
        let long = "é".repeat(MAX_ERROR_BYTES);
        let bounded = bound_error(long);
        assert!(bounded.len() <= MAX_ERROR_BYTES);
        assert!(bounded.ends_with(TRUNCATED));
        assert_eq!(bound_error("short".into()), "short");
    }

    #[test]
    fn skill_validation_messages() {
        let check = |text: &str, dir: &str, expect: Result<&str, &str>| {
            let got = validate_skill(text, dir);
            match (got, expect) {
                (Ok((name, _, _)), Ok(want)) => assert_eq!(name, want),
                (Err(problem), Err(want)) => {
                    assert!(problem.contains(want), "`{problem}` lacks `{want}`")
                }
                (got, expect) => panic!("{text:?}: got {got:?}, expected {expect:?}"),
            }
        };
        check("---\nname: pdf\ndescription: d\n---\n", "pdf", Ok("pdf"));
        check(
            "---\nname: pdf\n---\n",
            "other",
            Err("does not match its directory name `other`"),
        );
        check(
            "---\nname: Pdf_Tools\n---\n",
            "Pdf_Tools",
            Err("not kebab-case"),
        );
        check("---\ndescription: d\n---\n", "pdf", Err("no `name`"));
        check(
            "no front matter",
            "pdf",
            Err("invalid SKILL.md front matter"),
        );
    }
}

/// Golden vectors: today's server row (content hash, size, stored JSON, encoded size) and
/// per-tool wire sizes for tools with every field set, so a change in how they are built
/// or measured cannot change their bytes.
#[cfg(test)]
mod golden {
    use ctxsync_protocol::McpConnectTimings;
    use ctxsync_test_support::golden::tools;

    use super::*;
    use crate::report::ServerDetails;

    fn outcome() -> ServerOutcome {
        ServerOutcome {
            name: "fs".into(),
            connected: true,
            tools: tools().into(),
            error: None,
            warning: Some("kept".into()),
            details: Some(details()),
            always_load: true,
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
        let report = DiscoveryReport {
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
