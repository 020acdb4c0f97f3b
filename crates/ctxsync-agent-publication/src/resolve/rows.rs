//! What every row of a snapshot shares, whichever job made it: its wire size, whether it
//! carries content, how it is excluded or flagged for a source over the limit, and errors
//! bounded to the wire's limit.

use ctxsync_protocol::encoded_size::{encoded_body_len, truncate_to_boundary};
use ctxsync_protocol::limits::{MAX_ERROR_BYTES, MAX_SOURCE_BYTES};
use ctxsync_protocol::{
    InstructionFileBody, McpServerBody, Resource, ResourceBody, ResourceStatus, SkillBody,
};

use crate::hash::Canonical;
use crate::scan::Kind;

pub(super) const TRUNCATED: &str = "... [truncated]";

/// The body's size as the server measures it.
pub(super) fn wire_body_len(body: &ResourceBody) -> usize {
    encoded_body_len(body)
}

pub(super) fn has_content(row: &Resource) -> bool {
    row.status == ResourceStatus::Ok
        && matches!(
            row.body,
            ResourceBody::InstructionFile(_) | ResourceBody::Skill(_)
        )
}

/// The body a row of this kind carries when it carries no content.
pub(super) fn empty_body(kind: &Kind) -> ResourceBody {
    match kind {
        Kind::Instruction => ResourceBody::InstructionFile(InstructionFileBody::default()),
        Kind::McpConfig => ResourceBody::McpConfig,
        Kind::Skill { dir_name } => ResourceBody::Skill(SkillBody {
            name: dir_name.clone(),
            ..Default::default()
        }),
        Kind::EscapingSkillContainer => ResourceBody::Skill(SkillBody::default()),
    }
}

/// Marks a row `EXCLUDED`: its content is dropped, its hash and size stay.
pub(super) fn exclude(row: &mut Resource, reason: &str) {
    row.status = ResourceStatus::Excluded;
    row.error = Some(reason.to_owned());
    row.body = match &row.body {
        ResourceBody::InstructionFile(_) => {
            ResourceBody::InstructionFile(InstructionFileBody::default())
        }
        ResourceBody::Skill(body) => ResourceBody::Skill(SkillBody {
            name: body.name.clone(),
            ..Default::default()
        }),
        ResourceBody::McpConfig => ResourceBody::McpConfig,
        ResourceBody::McpServer(body) => ResourceBody::McpServer(McpServerBody {
            server_name: body.server_name.clone(),
            ..Default::default()
        }),
    };
}

/// A row whose source (or path) is over the wire limit: the path is dropped, and a source
/// over the limit is shortened to a unique stand-in and the row flagged `INVALID` without
/// content. Returns the flagged row, or `None` when the source fits.
pub(super) fn flag_long_source(row: &mut Resource) -> Option<Resource> {
    if row
        .source_path
        .as_ref()
        .is_some_and(|p| p.len() > MAX_SOURCE_BYTES)
    {
        row.source_path = None;
    }
    if row.source.len() <= MAX_SOURCE_BYTES {
        return None;
    }
    let mut digest = Canonical::new("ctxsync.long-source.v1");
    digest.field(row.source.as_bytes());
    let digest = digest.finish().0;
    let suffix = format!("#{}", &digest[..16]);
    let prefix = truncate_to_boundary(&row.source, MAX_SOURCE_BYTES - suffix.len());
    let mut flagged = row.clone();
    flagged.source = format!("{prefix}{suffix}");
    exclude(&mut flagged, "");
    flagged.status = ResourceStatus::Invalid;
    flagged.error = Some(format!(
        "the source is {} bytes, over the protocol's {MAX_SOURCE_BYTES}-byte limit; shortened and not read",
        row.source.len()
    ));
    if let ResourceBody::McpServer(body) = &mut flagged.body {
        body.server_name = truncate_to_boundary(&body.server_name, MAX_SOURCE_BYTES).to_owned();
    }
    Some(flagged)
}

/// Bounds a diagnostic to the wire's error limit on a UTF-8 boundary, marking the cut.
pub(super) fn bound_error(text: String) -> String {
    if text.len() <= MAX_ERROR_BYTES {
        return text;
    }
    let kept = truncate_to_boundary(&text, MAX_ERROR_BYTES - TRUNCATED.len());
    format!("{kept}{TRUNCATED}")
}

/// One snapshot error from the resolver's and the watcher's, within the wire's limit. The
/// watcher's note is short and kept whole (it says why changes may arrive late); the
/// resolver's part is shortened if both do not fit.
pub(crate) fn merge_snapshot_errors(
    resolver: Option<String>,
    watching: Option<&str>,
) -> Option<String> {
    const SEPARATOR: &str = "; ";
    let Some(watching) = watching else {
        return resolver.map(bound_error);
    };
    // Never more than half the limit, so the resolver's part always keeps some room.
    let watching = truncate_to_boundary(watching, MAX_ERROR_BYTES / 2);
    let Some(resolver) = resolver else {
        return Some(watching.to_owned());
    };
    let room = MAX_ERROR_BYTES - SEPARATOR.len() - watching.len();
    let resolver = if resolver.len() <= room {
        resolver
    } else {
        let kept = truncate_to_boundary(&resolver, room - TRUNCATED.len());
        format!("{kept}{TRUNCATED}")
    };
    Some(format!("{resolver}{SEPARATOR}{watching}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_errors_merge_within_the_limit() {
        let check = |resolver: Option<&str>, watching: Option<&str>, expect: Option<&str>| {
            let merged = merge_snapshot_errors(resolver.map(str::to_owned), watching);
            assert_eq!(merged.as_deref(), expect);
        };
        check(None, None, None);
        check(Some("caps"), None, Some("caps"));
        check(None, Some("watching"), Some("watching"));
        check(Some("caps"), Some("watching"), Some("caps; watching"));

        // A long resolver error is shortened; the watcher's note survives whole.
        let long = "é".repeat(MAX_ERROR_BYTES); // two bytes each: cut on a char boundary
        let note = "watching context files: polling every 2 s";
        let merged = merge_snapshot_errors(Some(long), Some(note)).unwrap();
        assert!(merged.len() <= MAX_ERROR_BYTES, "{}", merged.len());
        assert!(merged.len() >= MAX_ERROR_BYTES - 1, "{}", merged.len());
        assert!(
            merged.ends_with(&format!("{TRUNCATED}; {note}")),
            "{merged}"
        );

        // Neither part alone can take the whole limit.
        let huge_note = "n".repeat(2 * MAX_ERROR_BYTES);
        let merged =
            merge_snapshot_errors(Some("x".repeat(MAX_ERROR_BYTES)), Some(&huge_note)).unwrap();
        assert_eq!(merged.len(), MAX_ERROR_BYTES);
        assert!(merged.starts_with("xxx") && merged.ends_with("nnn"));
        let alone = merge_snapshot_errors(None, Some(&huge_note)).unwrap();
        assert_eq!(alone.len(), MAX_ERROR_BYTES / 2);
        let resolver_alone = merge_snapshot_errors(Some("y".repeat(2 * MAX_ERROR_BYTES)), None);
        assert_eq!(resolver_alone.unwrap().len(), MAX_ERROR_BYTES);
    }

    #[test]
    fn errors_are_bounded_on_char_boundaries() {
        let long = "é".repeat(MAX_ERROR_BYTES);
        let bounded = bound_error(long);
        assert!(bounded.len() <= MAX_ERROR_BYTES);
        assert!(bounded.ends_with(TRUNCATED));
        assert_eq!(bound_error("short".into()), "short");
    }
}
