//! Builds the [`Panel`] from the chat projection: files and skills from the chat's pin,
//! MCP from the live view through the freshness rule, so the panel and the model see the
//! same inventory.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

use ctxsync_chat_projection::{
    AgentPresence, Binding, ChatContext, Connection, EligibleTool, HeldSignIn, View, ViewPhase,
};
use ctxsync_protocol::{McpServerInfo, Resource, ResourceStatus, RunId, plugin_of_source};

use crate::model::*;

/// Builds the panel of `chat_id` from its context: the pin for files and skills, the
/// projection's view for everything MCP (phase and staleness included, taken as the
/// view states them). The header names the agent's current run; without the stored
/// snapshot (see [`build_chat_panel`]) it cannot say when the last one arrived.
pub fn build_panel(chat_id: &str, context: &ChatContext) -> Panel {
    build(chat_id, context, None, SystemTime::now())
}

/// [`build_panel`] with the header completed from `live`, the binding the context was
/// loaded from (`LoadedChat::binding`): which run published the stored snapshot, and
/// when it arrived.
pub fn build_chat_panel(chat_id: &str, context: &ChatContext, live: &Binding) -> Panel {
    build_chat_panel_at(chat_id, context, live, SystemTime::now())
}

/// [`build_chat_panel`] as of `now` (which only dates the snapshot's age).
pub fn build_chat_panel_at(
    chat_id: &str,
    context: &ChatContext,
    live: &Binding,
    now: SystemTime,
) -> Panel {
    build(chat_id, context, Some(live), now)
}

fn build(chat_id: &str, context: &ChatContext, live: Option<&Binding>, now: SystemTime) -> Panel {
    let view = context.mcp();
    let state = discovery_state(view);
    let mut issues = Vec::new();
    let (files, skills) = pinned_items(context, &mut issues);
    let configs = config_items(view, &mut issues);
    let sign_ins = match live {
        Some(Binding::Agent(agent)) => agent.sign_ins.as_slice(),
        _ => &[],
    };
    let servers = server_items(view, sign_ins, &mut issues);
    // Withheld tools are not listed, and an empty list is a claim only a completed
    // discovery can make.
    let servers = match state {
        DiscoveryState::Stale => None,
        DiscoveryState::Complete | DiscoveryState::CompleteNoServers => Some(servers),
        DiscoveryState::Pending | DiscoveryState::Unknown if servers.is_empty() => None,
        DiscoveryState::Pending | DiscoveryState::Unknown => Some(servers),
    };
    let mut summary = servers.as_deref().map(McpSummary::of);
    let broken_configs = configs.iter().filter(|config| !config.ok).count();
    if let Some(summary) = summary.as_mut()
        && state == DiscoveryState::Pending
    {
        // More servers may appear: the counts are of what was found so far.
        summary.text.push_str(" so far");
    }
    let header = header(view, live, now);
    let banner = banner(state, view, summary.as_ref(), &header).config_broken(broken_configs);
    let dirty = context.is_dirty().then(|| DirtyNotice {
        text: "The workspace context changed since this chat pinned it.".into(),
        refresh: Action {
            label: "Refresh context".into(),
            method: "PUT".into(),
            href: format!("/api/chats/{chat_id}/context"),
        },
    });

    let mut panel = Panel {
        chat_id: chat_id.into(),
        tone: Tone::Ok,
        mcp_discovery: DiscoveryWords::of(view),
        discovery: banner,
        dirty,
        snapshot_error: view.snapshot_error().map(str::to_owned),
        files,
        skills,
        mcp: McpSection {
            configs,
            servers,
            summary,
        },
        issues,
        header,
    };
    let no_servers = panel.mcp.no_servers_text();
    if let Some(summary) = panel.mcp.summary.as_mut()
        && summary.servers == 0
    {
        no_servers.clone_into(&mut summary.text);
    }
    panel.tone = panel.compute_tone();
    panel
}

/// The discovery state the banner and the server list show.
fn discovery_state(view: &View) -> DiscoveryState {
    if view.is_stale() {
        DiscoveryState::Stale
    } else {
        match view.phase() {
            ViewPhase::Pending => DiscoveryState::Pending,
            ViewPhase::Complete if view.servers().is_empty() => DiscoveryState::CompleteNoServers,
            ViewPhase::Complete => DiscoveryState::Complete,
            ViewPhase::Unknown => DiscoveryState::Unknown,
        }
    }
}

