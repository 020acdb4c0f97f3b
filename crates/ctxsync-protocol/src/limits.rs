//! The wire limits of SPEC §4, public so the agent bounds itself with the same numbers
//! the server enforces. Numbers only: the bottom of the crate's layering, importing
//! nothing (what the sizes are measured in is [`encoded_size`](crate::encoded_size)).

/// Most resources one snapshot may carry.
pub const MAX_RESOURCES: usize = 1000;
/// Largest encoded body of one resource.
pub const MAX_BODY_BYTES: usize = 256 * 1024;
/// Largest sum of all encoded bodies in one snapshot.
pub const MAX_TOTAL_BODY_BYTES: usize = 4 * 1024 * 1024;
/// Longest `source` and `source_path`.
pub const MAX_SOURCE_BYTES: usize = 1024;
/// Longest `error` of a resource and `snapshot_error`.
pub const MAX_ERROR_BYTES: usize = 4096;
/// Longest `content_hash` and `aggregate_hash`.
pub const MAX_HASH_BYTES: usize = 64;
/// Longest `agent_run_id`.
pub const MAX_RUN_ID_BYTES: usize = 64;
/// Longest `Startup.version` (not in SPEC §4; bounded so a row never grows unbounded).
pub const MAX_AGENT_VERSION_BYTES: usize = 256;
/// Longest `Startup.expanded_directory` (not in SPEC §4; bounded like a path).
pub const MAX_DIRECTORY_BYTES: usize = 4096;
/// Most servers `mcp_discovery.pending_servers` may name (one per possible resource).
pub const MAX_PENDING_SERVERS: usize = MAX_RESOURCES;
/// Longest tool `title` and annotation `title`.
pub const MAX_TOOL_TITLE_BYTES: usize = 1024;
/// Most icons one tool may carry.
pub const MAX_ICONS_PER_TOOL: usize = 8;
/// Longest icon `src`: room for a small `data:` URI, not for an image gallery.
pub const MAX_ICON_SRC_BYTES: usize = 16 * 1024;
/// Longest icon `mime_type`, `theme` and each of its `sizes`.
pub const MAX_ICON_FIELD_BYTES: usize = 128;
/// Most `sizes` entries of one icon.
pub const MAX_ICON_SIZES: usize = 8;
/// Longest JSON text of a tool's `meta`.
pub const MAX_TOOL_META_BYTES: usize = 16 * 1024;
/// Longest `protocol_version` of a server.
pub const MAX_PROTOCOL_VERSION_BYTES: usize = 64;
/// Longest server info `name`, `version` and `title`.
pub const MAX_SERVER_INFO_BYTES: usize = 256;
/// Longest server info `description`.
pub const MAX_SERVER_DESCRIPTION_BYTES: usize = 1024;
/// Longest server `instructions`.
pub const MAX_INSTRUCTIONS_BYTES: usize = 8 * 1024;
/// Largest `version` and `size_bytes`: they are stored as signed 64-bit integers.
pub const MAX_COUNTER: u64 = i64::MAX as u64;
