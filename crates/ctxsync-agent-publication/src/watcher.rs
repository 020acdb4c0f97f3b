//! Watches the directories a resolve read from (non-recursively, with `notify`) and turns
//! bursts of relevant events into one debounced "something changed".
//!
//! A lost watch costs latency, never correctness: when the platform watcher cannot start,
//! or some wanted directory cannot be watched (the watch budget or the system's inotify
//! limit is reached, permission, other I/O), the watcher keeps the watches it has, also
//! polls at the poll interval, and says why in a note the publisher puts on snapshots.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ctxsync_protocol::encoded_size::truncate_to_boundary;
use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecursiveMode, Watcher as _};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep, timeout};

use crate::scan::WatchSet;

/// The default quiet period after the last relevant event before resolving.
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(250);
/// A burst never delays a resolve by more than this many debounce periods.
const MAX_DEBOUNCE_PERIODS: u32 = 8;
/// Bound on the detail of one failure (a path and an OS error) quoted in the note.
const MAX_FAILURE_DETAIL_BYTES: usize = 512;

/// Access events other than "closed after writing": the resolver's own reads cause them.
fn is_read_only_access(kind: &EventKind) -> bool {
    matches!(kind, EventKind::Access(access) if *access != AccessKind::Close(AccessMode::Write))
}

/// Why one `watch` call failed, as far as degrading goes.
#[derive(Debug, PartialEq, Eq)]
enum WatchFailure {
    /// The directory does not exist (yet); its parent is watched, so nothing is missed.
    Missing,
    /// The system's limit on watches is reached: further directories would fail too.
    LimitReached,
    /// Permission or another I/O error: changes there would be missed.
    Other,
}

fn classify(error: &notify::Error) -> WatchFailure {
    match &error.kind {
        notify::ErrorKind::PathNotFound => WatchFailure::Missing,
        notify::ErrorKind::Io(e) if e.kind() == std::io::ErrorKind::NotFound => {
            WatchFailure::Missing
        }
        notify::ErrorKind::MaxFilesWatch => WatchFailure::LimitReached,
        _ => WatchFailure::Other,
    }
}

/// What one update could not watch, and why.
#[derive(Debug, Default)]
struct Shortfall {
    wanted: usize,
    watched: usize,
    budget: usize,
    limit_reached: bool,
    failed: usize,
    first_failure: Option<String>,
}

impl Shortfall {
    /// The note for snapshots, or `None` when every wanted directory that exists is watched.
    fn note(&self, poll_interval: Duration) -> Option<String> {
        let mut reasons = Vec::new();
        if self.wanted > self.budget {
            reasons.push(format!(
                "{} directories exceed the watch budget of {}",
                self.wanted, self.budget
            ));
        }
        if self.limit_reached {
            reasons.push(format!(
                "the inotify watch limit (fs.inotify.max_user_watches) was reached after {} directories",
                self.watched
            ));
        }
        if self.failed > 0 {
            reasons.push(format!(
                "{} directories could not be watched (first: {})",
                self.failed,
                self.first_failure.as_deref().unwrap_or("unknown")
            ));
        }
        (!reasons.is_empty()).then(|| {
            format!(
                "watching context files: {}; {} of {} directories are watched, changes elsewhere are found by polling every {}",
                reasons.join("; "),
                self.watched,
                self.wanted,
                describe_interval(poll_interval)
            )
        })
    }
}

/// "2 s", "1500 ms".
fn describe_interval(interval: Duration) -> String {
    if interval.subsec_nanos() == 0 && interval.as_secs() > 0 {
        format!("{} s", interval.as_secs())
    } else {
        format!("{} ms", interval.as_millis())
    }
}

pub(crate) struct FileWatcher {
    watcher: Option<notify::RecommendedWatcher>,
    /// The set the event callback filters with (shared with notify's thread).
    filter: Arc<Mutex<WatchSet>>,
    watched: BTreeSet<PathBuf>,
    events: mpsc::Receiver<()>,
    poll_interval: Duration,
    /// Most directories watched at once.
    budget: usize,
    /// Why some changes are found only by polling; `None` while everything is watched.
    degraded: Option<String>,
}

