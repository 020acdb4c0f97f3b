//! Each wire message's [`Precheck`]: the walk of a push's encoded bytes against SPEC §4's
//! counting limits before prost builds a struct (see [`codec`](crate::codec) for why).

use tonic::Status;

use crate::codec::{DEFAULT_BUFFER_BYTES, MAX_DECODED_BYTES, Precheck};
use crate::error::{Problem, WireError};
use crate::limits::{MAX_BODY_BYTES, MAX_PENDING_SERVERS, MAX_RESOURCES, MAX_TOTAL_BODY_BYTES};
use crate::v1;

macro_rules! no_precheck {
    ($($message:ty),*) => {
        no_precheck!(DEFAULT_BUFFER_BYTES; $($message),*);
    };
    ($buffer:expr; $($message:ty),*) => {$(
        /// Holds no repeated field: its decoded size is bounded by its encoded size.
        impl Precheck for $message {
            const BUFFER_BYTES: usize = $buffer;

            fn precheck(_: &[u8]) -> Result<(), Status> {
                Ok(())
            }
        }
    )*};
}

no_precheck!(
    v1::UpdateStartupRequest,
    v1::Startup,
    v1::PushContextStateResponse
);
// The call stream's messages: small buffers (see [`Precheck::BUFFER_BYTES`]).
no_precheck!(512; v1::AgentCallMessage, v1::ServerCallMessage);

/// Field numbers of the messages the walk looks into (proto/ctxsync/agent/v1/agent.proto):
/// every repeated field, since an empty entry costs two bytes on the wire and a whole
/// struct in memory.
const PUSH_RESOURCES: u32 = 3;
const PUSH_DISCOVERY: u32 = 7;
const DISCOVERY_PENDING: u32 = 2;
const RESOURCE_BODIES: std::ops::RangeInclusive<u32> = 10..=13;
const RESOURCE_MCP_SERVER: u32 = 13;
const SERVER_TOOLS: u32 = 3;
const TOOL_ICONS: u32 = 7;
const ICON_SIZES: u32 = 3;

/// Repeated entries of one kind found by the walk.
#[derive(Default)]
struct Counts {
    tools: usize,
    icons: usize,
    sizes: usize,
    pending: usize,
}

impl Counts {
    /// Walks a server body's tools, their icons and the icons' sizes.
    fn server(&mut self, body: &[u8]) -> Result<(), Malformed> {
        for field in Fields(body) {
            let (number, payload) = field?;
            let Some(tool) = payload.filter(|_| number == SERVER_TOOLS) else {
                continue;
            };
            self.tools += 1;
            for field in Fields(tool) {
                let (number, payload) = field?;
                let Some(icon) = payload.filter(|_| number == TOOL_ICONS) else {
                    continue;
                };
                self.icons += 1;
                for field in Fields(icon) {
                    let (number, payload) = field?;
                    self.sizes += usize::from(number == ICON_SIZES && payload.is_some());
                }
            }
        }
        Ok(())
    }

    fn decoded_bytes(&self, encoded: usize, resources: usize) -> usize {
        encoded
            + resources * size_of::<v1::ContextResource>()
            + self.tools * size_of::<v1::McpTool>()
            + self.icons * size_of::<v1::McpIcon>()
            + self.sizes * size_of::<String>()
            + self.pending * size_of::<v1::push_context_state_request::PendingServer>()
    }
}

