//! libFuzzer target: arbitrary bytes → `PushContextStateRequest::decode` →
//! `Push::try_from` (full and delta pushes), with the properties of `fuzz_wire_*` in the
//! protocol crate's `tests/protocol/fuzz.rs`: every accepted request satisfies every SPEC §4 limit,
//! a body is left out only in a delta and with a 32-byte digest, and a full push
//! round-trips.

#![no_main]

use std::collections::HashSet;

use ctxsync_protocol::limits::{
    MAX_BODY_BYTES, MAX_COUNTER, MAX_ERROR_BYTES, MAX_HASH_BYTES, MAX_RESOURCES, MAX_RUN_ID_BYTES,
    MAX_SOURCE_BYTES, MAX_TOTAL_BODY_BYTES,
};
use ctxsync_protocol::{BODY_DIGEST_BYTES, BodyDigest, Push, Snapshot, body_len, v1};
use libfuzzer_sys::fuzz_target;
use prost::Message;

fuzz_target!(|bytes: &[u8]| {
    let Ok(wire) = v1::PushContextStateRequest::decode(bytes) else {
        return;
    };
    let Ok(push) = Push::try_from(wire.clone()) else {
        return;
    };
    let snapshot = &push.snapshot;
    assert!(wire.version <= MAX_COUNTER);
    assert!(wire.agent_run_id.len() <= MAX_RUN_ID_BYTES);
    assert!(wire.aggregate_hash.len() <= MAX_HASH_BYTES);
    assert!(wire.snapshot_error.len() <= MAX_ERROR_BYTES);
    assert!(wire.resources.len() <= MAX_RESOURCES);
    assert_eq!(
        snapshot.resources.len() + push.kept.len(),
        wire.resources.len()
    );
    assert_eq!(push.digests.len(), snapshot.resources.len());
    assert_eq!(push.delta, wire.delta);
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
        let Some(body) = resource.body.as_ref() else {
            assert!(wire.delta, "a full push accepted a resource without a body");
            assert_eq!(resource.body_digest.len(), BODY_DIGEST_BYTES);
            continue;
        };
        assert!(resource.body_digest.is_empty(), "a digest beside a body");
        assert!(
            push.digests.contains(&BodyDigest::of_wire(body)),
            "a body's digest is missing"
        );
        let len = body_len(body);
        assert!(len <= MAX_BODY_BYTES, "{len} body bytes");
        total += len;
    }
    assert!(total <= MAX_TOTAL_BODY_BYTES, "{total} total body bytes");
    if push.kept.is_empty() {
        let again = Snapshot::try_from(v1::PushContextStateRequest::from(snapshot.clone()));
        if let Ok(again) = again {
            assert_eq!(&again, snapshot);
        }
    }
});
