//! Watches the directories a resolve read from (non-recursively, with `notify`) and turns
//! bursts of relevant events into one debounced "something changed".
//!
//! When the platform watcher cannot start (e.g. the inotify limit is reached) the
//! publisher falls back to polling, so a lost watcher costs latency, never correctness.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode, Watcher as _};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep, timeout};

use crate::scan::WatchSet;

/// The default quiet period after the last relevant event before resolving.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(250);
/// A burst never delays a resolve by more than this many debounce periods.
const MAX_DEBOUNCE_PERIODS: u32 = 8;

/// Access events other than "closed after writing": the resolver's own reads cause them.
fn is_read_only_access(kind: &EventKind) -> bool {
    matches!(kind, EventKind::Access(access) if *access != AccessKind::Close(AccessMode::Write))
}

pub(crate) struct FileWatcher {
    watcher: Option<notify::RecommendedWatcher>,
    /// The set the event callback filters with (shared with notify's thread).
    filter: Arc<Mutex<WatchSet>>,
    watched: BTreeSet<PathBuf>,
    events: mpsc::Receiver<()>,
    poll_interval: Duration,
}

impl FileWatcher {
    pub(crate) fn new(poll_interval: Duration) -> Self {
        let (tx, events) = mpsc::channel(1);
        let filter = Arc::new(Mutex::new(WatchSet::default()));
        let callback_filter = filter.clone();
        let handler = move |event: notify::Result<notify::Event>| {
            let relevant = match &event {
                // An error may mean lost events: resolve to be safe.
                Err(_) => true,
                Ok(event) if event.need_rescan() => true,
                // Opening and reading (our own resolves do both) change nothing; a file
                // closed after writing does.
                Ok(event) if is_read_only_access(&event.kind) => false,
                Ok(event) if event.paths.is_empty() => true,
                Ok(event) => {
                    let filter = callback_filter.lock().unwrap_or_else(|p| p.into_inner());
                    event.paths.iter().any(|p| filter.matches(p))
                }
            };
            if relevant {
                // A full channel already holds "something changed".
                let _ = tx.try_send(());
            }
        };
        let watcher = match notify::recommended_watcher(handler) {
            Ok(watcher) => Some(watcher),
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    poll_interval = ?poll_interval,
                    "cannot watch context files; polling for changes instead"
                );
                None
            }
        };
        Self {
            watcher,
            filter,
            watched: BTreeSet::new(),
            events,
            poll_interval,
        }
    }

    /// Watches exactly the directories of `set`. Returns true when a directory is watched
    /// that was not before: changes made there before the watch began may have been missed,
    /// so the caller resolves once more.
    pub(crate) fn update(&mut self, set: WatchSet) -> bool {
        let wanted: BTreeSet<PathBuf> = set.dirs.keys().cloned().collect();
        *self.filter.lock().unwrap_or_else(|p| p.into_inner()) = set;
        let Some(watcher) = self.watcher.as_mut() else {
            return false;
        };
        for gone in self
            .watched
            .difference(&wanted)
            .cloned()
            .collect::<Vec<_>>()
        {
            let _ = watcher.unwatch(&gone);
            self.watched.remove(&gone);
        }
        let mut grew = false;
        for dir in wanted.difference(&self.watched.clone()) {
            match watcher.watch(dir, RecursiveMode::NonRecursive) {
                Ok(()) => {
                    self.watched.insert(dir.clone());
                    grew = true;
                }
                // Usually a directory that does not exist (yet); its parent is watched.
                Err(e) => tracing::debug!(dir = %dir.display(), error = %e, "not watching"),
            }
        }
        grew
    }

    /// Completes after a relevant change once `debounce` has passed with no further event
    /// (or after the poll interval, without a platform watcher).
    pub(crate) async fn changed(&mut self, debounce: Duration) {
        if self.watcher.is_none() {
            sleep(self.poll_interval).await;
            return;
        }
        if self.events.recv().await.is_none() {
            std::future::pending::<()>().await;
        }
        let give_up = Instant::now() + debounce * MAX_DEBOUNCE_PERIODS;
        while Instant::now() < give_up {
            match timeout(debounce, self.events.recv()).await {
                Ok(Some(())) => continue,
                Ok(None) | Err(_) => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, ModifyKind};

    #[test]
    fn reads_are_not_changes() {
        assert!(is_read_only_access(&EventKind::Access(AccessKind::Open(
            AccessMode::Any
        ))));
        assert!(is_read_only_access(&EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
        assert!(!is_read_only_access(&EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
        assert!(!is_read_only_access(&EventKind::Modify(ModifyKind::Any)));
        assert!(!is_read_only_access(&EventKind::Create(CreateKind::File)));
    }
}