/// The pinned instruction files (grouped by directory) and skills, with their issues.
fn pinned_items(
    context: &ChatContext,
    issues: &mut Vec<IssueItem>,
) -> (Vec<FileGroup>, Vec<SkillItem>) {
    let mut groups: BTreeMap<String, Vec<FileItem>> = BTreeMap::new();
    let mut skills = Vec::new();
    if let Some(pin) = context.pinned() {
        for (resource, _) in pin.instruction_files() {
            let (directory, name) = split_source(&resource.source);
            groups.entry(directory).or_default().push(FileItem {
                name,
                source: resource.source.clone(),
                size_bytes: resource.size_bytes,
                status: resource.status.as_str().into(),
            });
            row_issue(issues, IssueKind::File, resource);
        }
        for (resource, body) in pin.skills() {
            skills.push(SkillItem {
                name: if body.name.is_empty() {
                    skill_dir_name(&resource.source)
                } else {
                    body.name.clone()
                },
                description: body.description.clone(),
                source: resource.source.clone(),
                status: resource.status.as_str().into(),
                plugin: plugin_of_source(&resource.source).map(str::to_owned),
            });
            row_issue(issues, IssueKind::Skill, resource);
        }
    }
    let files = groups
        .into_iter()
        .map(|(directory, files)| FileGroup { directory, files })
        .collect();

    (files, skills)
}

/// Every config file of the live snapshot, with the projection's diagnostic where it has
/// one (an issue too).
fn config_items(view: &View, issues: &mut Vec<IssueItem>) -> Vec<ConfigItem> {
    let mut configs: Vec<ConfigItem> = view
        .config_paths()
        .iter()
        .map(|path| ConfigItem {
            path: path.clone(),
            ok: true,
            diagnostic: None,
        })
        .collect();
    for outcome in view.configs() {
        let item = ConfigItem {
            path: outcome.path.clone(),
            ok: outcome.ok,
            diagnostic: Some(outcome.diagnostic.clone()),
        };
        match configs.iter_mut().find(|c| c.path == outcome.path) {
            Some(existing) => *existing = item,
            None => configs.push(item),
        }
        issues.push(IssueItem {
            kind: IssueKind::McpConfig,
            source: outcome.path.clone(),
            severity: if outcome.ok {
                Tone::Warning
            } else {
                Tone::Error
            },
            text: outcome.diagnostic.clone(),
        });
    }

    configs
}

/// Every server of the live snapshot with its tools; a diagnostic is also an issue.
fn server_items(
    view: &View,
    sign_ins: &[HeldSignIn],
    issues: &mut Vec<IssueItem>,
) -> Vec<ServerItem> {
    let tools = view.tools();
    view.servers()
        .iter()
        .map(|server| {
            let state = match (server.ok, server.tool_count) {
                (false, _) if server.needs_authorization => ServerState::NeedsAuthorization,
                (false, _) => ServerState::Failed,
                (true, 0) => ServerState::NoTools,
                (true, _) => ServerState::Tools,
            };
            if let Some(diagnostic) = &server.diagnostic {
                issues.push(IssueItem {
                    kind: IssueKind::McpServer,
                    source: server.name.clone(),
                    severity: if server.ok || server.needs_authorization {
                        Tone::Warning
                    } else {
                        Tone::Error
                    },
                    text: diagnostic.clone(),
                });
            }
            let tools: Vec<ToolItem> = tools
                .iter()
                .filter(|t| t.server == server.name)
                .map(tool_item)
                .collect();
            let protocol_version = Some(server.protocol_version.trim())
                .filter(|v| !v.is_empty())
                .map(|v| shorten(v, MAX_IMPLEMENTATION_CHARS));
            let implementation = server.server_info.as_ref().and_then(implementation);
            let timings = server.timings.map(|t| Timings {
                start_ms: t.start_ms,
                handshake_ms: t.handshake_ms,
                tools_ms: t.tools_ms,
            });
            ServerItem {
                plugin: plugin_of_source(&format!("mcp:{}", server.name)).map(str::to_owned),
                name: server.name.clone(),
                state,
                tool_count: tools.len(),
                tools,
                total_ms: timings.map(Timings::total_ms),
                diagnostic: server.diagnostic.clone(),
                connection: ServerItem::connection_line(
                    protocol_version.as_deref(),
                    implementation.as_deref(),
                    timings,
                ),
                protocol_version,
                implementation,
                timings,
                // Only while it works: a server asking for a sign-in is not signed in.
                signed_in: sign_ins
                    .iter()
                    .find(|s| s.server == server.name)
                    .filter(|_| server.ok)
                    .map(signed_in_words),
            }
        })
        .collect()
}

/// "signed in as ada by the API token", "signed in from chat …'s page".
fn signed_in_words(sign_in: &HeldSignIn) -> String {
    let by = match sign_in.via.strip_prefix("chat:") {
        Some(chat) => format!("from the page of chat {chat}"),
        None if sign_in.via == "api_token" => "with the API token".to_owned(),
        None => format!("by {}", sign_in.via),
    };
    match &sign_in.account {
        Some(account) => format!("signed in as {account} {by}"),
        None => format!("signed in {by}"),
    }
}

