//! The plain-text renderer for terminals (`ctxsync context`, the demo).

use std::fmt::Write;

use crate::model::*;

/// Terminal width the renderer wraps long diagnostics to.
const WIDTH: usize = 100;

/// Wraps `text` to [`WIDTH`] with every line indented by `indent` spaces.
fn wrapped(out: &mut String, indent: usize, text: &str) {
    let pad = " ".repeat(indent);
    let room = WIDTH.saturating_sub(indent).max(20);
    for paragraph in text.lines() {
        let mut line = String::new();
        for word in paragraph.split_whitespace() {
            let mut word = word;
            // A word longer than the line (a URL, a path) is broken, never left to overflow.
            while word.chars().count() > room {
                if !line.is_empty() {
                    let _ = writeln!(out, "{pad}{line}");
                    line.clear();
                }
                let split = word.char_indices().nth(room).map_or(word.len(), |(i, _)| i);
                let _ = writeln!(out, "{pad}{}", &word[..split]);
                word = &word[split..];
            }
            if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > room {
                let _ = writeln!(out, "{pad}{line}");
                line.clear();
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        if !line.is_empty() {
            let _ = writeln!(out, "{pad}{line}");
        }
    }
}

/// The header, the MCP summary, the discovery banner, the dirty notice and the snapshot
/// error.
fn write_discovery(t: &mut String, panel: &Panel) {
    wrapped(t, 0, &panel.header.text);
    if panel.discovery.state == DiscoveryState::Stale
        && let Some(old) = &panel.header.snapshot_run_id_short
        && panel.header.snapshot_run_id != panel.header.run_id
    {
        let _ = writeln!(t, "Snapshot from run {old} (an earlier process)");
    }
    if let Some(summary) = &panel.mcp.summary {
        wrapped(t, 0, &format!("MCP tools: {}", summary.text));
    }
    wrapped(t, 0, &panel.discovery.text);
    if let Some(waiting) = panel.discovery.waiting_text() {
        wrapped(t, 2, &waiting);
    }
    if let Some(note) = &panel.discovery.note {
        wrapped(t, 2, note);
    }
    if let Some(reason) = &panel.discovery.reason {
        wrapped(t, 2, &format!("Why: {reason}"));
    }
    if let Some(advice) = &panel.discovery.advice {
        wrapped(t, 2, &format!("What to do: {advice}"));
    }
    if let Some(dirty) = &panel.dirty {
        wrapped(t, 0, &format!("! {}", dirty.text));
        let _ = writeln!(
            t,
            "  {}: {} {}",
            dirty.refresh.label, dirty.refresh.method, dirty.refresh.href
        );
    }
    if let Some(error) = &panel.snapshot_error {
        wrapped(t, 0, &format!("! Snapshot error: {error}"));
    }
}

/// The MCP servers, grouped by plugin, each with its tools.
fn write_servers(t: &mut String, mcp: &McpSection) {
    match mcp.servers.as_deref() {
        None => {
            let _ = writeln!(t, "\nMCP servers: not available yet");
        }
        Some([]) => {
            let _ = writeln!(t, "\nMCP servers: {}", mcp.no_servers_text());
        }
        Some(servers) => {
            let _ = writeln!(t, "\nMCP servers ({})", servers.len());
            for (plugin, servers) in crate::html::by_plugin(servers, |s| s.plugin.as_deref()) {
                let base = match plugin {
                    Some(plugin) => {
                        let _ = writeln!(t, "  Plugin {plugin}:");
                        4
                    }
                    None => 2,
                };
                for server in servers {
                    let state = match server.state {
                        ServerState::Tools => format!(
                            "{} tool{}",
                            server.tools.len(),
                            if server.tools.len() == 1 { "" } else { "s" }
                        ),
                        ServerState::NoTools => "no tools".into(),
                        ServerState::Failed => "failed".into(),
                        ServerState::NeedsAuthorization => "needs sign-in".into(),
                    };
                    let line = match &server.diagnostic {
                        Some(d) => format!("{} [{state}]: {d}", server.name),
                        None => format!("{} [{state}]", server.name),
                    };
                    wrapped(t, base, &line);
                    if let Some(connection) = &server.connection {
                        wrapped(t, base + 2, connection);
                    }
                    if let Some(signed_in) = &server.signed_in {
                        wrapped(t, base + 2, signed_in);
                    }
                    for tool in &server.tools {
                        let mut line = tool.name.clone();
                        if let Some(title) = &tool.title {
                            let _ = write!(line, " “{title}”");
                        }
                        if !tool.hints.is_empty() {
                            let hints: Vec<&str> = tool.hints.iter().map(|h| h.label()).collect();
                            let _ = write!(line, " [server hints: {}]", hints.join(", "));
                        }
                        let _ = write!(line, " — {}", tool.description);
                        wrapped(t, base + 4, &line);
                    }
                }
            }
        }
    }
}

/// The panel as plain text for a terminal, long lines wrapped.
pub fn render_text(panel: &Panel) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "Chat {} context [{}]",
        panel.chat_id,
        panel.tone.as_str()
    );
    write_discovery(&mut t, panel);

    let files: usize = panel.files.iter().map(|g| g.files.len()).sum();
    let _ = writeln!(t, "\nContext files ({files})");
    for group in &panel.files {
        let _ = writeln!(t, "  {}/", group.directory);
        for file in &group.files {
            let _ = writeln!(
                t,
                "    {} ({} B){}",
                file.name,
                file.size_bytes,
                status_suffix(&file.status)
            );
        }
    }

    let _ = writeln!(t, "\nSkills ({})", panel.skills.len());
    for (plugin, skills) in crate::html::by_plugin(&panel.skills, |s| s.plugin.as_deref()) {
        let indent = match plugin {
            Some(plugin) => {
                let _ = writeln!(t, "  Plugin {plugin}:");
                4
            }
            None => 2,
        };
        for skill in skills {
            let line = if skill.description.is_empty() {
                format!("{}{}", skill.name, status_suffix(&skill.status))
            } else {
                format!(
                    "{}{} — {}",
                    skill.name,
                    status_suffix(&skill.status),
                    skill.description
                )
            };
            wrapped(&mut t, indent, &line);
        }
    }

    let _ = writeln!(t, "\nMCP config files ({})", panel.mcp.configs.len());
    for config in &panel.mcp.configs {
        let state = if config.ok { "ok" } else { "invalid" };
        let line = match &config.diagnostic {
            Some(d) => format!("{} [{state}]: {d}", config.path),
            None => format!("{} [{state}]", config.path),
        };
        wrapped(&mut t, 2, &line);
    }

    write_servers(&mut t, &panel.mcp);
    if panel.header.connection == ConnectionStatus::Offline
        && panel.mcp.servers.as_ref().is_some_and(|s| !s.is_empty())
    {
        wrapped(&mut t, 2, &format!("! {OFFLINE_TOOLS_NOTE}"));
    }
    let _ = writeln!(t, "\nIssues ({})", panel.issues.len());
    for issue in &panel.issues {
        wrapped(
            &mut t,
            2,
            &format!(
                "[{}] {} {}: {}",
                issue.severity.as_str(),
                issue.kind.label(),
                issue.source,
                issue.text
            ),
        );
    }
    t
}

fn status_suffix(status: &str) -> String {
    if status == "ok" {
        String::new()
    } else {
        format!(" [{status}]")
    }
}
