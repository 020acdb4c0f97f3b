//! Benchmark (not a test): PushContextState through the real gRPC service on loopback
//! with 500 resources, on SQLite and PostgreSQL: pushes per second when (a) every
//! resource changed and (b) only the discovery phase changed, and (b)/(a), which
//! should be at least 5 because unchanged rows are not rewritten.
//!
//! `cargo run --release -p ctxsync-persistence --example bench_push -- [--quick]`
//! prints one JSON object per line on stdout; progress goes to stderr.

use std::time::{Duration, Instant};

use ctxsync_persistence::test_support::{TestStore, serve_agent_api, with_bearer};
use ctxsync_protocol::{
    DiscoveryPhase, InstructionFileBody, McpServerBody, McpTool, Resource, ResourceBody,
    ResourceStatus, SkillBody, Snapshot, Startup, v1,
};
use serde_json::json;

const RESOURCES: usize = 500;
const RUN_ID: &str = "bench-run";
/// Required speed-up of phase-only pushes over all-changed pushes.
const TARGET_RATIO: f64 = 5.0;

struct Rounds {
    warmup: usize,
    all_changed: usize,
    phase_only: usize,
}

fn resources(generation: usize) -> Vec<Resource> {
    let filler = "Guidance for the agent about this part of the workspace. ".repeat(30);
    (0..RESOURCES)
        .map(|i| {
            let (source, body) = match i % 10 {
                0..=5 => (
                    format!("docs/{i}/AGENTS.md"),
                    ResourceBody::InstructionFile(InstructionFileBody {
                        content: format!("# Part {i} (generation {generation})\n{filler}"),
                    }),
                ),
                6..=8 => (
                    format!("skills/skill-{i}/SKILL.md"),
                    ResourceBody::Skill(SkillBody {
                        meta: format!("---\nname: skill-{i}\n---\n{filler} {generation}"),
                        name: format!("skill-{i}"),
                        description: format!("skill {i}, generation {generation}"),
                    }),
                ),
                _ => (
                    format!("mcp:server-{i}"),
                    ResourceBody::McpServer(McpServerBody {
                        server_name: format!("server-{i}"),
                        description: String::new(),
                        tools: (0..5)
                            .map(|t| McpTool {
                                name: format!("tool_{t}"),
                                description: format!("tool {t} of server {i}, gen {generation}"),
                                input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
                            })
                            .collect(),
                    }),
                ),
            };
            Resource {
                source_path: Some(format!("/workspace/{source}")),
                source,
                content_hash: format!("{generation:016x}{i:048x}"),
                size_bytes: 2048,
                status: ResourceStatus::Ok,
                error: None,
                body,
            }
        })
        .collect()
}

fn request(version: u64, generation: usize, phase: DiscoveryPhase) -> v1::PushContextStateRequest {
    Snapshot {
        version,
        aggregate_hash: format!("{generation:064x}"),
        resources: resources(generation),
        initial: version == 1,
        snapshot_error: None,
        agent_run_id: Some(RUN_ID.into()),
        phase,
    }
    .into()
}

/// Times `requests` pushed one after another; returns pushes per second.
async fn measure(
    client: &mut v1::agent_client::AgentClient<tonic::transport::Channel>,
    token: &str,
    requests: Vec<v1::PushContextStateRequest>,
) -> f64 {
    let count = requests.len();
    let started = Instant::now();
    for request in requests {
        let accepted = client
            .push_context_state(with_bearer(request, token))
            .await
            .expect("push failed")
            .into_inner()
            .accepted;
        assert!(accepted, "a benchmark push was dropped");
    }
    count as f64 / started.elapsed().max(Duration::from_nanos(1)).as_secs_f64()
}

fn emit(name: &str, value: f64, unit: &str, reference: Option<f64>, target: Option<String>) {
    let ratio = reference.map(|r| value / r);
    let pass = ratio.map(|r| r >= TARGET_RATIO);
    let line = json!({
        "name": name,
        "value": value,
        "unit": unit,
        "reference": reference,
        "ratio": ratio,
        "target": target,
        "pass": pass,
    });
    println!("{line}");
}

async fn bench(backend: &str, db: TestStore, rounds: &Rounds) {
    let api = serve_agent_api(db.store().clone()).await;
    let mut client = api.client().await;
    let created = db.create_agent("bench").await.expect("create agent");
    let token = created.token.into_string();
    client
        .update_startup(with_bearer(
            v1::UpdateStartupRequest::from(Startup {
                agent_run_id: Some(RUN_ID.into()),
                ..Startup::default()
            }),
            &token,
        ))
        .await
        .expect("startup");

    let mut version = 0u64;
    let mut next = |generation: usize, phase| {
        version += 1;
        request(version, generation, phase)
    };
    // Warm up: first insert of all rows, then a few of each kind.
    let warmup: Vec<_> = (0..rounds.warmup)
        .map(|g| next(g, DiscoveryPhase::Pending))
        .collect();
    measure(&mut client, &token, warmup).await;

    let base = rounds.warmup;
    let all_changed: Vec<_> = (0..rounds.all_changed)
        .map(|i| next(base + 1 + i, DiscoveryPhase::Pending))
        .collect();
    eprintln!(
        "{backend}: {} pushes, every resource changed",
        all_changed.len()
    );
    let all_rate = measure(&mut client, &token, all_changed).await;

    let same = base + rounds.all_changed;
    let phase_only: Vec<_> = (0..rounds.phase_only)
        .map(|i| {
            let phase = if i % 2 == 0 {
                DiscoveryPhase::Complete
            } else {
                DiscoveryPhase::Pending
            };
            next(same, phase)
        })
        .collect();
    eprintln!(
        "{backend}: {} pushes, only the phase changed",
        phase_only.len()
    );
    let phase_rate = measure(&mut client, &token, phase_only).await;

    emit(
        &format!("persistence.push_500.{backend}.all_changed"),
        all_rate,
        "pushes/s",
        None,
        None,
    );
    emit(
        &format!("persistence.push_500.{backend}.phase_only"),
        phase_rate,
        "pushes/s",
        Some(all_rate),
        Some(format!(
            "phase_only / all_changed >= {TARGET_RATIO} (reference: all_changed)"
        )),
    );
    eprintln!(
        "{backend}: all changed {all_rate:.1}/s, phase only {phase_rate:.1}/s, ratio {:.1}",
        phase_rate / all_rate
    );
}

#[tokio::main]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let rounds = if quick {
        Rounds {
            warmup: 2,
            all_changed: 8,
            phase_only: 40,
        }
    } else {
        Rounds {
            warmup: 5,
            all_changed: 40,
            phase_only: 200,
        }
    };
    eprintln!(
        "bench_push: {RESOURCES} resources per push{}",
        if quick { " (quick)" } else { "" }
    );
    bench("sqlite", TestStore::sqlite().await, &rounds).await;
    match TestStore::postgres().await {
        Some(db) => bench("postgres", db, &rounds).await,
        None => eprintln!("bench_push: PostgreSQL skipped"),
    }
}
