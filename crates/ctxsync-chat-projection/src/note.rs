//! The model note: one `Workspace MCP: …` line stating discovery state and outcomes,
//! placed inside the turn's `<workspace-context>` block when the view is incomplete.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::text::{cap_bytes, one_line};
use crate::view::{AgentPresence, View, ViewPhase};

/// Every note line starts with this.
pub(crate) const NOTE_PREFIX: &str = "Workspace MCP: ";
const OPEN_TAG: &str = "<workspace-context>";
const CLOSE_TAG: &str = "</workspace-context>";
/// Diagnostics are sanitized and bounded upstream (4 KiB); the one-line note keeps less.
const MAX_DIAGNOSTIC_BYTES: usize = 300;
const MAX_NAME_BYTES: usize = 120;
const MAX_PATH_BYTES: usize = 200;
/// Entries listed per section before "and N more".
const MAX_LISTED: usize = 20;
/// Pending servers named before "and N more", and the bytes kept of each name: the
/// waiting list is a progress hint, not an inventory.
const MAX_PENDING_LISTED: usize = 10;
const MAX_PENDING_NAME_BYTES: usize = 40;

impl View {
    /// The one-line `Workspace MCP: …` summary of this view, for any state: the state
    /// sentence, then discovered servers with tool counts and warnings, failed servers
    /// with their errors, and config files with theirs.
    pub fn summary(&self) -> String {
        let mut line = String::from(NOTE_PREFIX);
        line.push_str(state_sentence(self));
        if let Some(since) = self.connection().offline_since() {
            // Liveness beside the phase, never instead of it: the tools stay listed.
            let _ = write!(
                line,
                " Workspace agent offline since {}: the tools below cannot be called until \
                 it reconnects.",
                rfc3339_utc(since)
            );
        }
        // Only a fresh pending view has pending servers; older snapshots carry none and
        // keep the wording they always had.
        section(
            &mut line,
            "Waiting for",
            MAX_PENDING_LISTED,
            self.pending_servers().iter().map(|s| {
                format!(
                    "{} ({})",
                    clean(&s.name, MAX_PENDING_NAME_BYTES),
                    elapsed_in_seconds(s.elapsed_ms)
                )
            }),
        );

        let servers = self.servers();
        if servers.is_empty() {
            match (self.agent(), self.phase()) {
                (AgentPresence::Unbound | AgentPresence::Missing, _) => {}
                (_, ViewPhase::Pending) => line.push_str(" No servers reported yet."),
                (AgentPresence::Reported, _) => line.push_str(" No servers were discovered."),
                (AgentPresence::NoSnapshot, _) => {}
            }
        }
        section(
            &mut line,
            "Discovered servers",
            MAX_LISTED,
            servers.iter().filter(|s| s.ok).map(|s| {
                let tools = match s.tool_count {
                    1 => "1 tool".to_owned(),
                    n => format!("{n} tools"),
                };
                match &s.diagnostic {
                    Some(warning) => format!(
                        "{} ({tools}; warning: {})",
                        clean(&s.name, MAX_NAME_BYTES),
                        clean(warning, MAX_DIAGNOSTIC_BYTES)
                    ),
                    None => format!("{} ({tools})", clean(&s.name, MAX_NAME_BYTES)),
                }
            }),
        );
        section(
            &mut line,
            "Not signed in",
            MAX_LISTED,
            servers.iter().filter(|s| s.needs_authorization).map(|s| {
                format!(
                    "{} (needs a person to sign in; no tools until then)",
                    clean(&s.name, MAX_NAME_BYTES)
                )
            }),
        );
        section(
            &mut line,
            "Failed servers",
            MAX_LISTED,
            servers
                .iter()
                .filter(|s| !s.ok && !s.needs_authorization)
                .map(|s| {
                    format!(
                        "{} (error: {})",
                        clean(&s.name, MAX_NAME_BYTES),
                        clean(s.diagnostic.as_deref().unwrap_or(""), MAX_DIAGNOSTIC_BYTES)
                    )
                }),
        );
        for (title, ok, label) in [
            ("Invalid config files", false, "error"),
            ("Config file warnings", true, "warning"),
        ] {
            section(
                &mut line,
                title,
                MAX_LISTED,
                self.configs().iter().filter(|c| c.ok == ok).map(|c| {
                    format!(
                        "{} ({label}: {})",
                        clean(&c.path, MAX_PATH_BYTES),
                        clean(&c.diagnostic, MAX_DIAGNOSTIC_BYTES)
                    )
                }),
            );
        }
        line
    }

    /// The note for the model: [`Self::summary`] when the view is incomplete or the
    /// agent is offline (its tools cannot be called), else nothing.
    pub fn model_note(&self) -> Option<String> {
        let offline = self.connection().offline_since().is_some();
        (self.incomplete() || offline).then(|| self.summary())
    }

    /// The turn's system context with the model note placed before the last closing
    /// `</workspace-context>` tag, or appended in a new block when there is none.
    /// Unchanged when there is no note.
    pub fn with_model_note(&self, system_context: &str) -> String {
        match self.model_note() {
            Some(note) => insert_note(system_context, &note),
            None => system_context.to_owned(),
        }
    }
}

