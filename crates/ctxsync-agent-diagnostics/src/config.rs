//! `.mcp.json` parsing: structural and semantic errors as data, `${VAR}` expansion, duplicates.

use std::{
    collections::{BTreeMap, BTreeSet, HashSet},
    path::{Path, PathBuf},
};

use ctxsync_mcp_model::ConfigFileOutcome;
use serde_json::{Map, Value};

use crate::safe_file::{MAX_CONFIG_FILE_BYTES, SafeFileError, read_regular_file};
use crate::sanitize::SecretSet;

/// Longest accepted server name, in bytes.
pub const MAX_SERVER_NAME_BYTES: usize = 1024;
/// How much of an offending name an error message quotes.
const NAME_QUOTE_BYTES: usize = 64;

/// How the engine reaches one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportConfig {
    /// A child process speaking MCP on stdin/stdout.
    Stdio {
        /// Program to run (looked up in the agent's `PATH`).
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment on top of the agent's.
        env: BTreeMap<String, String>,
    },
    /// MCP streamable HTTP.
    Http {
        /// Endpoint URL (http or https).
        url: String,
        /// Headers sent with every request.
        headers: BTreeMap<String, String>,
        /// The entry's `oauth` block: a client registered in advance with the server's
        /// authorization server.
        oauth: Option<PreregisteredClient>,
    },
}

/// An HTTP entry's `"oauth": {"clientId", "clientSecret"?, "scopes"?, "grant"?}`: a client
/// registered in advance with the server's authorization server (strings take `${VAR}`
/// expansion). `Debug` never shows the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct PreregisteredClient {
    /// `clientId`.
    pub client_id: String,
    /// `clientSecret`; `None` for a public client.
    pub client_secret: Option<String>,
    /// `scopes`: asked for instead of what the server suggests; empty when not given.
    pub scopes: Vec<String>,
    /// `grant`: how the agent signs in.
    pub grant: OAuthGrant,
}

impl std::fmt::Debug for PreregisteredClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreregisteredClient")
            .field("client_id", &self.client_id)
            .field(
                "client_secret",
                &self.client_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("scopes", &self.scopes)
            .field("grant", &self.grant)
            .finish()
    }
}

/// How an [`PreregisteredClient`] signs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OAuthGrant {
    /// `"authorization_code"` (the default): a person signs in from the control plane's
    /// page.
    #[default]
    AuthorizationCode,
    /// `"client_credentials"` (the MCP client-credentials extension): the agent signs in
    /// with the client's secret, no person involved; needs `clientSecret`.
    ClientCredentials,
}

/// One valid server declaration, variables expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerEntry {
    /// The server's name (its key in `mcpServers`, or VS Code's `servers`).
    pub name: String,
    /// How to reach it.
    pub transport: TransportConfig,
    /// The file that declared it.
    pub source: PathBuf,
    /// The entry asked (`"alwaysLoad": true`) for the server's tools to stay loaded in
    /// every turn, even one that defers tools behind a search tool; false when absent.
    pub always_load: bool,
    /// Set for a server an Agent Plugins package declares: how it is launched (its own
    /// environment and working directory); `None` for `.mcp.json` servers.
    pub plugin: Option<crate::plugin_launch::PluginLaunch>,
}

impl ServerEntry {
    /// Every secret this entry carries: env values, header values and their credentials,
    /// URL userinfo (with its Basic credentials) and query values, and the values of
    /// secret-named arguments (`--token=…`, `--api-key …`, `-pVALUE`; see
    /// [`SecretSet::insert_args`]). Paths and other arguments stay readable.
    pub fn secrets(&self) -> SecretSet {
        let mut secrets = SecretSet::new();
        match &self.transport {
            TransportConfig::Stdio { args, env, .. } => {
                secrets.insert_args(args.iter().map(String::as_str));
                for value in env.values() {
                    secrets.insert(value);
                }
            }
            TransportConfig::Http {
                url,
                headers,
                oauth,
            } => {
                secrets.insert_url(url);
                for value in headers.values() {
                    secrets.insert_header_value(value);
                }
                if let Some(secret) = oauth.as_ref().and_then(|o| o.client_secret.as_ref()) {
                    secrets.insert(secret);
                }
            }
        }
        secrets
    }
}

