//! Tool calls, the first kind of routed request, as the chat API serves them and its
//! clients print them: `routes` (`POST`/`GET`/`DELETE …/tool-calls`, started through the
//! agent API's hub), `events` (the chat's `tool_call` events and the page's list),
//! `audit` (`GET /api/tool-calls`), and the `ctxsync call` and `ctxsync calls` commands
//! that call those routes. The next kinds of routed request get a module of their own
//! beside this one.

pub mod audit;
pub mod call_command;
pub(crate) mod events;
pub mod list_command;
pub(crate) mod routes;
