//! Dev-only helpers shared by the workspace's integration tests; a dev-dependency only
//! (`cargo xtask layers` rejects any other kind of dependency on it).
//!
//! Owns: the helpers more than one crate's tests need, so each is written once. Always
//! built: [`TestBackend`] and [`on_both_backends!`], the bounded [`poll`]er, the temp
//! [`Workspace`], the [`heavy`] and [`timing_bound`] guards, [`golden`]'s tool list
//! (the one literal the digest and the published rows' golden vectors share) and
//! [`assert_in_words`], the check that a user-facing error has no Rust notation. Behind
//! features: `db` (`store`, a fresh test database per backend, `push_accepted` and
//! `start_run`), `process` (log files, pid liveness and the server's announced addresses
//! for child processes), `protocol` (builders of resources and snapshots), `bench` (the
//! benchmark examples' row format) and `tls` (a test certificate authority).
//!
//! Must never: be a normal or build dependency of any crate (its helpers would ship in a
//! binary); pull in a database without the `db` feature, so crates below persistence test
//! without one; poll without a deadline (every [`poll`] has one and says what it awaited
//! when it runs out); share a database between tests (each `store` is a fresh one).

#![allow(missing_docs)] // test helpers: each item's doc says what it is for where it helps

mod backend;
#[cfg(feature = "bench")]
mod bench;
#[cfg(feature = "db")]
mod db;
pub mod golden;
mod heavy;
mod poll;
#[cfg(feature = "process")]
mod process;
#[cfg(feature = "protocol")]
pub mod pushed;
#[cfg(feature = "protocol")]
mod resources;
#[cfg(feature = "tls")]
mod tls;
mod words;
mod workspace;

pub use backend::TestBackend;
#[cfg(feature = "bench")]
pub use bench::{bench_row, bench_row_against};
#[cfg(feature = "db")]
pub use db::{push_accepted, start_run, store};
pub use heavy::{HeavyTest, TimingBound, heavy, timing_bound};
pub use poll::{Poll, TimedOut, poll};
#[cfg(feature = "process")]
pub use process::{Logs, ServerAddress, process_alive, server_address};
#[cfg(feature = "protocol")]
pub use resources::{bench_servers, jira_details, mcp_server, mcp_tool, pending_servers, snapshot};
#[cfg(feature = "tls")]
pub use tls::TestCa;
pub use words::{assert_in_words, is_in_words};
pub use workspace::Workspace;

/// Runs each `async fn $name(x: T)` once per backend, as the tests `$name::sqlite` and
/// `$name::postgres`. `open` is an `async fn(TestBackend) -> Option<T>`; `None` (PostgreSQL
/// unreachable where that may be skipped, see persistence's `test_support`) skips the
/// run. The attribute given first is each generated test's attribute (e.g.
/// `#[tokio::test]` or a multi-threaded one).
///
/// ```ignore
/// ctxsync_test_support::on_both_backends! {
///     #[tokio::test]
///     open = ctxsync_test_support::store;
///     reads_back_what_it_wrote, forgets_a_removed_agent,
/// }
/// ```
#[macro_export]
macro_rules! on_both_backends {
    (#[$test:meta] open = $open:expr; $($name:ident),* $(,)?) => {$(
        mod $name {
            // The caller's `open` path and helpers are named as in the calling module.
            #[allow(unused_imports)]
            use super::*;

            #[$test]
            async fn sqlite() {
                if let Some(world) = ($open)($crate::TestBackend::Sqlite).await {
                    super::$name(world).await;
                }
            }

            #[$test]
            async fn postgres() {
                if let Some(world) = ($open)($crate::TestBackend::Postgres).await {
                    super::$name(world).await;
                }
            }
        }
    )*};
}
