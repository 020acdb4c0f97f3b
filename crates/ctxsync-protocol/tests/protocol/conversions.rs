//! Round trips between domain and wire types, and through protobuf encoding.

use ctxsync_protocol::v1::{self, PushContextStateRequest};
use ctxsync_protocol::*;
use prost::Message;
use serde_json::json;

fn sample(phase: DiscoveryPhase, run: Option<&str>) -> Snapshot {
    let resource = |source: &str, status, error: Option<&str>, body| Resource {
        source: source.into(),
        source_path: Some(format!("/ws/{source}")),
        content_hash: "c0ffee".into(),
        size_bytes: 42,
        status,
        error: error.map(Into::into),
        body,
    };
    Snapshot {
        version: 7,
        aggregate_hash: "ab".repeat(32),
        initial: false,
        snapshot_error: Some("too many files".into()),
        agent_run_id: run.and_then(RunId::new),
        phase,
        pending_servers: match phase {
            DiscoveryPhase::Pending => vec![SnapshotPendingServer {
                server_name: "github".into(),
                elapsed_ms: 4200,
            }],
            _ => Vec::new(),
        },
        resources: vec![
            resource(
                "AGENTS.md",
                ResourceStatus::Ok,
                None,
                ResourceBody::InstructionFile(InstructionFileBody {
                    content: "be kind".into(),
                }),
            ),
            resource(
                "skills/review/SKILL.md",
                ResourceStatus::Invalid,
                Some("name must be kebab-case"),
                ResourceBody::Skill(SkillBody {
                    meta: "---\nname: Review\n---".into(),
                    name: "Review".into(),
                    description: "reviews".into(),
                }),
            ),
            resource(
                ".mcp.json",
                ResourceStatus::Oversize,
                None,
                ResourceBody::McpConfig,
            ),
            resource(
                "mcp:fs",
                ResourceStatus::Ok,
                Some("more than 1000 tools offered"),
                ResourceBody::McpServer(McpServerBody {
                    server_name: "fs".into(),
                    description: "files".into(),
                    tools: vec![
                        McpTool {
                            name: "read".into(),
                            description: "read a file".into(),
                            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
                            title: "Read file".into(),
                            annotations: Some(McpToolAnnotations {
                                title: "Read".into(),
                                read_only_hint: Some(true),
                                destructive_hint: Some(false),
                                idempotent_hint: None,
                                open_world_hint: Some(false),
                            }),
                            output_schema: Some(
                                json!({"type": "object", "properties": {"text": {"type": "string"}}}),
                            ),
                            icons: vec![McpIcon {
                                src: "data:image/svg+xml;base64,PHN2Zz4=".into(),
                                mime_type: "image/svg+xml".into(),
                                sizes: vec!["any".into()],
                                theme: "light".into(),
                            }],
                            meta: Some(json!({"ui": {"resourceUri": "ui://fs/read"}})),
                        },
                        McpTool {
                            name: "plain".into(),
                            input_schema: json!({"type": "object"}),
                            ..Default::default()
                        },
                    ],
                    protocol_version: "2026-07-28".into(),
                    server_info: Some(McpServerInfo {
                        name: "fs-server".into(),
                        version: "1.2.3".into(),
                        title: "Files".into(),
                        description: "Local files".into(),
                    }),
                    instructions: "Prefer read over shell cat.".into(),
                    timings: Some(McpConnectTimings {
                        start_ms: Some(12),
                        handshake_ms: 40,
                        tools_ms: 3,
                    }),
                    always_load: true,
                }),
            ),
            resource(
                "mcp:broken",
                ResourceStatus::Unreadable,
                Some("command not found: nope"),
                ResourceBody::McpServer(McpServerBody {
                    server_name: "broken".into(),
                    ..Default::default()
                }),
            ),
            resource(
                "notes/x.md",
                ResourceStatus::Excluded,
                None,
                ResourceBody::InstructionFile(InstructionFileBody::default()),
            ),
        ],
    }
}

#[test]
fn every_body_variant_and_phase_round_trips() {
    for phase in [
        DiscoveryPhase::Unspecified,
        DiscoveryPhase::Pending,
        DiscoveryPhase::Complete,
    ] {
        for run in [None, Some("5f0c6f4e-3b0a-4d7e-9d55-2f1c3a0c9e11")] {
            let snapshot = sample(phase, run);
            let wire = PushContextStateRequest::from(snapshot.clone());
            let back = Snapshot::try_from(wire).expect("a domain snapshot is valid on the wire");
            assert_eq!(back, snapshot, "phase {phase:?}, run {run:?}");
        }
    }
}

#[test]
fn encoding_and_decoding_a_request_is_identity() {
    let wire = PushContextStateRequest::from(sample(DiscoveryPhase::Pending, Some("run-1")));
    let bytes = wire.encode_to_vec();
    let decoded = PushContextStateRequest::decode(bytes.as_slice()).expect("decodes");
    assert_eq!(decoded, wire);
    assert_eq!(decoded.encode_to_vec(), bytes);
}

