//! Agent Plugins packages (agent-plugins.org, version 1.0.0 and the compatible 1.1.0
//! draft): finding them, validating `plugin.json`, and turning a plugin's `mcp.json` into
//! server entries the engine runs like any other, with the specification's rules.
//!
//! What fails how follows the specification: a manifest problem other than an unknown
//! field or a non-object `extensions` rejects the whole plugin; a broken `mcp.json`
//! disables only the plugin's MCP servers; an invalid server entry fails alone. Servers are
//! named `<plugin>/<server>`, a namespace `.mcp.json` names cannot enter (they may not
//! contain `/`). Stdio servers never inherit the agent's environment: they get
//! [`PLUGIN_ENV_ALLOW_LIST`](crate::PLUGIN_ENV_ALLOW_LIST), the entry's own `env`, and
//! `PLUGIN_ROOT` / `PLUGIN_DATA`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use ctxsync_mcp_model::ConfigFileOutcome;

use crate::config::{ServerEntry, TransportConfig, name_problems, quote_name};
use crate::plugin_launch::{PLUGIN_DATA, PLUGIN_ROOT, PluginLaunch};
use crate::safe_file::{MAX_CONFIG_FILE_BYTES, SafeFileError, read_regular_file};

/// A plugin's manifest, at its root.
pub const PLUGIN_MANIFEST: &str = "plugin.json";
/// A plugin's MCP configuration, at its root.
pub const PLUGIN_MCP_CONFIG: &str = "mcp.json";
/// A plugin's skills directory, at its root.
pub const PLUGIN_SKILLS_DIR: &str = "skills";
/// Where plugins are installed, relative to a workspace and to the home directory.
pub const PLUGINS_DIR: &str = ".agents/plugins";
/// Most plugin packages one scan considers; the rest are reported, never read, so a
/// directory of thousands of entries cannot make every reload expensive.
pub const MAX_PLUGINS: usize = 128;

const ROOT_PLACEHOLDER: &str = "${PLUGIN_ROOT}";
const DATA_PLACEHOLDER: &str = "${PLUGIN_DATA}";

/// The specification versions this client implements: 1.1.0 only adds `displayName` and
/// `icon` to the manifest, so both are read by the same rules.
const SPEC_VERSIONS: [&str; 2] = ["1.0.0", "1.1.0"];
const SCHEMA_BASE: &str = "https://agent-plugins.org/schemas/";

/// A plugin package that passed manifest validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plugin {
    /// Its manifest `name`: unique among the loaded plugins.
    pub name: String,
    /// The manifest's `displayName` (1.1.0), when given and not empty.
    pub display_name: Option<String>,
    /// The manifest's `version`, when given.
    pub version: Option<String>,
    /// The specification version its `$schema` names, e.g. `1.0.0`.
    pub spec_version: &'static str,
    /// The directory as found (under a plugins directory, or named with `--plugin-dir`).
    pub dir: PathBuf,
    /// The filesystem-resolved plugin root: everything the package supplies stays inside.
    pub root: PathBuf,
}

impl Plugin {
    /// The persistent data directory dedicated to this installed plugin under `data_root`:
    /// its name and a digest of its resolved root, so two installations of one plugin
    /// (workspace and home) never share state, while an update in place keeps it.
    pub fn data_dir(&self, data_root: &Path) -> PathBuf {
        let digest = Sha256::digest(self.root.as_os_str().as_encoded_bytes());
        let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
        data_root.join(format!("{}-{hex}", self.name))
    }
}

/// What one scan of the plugin directories found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginScan {
    /// The loaded plugins, in precedence order.
    pub plugins: Vec<Plugin>,
    /// Problems, each on the file it is about (a rejected manifest, an ignored field, a
    /// package without `plugin.json`, a name already taken).
    pub outcomes: Vec<ConfigFileOutcome>,
}

/// The default plugin directories: the workspace's `.agents/plugins`, then the home
/// directory's (when there is one).
pub fn default_plugin_dirs(workspace: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    let mut dirs = vec![workspace.join(PLUGINS_DIR)];
    dirs.extend(home.map(|home| home.join(PLUGINS_DIR)));
    dirs
}

