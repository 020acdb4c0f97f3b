//! Scripted exits, shared by the process around the server and the server's own handler;
//! apart so that the server does not import the process module that runs it.

use crate::config::FixtureConfig;

/// Whether a scripted exit should happen: always without a marker; with one, only for the
/// first process, which creates the marker.
pub(crate) fn should_exit(config: &FixtureConfig) -> bool {
    match config.exit_once_marker_path() {
        None => true,
        Some(marker) => std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(marker)
            .is_ok(),
    }
}
