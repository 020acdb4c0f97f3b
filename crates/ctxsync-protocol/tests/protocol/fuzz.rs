//! Fuzz-style property tests of wire validation (proptest; the libFuzzer twin is
//! `fuzz/fuzz_targets/wire_push.rs`, whose seed corpus a test here writes): arbitrary
//! bytes, and structured requests with sizes at and around every limit, some of them
//! deltas leaving bodies out (with right, wrong and misplaced digests), optionally with
//! one byte mutated, go through `prost::Message::decode`, `Push::try_from` and
//! `Snapshot::try_from`. Nothing panics, every accepted request satisfies every limit of
//! SPEC §4, and a snapshot is accepted exactly when the push is and leaves nothing out.
//! `PROPTEST_CASES` raises the budget (`cargo xtask fuzz`).

use std::collections::HashSet;

use ctxsync_protocol::limits::*;
use ctxsync_protocol::v1::context_resource::Body;
use ctxsync_protocol::v1::push_context_state_request::McpDiscovery;
use ctxsync_protocol::{BODY_DIGEST_BYTES, BodyDigest, DeltaBase, Push, Snapshot, body_len, v1};
use proptest::prelude::*;
use prost::Message;

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

/// A string of about `max` bytes: short, exactly at the limit, or one byte over.
fn sized(max: usize) -> impl Strategy<Value = String> {
    prop_oneof![
        24 => "[a-z/._-]{0,12}",
        1 => Just("x".repeat(max)),
        1 => Just("x".repeat(max + 1)),
        1 => Just(format!("{}é", "x".repeat(max - 1))),
        1 => "\\PC{0,6}",
    ]
}

fn counter() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..10,
        Just(MAX_COUNTER),
        Just(MAX_COUNTER + 1),
        any::<u64>()
    ]
}

fn enum_value() -> impl Strategy<Value = i32> {
    prop_oneof![16 => 0i32..6, 1 => any::<i32>()]
}

