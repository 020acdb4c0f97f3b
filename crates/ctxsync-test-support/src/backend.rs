//! Which database backend a test runs on.

/// Which database backend a test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// Both backends, SQLite first.
    pub const ALL: [Self; 2] = [Self::Sqlite, Self::Postgres];
}
