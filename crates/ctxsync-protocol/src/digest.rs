//! Body digests (scheme 2, defined in the proto at `ContextResource.body_digest`) and the
//! agent's side of a delta push: which bodies a push may leave out.
//!
//! The digest is computed over the wire message as sent, so an agent in any language can
//! compute it from what it encodes, and the server from what it decoded, without either
//! re-serializing JSON.

use std::collections::HashMap;
use std::fmt;

use sha2::{Digest, Sha256};

use crate::domain::{self, InstructionFileBody, ResourceBody, SkillBody};
use crate::encoded_size::{json_text_len, write_json};
use crate::v1;
use crate::v1::context_resource::Body;

/// The body digest scheme this crate computes; servers announce it in their
/// `UpdateStartup` answer when they accept delta pushes. Scheme 2 is scheme 1 plus
/// `MCPServer.always_load`: an agent or server that knows only scheme 1 sees another
/// number and falls back to full pushes, so the two never compare digests that cover
/// different fields.
pub const DELTA_DIGEST_SCHEME: u32 = 2;

/// Length of a body digest on the wire.
pub const BODY_DIGEST_BYTES: usize = 32;

/// The scheme-2 digest of one resource body.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct BodyDigest([u8; BODY_DIGEST_BYTES]);

impl BodyDigest {
    /// The digest of a wire body, as sent.
    pub fn of_wire(body: &Body) -> Self {
        let mut h = Canonical(Sha256::new());
        match body {
            Body::InstructionFile(v1::InstructionFile { content }) => {
                h.text("instruction_file");
                h.text(content);
            }
            Body::Skill(v1::Skill {
                meta,
                name,
                description,
            }) => {
                h.text("skill");
                h.text(meta);
                h.text(name);
                h.text(description);
            }
            Body::McpConfig(v1::McpConfig {}) => h.text("mcp_config"),
            Body::McpServer(server) => {
                h.text("mcp_server");
                h.server(server);
            }
        }
        Self(h.0.finalize().into())
    }

    /// The digest of a domain body: that of its wire form, computed from the domain
    /// types without building it (the golden vectors below hold the two equal).
    pub fn of(body: &ResourceBody) -> Self {
        let mut h = Canonical(Sha256::new());
        match body {
            ResourceBody::InstructionFile(InstructionFileBody { content }) => {
                h.text("instruction_file");
                h.text(content);
            }
            ResourceBody::Skill(SkillBody {
                meta,
                name,
                description,
            }) => {
                h.text("skill");
                h.text(meta);
                h.text(name);
                h.text(description);
            }
            ResourceBody::McpConfig => h.text("mcp_config"),
            ResourceBody::McpServer(server) => {
                h.text("mcp_server");
                h.domain_server(server);
            }
        }
        Self(h.0.finalize().into())
    }

    /// Reads a digest sent on the wire; `None` unless it is exactly 32 bytes.
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }

    /// The digest's 32 bytes, as sent on the wire.
    pub fn as_bytes(&self) -> &[u8; BODY_DIGEST_BYTES] {
        &self.0
    }
}

impl fmt::Debug for BodyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Eight bytes tell digests apart in a test failure; all 32 only add noise.
        write!(f, "BodyDigest(")?;
        for byte in &self.0[..8] {
            write!(f, "{byte:02x}")?;
        }
        write!(f, "…)")
    }
}

/// The canonical encoding of scheme 2, fed straight into the hash. Every destructuring
/// below is exhaustive, so a field added to the proto fails to compile here until a new
/// scheme decides whether it is covered.
struct Canonical(Sha256);

impl Canonical {
    fn len(&mut self, n: usize) {
        self.0.update((n as u64).to_le_bytes());
    }

    fn text(&mut self, text: &str) {
        self.len(text.len());
        self.0.update(text.as_bytes());
    }

    fn number(&mut self, n: u64) {
        self.0.update(n.to_le_bytes());
    }

