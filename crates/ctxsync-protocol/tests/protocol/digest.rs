//! Body digests (scheme 2) and delta pushes: every field of every body is covered, the
//! encoding is exactly the one the proto documents (known answers built by hand), the
//! digest is over the wire text as sent, and `DeltaBase` turns a full push into a delta
//! that `Push::try_from` reads back and `Snapshot::try_from` refuses.

use ctxsync_protocol::v1::context_resource::{Body, Status};
use ctxsync_protocol::v1::push_context_state_request::McpDiscovery;
use ctxsync_protocol::v1::{self, ContextResource, PushContextStateRequest};
use ctxsync_protocol::*;
use serde_json::json;
use sha2::{Digest, Sha256};

// ---- (a) every field counts ------------------------------------------------------------

fn rich_icon() -> v1::McpIcon {
    v1::McpIcon {
        src: "data:image/png;base64,AAAA".into(),
        mime_type: "image/png".into(),
        sizes: vec!["16x16".into(), "32x32".into()],
        theme: "dark".into(),
    }
}

fn rich_annotations() -> v1::McpToolAnnotations {
    v1::McpToolAnnotations {
        title: "Read".into(),
        read_only_hint: Some(true),
        destructive_hint: Some(false),
        idempotent_hint: None,
        open_world_hint: Some(true),
    }
}

fn rich_tool() -> v1::McpTool {
    v1::McpTool {
        name: "read".into(),
        description: "Read a file".into(),
        input_schema: r#"{"type":"object"}"#.into(),
        title: "Read file".into(),
        annotations: Some(rich_annotations()),
        output_schema: r#"{"type":"string"}"#.into(),
        icons: vec![rich_icon()],
        meta: r#"{"ui":{}}"#.into(),
    }
}

fn rich_server() -> v1::McpServer {
    v1::McpServer {
        server_name: "fs".into(),
        description: "files".into(),
        tools: vec![rich_tool()],
        protocol_version: "2026-07-28".into(),
        server_info: Some(v1::McpServerInfo {
            name: "fs-server".into(),
            version: "1.2.3".into(),
            title: "Files".into(),
            description: "Local files".into(),
        }),
        instructions: "Prefer read.".into(),
        timings: Some(v1::McpConnectTimings {
            start_ms: Some(5),
            handshake_ms: 40,
            tools_ms: 3,
        }),
        always_load: true,
    }
}

fn server(edit: impl FnOnce(&mut v1::McpServer)) -> Body {
    let mut server = rich_server();
    edit(&mut server);
    Body::McpServer(server)
}

fn tool(edit: impl FnOnce(&mut v1::McpTool)) -> Body {
    server(|s| edit(&mut s.tools[0]))
}

fn annotations(edit: impl FnOnce(&mut v1::McpToolAnnotations)) -> Body {
    tool(|t| edit(t.annotations.as_mut().expect("rich tool has annotations")))
}

fn icon(edit: impl FnOnce(&mut v1::McpIcon)) -> Body {
    tool(|t| edit(&mut t.icons[0]))
}

fn skill(meta: &str, name: &str, description: &str) -> Body {
    Body::Skill(v1::Skill {
        meta: meta.into(),
        name: name.into(),
        description: description.into(),
    })
}

fn instruction(content: &str) -> Body {
    Body::InstructionFile(v1::InstructionFile {
        content: content.into(),
    })
}

type HintField = fn(&mut v1::McpToolAnnotations) -> &mut Option<bool>;

/// Named bodies, each differing from the others in one field (or one field boundary).
/// Built in groups (kinds, skill, server, tool, icon, hints) so each list stays readable.
fn variants() -> Vec<(String, Body)> {
    let mut cases = kind_variants();
    cases.extend(skill_variants());
    cases.extend(server_variants());
    cases.extend(tool_variants());
    cases.extend(icon_and_meta_variants());
    cases.extend(hint_variants());
    cases
}

/// Each kind empty, and instruction content.
fn kind_variants() -> Vec<(String, Body)> {
    vec![
        // Kinds, empty: the oneof name alone tells them apart.
        ("instruction empty".into(), instruction("")),
        ("skill empty".into(), skill("", "", "")),
        ("config".into(), Body::McpConfig(v1::McpConfig {})),
        (
            "server empty".into(),
            Body::McpServer(v1::McpServer::default()),
        ),
        ("instruction".into(), instruction("be kind")),
        ("instruction edited".into(), instruction("be kinder")),
        // The kind name is length-prefixed: content cannot pose as a kind.
        ("instruction 'skill'".into(), instruction("skill")),
    ]
}

