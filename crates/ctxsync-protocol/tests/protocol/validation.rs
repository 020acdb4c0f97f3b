//! Every wire limit of SPEC §4 at its boundary: exactly at the limit is accepted, one over
//! is rejected with the right field named.

use ctxsync_protocol::limits::*;
use ctxsync_protocol::v1::context_resource::{Body, Status};
use ctxsync_protocol::v1::push_context_state_request::McpDiscovery;
use ctxsync_protocol::v1::{self, ContextResource, PushContextStateRequest};
use ctxsync_protocol::{BODY_DIGEST_BYTES, Problem, Push, Snapshot, Startup, WireError};

fn resource(source: &str) -> ContextResource {
    ContextResource {
        source: source.into(),
        source_path: None,
        content_hash: "h".into(),
        size_bytes: 1,
        status: Status::Ok as i32,
        error: String::new(),
        body_digest: Vec::new(),
        body: Some(Body::InstructionFile(v1::InstructionFile {
            content: "x".into(),
        })),
    }
}

fn push(resources: Vec<ContextResource>) -> PushContextStateRequest {
    PushContextStateRequest {
        version: 1,
        aggregate_hash: "a".repeat(64),
        resources,
        initial: true,
        snapshot_error: String::new(),
        agent_run_id: "run".into(),
        mcp_discovery: Some(McpDiscovery {
            phase: 1,
            ..Default::default()
        }),
        delta: false,
    }
}

/// A body whose encoded length is exactly `bytes` (tag + varint length + content).
fn body_of_encoded_len(bytes: usize) -> Body {
    let header = |n: usize| 1 + prost::length_delimiter_len(n);
    let mut content = bytes - header(bytes);
    while content + header(content) > bytes {
        content -= 1;
    }
    let body = Body::InstructionFile(v1::InstructionFile {
        content: "x".repeat(content),
    });
    assert_eq!(
        ctxsync_protocol::body_len(&body),
        bytes,
        "helper builds the exact size"
    );
    body
}

/// Validates `request` and checks the outcome: `None` accepted, `Some(field)` rejected
/// naming exactly that field.
fn check(name: &str, request: PushContextStateRequest, expect: Option<&str>) {
    let result = Snapshot::try_from(request);
    match (result, expect) {
        (Ok(_), None) => {}
        (Err(WireError { field, problem }), Some(expected)) => {
            assert_eq!(field, expected, "{name}: wrong field ({problem})")
        }
        (Ok(_), Some(expected)) => panic!("{name}: accepted, expected rejection of {expected}"),
        (Err(e), None) => panic!("{name}: rejected with {e}, expected acceptance"),
    }
}

/// [`check`] for a push as a server applies it ([`Push`]), where a delta may omit bodies.
fn check_push(name: &str, request: PushContextStateRequest, expect: Option<&str>) {
    match (Push::try_from(request), expect) {
        (Ok(_), None) => {}
        (Err(WireError { field, problem }), Some(expected)) => {
            assert_eq!(field, expected, "{name}: wrong field ({problem})")
        }
        (Ok(_), Some(expected)) => panic!("{name}: accepted, expected rejection of {expected}"),
        (Err(e), None) => panic!("{name}: rejected with {e}, expected acceptance"),
    }
}

/// A delta whose resource `i` omits its body, sending `digest` instead.
fn delta_omitting(i: usize, digest: Vec<u8>) -> PushContextStateRequest {
    with(push(many(3)), |r| {
        r.delta = true;
        r.resources[i].body = None;
        r.resources[i].body_digest = digest;
    })
}

fn with(
    mut request: PushContextStateRequest,
    edit: impl FnOnce(&mut PushContextStateRequest),
) -> PushContextStateRequest {
    edit(&mut request);
    request
}

fn many(n: usize) -> Vec<ContextResource> {
    (0..n).map(|i| resource(&format!("file-{i}"))).collect()
}

#[test]
fn resource_count() {
    check("at limit", push(many(MAX_RESOURCES)), None);
    check(
        "over limit",
        push(many(MAX_RESOURCES + 1)),
        Some("resources"),
    );
    check("none", push(vec![]), None);
}