    /// The presence byte of an optional field; true when the value follows.
    fn present<T>(&mut self, value: Option<T>) -> Option<T> {
        self.0.update([u8::from(value.is_some())]);
        value
    }

    fn bool(&mut self, value: bool) {
        self.0.update([u8::from(value)]);
    }

    fn flag(&mut self, value: Option<bool>) {
        if let Some(value) = self.present(value) {
            self.bool(value);
        }
    }

    /// A JSON field as its wire form carries it: its compact text, the empty string when
    /// absent.
    fn json<J: JsonField + ?Sized>(&mut self, value: &J) {
        value.feed(self);
    }
}

/// A JSON field of either form: the wire holds its text, the domain a parsed value.
trait JsonField {
    fn feed(&self, h: &mut Canonical);
}

/// Wire form: the text as sent.
impl JsonField for String {
    fn feed(&self, h: &mut Canonical) {
        h.text(self);
    }
}

/// Domain form: the compact text the wire would carry, written straight into the hash.
impl JsonField for serde_json::Value {
    fn feed(&self, h: &mut Canonical) {
        struct Feed<'a>(&'a mut Sha256);
        impl std::io::Write for Feed<'_> {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.update(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        h.len(json_text_len(self));
        write_json(Feed(&mut h.0), self);
    }
}

/// An absent domain value is the empty wire text.
impl JsonField for Option<serde_json::Value> {
    fn feed(&self, h: &mut Canonical) {
        match self {
            Some(value) => value.feed(h),
            None => h.len(0),
        }
    }
}

/// Writes the layout of an MCP server body and its tools once, for both forms: the wire
/// (prost) and domain types share every field name and differ only in how JSON is held
/// ([`JsonField`]), which no trait over the two struct families could express without
/// restating each field, so the layout is a macro instantiated for each form.
macro_rules! mcp_layout {
    ($server_fn:ident, $tool_fn:ident, $types:ident:
        $server:ident, $tool:ident, $info:ident, $timings:ident, $annotations:ident, $icon:ident) => {
        impl Canonical {
            fn $server_fn(&mut self, server: &$types::$server) {
                let $types::$server {
                    server_name,
                    description,
                    tools,
                    protocol_version,
                    server_info,
                    instructions,
                    timings,
                    always_load,
                } = server;
                self.text(server_name);
                self.text(description);
                self.len(tools.len());
                for tool in tools {
                    self.$tool_fn(tool);
                }
                self.text(protocol_version);
                if let Some(info) = self.present(server_info.as_ref()) {
                    let $types::$info {
                        name,
                        version,
                        title,
                        description,
                    } = info;
                    self.text(name);
                    self.text(version);
                    self.text(title);
                    self.text(description);
                }
                self.text(instructions);
                if let Some(timings) = self.present(timings.as_ref()) {
                    let $types::$timings {
                        start_ms,
                        handshake_ms,
                        tools_ms,
                    } = timings;
                    if let Some(start) = self.present(*start_ms) {
                        self.number(start);
                    }
                    self.number(*handshake_ms);
                    self.number(*tools_ms);
                }
                self.bool(*always_load);
            }

            fn $tool_fn(&mut self, tool: &$types::$tool) {
                let $types::$tool {
                    name,
                    description,
                    input_schema,
                    title,
                    annotations,
                    output_schema,
                    icons,
                    meta,
                } = tool;
                self.text(name);
                self.text(description);
                self.json(input_schema);
                self.text(title);
                if let Some(annotations) = self.present(annotations.as_ref()) {
                    let $types::$annotations {
                        title,
                        read_only_hint,
                        destructive_hint,
                        idempotent_hint,
                        open_world_hint,
                    } = annotations;
                    self.text(title);
                    self.flag(*read_only_hint);
                    self.flag(*destructive_hint);
                    self.flag(*idempotent_hint);
                    self.flag(*open_world_hint);
                }
                self.json(output_schema);
                self.len(icons.len());
                for $types::$icon {
                    src,
                    mime_type,
                    sizes,
                    theme,
                } in icons
                {
                    self.text(src);
                    self.text(mime_type);
                    self.len(sizes.len());
                    for size in sizes {
                        self.text(size);
                    }
                    self.text(theme);
                }
                self.json(meta);
            }
        }
    };
}

