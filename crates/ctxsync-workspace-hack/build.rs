//! Empty on purpose: Cargo resolves a crate's `[build-dependencies]` (here, the host-side
//! half of the unified features) only when the crate has a build script.

fn main() {}
