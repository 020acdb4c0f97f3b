//! Watching config files: parent directories with `notify`, filtered to the files, debounced
//! by the engine.

use std::{collections::BTreeSet, path::PathBuf};

use notify::{EventKind, RecursiveMode, Watcher, event::AccessKind, event::AccessMode};
use tokio::sync::mpsc;

use crate::engine::Command;

/// Starts watching the directories of `files`; events about those files become
/// [`Command::FilesChanged`]. The sender is weak so that the watcher (owned by the engine's
/// actor) never keeps the actor alive after the last `Engine` handle is dropped. Returns `None` (watching off) when no watcher can be created.
pub(crate) fn watch_files(
    files: &[PathBuf],
    commands: mpsc::WeakUnboundedSender<Command>,
) -> Option<notify::RecommendedWatcher> {
    let wanted: BTreeSet<PathBuf> = files.iter().cloned().collect();
    let handler = move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        // Our own reads (open, close-without-write) must not trigger reloads.
        let relevant = match event.kind {
            EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_) => true,
            EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
            EventKind::Access(_) | EventKind::Any | EventKind::Other => false,
        };
        if relevant
            && event.paths.iter().any(|path| wanted.contains(path))
            && let Some(commands) = commands.upgrade()
        {
            // The engine is gone only while shutting down.
            let _ = commands.send(Command::FilesChanged);
        }
    };
    let mut watcher = match notify::recommended_watcher(handler) {
        Ok(watcher) => watcher,
        Err(error) => {
            tracing::warn!(%error, "cannot watch MCP config files; changes need an explicit reload");
            return None;
        }
    };
    let directories: BTreeSet<PathBuf> = files
        .iter()
        .filter_map(|file| file.parent().map(PathBuf::from))
        .collect();
    for directory in directories {
        // A directory that does not exist yet cannot be watched; its files are still read.
        if let Err(error) = watcher.watch(&directory, RecursiveMode::NonRecursive) {
            tracing::debug!(%error, directory = %directory.display(), "not watching");
        }
    }
    Some(watcher)
}