#[test]
fn body_size_each_and_total() {
    let sized = |bytes| {
        with(push(vec![resource("a")]), |r| {
            r.resources[0].body = Some(body_of_encoded_len(bytes))
        })
    };
    check("body at limit", sized(MAX_BODY_BYTES), None);
    check(
        "body over limit",
        sized(MAX_BODY_BYTES + 1),
        Some("resources[0].body"),
    );

    // 16 bodies of 256 KiB are exactly 4 MiB; one more byte anywhere is over.
    let full: Vec<ContextResource> = (0..16)
        .map(|i| ContextResource {
            body: Some(body_of_encoded_len(MAX_BODY_BYTES)),
            ..resource(&format!("f{i}"))
        })
        .collect();
    assert_eq!(16 * MAX_BODY_BYTES, MAX_TOTAL_BODY_BYTES);
    check("total at limit", push(full.clone()), None);
    let mut over = full;
    over.push(ContextResource {
        body: Some(body_of_encoded_len(3)),
        ..resource("extra")
    });
    check(
        "total over limit",
        push(over),
        Some("resources[*].body (total)"),
    );
}

#[test]
fn source_and_source_path_length() {
    let long = |n| "s".repeat(n);
    check(
        "source at limit",
        push(vec![resource(&long(MAX_SOURCE_BYTES))]),
        None,
    );
    check(
        "source over",
        push(vec![resource(&long(MAX_SOURCE_BYTES + 1))]),
        Some("resources[0].source"),
    );
    let with_path = |n| {
        with(push(vec![resource("a")]), |r| {
            r.resources[0].source_path = Some(long(n))
        })
    };
    check("path at limit", with_path(MAX_SOURCE_BYTES), None);
    check(
        "path over",
        with_path(MAX_SOURCE_BYTES + 1),
        Some("resources[0].source_path"),
    );
}

#[test]
fn empty_and_duplicate_sources() {
    check(
        "empty",
        push(vec![resource("a"), resource("")]),
        Some("resources[1].source"),
    );
    check(
        "duplicate",
        push(vec![resource("a"), resource("b"), resource("a")]),
        Some("resources[2].source"),
    );
}

#[test]
fn error_lengths() {
    let err = |n| {
        with(push(vec![resource("a")]), |r| {
            r.resources[0].error = "e".repeat(n)
        })
    };
    check("error at limit", err(MAX_ERROR_BYTES), None);
    check(
        "error over",
        err(MAX_ERROR_BYTES + 1),
        Some("resources[0].error"),
    );
    let snap_err = |n| with(push(vec![]), |r| r.snapshot_error = "e".repeat(n));
    check("snapshot error at limit", snap_err(MAX_ERROR_BYTES), None);
    check(
        "snapshot error over",
        snap_err(MAX_ERROR_BYTES + 1),
        Some("snapshot_error"),
    );
}

#[test]
fn hash_lengths() {
    let agg = |n| with(push(vec![]), |r| r.aggregate_hash = "a".repeat(n));
    check("aggregate at limit", agg(MAX_HASH_BYTES), None);
    check(
        "aggregate over",
        agg(MAX_HASH_BYTES + 1),
        Some("aggregate_hash"),
    );
    let content = |n| {
        with(push(vec![resource("a")]), |r| {
            r.resources[0].content_hash = "c".repeat(n)
        })
    };
    check("content at limit", content(MAX_HASH_BYTES), None);
    check(
        "content over",
        content(MAX_HASH_BYTES + 1),
        Some("resources[0].content_hash"),
    );
}

#[test]
fn run_id_length_in_push_and_startup() {
    let run = |n| with(push(vec![]), |r| r.agent_run_id = "r".repeat(n));
    check("push run id at limit", run(MAX_RUN_ID_BYTES), None);
    check(
        "push run id over",
        run(MAX_RUN_ID_BYTES + 1),
        Some("agent_run_id"),
    );

    let startup = |n| v1::Startup {
        agent_run_id: "r".repeat(n),
        ..Default::default()
    };
    assert!(Startup::try_from(startup(MAX_RUN_ID_BYTES)).is_ok());
    let err = Startup::try_from(startup(MAX_RUN_ID_BYTES + 1)).unwrap_err();
    assert_eq!(err.field, "startup.agent_run_id");
    assert_eq!(
        err.problem,
        Problem::TooLong {
            bytes: MAX_RUN_ID_BYTES + 1,
            max: MAX_RUN_ID_BYTES
        }
    );

    let missing = Startup::try_from(v1::UpdateStartupRequest { startup: None }).unwrap_err();
    assert_eq!(missing.field, "startup");
}

#[test]
fn i64_ranges() {
    let version = |v| with(push(vec![]), |r| r.version = v);
    check("version at i64::MAX", version(i64::MAX as u64), None);
    check(
        "version over",
        version(i64::MAX as u64 + 1),
        Some("version"),
    );
    let size = |v| with(push(vec![resource("a")]), |r| r.resources[0].size_bytes = v);
    check("size at i64::MAX", size(i64::MAX as u64), None);
    check("size over", size(u64::MAX), Some("resources[0].size_bytes"));
}

