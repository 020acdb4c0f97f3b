//! The file-system half of the resolver: which files of a scan root are context, reading
//! them with symlink containment, and the directories to watch for changes.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fs;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use ctxsync_agent_diagnostics::{SafeFileError, open_regular_file};

use crate::hash::ContentHasher;

/// Instruction files read at the top level of every scan root.
pub(crate) const INSTRUCTION_FILES: [&str; 3] = ["AGENTS.md", "CLAUDE.md", ".cursorrules"];
/// The MCP config file read at the top level of every scan root.
pub(crate) const MCP_CONFIG_FILE: &str = ".mcp.json";
/// Directories, relative to a scan root, whose `*/SKILL.md` files are skills.
pub(crate) const SKILL_CONTAINERS: [&str; 3] = ["skills", ".agents/skills", ".claude/skills"];
pub(crate) const SKILL_FILE: &str = "SKILL.md";

/// What a candidate file is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Instruction,
    McpConfig,
    /// A `SKILL.md` in the directory named `dir_name`.
    Skill {
        dir_name: String,
    },
    /// A skills directory that leads outside its scan root: reported, never listed.
    EscapingSkillContainer,
}

/// A context file found by listing (not yet read).
#[derive(Clone, Debug)]
pub(crate) struct Candidate {
    pub path: PathBuf,
    /// The canonical scan root the file must stay inside, if it belongs to one.
    pub root: Option<PathBuf>,
    pub kind: Kind,
}

/// The outcome of reading one candidate.
#[derive(Debug)]
pub(crate) enum FileRead {
    /// The whole file (at most `cap` bytes).
    Content {
        bytes: Vec<u8>,
        hash: String,
    },
    /// Larger than `cap`: hashed in full, content not kept.
    Oversize {
        size: u64,
        hash: String,
    },
    /// The file is gone (deleted between listing and reading).
    Missing,
    /// A symlink whose target lies outside the scan root.
    Escapes,
    /// A symlink whose target does not exist.
    Dangling,
    /// A FIFO, socket, device or directory: never opened for reading.
    NotRegular {
        /// What it is, with its article ("a FIFO").
        kind: &'static str,
    },
    Failed(io::Error),
}

/// Reads `candidate`, following symlinks only while they stay inside its scan root.
///
/// [`open_regular_file`] resolves and checks the path, then opens it without blocking and
/// checks the type again on the open handle, so a FIFO or device swapped in between is
/// refused, never read; a symlink swapped in can at worst race one resolve (the watcher
/// sees the swap).
pub(crate) fn read(candidate: &Candidate, cap: u64) -> (FileRead, Option<PathBuf>) {
    let moved = |target: PathBuf| (target != candidate.path).then_some(target);
    match open_regular_file(&candidate.path, candidate.root.as_deref()) {
        Ok(opened) => {
            let read = read_capped(opened.file, cap).unwrap_or_else(FileRead::Failed);
            (read, moved(opened.canonical))
        }
        Err(SafeFileError::Missing) => (FileRead::Missing, None),
        Err(SafeFileError::Dangling) => (FileRead::Dangling, None),
        Err(SafeFileError::Outside { .. }) => (FileRead::Escapes, None),
        Err(SafeFileError::NotRegular { kind, target }) => {
            (FileRead::NotRegular { kind }, moved(target))
        }
        Err(SafeFileError::Io(e)) => (FileRead::Failed(e), None),
        // Only a bounded read refuses a size; this one hashes everything.
        Err(error @ SafeFileError::TooLarge { .. }) => {
            (FileRead::Failed(io::Error::other(error.to_string())), None)
        }
    }
}

/// Hashes the whole stream and keeps at most `cap` bytes of it.
fn read_capped(mut file: impl Read, cap: u64) -> io::Result<FileRead> {
    let mut hasher = ContentHasher::default();
    let mut kept = Vec::new();
    let mut size: u64 = 0;
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buffer[..n]);
        size += n as u64;
        if size <= cap {
            kept.extend_from_slice(&buffer[..n]);
        } else if !kept.is_empty() {
            kept = Vec::new();
        }
    }
    let hash = hasher.finish();
    Ok(if size > cap {
        FileRead::Oversize { size, hash }
    } else {
        FileRead::Content { bytes: kept, hash }
    })
}

/// Which entries of a watched directory matter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum EntryFilter {
    Any,
    Names(BTreeSet<OsString>),
}

/// Directories to watch (non-recursively), each with the entry names that matter.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct WatchSet {
    pub dirs: BTreeMap<PathBuf, EntryFilter>,
}

impl WatchSet {
    pub(crate) fn any(&mut self, dir: PathBuf) {
        self.dirs.insert(dir, EntryFilter::Any);
    }

