//! Tool calls as stored: the first kind of routed request (a request a chat makes that
//! runs in the agent process). `admission` stores a turn's calls and their ends;
//! `routing` is the cross-replica side: stream leases, claims and the sweep, each a
//! compare-and-set. The next kinds (a sign-in exchange, a prompt, a resource read) sit
//! beside this module and share its leases.

pub(crate) mod admission;
pub(crate) mod routing;