/// Finds the plugin packages of `dirs`, in order. A directory holding `plugin.json` is one
/// plugin (as `--plugin-dir` may name it); any other is a plugins directory whose
/// subdirectories (sorted, hidden ones skipped) are plugins. A missing directory is no
/// error. When two packages declare one name, the first keeps it and the later one is
/// rejected, saying which package has it.
pub fn discover_plugins(dirs: &[PathBuf]) -> PluginScan {
    let mut scan = PluginScan::default();
    let mut roots_seen = BTreeSet::new();
    let mut names: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut considered = 0usize;
    let mut over_limit = 0usize;
    for package in dirs.iter().flat_map(|dir| packages(dir)) {
        let Ok(root) = std::fs::canonicalize(&package) else {
            continue; // vanished, or a dangling link: nothing to load
        };
        if !root.is_dir() || !roots_seen.insert(root.clone()) {
            continue;
        }
        considered += 1;
        if considered > MAX_PLUGINS {
            over_limit += 1;
            continue;
        }
        let manifest_path = package.join(PLUGIN_MANIFEST);
        let outcome = |error: Option<String>, warning: Option<String>| ConfigFileOutcome {
            path: manifest_path.clone(),
            error,
            warning,
        };
        let bytes = match read_regular_file(&manifest_path, Some(&root), MAX_CONFIG_FILE_BYTES) {
            Ok(bytes) => bytes,
            Err(SafeFileError::Missing) => {
                let error = "not an Agent Plugins package: it has no plugin.json".to_owned();
                scan.outcomes.push(outcome(Some(error), None));
                continue;
            }
            Err(SafeFileError::Outside { .. }) => {
                let error =
                    "plugin rejected: plugin.json resolves outside the plugin root".to_owned();
                scan.outcomes.push(outcome(Some(error), None));
                continue;
            }
            Err(error) => {
                scan.outcomes
                    .push(outcome(Some(format!("plugin rejected: {error}")), None));
                continue;
            }
        };
        let manifest = match parse_manifest(&bytes) {
            Ok(manifest) => manifest,
            Err(error) => {
                scan.outcomes
                    .push(outcome(Some(format!("plugin rejected: {error}")), None));
                continue;
            }
        };
        if let Some(first) = names.get(&manifest.name) {
            let error = format!(
                "plugin rejected: the name {} is already taken by the plugin in {}",
                quote_name(&manifest.name),
                first.display()
            );
            scan.outcomes.push(outcome(Some(error), None));
            continue;
        }
        names.insert(manifest.name.clone(), package.clone());
        if !manifest.warnings.is_empty() {
            scan.outcomes
                .push(outcome(None, Some(manifest.warnings.join("; "))));
        }
        scan.plugins.push(Plugin {
            name: manifest.name,
            display_name: manifest.display_name,
            version: manifest.version,
            spec_version: manifest.spec_version,
            dir: package,
            root,
        });
    }
    if over_limit > 0 {
        let path = dirs.first().cloned().unwrap_or_default();
        scan.outcomes.push(ConfigFileOutcome {
            path,
            error: Some(format!(
                "{over_limit} plugin packages not loaded: at most {MAX_PLUGINS} are"
            )),
            warning: None,
        });
    }
    scan
}

/// Every plugin server of `dirs` and every problem found on the way: [`discover_plugins`],
/// then [`load_plugin_servers`] for each plugin, data directories under `data_root`.
pub fn load_plugins(
    dirs: &[PathBuf],
    data_root: &Path,
) -> (Vec<ServerEntry>, Vec<ConfigFileOutcome>) {
    let scan = discover_plugins(dirs);
    let mut entries = Vec::new();
    let mut outcomes = scan.outcomes;
    for plugin in &scan.plugins {
        let (servers, outcome) = load_plugin_servers(plugin, data_root);
        entries.extend(servers);
        outcomes.extend(outcome);
    }
    (entries, outcomes)
}

/// The package directories `dir` stands for: itself when it holds a manifest, else its
/// visible subdirectories, sorted.
fn packages(dir: &Path) -> Vec<PathBuf> {
    if std::fs::symlink_metadata(dir.join(PLUGIN_MANIFEST)).is_ok() {
        return vec![dir.to_path_buf()];
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|entry| !entry.file_name().to_string_lossy().starts_with('.'))
        .map(|entry| entry.path())
        .filter(|path| path.is_dir())
        .collect();
    out.sort();
    out
}

/// The paths whose changes may change what [`discover_plugins`] and
/// [`load_plugin_servers`] find: each directory, and each package's directory, manifest
/// and MCP configuration. Polled, so a plugin installed later is noticed.
pub fn plugin_watch_paths(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in dirs {
        out.push(dir.clone());
        for package in packages(dir).into_iter().take(MAX_PLUGINS) {
            out.push(package.join(PLUGIN_MANIFEST));
            out.push(package.join(PLUGIN_MCP_CONFIG));
            out.push(package.clone());
        }
    }
    out
}

/// A validated manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Manifest {
    name: String,
    display_name: Option<String>,
    version: Option<String>,
    spec_version: &'static str,
    /// Problems reported and ignored (unknown fields, a non-object `extensions`).
    warnings: Vec<String>,
}

/// The spec version a canonical schema identifier names, if this client implements it.
fn spec_version(schema: &str, file: &str) -> Option<&'static str> {
    let rest = schema.strip_prefix(SCHEMA_BASE)?;
    SPEC_VERSIONS
        .into_iter()
        .find(|version| rest.strip_prefix(version) == Some(&format!("/{file}")))
}

/// Validates `plugin.json` (§5): the error names the first fatal problem.
fn parse_manifest(bytes: &[u8]) -> Result<Manifest, String> {
    let document: Value =
        serde_json::from_slice(bytes).map_err(|e| format!("plugin.json is not JSON: {e}"))?;
    let Value::Object(document) = document else {
        return Err("plugin.json is not a JSON object".into());
    };
    let schema = match document.get("$schema") {
        None => return Err("plugin.json has no \"$schema\"".into()),
        Some(Value::String(schema)) => schema,
        Some(_) => return Err("\"$schema\" is not a string".into()),
    };
    let Some(spec_version) = spec_version(schema, "plugin.schema.json") else {
        return Err(format!(
            "unsupported Agent Plugins version: \"$schema\" is {}; supported are {}",
            quote_name(schema),
            SPEC_VERSIONS
                .map(|v| format!("{SCHEMA_BASE}{v}/plugin.schema.json"))
                .join(" and ")
        ));
    };
    let name = match document.get("name") {
        None => return Err("plugin.json has no \"name\"".into()),
        Some(Value::String(name)) => name.clone(),
        Some(_) => return Err("\"name\" is not a string".into()),
    };
    if let Some(problem) = plugin_name_problem(&name) {
        return Err(format!(
            "invalid plugin name {}: {problem}",
            quote_name(&name)
        ));
    }
    let with_1_1 = spec_version != "1.0.0";
    let mut warnings = Vec::new();
    let mut display_name = None;
    let mut version = None;
    for (field, value) in &document {
        let string = || match value {
            Value::String(text) => Ok(text.clone()),
            _ => Err(format!("\"{field}\" is not a string")),
        };
        match field.as_str() {
            "$schema" | "name" => {}
            "version" => version = Some(string()?),
            "description" | "homepage" | "repository" | "license" => {
                string()?;
            }
            "displayName" if with_1_1 => {
                display_name = Some(string()?).filter(|name| !name.is_empty());
            }
            // Advisory: only its type is checked, and this client shows no icon.
            "icon" if with_1_1 => {
                string()?;
            }
            "author" => check_author(value)?,
            "keywords" => match value {
                Value::Array(words) if words.iter().all(Value::is_string) => {}
                _ => return Err("\"keywords\" is not an array of strings".into()),
            },
            // Namespaces this client does not implement are ignored unvalidated (§8.1).
            "extensions" => {
                if !value.is_object() {
                    warnings.push("\"extensions\" is not an object; ignored".to_owned());
                }
            }
            other => warnings.push(format!("unknown field {} ignored", quote_name(other))),
        }
    }
    Ok(Manifest {
        name,
        display_name,
        version,
        spec_version,
        warnings,
    })
}

