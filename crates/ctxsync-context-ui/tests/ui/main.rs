//! The context UI's integration tests, one binary.

mod build;
mod calls;
mod render;
