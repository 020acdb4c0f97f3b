//! Dev-only and generated: this crate has no code. Its manifest (written by
//! `cargo xtask workspace-hack`) names every third-party package of the workspace with
//! the features the whole workspace turns on, behind the feature `unify`. Every member
//! takes it as a dev-dependency; with `--features ctxsync-workspace-hack/unify` (as
//! `cargo xtask test` passes it) each crate's test build resolves the same features and
//! reuses the same compiled dependencies instead of rebuilding tokio, rmcp and the C
//! libraries once per crate. Without the feature it is empty. It must never be a normal
//! dependency: a crate's own build, what an embedder gets, keeps exactly the features it
//! asks for.