fn check_author(value: &Value) -> Result<(), String> {
    let Value::Object(author) = value else {
        return Err("\"author\" is not an object".into());
    };
    for (field, value) in author {
        if !matches!(field.as_str(), "name" | "email" | "url") {
            return Err(format!(
                "\"author\" has the unknown field {}",
                quote_name(field)
            ));
        }
        if !value.is_string() {
            return Err(format!("\"author.{field}\" is not a string"));
        }
    }
    Ok(())
}

/// Why `name` is not a plugin name (§5.5): 1 to 64 of `a-z 0-9 - .`, alphanumeric at both
/// ends, no `--` or `..`.
fn plugin_name_problem(name: &str) -> Option<&'static str> {
    let alphanumeric =
        |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if name.is_empty() || name.chars().count() > 64 {
        Some("it must be 1 to 64 characters")
    } else if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
    {
        Some("only lower-case letters, digits, '-' and '.' are allowed")
    } else if !alphanumeric(name.chars().next()) || !alphanumeric(name.chars().last()) {
        Some("it must start and end with a letter or digit")
    } else if name.contains("--") || name.contains("..") {
        Some("it may not contain \"--\" or \"..\"")
    } else {
        None
    }
}

/// Reads `plugin`'s `mcp.json` (§7.2) and returns its valid server entries, named
/// `<plugin>/<server>`, and an outcome naming what was invalid. A missing file yields
/// nothing; one that is not a regular file inside the root, not JSON, of another version
/// than the manifest's, or not of the required shape disables the plugin's MCP servers.
pub fn load_plugin_servers(
    plugin: &Plugin,
    data_root: &Path,
) -> (Vec<ServerEntry>, Option<ConfigFileOutcome>) {
    let path = plugin.dir.join(PLUGIN_MCP_CONFIG);
    match read_regular_file(&path, Some(&plugin.root), MAX_CONFIG_FILE_BYTES) {
        Ok(bytes) => parse_plugin_servers(plugin, data_root, &path, &bytes),
        Err(SafeFileError::Missing) => (Vec::new(), None),
        Err(SafeFileError::Outside { .. }) => (
            Vec::new(),
            Some(disabled(&path, "it resolves outside the plugin root")),
        ),
        Err(error) => (Vec::new(), Some(disabled(&path, &error.to_string()))),
    }
}

fn disabled(path: &Path, why: &str) -> ConfigFileOutcome {
    ConfigFileOutcome {
        path: path.to_owned(),
        error: Some(format!("the plugin's MCP servers are disabled: {why}")),
        warning: None,
    }
}

/// [`load_plugin_servers`] on bytes already read from `path` (also for fuzzing).
pub fn parse_plugin_servers(
    plugin: &Plugin,
    data_root: &Path,
    path: &Path,
    bytes: &[u8],
) -> (Vec<ServerEntry>, Option<ConfigFileOutcome>) {
    let reject = |why: String| (Vec::new(), Some(disabled(path, &why)));
    let document: Value = match serde_json::from_slice(bytes) {
        Ok(document) => document,
        Err(error) => return reject(format!("mcp.json is not JSON: {error}")),
    };
    let Value::Object(document) = document else {
        return reject("mcp.json is not a JSON object".into());
    };
    if let Some(field) = document
        .keys()
        .find(|field| !matches!(field.as_str(), "$schema" | "mcpServers"))
    {
        return reject(format!("unknown top-level field {}", quote_name(field)));
    }
    let version = match document.get("$schema") {
        Some(Value::String(schema)) => spec_version(schema, "mcp.schema.json"),
        Some(_) => return reject("\"$schema\" is not a string".into()),
        None => return reject("mcp.json has no \"$schema\"".into()),
    };
    match version {
        None => return reject("\"$schema\" names no supported Agent Plugins version".into()),
        Some(version) if version != plugin.spec_version => {
            return reject(format!(
                "mcp.json targets Agent Plugins {version} but plugin.json {}",
                plugin.spec_version
            ));
        }
        Some(_) => {}
    }
    let servers = match document.get("mcpServers") {
        Some(Value::Object(servers)) => servers,
        Some(_) => return reject("\"mcpServers\" is not an object".into()),
        None => return reject("mcp.json has no \"mcpServers\"".into()),
    };
    let context = Context {
        plugin,
        data_dir: plugin.data_dir(data_root),
    };
    let mut entries = Vec::new();
    let mut invalid = Vec::new();
    for (name, entry) in servers {
        match context.entry(name, entry) {
            Ok((transport, cwd)) => entries.push(ServerEntry {
                name: format!("{}/{name}", plugin.name),
                transport,
                source: path.to_owned(),
                always_load: false,
                plugin: Some(PluginLaunch {
                    plugin: plugin.name.clone(),
                    root: plugin.root.clone(),
                    data_dir: context.data_dir.clone(),
                    cwd: cwd.unwrap_or_else(|| plugin.root.clone()),
                }),
            }),
            Err(problems) => {
                invalid.push(format!("{}: {}", quote_name(name), problems.join(", ")));
            }
        }
    }
    let outcome = (!invalid.is_empty()).then(|| ConfigFileOutcome {
        path: path.to_owned(),
        error: Some(format!(
            "{} invalid server {}, not started: {}",
            invalid.len(),
            if invalid.len() == 1 {
                "entry"
            } else {
                "entries"
            },
            invalid.join("; ")
        )),
        warning: None,
    });
    (entries, outcome)
}

