//! The HTML renderer: a panel fragment (swapped in place by the page's script when the
//! chat's context changes) and the full page around it. Every piece of text is escaped.
//! The page carries no inline script or style: both are same-origin files
//! ([`PAGE_SCRIPT`] at [`PAGE_SCRIPT_PATH`], [`PAGE_STYLE`] at [`PAGE_STYLE_PATH`]), so
//! the server's Content-Security-Policy can forbid everything inline.

use std::fmt::Write;

use crate::escape::escape;
use crate::model::*;
use crate::tool_call::{ToolCallItem, render_tool_calls};

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The panel alone: `<section id="context-panel">…</section>`. It carries no clock of its
/// own: the snapshot's time is absolute (`<time datetime>`) and a pending server's wait is
/// in whole seconds (`data-elapsed-s`); the page's script counts both on, so an unchanged
/// panel renders the same HTML and the event stream does not re-send it.
pub fn render_fragment(panel: &Panel) -> String {
    let mut h = String::new();
    let tone = panel.tone.as_str();
    let _ = write!(
        h,
        r#"<section id="context-panel" class="panel tone-{tone}" data-tone="{tone}" data-discovery="{state}" aria-label="Chat context">"#,
        state = discovery_state_name(panel.discovery.state),
    );
    header_facts(&mut h, panel);
    banner(&mut h, &panel.discovery);
    if let Some(dirty) = &panel.dirty {
        let _ = write!(
            h,
            r#"<div class="dirty" role="alert"><span>{}</span> <button type="button" class="refresh" data-method="{}" data-href="{}" aria-label="{}">{}</button></div>"#,
            escape(&dirty.text),
            escape(&dirty.refresh.method),
            escape(&dirty.refresh.href),
            escape(&dirty.refresh.label),
            escape(&dirty.refresh.label),
        );
    }
    if let Some(error) = &panel.snapshot_error {
        let _ = write!(
            h,
            r#"<div class="snapshot-error wrap" role="alert"><strong>Snapshot error:</strong> {}</div>"#,
            escape(error)
        );
    }
    files_section(&mut h, &panel.files);
    skills_section(&mut h, &panel.skills);
    mcp_section(&mut h, panel);
    issues_section(&mut h, &panel.issues);
    h.push_str("</section>");
    h
}