fn body() -> impl Strategy<Value = Option<Body>> {
    let content = prop_oneof![
        4 => "\\PC{0,16}",
        1 => Just("c".repeat(MAX_BODY_BYTES - 8)),
        1 => Just("c".repeat(MAX_BODY_BYTES)),
    ];
    let schema = prop_oneof![
        Just(String::new()),
        Just(r#"{"type":"object"}"#.to_owned()),
        Just("[1]".to_owned()),
        Just("{".to_owned()),
        Just(r#"{"a":1E2,"b":"\u00e9"}"#.to_owned()),
        "\\PC{0,8}",
    ];
    let icon = ("\\PC{0,8}", prop::collection::vec("\\PC{0,4}", 0..3)).prop_map(|(src, sizes)| {
        v1::McpIcon {
            src,
            sizes,
            ..Default::default()
        }
    });
    let tool = (
        ("\\PC{0,8}", "\\PC{0,8}", schema.clone()),
        (
            "\\PC{0,8}",
            schema.clone(),
            schema,
            prop::collection::vec(icon, 0..3),
        ),
    )
        .prop_map(
            |((name, description, input_schema), (title, output_schema, meta, icons))| {
                v1::McpTool {
                    name,
                    description,
                    input_schema,
                    title,
                    output_schema,
                    meta,
                    icons,
                    ..Default::default()
                }
            },
        );
    prop::option::weighted(
        0.95,
        prop_oneof![
            content
                .clone()
                .prop_map(|content| Body::InstructionFile(v1::InstructionFile { content })),
            (content, "\\PC{0,8}", "\\PC{0,8}").prop_map(|(meta, name, description)| {
                Body::Skill(v1::Skill {
                    meta,
                    name,
                    description,
                })
            }),
            Just(Body::McpConfig(v1::McpConfig {})),
            (
                "\\PC{0,8}",
                "\\PC{0,8}",
                prop::collection::vec(tool, 0..4),
                any::<bool>()
            )
                .prop_map(|(server_name, description, tools, always_load)| {
                    Body::McpServer(v1::McpServer {
                        server_name,
                        description,
                        tools,
                        always_load,
                        ..Default::default()
                    })
                }),
        ],
    )
}

fn resource() -> impl Strategy<Value = v1::ContextResource> {
    (
        prop_oneof![12 => "[a-z]{1,8}", 1 => "[a-b]{0,1}", 1 => sized(MAX_SOURCE_BYTES)],
        prop::option::weighted(0.5, sized(MAX_SOURCE_BYTES)),
        sized(MAX_HASH_BYTES),
        counter(),
        enum_value(),
        sized(MAX_ERROR_BYTES),
        body(),
    )
        .prop_map(
            |(source, source_path, content_hash, size_bytes, status, error, body)| {
                v1::ContextResource {
                    source,
                    source_path,
                    content_hash,
                    size_bytes,
                    status,
                    error,
                    body_digest: Vec::new(),
                    body,
                }
            },
        )
}

/// What a request does with one resource's body.
#[derive(Clone, Debug)]
enum Omission {
    Keep,
    /// Left out, its right digest sent instead (as `DeltaBase::into_delta` does).
    Digest,
    /// Left out with these digest bytes: empty, random 32, or the wrong length.
    Bytes(Vec<u8>),
    /// Sent with these digest bytes beside it.
    BesideBody(Vec<u8>),
}

fn omission() -> impl Strategy<Value = Omission> {
    prop_oneof![
        10 => Just(Omission::Keep),
        5 => Just(Omission::Digest),
        1 => prop::collection::vec(any::<u8>(), BODY_DIGEST_BYTES).prop_map(Omission::Bytes),
        1 => prop::collection::vec(any::<u8>(), 0..=40).prop_map(Omission::Bytes),
        1 => prop::collection::vec(any::<u8>(), BODY_DIGEST_BYTES).prop_map(Omission::BesideBody),
    ]
}

fn omit(resource: &mut v1::ContextResource, omission: Omission) {
    match omission {
        Omission::Keep => {}
        Omission::Digest => {
            if let Some(body) = resource.body.take() {
                resource.body_digest = BodyDigest::of_wire(&body).as_bytes().to_vec();
            }
        }
        Omission::Bytes(bytes) => {
            resource.body = None;
            resource.body_digest = bytes;
        }
        Omission::BesideBody(bytes) => resource.body_digest = bytes,
    }
}

/// A push: one with every field around its limits, or a delta of a push that is valid
/// outside its bodies (most arbitrary ones break some other limit). About half of the
/// first kind are deltas too; both kinds may leave bodies out, which only a delta with
/// 32-byte digests may do.
fn request() -> impl Strategy<Value = v1::PushContextStateRequest> {
    prop_oneof![2 => any_request(), 1 => delta_request()]
}

fn delta_request() -> impl Strategy<Value = v1::PushContextStateRequest> {
    (
        prop::collection::vec((body(), omission()), 0..6),
        prop::bool::weighted(0.9),
    )
        .prop_map(|(bodies, delta)| v1::PushContextStateRequest {
            version: 2,
            aggregate_hash: "agg".to_owned(),
            resources: bodies
                .into_iter()
                .enumerate()
                .map(|(i, (body, omission))| {
                    let mut resource = v1::ContextResource {
                        source: format!("d{i}"),
                        status: v1::context_resource::Status::Ok as i32,
                        body,
                        ..Default::default()
                    };
                    omit(&mut resource, omission);
                    resource
                })
                .collect(),
            agent_run_id: "run".to_owned(),
            delta,
            ..Default::default()
        })
}

fn any_request() -> impl Strategy<Value = v1::PushContextStateRequest> {
    (
        counter(),
        sized(MAX_HASH_BYTES),
        prop_oneof![
            8 => prop::collection::vec(resource(), 0..4),
            1 => (MAX_RESOURCES - 1..=MAX_RESOURCES + 1).prop_map(|n| {
                (0..n)
                    .map(|i| v1::ContextResource {
                        source: format!("r{i}"),
                        body: Some(Body::McpConfig(v1::McpConfig {})),
                        ..Default::default()
                    })
                    .collect()
            }),
            1 => (15usize..=17).prop_map(|n| {
                (0..n)
                    .map(|i| v1::ContextResource {
                        source: format!("big{i}"),
                        body: Some(Body::InstructionFile(v1::InstructionFile {
                            content: "b".repeat(MAX_BODY_BYTES - 8),
                        })),
                        ..Default::default()
                    })
                    .collect()
            }),
        ],
        any::<bool>(),
        sized(MAX_ERROR_BYTES),
        sized(MAX_RUN_ID_BYTES),
        prop::option::of(enum_value().prop_map(|phase| McpDiscovery {
            phase,
            pending_servers: vec![v1::push_context_state_request::PendingServer {
                server_name: "github".into(),
                elapsed_ms: 4000,
            }],
        })),
        (
            prop::bool::weighted(0.5),
            prop::collection::vec(omission(), 0..20),
        ),
    )
        .prop_map(
            |(
                version,
                aggregate_hash,
                resources,
                initial,
                snapshot_error,
                agent_run_id,
                mcp_discovery,
                (delta, omissions),
            )| {
                let mut resources: Vec<v1::ContextResource> = resources;
                for (resource, omission) in resources.iter_mut().zip(omissions) {
                    omit(resource, omission);
                }
                v1::PushContextStateRequest {
                    version,
                    aggregate_hash,
                    resources,
                    initial,
                    snapshot_error,
                    agent_run_id,
                    mcp_discovery,
                    delta,
                }
            },
        )
}

/// Decodes and validates as a push; for an accepted one checks every limit on the wire
/// message and the domain values, that each body sent has its digest and each one left
/// out is kept as sent, that `Snapshot::try_from` agrees (accepting exactly the pushes
/// that leave nothing out), that the snapshot survives a round trip, and that
/// `DeltaBase` turns a push with every body into a delta that is accepted too.
fn check(bytes: &[u8]) -> Result<bool, TestCaseError> {
    let Ok(wire) = v1::PushContextStateRequest::decode(bytes) else {
        return Ok(false);
    };
    let whole = Snapshot::try_from(wire.clone());
    let Ok(push) = Push::try_from(wire.clone()) else {
        prop_assert!(
            whole.is_err(),
            "a snapshot accepted where its push is refused"
        );
        return Ok(false);
    };
    match (&whole, push.kept.first()) {
        (Ok(snapshot), None) => prop_assert_eq!(snapshot, &push.snapshot),
        (Err(e), Some(kept)) => {
            prop_assert_eq!(&e.field, &format!("resources[{}].body", kept.index))
        }
        (Ok(_), Some(_)) => prop_assert!(false, "a snapshot accepted with a body left out"),
        (Err(e), None) => prop_assert!(false, "push accepted, snapshot refused: {}", e),
    }
    prop_assert!(wire.version <= MAX_COUNTER);
    prop_assert!(wire.agent_run_id.len() <= MAX_RUN_ID_BYTES);
    prop_assert!(wire.aggregate_hash.len() <= MAX_HASH_BYTES);
    prop_assert!(wire.snapshot_error.len() <= MAX_ERROR_BYTES);
    prop_assert!(wire.resources.len() <= MAX_RESOURCES);
    prop_assert_eq!(push.delta, wire.delta);
    prop_assert_eq!(
        push.snapshot.resources.len() + push.kept.len(),
        wire.resources.len()
    );
    prop_assert_eq!(push.digests.len(), push.snapshot.resources.len());
    let mut sent = push.snapshot.resources.iter().zip(&push.digests);
    let mut kept = push.kept.iter();
    let mut sources = HashSet::new();
    let mut total = 0;
    for (i, resource) in wire.resources.iter().enumerate() {
        prop_assert!(!resource.source.is_empty());
        prop_assert!(resource.source.len() <= MAX_SOURCE_BYTES);
        prop_assert!(sources.insert(resource.source.clone()), "duplicate source");
        prop_assert!(
            resource
                .source_path
                .as_ref()
                .is_none_or(|p| p.len() <= MAX_SOURCE_BYTES)
        );
        prop_assert!(resource.content_hash.len() <= MAX_HASH_BYTES);
        prop_assert!(resource.error.len() <= MAX_ERROR_BYTES);
        prop_assert!(resource.size_bytes <= MAX_COUNTER);
        match &resource.body {
            Some(body) => {
                prop_assert!(resource.body_digest.is_empty(), "a digest beside a body");
                let len = body_len(body);
                prop_assert!(len <= MAX_BODY_BYTES, "{} body bytes", len);
                total += len;
                let Some((domain, digest)) = sent.next() else {
                    return Err(TestCaseError::fail("a body sent is missing from the push"));
                };
                prop_assert_eq!(&domain.source, &resource.source);
                prop_assert_eq!(*digest, BodyDigest::of_wire(body));
            }
            None => {
                prop_assert!(wire.delta, "a full push accepted without a body");
                let Some(kept) = kept.next() else {
                    return Err(TestCaseError::fail("a body left out is not kept"));
                };
                prop_assert_eq!(kept.index, i);
                prop_assert_eq!(&kept.source, &resource.source);
                prop_assert_eq!(&kept.source_path, &resource.source_path);
                prop_assert_eq!(&kept.content_hash, &resource.content_hash);
                prop_assert_eq!(kept.size_bytes, resource.size_bytes);
                prop_assert_eq!(kept.error.as_deref().unwrap_or(""), resource.error.as_str());
                prop_assert_eq!(
                    kept.body_digest.as_bytes().as_slice(),
                    resource.body_digest.as_slice()
                );
            }
        }
    }
    prop_assert!(total <= MAX_TOTAL_BODY_BYTES, "{} total body bytes", total);
    let again = Snapshot::try_from(v1::PushContextStateRequest::from(push.snapshot.clone()));
    if let Ok(again) = again {
        prop_assert_eq!(&again, &push.snapshot);
    }
    if push.kept.is_empty() {
        // Against the base it leaves, the same push leaves every body out, and is valid.
        let base = DeltaBase::of_full(&wire);
        let mut delta = wire.clone();
        prop_assert_eq!(base.into_delta(&mut delta), base.clone());
        let Ok(delta) = Push::try_from(delta) else {
            return Err(TestCaseError::fail("into_delta made an invalid push"));
        };
        prop_assert!(delta.delta && delta.snapshot.resources.is_empty());
        let digests: Vec<_> = delta.kept.iter().map(|k| k.body_digest).collect();
        prop_assert_eq!(digests, push.digests.clone());
    }
    Ok(true)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(256), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn fuzz_wire_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        check(&bytes)?;
    }

    #[test]
    fn fuzz_wire_structured_requests(
        request in request(),
        mutate in prop::option::weighted(0.3, (any::<prop::sample::Index>(), any::<u8>())),
    ) {
        let mut bytes = request.encode_to_vec();
        if let Some((at, byte)) = mutate
            && !bytes.is_empty()
        {
            let at = at.index(bytes.len());
            bytes[at] = byte;
        }
        check(&bytes)?;
    }
}

/// The structured generator reaches both sides of the limits (so the property is not
/// vacuous): some requests are accepted and some refused.
#[test]
fn structured_requests_are_both_accepted_and_refused() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let (mut accepted, mut refused) = (0, 0);
    let (mut deltas_leaving_out, mut deltas_refused) = (0, 0);
    for _ in 0..200 {
        let request = request().new_tree(&mut runner).expect("tree").current();
        let leaves_out = request.resources.iter().any(|r| r.body.is_none());
        match check(&request.encode_to_vec()) {
            Ok(true) => {
                accepted += 1;
                deltas_leaving_out += usize::from(request.delta && leaves_out);
            }
            Ok(false) => {
                refused += 1;
                deltas_refused += usize::from(request.delta);
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        accepted > 10 && refused > 10,
        "{accepted} accepted, {refused} refused"
    );
    assert!(
        deltas_leaving_out > 10 && deltas_refused > 10,
        "{deltas_leaving_out} deltas leaving bodies out accepted, {deltas_refused} deltas refused, {accepted} accepted, {refused} refused"
    );
}

/// One seed: its file name, the request, and whether it is accepted.
type Seed = (&'static str, v1::PushContextStateRequest, bool);

/// The `wire_push` libFuzzer target's seed corpus (`fuzz/corpus/wire_push/`): encoded
/// requests, accepted (as a [`Push`]) and refused, named for what they show.
fn wire_seeds() -> Vec<Seed> {
    let base = seed_base();
    let every_kind = seed_every_kind();
    let delta = seed_delta_after_one_edit(&base, &every_kind);
    let mut seeds = snapshot_seeds(&base, every_kind);
    seeds.extend(delta_seeds(base, &delta));
    seeds
}

/// An empty, complete, initial snapshot that the other seeds vary.
fn seed_base() -> v1::PushContextStateRequest {
    use v1::push_context_state_request::mcp_discovery::Phase;
    v1::PushContextStateRequest {
        version: 1,
        aggregate_hash: "agg-1".to_owned(),
        resources: Vec::new(),
        initial: true,
        snapshot_error: String::new(),
        agent_run_id: "run-1".to_owned(),
        mcp_discovery: Some(McpDiscovery {
            phase: Phase::Complete as i32,
            ..Default::default()
        }),
        delta: false,
    }
}

/// A resource with every non-body field set, around `body`.
fn seed_resource(source: &str, body: Body) -> v1::ContextResource {
    use v1::context_resource::Status;
    v1::ContextResource {
        source: source.to_owned(),
        source_path: Some(format!("/ws/{source}")),
        content_hash: "h".repeat(MAX_HASH_BYTES),
        size_bytes: 12,
        status: Status::Ok as i32,
        error: String::new(),
        body_digest: Vec::new(),
        body: Some(body),
    }
}

/// A small valid resource, told apart by `i`.
fn seed_config(i: usize) -> v1::ContextResource {
    use v1::context_resource::Status;
    v1::ContextResource {
        source: format!("r{i}"),
        status: Status::Ok as i32,
        body: Some(Body::McpConfig(v1::McpConfig {})),
        ..Default::default()
    }
}

/// One resource of each body kind, every field of the server set.
fn seed_every_kind() -> Vec<v1::ContextResource> {
    use v1::context_resource::Status;
    vec![
        seed_resource(
            "AGENTS.md",
            Body::InstructionFile(v1::InstructionFile {
                content: "be kind é".to_owned(),
            }),
        ),
        seed_resource(
            "skills/pdf/SKILL.md",
            Body::Skill(v1::Skill {
                meta: "---\nname: pdf\n---\n".to_owned(),
                name: "pdf".to_owned(),
                description: "PDF forms".to_owned(),
            }),
        ),
        v1::ContextResource {
            status: Status::Invalid as i32,
            error: "mcpServers.bad: neither command nor url".to_owned(),
            ..seed_resource(".mcp.json", Body::McpConfig(v1::McpConfig {}))
        },
        seed_resource(
            "mcp_server:fs",
            Body::McpServer(v1::McpServer {
                server_name: "fs".to_owned(),
                description: "files".to_owned(),
                tools: vec![v1::McpTool {
                    name: "read".to_owned(),
                    description: "Read a file".to_owned(),
                    input_schema: r#"{"type":"object","properties":{"path":{"type":"string"}}}"#
                        .to_owned(),
                    title: "Read file".to_owned(),
                    annotations: Some(v1::McpToolAnnotations {
                        read_only_hint: Some(true),
                        ..Default::default()
                    }),
                    output_schema: r#"{"type":"object"}"#.to_owned(),
                    icons: vec![v1::McpIcon {
                        src: "data:image/png;base64,AAAA".to_owned(),
                        mime_type: "image/png".to_owned(),
                        sizes: vec!["16x16".to_owned()],
                        theme: "dark".to_owned(),
                    }],
                    meta: r#"{"ui":{"resourceUri":"ui://fs/read"}}"#.to_owned(),
                }],
                protocol_version: "2026-07-28".to_owned(),
                server_info: Some(v1::McpServerInfo {
                    name: "fs".to_owned(),
                    version: "1.0".to_owned(),
                    ..Default::default()
                }),
                instructions: "Use read for files.".to_owned(),
                timings: Some(v1::McpConnectTimings {
                    start_ms: Some(3),
                    handshake_ms: 40,
                    tools_ms: 5,
                }),
                always_load: true,
            }),
        ),
    ]
}

/// A delta of every kind whose first body alone was edited since the base: three left out.
fn seed_delta_after_one_edit(
    base: &v1::PushContextStateRequest,
    every_kind: &[v1::ContextResource],
) -> v1::PushContextStateRequest {
    // Every body kind, the first edited since the base: it alone is sent.
    let full = v1::PushContextStateRequest {
        resources: every_kind.to_vec(),
        ..base.clone()
    };
    let mut delta = full.clone();
    delta.resources[0].body = Some(Body::InstructionFile(v1::InstructionFile {
        content: "be kinder".to_owned(),
    }));
    DeltaBase::of_full(&full).into_delta(&mut delta);
    assert_eq!(
        delta.resources.iter().filter(|r| r.body.is_none()).count(),
        3
    );
    delta
}

/// Full snapshots: accepted ones, and ones each refused for one field.
fn snapshot_seeds(
    base: &v1::PushContextStateRequest,
    every_kind: Vec<v1::ContextResource>,
) -> Vec<Seed> {
    vec![
        ("empty_snapshot", base.clone(), true),
        (
            "every_body_kind",
            v1::PushContextStateRequest {
                resources: every_kind.clone(),
                ..base.clone()
            },
            true,
        ),
        (
            "fields_at_limits",
            v1::PushContextStateRequest {
                version: MAX_COUNTER,
                aggregate_hash: "a".repeat(MAX_HASH_BYTES),
                snapshot_error: "e".repeat(MAX_ERROR_BYTES),
                agent_run_id: "r".repeat(MAX_RUN_ID_BYTES),
                resources: vec![v1::ContextResource {
                    source: "s".repeat(MAX_SOURCE_BYTES),
                    ..seed_config(0)
                }],
                ..base.clone()
            },
            true,
        ),
        (
            "run_id_over_limit",
            v1::PushContextStateRequest {
                agent_run_id: "r".repeat(MAX_RUN_ID_BYTES + 1),
                ..base.clone()
            },
            false,
        ),
        (
            "version_over_limit",
            v1::PushContextStateRequest {
                version: MAX_COUNTER + 1,
                ..base.clone()
            },
            false,
        ),
        (
            "duplicate_sources",
            v1::PushContextStateRequest {
                resources: vec![seed_config(1), seed_config(1)],
                ..base.clone()
            },
            false,
        ),
        (
            "resource_without_body",
            v1::PushContextStateRequest {
                resources: vec![v1::ContextResource {
                    body: None,
                    ..seed_config(0)
                }],
                ..base.clone()
            },
            false,
        ),
        (
            "unknown_enums",
            v1::PushContextStateRequest {
                resources: vec![v1::ContextResource {
                    status: 99,
                    ..seed_config(0)
                }],
                mcp_discovery: Some(McpDiscovery {
                    phase: 7,
                    ..Default::default()
                }),
                ..base.clone()
            },
            false,
        ),
        (
            "too_many_resources",
            v1::PushContextStateRequest {
                resources: (0..=MAX_RESOURCES).map(seed_config).collect(),
                ..base.clone()
            },
            false,
        ),
    ]
}

/// Deltas: one accepted, and bodies or digests where they may not be.
fn delta_seeds(
    base: v1::PushContextStateRequest,
    delta: &v1::PushContextStateRequest,
) -> Vec<Seed> {
    vec![
        ("delta_leaving_bodies_out", delta.clone(), true),
        (
            "delta_digest_wrong_length",
            v1::PushContextStateRequest {
                resources: {
                    let mut resources = delta.resources.clone();
                    resources[1].body_digest.pop();
                    resources
                },
                ..delta.clone()
            },
            false,
        ),
        (
            "digest_beside_body",
            v1::PushContextStateRequest {
                resources: vec![v1::ContextResource {
                    body_digest: vec![0; BODY_DIGEST_BYTES],
                    ..seed_config(0)
                }],
                ..base
            },
            false,
        ),
    ]
}

/// The committed seeds are exactly what [`wire_seeds`] encodes, and each is accepted or
/// refused as its name says. `CTXSYNC_WRITE_FUZZ_SEEDS=1` rewrites them.
#[test]
fn wire_push_seed_corpus_is_current() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/wire_push");
    let write = std::env::var_os("CTXSYNC_WRITE_FUZZ_SEEDS").is_some();
    for (name, request, accepted) in wire_seeds() {
        let bytes = request.encode_to_vec();
        let validated = Push::try_from(request.clone()).map(drop);
        assert_eq!(validated.is_ok(), accepted, "{name}: {validated:?}");
        assert_eq!(check(&bytes).expect("properties hold"), accepted, "{name}");
        let path = dir.join(format!("{name}.pb"));
        if write {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &bytes).unwrap();
        }
        let committed = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run with CTXSYNC_WRITE_FUZZ_SEEDS=1)",
                path.display()
            )
        });
        assert!(
            committed == bytes,
            "{} is stale (run with CTXSYNC_WRITE_FUZZ_SEEDS=1)",
            path.display()
        );
    }
}