    pub(crate) fn names<'a>(&mut self, dir: PathBuf, names: impl IntoIterator<Item = &'a str>) {
        let entry = self
            .dirs
            .entry(dir)
            .or_insert_with(|| EntryFilter::Names(BTreeSet::new()));
        if let EntryFilter::Names(set) = entry {
            set.extend(names.into_iter().map(OsString::from));
        }
    }

    /// Watches the parent of `file` for that one entry.
    pub(crate) fn file(&mut self, file: &Path) {
        if let (Some(parent), Some(name)) = (file.parent(), file.file_name()) {
            let entry = self
                .dirs
                .entry(parent.to_path_buf())
                .or_insert_with(|| EntryFilter::Names(BTreeSet::new()));
            if let EntryFilter::Names(set) = entry {
                set.insert(name.to_os_string());
            }
        }
    }

    /// True when an event on `path` may change a resolve.
    pub(crate) fn matches(&self, path: &Path) -> bool {
        if let Some(EntryFilter::Any) = self.dirs.get(path) {
            return true;
        }
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return true;
        };
        match self.dirs.get(parent) {
            Some(EntryFilter::Any) => true,
            Some(EntryFilter::Names(names)) => names.contains(name),
            None => false,
        }
    }
}

/// The candidates of one scan root, in priority order (instruction files, the MCP config,
/// then skills by container and directory name), and the directories to watch.
pub(crate) fn list_root(
    root: &Path,
    canonical_root: &Path,
    watch: &mut WatchSet,
    notes: &mut Vec<String>,
) -> Vec<Candidate> {
    let candidate = |path: PathBuf, kind: Kind| Candidate {
        path,
        root: Some(canonical_root.to_path_buf()),
        kind,
    };
    let mut out = Vec::new();
    watch.names(
        root.to_path_buf(),
        INSTRUCTION_FILES
            .into_iter()
            .chain([MCP_CONFIG_FILE, "skills", ".agents", ".claude"]),
    );
    for name in INSTRUCTION_FILES {
        let path = root.join(name);
        if exists(&path) {
            out.push(candidate(path, Kind::Instruction));
        }
    }
    let config = root.join(MCP_CONFIG_FILE);
    if exists(&config) {
        out.push(candidate(config, Kind::McpConfig));
    }
    for container in SKILL_CONTAINERS {
        let dir = root.join(container);
        if let Some(parent) = dir.parent()
            && parent != root
            && parent.is_dir()
        {
            watch.names(parent.to_path_buf(), ["skills"]);
        }
        if !exists(&dir) {
            continue;
        }
        match fs::canonicalize(&dir) {
            Ok(canonical) if !canonical.starts_with(canonical_root) => {
                out.push(candidate(dir, Kind::EscapingSkillContainer));
                continue;
            }
            Ok(canonical) if !canonical.is_dir() => continue,
            Ok(_) => {}
            // A dangling symlink or an unreadable parent: nothing to list.
            Err(_) => continue,
        }
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) => {
                notes.push(format!("could not list {}: {e}", dir.display()));
                continue;
            }
        };
        for (dir_name, skill) in skill_files(&dir, entries, watch) {
            out.push(candidate(skill, Kind::Skill { dir_name }));
        }
    }
    out
}

/// The `SKILL.md` of each visible subdirectory of the skills directory `dir` (whose
/// `entries` were listed), by directory name, sorted; `dir` and each subdirectory watched.
fn skill_files(dir: &Path, entries: fs::ReadDir, watch: &mut WatchSet) -> Vec<(String, PathBuf)> {
    watch.any(dir.to_path_buf());
    let mut names: Vec<(String, OsString)> = entries
        .filter_map(Result::ok)
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.file_name()))
        .filter(|(name, _)| !name.starts_with('.'))
        .collect();
    names.sort();
    let mut out = Vec::new();
    for (name, os_name) in names {
        let skill_dir = dir.join(&os_name);
        let skill = skill_dir.join(SKILL_FILE);
        if skill_dir.is_dir() {
            watch.names(skill_dir, [SKILL_FILE]);
        }
        if exists(&skill) {
            out.push((name, skill));
        }
    }
    out
}

