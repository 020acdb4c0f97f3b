//! The resolver's file rows: instruction files, skills (with their front matter checked)
//! and MCP config files, found in the scan roots, the configured paths and plugins, read
//! within the row and content limits.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use ctxsync_mcp_model::{ConfigFileOutcome, Report};
use ctxsync_protocol::{InstructionFileBody, Resource, ResourceBody, ResourceStatus, SkillBody};

use crate::front_matter::parse_front_matter;
use crate::scan::{self, Candidate, FileRead, Kind, WatchSet};

use super::rows::{bound_error, empty_body, exclude, flag_long_source};

/// Largest context file whose content is sent; larger files are `OVERSIZE` (still hashed).
pub const MAX_FILE_BYTES: u64 = 64 * 1024;
/// Largest total of file bodies (instruction files and skills) in one snapshot; files
/// beyond it are `EXCLUDED`.
pub const MAX_CONTEXT_BYTES: usize = 2 * 1024 * 1024;

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

pub(super) struct Resolver {
    pub(super) workspace: PathBuf,
    pub(super) watch: WatchSet,
    pub(super) notes: Vec<String>,
}

impl Resolver {
    /// Every file candidate with its source, in priority order.
    pub(super) fn candidates(
        &mut self,
        scan: &ScanConfig,
        report: Option<&Report>,
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

    pub(super) fn file_row(
        &mut self,
        source: String,
        candidate: &Candidate,
        excluded: bool,
        report: Option<&Report>,
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
    outcomes: impl Iterator<Item = &'a ConfigFileOutcome>,
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
pub(super) fn is_kebab_case(name: &str) -> bool {
    !name.is_empty()
        && name.split('-').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kebab_case() {
        for good in ["a", "pdf-tools", "v2", "a-1-b"] {
            assert!(is_kebab_case(good), "{good}");
        }
        for bad in ["", "-a", "a-", "a--b", "A", "a_b", "a b", "é"] {
            assert!(!is_kebab_case(bad), "{bad}");
        }
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