#[test]
fn unset_phase_and_empty_run_id_read_as_legacy() {
    let wire = PushContextStateRequest {
        version: 1,
        mcp_discovery: None,
        agent_run_id: String::new(),
        ..Default::default()
    };
    let snapshot = Snapshot::try_from(wire).expect("a legacy push is valid");
    assert_eq!(snapshot.phase, DiscoveryPhase::Unspecified);
    assert_eq!(snapshot.agent_run_id, None);
    assert!(snapshot.is_legacy());

    let current = Snapshot::try_from(PushContextStateRequest::from(sample(
        DiscoveryPhase::Pending,
        Some("r"),
    )))
    .unwrap();
    assert!(!current.is_legacy());

    // A legacy domain snapshot leaves the discovery message unset on the wire.
    let back = PushContextStateRequest::from(snapshot);
    assert_eq!(back.mcp_discovery, None);
    assert_eq!(back.agent_run_id, "");

    let startup = Startup::try_from(v1::Startup {
        version: "1.0".into(),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(startup.agent_run_id, None);
    assert_eq!(v1::Startup::from(startup).agent_run_id, "");
}

#[test]
fn body_json_uses_proto_field_names_and_round_trips() {
    for resource in sample(DiscoveryPhase::Complete, Some("r")).resources {
        let json = resource.body.to_json().unwrap();
        let kind = resource.body.kind();
        assert_eq!(BodyKind::parse(kind.as_str()), Some(kind));
        assert_eq!(
            ResourceBody::from_json(kind, json).expect("round trips"),
            resource.body
        );
    }
    let server = ResourceBody::McpServer(McpServerBody {
        server_name: "fs".into(),
        description: String::new(),
        tools: vec![McpTool {
            name: "read".into(),
            description: "d".into(),
            input_schema: json!({}),
            ..Default::default()
        }],
        ..Default::default()
    });
    assert_eq!(
        server.to_json().unwrap(),
        json!({"server_name": "fs", "description": "", "tools": [{"name": "read", "description": "d", "input_schema": {}}]})
    );
    assert_eq!(ResourceBody::McpConfig.to_json().unwrap(), json!({}));
    // A row stored before the tool and server details existed still reads.
    let old = json!({"server_name": "fs", "tools": [{"name": "read", "input_schema": {}}]});
    let ResourceBody::McpServer(body) = ResourceBody::from_json(BodyKind::McpServer, old).unwrap()
    else {
        panic!("a server body")
    };
    assert_eq!((body.tools[0].title.as_str(), body.timings), ("", None));
    assert!(
        !body.always_load,
        "a row stored before always_load reads as false"
    );
    // The new fields are stored under their proto names.
    let rich = &sample(DiscoveryPhase::Complete, None).resources[3].body;
    let stored = rich.to_json().unwrap();
    assert_eq!(stored["protocol_version"], "2026-07-28");
    assert_eq!(stored["server_info"]["title"], "Files");
    assert_eq!(stored["timings"]["handshake_ms"], 40);
    assert_eq!(stored["always_load"], true);
    let tool = &stored["tools"][0];
    assert_eq!(tool["annotations"]["read_only_hint"], true);
    assert_eq!(tool["output_schema"]["type"], "object");
    assert_eq!(tool["icons"][0]["mime_type"], "image/svg+xml");
    assert_eq!(tool["meta"]["ui"]["resourceUri"], "ui://fs/read");
    assert!(ResourceBody::from_json(BodyKind::Skill, json!({"meta": 1})).is_err());
}

#[test]
fn enum_names_round_trip() {
    for phase in [
        DiscoveryPhase::Unspecified,
        DiscoveryPhase::Pending,
        DiscoveryPhase::Complete,
    ] {
        assert_eq!(DiscoveryPhase::parse(phase.as_str()), Some(phase));
    }
    for status in ResourceStatus::ALL {
        assert_eq!(ResourceStatus::parse(status.as_str()), Some(status));
    }
    assert_eq!(DiscoveryPhase::parse("done"), None);
}

#[test]
fn a_push_built_from_a_snapshot_is_the_one_read_from_its_wire_form() {
    for phase in [DiscoveryPhase::Pending, DiscoveryPhase::Complete] {
        let snapshot = sample(phase, Some("run-1"));
        let built = Push::from(snapshot.clone());
        let read = Push::try_from(PushContextStateRequest::from(snapshot.clone())).unwrap();
        assert_eq!(built, read, "{phase:?}");
        assert_eq!(built.snapshot, snapshot);
        assert!(!built.delta && built.kept.is_empty());
        let expected: Vec<_> = snapshot
            .resources
            .iter()
            .map(|r| BodyDigest::of(&r.body))
            .collect();
        assert_eq!(built.digests, expected);
    }
}

#[test]
fn a_delta_survives_encoding_and_decoding() {
    let full = PushContextStateRequest::from(sample(DiscoveryPhase::Complete, Some("run-1")));
    let mut delta = full.clone();
    let next = DeltaBase::of_full(&full).into_delta(&mut delta);
    assert_eq!(next, DeltaBase::of_full(&full));
    let decoded = PushContextStateRequest::decode(delta.encode_to_vec().as_slice()).unwrap();
    assert_eq!(decoded, delta);
    assert!(decoded.delta);
    assert!(decoded.resources.iter().all(|r| r.body.is_none()));
    let push = Push::try_from(decoded).unwrap();
    assert!(push.snapshot.resources.is_empty());
    let kept: Vec<_> = push.kept.iter().map(|k| k.body_digest).collect();
    assert_eq!(kept, Push::try_from(full).unwrap().digests);
}

#[test]
fn startup_sends_no_delta_scheme() {
    let wire = v1::Startup::from(Startup {
        version: "1".into(),
        expanded_directory: "/ws".into(),
        agent_run_id: RunId::new("r"),
        accepts_tool_calls: false,
    });
    assert_eq!(wire.delta_digest_scheme, 0);
    // A server's answer naming the scheme still reads as a startup.
    let answer = v1::Startup {
        delta_digest_scheme: DELTA_DIGEST_SCHEME,
        ..wire
    };
    assert_eq!(
        Startup::try_from(answer).unwrap().agent_run_id.as_deref(),
        Some("r")
    );
}
