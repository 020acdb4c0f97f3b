//! The publication crate's integration tests, one binary.

mod support;

mod calls;
mod engine;
mod fuzz;
mod https;
mod properties;
mod publisher;
mod resolver;
mod watch_budget;