/// One config file to read, and where its symlinks may lead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigFile {
    /// The file (absolute, as the user or the workspace names it).
    pub path: PathBuf,
    /// The canonical directory the file must resolve inside: the workspace, for the
    /// workspace's own `.mcp.json`. `None` for a file the user named explicitly, which may
    /// lead anywhere.
    pub confined_to: Option<PathBuf>,
}

impl ConfigFile {
    /// A file the user named (e.g. with `--mcp-config`): its symlinks may lead anywhere.
    pub fn named(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            confined_to: None,
        }
    }

    /// A file found in `workspace` (a canonical directory) that must resolve inside it.
    pub fn in_workspace(path: impl Into<PathBuf>, workspace: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            confined_to: Some(workspace.into()),
        }
    }
}

/// Reads and parses one config file. A missing file yields no entries and no outcome; a
/// FIFO, a device, a file over [`MAX_CONFIG_FILE_BYTES`] or a symlink leading out of its
/// confinement is a structural error, found without blocking or reading it whole.
pub fn parse_config_file(
    file: &ConfigFile,
    env: &BTreeMap<String, String>,
) -> (Vec<ServerEntry>, Option<ConfigFileOutcome>) {
    read_config_file(file, env).into_parts()
}

/// What reading one config file gave.
#[derive(Debug)]
pub(crate) enum FileRead {
    /// The file does not exist: it declares nothing.
    Missing,
    /// The file exists but could not be read as a server map at all (unreadable, invalid
    /// JSON, no server map): it says nothing about which servers it declares now.
    Rejected(ConfigFileOutcome),
    /// The file's servers (its invalid entries left out) and what it has to say.
    Read(Vec<ServerEntry>, Option<ConfigFileOutcome>),
}

impl FileRead {
    fn into_parts(self) -> (Vec<ServerEntry>, Option<ConfigFileOutcome>) {
        match self {
            FileRead::Missing => (Vec::new(), None),
            FileRead::Rejected(outcome) => (Vec::new(), Some(outcome)),
            FileRead::Read(entries, outcome) => (entries, outcome),
        }
    }
}

fn read_config_file(file: &ConfigFile, env: &BTreeMap<String, String>) -> FileRead {
    let path = &file.path;
    let read = read_regular_file(path, file.confined_to.as_deref(), MAX_CONFIG_FILE_BYTES);
    match read {
        Ok(bytes) => parse_bytes(path, &bytes, env),
        Err(SafeFileError::Missing) => FileRead::Missing,
        Err(SafeFileError::Outside { target, .. }) => FileRead::Rejected(outcome_error(
            path,
            format!("resolves outside the workspace, to {}", target.display()),
        )),
        Err(error) => FileRead::Rejected(outcome_error(path, error.to_string())),
    }
}

/// Parses the contents of one config file (used by [`parse_config_file`] and fuzzing).
pub fn parse_config_bytes(
    path: &Path,
    bytes: &[u8],
    env: &BTreeMap<String, String>,
) -> (Vec<ServerEntry>, Option<ConfigFileOutcome>) {
    parse_bytes(path, bytes, env).into_parts()
}

/// A JSON syntax error as people read it: where, then what (`invalid JSON at line 3,
/// column 5: expected `,` or `}``). serde_json's messages name a position, never content.
fn json_error(bytes: &[u8], error: &serde_json::Error) -> String {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        // What an editor leaves for a moment while it rewrites the file.
        return "the file is empty (an MCP config file is a JSON object)".into();
    }
    let (line, column) = (error.line(), error.column());
    let message = error.to_string();
    let what = message
        .strip_suffix(&format!(" at line {line} column {column}"))
        .unwrap_or(&message);
    // Column 0 is serde_json's "just after a line break", typically a file cut short after
    // its last newline: where the parser stood is the end of the line before.
    let position = if column == 0 && line > 1 {
        format!("the end of line {}", line - 1)
    } else {
        format!("line {line}, column {column}")
    };
    format!("invalid JSON at {position}: {what}")
}