/// The header's facts: the agent's run (short), the snapshot's run when it is an earlier
/// one, when the last snapshot arrived, and the tool counts.
fn header_facts(h: &mut String, panel: &Panel) {
    let header = &panel.header;
    h.push_str(r#"<dl class="facts">"#);
    let run = match (header.agent, &header.run_id, &header.run_id_short) {
        (AgentStatus::Unbound, _, _) => "none: no agent is bound to this chat".to_owned(),
        (AgentStatus::Missing, _, _) => "none: the agent no longer exists".to_owned(),
        (_, Some(full), Some(short)) => format!(
            r#"<code class="run-id" title="{}">{}</code>"#,
            escape(full),
            escape(short)
        ),
        _ => "not reported (an older agent)".to_owned(),
    };
    fact(h, "fact-run", "Agent run", &run);
    if panel.discovery.state == DiscoveryState::Stale
        && let (Some(full), Some(short)) = (&header.snapshot_run_id, &header.snapshot_run_id_short)
        && header.snapshot_run_id != header.run_id
    {
        fact(
            h,
            "fact-snapshot-run",
            "Snapshot from run",
            &format!(
                r#"<code class="run-id" title="{}">{}</code> <span class="badge badge-stale">earlier process</span>"#,
                escape(full),
                escape(short)
            ),
        );
    }
    let when = match (&header.last_snapshot_at, header.agent) {
        (Some(at), _) => Some(format!(
            r#"<time class="relative" datetime="{}" title="{}">{}</time>"#,
            escape(at),
            escape(&crate::builder::human_time(at)),
            escape(&crate::builder::human_time(at))
        )),
        (None, AgentStatus::NoSnapshot) => Some("none yet".to_owned()),
        (None, AgentStatus::Unbound | AgentStatus::Missing) => Some("none".to_owned()),
        (None, AgentStatus::Reported) => None,
    };
    if let Some(when) = when {
        fact(h, "fact-snapshot", "Last snapshot", &when);
    }
    let connection = match (header.connection, &header.offline_since, header.agent) {
        (_, _, AgentStatus::Unbound | AgentStatus::Missing) => None,
        (ConnectionStatus::Online, _, _) => {
            Some(r#"<span class="badge badge-online">online</span>"#.to_owned())
        }
        // The absolute time stays; the page's script counts the relative one on.
        (ConnectionStatus::Offline, Some(since), _) => Some(format!(
            r#"<span class="badge badge-offline">offline</span> since <time datetime="{at}">{human}</time> (<time class="relative" datetime="{at}" title="{human}">{human}</time>)"#,
            at = escape(since),
            human = escape(&crate::builder::human_time(since)),
        )),
        (ConnectionStatus::Offline, None, _) => {
            Some(r#"<span class="badge badge-offline">offline</span>"#.to_owned())
        }
        // A legacy agent reports no run and opens no stream: nothing to wait for.
        (ConnectionStatus::Never, _, _) if header.run_id.is_none() => {
            Some("not reported (an older agent)".to_owned())
        }
        (ConnectionStatus::Never, _, _) => {
            Some("not connected yet (no call stream from this run)".to_owned())
        }
    };
    if let Some(connection) = connection {
        fact(h, "fact-connection", "Agent connection", &connection);
    }
    let tools = match (&panel.mcp.summary, panel.discovery.state) {
        (Some(summary), _) => escape(&summary.text),
        (None, DiscoveryState::Stale) => "withheld".to_owned(),
        (None, _) => "not known yet".to_owned(),
    };
    fact(h, "fact-tools", "MCP tools", &tools);
    h.push_str("</dl>");
}

/// One `<dt>`/`<dd>` pair; `html` is already escaped.
fn fact(h: &mut String, class: &str, label: &str, html: &str) {
    let _ = write!(
        h,
        r#"<div class="fact {class}"><dt>{}</dt><dd>{html}</dd></div>"#,
        escape(label)
    );
}

/// The discovery banner, a polite live region: its sentence with the servers it waits
/// for, then why and what to do when it says so.
fn banner(h: &mut String, banner: &Banner) {
    let _ = write!(
        h,
        r#"<div class="banner banner-{}" role="status" aria-live="polite"><p class="banner-text">{}"#,
        discovery_state_name(banner.state),
        escape(&banner.text)
    );
    waiting_list(h, banner);
    h.push_str("</p>");
    if let Some(note) = &banner.note {
        let _ = write!(h, r#"<p class="banner-note">{}</p>"#, escape(note));
    }
    if let Some(reason) = &banner.reason {
        let _ = write!(
            h,
            r#"<p class="banner-reason"><strong>Why:</strong> {}</p>"#,
            escape(reason)
        );
    }
    if let Some(advice) = &banner.advice {
        let _ = write!(
            h,
            r#"<p class="banner-advice"><strong>What to do:</strong> {}</p>"#,
            escape(advice)
        );
    }
    h.push_str("</div>");
}

/// ` Waiting for: github (4 s), jira (12 s), and 3 more.` inside the banner, when it
/// names servers; each name is an element of its own, for tests and styling. Whole
/// seconds only: the event stream re-sends a panel only when its HTML changes, so a
/// waiting panel updates once per second at most, not on every re-read. The page's
/// script counts each wait on from `data-elapsed-s` between updates.
fn waiting_list(h: &mut String, banner: &Banner) {
    if banner.waiting_for.is_empty() {
        return;
    }
    h.push_str(r#" <span class="waiting">Waiting for: "#);
    for (i, server) in banner.waiting_for.iter().enumerate() {
        if i > 0 {
            h.push_str(", ");
        }
        let _ = write!(
            h,
            r#"<span class="waiting-server"><code>{}</code> (<span class="elapsed" data-elapsed-s="{}">{}</span>)</span>"#,
            escape(&server.name),
            server.elapsed_ms / 1000,
            escape(&server.elapsed)
        );
    }
    if banner.waiting_more > 0 {
        let _ = write!(h, ", and {} more", banner.waiting_more);
    }
    h.push_str(".</span>");
}

fn discovery_state_name(state: DiscoveryState) -> &'static str {
    match state {
        DiscoveryState::Pending => "pending",
        DiscoveryState::Complete => "complete",
        DiscoveryState::CompleteNoServers => "complete-no-servers",
        DiscoveryState::Stale => "stale",
        DiscoveryState::Unknown => "unknown",
    }
}

fn open_section(h: &mut String, id: &str, title: &str) {
    let _ = write!(
        h,
        r#"<details id="{id}" class="section" open><summary><h2>{}</h2></summary>"#,
        escape(title)
    );
}

fn status_badge(h: &mut String, status: &str) {
    if status != "ok" {
        let _ = write!(
            h,
            r#" <span class="badge badge-{0}">{0}</span>"#,
            escape(status)
        );
    }
}

fn files_section(h: &mut String, groups: &[FileGroup]) {
    let count: usize = groups.iter().map(|g| g.files.len()).sum();
    open_section(h, "section-files", &format!("Context files ({count})"));
    if groups.is_empty() {
        h.push_str(r#"<p class="empty">No context files.</p>"#);
    }
    for group in groups {
        let _ = write!(
            h,
            r#"<h3 class="directory">{}</h3><ul aria-label="Files in {}">"#,
            escape(directory_label(&group.directory)),
            escape(directory_label(&group.directory))
        );
        for file in &group.files {
            let _ = write!(
                h,
                r#"<li class="file" title="{}">{} <span class="size">{} B</span>"#,
                escape(&file.source),
                escape(&file.name),
                file.size_bytes
            );
            status_badge(h, &file.status);
            h.push_str("</li>");
        }
        h.push_str("</ul>");
    }
    h.push_str("</details>");
}

/// A directory as the page names it: `.` is the workspace root.
fn directory_label(directory: &str) -> &str {
    if directory == "." {
        "Workspace root"
    } else {
        directory
    }
}

/// `items` grouped by plugin: the workspace's own first (`None`), then each plugin's in
/// order of first appearance, each group keeping the items' order.
pub(crate) fn by_plugin<T>(
    items: &[T],
    plugin: impl Fn(&T) -> Option<&str>,
) -> Vec<(Option<&str>, Vec<&T>)> {
    let mut groups: Vec<(Option<&str>, Vec<&T>)> = vec![(None, Vec::new())];
    for item in items {
        let key = plugin(item);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, group)) => group.push(item),
            None => groups.push((key, vec![item])),
        }
    }
    groups.retain(|(_, group)| !group.is_empty());
    groups
}

/// The heading of one plugin's group of skills or servers.
fn plugin_heading(h: &mut String, plugin: &str) {
    let _ = write!(
        h,
        r#"<h4 class="plugin">Plugin <code>{}</code></h4>"#,
        escape(plugin)
    );
}

fn skills_section(h: &mut String, skills: &[SkillItem]) {
    open_section(h, "section-skills", &format!("Skills ({})", skills.len()));
    if skills.is_empty() {
        h.push_str(r#"<p class="empty">No skills.</p>"#);
    }
    for (plugin, skills) in by_plugin(skills, |s| s.plugin.as_deref()) {
        match plugin {
            None => h.push_str(r#"<ul aria-label="Skills">"#),
            Some(plugin) => {
                plugin_heading(h, plugin);
                let _ = write!(
                    h,
                    r#"<ul aria-label="Skills of plugin {}">"#,
                    escape(plugin)
                );
            }
        }
        for skill in skills {
            let _ = write!(
                h,
                r#"<li class="skill" title="{}"><strong>{}</strong>"#,
                escape(&skill.source),
                escape(&skill.name)
            );
            status_badge(h, &skill.status);
            if !skill.description.is_empty() {
                let _ = write!(
                    h,
                    r#" <span class="description wrap">{}</span>"#,
                    escape(&skill.description)
                );
            }
            h.push_str("</li>");
        }
        h.push_str("</ul>");
    }
    h.push_str("</details>");
}

fn mcp_section(h: &mut String, panel: &Panel) {
    open_section(h, "section-mcp", "MCP");
    h.push_str("<h3>Config files</h3>");
    if panel.mcp.configs.is_empty() {
        h.push_str(r#"<p class="empty">No MCP config files.</p>"#);
    } else {
        h.push_str(r#"<ul aria-label="MCP config files">"#);
        for config in &panel.mcp.configs {
            let _ = write!(
                h,
                r#"<li class="config"><code>{}</code>"#,
                escape(&config.path)
            );
            if !config.ok {
                status_badge(h, "invalid");
            }
            if let Some(diagnostic) = &config.diagnostic {
                let _ = write!(
                    h,
                    r#" <span class="diagnostic wrap">{}</span>"#,
                    escape(diagnostic)
                );
            }
            h.push_str("</li>");
        }
        h.push_str("</ul>");
    }
    h.push_str("<h3>Servers</h3>");
    match &panel.mcp.servers {
        None => {
            let _ = write!(
                h,
                r#"<p class="servers-unavailable">{}</p>"#,
                escape(&panel.discovery.text)
            );
        }
        Some(servers) if servers.is_empty() => {
            h.push_str(if panel.mcp.configs.iter().any(|config| !config.ok) {
                r#"<p class="empty">No MCP servers could be read: an MCP config file has errors.</p>"#
            } else {
                r#"<p class="empty">No MCP servers are declared.</p>"#
            });
        }
        Some(servers) => {
            if panel.header.connection == ConnectionStatus::Offline {
                // The tools stay listed (what the last process reported), marked as not
                // callable now.
                let _ = write!(
                    h,
                    r#"<p class="tools-offline" role="note">{}</p>"#,
                    escape(OFFLINE_TOOLS_NOTE)
                );
            }
            h.push_str(
                r#"<div class="tool-filter" role="search" aria-label="Tools"><label for="tool-filter">Filter tools</label> <input id="tool-filter" type="search" autocomplete="off" spellcheck="false" placeholder="name or description" aria-describedby="tool-filter-count"> <span id="tool-filter-count" class="filter-count" aria-live="polite"></span></div>"#,
            );
            for (plugin, servers) in by_plugin(servers, |s| s.plugin.as_deref()) {
                match plugin {
                    None => h.push_str(r#"<ul class="servers" aria-label="MCP servers">"#),
                    Some(plugin) => {
                        plugin_heading(h, plugin);
                        let _ = write!(
                            h,
                            r#"<ul class="servers" aria-label="MCP servers of plugin {}">"#,
                            escape(plugin)
                        );
                    }
                }
                for server in servers {
                    server_item(h, panel, server);
                }
                h.push_str("</ul>");
            }
            h.push_str(r#"<p class="no-match" hidden>No tool matches the filter.</p>"#);
        }
    }
    h.push_str("</details>");
}

/// One server of the MCP section: its state badge, timing, connection line, diagnostic
/// and tools.
fn server_item(h: &mut String, panel: &Panel, server: &ServerItem) {
    let (class, badge) = match server.state {
        ServerState::Tools => ("tools", plural(server.tools.len(), "tool", "tools")),
        ServerState::NoTools => ("no-tools", "no tools".to_string()),
        ServerState::Failed => ("failed", "failed".to_string()),
        ServerState::NeedsAuthorization => ("needs-authorization", "needs sign-in".to_string()),
    };
    let _ = write!(
        h,
        r#"<li class="server server-{class}"><strong class="server-name">{}</strong> <span class="badge badge-{class}">{badge}</span>"#,
        escape(&server.name)
    );
    if panel.header.connection == ConnectionStatus::Offline && server.state == ServerState::Tools {
        h.push_str(r#" <span class="badge badge-offline">not callable: agent offline</span>"#);
    }
    if let Some(total) = server.total_ms {
        let _ = write!(h, r#" <span class="timing">ready in {total} ms</span>"#);
    }
    if let Some(connection) = &server.connection {
        let _ = write!(
            h,
            r#" <span class="connection">{}</span>"#,
            escape(connection)
        );
    }
    if let Some(signed_in) = &server.signed_in {
        let _ = write!(
            h,
            r#" <span class="signed-in">{}</span>"#,
            escape(signed_in)
        );
    }
    if let Some(diagnostic) = &server.diagnostic {
        let _ = write!(
            h,
            r#" <span class="diagnostic wrap">{}</span>"#,
            escape(diagnostic)
        );
    }
    if server.state == ServerState::NeedsAuthorization {
        // The page's script starts the sign-in (the agent's id is on the panel's root)
        // and sends the browser to the authorization server.
        let name = escape(&server.name);
        let _ = write!(
            h,
            r#" <button type="button" class="sign-in" data-server="{name}" aria-label="Sign in to {name}">Sign in</button><span class="sign-in-status" role="status"></span>"#
        );
    }
    if !server.tools.is_empty() {
        let _ = write!(
            h,
            r#"<ul class="tools" aria-label="Tools of {}">"#,
            escape(&server.name)
        );
        for tool in &server.tools {
            tool_entry(h, tool);
        }
        h.push_str("</ul>");
    }
    h.push_str("</li>");
}

/// One tool: its name, its title when set, its hint badges (each saying it is the
/// server's unverified hint), its description.
fn tool_entry(h: &mut String, tool: &ToolItem) {
    let _ = write!(
        h,
        r#"<li class="tool"><code class="tool-name">{}</code>"#,
        escape(&tool.name)
    );
    if let Some(title) = &tool.title {
        let _ = write!(
            h,
            r#" <span class="tool-title wrap">{}</span>"#,
            escape(title)
        );
    }
    if !tool.hints.is_empty() {
        h.push_str(
            r#" <span class="hints" role="list" aria-label="Hints from the server, not verified">"#,
        );
        for hint in &tool.hints {
            let description = escape(&hint.description());
            let _ = write!(
                h,
                r#"<span class="badge badge-hint hint-{}" role="listitem" title="{description}" aria-label="{description}">{}</span>"#,
                hint.class(),
                escape(hint.label())
            );
        }
        h.push_str("</span>");
    }
    let _ = write!(
        h,
        r#" <span class="description wrap">{}</span></li>"#,
        escape(&tool.description)
    );
}

fn issues_section(h: &mut String, issues: &[IssueItem]) {
    open_section(h, "section-issues", &format!("Issues ({})", issues.len()));
    if issues.is_empty() {
        h.push_str(r#"<p class="empty">No issues.</p>"#);
    } else {
        h.push_str(r#"<ul aria-label="Issues">"#);
        for issue in issues {
            let _ = write!(
                h,
                r#"<li class="issue issue-{}"><span class="kind">{}</span> <code>{}</code>: <span class="issue-text wrap">{}</span></li>"#,
                issue.severity.as_str(),
                escape(issue.kind.label()),
                escape(&issue.source),
                escape(&issue.text)
            );
        }
        h.push_str("</ul>");
    }
    h.push_str("</details>");
}

/// Where the server serves [`PAGE_STYLE`] (`text/css`).
pub const PAGE_STYLE_PATH: &str = "/static/page.css";
/// Where the server serves [`PAGE_SCRIPT`] (`text/javascript`).
pub const PAGE_SCRIPT_PATH: &str = "/static/page.js";

/// The page's stylesheet. Text colours keep a contrast of at least 4.5:1 on their
/// backgrounds (WCAG AA).
pub const PAGE_STYLE: &str = r#"
* { box-sizing: border-box; }
[hidden] { display: none !important; }
body { font-family: system-ui, sans-serif; line-height: 1.45; margin: 0 auto; max-width: 60rem; padding: 1rem; color: #1d1d1f; background: #fff; }
.page-header { display: flex; flex-wrap: wrap; align-items: baseline; gap: 0.25rem 1rem; margin-bottom: 0.75rem; }
.page-header h1 { font-size: 1.5rem; margin: 0; }
.page-sub { margin: 0; color: #444; }
.agent-name { color: #1d1d1f; font-size: 1.1rem; }
.panel { border: 2px solid #767676; border-radius: 8px; padding: 0.75rem 1rem; }
.panel.tone-ok { border-color: #2f8f46; } .panel.tone-warning { border-color: #b7791f; } .panel.tone-error { border-color: #c53030; }
.facts { display: flex; flex-wrap: wrap; gap: 0.25rem 2rem; margin: 0 0 0.75rem; }
.fact dt { font-size: 0.75rem; text-transform: uppercase; letter-spacing: 0.04em; color: #555; }
.fact dd { margin: 0; font-weight: 600; }
.banner { padding: 0.5rem 0.75rem; border-radius: 4px; background: #f1f1f1; border-left: 6px solid #767676; }
.banner p { margin: 0.15rem 0; }
.banner-text { font-weight: 600; }
.banner-note { color: #9b1c1c; }
.banner-pending, .banner-unknown { background: #fff4d6; border-left-color: #b7791f; }
.banner-stale { background: #ffe8d6; border-left-color: #c05621; }
.banner-complete, .banner-complete-no-servers { background: #e3f5e8; border-left-color: #2f8f46; }
.dirty, .snapshot-error { margin-top: 0.5rem; padding: 0.5rem; background: #fde8e8; border-radius: 4px; }
summary h2 { display: inline; font-size: 1.1rem; }
.section { margin-top: 0.75rem; }
.section h3 { font-size: 1rem; margin: 0.5rem 0 0.25rem; }
.badge { font-size: 0.8rem; padding: 0 0.4rem; border-radius: 999px; background: #e2e2e2; white-space: nowrap; }
.badge-failed, .badge-invalid, .badge-unreadable { background: #fbd5d5; } .badge-no-tools { background: #e8eefc; } .badge-needs-authorization { background: #fdecc8; }
.sign-in { font: inherit; margin-left: 0.25rem; } .sign-in-status { margin-left: 0.5rem; color: #8a4b00; }
.badge-tools { background: #e3f5e8; } .badge-stale { background: #ffe8d6; font-weight: normal; }
.badge-online { background: #e3f5e8; } .badge-offline { background: #fbd5d5; } .tools-offline { color: #8a1c1c; }
.issue-error .kind { color: #b42318; font-weight: 600; } .issue-warning .kind { color: #8a4b00; font-weight: 600; }
.wrap { white-space: pre-wrap; overflow-wrap: anywhere; word-break: break-word; }
code { overflow-wrap: anywhere; }
.link-form button { font: inherit; padding: 0.5rem 1rem; }
.reconnecting { padding: 0.5rem; background: #fff4d6; border-radius: 4px; }
.waiting { font-weight: normal; }
.servers { list-style: none; padding: 0; margin: 0; }
.server { border-top: 1px solid #ddd; padding: 0.5rem 0; }
.server-name { font-size: 1.05rem; }
h4.plugin { margin: 0.8rem 0 0.2rem; font-size: 0.95rem; }
.connection, .timing { font-size: 0.8rem; color: #555; }
.connection, .server .diagnostic { display: block; }
.server-failed .diagnostic { color: #9b1c1c; }
.tools { margin: 0.35rem 0 0; padding-left: 1.25rem; }
.tool { margin: 0.2rem 0; }
.tool-name { font-weight: 600; }
.tool-title { font-style: italic; } .description { color: #444; }
.badge-hint { border: 1px dashed #767676; margin-left: 0.2rem; } .hint-read-only { background: #e3f5e8; }
.hint-destructive { background: #fbd5d5; } .hint-open-world { background: #e8eefc; }
.tool-filter { display: flex; flex-wrap: wrap; align-items: center; gap: 0.5rem; margin: 0.25rem 0 0.5rem; }
.tool-filter label { font-weight: 600; }
.tool-filter input { font: inherit; padding: 0.25rem 0.5rem; border: 1px solid #767676; border-radius: 4px; min-width: 16rem; }
.tool-filter input::placeholder { color: #595959; }
.filter-count { color: #555; font-size: 0.9rem; }
.no-match { color: #444; font-style: italic; }
.calls-panel { margin-top: 1rem; border: 2px solid #767676; border-radius: 8px; padding: 0.75rem 1rem; }
.calls-panel h2 { font-size: 1.1rem; margin: 0; }
.calls-note { margin: 0.15rem 0 0.5rem; color: #444; font-size: 0.9rem; }
.calls { list-style: none; padding: 0; margin: 0; }
.call { display: flex; flex-wrap: wrap; align-items: center; gap: 0.25rem 0.6rem; border-top: 1px solid #ddd; padding: 0.4rem 0; }
.call-name { font-weight: 600; }
.call-duration, .call-id, .progress-text { font-size: 0.85rem; color: #555; }
.call-progress { width: 10rem; max-width: 100%; }
.status-running { background: #e8eefc; } .status-complete { background: #e3f5e8; }
.status-error, .status-timed_out, .status-unknown { background: #fbd5d5; }
.status-refused, .status-canceled { background: #ffe8d6; } .call-truncated { background: #fff4d6; }
.visually-hidden { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
"#;

/// The page's script: follows the chat's server-sent events, runs the refresh action,
/// counts the snapshot's age and the pending servers' waits on every second, and filters
/// the tool list by what the person types.
///
/// When the event stream fails — its replica went away, or a reconnect was answered with
/// an HTTP error, after which an `EventSource` gives up for good — the script closes it,
/// shows a "reconnecting" notice and opens a new one after a backoff (0.5 s doubling to
/// 10 s, back to 0.5 s once a stream opens). A new stream starts with the current panel,
/// so nothing that changed while disconnected is missed.
///
/// A new panel replaces the old one in place: open sections stay open, and the filter
/// keeps its text (and focus) and is applied to the new tool list at once.
///
/// Each `tool_call` event updates its call's row in the "Tool calls" list (or adds it on
/// top), and a polite status line announces a call that starts or ends.
pub const PAGE_SCRIPT: &str = r#"
(function () {
  const root = document.getElementById('panel-root');
  if (!root) return;
  const chat = root.dataset.chat;
  const FIRST_RETRY_MS = 500;
  const MAX_RETRY_MS = 10000;
  // When the panel on show arrived: the pending servers' waits count on from here.
  let shownAt = Date.now();
  // What the person typed into the tool filter; outlives every panel swap.
  let filterText = '';
  function openSections() {
    return new Set(Array.from(root.querySelectorAll('details[open]')).map(d => d.id));
  }
  function swap(html, open) {
    const old = root.querySelector('#tool-filter');
    const focused = old !== null && document.activeElement === old;
    const start = focused ? old.selectionStart : null;
    const end = focused ? old.selectionEnd : null;
    root.innerHTML = html;
    shownAt = Date.now();
    root.querySelectorAll('details').forEach(d => { d.open = open.has(d.id); });
    const input = root.querySelector('#tool-filter');
    if (input) {
      input.value = filterText;
      if (focused) {
        input.focus();
        try { input.setSelectionRange(start, end); } catch (e) { /* not a text field */ }
      }
    }
    applyFilter();
    tick();
  }
  function text(element, selector) {
    const found = element.querySelector(selector);
    return found ? found.textContent : '';
  }
  // Shows the tools whose name, title or description holds the filter text (any case),
  // and the servers with at least one of them; everything when the filter is empty.
  function applyFilter() {
    const query = filterText.trim().toLowerCase();
    let shown = 0;
    let total = 0;
    root.querySelectorAll('li.server').forEach(server => {
      let matches = 0;
      server.querySelectorAll('li.tool').forEach(tool => {
        total += 1;
        const haystack = [text(tool, '.tool-name'), text(tool, '.tool-title'), text(tool, '.description')]
          .join(' ').toLowerCase();
        const hit = query === '' || haystack.includes(query);
        tool.hidden = !hit;
        if (hit) { matches += 1; shown += 1; }
      });
      server.hidden = query !== '' && matches === 0;
    });
    const count = root.querySelector('#tool-filter-count');
    if (count) {
      count.textContent = query === '' ? '' :
        shown + ' of ' + total + (total === 1 ? ' tool matches' : ' tools match');
    }
    const none = root.querySelector('.no-match');
    if (none) none.hidden = query === '' || shown > 0;
  }
  function ago(seconds) {
    if (seconds < 1) return 'just now';
    if (seconds < 60) return seconds + ' s ago';
    if (seconds < 3600) return Math.floor(seconds / 60) + ' min ago';
    if (seconds < 86400) return Math.floor(seconds / 3600) + ' h ago';
    return Math.floor(seconds / 86400) + ' d ago';
  }
  // Every second: the snapshot's age from its absolute time, and each pending server's
  // wait from the whole seconds the panel carried when it arrived.
  function tick() {
    const now = Date.now();
    root.querySelectorAll('time.relative[datetime]').forEach(time => {
      const at = Date.parse(time.getAttribute('datetime'));
      if (!isNaN(at)) time.textContent = ago(Math.floor((now - at) / 1000));
    });
    const since = Math.max(0, Math.floor((now - shownAt) / 1000));
    root.querySelectorAll('.elapsed[data-elapsed-s]').forEach(span => {
      const seconds = Number(span.dataset.elapsedS) + since;
      span.textContent = seconds < 1 ? '<1 s' : seconds + ' s';
    });
  }
  root.addEventListener('input', function (event) {
    if (event.target.id !== 'tool-filter') return;
    filterText = event.target.value;
    applyFilter();
  });
  // A server that needs a person: the chat's page session asks for the authorization
  // URL, and the browser goes there (the authorization server sends it back to the
  // server's callback, which says whether it worked).
  root.addEventListener('click', function (event) {
    const button = event.target.closest('button.sign-in');
    if (!button) return;
    const status = button.nextElementSibling;
    const say = function (words) { if (status) status.textContent = words; };
    const agent = root.dataset.agent;
    if (!agent) { say('This page does not know the chat\'s agent; reload it.'); return; }
    button.disabled = true;
    say('Starting the sign-in…');
    const url = '/api/agents/' + encodeURIComponent(agent) + '/mcp-servers/' +
      encodeURIComponent(button.dataset.server) + '/authorization';
    fetch(url, { method: 'POST', credentials: 'same-origin' })
      .then(function (response) {
        return response.json().then(function (body) { return { ok: response.ok, body: body }; });
      })
      .then(function (answer) {
        if (answer.ok && answer.body.authorization_url) {
          say('Opening the sign-in page…');
          window.location.assign(answer.body.authorization_url);
        } else {
          say(answer.body.error || 'The sign-in could not start.');
          button.disabled = false;
        }
      }, function () {
        say('The sign-in could not start: the server did not answer.');
        button.disabled = false;
      });
  });
  root.addEventListener('click', function (event) {
    const button = event.target.closest('button.refresh');
    if (!button) return;
    // The new panel arrives through the event stream; a failed refresh can be retried.
    button.disabled = true;
    const retry = function () { button.disabled = false; };
    fetch(button.dataset.href, { method: button.dataset.method, credentials: 'same-origin' })
      .then(function (response) { if (!response.ok) retry(); }, retry);
  });
  // The chat's recent tool calls: outside the panel root, so a panel swap keeps them.
  // Rows are built with the same elements the server writes (`call_row`), from the
  // `tool_call` events' data, and always as text: a name is never markup.
  const calls = document.getElementById('tool-call-list');
  const callsEmpty = document.getElementById('calls-empty');
  const callsLive = document.getElementById('calls-live');
  const MAX_CALLS = calls ? Number(calls.dataset.max) || 20 : 0;
  const STATUS_WORDS = { timed_out: 'timed out', unknown: 'outcome unknown' };
  function statusLabel(status) { return STATUS_WORDS[status] || status; }
  // Integer arithmetic, as the server's `duration_text`, so both write the same.
  function durationText(ms) {
    if (ms < 1000) return ms + ' ms';
    if (ms < 60000) {
      const tenths = Math.floor((ms + 50) / 100);
      return Math.floor(tenths / 10) + '.' + (tenths % 10) + ' s';
    }
    return Math.floor(ms / 60000) + ' min ' + Math.floor((ms % 60000) / 1000) + ' s';
  }
  function progressText(progress) {
    if (!progress) return 'working';
    if (progress.total !== null && progress.total !== undefined) {
      return progress.progress + ' of ' + progress.total;
    }
    return progress.progress + ' so far';
  }
  function element(tag, className, content) {
    const made = document.createElement(tag);
    made.className = className;
    if (content !== undefined) made.textContent = content;
    return made;
  }
  function renderCall(call) {
    const row = element('li', 'call');
    row.dataset.key = call.turn + '/' + call.id;
    row.dataset.status = call.status;
    const parts = [element('code', 'call-name', call.name),
      element('span', 'badge call-status status-' + call.status, statusLabel(call.status))];
    if (call.duration_ms !== null && call.duration_ms !== undefined) {
      parts.push(element('span', 'call-duration', durationText(call.duration_ms)));
    }
    if (call.truncated) {
      const marker = element('span', 'badge call-truncated', 'truncated');
      marker.title = "The result was cut to fit the agent's cap";
      parts.push(marker);
    }
    if (call.status === 'running') {
      const bar = element('progress', 'call-progress');
      bar.setAttribute('aria-label', 'Progress of ' + call.name);
      const p = call.progress;
      if (p && typeof p.total === 'number' && p.total > 0) {
        bar.setAttribute('max', String(p.total));
        bar.setAttribute('value', String(p.progress));
      }
      parts.push(bar, element('span', 'progress-text', progressText(p)));
    }
    parts.push(element('span', 'call-id', 'call ' + call.id));
    parts.forEach(function (part, i) {
      if (i > 0) row.appendChild(document.createTextNode(' '));
      row.appendChild(part);
    });
    return row;
  }
  function showCall(call) {
    if (!calls) return;
    const row = renderCall(call);
    const old = Array.from(calls.children).find(li => li.dataset.key === row.dataset.key);
    const changed = !old || old.dataset.status !== call.status;
    if (old) {
      calls.replaceChild(row, old);
    } else {
      // A call not listed yet is the newest: a new stream sends its calls oldest first.
      calls.insertBefore(row, calls.firstChild);
    }
    while (calls.children.length > MAX_CALLS) calls.removeChild(calls.lastChild);
    callsEmpty.hidden = calls.children.length > 0;
    if (changed) {
      const duration = call.duration_ms === null || call.duration_ms === undefined ? ''
        : ' in ' + durationText(call.duration_ms);
      callsLive.textContent = 'Tool call ' + call.name + ': ' + statusLabel(call.status) + duration + '.';
    }
  }
  // Outside the panel root, so a swapped-in panel never removes it.
  const notice = document.createElement('p');
  notice.className = 'reconnecting';
  notice.setAttribute('role', 'status');
  notice.textContent = 'Live updates interrupted. Reconnecting\u2026';
  notice.hidden = true;
  root.parentNode.insertBefore(notice, root);
  const url = '/api/chats/' + encodeURIComponent(chat) + '/context/events';
  let retryMs = FIRST_RETRY_MS;
  let events = null;
  function connect() {
    const stream = new EventSource(url);
    events = stream;
    stream.addEventListener('open', function () {
      retryMs = FIRST_RETRY_MS;
      notice.hidden = true;
    });
    stream.addEventListener('panel', function (event) {
      const data = JSON.parse(event.data);
      swap(data.html, openSections());
    });
    stream.addEventListener('tool_call', function (event) {
      showCall(JSON.parse(event.data));
    });
    stream.addEventListener('error', function () {
      if (stream !== events) return;
      // One way back for every failure: the browser's own retry stops at an HTTP error
      // and ignores this backoff.
      stream.close();
      events = null;
      notice.hidden = false;
      setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, MAX_RETRY_MS);
    });
  }
  tick();
  setInterval(tick, 1000);
  connect();
})();
"#;

/// The whole page for a person's browser ([`render_page_for`] without an agent name).
pub fn render_page(panel: &Panel) -> String {
    render_page_for(panel, None)
}

/// The whole page for a person's browser: a header naming the chat's agent (when the
/// caller knows its name), then the panel. Its script ([`PAGE_SCRIPT`]) keeps the panel
/// current from the chat's server-sent events, keeping open sections open and the tool
/// filter applied. Its calls list starts empty: [`render_page_with_calls`] fills it.
pub fn render_page_for(panel: &Panel, agent_name: Option<&str>) -> String {
    page_html(panel, agent_name, None, &[])
}

/// The chat's agent as its page names it.
#[derive(Clone, Copy, Debug)]
pub struct PageAgent<'a> {
    /// The agent's id: the page's sign-in requests name it.
    pub id: &'a str,
    /// The agent's name, in the page's header.
    pub name: &'a str,
}

/// [`render_page_for`] with the chat's recent tool calls (newest first) listed under the
/// panel ([`render_tool_calls`]); the stream's `tool_call` events keep the list current.
/// With the agent's id the page's **Sign in** buttons work.
pub fn render_page_with_calls(
    panel: &Panel,
    agent: Option<PageAgent<'_>>,
    calls: &[ToolCallItem],
) -> String {
    page_html(panel, agent.map(|a| a.name), agent.map(|a| a.id), calls)
}

fn page_html(
    panel: &Panel,
    agent_name: Option<&str>,
    agent_id: Option<&str>,
    calls: &[ToolCallItem],
) -> String {
    let chat = escape(&panel.chat_id);
    let (title, sub) = match agent_name {
        Some(name) => (
            format!("{} · chat context · ctxsync", escape(name)),
            format!(
                r#"Agent <strong class="agent-name">{}</strong> · chat <code>{chat}</code>"#,
                escape(name)
            ),
        ),
        None => (
            format!("chat {chat} · ctxsync"),
            format!("Chat <code>{chat}</code>"),
        ),
    };
    let shell = PageShell {
        title: &title,
        sub: Some(&sub),
        script: true,
    };
    let agent = agent_id
        .map(|id| format!(" data-agent=\"{}\"", escape(id)))
        .unwrap_or_default();
    shell.render(&format!(
        "<div id=\"panel-root\" data-chat=\"{chat}\"{agent}>{}</div>\n{}",
        render_fragment(panel),
        render_tool_calls(calls)
    ))
}

/// The document around every page the server shows a browser (the chat's page, its
/// one-time link page, its error pages): the head with [`PAGE_STYLE`] (and, when asked,
/// [`PAGE_SCRIPT`]), the page header, then the page's own `<main>` content.
#[derive(Clone, Copy, Debug)]
pub struct PageShell<'a> {
    /// The document's title, already escaped.
    pub title: &'a str,
    /// The line under the heading, already HTML; none when `None`.
    pub sub: Option<&'a str>,
    /// Whether the page loads [`PAGE_SCRIPT`].
    pub script: bool,
}

impl PageShell<'_> {
    /// The whole document with `main` (already HTML) inside `<main>`.
    pub fn render(&self, main: &str) -> String {
        let title = self.title;
        let script = if self.script {
            format!("<script src=\"{PAGE_SCRIPT_PATH}\" defer></script>\n")
        } else {
            String::new()
        };
        let sub = match self.sub {
            Some(sub) => format!("<p class=\"page-sub\">{sub}</p>\n"),
            None => String::new(),
        };
        format!(
            r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<link rel="stylesheet" href="{PAGE_STYLE_PATH}">
{script}</head>
<body>
<header class="page-header">
<h1>Chat context</h1>
{sub}</header>
<main>
{main}
</main>
</body>
</html>
"#
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shell_lays_out_every_page_alike() {
        let bare = PageShell {
            title: "ctxsync · chat context",
            sub: None,
            script: false,
        };
        assert_eq!(
            bare.render("<p>Hi.</p>"),
            r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ctxsync · chat context</title>
<link rel="stylesheet" href="/static/page.css">
</head>
<body>
<header class="page-header">
<h1>Chat context</h1>
</header>
<main>
<p>Hi.</p>
</main>
</body>
</html>
"#
        );
        let full = PageShell {
            title: "t",
            sub: Some("Chat <code>c</code>"),
            script: true,
        };
        let page = full.render("<div></div>");
        assert!(
            page.contains(
                "<link rel=\"stylesheet\" href=\"/static/page.css\">\n\
                 <script src=\"/static/page.js\" defer></script>\n</head>"
            ),
            "{page}"
        );
        assert!(
            page.contains(
                "<h1>Chat context</h1>\n<p class=\"page-sub\">Chat <code>c</code></p>\n</header>"
            ),
            "{page}"
        );
    }
}