struct Context<'a> {
    plugin: &'a Plugin,
    data_dir: PathBuf,
}

impl Context<'_> {
    /// `${PLUGIN_ROOT}` and `${PLUGIN_DATA}`, in one pass: replaced text is never scanned
    /// again, and any other `${…}` stays literal (§9.2).
    fn expand(&self, text: &str) -> String {
        let root = self.plugin.root.to_string_lossy();
        let data = self.data_dir.to_string_lossy();
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let tail = &rest[start..];
            if let Some(after) = tail.strip_prefix(ROOT_PLACEHOLDER) {
                out.push_str(&root);
                rest = after;
            } else if let Some(after) = tail.strip_prefix(DATA_PLACEHOLDER) {
                out.push_str(&data);
                rest = after;
            } else {
                out.push_str("${");
                rest = &tail[2..];
            }
        }
        out.push_str(rest);
        out
    }

    /// One server entry (§7.2.1): a closed variant chosen by `type`; with a stdio
    /// server's resolved working directory when its `cwd` gives one.
    fn entry(
        &self,
        name: &str,
        entry: &Value,
    ) -> Result<(TransportConfig, Option<PathBuf>), Vec<String>> {
        let Value::Object(entry) = entry else {
            return Err(vec!["the entry is not an object".into()]);
        };
        let mut problems = name_problems(name);
        if name.contains('/') {
            problems.push("name contains \"/\"".into());
        }
        let kind = match entry.get("type") {
            Some(Value::String(kind)) => kind.as_str(),
            Some(_) => return Err(with(problems, "\"type\" is not a string")),
            None => return Err(with(problems, "\"type\" is missing")),
        };
        let (allowed, transport): (&[&str], _) = match kind {
            "stdio" => (
                &["type", "command", "args", "env", "cwd"],
                self.stdio(entry, &mut problems),
            ),
            "streamable-http" => (
                &["type", "url", "headers"],
                http(entry, &mut problems).map(|transport| (transport, None)),
            ),
            "sse" => {
                return Err(with(
                    problems,
                    "unsupported transport \"sse\" (legacy HTTP+SSE)",
                ));
            }
            other => {
                return Err(with(
                    problems,
                    &format!("unknown type {}", quote_name(other)),
                ));
            }
        };
        for field in entry.keys().filter(|f| !allowed.contains(&f.as_str())) {
            problems.push(format!(
                "field {} is not allowed for type {kind:?}",
                quote_name(field)
            ));
        }
        match transport {
            Some(transport) if problems.is_empty() => Ok(transport),
            _ => Err(problems),
        }
    }

    fn stdio(
        &self,
        entry: &Map<String, Value>,
        problems: &mut Vec<String>,
    ) -> Option<(TransportConfig, Option<PathBuf>)> {
        let command = match entry.get("command") {
            Some(Value::String(command)) => self.command(command, problems),
            Some(_) => {
                problems.push("\"command\" is not a string".into());
                None
            }
            None => {
                problems.push("\"command\" is missing".into());
                None
            }
        };
        let args = match entry.get("args") {
            None => Vec::new(),
            Some(Value::Array(args)) if args.iter().all(Value::is_string) => args
                .iter()
                .filter_map(Value::as_str)
                .map(|arg| self.expand(arg))
                .collect(),
            Some(_) => {
                problems.push("\"args\" is not an array of strings".into());
                Vec::new()
            }
        };
        let mut env = BTreeMap::new();
        match entry.get("env") {
            None => {}
            Some(Value::Object(map)) => {
                for (key, value) in map {
                    if key == PLUGIN_ROOT || key == PLUGIN_DATA {
                        problems.push(format!("\"env\" may not set {key}"));
                    } else if key.is_empty() || key.contains(['=', '\0']) {
                        problems.push(format!("\"env\" has the invalid name {}", quote_name(key)));
                    } else if let Value::String(value) = value {
                        env.insert(key.clone(), self.expand(value));
                    } else {
                        problems.push(format!(
                            "\"env\" value of {} is not a string",
                            quote_name(key)
                        ));
                    }
                }
            }
            Some(_) => problems.push("\"env\" is not an object".into()),
        }
        let cwd = match entry.get("cwd") {
            None => None,
            Some(Value::String(cwd)) => match self.check_cwd(cwd) {
                Ok(cwd) => Some(cwd),
                Err(problem) => {
                    problems.push(problem);
                    None
                }
            },
            Some(_) => {
                problems.push("\"cwd\" is not a string".into());
                None
            }
        };
        let transport = TransportConfig::Stdio {
            command: command?,
            args,
            env,
        };
        Some((transport, cwd))
    }

    /// A bare executable name (looked up on `PATH`) or a `./` path that resolves, symlinks
    /// followed, to an existing file inside the plugin root. Never expanded (§7.2.1).
    fn command(&self, command: &str, problems: &mut Vec<String>) -> Option<String> {
        if command.is_empty() {
            problems.push("\"command\" is empty".into());
            return None;
        }
        if command.contains('\0')
            || (command.chars().any(char::is_whitespace) && !command.starts_with("./"))
        {
            problems.push("\"command\" must be one executable, not a shell command line".into());
            return None;
        }
        let Some(relative) = command.strip_prefix("./") else {
            if command.contains('/') {
                problems.push(format!(
                    "\"command\" {} must be a bare executable name or a path starting with \"./\" inside the plugin",
                    quote_name(command)
                ));
                return None;
            }
            return Some(command.to_owned());
        };
        match std::fs::canonicalize(self.plugin.root.join(relative)) {
            Ok(resolved) if !resolved.starts_with(&self.plugin.root) => {
                problems.push(format!(
                    "\"command\" {} resolves outside the plugin root",
                    quote_name(command)
                ));
                None
            }
            Ok(resolved) if !resolved.is_file() => {
                problems.push(format!("\"command\" {} is not a file", quote_name(command)));
                None
            }
            Ok(resolved) => Some(resolved.to_string_lossy().into_owned()),
            Err(_) => {
                problems.push(format!(
                    "\"command\" {} does not exist in the plugin",
                    quote_name(command)
                ));
                None
            }
        }
    }

    /// `./…`, `${PLUGIN_ROOT}[/…]` or `${PLUGIN_DATA}[/…]`, staying inside the root (an
    /// existing directory, symlinks followed) or the data directory (lexically: it is
    /// created before launch).
    fn check_cwd(&self, cwd: &str) -> Result<PathBuf, String> {
        let placeholder_path = |placeholder: &str| {
            cwd.strip_prefix(placeholder)
                .filter(|rest| rest.is_empty() || rest.starts_with('/'))
                .map(|rest| rest.trim_start_matches('/'))
        };
        if let Some(rest) = placeholder_path(DATA_PLACEHOLDER) {
            let relative = lexical_inside(rest).ok_or_else(|| {
                format!(
                    "\"cwd\" {} leaves the plugin data directory",
                    quote_name(cwd)
                )
            })?;
            return Ok(self.data_dir.join(relative));
        }
        let rest = cwd
            .strip_prefix("./")
            .or_else(|| placeholder_path(ROOT_PLACEHOLDER))
            .ok_or_else(|| {
                format!(
                    "\"cwd\" {} must start with \"./\", \"${{PLUGIN_ROOT}}\" or \"${{PLUGIN_DATA}}\"",
                    quote_name(cwd)
                )
            })?;
        match std::fs::canonicalize(self.plugin.root.join(rest)) {
            Ok(resolved) if !resolved.starts_with(&self.plugin.root) => Err(format!(
                "\"cwd\" {} resolves outside the plugin root",
                quote_name(cwd)
            )),
            Ok(resolved) if resolved.is_dir() => Ok(resolved),
            _ => Err(format!(
                "\"cwd\" {} is not a directory in the plugin",
                quote_name(cwd)
            )),
        }
    }
}

