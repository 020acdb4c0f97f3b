//! Benchmark (not a test): PushContextState through the real gRPC service on loopback
//! with 500 resources, on SQLite and PostgreSQL: pushes per second when (a) every
//! resource changed and (b) only the discovery phase changed, and (b)/(a), which
//! should be at least 5 because unchanged rows are not rewritten.
//!
//! Reference on PostgreSQL: `pgbench` (one client, on the same freshly migrated database)
//! running the minimal equivalent SQL transaction — one snapshot upsert and one
//! 500-row resource upsert with bodies of the same size — and our all-changed rate ÷
//! its transactions per second (target ≥ 0.5). Without `pgbench` the row says so.
//! Every rate is the median of repeated trials.
//!
//! `cargo run --release -p ctxsync-persistence --example bench_push -- [--quick]`
//! prints one JSON object per line on stdout; progress goes to stderr.

use std::{
    path::PathBuf,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

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
/// Required all-changed rate as a fraction of pgbench's transactions per second.
const PGBENCH_TARGET: f64 = 0.5;

struct Rounds {
    warmup: usize,
    /// Trials per figure; each figure is their median.
    trials: usize,
    /// Pushes per all-changed trial.
    all_changed: usize,
    /// Pushes per phase-only trial.
    phase_only: usize,
    /// Seconds per pgbench trial.
    pgbench_seconds: u32,
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
                                input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}), ..Default::default() })
                            .collect(), ..Default::default() }),
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
        ..Default::default()
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

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The `pgbench` executable: on `PATH`, else under Debian's `/usr/lib/postgresql/*/bin`.
fn find_pgbench() -> Option<PathBuf> {
    let on_path = Command::new("pgbench")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if on_path {
        return Some("pgbench".into());
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| Some(entry.ok()?.path().join("bin/pgbench")))
        .filter(|path| path.is_file())
        .collect();
    found.sort();
    found.pop()
}

const PGBENCH_AGENT: &str = "00000000-0000-4000-8000-00000000b0b0";

/// The minimal SQL equivalent of one all-changed push: the snapshot header upsert and
/// one upsert of 500 resource rows whose bodies change every transaction.
fn pgbench_script() -> String {
    let filler = "Guidance for the agent about this part of the workspace. ".repeat(30);
    format!(
        "\\set g random(1, 2000000000)\n\
         BEGIN;\n\
         INSERT INTO workspace_agent_context_snapshots (agent_id, agent_run_id, \
         mcp_discovery_phase, version, aggregate_hash, snapshot_error, received_at, created_at) \
         VALUES ('{PGBENCH_AGENT}', '{RUN_ID}', 'pending', :g, lpad(to_hex(:g), 64, '0'), NULL, \
         now(), now()) ON CONFLICT (agent_id) DO UPDATE SET agent_run_id = excluded.agent_run_id, \
         mcp_discovery_phase = excluded.mcp_discovery_phase, version = excluded.version, \
         aggregate_hash = excluded.aggregate_hash, snapshot_error = excluded.snapshot_error, \
         received_at = excluded.received_at;\n\
         INSERT INTO workspace_agent_context_resources (agent_id, source, source_path, body_kind, \
         body, body_digest, content_hash, size_bytes, status, error, created_at, updated_at) \
         SELECT '{PGBENCH_AGENT}', 'docs/' || i || '/AGENTS.md', '/workspace/docs/' || i || \
         '/AGENTS.md', 'instruction_file', jsonb_build_object('content', '# Part ' || i || \
         ' (generation ' || :g || ')' || chr(10) || '{filler}'), \
         sha256(convert_to(i || ':' || :g, 'UTF8')), lpad(to_hex(:g), 16, '0') || \
         lpad(to_hex(i), 48, '0'), 2048, 'ok', NULL, now(), now() \
         FROM generate_series(1, {RESOURCES}) AS i \
         ON CONFLICT (agent_id, source) DO UPDATE SET source_path = excluded.source_path, \
         body_kind = excluded.body_kind, body = excluded.body, body_digest = excluded.body_digest, \
         content_hash = excluded.content_hash, size_bytes = excluded.size_bytes, \
         status = excluded.status, error = excluded.error, updated_at = excluded.updated_at;\n\
         END;\n"
    )
}

fn run_pgbench(pgbench: &PathBuf, args: &[String], url: &str) -> Result<String, String> {
    let output = Command::new(pgbench)
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run pgbench: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!(
            "pgbench failed ({}): {}",
            output.status,
            stderr.lines().last().unwrap_or("").trim()
        ));
    }
    Ok(stdout)
}