/// Skill fields and the boundaries between them.
fn skill_variants() -> Vec<(String, Body)> {
    vec![
        // Skill fields and their boundaries.
        ("skill".into(), skill("m", "pdf", "PDF forms")),
        ("skill meta".into(), skill("m2", "pdf", "PDF forms")),
        ("skill name".into(), skill("m", "pdg", "PDF forms")),
        ("skill description".into(), skill("m", "pdf", "PDF form")),
        ("skill meta|name ab|c".into(), skill("ab", "c", "")),
        ("skill meta|name a|bc".into(), skill("a", "bc", "")),
        ("skill name|description ab|c".into(), skill("", "ab", "c")),
        ("skill name|description a|bc".into(), skill("", "a", "bc")),
        ("skill all in description".into(), skill("", "", "abc")),
    ]
}

/// Server fields, its timings and its tool list.
fn server_variants() -> Vec<(String, Body)> {
    vec![
        // Server fields.
        ("server".into(), server(|_| {})),
        (
            "server_name".into(),
            server(|s| s.server_name = "gs".into()),
        ),
        (
            "server description".into(),
            server(|s| s.description = "file".into()),
        ),
        (
            "server_name|description boundary".into(),
            server(|s| {
                s.server_name = "fsf".into();
                s.description = "iles".into();
            }),
        ),
        ("no tools".into(), server(|s| s.tools.clear())),
        (
            "two tools".into(),
            server(|s| {
                let mut second = rich_tool();
                second.name = "write".into();
                s.tools.push(second);
            }),
        ),
        (
            "two tools swapped".into(),
            server(|s| {
                let mut second = rich_tool();
                second.name = "write".into();
                s.tools.insert(0, second);
            }),
        ),
        (
            "protocol_version".into(),
            server(|s| s.protocol_version = "2025-06-18".into()),
        ),
        ("server_info None".into(), server(|s| s.server_info = None)),
        (
            "server_info default".into(),
            server(|s| s.server_info = Some(Default::default())),
        ),
        (
            "instructions".into(),
            server(|s| s.instructions = "Prefer write.".into()),
        ),
        (
            "instructions empty".into(),
            server(|s| s.instructions.clear()),
        ),
        ("timings None".into(), server(|s| s.timings = None)),
        (
            "timings default".into(),
            server(|s| s.timings = Some(Default::default())),
        ),
        (
            "start_ms None".into(),
            server(|s| s.timings.as_mut().unwrap().start_ms = None),
        ),
        (
            "start_ms Some(0)".into(),
            server(|s| s.timings.as_mut().unwrap().start_ms = Some(0)),
        ),
        (
            "handshake_ms".into(),
            server(|s| s.timings.as_mut().unwrap().handshake_ms = 41),
        ),
        (
            "tools_ms".into(),
            server(|s| s.timings.as_mut().unwrap().tools_ms = 4),
        ),
        (
            "always_load false".into(),
            server(|s| s.always_load = false),
        ),
        (
            "handshake_ms and tools_ms swapped".into(),
            server(|s| {
                let t = s.timings.as_mut().unwrap();
                (t.handshake_ms, t.tools_ms) = (t.tools_ms, t.handshake_ms);
            }),
        ),
    ]
}

