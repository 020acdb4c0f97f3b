//! How a plugin's server is launched beyond its transport: its working directory, data
//! directory and allow-listed environment. Apart from the plugin scan so that `.mcp.json`
//! entries can carry it without the config parser and the plugin loader importing each other.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// Variables of the agent's environment a plugin's stdio server receives (besides the
/// entry's own `env` and the two plugin variables): the executable search path, the home
/// directory, locale, proxy and CA-bundle settings. Names starting `LC_` are locale too.
/// Nothing else, so the agent's token and the workspace's secrets stay with the agent.
pub const PLUGIN_ENV_ALLOW_LIST: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "LANGUAGE",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
];

/// The variable naming the plugin root in a plugin server's environment.
pub(crate) const PLUGIN_ROOT: &str = "PLUGIN_ROOT";
/// The variable naming the plugin's data directory in a plugin server's environment.
pub(crate) const PLUGIN_DATA: &str = "PLUGIN_DATA";

/// How a plugin's server is launched, beyond its transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginLaunch {
    /// The plugin's name.
    pub plugin: String,
    /// The resolved plugin root (`PLUGIN_ROOT`).
    pub root: PathBuf,
    /// The plugin's data directory (`PLUGIN_DATA`), created before the server starts.
    pub data_dir: PathBuf,
    /// The stdio server's working directory: the plugin root unless `cwd` says otherwise.
    pub cwd: PathBuf,
}

impl PluginLaunch {
    /// The stdio server's whole environment: the allow-listed part of `agent_env`, the
    /// entry's `env` over it, then the two plugin variables.
    pub(crate) fn environment(
        &self,
        agent_env: &BTreeMap<String, String>,
        entry_env: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        let mut env: BTreeMap<String, String> = agent_env
            .iter()
            .filter(|(name, _)| {
                PLUGIN_ENV_ALLOW_LIST.contains(&name.as_str()) || name.starts_with("LC_")
            })
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        env.extend(entry_env.iter().map(|(k, v)| (k.clone(), v.clone())));
        env.insert(PLUGIN_ROOT.into(), self.root.to_string_lossy().into_owned());
        env.insert(
            PLUGIN_DATA.into(),
            self.data_dir.to_string_lossy().into_owned(),
        );
        env
    }
}