mcp_layout!(server, tool, v1:
    McpServer, McpTool, McpServerInfo, McpConnectTimings, McpToolAnnotations, McpIcon);
mcp_layout!(domain_server, domain_tool, domain:
    McpServerBody, McpTool, McpServerInfo, McpConnectTimings, McpToolAnnotations, McpIcon);

/// The bodies the server holds for this agent run, as the agent last saw a push
/// accepted: source → digest. An agent keeps one per run and replaces it with
/// [`DeltaBase::into_delta`]'s result when the server accepts that push.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeltaBase(HashMap<String, BodyDigest>);

impl DeltaBase {
    /// The base a full push leaves once accepted: the digest of every body it carries.
    pub fn of_full(request: &v1::PushContextStateRequest) -> Self {
        Self(
            request
                .resources
                .iter()
                .filter_map(|r| Some((r.source.clone(), BodyDigest::of_wire(r.body.as_ref()?))))
                .collect(),
        )
    }

    /// Turns a full `request` into a delta: every body this base holds with the same
    /// digest is left out, its digest sent instead; everything else is untouched.
    /// Returns the base the server holds once it accepts the delta.
    pub fn into_delta(&self, request: &mut v1::PushContextStateRequest) -> Self {
        request.delta = true;
        let mut next = HashMap::with_capacity(request.resources.len());
        for resource in &mut request.resources {
            let Some(body) = &resource.body else { continue };
            let digest = BodyDigest::of_wire(body);
            if self.0.get(&resource.source) == Some(&digest) {
                resource.body = None;
                resource.body_digest = digest.as_bytes().to_vec();
            }
            next.insert(resource.source.clone(), digest);
        }
        Self(next)
    }

    /// True when the base holds no bodies, so a delta against it leaves nothing out.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Golden vectors: today's digests, stored JSON and encoded sizes of bodies with every
/// field set, so a change in how they are computed cannot change their bytes.
#[cfg(test)]
mod golden {
    use super::BodyDigest;
    use crate::domain::fixtures::server;
    use crate::{InstructionFileBody, McpServerBody, ResourceBody, SkillBody, body_len, v1};

