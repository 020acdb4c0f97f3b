//! libFuzzer target: find_tools over a structured catalog and request (built by
//! `arbitrary`), with the properties of `fuzz_find_tools` in the chat-projection crate's
//! `tests/projection/fuzz.rs`: at most 20 matches, no duplicates, only catalog names, one-line
//! descriptions of at most 80 characters, only returned tools activated and only once,
//! errors only for real over-limit or empty requests.

#![no_main]

use std::collections::BTreeSet;

use arbitrary::Arbitrary;
use ctxsync_chat_projection::{
    ActiveTools, AgentState, Binding, Connection, FindToolsError, FindToolsRequest, MAX_MATCHES,
    SnapshotState, find_tools, project,
};
use ctxsync_protocol::{
    DiscoveryPhase, McpServerBody, McpTool, Resource, ResourceBody, ResourceStatus, RunId,
};
use libfuzzer_sys::fuzz_target;
use serde_json::json;

const MAX_DESCRIPTION_CHARS: usize = 80;
/// Expanded strings are capped so one input stays fast; past every limit find_tools has.
const MAX_BLOB_BYTES: usize = 8 * 1024;

#[derive(Arbitrary, Debug)]
struct Input {
    servers: Vec<Server>,
    queries: Option<Vec<Ask>>,
    names: Option<Vec<Ask>>,
    call_twice: bool,
}

#[derive(Arbitrary, Debug)]
struct Server {
    name: Blob,
    tools: Vec<Tool>,
}

#[derive(Arbitrary, Debug)]
struct Tool {
    name: Blob,
    description: Blob,
    params: Vec<String>,
}

/// A string, or a string repeated (long names, 5000-character descriptions).
#[derive(Arbitrary, Debug)]
enum Blob {
    Text(String),
    Repeat(String, u16),
}

impl Blob {
    fn expand(&self) -> String {
        match self {
            Blob::Text(s) => s.clone(),
            Blob::Repeat(s, n) => {
                let times = usize::from(*n).min(MAX_BLOB_BYTES / s.len().max(1));
                s.repeat(times)
            }
        }
    }
}

/// One query or name: free text, or built from the catalog so that lookups hit.
#[derive(Arbitrary, Debug)]
enum Ask {
    Free(Blob),
    /// A catalog tool's model-facing name.
    Known(u8),
    /// `server: term` with a catalog tool's server and a free term.
    Scoped(u8, String),
}

fn server_row(server: &Server) -> Resource {
    let name = server.name.expand();
    let tools = server
        .tools
        .iter()
        .map(|tool| McpTool {
            name: tool.name.expand(),
            description: tool.description.expand(),
            input_schema: json!({
                "type": "object",
                "properties": tool.params.iter().map(|p| (p.clone(), json!({"type": "string"})))
                    .collect::<serde_json::Map<_, _>>(),
            }),
            ..Default::default()
        })
        .collect();
    Resource {
        source: format!("mcp_server:{name}"),
        source_path: None,
        content_hash: "hash".to_owned(),
        size_bytes: 1,
        status: ResourceStatus::Ok,
        error: None,
        body: ResourceBody::McpServer(McpServerBody {
            server_name: name,
            description: String::new(),
            tools,
            ..Default::default()
        }),
    }
}

fuzz_target!(|input: Input| {
    let binding = Binding::Agent(AgentState {
        agent_run_id: RunId::new("run-1"),
        snapshot: Some(SnapshotState {
            agent_run_id: RunId::new("run-1"),
            phase: DiscoveryPhase::Complete,
            aggregate_hash: "agg-1".to_owned(),
            snapshot_error: None,
            resources: input.servers.iter().map(server_row).collect(),
            ..SnapshotState::default()
        }),
        connection: Connection::Online,
        sign_ins: Vec::new(),
    });
    let view = project(&binding);
    let catalog = view.tools();
    let tools: Vec<_> = catalog.iter().collect();
    let known: BTreeSet<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    let ask = |ask: &Ask| match ask {
        Ask::Free(blob) => blob.expand(),
        Ask::Known(i) if !tools.is_empty() => tools[usize::from(*i) % tools.len()].name.clone(),
        Ask::Scoped(i, term) if !tools.is_empty() => {
            let tool = tools[usize::from(*i) % tools.len()];
            format!("{}: {term}", tool.server)
        }
        Ask::Known(_) | Ask::Scoped(..) => String::new(),
    };
    let queries: Option<Vec<String>> = input.queries.as_ref().map(|q| q.iter().map(ask).collect());
    let names: Option<Vec<String>> = input.names.as_ref().map(|n| n.iter().map(ask).collect());
    let request = FindToolsRequest {
        queries: queries.clone(),
        names: names.clone(),
    };

    let mut active = ActiveTools::new();
    for _ in 0..1 + usize::from(input.call_twice) {
        let before: BTreeSet<String> = active.names().map(str::to_owned).collect();
        match find_tools(catalog, &request, &mut active) {
            Ok(response) => {
                assert!(
                    response.matches.len() <= MAX_MATCHES,
                    "{} matches",
                    response.matches.len()
                );
                assert!(response.total >= response.matches.len());
                let mut seen = BTreeSet::new();
                for m in &response.matches {
                    assert!(
                        known.contains(m.name.as_str()),
                        "unknown match {:?}",
                        m.name
                    );
                    assert!(seen.insert(m.name.clone()), "duplicate match {:?}", m.name);
                    assert!(
                        m.description.chars().count() <= MAX_DESCRIPTION_CHARS,
                        "{:?}",
                        m.description
                    );
                    assert!(!m.description.contains(['\n', '\r']), "{:?}", m.description);
                    assert!(active.contains(&m.name));
                }
                for name in &response.activated {
                    assert!(
                        seen.contains(name),
                        "activated {name:?} without returning it"
                    );
                    assert!(!before.contains(name), "re-activated {name:?}");
                }
                let after: BTreeSet<String> = active.names().map(str::to_owned).collect();
                assert_eq!(after, before.union(&seen).cloned().collect::<BTreeSet<_>>());
            }
            Err(FindToolsError::TooMany { max, got, .. }) => assert!(got > max),
            Err(FindToolsError::NothingToFind) => {
                let blank = |l: &Option<Vec<String>>| {
                    l.as_ref()
                        .is_none_or(|l| l.iter().all(|s| s.trim().is_empty()))
                };
                assert!(
                    blank(&queries) && blank(&names),
                    "NothingToFind for {request:?}"
                );
            }
        }
    }
});