impl Precheck for v1::PushContextStateRequest {
    fn precheck(encoded: &[u8]) -> Result<(), Status> {
        let malformed = |_| Status::invalid_argument("malformed PushContextStateRequest");
        let mut resources = 0usize;
        let mut counts = Counts::default();
        let mut total_body = 0usize;
        for field in Fields(encoded) {
            let (number, payload) = field.map_err(malformed)?;
            if let Some(discovery) = payload.filter(|_| number == PUSH_DISCOVERY) {
                for field in Fields(discovery) {
                    let (number, payload) = field.map_err(malformed)?;
                    counts.pending += usize::from(number == DISCOVERY_PENDING && payload.is_some());
                }
                if counts.pending > MAX_PENDING_SERVERS {
                    let problem = Problem::TooMany {
                        count: counts.pending,
                        max: MAX_PENDING_SERVERS,
                    };
                    return Err(WireError::new("mcp_discovery.pending_servers", problem).into());
                }
                continue;
            }
            let Some(resource) = payload.filter(|_| number == PUSH_RESOURCES) else {
                continue;
            };
            if resources == MAX_RESOURCES {
                // Counting the rest costs only the walk, and names the real count.
                let count = Fields(encoded)
                    .filter(|f| matches!(f, Ok((PUSH_RESOURCES, Some(_)))))
                    .count();
                return Err(WireError::new(
                    "resources",
                    Problem::TooMany {
                        count,
                        max: MAX_RESOURCES,
                    },
                )
                .into());
            }
            let index = resources;
            resources += 1;
            for field in Fields(resource) {
                let (number, payload) = field.map_err(malformed)?;
                let Some(body) = payload.filter(|_| RESOURCE_BODIES.contains(&number)) else {
                    continue;
                };
                if body.len() > MAX_BODY_BYTES {
                    let problem = Problem::TooLong {
                        bytes: body.len(),
                        max: MAX_BODY_BYTES,
                    };
                    return Err(WireError::new(format!("resources[{index}].body"), problem).into());
                }
                total_body += body.len();
                if number == RESOURCE_MCP_SERVER {
                    counts.server(body).map_err(malformed)?;
                }
            }
        }
        if total_body > MAX_TOTAL_BODY_BYTES {
            let problem = Problem::TooLong {
                bytes: total_body,
                max: MAX_TOTAL_BODY_BYTES,
            };
            return Err(WireError::new("resources[*].body (total)", problem).into());
        }
        let decoded = counts.decoded_bytes(encoded.len(), resources);
        if decoded > MAX_DECODED_BYTES {
            return Err(Status::resource_exhausted(format!(
                "request would decode to {} MiB, at most {} MiB allowed",
                decoded >> 20,
                MAX_DECODED_BYTES >> 20
            )));
        }
        Ok(())
    }
}

/// The top-level fields of one encoded message: field number and, for length-delimited
/// fields, the payload. Stops at the first malformed byte.
struct Fields<'a>(&'a [u8]);

#[derive(Debug)]
struct Malformed;

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Option<&'a [u8]>), Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let field = self.field();
        if field.is_err() {
            self.0 = &[];
        }
        Some(field)
    }
}