#[test]
fn unknown_enums_and_missing_body() {
    let status = |s| with(push(vec![resource("a")]), |r| r.resources[0].status = s);
    check("status excluded", status(Status::Excluded as i32), None);
    check("status unspecified", status(0), Some("resources[0].status"));
    check("status unknown", status(99), Some("resources[0].status"));
    // Only an MCP server can ask for a sign-in.
    let sign_in = Status::NeedsAuthorization as i32;
    check(
        "needs_authorization on a file",
        status(sign_in),
        Some("resources[0].status"),
    );
    let server = with(push(vec![resource("mcp:gh")]), |r| {
        r.resources[0].status = sign_in;
        r.resources[0].body = Some(Body::McpServer(v1::McpServer {
            server_name: "gh".into(),
            ..Default::default()
        }));
    });
    check("needs_authorization on a server", server, None);
    let phase = |p| {
        with(push(vec![]), |r| {
            r.mcp_discovery = Some(McpDiscovery {
                phase: p,
                ..Default::default()
            })
        })
    };
    check("phase complete", phase(2), None);
    check("phase unknown", phase(3), Some("mcp_discovery.phase"));
    check(
        "missing body",
        with(push(vec![resource("a")]), |r| r.resources[0].body = None),
        Some("resources[0].body"),
    );
}

