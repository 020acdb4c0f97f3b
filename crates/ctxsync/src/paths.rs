//! Where ctxsync keeps its files by default, and how a command picks its database.

use std::path::PathBuf;

use anyhow::{Context, Result};
use ctxsync_persistence::DatabaseConfig;

/// `$CTXSYNC_DATA_DIR`, else `$XDG_DATA_HOME/ctxsync`, else `~/.local/share/ctxsync`.
pub fn default_data_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CTXSYNC_DATA_DIR") {
        return dir.into();
    }
    if let Some(dir) = std::env::var_os("XDG_DATA_HOME") {
        return PathBuf::from(dir).join("ctxsync");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".local/share/ctxsync")
}

/// The database: PostgreSQL (or SQLite) by URL, else the embedded SQLite file in the data dir.
pub fn database(url: Option<&str>, data_dir: &std::path::Path) -> Result<DatabaseConfig> {
    match url {
        Some(url) => {
            DatabaseConfig::from_url(url).with_context(|| "invalid --database-url".to_string())
        }
        None => Ok(DatabaseConfig::sqlite_in(data_dir)),
    }
}
