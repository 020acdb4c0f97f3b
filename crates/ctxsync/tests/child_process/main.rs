//! The binary crate's end-to-end tests that run the server and agent as child
//! processes, one binary.

mod processes;

mod agent;
mod canary;
mod cli;
mod faults;
mod hostile_input;
mod hostile_traffic;
mod liveness;
mod quick_tour;
mod sign_in;
mod tls;
mod tool_calls;