fn parse_bytes(path: &Path, bytes: &[u8], env: &BTreeMap<String, String>) -> FileRead {
    let reject = |message: String| FileRead::Rejected(outcome_error(path, message));
    let document: Value = match serde_json::from_slice(bytes) {
        Ok(document) => document,
        Err(error) => return reject(json_error(bytes, &error)),
    };
    let Value::Object(document) = document else {
        return reject("the top level is not a JSON object".into());
    };
    let warning = ignored_keys_warning(&document);
    // A file-level error still reports the ignored keys: both are worth fixing.
    let reject = |message: String| {
        let mut outcome = outcome_error(path, message);
        outcome.warning = warning.clone();
        FileRead::Rejected(outcome)
    };
    let (key, servers) = match (document.get(MCP_SERVERS), document.get(VS_CODE_SERVERS)) {
        (Some(_), Some(_)) => {
            return reject(format!(
                "has both \"{MCP_SERVERS}\" and \"{VS_CODE_SERVERS}\"; keep one"
            ));
        }
        (Some(servers), None) => (MCP_SERVERS, servers),
        (None, Some(servers)) => (VS_CODE_SERVERS, servers),
        (None, None) => return reject(NO_SERVER_MAP.into()),
    };
    let Value::Object(servers) = servers else {
        return reject(format!("\"{key}\" is not an object"));
    };
    if let Some((name, _)) = servers.iter().find(|(_, entry)| !entry.is_object()) {
        return reject(format!(
            "server entry {} is not an object",
            quote_name(name)
        ));
    }

    let mut entries = Vec::new();
    let mut rejected = Vec::new();
    for (name, entry) in servers {
        let Value::Object(entry) = entry else {
            unreachable!("checked above")
        };
        match parse_entry(name, entry, env) {
            Ok((transport, always_load)) => entries.push(ServerEntry {
                name: name.clone(),
                transport,
                source: path.to_owned(),
                always_load,
                plugin: None,
            }),
            Err(reasons) => rejected.push(format!("{}: {}", quote_name(name), reasons.join(", "))),
        }
    }
    let error = (!rejected.is_empty()).then(|| {
        let noun = if rejected.len() == 1 {
            "entry"
        } else {
            "entries"
        };
        format!(
            "{} invalid server {noun}: {}",
            rejected.len(),
            rejected.join("; ")
        )
    });
    let outcome = (error.is_some() || warning.is_some()).then(|| ConfigFileOutcome {
        path: path.to_owned(),
        error,
        warning,
    });
    FileRead::Read(entries, outcome)
}

/// The top-level key Claude Code and Cursor write the server map under.
const MCP_SERVERS: &str = "mcpServers";
/// The top-level key VS Code writes the server map under.
const VS_CODE_SERVERS: &str = "servers";
/// The error for a file with neither key, `{}` included: it names what was expected.
const NO_SERVER_MAP: &str = "no \"mcpServers\" or \"servers\" object: an MCP config file maps \
     server names to entries under \"mcpServers\" (as Claude Code and Cursor write it) or \
     \"servers\" (as VS Code writes it)";
/// How many ignored keys a warning names; a file can hold many, the message stays short.
const IGNORED_KEYS_NAMED: usize = 8;

/// The warning for top-level keys other than the server map's (`$schema`, VS Code's
/// `inputs`): named and sorted. Ignored rather than rejected, since editors keep their own
/// settings beside the server map.
fn ignored_keys_warning(document: &Map<String, Value>) -> Option<String> {
    let mut ignored: Vec<&str> = document
        .keys()
        .map(String::as_str)
        .filter(|key| !matches!(*key, MCP_SERVERS | VS_CODE_SERVERS))
        .collect();
    if ignored.is_empty() {
        return None;
    }
    ignored.sort_unstable();
    let mut named: Vec<String> = ignored
        .iter()
        .take(IGNORED_KEYS_NAMED)
        .map(|key| quote_name(key))
        .collect();
    if ignored.len() > IGNORED_KEYS_NAMED {
        named.push(format!("{} more", ignored.len() - IGNORED_KEYS_NAMED));
    }
    let keys = match named.split_last() {
        Some((last, [])) => format!("key {last}"),
        Some((last, rest)) => format!("keys {} and {last}", rest.join(", ")),
        None => unreachable!("not empty"),
    };
    Some(format!(
        "ignored the top-level {keys} (only \"{MCP_SERVERS}\" or \"{VS_CODE_SERVERS}\" is read)"
    ))
}

/// Reads the files in order (each path once), drops later duplicates of a server name with a
/// warning on the later file, and returns the valid entries plus one outcome per file that
/// has something to say.
pub fn load_config_files(
    files: &[ConfigFile],
    env: &BTreeMap<String, String>,
) -> (Vec<ServerEntry>, Vec<ConfigFileOutcome>) {
    let loaded = load_config(files, env);
    (loaded.entries, loaded.outcomes)
}