impl FileWatcher {
    pub(crate) fn new(poll_interval: Duration, budget: usize) -> Self {
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
        let (watcher, degraded) = match notify::recommended_watcher(handler) {
            Ok(watcher) => (Some(watcher), None),
            Err(e) => {
                let note = format!(
                    "watching context files: the platform file watcher could not start ({}); changes are found by polling every {}",
                    truncate_to_boundary(&e.to_string(), MAX_FAILURE_DETAIL_BYTES),
                    describe_interval(poll_interval)
                );
                tracing::warn!("{note}");
                (None, Some(note))
            }
        };
        Self {
            watcher,
            filter,
            watched: BTreeSet::new(),
            events,
            poll_interval,
            budget,
            degraded,
        }
    }

    /// Why some changes are found only by polling (for the snapshot error), if they are.
    pub(crate) fn degraded(&self) -> Option<&str> {
        self.degraded.as_deref()
    }

    /// Watches the directories of `set`, shallowest first (scan roots and skill containers
    /// before single skills), up to the budget. Returns true when a directory is watched
    /// that was not before: changes made there before the watch began may have been missed,
    /// so the caller resolves once more.
    pub(crate) fn update(&mut self, set: WatchSet) -> bool {
        let mut wanted: Vec<PathBuf> = set.dirs.keys().cloned().collect();
        *self.filter.lock().unwrap_or_else(|p| p.into_inner()) = set;
        let Some(watcher) = self.watcher.as_mut() else {
            return false;
        };
        // A directory that does not exist (yet) needs no watch: its parent is watched.
        wanted.retain(|dir| self.watched.contains(dir) || dir.exists());
        // Stable: path order within one depth.
        wanted.sort_by_key(|dir| dir.components().count());
        let mut shortfall = Shortfall {
            wanted: wanted.len(),
            budget: self.budget,
            ..Shortfall::default()
        };
        wanted.truncate(self.budget);
        let keep: BTreeSet<&PathBuf> = wanted.iter().collect();
        let gone: Vec<PathBuf> = self
            .watched
            .iter()
            .filter(|dir| !keep.contains(dir))
            .cloned()
            .collect();
        // Unwatch first: that frees watches for the new directories.
        for dir in gone {
            let _ = watcher.unwatch(&dir);
            self.watched.remove(&dir);
        }
        let mut grew = false;
        for dir in &wanted {
            if self.watched.contains(dir) {
                continue;
            }
            match watcher.watch(dir, RecursiveMode::NonRecursive) {
                Ok(()) => {
                    self.watched.insert(dir.clone());
                    grew = true;
                }
                Err(e) => match classify(&e) {
                    WatchFailure::Missing => {
                        tracing::debug!(dir = %dir.display(), "not watching: does not exist");
                    }
                    WatchFailure::LimitReached => {
                        shortfall.limit_reached = true;
                        break;
                    }
                    WatchFailure::Other => {
                        shortfall.failed += 1;
                        shortfall.first_failure.get_or_insert_with(|| {
                            let detail = format!("{}: {e}", dir.display());
                            truncate_to_boundary(&detail, MAX_FAILURE_DETAIL_BYTES).to_owned()
                        });
                    }
                },
            }
        }
        shortfall.watched = self.watched.len();
        let note = shortfall.note(self.poll_interval);
        if note != self.degraded {
            match &note {
                Some(note) => tracing::warn!("{note}"),
                None => tracing::info!(
                    watched = shortfall.watched,
                    "watching every context directory again; polling stopped"
                ),
            }
            self.degraded = note;
        }
        grew
    }

