//! The HTML renderer: a panel fragment (swapped in place by the page's script when the
//! chat's context changes) and the full page around it. Every piece of text is escaped.
//! The page carries no inline script or style: both are same-origin files
//! ([`PAGE_SCRIPT`] at [`PAGE_SCRIPT_PATH`], [`PAGE_STYLE`] at [`PAGE_STYLE_PATH`]), so
//! the server's Content-Security-Policy can forbid everything inline.

use std::fmt::Write;

use crate::model::*;

/// Escapes text for element content and double-quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The panel alone: `<section id="context-panel">…</section>`.
pub fn render_fragment(panel: &Panel) -> String {
    let mut h = String::new();
    let tone = panel.tone.as_str();
    let _ = write!(
        h,
        r#"<section id="context-panel" class="panel tone-{tone}" data-tone="{tone}" data-discovery="{state}" aria-label="Chat context">"#,
        state = discovery_state_name(panel.discovery.state),
    );
    let _ = write!(
        h,
        r#"<div class="banner banner-{}" role="status" aria-live="polite">{}"#,
        discovery_state_name(panel.discovery.state),
        escape(&panel.discovery.text)
    );
    waiting_list(&mut h, &panel.discovery);
    h.push_str("</div>");
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

/// ` Waiting for: github (4 s), jira (12 s), and 3 more.` inside the banner, when it
/// names servers; each name is an element of its own, for tests and styling. Whole
/// seconds only: the event stream re-sends a panel only when its HTML changes, so a
/// waiting panel updates once per second at most, not on every re-read.
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
            r#"<span class="waiting-server"><code>{}</code> ({})</span>"#,
            escape(&server.name),
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
            escape(&group.directory),
            escape(&group.directory)
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

fn skills_section(h: &mut String, skills: &[SkillItem]) {
    open_section(h, "section-skills", &format!("Skills ({})", skills.len()));
    if skills.is_empty() {
        h.push_str(r#"<p class="empty">No skills.</p>"#);
    } else {
        h.push_str(r#"<ul aria-label="Skills">"#);
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
            h.push_str(r#"<p class="empty">No MCP servers are declared.</p>"#);
        }
        Some(servers) => {
            h.push_str(r#"<ul aria-label="MCP servers">"#);
            for server in servers {
                let (class, badge) = match server.state {
                    ServerState::Tools => ("tools", plural(server.tools.len(), "tool", "tools")),
                    ServerState::NoTools => ("no-tools", "no tools".to_string()),
                    ServerState::Failed => ("failed", "failed".to_string()),
                };
                let _ = write!(
                    h,
                    r#"<li class="server server-{class}"><strong>{}</strong> <span class="badge badge-{class}">{badge}</span>"#,
                    escape(&server.name)
                );
                if let Some(connection) = &server.connection {
                    let _ = write!(
                        h,
                        r#" <span class="connection" aria-label="Connection of {}: {}">{}</span>"#,
                        escape(&server.name),
                        escape(connection),
                        escape(connection)
                    );
                }
                if let Some(diagnostic) = &server.diagnostic {
                    let _ = write!(
                        h,
                        r#" <span class="diagnostic wrap">{}</span>"#,
                        escape(diagnostic)
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
            h.push_str("</ul>");
        }
    }
    h.push_str("</details>");
}

/// One tool: its name, its title when set, its hint badges (each saying it is the
/// server's unverified hint), its description.
fn tool_entry(h: &mut String, tool: &ToolItem) {
    let _ = write!(h, r#"<li class="tool"><code>{}</code>"#, escape(&tool.name));
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

/// The page's stylesheet.
pub const PAGE_STYLE: &str = r#"
body { font-family: system-ui, sans-serif; margin: 0 auto; max-width: 56rem; padding: 1rem; color: #1d1d1f; }
.panel { border: 2px solid #8a8a8a; border-radius: 8px; padding: 0.75rem 1rem; }
.panel.tone-ok { border-color: #2f8f46; } .panel.tone-warning { border-color: #b7791f; } .panel.tone-error { border-color: #c53030; }
.banner { font-weight: 600; padding: 0.5rem; border-radius: 4px; background: #f1f1f1; }
.banner-pending, .banner-stale, .banner-unknown { background: #fff4d6; } .banner-complete, .banner-complete-no-servers { background: #e3f5e8; }
.dirty, .snapshot-error { margin-top: 0.5rem; padding: 0.5rem; background: #fde8e8; border-radius: 4px; }
summary h2 { display: inline; font-size: 1.1rem; }
.section { margin-top: 0.75rem; }
.badge { font-size: 0.8rem; padding: 0 0.4rem; border-radius: 999px; background: #e2e2e2; }
.badge-failed, .badge-invalid, .badge-unreadable { background: #fbd5d5; } .badge-no-tools { background: #e8eefc; }
.issue-error .kind { color: #c53030; font-weight: 600; } .issue-warning .kind { color: #b7791f; font-weight: 600; }
.wrap { white-space: pre-wrap; overflow-wrap: anywhere; word-break: break-word; }
code { overflow-wrap: anywhere; }
.link-form button { font: inherit; padding: 0.5rem 1rem; }
.reconnecting { padding: 0.5rem; background: #fff4d6; border-radius: 4px; }
.waiting { font-weight: normal; }
.connection { font-size: 0.8rem; color: #555; } .tool-title { font-style: italic; }
.badge-hint { border: 1px dashed #8a8a8a; margin-left: 0.2rem; } .hint-read-only { background: #e3f5e8; }
.hint-destructive { background: #fbd5d5; } .hint-open-world { background: #e8eefc; }
"#;

/// The page's script: follows the chat's server-sent events and runs the refresh action.
///
/// When the event stream fails — its replica went away, or a reconnect was answered with
/// an HTTP error, after which an `EventSource` gives up for good — the script closes it,
/// shows a "reconnecting" notice and opens a new one after a backoff (0.5 s doubling to
/// 10 s, back to 0.5 s once a stream opens). A new stream starts with the current panel,
/// so nothing that changed while disconnected is missed.
pub const PAGE_SCRIPT: &str = r#"
(function () {
  const root = document.getElementById('panel-root');
  if (!root) return;
  const chat = root.dataset.chat;
  const FIRST_RETRY_MS = 500;
  const MAX_RETRY_MS = 10000;
  function openSections() {
    return new Set(Array.from(root.querySelectorAll('details[open]')).map(d => d.id));
  }
  function swap(html, open) {
    root.innerHTML = html;
    root.querySelectorAll('details').forEach(d => { d.open = open.has(d.id); });
  }
  root.addEventListener('click', function (event) {
    const button = event.target.closest('button.refresh');
    if (!button) return;
    // The new panel arrives through the event stream; a failed refresh can be retried.
    button.disabled = true;
    const retry = function () { button.disabled = false; };
    fetch(button.dataset.href, { method: button.dataset.method, credentials: 'same-origin' })
      .then(function (response) { if (!response.ok) retry(); }, retry);
  });
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
  connect();
})();
"#;

/// The whole page for a person's browser. Its script ([`PAGE_SCRIPT`]) keeps the panel
/// current from the chat's server-sent events, keeping open sections open.
pub fn render_page(panel: &Panel) -> String {
    format!(
        r#"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ctxsync · chat {chat}</title>
<link rel="stylesheet" href="{PAGE_STYLE_PATH}">
<script src="{PAGE_SCRIPT_PATH}" defer></script>
</head>
<body>
<main>
<h1>Chat context</h1>
<div id="panel-root" data-chat="{chat}">{fragment}</div>
</main>
</body>
</html>
"#,
        chat = escape(&panel.chat_id),
        fragment = render_fragment(panel),
    )
}