/// What [`load_config`] read: the valid entries, one outcome per file that has something to
/// say, and the files that exist but were rejected whole (as given in `files`).
#[derive(Debug, Default)]
pub(crate) struct LoadedConfig {
    pub(crate) entries: Vec<ServerEntry>,
    pub(crate) outcomes: Vec<ConfigFileOutcome>,
    pub(crate) rejected: Vec<PathBuf>,
}

/// [`load_config_files`], also saying which files were rejected whole: the engine keeps
/// what such a file declared before, since a half-saved edit says nothing about removals.
pub(crate) fn load_config(files: &[ConfigFile], env: &BTreeMap<String, String>) -> LoadedConfig {
    let mut seen_paths = HashSet::new();
    let mut declared: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut entries = Vec::new();
    let mut outcomes = Vec::new();
    let mut rejected = Vec::new();
    for file in files {
        let path = &file.path;
        let identity = std::fs::canonicalize(path).unwrap_or_else(|_| path.clone());
        if !seen_paths.insert(identity) {
            continue;
        }
        let read = read_config_file(file, env);
        if matches!(read, FileRead::Rejected(_)) {
            rejected.push(path.clone());
        }
        let (file_entries, outcome) = read.into_parts();
        let mut duplicates = Vec::new();
        for entry in file_entries {
            if let Some(first) = declared.get(&entry.name) {
                duplicates.push(format!(
                    "server {} is already declared in {}; this declaration is ignored",
                    quote_name(&entry.name),
                    first.display()
                ));
                continue;
            }
            declared.insert(entry.name.clone(), path.clone());
            entries.push(entry);
        }
        let warning = (!duplicates.is_empty()).then(|| duplicates.join("; "));
        match (outcome, warning) {
            (Some(mut outcome), warning) => {
                // The file's own warning (ignored keys) comes first, then the duplicates.
                outcome.warning = match (outcome.warning.take(), warning) {
                    (Some(own), Some(duplicates)) => Some(format!("{own}; {duplicates}")),
                    (own, duplicates) => own.or(duplicates),
                };
                outcomes.push(outcome);
            }
            (None, Some(warning)) => outcomes.push(ConfigFileOutcome {
                path: path.clone(),
                error: None,
                warning: Some(warning),
            }),
            (None, None) => {}
        }
    }
    LoadedConfig {
        entries,
        outcomes,
        rejected,
    }
}

fn outcome_error(path: &Path, error: String) -> ConfigFileOutcome {
    ConfigFileOutcome {
        path: path.to_owned(),
        error: Some(error),
        warning: None,
    }
}

/// A name for messages: quoted and cut, since names can be long.
pub(crate) fn quote_name(name: &str) -> String {
    if name.len() <= NAME_QUOTE_BYTES {
        return format!("\"{name}\"");
    }
    let mut cut = NAME_QUOTE_BYTES;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("\"{}…\"", &name[..cut])
}

pub(crate) fn name_problems(name: &str) -> Vec<String> {
    let mut problems = Vec::new();
    if name.is_empty() {
        problems.push("empty name".to_owned());
    }
    if name.contains("__") {
        problems.push("name contains \"__\"".to_owned());
    }
    if name.starts_with('_') || name.ends_with('_') {
        problems.push("name starts or ends with \"_\"".to_owned());
    }
    if name.len() > MAX_SERVER_NAME_BYTES {
        problems.push(format!("name is longer than {MAX_SERVER_NAME_BYTES} bytes"));
    }
    problems
}

/// Expands variables in every value of one entry, collecting unset variables by name.
struct Expander<'a> {
    env: &'a BTreeMap<String, String>,
    missing: BTreeSet<String>,
}

impl Expander<'_> {
    /// `${VAR}` and `${VAR:-default}` (default when unset or empty); anything else is literal.
    fn expand(&mut self, input: &str) -> String {
        let mut out = String::with_capacity(input.len());
        let mut rest = input;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let Some(end) = after.find('}') else {
                out.push_str(&rest[start..]);
                return out;
            };
            let body = &after[..end];
            let (name, default) = match body.split_once(":-") {
                Some((name, default)) => (name, Some(default)),
                None => (body, None),
            };
            if !is_variable_name(name) {
                out.push_str(&rest[start..start + 2 + end + 1]);
            } else {
                match (self.env.get(name), default) {
                    (Some(value), Some(default)) if value.is_empty() => out.push_str(default),
                    (Some(value), _) => out.push_str(value),
                    (None, Some(default)) => out.push_str(default),
                    (None, None) => {
                        self.missing.insert(name.to_owned());
                    }
                }
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        out
    }
}

fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn string_field<'a>(
    entry: &'a Map<String, Value>,
    field: &str,
    problems: &mut Vec<String>,
) -> Option<&'a str> {
    match entry.get(field)? {
        Value::String(value) => Some(value),
        _ => {
            problems.push(format!("\"{field}\" is not a string"));
            None
        }
    }
}

/// An optional boolean: absent is `None`, anything but a boolean (`null` too) a problem.
fn bool_field(entry: &Map<String, Value>, field: &str, problems: &mut Vec<String>) -> Option<bool> {
    match entry.get(field)? {
        Value::Bool(value) => Some(*value),
        _ => {
            problems.push(format!("\"{field}\" is not a boolean"));
            None
        }
    }
}

fn string_map(
    entry: &Map<String, Value>,
    field: &str,
    problems: &mut Vec<String>,
) -> Vec<(String, String)> {
    match entry.get(field) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(map)) => map
            .iter()
            .filter_map(|(key, value)| match value {
                Value::String(value) => Some((key.clone(), value.clone())),
                _ => {
                    problems.push(format!("\"{field}\" value of {key:?} is not a string"));
                    None
                }
            })
            .collect(),
        Some(_) => {
            problems.push(format!("\"{field}\" is not an object"));
            Vec::new()
        }
    }
}

fn parse_entry(
    name: &str,
    entry: &Map<String, Value>,
    env: &BTreeMap<String, String>,
) -> Result<(TransportConfig, bool), Vec<String>> {
    let mut problems = name_problems(name);
    if name.contains('/') {
        problems
            .push("name contains \"/\", which only plugin servers (\"plugin/server\") have".into());
    }
    let mut expander = Expander {
        env,
        missing: BTreeSet::new(),
    };
    let command = string_field(entry, "command", &mut problems);
    let url = string_field(entry, "url", &mut problems);
    let kind = string_field(entry, "type", &mut problems);
    let always_load = bool_field(entry, "alwaysLoad", &mut problems).unwrap_or(false);

    let transport = match (kind, command, url) {
        (_, Some(_), Some(_)) => {
            problems.push("both \"command\" and \"url\" are set".into());
            None
        }
        (None, None, None) if !entry.contains_key("command") && !entry.contains_key("url") => {
            problems.push("neither \"command\" nor \"url\" is set".into());
            None
        }
        (Some("sse"), _, _) => {
            problems.push(
                "\"type\": \"sse\" is the legacy HTTP+SSE transport, which ctxsync does not \
                 speak (it speaks Streamable HTTP): use the server's Streamable HTTP endpoint \
                 with \"type\": \"http\""
                    .into(),
            );
            None
        }
        (Some("stdio"), None, _) => {
            problems.push("type \"stdio\" requires \"command\"".into());
            None
        }
        (Some("http" | "streamable-http"), _, None) => {
            problems.push("type \"http\" requires \"url\"".into());
            None
        }
        (Some(other), _, _) if !matches!(other, "stdio" | "http" | "streamable-http") => {
            problems.push(format!("unknown type {other:?}"));
            None
        }
        (_, Some(command), None) => {
            if entry.contains_key("oauth") {
                problems
                    .push("\"oauth\" is only for an HTTP server (an entry with \"url\")".into());
            }
            Some(stdio(entry, command, &mut expander, &mut problems))
        }
        (_, None, Some(url)) => Some(http(entry, url, &mut expander, &mut problems)),
        // A present but mistyped command/url was reported by string_field.
        (_, None, None) => None,
    };
    for variable in &expander.missing {
        problems.push(format!("variable {variable} is not set and has no default"));
    }
    match transport {
        Some(transport) if problems.is_empty() => Ok((transport, always_load)),
        _ => Err(problems),
    }
}