/// `path` (relative) without `.`, refusing any `..` that climbs above its start.
fn lexical_inside(path: &str) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

fn with(mut problems: Vec<String>, problem: &str) -> Vec<String> {
    problems.push(problem.to_owned());
    problems
}

/// A `streamable-http` entry: an absolute http(s) URL without userinfo or fragment, https
/// unless the host is `localhost` or a loopback address; valid headers, none twice in
/// different case. Nothing is expanded.
fn http(entry: &Map<String, Value>, problems: &mut Vec<String>) -> Option<TransportConfig> {
    let url = match entry.get("url") {
        Some(Value::String(url)) => url.clone(),
        Some(_) => {
            problems.push("\"url\" is not a string".into());
            return None;
        }
        None => {
            problems.push("\"url\" is missing".into());
            return None;
        }
    };
    // Messages never quote the URL: it may carry credentials.
    match url::Url::parse(&url) {
        Ok(parsed) if !matches!(parsed.scheme(), "http" | "https") => {
            problems.push("\"url\" is not an http or https URL".into());
        }
        Ok(parsed) => {
            if !parsed.username().is_empty() || parsed.password().is_some() {
                problems.push("\"url\" may not carry user information".into());
            }
            if parsed.fragment().is_some() {
                problems.push("\"url\" may not have a fragment".into());
            }
            if parsed.scheme() == "http" && !is_loopback(&parsed) {
                problems.push("\"url\" must use https unless its host is loopback".into());
            }
        }
        Err(error) => problems.push(format!("\"url\" is invalid: {error}")),
    }
    let mut headers = BTreeMap::new();
    let mut seen = BTreeSet::new();
    match entry.get("headers") {
        None => {}
        Some(Value::Object(map)) => {
            for (name, value) in map {
                let Value::String(value) = value else {
                    problems.push(format!(
                        "\"headers\" value of {} is not a string",
                        quote_name(name)
                    ));
                    continue;
                };
                if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                    problems.push(format!("invalid header name {}", quote_name(name)));
                } else if http::HeaderValue::from_str(value).is_err() {
                    problems.push(format!("invalid value for header {}", quote_name(name)));
                } else if !seen.insert(name.to_ascii_lowercase()) {
                    problems.push(format!("header {} is given twice", quote_name(name)));
                }
                headers.insert(name.clone(), value.clone());
            }
        }
        Some(_) => problems.push("\"headers\" is not an object".into()),
    }
    // A plugin's server signs in with what its headers carry; it has no `oauth` block.
    Some(TransportConfig::Http {
        url,
        headers,
        oauth: None,
    })
}

fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(domain)) => domain == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST_1_0: &str = "https://agent-plugins.org/schemas/1.0.0/plugin.schema.json";
    const MCP_1_0: &str = "https://agent-plugins.org/schemas/1.0.0/mcp.schema.json";

    fn manifest(json: &str) -> Result<Manifest, String> {
        parse_manifest(json.as_bytes())
    }

    #[test]
    fn manifests_are_rejected_only_for_what_the_specification_makes_fatal() {
        let ok = manifest(&format!(
            r#"{{"$schema": "{MANIFEST_1_0}", "name": "acme.tools"}}"#
        ))
        .unwrap();
        assert_eq!((ok.name.as_str(), ok.spec_version), ("acme.tools", "1.0.0"));
        assert!(ok.warnings.is_empty());

        let lenient = manifest(&format!(
            r#"{{"$schema": "{MANIFEST_1_0}", "name": "a", "mcpServers": {{}}, "extensions": "x",
                "displayName": "A", "author": {{"name": "n"}}, "keywords": ["k"], "version": "not semver"}}"#
        ))
        .unwrap();
        assert_eq!(
            lenient.warnings,
            [
                "unknown field \"displayName\" ignored",
                "\"extensions\" is not an object; ignored",
                "unknown field \"mcpServers\" ignored"
            ]
        );
        let draft = manifest(
            r#"{"$schema": "https://agent-plugins.org/schemas/1.1.0/plugin.schema.json",
                "name": "a", "displayName": "Acme", "icon": "../outside.png"}"#,
        )
        .unwrap();
        assert_eq!(draft.display_name.as_deref(), Some("Acme"));
        assert!(draft.warnings.is_empty());

        for (json, error) in [
            ("[]".to_owned(), "plugin.json is not a JSON object"),
            (r#"{"name": "a"}"#.to_owned(), "plugin.json has no \"$schema\""),
            (
                format!(r#"{{"$schema": "{MANIFEST_1_0}"}}"#),
                "plugin.json has no \"name\"",
            ),
            (
                format!(r#"{{"$schema": "{MANIFEST_1_0}", "name": "My-Plugin"}}"#),
                "invalid plugin name \"My-Plugin\": only lower-case letters, digits, '-' and '.' are allowed",
            ),
            (
                format!(r#"{{"$schema": "{MANIFEST_1_0}", "name": "has--double"}}"#),
                "invalid plugin name \"has--double\": it may not contain \"--\" or \"..\"",
            ),
            (
                format!(r#"{{"$schema": "{MANIFEST_1_0}", "name": "-start"}}"#),
                "invalid plugin name \"-start\": it must start and end with a letter or digit",
            ),
            (
                format!(r#"{{"$schema": "{MANIFEST_1_0}", "name": "a", "version": 2}}"#),
                "\"version\" is not a string",
            ),
            (
                format!(r#"{{"$schema": "{MANIFEST_1_0}", "name": "a", "author": {{"x": "y"}}}}"#),
                "\"author\" has the unknown field \"x\"",
            ),
            (
                format!(r#"{{"$schema": "{MANIFEST_1_0}", "name": "a", "keywords": [1]}}"#),
                "\"keywords\" is not an array of strings",
            ),
            (
                r#"{"$schema": "https://agent-plugins.org/schemas/1.1.0/plugin.schema.json", "name": "a", "icon": 3}"#.to_owned(),
                "\"icon\" is not a string",
            ),
        ] {
            assert_eq!(manifest(&json).unwrap_err(), error, "{json}");
        }
        let unsupported = manifest(
            r#"{"$schema": "https://agent-plugins.org/schemas/9.0.0/plugin.schema.json", "name": "a"}"#,
        )
        .unwrap_err();
        assert!(
            unsupported.starts_with("unsupported Agent Plugins version"),
            "{unsupported}"
        );
        assert!(
            manifest(&format!(
                r#"{{"$schema": "{MANIFEST_1_0}", "name": "{}"}}"#,
                "a".repeat(65)
            ))
            .is_err()
        );
    }

    fn plugin_at(root: &Path) -> Plugin {
        Plugin {
            name: "kit".into(),
            display_name: None,
            version: None,
            spec_version: "1.0.0",
            dir: root.to_path_buf(),
            root: std::fs::canonicalize(root).unwrap(),
        }
    }

    /// Parses `servers` (the `mcpServers` object) for a plugin at `root`; entries render as
    /// `name command args env cwd` or `name url headers`, then the error.
    fn servers(root: &Path, servers: &str) -> Vec<String> {
        let json = format!(r#"{{"$schema": "{MCP_1_0}", "mcpServers": {servers}}}"#);
        let plugin = plugin_at(root);
        let (entries, outcome) = parse_plugin_servers(
            &plugin,
            Path::new("/data"),
            &root.join("mcp.json"),
            json.as_bytes(),
        );
        let root = plugin.root.to_string_lossy().into_owned();
        let mut lines: Vec<String> = entries
            .iter()
            .map(|entry| {
                let launch = entry.plugin.as_ref().unwrap();
                let line = match &entry.transport {
                    TransportConfig::Stdio { command, args, env } => format!(
                        "{} {command} {args:?} {env:?} {}",
                        entry.name,
                        launch.cwd.display()
                    ),
                    TransportConfig::Http { url, headers, .. } => {
                        format!("{} {url} {headers:?}", entry.name)
                    }
                };
                line.replace(&root, "ROOT")
                    .replace(&launch.data_dir.to_string_lossy().into_owned(), "DATA")
            })
            .collect();
        lines.extend(outcome.and_then(|o| o.error));
        lines
    }

    #[test]
    fn stdio_entries_follow_the_command_and_cwd_rules() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("kit");
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::create_dir_all(root.join("data")).unwrap();
        std::fs::write(root.join("bin/server"), "#!/bin/sh\n").unwrap();
        std::fs::write(dir.path().join("outside"), "#!/bin/sh\n").unwrap();
        std::os::unix::fs::symlink(dir.path().join("outside"), root.join("bin/escape")).unwrap();
        std::os::unix::fs::symlink("../bin/server", root.join("data/inside")).unwrap();

        assert_eq!(
            servers(
                &root,
                r#"{"local": {"type": "stdio", "command": "./bin/server",
                              "args": ["--data", "${PLUGIN_DATA}/db", "${HOME}", "$PLUGIN_ROOT"],
                              "env": {"CONFIG": "${PLUGIN_ROOT}/config.json"}, "cwd": "./data"},
                    "linked": {"type": "stdio", "command": "./data/inside", "cwd": "${PLUGIN_DATA}/work"},
                    "npx": {"type": "stdio", "command": "npx"}}"#
            ),
            [
                r#"kit/linked ROOT/bin/server [] {} DATA/work"#,
                r#"kit/local ROOT/bin/server ["--data", "DATA/db", "${HOME}", "$PLUGIN_ROOT"] {"CONFIG": "ROOT/config.json"} ROOT/data"#,
                "kit/npx npx [] {} ROOT",
            ]
        );
        let invalid = servers(
            &root,
            r#"{"ok": {"type": "stdio", "command": "npx"},
                "escape": {"type": "stdio", "command": "./bin/escape"},
                "parent": {"type": "stdio", "command": "../bin/server"},
                "absolute": {"type": "stdio", "command": "/bin/sh"},
                "missing": {"type": "stdio", "command": "./bin/none"},
                "shell": {"type": "stdio", "command": "npx -y server"},
                "placeholder": {"type": "stdio", "command": "${PLUGIN_ROOT}/bin/server"},
                "reserved": {"type": "stdio", "command": "npx", "env": {"PLUGIN_ROOT": "/x"}},
                "cwd": {"type": "stdio", "command": "npx", "cwd": "data"},
                "cwd-up": {"type": "stdio", "command": "npx", "cwd": "${PLUGIN_DATA}/../x"},
                "mixed": {"type": "stdio", "command": "npx", "url": "https://example.com"},
                "untyped": {"command": "npx"},
                "legacy": {"type": "sse", "url": "https://example.com/sse"},
                "a/b": {"type": "stdio", "command": "npx"}}"#,
        );
        assert_eq!(invalid[0], "kit/ok npx [] {} ROOT");
        let error = &invalid[1];
        assert!(
            error.starts_with("13 invalid server entries, not started: "),
            "{error}"
        );
        for expected in [
            "\"escape\": \"command\" \"./bin/escape\" resolves outside the plugin root",
            "\"parent\": \"command\" \"../bin/server\" must be a bare executable name",
            "\"absolute\": \"command\" \"/bin/sh\" must be a bare executable name",
            "\"missing\": \"command\" \"./bin/none\" does not exist in the plugin",
            "\"shell\": \"command\" must be one executable, not a shell command line",
            "\"placeholder\": \"command\" \"${PLUGIN_ROOT}/bin/server\" must be a bare",
            "\"reserved\": \"env\" may not set PLUGIN_ROOT",
            "\"cwd\": \"cwd\" \"data\" must start with \"./\"",
            "\"cwd-up\": \"cwd\" \"${PLUGIN_DATA}/../x\" leaves the plugin data directory",
            "\"mixed\": field \"url\" is not allowed for type \"stdio\"",
            "\"untyped\": \"type\" is missing",
            "\"legacy\": unsupported transport \"sse\"",
            "\"a/b\": name contains \"/\"",
        ] {
            assert!(error.contains(expected), "{expected} not in {error}");
        }
    }

    #[test]
    fn http_entries_need_https_off_loopback_and_no_credentials_in_the_url() {
        let dir = tempfile::tempdir().unwrap();
        let lines = servers(
            dir.path(),
            r#"{"remote": {"type": "streamable-http", "url": "https://deploy.example.com/mcp",
                           "headers": {"X-Tenant": "public"}},
                "local": {"type": "streamable-http", "url": "http://127.0.0.1:9/mcp"},
                "named": {"type": "streamable-http", "url": "http://localhost:9/mcp"},
                "plain": {"type": "streamable-http", "url": "http://example.com/mcp"},
                "user": {"type": "streamable-http", "url": "https://u:p@example.com/mcp"},
                "fragment": {"type": "streamable-http", "url": "https://example.com/mcp#x"},
                "twice": {"type": "streamable-http", "url": "https://example.com", "headers": {"X-A": "1", "x-a": "2"}},
                "relative": {"type": "streamable-http", "url": "/mcp"},
                "stdio-field": {"type": "streamable-http", "url": "https://example.com", "env": {}}}"#,
        );
        assert_eq!(
            &lines[..3],
            [
                "kit/local http://127.0.0.1:9/mcp {}",
                "kit/named http://localhost:9/mcp {}",
                r#"kit/remote https://deploy.example.com/mcp {"X-Tenant": "public"}"#,
            ]
        );
        let error = &lines[3];
        for expected in [
            "\"plain\": \"url\" must use https unless its host is loopback",
            "\"user\": \"url\" may not carry user information",
            "\"fragment\": \"url\" may not have a fragment",
            "\"twice\": header \"x-a\" is given twice",
            "\"relative\": \"url\" is invalid",
            "\"stdio-field\": field \"env\" is not allowed for type \"streamable-http\"",
        ] {
            assert!(error.contains(expected), "{expected} not in {error}");
        }
        assert!(!error.contains("u:p"), "{error}");
    }

    #[test]
    fn a_broken_mcp_json_disables_only_the_plugins_servers() {
        let dir = tempfile::tempdir().unwrap();
        let plugin = plugin_at(dir.path());
        let check = |json: &str, expected: &str| {
            let (entries, outcome) = parse_plugin_servers(
                &plugin,
                Path::new("/d"),
                Path::new("/p/mcp.json"),
                json.as_bytes(),
            );
            assert!(entries.is_empty(), "{json}");
            let error = outcome.unwrap().error.unwrap();
            assert_eq!(
                error,
                format!("the plugin's MCP servers are disabled: {expected}"),
                "{json}"
            );
        };
        check(
            "{",
            "mcp.json is not JSON: EOF while parsing an object at line 1 column 1",
        );
        check(r#"{"mcpServers": {}}"#, "mcp.json has no \"$schema\"");
        check(
            &format!(r#"{{"$schema": "{MCP_1_0}", "mcpServers": {{}}, "extra": 1}}"#),
            "unknown top-level field \"extra\"",
        );
        check(
            r#"{"$schema": "https://agent-plugins.org/schemas/1.1.0/mcp.schema.json", "mcpServers": {}}"#,
            "mcp.json targets Agent Plugins 1.1.0 but plugin.json 1.0.0",
        );
        check(
            &format!(r#"{{"$schema": "{MCP_1_0}"}}"#),
            "mcp.json has no \"mcpServers\"",
        );
        let (entries, outcome) = parse_plugin_servers(
            &plugin,
            Path::new("/d"),
            Path::new("/p/mcp.json"),
            format!(r#"{{"$schema": "{MCP_1_0}", "mcpServers": {{}}}}"#).as_bytes(),
        );
        assert!(entries.is_empty() && outcome.is_none());
    }

    #[test]
    fn expansion_is_one_pass_of_the_two_placeholders() {
        let plugin = Plugin {
            root: PathBuf::from("/p/${PLUGIN_DATA}"),
            dir: PathBuf::from("/p"),
            ..plugin_at(Path::new("/"))
        };
        let context = Context {
            plugin: &plugin,
            data_dir: PathBuf::from("/d/${PLUGIN_ROOT}"),
        };
        assert_eq!(
            context.expand("${PLUGIN_ROOT}:${PLUGIN_DATA}:${HOME}:${PLUGIN_ROOT"),
            "/p/${PLUGIN_DATA}:/d/${PLUGIN_ROOT}:${HOME}:${PLUGIN_ROOT"
        );
    }

    #[test]
    fn stdio_servers_get_the_allow_list_and_the_plugin_variables_only() {
        let launch = PluginLaunch {
            plugin: "kit".into(),
            root: "/p".into(),
            data_dir: "/d".into(),
            cwd: "/p".into(),
        };
        let agent: BTreeMap<String, String> = [
            ("PATH", "/bin"),
            ("HOME", "/home/a"),
            ("LC_ALL", "C"),
            ("HTTPS_PROXY", "http://proxy:3128"),
            ("SSL_CERT_FILE", "/etc/ca.pem"),
            ("CTXSYNC_TOKEN", "ctx_secret"),
            ("GITHUB_TOKEN", "ghp_x"),
            ("PLUGIN_ROOT", "/forged"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let entry = BTreeMap::from([("MODE".to_owned(), "fast".to_owned())]);
        let env = launch.environment(&agent, &entry);
        let names: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "HOME",
                "HTTPS_PROXY",
                "LC_ALL",
                "MODE",
                "PATH",
                "PLUGIN_DATA",
                "PLUGIN_ROOT",
                "SSL_CERT_FILE"
            ]
        );
        assert_eq!(env["PLUGIN_ROOT"], "/p");
    }

    fn write_plugin(dir: &Path, name: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(
            dir.join(PLUGIN_MANIFEST),
            format!(r#"{{"$schema": "{MANIFEST_1_0}", "name": "{name}"}}"#),
        )
        .unwrap();
    }

    #[test]
    fn discovery_keeps_the_first_of_two_plugins_with_one_name() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = dir.path().join("w/.agents/plugins");
        let home = dir.path().join("h/.agents/plugins");
        write_plugin(&workspace.join("kit"), "kit");
        write_plugin(&workspace.join("other"), "other");
        std::fs::create_dir_all(workspace.join("no-manifest")).unwrap();
        std::fs::create_dir_all(workspace.join(".hidden")).unwrap();
        write_plugin(&home.join("kit-copy"), "kit");
        write_plugin(&dir.path().join("single"), "single");
        let dirs = [
            workspace.clone(),
            home.clone(),
            dir.path().join("single"),
            dir.path().join("absent"),
        ];
        let scan = discover_plugins(&dirs);
        let names: Vec<&str> = scan.plugins.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["kit", "other", "single"]);
        let outcomes: Vec<(PathBuf, String)> = scan
            .outcomes
            .iter()
            .map(|o| (o.path.clone(), o.error.clone().unwrap()))
            .collect();
        assert_eq!(
            outcomes,
            [
                (
                    workspace.join("no-manifest/plugin.json"),
                    "not an Agent Plugins package: it has no plugin.json".to_owned()
                ),
                (
                    home.join("kit-copy/plugin.json"),
                    format!(
                        "plugin rejected: the name \"kit\" is already taken by the plugin in {}",
                        workspace.join("kit").display()
                    )
                ),
            ]
        );
        let data = scan.plugins[0].data_dir(Path::new("/data"));
        assert!(data.to_string_lossy().starts_with("/data/kit-"), "{data:?}");
        assert_ne!(data, scan.plugins[1].data_dir(Path::new("/data")));
        let watched = plugin_watch_paths(&dirs);
        assert!(watched.contains(&workspace.join("kit/mcp.json")));
        assert!(watched.contains(&home));
    }
}