/// The discovery banner: the state, the servers still awaited, a note on failed servers,
/// and for a stale view why and what to do.
fn banner(
    state: DiscoveryState,
    view: &View,
    summary: Option<&McpSummary>,
    header: &PanelHeader,
) -> Banner {
    let mut banner = Banner::new(state).waiting(
        view.pending_servers()
            .iter()
            .map(|s| WaitingServer::new(&s.name, s.elapsed_ms)),
    );
    if let Some(summary) = summary
        && summary.servers_needing_authorization > 0
    {
        banner.note = Some(match summary.servers_needing_authorization {
            1 => "1 server needs a person to sign in; it has no tools until then.".to_owned(),
            n => format!("{n} servers need a person to sign in; they have no tools until then."),
        });
    }
    if let Some(summary) = summary
        && summary.servers_failed > 0
    {
        banner.note = Some(match summary.servers_failed {
            1 => format!(
                "1 of {} failed; its error is shown below.",
                counted(summary.servers, "server", "servers")
            ),
            n => format!(
                "{n} of {} servers failed; their errors are shown below.",
                summary.servers
            ),
        });
    }
    if state == DiscoveryState::Stale {
        banner = match view.agent() {
            AgentPresence::Missing | AgentPresence::Unbound => banner.explained(
                Some(MISSING_AGENT_REASON.into()),
                Some(MISSING_AGENT_ADVICE.into()),
            ),
            AgentPresence::NoSnapshot | AgentPresence::Reported => {
                let reason = stale_reason(header);
                banner.explained(Some(reason), Some(STALE_ADVICE.into()))
            }
        };
    }

    banner
}

/// The header from the projection's word on the agent and, when given, the stored
/// snapshot the context was loaded with.
fn header(view: &View, live: Option<&Binding>, now: SystemTime) -> PanelHeader {
    let current_run = view.current_run();
    let agent = match view.agent() {
        AgentPresence::Unbound => AgentStatus::Unbound,
        AgentPresence::Missing => AgentStatus::Missing,
        AgentPresence::NoSnapshot => AgentStatus::NoSnapshot,
        AgentPresence::Reported => AgentStatus::Reported,
    };
    let snapshot = match live {
        Some(Binding::Agent(state)) if agent == AgentStatus::Reported => state.snapshot.as_ref(),
        _ => None,
    };
    // The panel is an edge: its JSON says `null` for no run id.
    let run_id = current_run.map(RunId::to_string);
    let snapshot_run_id = snapshot
        .and_then(|s| s.agent_run_id.as_ref())
        .map(RunId::to_string);
    let received = snapshot.and_then(|s| s.received_at);
    let last_snapshot_at = received.map(rfc3339);
    let last_snapshot_age_s =
        received.map(|at| now.duration_since(at).map_or(0, |age| age.as_secs()));
    let mut text = match agent {
        AgentStatus::Unbound => "No agent is bound to this chat.".to_owned(),
        AgentStatus::Missing => "The agent bound to this chat no longer exists.".to_owned(),
        AgentStatus::NoSnapshot | AgentStatus::Reported => match &run_id {
            Some(run) => format!("Agent run {}", short_run_id(run)),
            None => "Agent (reports no run id)".to_owned(),
        },
    };
    match (agent, &last_snapshot_at, last_snapshot_age_s) {
        (AgentStatus::NoSnapshot, _, _) => text.push_str(" · no snapshot yet"),
        (AgentStatus::Reported, Some(at), Some(age)) => {
            text.push_str(&format!(
                " · last snapshot {} ({})",
                human_time(at),
                age_text(age)
            ));
        }
        _ => {}
    }
    let (connection, offline_since) = match view.connection() {
        Connection::Online => (ConnectionStatus::Online, None),
        Connection::Never => (ConnectionStatus::Never, None),
        Connection::Offline { since } => (ConnectionStatus::Offline, Some(since)),
    };
    if let Some(since) = offline_since {
        let age = now.duration_since(since).map_or(0, |age| age.as_secs());
        text.push_str(&format!(
            " · agent offline since {} ({})",
            human_time(&rfc3339(since)),
            age_text(age)
        ));
    }
    PanelHeader {
        connection,
        offline_since: offline_since.map(rfc3339),
        agent,
        run_id_short: run_id.as_deref().map(short_run_id),
        run_id,
        snapshot_run_id_short: snapshot_run_id.as_deref().map(short_run_id),
        snapshot_run_id,
        last_snapshot_at,
        last_snapshot_age_s,
        text,
    }
}

