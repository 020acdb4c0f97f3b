//! Dev-only and generated: this crate has no code. Its manifest (written by
//! `cargo xtask workspace-hack`) names every third-party package of the workspace with
//! the features the whole workspace turns on, and every member takes it as a
//! dev-dependency, so each crate's test build (`cargo test -p NAME`) resolves the same
//! features and reuses the same compiled dependencies instead of rebuilding tokio, rmcp
//! and the C libraries once per crate. It must never be a normal dependency: a crate's
//! own build, what an embedder gets, keeps exactly the features it asks for.
