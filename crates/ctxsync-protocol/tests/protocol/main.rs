//! The protocol crate's integration tests, one binary.

mod codegen;
mod conversions;
mod digest;
mod fuzz;
mod validation;
