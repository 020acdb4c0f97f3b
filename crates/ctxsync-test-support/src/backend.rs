//! Which database backend a test runs on.

/// Which database backend a test runs on. Not persistence's `Backend`: this one is built
/// without a database (crates below persistence use it), and names only what a test
/// picks, with [`Self::ALL`] to run on each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestBackend {
    Sqlite,
    Postgres,
}

impl TestBackend {
    /// Both backends, SQLite first.
    pub const ALL: [Self; 2] = [Self::Sqlite, Self::Postgres];
}