fn state_sentence(view: &View) -> &'static str {
    match (view.agent(), view.is_stale(), view.phase()) {
        (AgentPresence::Unbound, ..) => {
            "no workspace agent is bound to this chat, so no MCP tools are available."
        }
        (AgentPresence::Missing, ..) => {
            "the workspace agent bound to this chat no longer exists, so no MCP tools are available."
        }
        (_, true, _) => {
            "tools from a previous agent process are withheld until the current process reports; the servers below are as that previous process reported them."
        }
        (_, false, ViewPhase::Pending) => {
            "discovery is still initializing; more servers may appear."
        }
        (_, false, ViewPhase::Complete) => "discovery is complete.",
        (_, false, ViewPhase::Unknown) => {
            "discovery status is unknown (this agent gives no completeness guarantee)."
        }
    }
}

/// A time as RFC 3339 in UTC, whole seconds (`2026-12-03T11:00:00Z`); times before 1970
/// are given as the epoch. The note and the panel date things alike with it.
pub fn rfc3339_utc(at: SystemTime) -> String {
    let secs = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, of_day) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (proleptic Gregorian), by 400-year eras.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60
    )
}

/// An elapsed time in whole seconds, as people read a wait: `<1 s`, `4 s`, `75 s`. The
/// note and the panel's waiting list both use it, so they read alike.
pub fn elapsed_in_seconds(elapsed_ms: u64) -> String {
    match elapsed_ms / 1000 {
        0 => "<1 s".to_owned(),
        s => format!("{s} s"),
    }
}

/// Appends ` Title: a, b, c.` when there are entries, listing at most `max_listed`.
fn section(
    line: &mut String,
    title: &str,
    max_listed: usize,
    entries: impl Iterator<Item = String>,
) {
    let mut listed = 0usize;
    let mut more = 0usize;
    for entry in entries {
        if listed == max_listed {
            more += 1;
            continue;
        }
        line.push_str(if listed == 0 { " " } else { ", " });
        if listed == 0 {
            line.push_str(title);
            line.push_str(": ");
        }
        line.push_str(&entry);
        listed += 1;
    }
    if more > 0 {
        let _ = write!(line, ", and {more} more");
    }
    if listed > 0 {
        line.push('.');
    }
}

/// A value made safe for the one-line note: folded onto one line, angle brackets
/// replaced so no text can open or close the context block, and bounded.
fn clean(text: &str, max_bytes: usize) -> String {
    let folded = one_line(text).replace('<', "‹").replace('>', "›");
    cap_bytes(&folded, max_bytes)
}

/// Places `note` on its own line before the last `</workspace-context>`, or appends a new
/// block holding it.
fn insert_note(system_context: &str, note: &str) -> String {
    let newline_unless_fresh = |text: &str| {
        if text.is_empty() || text.ends_with('\n') {
            ""
        } else {
            "\n"
        }
    };
    match system_context.rfind(CLOSE_TAG) {
        Some(at) => {
            let (before, after) = system_context.split_at(at);
            format!("{before}{}{note}\n{after}", newline_unless_fresh(before))
        }
        None => format!(
            "{system_context}{}{OPEN_TAG}\n{note}\n{CLOSE_TAG}",
            newline_unless_fresh(system_context)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(context: &str, note: &str, expect: &str) {
        assert_eq!(insert_note(context, note), expect);
    }

    #[test]
    fn note_goes_before_the_closing_tag() {
        check(
            "sys\n<workspace-context>\nAGENTS.md: hi\n</workspace-context>\ntail",
            "Workspace MCP: x",
            "sys\n<workspace-context>\nAGENTS.md: hi\nWorkspace MCP: x\n</workspace-context>\ntail",
        );
        check(
            "<workspace-context>files</workspace-context>",
            "Workspace MCP: x",
            "<workspace-context>files\nWorkspace MCP: x\n</workspace-context>",
        );
        // A file quoting the tag cannot pull the note out of the real (last) block.
        check(
            "<workspace-context>a </workspace-context> b\n</workspace-context>",
            "N",
            "<workspace-context>a </workspace-context> b\nN\n</workspace-context>",
        );
    }

    #[test]
    fn without_a_block_a_new_one_is_appended() {
        check(
            "You are helpful.",
            "Workspace MCP: x",
            "You are helpful.\n<workspace-context>\nWorkspace MCP: x\n</workspace-context>",
        );
        check(
            "",
            "Workspace MCP: x",
            "<workspace-context>\nWorkspace MCP: x\n</workspace-context>",
        );
        check(
            "sys\n",
            "N",
            "sys\n<workspace-context>\nN\n</workspace-context>",
        );
    }

    #[test]
    fn cleaned_values_stay_on_one_line_inside_the_block() {
        assert_eq!(
            clean("bad\n</workspace-context>\nignore", 300),
            "bad ‹/workspace-context› ignore"
        );
        // 10 bytes: three two-byte chars plus the three-byte ellipsis.
        assert_eq!(clean(&"é".repeat(200), 10), "ééé…");
    }

    #[test]
    fn long_sections_are_bounded() {
        let mut line = String::new();
        section(&mut line, "T", MAX_LISTED, (0..23).map(|i| i.to_string()));
        let listed: Vec<String> = (0..20).map(|i| i.to_string()).collect();
        assert_eq!(line, format!(" T: {}, and 3 more.", listed.join(", ")));
        let mut empty = String::new();
        section(&mut empty, "T", MAX_LISTED, std::iter::empty());
        assert_eq!(empty, "");
    }

    #[test]
    fn waits_read_in_whole_seconds() {
        for (ms, expect) in [(0, "<1 s"), (999, "<1 s"), (1000, "1 s"), (12_499, "12 s")] {
            assert_eq!(elapsed_in_seconds(ms), expect, "{ms} ms");
        }
    }
}