    fn hex(digest: BodyDigest) -> String {
        digest
            .as_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn wire(body: &ResourceBody) -> v1::context_resource::Body {
        v1::ContextResource::from(crate::Resource {
            source: String::new(),
            source_path: None,
            content_hash: String::new(),
            size_bytes: 0,
            status: crate::ResourceStatus::Ok,
            error: None,
            body: body.clone(),
        })
        .body
        .expect("a body")
    }

    /// `(body, digest hex, stored JSON, encoded body length)`.
    fn check(body: ResourceBody, digest: &str, stored: &str, encoded: usize) {
        let wire = wire(&body);
        assert_eq!(hex(BodyDigest::of(&body)), digest, "digest of {body:?}");
        assert_eq!(hex(BodyDigest::of_wire(&wire)), digest, "wire digest");
        assert_eq!(body.to_json().unwrap().to_string(), stored, "stored JSON");
        assert_eq!(body_len(&wire), encoded, "encoded length");
        let read = ResourceBody::from_json(body.kind(), serde_json::from_str(stored).unwrap());
        assert_eq!(read.unwrap(), body, "read back");
        let read = ResourceBody::from_json_text(body.kind(), stored);
        assert_eq!(read.unwrap(), body, "read back from the text, parsed once");
    }

    #[test]
    fn a_server_with_every_field_set() {
        check(
            ResourceBody::McpServer(server()),
            "8ab0c4bc5d76aa81f5f99f7f2d6746f428dc4a7536c43a429309a8112a630bc5",
            r#"{"always_load":true,"description":"files","instructions":"Read before you write.","protocol_version":"2025-11-25","server_info":{"description":"Serves files.","name":"fs-server","title":"Files","version":"1.2.3"},"server_name":"fs","timings":{"handshake_ms":34,"start_ms":12,"tools_ms":56},"tools":[{"annotations":{"destructive_hint":false,"open_world_hint":false,"read_only_hint":true,"title":"Read file"},"description":"Reads a file.","icons":[{"mime_type":"image/png","sizes":["48x48","any"],"src":"data:image/png;base64,AAAA","theme":"dark"},{"src":"https://example.com/i.svg"}],"input_schema":{"properties":{"path":{"type":"string"}},"type":"object"},"meta":{"ui":{"resourceUri":"ui://read"},"é":[1,null]},"name":"read","output_schema":{"required":["text"],"type":"object"},"title":"Read"},{"annotations":{},"description":"","input_schema":{"type":"object"},"name":"ping"}]}"#,
            413,
        );
        // Written directly (the HTTP API), fields keep their declaration order.
        assert_eq!(
            serde_json::to_string(&server()).unwrap(),
            r#"{"server_name":"fs","description":"files","tools":[{"name":"read","description":"Reads a file.","input_schema":{"properties":{"path":{"type":"string"}},"type":"object"},"title":"Read","annotations":{"title":"Read file","read_only_hint":true,"destructive_hint":false,"open_world_hint":false},"output_schema":{"required":["text"],"type":"object"},"icons":[{"src":"data:image/png;base64,AAAA","mime_type":"image/png","sizes":["48x48","any"],"theme":"dark"},{"src":"https://example.com/i.svg"}],"meta":{"ui":{"resourceUri":"ui://read"},"é":[1,null]}},{"name":"ping","description":"","input_schema":{"type":"object"},"annotations":{}}],"protocol_version":"2025-11-25","server_info":{"name":"fs-server","version":"1.2.3","title":"Files","description":"Serves files."},"instructions":"Read before you write.","timings":{"start_ms":12,"handshake_ms":34,"tools_ms":56},"always_load":true}"#
        );
    }

    #[test]
    fn a_bare_server() {
        check(
            ResourceBody::McpServer(McpServerBody {
                server_name: "gone".into(),
                ..Default::default()
            }),
            "735c059c0bb1f2c0f8a130540a2c47a1052fb38a95c354ecc507957e3bb41a50",
            r#"{"description":"","server_name":"gone","tools":[]}"#,
            6,
        );
    }

    #[test]
    fn files_and_config() {
        check(
            ResourceBody::InstructionFile(InstructionFileBody {
                content: "# Agents\n".into(),
            }),
            "3bbe25360b8e3d6262e770687efcf3c50a60e628251eed58bbba1ce76f87f4f7",
            r##"{"content":"# Agents\n"}"##,
            11,
        );
        check(
            ResourceBody::Skill(SkillBody {
                meta: "---\nname: deploy\n---\n".into(),
                name: "deploy".into(),
                description: "Deploys.".into(),
            }),
            "fd9128e5abc4493dbe22689db37f91c61b8d98128595d79f94350d14c5b1b9ba",
            r#"{"description":"Deploys.","meta":"---\nname: deploy\n---\n","name":"deploy"}"#,
            41,
        );
        check(
            ResourceBody::McpConfig,
            "53e4356d36a898d4ae1106310c9d0b0cfe736bd9883e6c68574135d276562b23",
            "{}",
            0,
        );
        // Stored text that is not JSON is refused for every kind, as a JSON tree refused it.
        for kind in crate::BodyKind::ALL {
            assert!(ResourceBody::from_json_text(kind, "{").is_err(), "{kind:?}");
        }
    }
}
