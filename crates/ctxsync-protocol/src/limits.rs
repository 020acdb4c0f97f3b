//! The wire limits of SPEC §4, public so the agent bounds itself with the same numbers
//! the server enforces.

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

/// The longest prefix of `text` that fits in `max_bytes` and ends on a UTF-8 boundary.
pub fn truncate_to_boundary(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_whole_characters() {
        let check = |text: &str, max: usize, expect: &str| {
            assert_eq!(
                truncate_to_boundary(text, max),
                expect,
                "{text:?} to {max} bytes"
            )
        };
        check("abc", 3, "abc");
        check("abc", 2, "ab");
        check("aé", 2, "a"); // é is two bytes
        check("aé", 3, "aé");
        check("€€", 5, "€"); // € is three bytes
        check("", 0, "");
    }
}