impl<'a> Fields<'a> {
    fn field(&mut self) -> Result<(u32, Option<&'a [u8]>), Malformed> {
        let key = self.varint()?;
        let number = u32::try_from(key >> 3).map_err(|_| Malformed)?;
        let payload = match key & 7 {
            0 => {
                self.varint()?;
                None
            }
            1 => {
                self.skip(8)?;
                None
            }
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| Malformed)?;
                Some(self.skip(len)?)
            }
            5 => {
                self.skip(4)?;
                None
            }
            // Groups (3, 4) are not in this protocol; anything else is not protobuf.
            _ => return Err(Malformed),
        };
        Ok((number, payload))
    }

    fn varint(&mut self) -> Result<u64, Malformed> {
        let mut value = 0u64;
        for (i, byte) in self.0.iter().take(10).enumerate() {
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                self.0 = &self.0[i + 1..];
                return Ok(value);
            }
        }
        Err(Malformed)
    }

    fn skip(&mut self, len: usize) -> Result<&'a [u8], Malformed> {
        if len > self.0.len() {
            return Err(Malformed);
        }
        let (head, rest) = self.0.split_at(len);
        self.0 = rest;
        Ok(head)
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    fn push(resources: Vec<v1::ContextResource>) -> Vec<u8> {
        v1::PushContextStateRequest {
            version: 1,
            resources,
            ..Default::default()
        }
        .encode_to_vec()
    }

    fn server(tools: usize) -> v1::ContextResource {
        v1::ContextResource {
            source: "mcp:x".into(),
            body: Some(v1::context_resource::Body::McpServer(v1::McpServer {
                server_name: "x".into(),
                tools: vec![v1::McpTool::default(); tools],
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    #[test]
    fn a_request_within_the_limits_passes_and_decodes_as_prost_would() {
        let encoded = push(vec![server(3); 10]);
        assert!(v1::PushContextStateRequest::precheck(&encoded).is_ok());
        let decoded = v1::PushContextStateRequest::decode(&encoded[..]).unwrap();
        assert_eq!(decoded.resources.len(), 10);
    }

    #[test]
    fn millions_of_empty_resources_are_refused_from_the_bytes_naming_the_count() {
        // Two bytes each: tag 3, length 0.
        let encoded = [0x1a, 0x00].repeat(5_000_000);
        let status = v1::PushContextStateRequest::precheck(&encoded).unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(
            status.message(),
            "invalid resources: 5000000 entries, at most 1000 allowed"
        );
    }

    #[test]
    fn an_oversized_body_is_refused_before_decoding() {
        let mut big = server(0);
        big.body = Some(v1::context_resource::Body::InstructionFile(
            v1::InstructionFile {
                content: "a".repeat(MAX_BODY_BYTES + 1),
            },
        ));
        let status = v1::PushContextStateRequest::precheck(&push(vec![big])).unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().starts_with("invalid resources[0].body"));
    }

    #[test]
    fn empty_tools_that_would_decode_past_the_memory_bound_are_refused() {
        // Within the body limits (2 bytes per tool), but each becomes a 72-byte struct.
        let tools_per_server = (MAX_BODY_BYTES - 16) / 2;
        let encoded = push(vec![server(tools_per_server); 15]);
        let status = v1::PushContextStateRequest::precheck(&encoded).unwrap_err();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    }

    #[test]
    fn empty_icons_that_would_decode_past_the_memory_bound_are_refused() {
        // One tool per server whose icons are empty entries: 2 bytes each on the wire.
        let icons = (MAX_BODY_BYTES - 32) / 2;
        let mut resource = server(0);
        resource.body = Some(v1::context_resource::Body::McpServer(v1::McpServer {
            server_name: "x".into(),
            tools: vec![v1::McpTool {
                icons: vec![v1::McpIcon::default(); icons],
                ..Default::default()
            }],
            ..Default::default()
        }));
        let sources = (0..15).map(|i| v1::ContextResource {
            source: format!("mcp:{i}"),
            ..resource.clone()
        });
        let status = v1::PushContextStateRequest::precheck(&push(sources.collect())).unwrap_err();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    }

    #[test]
    fn too_many_pending_servers_are_refused_from_the_bytes() {
        let encoded = v1::PushContextStateRequest {
            version: 1,
            mcp_discovery: Some(v1::push_context_state_request::McpDiscovery {
                phase: 1,
                pending_servers: vec![Default::default(); MAX_PENDING_SERVERS + 1],
            }),
            ..Default::default()
        }
        .encode_to_vec();
        let status = v1::PushContextStateRequest::precheck(&encoded).unwrap_err();
        assert_eq!(
            status.message(),
            "invalid mcp_discovery.pending_servers: 1001 entries, at most 1000 allowed"
        );
    }

    #[test]
    fn truncated_bytes_are_malformed_not_a_panic() {
        let encoded = push(vec![server(2)]);
        for cut in 0..encoded.len() {
            let _ = v1::PushContextStateRequest::precheck(&encoded[..cut]);
        }
        let status = v1::PushContextStateRequest::precheck(&[0x1a, 0x05, 0x00]).unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
    }
}