/// One tool's own fields.
fn tool_variants() -> Vec<(String, Body)> {
    vec![
        // Tool fields.
        ("tool name".into(), tool(|t| t.name = "reads".into())),
        (
            "tool description".into(),
            tool(|t| t.description = "Read a fil".into()),
        ),
        (
            "tool name|description boundary".into(),
            tool(|t| {
                t.name = "readR".into();
                t.description = "ead a file".into();
            }),
        ),
        (
            "input_schema".into(),
            tool(|t| t.input_schema = r#"{"type":"object","properties":{}}"#.into()),
        ),
        (
            "input_schema empty".into(),
            tool(|t| t.input_schema.clear()),
        ),
        (
            "tool title".into(),
            tool(|t| t.title = "Read a file".into()),
        ),
        ("annotations None".into(), tool(|t| t.annotations = None)),
        (
            "annotations default".into(),
            tool(|t| t.annotations = Some(Default::default())),
        ),
        (
            "annotations title".into(),
            annotations(|a| a.title = "Reads".into()),
        ),
        (
            "output_schema".into(),
            tool(|t| t.output_schema = r#"{"type":"number"}"#.into()),
        ),
        (
            "output_schema empty".into(),
            tool(|t| t.output_schema.clear()),
        ),
    ]
}

/// The tool's icons and its meta.
fn icon_and_meta_variants() -> Vec<(String, Body)> {
    vec![
        ("no icons".into(), tool(|t| t.icons.clear())),
        ("two icons".into(), tool(|t| t.icons.push(rich_icon()))),
        (
            "icon src".into(),
            icon(|i| i.src = "https://x/i.png".into()),
        ),
        (
            "icon mime_type".into(),
            icon(|i| i.mime_type = "image/svg+xml".into()),
        ),
        ("icon no sizes".into(), icon(|i| i.sizes.clear())),
        ("icon one size".into(), icon(|i| i.sizes.truncate(1))),
        (
            "icon size edited".into(),
            icon(|i| i.sizes[1] = "48x48".into()),
        ),
        (
            "icon sizes joined".into(),
            icon(|i| i.sizes = vec!["16x1632x32".into()]),
        ),
        (
            "icon sizes split differently".into(),
            icon(|i| i.sizes = vec!["16x163".into(), "2x32".into()]),
        ),
        ("icon theme".into(), icon(|i| i.theme = "light".into())),
        ("icon theme empty".into(), icon(|i| i.theme.clear())),
        ("tool meta".into(), tool(|t| t.meta = r#"{"ui":[]}"#.into())),
        ("tool meta empty".into(), tool(|t| t.meta.clear())),
    ]
}

/// Each hint: None, false and true all differ (the rich value is one of them).
fn hint_variants() -> Vec<(String, Body)> {
    let mut cases = Vec::new();
    let hints: [(&str, HintField); 4] = [
        ("read_only_hint", |a| &mut a.read_only_hint),
        ("destructive_hint", |a| &mut a.destructive_hint),
        ("idempotent_hint", |a| &mut a.idempotent_hint),
        ("open_world_hint", |a| &mut a.open_world_hint),
    ];
    for (name, hint) in hints {
        let rich = *hint(&mut rich_annotations());
        for value in [None, Some(false), Some(true)] {
            if value != rich {
                cases.push((
                    format!("{name} {value:?}"),
                    annotations(|a| *hint(a) = value),
                ));
            }
        }
    }
    cases
}

#[test]
fn a_change_in_any_field_changes_the_digest() {
    let cases = variants();
    // The cases themselves are distinct bodies, so any equal digest is a collision.
    for (i, (a, body_a)) in cases.iter().enumerate() {
        for (b, body_b) in &cases[i + 1..] {
            assert_ne!(
                body_a, body_b,
                "test cases {a:?} and {b:?} are the same body"
            );
        }
    }
    let digests: Vec<BodyDigest> = cases.iter().map(|(_, b)| BodyDigest::of_wire(b)).collect();
    for (i, (a, _)) in cases.iter().enumerate() {
        for (j, (b, _)) in cases.iter().enumerate().skip(i + 1) {
            assert_ne!(digests[i], digests[j], "{a:?} and {b:?} share a digest");
        }
    }
    // The same input always gives the same digest, also from a separate copy.
    for ((name, body), digest) in cases.iter().zip(&digests) {
        assert_eq!(BodyDigest::of_wire(body), *digest, "{name}");
        assert_eq!(BodyDigest::of_wire(&body.clone()), *digest, "{name}");
    }
}

#[test]
fn digest_bytes_round_trip_and_only_32_bytes_read() {
    let digest = BodyDigest::of_wire(&instruction("x"));
    assert_eq!(digest.as_bytes().len(), BODY_DIGEST_BYTES);
    assert_eq!(BodyDigest::from_slice(digest.as_bytes()), Some(digest));
    assert_eq!(BodyDigest::from_slice(&digest.as_bytes()[..31]), None);
    assert_eq!(BodyDigest::from_slice(&[0; 33]), None);
    assert_eq!(BodyDigest::from_slice(&[]), None);
    assert_eq!(DELTA_DIGEST_SCHEME, 2);
}

// ---- (b) known answers, encoded by hand from the proto comment ---------------------------

/// string/bytes: 8-byte little-endian length, then the bytes.
fn s(text: &str) -> Vec<u8> {
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    out
}

/// uint64: 8 bytes little-endian (also a repeated field's count).
fn n(value: u64) -> Vec<u8> {
    value.to_le_bytes().to_vec()
}

fn sha256(encoding: &[u8]) -> [u8; 32] {
    Sha256::digest(encoding).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn scheme_2_known_answer_skill_instruction_and_config() {
    let body = skill("---\nname: pdf\n---\n", "pdf", "");
    // Written out byte by byte: "skill", meta, name, description (empty).
    let mut encoding = Vec::new();
    encoding.extend_from_slice(b"\x05\0\0\0\0\0\0\0skill");
    encoding.extend_from_slice(b"\x12\0\0\0\0\0\0\0---\nname: pdf\n---\n");
    encoding.extend_from_slice(b"\x03\0\0\0\0\0\0\0pdf");
    encoding.extend_from_slice(b"\0\0\0\0\0\0\0\0");
    assert_eq!(
        encoding,
        [s("skill"), s("---\nname: pdf\n---\n"), s("pdf"), s("")].concat()
    );
    let expected = sha256(&encoding);
    assert_eq!(BodyDigest::of_wire(&body).as_bytes(), &expected);

    let content = "be kind é";
    assert_eq!(
        BodyDigest::of_wire(&instruction(content)).as_bytes(),
        &sha256(&[s("instruction_file"), s(content)].concat())
    );
    assert_eq!(
        BodyDigest::of_wire(&Body::McpConfig(v1::McpConfig {})).as_bytes(),
        &sha256(&s("mcp_config"))
    );
    // A fixed vector for other implementations (computed apart, with Python's hashlib).
    assert_eq!(
        hex(&expected),
        "9010c2e8c147b09ab3ed500bfca90c209ed29c0dc6a3f9d01f185e364f349c63"
    );
}

#[test]
fn scheme_2_known_answer_server_with_one_tool() {
    known_answer_full_server();
    known_answer_bare_server();
    known_answer_tool_without_annotations();
}

/// Every field set: the encoding written out field by field, and a fixed vector.
fn known_answer_full_server() {
    let body = Body::McpServer(v1::McpServer {
        server_name: "fs".into(),
        description: String::new(),
        tools: vec![v1::McpTool {
            name: "read".into(),
            description: "d".into(),
            input_schema: r#"{"type": "object"}"#.into(),
            title: String::new(),
            annotations: Some(v1::McpToolAnnotations {
                title: String::new(),
                read_only_hint: Some(true),
                destructive_hint: None,
                idempotent_hint: Some(false),
                open_world_hint: None,
            }),
            output_schema: String::new(),
            icons: vec![v1::McpIcon {
                src: "s".into(),
                mime_type: String::new(),
                sizes: vec!["16x16".into()],
                theme: "dark".into(),
            }],
            meta: "{}".into(),
        }],
        protocol_version: "2026-07-28".into(),
        server_info: Some(v1::McpServerInfo {
            name: "n".into(),
            version: "1".into(),
            title: String::new(),
            description: String::new(),
        }),
        instructions: String::new(),
        timings: Some(v1::McpConnectTimings {
            start_ms: None,
            handshake_ms: 7,
            tools_ms: 258,
        }),
        always_load: true,
    });
    let encoding = [
        s("mcp_server"),
        s("fs"),                      // 1 server_name
        s(""),                        // 2 description
        n(1),                         // 3 tools: count, then the tool's fields, no presence byte
        s("read"),                    //   1 name
        s("d"),                       //   2 description
        s(r#"{"type": "object"}"#),   //   3 input_schema, its text as sent
        s(""),                        //   4 title
        vec![1],                      //   5 annotations: present
        s(""),                        //     1 title
        vec![1, 1],                   //     2 read_only_hint: present, true
        vec![0],                      //     3 destructive_hint: unset
        vec![1, 0],                   //     4 idempotent_hint: present, false
        vec![0],                      //     5 open_world_hint: unset
        s(""),                        //   6 output_schema
        n(1),                         //   7 icons: count
        s("s"),                       //     1 src
        s(""),                        //     2 mime_type
        n(1),                         //     3 sizes: count
        s("16x16"),                   //       the size
        s("dark"),                    //     4 theme
        s("{}"),                      //   8 meta
        s("2026-07-28"),              // 4 protocol_version
        vec![1],                      // 5 server_info: present
        s("n"),                       //   1 name
        s("1"),                       //   2 version
        s(""),                        //   3 title
        s(""),                        //   4 description
        s(""),                        // 6 instructions
        vec![1],                      // 7 timings: present
        vec![0],                      //   1 start_ms: unset
        n(7),                         //   2 handshake_ms
        vec![2, 1, 0, 0, 0, 0, 0, 0], //   3 tools_ms: 258 little-endian
        vec![1],                      // 8 always_load: true
    ]
    .concat();
    assert_eq!(
        hex(BodyDigest::of_wire(&body).as_bytes()),
        hex(&sha256(&encoding))
    );
    assert_eq!(
        hex(&sha256(&encoding)),
        "fdf7df4df7787638e9da69ae6ef8479ae91ce050acd7177b07923460ca9d2e59"
    );
}

/// Every optional message unset and no tools: one zero byte for each.
fn known_answer_bare_server() {
    let bare = Body::McpServer(v1::McpServer {
        server_name: "x".into(),
        ..Default::default()
    });
    let encoding = [
        s("mcp_server"),
        s("x"),
        s(""),
        n(0),
        s(""),
        vec![0],
        s(""),
        vec![0],
        vec![0], // always_load: false
    ]
    .concat();
    assert_eq!(BodyDigest::of_wire(&bare).as_bytes(), &sha256(&encoding));
}

/// A tool without annotations and with two icons, the second without sizes.
fn known_answer_tool_without_annotations() {
    let tool = Body::McpServer(v1::McpServer {
        tools: vec![v1::McpTool {
            name: "t".into(),
            icons: vec![
                v1::McpIcon {
                    src: "a".into(),
                    sizes: vec!["1".into(), "2".into()],
                    ..Default::default()
                },
                v1::McpIcon {
                    src: "b".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }],
        timings: Some(v1::McpConnectTimings {
            start_ms: Some(0),
            handshake_ms: 0,
            tools_ms: 0,
        }),
        ..Default::default()
    });
    let encoding = [
        s("mcp_server"),
        s(""),
        s(""),
        n(1),
        s("t"),
        s(""),
        s(""),
        s(""),
        vec![0], // annotations unset
        s(""),
        n(2),
        s("a"),
        s(""),
        n(2),
        s("1"),
        s("2"),
        s(""),
        s("b"),
        s(""),
        n(0),
        s(""),
        s(""), // meta
        s(""), // protocol_version
        vec![0],
        s(""),
        vec![1],
        vec![1], // start_ms present
        n(0),
        n(0),
        n(0),
        vec![0], // always_load
    ]
    .concat();
    assert_eq!(BodyDigest::of_wire(&tool).as_bytes(), &sha256(&encoding));
}

// ---- (c) domain bodies and JSON text -----------------------------------------------------

fn domain_bodies() -> Vec<ResourceBody> {
    vec![
        ResourceBody::InstructionFile(InstructionFileBody {
            content: "be kind".into(),
        }),
        ResourceBody::Skill(SkillBody {
            meta: "---\nname: r\n---".into(),
            name: "r".into(),
            description: "reviews".into(),
        }),
        ResourceBody::McpConfig,
        ResourceBody::McpServer(McpServerBody {
            server_name: "fs".into(),
            description: "files".into(),
            tools: vec![
                McpTool {
                    name: "read".into(),
                    description: "d".into(),
                    input_schema: json!({"type": "object", "properties": {"p": {"type": "string"}}}),
                    title: "Read".into(),
                    annotations: Some(McpToolAnnotations {
                        title: "R".into(),
                        read_only_hint: Some(true),
                        destructive_hint: None,
                        idempotent_hint: Some(false),
                        open_world_hint: None,
                    }),
                    output_schema: Some(json!({"type": "object"})),
                    icons: vec![McpIcon {
                        src: "s".into(),
                        mime_type: "image/png".into(),
                        sizes: vec!["any".into()],
                        theme: "light".into(),
                    }],
                    meta: Some(json!({"ui": {"resourceUri": "ui://fs"}})),
                },
                McpTool {
                    name: "plain".into(),
                    input_schema: json!({}),
                    ..Default::default()
                },
            ],
            protocol_version: "2026-07-28".into(),
            server_info: Some(McpServerInfo {
                name: "n".into(),
                ..Default::default()
            }),
            instructions: "i".into(),
            timings: Some(McpConnectTimings {
                start_ms: None,
                handshake_ms: 1,
                tools_ms: 2,
            }),
            always_load: true,
        }),
    ]
}

fn wire_body(body: ResourceBody) -> Body {
    let resource = Resource {
        source: "s".into(),
        source_path: None,
        content_hash: String::new(),
        size_bytes: 0,
        status: ResourceStatus::Ok,
        error: None,
        body,
    };
    ContextResource::from(resource)
        .body
        .expect("a converted resource has a body")
}

#[test]
fn domain_digest_is_that_of_its_wire_form() {
    let bodies = domain_bodies();
    let digests: Vec<_> = bodies.iter().map(BodyDigest::of).collect();
    for (body, digest) in bodies.into_iter().zip(&digests) {
        assert_eq!(
            *digest,
            BodyDigest::of_wire(&wire_body(body.clone())),
            "{body:?}"
        );
    }
    for (i, a) in digests.iter().enumerate() {
        assert!(!digests[i + 1..].contains(a), "body {i} shares a digest");
    }
}

#[test]
fn json_text_is_hashed_as_sent() {
    let with_schema = |schema: &str| {
        tool(|t| {
            t.input_schema = schema.into();
            t.output_schema = r#"{"type":"object"}"#.into();
        })
    };
    let compact = with_schema(r#"{"type":"object"}"#);
    let spaced = with_schema(r#"{ "type" : "object" }"#);
    assert_ne!(BodyDigest::of_wire(&compact), BodyDigest::of_wire(&spaced));
    let reordered = |a: &str, b: &str| tool(|t| t.meta = format!("{{{a},{b}}}"));
    assert_ne!(
        BodyDigest::of_wire(&reordered(r#""a":1"#, r#""b":2"#)),
        BodyDigest::of_wire(&reordered(r#""b":2"#, r#""a":1"#))
    );

    // Both read as the same domain body, yet the push keeps each one's digest as sent.
    let push =
        |body: Body| Push::try_from(request(vec![resource("mcp:fs", body)])).expect("valid push");
    let (a, b) = (push(compact.clone()), push(spaced.clone()));
    assert_eq!(a.snapshot, b.snapshot);
    assert_eq!(a.digests, vec![BodyDigest::of_wire(&compact)]);
    assert_eq!(b.digests, vec![BodyDigest::of_wire(&spaced)]);
    // The domain digest is that of the re-serialized (compact) text, not the spaced one.
    let domain = BodyDigest::of(&b.snapshot.resources[0].body);
    assert_eq!(domain, BodyDigest::of_wire(&compact));
    assert_ne!(domain, b.digests[0]);
}

// ---- (d) DeltaBase -----------------------------------------------------------------------

fn resource(source: &str, body: Body) -> ContextResource {
    ContextResource {
        source: source.into(),
        source_path: Some(format!("/ws/{source}")),
        content_hash: format!("hash-of-{source}"),
        size_bytes: source.len() as u64,
        status: Status::Ok as i32,
        error: String::new(),
        body_digest: Vec::new(),
        body: Some(body),
    }
}

fn request(resources: Vec<ContextResource>) -> PushContextStateRequest {
    PushContextStateRequest {
        version: 3,
        aggregate_hash: "agg".into(),
        resources,
        initial: false,
        snapshot_error: String::new(),
        agent_run_id: "run-1".into(),
        mcp_discovery: Some(McpDiscovery {
            phase: 2,
            ..Default::default()
        }),
        delta: false,
    }
}

/// A full push of every kind, with every non-body field set to something distinct.
fn full() -> PushContextStateRequest {
    request(vec![
        resource("AGENTS.md", instruction("be kind")),
        ContextResource {
            status: Status::Invalid as i32,
            error: "name must be kebab-case".into(),
            source_path: None,
            ..resource("skills/pdf/SKILL.md", skill("m", "pdf", "PDF"))
        },
        ContextResource {
            status: Status::Oversize as i32,
            size_bytes: 999_999,
            ..resource(".mcp.json", Body::McpConfig(v1::McpConfig {}))
        },
        ContextResource {
            error: "more than 1000 tools offered".into(),
            ..resource("mcp:fs", Body::McpServer(rich_server()))
        },
    ])
}

/// Everything but `body` and `body_digest`.
fn non_body(r: &ContextResource) -> (&str, Option<&str>, &str, u64, i32, &str) {
    (
        &r.source,
        r.source_path.as_deref(),
        &r.content_hash,
        r.size_bytes,
        r.status,
        &r.error,
    )
}

fn assert_non_body_untouched(before: &PushContextStateRequest, after: &PushContextStateRequest) {
    assert_eq!(before.resources.len(), after.resources.len());
    for (b, a) in before.resources.iter().zip(&after.resources) {
        assert_eq!(non_body(b), non_body(a));
    }
    let top = |r: &PushContextStateRequest| {
        (
            r.version,
            r.aggregate_hash.clone(),
            r.initial,
            r.snapshot_error.clone(),
            r.agent_run_id.clone(),
            r.mcp_discovery.clone(),
        )
    };
    assert_eq!(top(before), top(after));
}

#[test]
fn delta_against_an_empty_base_omits_nothing() {
    let full = full();
    let base = DeltaBase::default();
    assert!(base.is_empty());
    let mut delta = full.clone();
    let next = base.into_delta(&mut delta);
    assert!(delta.delta);
    assert_eq!(
        delta,
        PushContextStateRequest {
            delta: true,
            ..full.clone()
        }
    );
    assert_eq!(next, DeltaBase::of_full(&full));
    assert!(!next.is_empty());
}

#[test]
fn delta_against_the_same_push_omits_every_body() {
    let full = full();
    let base = DeltaBase::of_full(&full);
    let mut delta = full.clone();
    let next = base.into_delta(&mut delta);
    assert!(delta.delta);
    assert_non_body_untouched(&full, &delta);
    for (sent, original) in delta.resources.iter().zip(&full.resources) {
        assert_eq!(sent.body, None, "{}", sent.source);
        assert_eq!(sent.body_digest.len(), BODY_DIGEST_BYTES);
        assert_eq!(
            sent.body_digest,
            BodyDigest::of_wire(original.body.as_ref().unwrap()).as_bytes()
        );
    }
    assert_eq!(next, base);
}

#[test]
fn delta_after_one_edit_sends_only_that_body() {
    let original = full();
    let base = DeltaBase::of_full(&original);
    let mut edited = original.clone();
    edited.resources[3].body = Some(tool(|t| t.description = "Read one file".into()));
    edited.resources[1].status = Status::Ok as i32;
    edited.resources[1].error.clear();
    let mut delta = edited.clone();
    let next = base.into_delta(&mut delta);
    assert_non_body_untouched(&edited, &delta);
    let kept: Vec<bool> = delta.resources.iter().map(|r| r.body.is_some()).collect();
    assert_eq!(kept, [false, false, false, true]);
    assert_eq!(delta.resources[3], edited.resources[3]);
    assert!(delta.resources[3].body_digest.is_empty());
    assert_eq!(next, DeltaBase::of_full(&edited));
    assert_ne!(next, base);
}

#[test]
fn delta_matches_bodies_by_source() {
    let original = full();
    let base = DeltaBase::of_full(&original);
    // A renamed source with the same body, a new source, and one dropped.
    let mut changed = original.clone();
    changed.resources[0].source = "CLAUDE.md".into();
    changed.resources.remove(2);
    changed
        .resources
        .push(resource("NEW.md", instruction("new")));
    let mut delta = changed.clone();
    let next = base.into_delta(&mut delta);
    let omitted: Vec<(&str, bool)> = delta
        .resources
        .iter()
        .map(|r| (r.source.as_str(), r.body.is_none()))
        .collect();
    assert_eq!(
        omitted,
        [
            ("CLAUDE.md", false),
            ("skills/pdf/SKILL.md", true),
            ("mcp:fs", true),
            ("NEW.md", false),
        ]
    );
    assert_eq!(next, DeltaBase::of_full(&changed));
    assert!(DeltaBase::of_full(&request(vec![])).is_empty());
}

// ---- (e) reading a delta back ------------------------------------------------------------

#[test]
fn push_reads_a_delta_into_kept_resources() {
    let original = full();
    let base = DeltaBase::of_full(&original);
    let mut edited = original.clone();
    edited.resources[0].body = Some(instruction("be kinder"));
    let mut delta = edited.clone();
    base.into_delta(&mut delta);

    let push = Push::try_from(delta.clone()).expect("the delta is valid");
    assert!(push.delta);
    let sent: Vec<_> = delta
        .resources
        .iter()
        .filter(|r| r.body.is_some())
        .collect();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        push.snapshot.resources,
        vec![Resource {
            source: "AGENTS.md".into(),
            source_path: Some("/ws/AGENTS.md".into()),
            content_hash: "hash-of-AGENTS.md".into(),
            size_bytes: 9,
            status: ResourceStatus::Ok,
            error: None,
            body: ResourceBody::InstructionFile(InstructionFileBody {
                content: "be kinder".into()
            }),
        }]
    );
    assert_eq!(
        push.digests,
        vec![BodyDigest::of_wire(&instruction("be kinder"))]
    );
    let digest_of = |i: usize| BodyDigest::of_wire(original.resources[i].body.as_ref().unwrap());
    assert_eq!(
        push.kept,
        vec![
            KeptResource {
                index: 1,
                source: "skills/pdf/SKILL.md".into(),
                source_path: None,
                content_hash: "hash-of-skills/pdf/SKILL.md".into(),
                size_bytes: 19,
                status: ResourceStatus::Invalid,
                error: Some("name must be kebab-case".into()),
                body_digest: digest_of(1),
            },
            KeptResource {
                index: 2,
                source: ".mcp.json".into(),
                source_path: Some("/ws/.mcp.json".into()),
                content_hash: "hash-of-.mcp.json".into(),
                size_bytes: 999_999,
                status: ResourceStatus::Oversize,
                error: None,
                body_digest: digest_of(2),
            },
            KeptResource {
                index: 3,
                source: "mcp:fs".into(),
                source_path: Some("/ws/mcp:fs".into()),
                content_hash: "hash-of-mcp:fs".into(),
                size_bytes: 6,
                status: ResourceStatus::Ok,
                error: Some("more than 1000 tools offered".into()),
                body_digest: digest_of(3),
            },
        ]
    );
    let top = &push.snapshot;
    assert_eq!(
        (top.version, top.agent_run_id.as_deref(), top.phase),
        (3, Some("run-1"), DiscoveryPhase::Complete)
    );

    let refused = Snapshot::try_from(delta).unwrap_err();
    assert_eq!(refused.field, "resources[1].body");
    assert_eq!(refused.problem, Problem::Missing);
}

#[test]
fn push_of_a_full_request_keeps_nothing() {
    let whole = full();
    let push = Push::try_from(whole.clone()).expect("valid");
    assert!(!push.delta);
    assert!(push.kept.is_empty());
    let expected: Vec<_> = whole
        .resources
        .iter()
        .map(|r| BodyDigest::of_wire(r.body.as_ref().unwrap()))
        .collect();
    assert_eq!(push.digests, expected);
    assert_eq!(Snapshot::try_from(whole).unwrap(), push.snapshot);

    // A delta that omits nothing is still a delta, and still a whole snapshot.
    let mut delta = full();
    DeltaBase::default().into_delta(&mut delta);
    let push = Push::try_from(delta.clone()).expect("valid");
    assert!(push.delta && push.kept.is_empty());
    assert_eq!(Snapshot::try_from(delta).unwrap(), push.snapshot);
}

#[test]
fn a_delta_refused_by_snapshot_names_the_first_omitted_body() {
    let original = full();
    let mut edited = original.clone();
    for r in &mut edited.resources[..2] {
        r.size_bytes += 1; // non-body edits do not stop a body being left out
    }
    edited.resources[0].body = Some(instruction("changed"));
    edited.resources[1].body = Some(skill("changed", "pdf", "PDF"));
    let mut delta = edited;
    DeltaBase::of_full(&original).into_delta(&mut delta);
    let omitted: Vec<usize> = (0..4)
        .filter(|&i| delta.resources[i].body.is_none())
        .collect();
    assert_eq!(omitted, [2, 3]);
    let refused = Snapshot::try_from(delta).unwrap_err();
    assert_eq!(refused.field, "resources[2].body");
}
