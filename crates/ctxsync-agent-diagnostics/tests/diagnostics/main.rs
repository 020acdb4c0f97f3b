//! The diagnostics engine's integration tests, one binary: each module was its own test binary before.

mod support;

mod engine;
mod fuzz;
mod hostile;
mod lifecycle;
mod loose_ends;
mod plugins;
mod sign_in;
mod third_party;
mod tool_calls;
mod transport;