#[test]
fn tool_schemas_must_be_json_objects() {
    let server = |schema: &str| {
        with(push(vec![resource("mcp:fs")]), |r| {
            r.resources[0].body = Some(Body::McpServer(v1::McpServer {
                server_name: "fs".into(),
                description: String::new(),
                tools: vec![v1::McpTool {
                    name: "read".into(),
                    description: "d".into(),
                    input_schema: schema.into(),
                    ..Default::default()
                }],
                ..Default::default()
            }))
        })
    };
    check("object schema", server(r#"{"type":"object"}"#), None);
    check("empty schema", server(""), None);
    check(
        "broken schema",
        server("{"),
        Some("resources[0].mcp_server.tools[0].input_schema"),
    );
    check(
        "array schema",
        server("[]"),
        Some("resources[0].mcp_server.tools[0].input_schema"),
    );
}

#[test]
fn errors_map_to_invalid_argument_naming_the_field() {
    let err = Snapshot::try_from(push(many(MAX_RESOURCES + 1))).unwrap_err();
    let status = tonic::Status::from(err);
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "invalid resources: 1001 entries, at most 1000 allowed"
    );
}

/// A named edit setting one field to `n` bytes or entries, its limit and the field named.
type ToolCase = (&'static str, fn(&mut v1::McpTool, usize), usize, String);
/// The same for a server's own fields, named after the case.
type ServerCase = (&'static str, fn(&mut v1::McpServer, usize), usize);

fn server_push(edit: impl FnOnce(&mut v1::McpServer)) -> PushContextStateRequest {
    let mut server = v1::McpServer {
        server_name: "fs".into(),
        tools: vec![v1::McpTool {
            name: "read".into(),
            input_schema: r#"{"type":"object"}"#.into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    edit(&mut server);
    with(push(vec![resource("mcp:fs")]), |r| {
        r.resources[0].body = Some(Body::McpServer(server))
    })
}

#[test]
fn tool_definition_fields_at_their_limits() {
    let tool =
        |edit: fn(&mut v1::McpTool, usize), n: usize| server_push(|s| edit(&mut s.tools[0], n));
    let field = |name: &str| format!("resources[0].mcp_server.tools[0].{name}");
    let cases: [ToolCase; 7] = [
        (
            "title",
            |t, n| t.title = "t".repeat(n),
            MAX_TOOL_TITLE_BYTES,
            field("title"),
        ),
        (
            "annotation title",
            |t, n| {
                t.annotations = Some(v1::McpToolAnnotations {
                    title: "t".repeat(n),
                    ..Default::default()
                })
            },
            MAX_TOOL_TITLE_BYTES,
            field("annotations.title"),
        ),
        (
            "meta",
            |t, n| t.meta = format!("{{\"k\":\"{}\"}}", "m".repeat(n - 8)),
            MAX_TOOL_META_BYTES,
            field("meta"),
        ),
        (
            "icon count",
            |t, n| {
                t.icons = vec![
                    v1::McpIcon {
                        src: "https://x/i.png".into(),
                        ..Default::default()
                    };
                    n
                ]
            },
            MAX_ICONS_PER_TOOL,
            field("icons"),
        ),
        (
            "icon src",
            |t, n| {
                t.icons = vec![v1::McpIcon {
                    src: "s".repeat(n),
                    ..Default::default()
                }]
            },
            MAX_ICON_SRC_BYTES,
            field("icons[0].src"),
        ),
        (
            "icon sizes",
            |t, n| {
                t.icons = vec![v1::McpIcon {
                    src: "s".into(),
                    sizes: vec!["16x16".into(); n],
                    ..Default::default()
                }]
            },
            MAX_ICON_SIZES,
            field("icons[0].sizes"),
        ),
        (
            "icon mime type",
            |t, n| {
                t.icons = vec![v1::McpIcon {
                    src: "s".into(),
                    mime_type: "m".repeat(n),
                    ..Default::default()
                }]
            },
            MAX_ICON_FIELD_BYTES,
            field("icons[0].mime_type"),
        ),
    ];
    for (name, edit, max, expect) in cases {
        check(name, tool(edit, max), None);
        check(name, tool(edit, max + 1), Some(&expect));
    }
    check(
        "empty icon src",
        server_push(|s| s.tools[0].icons = vec![v1::McpIcon::default()]),
        Some(&field("icons[0].src")),
    );
    for (name, edit) in [
        (
            "output_schema",
            (|t: &mut v1::McpTool| t.output_schema = "[1]".into()) as fn(&mut _),
        ),
        ("meta", |t| t.meta = "{".into()),
    ] {
        check(
            name,
            server_push(|s| edit(&mut s.tools[0])),
            Some(&field(name)),
        );
    }
}

#[test]
fn server_details_at_their_limits() {
    let field = |name: &str| format!("resources[0].mcp_server.{name}");
    let cases: [ServerCase; 4] = [
        (
            "protocol_version",
            |s, n| s.protocol_version = "v".repeat(n),
            MAX_PROTOCOL_VERSION_BYTES,
        ),
        (
            "instructions",
            |s, n| s.instructions = "i".repeat(n),
            MAX_INSTRUCTIONS_BYTES,
        ),
        (
            "server_info.title",
            |s, n| {
                s.server_info = Some(v1::McpServerInfo {
                    title: "t".repeat(n),
                    ..Default::default()
                })
            },
            MAX_SERVER_INFO_BYTES,
        ),
        (
            "server_info.description",
            |s, n| {
                s.server_info = Some(v1::McpServerInfo {
                    description: "d".repeat(n),
                    ..Default::default()
                })
            },
            MAX_SERVER_DESCRIPTION_BYTES,
        ),
    ];
    for (name, edit, max) in cases {
        check(name, server_push(|s| edit(s, max)), None);
        check(name, server_push(|s| edit(s, max + 1)), Some(&field(name)));
    }
}

#[test]
fn pending_servers_are_bounded_named_once_and_only_while_pending() {
    let pending = |phase: i32, names: Vec<String>| {
        with(push(vec![]), |r| {
            r.mcp_discovery = Some(McpDiscovery {
                phase,
                pending_servers: names
                    .into_iter()
                    .map(
                        |server_name| v1::push_context_state_request::PendingServer {
                            server_name,
                            elapsed_ms: 4000,
                        },
                    )
                    .collect(),
            })
        })
    };
    let names = |n: usize| (0..n).map(|i| format!("s{i}")).collect::<Vec<_>>();
    check("at the count", pending(1, names(MAX_PENDING_SERVERS)), None);
    check(
        "over the count",
        pending(1, names(MAX_PENDING_SERVERS + 1)),
        Some("mcp_discovery.pending_servers"),
    );
    check(
        "while complete",
        pending(2, names(1)),
        Some("mcp_discovery.pending_servers"),
    );
    check("none while complete", pending(2, names(0)), None);
    check(
        "empty name",
        pending(1, vec![String::new()]),
        Some("mcp_discovery.pending_servers[0].server_name"),
    );
    check(
        "long name",
        pending(1, vec!["n".repeat(MAX_SOURCE_BYTES + 1)]),
        Some("mcp_discovery.pending_servers[0].server_name"),
    );
    check(
        "repeated name",
        pending(1, vec!["a".into(), "a".into()]),
        Some("mcp_discovery.pending_servers[1].server_name"),
    );
    let err = Snapshot::try_from(pending(2, names(1))).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid mcp_discovery.pending_servers: only allowed while the phase is PHASE_PENDING"
    );
}

#[test]
fn a_full_push_needs_every_body() {
    let missing = with(push(many(3)), |r| r.resources[1].body = None);
    check("missing body", missing.clone(), Some("resources[1].body"));
    check_push("missing body", missing.clone(), Some("resources[1].body"));
    assert_eq!(
        Push::try_from(missing).unwrap_err().problem,
        Problem::Missing
    );
    // A digest does not stand in for the body outside a delta.
    let with_digest = with(push(many(3)), |r| {
        r.resources[1].body = None;
        r.resources[1].body_digest = vec![7; BODY_DIGEST_BYTES];
    });
    check_push(
        "digest in a full push",
        with_digest,
        Some("resources[1].body"),
    );
}

#[test]
fn a_delta_omits_a_body_only_with_a_32_byte_digest() {
    check_push(
        "no digest",
        delta_omitting(1, vec![]),
        Some("resources[1].body"),
    );
    let err = Push::try_from(delta_omitting(1, vec![])).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid resources[1].body: must be set, or left out with its body_digest set"
    );
    for len in [1, BODY_DIGEST_BYTES - 1, BODY_DIGEST_BYTES + 1, 64] {
        check_push(
            &format!("{len}-byte digest"),
            delta_omitting(1, vec![7; len]),
            Some("resources[1].body_digest"),
        );
    }
    check_push(
        "32-byte digest",
        delta_omitting(1, vec![7; BODY_DIGEST_BYTES]),
        None,
    );
    let push = Push::try_from(delta_omitting(2, vec![9; BODY_DIGEST_BYTES])).unwrap();
    assert_eq!(push.kept.len(), 1);
    assert_eq!(push.kept[0].index, 2);
    assert_eq!(push.kept[0].body_digest.as_bytes(), &[9; BODY_DIGEST_BYTES]);
    assert_eq!(push.snapshot.resources.len(), 2);
    // Accepted as a push, but not as a whole snapshot: the body is elsewhere.
    check(
        "omitted body as a snapshot",
        delta_omitting(1, vec![7; BODY_DIGEST_BYTES]),
        Some("resources[1].body"),
    );
}

#[test]
fn a_digest_beside_its_body_is_refused() {
    for delta in [false, true] {
        let request = with(push(many(3)), |r| {
            r.delta = delta;
            r.resources[2].body_digest = vec![7; BODY_DIGEST_BYTES];
        });
        check_push(
            &format!("digest with body, delta {delta}"),
            request.clone(),
            Some("resources[2].body_digest"),
        );
        check(
            &format!("digest with body, delta {delta}"),
            request,
            Some("resources[2].body_digest"),
        );
    }
}

#[test]
fn an_omitted_body_keeps_every_other_check() {
    let omitted = |edit: fn(&mut ContextResource)| {
        with(delta_omitting(1, vec![7; BODY_DIGEST_BYTES]), |r| {
            edit(&mut r.resources[1])
        })
    };
    check_push(
        "duplicate source",
        omitted(|r| r.source = "file-0".into()),
        Some("resources[1].source"),
    );
    check_push(
        "empty source",
        omitted(|r| r.source.clear()),
        Some("resources[1].source"),
    );
    check_push(
        "unknown status",
        omitted(|r| r.status = 0),
        Some("resources[1].status"),
    );
    check_push(
        "long error",
        omitted(|r| r.error = "e".repeat(MAX_ERROR_BYTES + 1)),
        Some("resources[1].error"),
    );
    check_push(
        "size over",
        omitted(|r| r.size_bytes = u64::MAX),
        Some("resources[1].size_bytes"),
    );
}

#[test]
fn omitted_bodies_do_not_count_toward_the_total() {
    // 16 bodies of 256 KiB are exactly 4 MiB; omitted ones, however large they were
    // (`size_bytes`), add nothing.
    let mut resources: Vec<ContextResource> = (0..16)
        .map(|i| ContextResource {
            body: Some(body_of_encoded_len(MAX_BODY_BYTES)),
            ..resource(&format!("f{i}"))
        })
        .collect();
    resources.extend((0..4).map(|i| ContextResource {
        body: None,
        body_digest: vec![i; BODY_DIGEST_BYTES],
        size_bytes: MAX_BODY_BYTES as u64,
        ..resource(&format!("kept{i}"))
    }));
    let delta = with(push(resources), |r| r.delta = true);
    check_push("total at limit plus omitted", delta.clone(), None);
    assert_eq!(Push::try_from(delta.clone()).unwrap().kept.len(), 4);
    // One more byte in a body that is sent is still over.
    let over = with(delta, |r| {
        r.resources.push(ContextResource {
            body: Some(body_of_encoded_len(3)),
            ..resource("extra")
        })
    });
    check_push("total over limit", over, Some("resources[*].body (total)"));
}