fn stdio(
    entry: &Map<String, Value>,
    command: &str,
    expander: &mut Expander<'_>,
    problems: &mut Vec<String>,
) -> TransportConfig {
    let command = expander.expand(command);
    if command.trim().is_empty() {
        problems.push("\"command\" is empty".into());
    }
    let args = match entry.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(args)) => args
            .iter()
            .filter_map(|arg| match arg {
                Value::String(arg) => Some(expander.expand(arg)),
                _ => {
                    problems.push("\"args\" contains a non-string".into());
                    None
                }
            })
            .collect(),
        Some(_) => {
            problems.push("\"args\" is not an array".into());
            Vec::new()
        }
    };
    let env = string_map(entry, "env", problems)
        .into_iter()
        .map(|(key, value)| (key, expander.expand(&value)))
        .collect();
    TransportConfig::Stdio { command, args, env }
}

fn http(
    entry: &Map<String, Value>,
    url: &str,
    expander: &mut Expander<'_>,
    problems: &mut Vec<String>,
) -> TransportConfig {
    let url = expander.expand(url);
    // Messages never quote the URL: it may carry credentials.
    match url::Url::parse(&url) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => {}
        Ok(_) => problems.push("\"url\" is not an http or https URL".into()),
        Err(error) => problems.push(format!("\"url\" is invalid: {error}")),
    }
    let mut headers = BTreeMap::new();
    for (name, value) in string_map(entry, "headers", problems) {
        let value = expander.expand(&value);
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            problems.push(format!("invalid header name {name:?}"));
        } else if http::HeaderValue::from_str(&value).is_err() {
            problems.push(format!("invalid value for header {name:?}"));
        }
        headers.insert(name, value);
    }
    let oauth = oauth(entry, expander, problems);
    TransportConfig::Http {
        url,
        headers,
        oauth,
    }
}

/// The entry's `oauth` block, if any; its problems in words.
fn oauth(
    entry: &Map<String, Value>,
    expander: &mut Expander<'_>,
    problems: &mut Vec<String>,
) -> Option<PreregisteredClient> {
    let block = match entry.get("oauth")? {
        Value::Object(block) => block,
        _ => {
            problems.push("\"oauth\" is not an object".into());
            return None;
        }
    };
    let mut found = Vec::new();
    let text = |field: &str, found: &mut Vec<String>| match block.get(field) {
        None | Some(Value::Null) => None,
        Some(Value::String(value)) => Some(value.clone()),
        Some(_) => {
            found.push(format!("\"oauth.{field}\" is not a string"));
            None
        }
    };
    let client_id = text("clientId", &mut found).map(|id| expander.expand(&id));
    let client_secret = text("clientSecret", &mut found).map(|secret| expander.expand(&secret));
    let scopes = match block.get("scopes") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(scopes)) => expander
            .expand(scopes)
            .split_whitespace()
            .map(str::to_owned)
            .collect(),
        Some(Value::Array(scopes)) => scopes
            .iter()
            .filter_map(|scope| match scope {
                Value::String(scope) => Some(expander.expand(scope)),
                _ => {
                    found.push("\"oauth.scopes\" contains a non-string".into());
                    None
                }
            })
            .collect(),
        Some(_) => {
            found.push(
                "\"oauth.scopes\" is neither a list of strings nor a space-separated string".into(),
            );
            Vec::new()
        }
    };
    let grant = match text("grant", &mut found).as_deref() {
        None | Some("authorization_code") => OAuthGrant::AuthorizationCode,
        Some("client_credentials") => OAuthGrant::ClientCredentials,
        Some(other) => {
            found.push(format!(
                "\"oauth.grant\" {other:?} is unknown (use \"authorization_code\" or \"client_credentials\")"
            ));
            OAuthGrant::AuthorizationCode
        }
    };
    let client_id = match client_id {
        Some(id) if !id.trim().is_empty() => Some(id),
        Some(_) => {
            found.push("\"oauth.clientId\" is empty".into());
            None
        }
        None if !block.contains_key("clientId") => {
            found.push("\"oauth\" needs \"clientId\"".into());
            None
        }
        None => None,
    };
    let client_secret = client_secret.filter(|secret| !secret.is_empty());
    if grant == OAuthGrant::ClientCredentials && client_secret.is_none() {
        found.push("\"oauth.grant\" \"client_credentials\" needs \"clientSecret\"".into());
    }
    let none_found = found.is_empty();
    problems.append(&mut found);
    Some(PreregisteredClient {
        client_id: client_id?,
        client_secret,
        scopes,
        grant,
    })
    .filter(|_| none_found)
}

#[cfg(test)]
mod tests;
