//! Builds the [`Panel`] from the chat projection: files and skills from the chat's pin,
//! MCP from the live view through the freshness rule, so the panel and the model see the
//! same inventory.

use std::collections::BTreeMap;
use std::path::Path;

use ctxsync_chat_projection::{ChatContext, EligibleTool, Phase};
use ctxsync_protocol::{McpServerInfo, Resource, ResourceStatus};

use crate::model::*;

/// Builds the panel of `chat_id` from its context: the pin for files and skills, the
/// projection's view for everything MCP (phase and staleness included, taken as the
/// view states them).
pub fn build_panel(chat_id: &str, context: &ChatContext) -> Panel {
    let view = context.mcp();
    let state = if view.is_stale() {
        DiscoveryState::Stale
    } else {
        match view.phase() {
            Phase::Pending => DiscoveryState::Pending,
            Phase::Complete if view.servers().is_empty() => DiscoveryState::CompleteNoServers,
            Phase::Complete => DiscoveryState::Complete,
            Phase::Unknown => DiscoveryState::Unknown,
        }
    };

    let mut issues = Vec::new();
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
            row_issue(&mut issues, IssueKind::File, resource);
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
            });
            row_issue(&mut issues, IssueKind::Skill, resource);
        }
    }
    let files = groups
        .into_iter()
        .map(|(directory, files)| FileGroup { directory, files })
        .collect();

    // Every config file of the live snapshot, with the projection's diagnostic where it has one.
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

    let tools = view.tools();
    let servers: Vec<ServerItem> = view
        .servers()
        .iter()
        .map(|server| {
            let state = match (server.ok, server.tool_count) {
                (false, _) => ServerState::Failed,
                (true, 0) => ServerState::NoTools,
                (true, _) => ServerState::Tools,
            };
            if let Some(diagnostic) = &server.diagnostic {
                issues.push(IssueItem {
                    kind: IssueKind::McpServer,
                    source: server.name.clone(),
                    severity: if server.ok {
                        Tone::Warning
                    } else {
                        Tone::Error
                    },
                    text: diagnostic.clone(),
                });
            }
            let tools = tools
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
                name: server.name.clone(),
                state,
                tools,
                diagnostic: server.diagnostic.clone(),
                connection: ServerItem::connection_line(
                    protocol_version.as_deref(),
                    implementation.as_deref(),
                    timings,
                ),
                protocol_version,
                implementation,
                timings,
            }
        })
        .collect();
    // Withheld tools are not listed, and an empty list is a claim only a completed
    // discovery can make.
    let servers = match state {
        DiscoveryState::Stale => None,
        DiscoveryState::Complete | DiscoveryState::CompleteNoServers => Some(servers),
        DiscoveryState::Pending | DiscoveryState::Unknown if servers.is_empty() => None,
        DiscoveryState::Pending | DiscoveryState::Unknown => Some(servers),
    };

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
        mcp_discovery: DiscoveryWords {
            phase: view.phase(),
            stale: view.is_stale(),
        },
        discovery: Banner::new(state).waiting(
            view.pending_servers()
                .iter()
                .map(|s| WaitingServer::new(&s.name, s.elapsed_ms)),
        ),
        dirty,
        snapshot_error: view.snapshot_error().map(str::to_owned),
        files,
        skills,
        mcp: McpSection { configs, servers },
        issues,
    };
    panel.tone = panel.compute_tone();
    panel
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
        ResourceStatus::Oversize | ResourceStatus::Excluded => Tone::Warning,
        ResourceStatus::Unreadable | ResourceStatus::Invalid => Tone::Error,
    };
    let text = resource.error.clone().unwrap_or_else(|| {
        match resource.status {
            ResourceStatus::Oversize => "too large to include",
            ResourceStatus::Excluded => "excluded: the snapshot reached its size or count limit",
            ResourceStatus::Unreadable => "could not be read",
            ResourceStatus::Invalid => "invalid",
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