/// Median transactions per second of `trials` pgbench runs of [`pgbench_script`].
fn pgbench_tps(url: &str, rounds: &Rounds) -> Result<f64, String> {
    let pgbench = find_pgbench().ok_or("pgbench not found")?;
    let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
    let setup = dir.path().join("setup.sql");
    let script = dir.path().join("push.sql");
    std::fs::write(
        &setup,
        format!(
            "INSERT INTO workspace_agents (id, name, token_hash, agent_run_id) VALUES \
             ('{PGBENCH_AGENT}', 'pgbench', sha256('pgbench'::bytea), '{RUN_ID}');\n"
        ),
    )
    .map_err(|e| format!("writing {}: {e}", setup.display()))?;
    std::fs::write(&script, pgbench_script())
        .map_err(|e| format!("writing {}: {e}", script.display()))?;
    let file = |path: &PathBuf| vec!["-n".to_owned(), "-f".into(), path.display().to_string()];
    let mut once = file(&setup);
    once.extend(["-t".into(), "1".into()]);
    run_pgbench(&pgbench, &once, url)?;
    // Warm-up: the first transactions insert the rows.
    let mut warm = file(&script);
    warm.extend(["-t".into(), "5".into()]);
    run_pgbench(&pgbench, &warm, url)?;
    let mut rates = Vec::with_capacity(rounds.trials);
    for trial in 0..rounds.trials {
        let mut timed = file(&script);
        timed.extend([
            "-c".into(),
            "1".into(),
            "-T".into(),
            rounds.pgbench_seconds.to_string(),
        ]);
        let stdout = run_pgbench(&pgbench, &timed, url)?;
        let tps = stdout
            .lines()
            .find_map(|line| line.trim().strip_prefix("tps = "))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<f64>().ok())
            .ok_or_else(|| format!("no tps in pgbench output: {stdout}"))?;
        eprintln!("  pgbench trial {}: {tps:.1} tps", trial + 1);
        rates.push(tps);
    }
    Ok(median(rates))
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

/// Returns the median all-changed rate.
async fn bench(backend: &str, db: &TestStore, rounds: &Rounds) -> f64 {
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

    let mut generation = rounds.warmup;
    let mut all_rates = Vec::with_capacity(rounds.trials);
    for trial in 0..rounds.trials {
        let all_changed: Vec<_> = (0..rounds.all_changed)
            .map(|_| {
                generation += 1;
                next(generation, DiscoveryPhase::Pending)
            })
            .collect();
        let rate = measure(&mut client, &token, all_changed).await;
        eprintln!(
            "{backend}: trial {}, {} pushes, every resource changed: {rate:.1}/s",
            trial + 1,
            rounds.all_changed
        );
        all_rates.push(rate);
    }
    let all_rate = median(all_rates);

    let mut phase_rates = Vec::with_capacity(rounds.trials);
    for trial in 0..rounds.trials {
        let phase_only: Vec<_> = (0..rounds.phase_only)
            .map(|i| {
                let phase = if i % 2 == 0 {
                    DiscoveryPhase::Complete
                } else {
                    DiscoveryPhase::Pending
                };
                next(generation, phase)
            })
            .collect();
        let rate = measure(&mut client, &token, phase_only).await;
        eprintln!(
            "{backend}: trial {}, {} pushes, only the phase changed: {rate:.1}/s",
            trial + 1,
            rounds.phase_only
        );
        phase_rates.push(rate);
    }
    let phase_rate = median(phase_rates);

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
    all_rate
}

#[tokio::main]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let rounds = if quick {
        Rounds {
            warmup: 2,
            trials: 3,
            all_changed: 4,
            phase_only: 15,
            pgbench_seconds: 2,
        }
    } else {
        Rounds {
            warmup: 5,
            trials: 5,
            all_changed: 10,
            phase_only: 40,
            pgbench_seconds: 5,
        }
    };
    eprintln!(
        "bench_push: {RESOURCES} resources per push{}",
        if quick { " (quick)" } else { "" }
    );
    bench("sqlite", &TestStore::sqlite().await, &rounds).await;
    let Some(db) = TestStore::postgres().await else {
        eprintln!("bench_push: PostgreSQL skipped");
        return;
    };
    let ours = bench("postgres", &db, &rounds).await;
    let url = db
        .postgres_database()
        .expect("a PostgreSQL store")
        .url()
        .to_owned();
    eprintln!("pgbench: the equivalent SQL transaction on the same database");
    let name = "persistence.push_500.postgres.all_changed_vs_pgbench";
    let line = match tokio::task::spawn_blocking(move || pgbench_tps(&url, &rounds))
        .await
        .expect("pgbench task")
    {
        Ok(tps) => json!({
            "name": name,
            "value": ours,
            "unit": "pushes/s",
            "reference": tps,
            "ratio": ours / tps,
            "target": format!("ours / pgbench tps >= {PGBENCH_TARGET} (reference: pgbench, same SQL writes)"),
            "pass": ours / tps >= PGBENCH_TARGET,
        }),
        Err(reason) => {
            eprintln!("pgbench reference unavailable: {reason}");
            json!({
                "name": name,
                "value": ours,
                "unit": "pushes/s",
                "reference": null,
                "ratio": null,
                "target": format!("reference not measured: {reason}"),
                "pass": null,
            })
        }
    };
    println!("{line}");
}