    /// Completes after a relevant change once `debounce` has passed with no further event,
    /// or after the poll interval while some changes can only be found by polling.
    pub(crate) async fn changed(&mut self, debounce: Duration) {
        if self.watcher.is_none() {
            sleep(self.poll_interval).await;
            return;
        }
        let poll = self.degraded.is_some().then_some(self.poll_interval);
        let event = async {
            if self.events.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        };
        let polled = match poll {
            Some(interval) => tokio::select! {
                () = event => false,
                () = sleep(interval) => true,
            },
            None => {
                event.await;
                false
            }
        };
        if polled {
            // The resolve that follows covers any event already queued.
            while self.events.try_recv().is_ok() {}
            return;
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

    #[test]
    fn only_a_missing_directory_is_not_a_failure() {
        let check = |error: notify::Error, expect: WatchFailure| {
            assert_eq!(classify(&error), expect, "{error:?}");
        };
        check(notify::Error::path_not_found(), WatchFailure::Missing);
        check(
            notify::Error::io(std::io::ErrorKind::NotFound.into()),
            WatchFailure::Missing,
        );
        check(
            notify::Error::new(notify::ErrorKind::MaxFilesWatch),
            WatchFailure::LimitReached,
        );
        check(
            notify::Error::io(std::io::ErrorKind::PermissionDenied.into()),
            WatchFailure::Other,
        );
        check(notify::Error::generic("boom"), WatchFailure::Other);
    }

    #[test]
    fn notes_say_why_and_how_often() {
        let poll = Duration::from_secs(2);
        let check = |shortfall: Shortfall, expect: Option<&str>| {
            assert_eq!(shortfall.note(poll).as_deref(), expect);
        };
        check(
            Shortfall {
                wanted: 3,
                watched: 3,
                budget: 3,
                ..Shortfall::default()
            },
            None,
        );
        check(
            Shortfall {
                wanted: 600,
                watched: 20,
                budget: 20,
                ..Shortfall::default()
            },
            Some(
                "watching context files: 600 directories exceed the watch budget of 20; \
                 20 of 600 directories are watched, changes elsewhere are found by polling every 2 s",
            ),
        );
        check(
            Shortfall {
                wanted: 600,
                watched: 41,
                budget: 8192,
                limit_reached: true,
                failed: 2,
                first_failure: Some("/w/skills/a: permission denied".into()),
            },
            Some(
                "watching context files: the inotify watch limit (fs.inotify.max_user_watches) \
                 was reached after 41 directories; 2 directories could not be watched (first: \
                 /w/skills/a: permission denied); 41 of 600 directories are watched, changes \
                 elsewhere are found by polling every 2 s",
            ),
        );
        assert_eq!(describe_interval(Duration::from_millis(1500)), "1500 ms");
        assert_eq!(describe_interval(Duration::ZERO), "0 ms");
    }

    /// A real watcher on real directories: over the budget it degrades, shallowest
    /// directories first; within it, everything is watched and the note clears.
    #[test]
    fn the_budget_degrades_and_recovers() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let mut set = WatchSet::default();
        set.any(root.clone());
        for name in ["a", "b", "c"] {
            let deep = root.join("skills").join(name);
            std::fs::create_dir_all(&deep).unwrap();
            set.any(deep);
        }
        set.any(root.join("skills"));
        set.any(root.join("does-not-exist"));

        let mut watcher = FileWatcher::new(Duration::from_secs(2), 3);
        assert!(watcher.update(set.clone()));
        let expected: BTreeSet<PathBuf> =
            [root.clone(), root.join("skills"), root.join("skills/a")]
                .into_iter()
                .collect();
        assert_eq!(watcher.watched, expected);
        let note = watcher.degraded().expect("degraded over the budget");
        assert!(
            note.contains("5 directories exceed the watch budget of 3"),
            "{note}"
        );

        set.dirs.remove(&root.join("skills/a"));
        set.dirs.remove(&root.join("skills/b"));
        assert!(watcher.update(set), "skills/c is watched now");
        let expected: BTreeSet<PathBuf> =
            [root.clone(), root.join("skills"), root.join("skills/c")]
                .into_iter()
                .collect();
        assert_eq!(watcher.watched, expected);
        assert_eq!(watcher.degraded(), None);
    }
}