/// The candidates of one Agent Plugins package, with their sources: its `mcp.json`
/// (`<plugin>/mcp.json`) and its skills (`<plugin>/skills/<dir>/SKILL.md`, immediate
/// subdirectories only, as the specification says), all confined to the plugin root.
pub(crate) fn list_plugin(
    plugin: &ctxsync_agent_diagnostics::Plugin,
    watch: &mut WatchSet,
) -> Vec<(String, Candidate)> {
    use ctxsync_agent_diagnostics::{PLUGIN_MANIFEST, PLUGIN_MCP_CONFIG, PLUGIN_SKILLS_DIR};
    let name = &plugin.name;
    let candidate = |path: PathBuf, kind: Kind| Candidate {
        path,
        root: Some(plugin.root.clone()),
        kind,
    };
    let mut out = Vec::new();
    watch.names(
        plugin.dir.clone(),
        [PLUGIN_MANIFEST, PLUGIN_MCP_CONFIG, PLUGIN_SKILLS_DIR],
    );
    let config = plugin.dir.join(PLUGIN_MCP_CONFIG);
    if exists(&config) {
        out.push((
            format!("{name}/{PLUGIN_MCP_CONFIG}"),
            candidate(config, Kind::McpConfig),
        ));
    }
    let dir = plugin.dir.join(PLUGIN_SKILLS_DIR);
    if !exists(&dir) {
        return out;
    }
    match fs::canonicalize(&dir) {
        Ok(canonical) if canonical.starts_with(&plugin.root) && canonical.is_dir() => {}
        // Outside the root, or not a directory: the skills component is invalid (§6.2).
        _ => {
            out.push((
                format!("{name}/{PLUGIN_SKILLS_DIR}"),
                candidate(dir, Kind::EscapingSkillContainer),
            ));
            return out;
        }
    }
    // Watched even when it cannot be listed now, so a later fix is noticed.
    watch.any(dir.clone());
    let Ok(entries) = fs::read_dir(&dir) else {
        return out;
    };
    for (dir_name, skill) in skill_files(&dir, entries, watch) {
        out.push((
            format!("{name}/{PLUGIN_SKILLS_DIR}/{dir_name}/{SKILL_FILE}"),
            candidate(skill, Kind::Skill { dir_name }),
        ));
    }
    out
}

/// True when a directory entry exists at `path` (a dangling symlink counts: it is reported).
pub(crate) fn exists(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok()
}

/// `path` made absolute against `base` and cleaned of `.` and `..` without touching the
/// file system (symlinks are resolved only when reading, for containment).
pub(crate) fn normalize(base: &Path, path: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        base.join(path)
    };
    let mut out = PathBuf::new();
    for component in joined.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => match out.components().next_back() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                // `..` of the root is the root.
                Some(Component::RootDir | Component::Prefix(_)) => {}
                _ => out.push(component),
            },
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_is_lexical() {
        let check = |base: &str, path: &str, expect: &str| {
            assert_eq!(
                normalize(Path::new(base), Path::new(path)),
                Path::new(expect)
            );
        };
        check("/w", "a/./b/../c", "/w/a/c");
        check("/w", "/x/y/..", "/x");
        check("/w", "../..", "/");
        check("/w/", ".mcp.json", "/w/.mcp.json");
    }

    #[test]
    fn capped_read_hashes_everything() {
        let data = vec![7u8; 100];
        let check_cap = |cap: u64, oversize: bool| match read_capped(&data[..], cap).unwrap() {
            FileRead::Content { bytes, hash } => {
                assert!(!oversize);
                assert_eq!(bytes, data);
                assert_eq!(hash.len(), 64);
            }
            FileRead::Oversize { size, hash } => {
                assert!(oversize);
                assert_eq!(size, 100);
                assert_eq!(hash.len(), 64);
            }
            other => panic!("unexpected {other:?}"),
        };
        check_cap(100, false);
        check_cap(99, true);
    }

    #[test]
    fn fifos_and_devices_are_never_read() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let fifo = root.join("AGENTS.md");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        let zero = root.join("CLAUDE.md");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let check = |path: &Path, root: Option<&Path>, expect: &str| {
            let candidate = Candidate {
                path: path.to_owned(),
                root: root.map(Path::to_owned),
                kind: Kind::Instruction,
            };
            let (read, _) = read(&candidate, 1024);
            assert_eq!(format!("{read:?}"), expect, "{}", path.display());
        };
        check(&fifo, Some(&root), r#"NotRegular { kind: "a FIFO" }"#);
        check(&zero, Some(&root), "Escapes");
        check(&zero, None, r#"NotRegular { kind: "a character device" }"#);
    }

    #[test]
    fn watch_filters() {
        let mut set = WatchSet::default();
        set.names("/w".into(), ["AGENTS.md"]);
        set.any("/w/skills".into());
        assert!(set.matches(Path::new("/w/AGENTS.md")));
        assert!(!set.matches(Path::new("/w/README.md")));
        assert!(set.matches(Path::new("/w/skills/new")));
        assert!(set.matches(Path::new("/w/skills")));
        assert!(!set.matches(Path::new("/elsewhere/AGENTS.md")));
    }
}