/// Why a stale panel withholds tools, naming the runs when they are known.
fn stale_reason(header: &PanelHeader) -> String {
    match (&header.snapshot_run_id_short, &header.run_id_short) {
        (Some(old), Some(new)) => format!(
            "The tools on record were published by an earlier agent process (run {old}). \
             The agent has restarted since as run {new}, which has not published its own tools yet."
        ),
        (None, Some(new)) => format!(
            "The tools on record were published by an earlier agent process. \
             The agent has restarted since as run {new}, which has not published its own tools yet."
        ),
        _ => STALE_REASON.to_owned(),
    }
}

/// `12 s ago`, `3 min ago`, `2 h ago`, `4 d ago`; `just now` under a second.
pub(crate) fn age_text(seconds: u64) -> String {
    match seconds {
        0 => "just now".to_owned(),
        s if s < 60 => format!("{s} s ago"),
        s if s < 3600 => format!("{} min ago", s / 60),
        s if s < 86_400 => format!("{} h ago", s / 3600),
        s => format!("{} d ago", s / 86_400),
    }
}

/// `2026-12-03T11:00:00Z` → `2026-12-03 11:00:00 UTC`.
pub(crate) fn human_time(rfc3339: &str) -> String {
    match rfc3339.strip_suffix('Z') {
        Some(rest) => format!("{} UTC", rest.replacen('T', " ", 1)),
        None => rfc3339.to_owned(),
    }
}

/// A time as RFC 3339 in UTC, whole seconds: the projection's spelling, so the panel
/// and the model note date things alike.
pub(crate) fn rfc3339(at: SystemTime) -> String {
    ctxsync_chat_projection::rfc3339_utc(at)
}

/// A tool as the panel lists it: name, title when set, and the explicit hints its server
/// claims (destructive only for a tool not claimed read-only, as MCP defines it).
fn tool_item(tool: &EligibleTool) -> ToolItem {
    let mut hints = Vec::new();
    if let Some(a) = &tool.annotations_untrusted {
        let read_only = a.read_only_hint == Some(true);
        if read_only {
            hints.push(ToolHint::ReadOnly);
        }
        if !read_only && a.destructive_hint == Some(true) {
            hints.push(ToolHint::Destructive);
        }
        if a.open_world_hint == Some(true) {
            hints.push(ToolHint::OpenWorld);
        }
    }
    ToolItem {
        name: tool.tool.clone(),
        title: Some(shorten(&tool.title, MAX_TITLE_CHARS)).filter(|t| !t.is_empty()),
        description: tool.description.clone(),
        hints,
    }
}

/// Characters of a tool title the panel shows.
const MAX_TITLE_CHARS: usize = 120;

/// `name version` of what the server said it is, shortened; `None` when it said neither.
fn implementation(info: &McpServerInfo) -> Option<String> {
    let text = [info.name.trim(), info.version.trim()]
        .into_iter()
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    (!text.is_empty()).then(|| shorten(&text, MAX_IMPLEMENTATION_CHARS))
}

/// `docs/AGENTS.md` → (`docs`, `AGENTS.md`); a top-level file is in `.`.
fn split_source(source: &str) -> (String, String) {
    let path = Path::new(source);
    let name = path
        .file_name()
        .map_or_else(|| source.to_string(), |n| n.to_string_lossy().into_owned());
    let directory = match path.parent().map(|p| p.to_string_lossy().into_owned()) {
        Some(dir) if !dir.is_empty() => dir,
        _ => ".".into(),
    };
    (directory, name)
}

/// `skills/code-review/SKILL.md` → `code-review`.
fn skill_dir_name(source: &str) -> String {
    Path::new(source)
        .parent()
        .and_then(Path::file_name)
        .map_or_else(|| source.to_string(), |n| n.to_string_lossy().into_owned())
}

fn row_issue(issues: &mut Vec<IssueItem>, kind: IssueKind, resource: &Resource) {
    let severity = match resource.status {
        ResourceStatus::Ok if resource.error.is_some() => Tone::Warning,
        ResourceStatus::Ok => return,
        ResourceStatus::Oversize
        | ResourceStatus::Excluded
        | ResourceStatus::NeedsAuthorization => Tone::Warning,
        ResourceStatus::Unreadable | ResourceStatus::Invalid => Tone::Error,
    };
    let text = resource.error.clone().unwrap_or_else(|| {
        match resource.status {
            ResourceStatus::Oversize => "too large to include",
            ResourceStatus::Excluded => "excluded: the snapshot reached its size or count limit",
            ResourceStatus::Unreadable => "could not be read",
            ResourceStatus::Invalid => "invalid",
            ResourceStatus::NeedsAuthorization => "needs a person to sign in",
            ResourceStatus::Ok => unreachable!("an OK row without an error returned above"),
        }
        .into()
    });
    issues.push(IssueItem {
        kind,
        source: resource.source.clone(),
        severity,
        text,
    });
}
