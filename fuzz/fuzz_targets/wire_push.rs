//! libFuzzer target: arbitrary bytes → `PushContextStateRequest::decode` →
//! `Snapshot::try_from`, with the properties of `fuzz_wire_*` in the protocol crate's
//! `tests/fuzz.rs`: every accepted request satisfies every SPEC §4 limit and round-trips.

#![no_main]

use std::collections::HashSet;

use ctxsync_protocol::limits::{
    MAX_BODY_BYTES, MAX_COUNTER, MAX_ERROR_BYTES, MAX_HASH_BYTES, MAX_RESOURCES, MAX_RUN_ID_BYTES,
    MAX_SOURCE_BYTES, MAX_TOTAL_BODY_BYTES,
};
use ctxsync_protocol::{Snapshot, body_len, v1};
use libfuzzer_sys::fuzz_target;
use prost::Message;

fuzz_target!(|bytes: &[u8]| {
    let Ok(wire) = v1::PushContextStateRequest::decode(bytes) else {
        return;
    };
    let Ok(snapshot) = Snapshot::try_from(wire.clone()) else {
        return;
    };
    assert!(wire.version <= MAX_COUNTER);
    assert!(wire.agent_run_id.len() <= MAX_RUN_ID_BYTES);
    assert!(wire.aggregate_hash.len() <= MAX_HASH_BYTES);
    assert!(wire.snapshot_error.len() <= MAX_ERROR_BYTES);
    assert!(wire.resources.len() <= MAX_RESOURCES);
    assert_eq!(snapshot.resources.len(), wire.resources.len());
    let mut sources = HashSet::new();
    let mut total = 0;
    for resource in &wire.resources {
        assert!(!resource.source.is_empty());
        assert!(resource.source.len() <= MAX_SOURCE_BYTES);
        assert!(sources.insert(resource.source.clone()), "duplicate source");
        assert!(
            resource
                .source_path
                .as_ref()
                .is_none_or(|p| p.len() <= MAX_SOURCE_BYTES)
        );
        assert!(resource.content_hash.len() <= MAX_HASH_BYTES);
        assert!(resource.error.len() <= MAX_ERROR_BYTES);
        assert!(resource.size_bytes <= MAX_COUNTER);
        let body = resource.body.as_ref();
        assert!(body.is_some(), "accepted a resource without a body");
        let len = body.map_or(0, body_len);
        assert!(len <= MAX_BODY_BYTES, "{len} body bytes");
        total += len;
    }
    assert!(total <= MAX_TOTAL_BODY_BYTES, "{total} total body bytes");
    let again = Snapshot::try_from(v1::PushContextStateRequest::from(snapshot.clone()));
    if let Ok(again) = again {
        assert_eq!(again, snapshot);
    }
});
