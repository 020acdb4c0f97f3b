//! Watching config files: parent directories with `notify`, filtered to the files, debounced
//! by the engine; and a slow poll of the same files for what a watch cannot see.

use std::{
    collections::BTreeSet,
    os::unix::fs::MetadataExt,
    path::PathBuf,
    sync::Arc,
    time::{Duration, SystemTime},
};

use notify::{EventKind, RecursiveMode, Watcher, event::AccessKind, event::AccessMode};
use tokio::{sync::mpsc, task::JoinHandle};

/// What the watch and the poll send when a file changed: the receiver's own message type
/// converts from it, so this module needs none of the engine's types.
#[derive(Debug)]
pub(crate) struct FilesChanged;

/// Starts watching the directories of `files`; events about those files become
/// [`FilesChanged`] messages. The sender is weak so that the watcher (owned by the engine's
/// actor) never keeps the actor alive after the last `Engine` handle is dropped. Returns `None` (watching off) when no watcher can be created.
pub(crate) fn watch_files<M: From<FilesChanged> + Send + 'static>(
    files: &[PathBuf],
    commands: mpsc::WeakUnboundedSender<M>,
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
            let _ = commands.send(M::from(FilesChanged));
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

/// What `stat` tells of a config file that a change would alter.
#[derive(Debug, PartialEq, Eq)]
enum Stamp {
    Present {
        len: u64,
        modified: Option<SystemTime>,
        inode: u64,
        changed: (i64, i64),
    },
    Missing(std::io::ErrorKind),
}

fn stamps(files: &[PathBuf]) -> Vec<(PathBuf, Stamp)> {
    files
        .iter()
        .map(|file| {
            (
                file.clone(),
                match std::fs::metadata(file) {
                    Ok(meta) => Stamp::Present {
                        len: meta.len(),
                        modified: meta.modified().ok(),
                        inode: meta.ino(),
                        changed: (meta.ctime(), meta.ctime_nsec()),
                    },
                    Err(error) => Stamp::Missing(error.kind()),
                },
            )
        })
        .collect()
}

/// The poll task; dropping it stops the poll.
#[derive(Debug)]
pub(crate) struct Poller(JoinHandle<()>);

impl Drop for Poller {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Checks the paths `files` lists every `interval` (listed anew each time) and sends [`FilesChanged`] when what `stat`
/// says of one differs. A watch misses changes in a directory that did not exist when it
/// was set, or beyond the system's watch limit; this catches them late but surely. The
/// first stamps are taken now, before the engine's first read.
pub(crate) fn poll_files<M: From<FilesChanged> + Send + 'static>(
    files: impl Fn() -> Vec<PathBuf> + Send + Sync + 'static,
    interval: Duration,
    commands: mpsc::WeakUnboundedSender<M>,
) -> Poller {
    let files = Arc::new(files);
    let mut last = stamps(&files());
    // A zero period would spin; tokio refuses it anyway.
    let interval = interval.max(Duration::from_millis(10));
    Poller(tokio::spawn(async move {
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let files = files.clone();
            // `stat` may block (a network file system); keep it off the runtime threads.
            let Ok(now) = tokio::task::spawn_blocking(move || stamps(&files())).await else {
                return;
            };
            let Some(commands) = commands.upgrade() else {
                return; // the engine is gone
            };
            if now != last {
                last = now;
                let _ = commands.send(M::from(FilesChanged));
            }
        }
    }))
}
