//! Benchmark (not a test): PushContextState through the real gRPC service on loopback
//! with 500 resources, on SQLite and PostgreSQL. The benchmark registers as an agent does
//! (UpdateStartup) and, when the answer offers delta pushes, sends its unchanged bodies
//! as digests (`DeltaBase`, the base kept from the pushes the server accepted). Rows, in
//! pushes per second and in bytes on the wire per push (the request's encoded length):
//! (a) every body changed, as full pushes; (b) only the discovery phase changed, as
//! deltas; (c) one body changed per push, as deltas. Targets: (b)/(a) ≥ 20 and
//! (c)/(a) ≥ 10, because an unchanged body is neither sent nor decoded nor rewritten.
//!
//! Reference on PostgreSQL: `pgbench` (one client, on the same freshly migrated database)
//! running the minimal equivalent SQL transaction — one snapshot upsert and one
//! 500-row resource upsert with bodies of the same size — and our all-changed rate ÷
//! its transactions per second (target ≥ 0.7). Without `pgbench` the row says so.
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
    DELTA_DIGEST_SCHEME, DeltaBase, DiscoveryPhase, InstructionFileBody, McpServerBody, McpTool,
    Resource, ResourceBody, ResourceStatus, RunId, SkillBody, Snapshot, Startup, v1,
};
use prost::Message;
use serde_json::json;

const RESOURCES: usize = 500;
const RUN_ID: &str = "bench-run";
/// Required speed-up of phase-only delta pushes over all-changed pushes.
const PHASE_ONLY_TARGET: f64 = 20.0;
/// Required speed-up of one-edit delta pushes over all-changed pushes.
const ONE_EDIT_TARGET: f64 = 10.0;
/// Required all-changed rate as a fraction of pgbench's transactions per second.
const PGBENCH_TARGET: f64 = 0.7;

struct Rounds {
    warmup: usize,
    /// Trials per figure; each figure is their median.
    trials: usize,
    /// Pushes per all-changed trial.
    all_changed: usize,
    /// Pushes per phase-only and per one-edit trial.
    delta_pushes: usize,
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

/// One planned push: the request as sent, and whether it is a delta.
struct Planned {
    request: v1::PushContextStateRequest,
    delta: bool,
}

/// Plans pushes the way an agent sends them: full pushes, or (once the server offered
/// deltas) deltas against the base the last accepted push left. Requests are built and
/// turned into deltas before any is timed, so the figures are the server's cost (decode,
/// validation, transaction) and the wire, not the client's digests; every answer is
/// checked to be an acceptance, so the base each delta was built on is the one the
/// server holds.
struct Planner {
    version: u64,
    /// The base the server holds once every planned push is accepted.
    base: DeltaBase,
    offers_deltas: bool,
}

impl Planner {
    fn full(&mut self, snapshot: Snapshot) -> Planned {
        let request = self.request(snapshot);
        self.base = DeltaBase::of_full(&request);
        Planned {
            request,
            delta: false,
        }
    }

    fn delta(&mut self, snapshot: Snapshot) -> Planned {
        assert!(self.offers_deltas, "the server did not offer delta pushes");
        let mut request = self.request(snapshot);
        self.base = self.base.into_delta(&mut request);
        Planned {
            request,
            delta: true,
        }
    }

    fn request(&mut self, mut snapshot: Snapshot) -> v1::PushContextStateRequest {
        self.version += 1;
        snapshot.version = self.version;
        snapshot.initial = self.version == 1;
        snapshot.into()
    }
}

fn snapshot(aggregate_hash: String, resources: Vec<Resource>, phase: DiscoveryPhase) -> Snapshot {
    Snapshot {
        aggregate_hash,
        resources,
        agent_run_id: RunId::new(RUN_ID),
        phase,
        ..Default::default()
    }
}

/// Changes one resource's body (and its content hash, as an agent's would).
fn edit(resource: &mut Resource, edit: usize) {
    let mark = format!(" (edit {edit})");
    match &mut resource.body {
        ResourceBody::InstructionFile(b) => b.content.push_str(&mark),
        ResourceBody::Skill(b) => b.description.push_str(&mark),
        ResourceBody::McpServer(b) => b.description.push_str(&mark),
        ResourceBody::McpConfig => unreachable!("the benchmark has no MCP config rows"),
    }
    resource.content_hash = format!("{edit:016x}{}", &resource.content_hash[16..]);
}

/// Pushes `planned` one after another; returns pushes per second.
async fn measure(
    client: &mut v1::agent_client::AgentClient<tonic::transport::Channel>,
    token: &str,
    planned: Vec<Planned>,
) -> f64 {
    let count = planned.len();
    let started = Instant::now();
    for Planned { request, delta } in planned {
        let answer = client
            .push_context_state(with_bearer(request, token))
            .await
            .expect("push failed")
            .into_inner();
        assert!(
            !answer.delta_base_missing,
            "a benchmark delta was refused for its base"
        );
        assert!(
            answer.accepted,
            "a benchmark push (delta: {delta}) was dropped"
        );
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

/// A row's target: the least `value / reference` that passes (none: the reference is
/// shown for comparison only), and its wording.
struct Target {
    least: Option<f64>,
    text: String,
}

fn emit(name: &str, value: f64, unit: &str, reference: Option<f64>, target: Option<Target>) {
    let ratio = reference.map(|r| value / r);
    let least = target.as_ref().and_then(|t| t.least);
    let pass = ratio.zip(least).map(|(r, least)| r >= least);
    let target = target.map(|t| t.text);
    ctxsync_test_support::bench_row(name, value, unit, reference, ratio, target.as_deref(), pass);
}

/// Runs `trials` trials of `pushes` pushes each, planned by `plan`; returns the median
/// rate and the median encoded request size.
async fn trials(
    client: &mut v1::agent_client::AgentClient<tonic::transport::Channel>,
    token: &str,
    label: &str,
    rounds: &Rounds,
    pushes: usize,
    mut plan: impl FnMut() -> Planned,
) -> (f64, f64) {
    let mut rates = Vec::with_capacity(rounds.trials);
    let mut sizes = Vec::new();
    for trial in 0..rounds.trials {
        let planned: Vec<Planned> = (0..pushes).map(|_| plan()).collect();
        sizes.extend(planned.iter().map(|p| p.request.encoded_len() as f64));
        let rate = measure(client, token, planned).await;
        eprintln!("{label}: trial {}, {pushes} pushes: {rate:.1}/s", trial + 1);
        rates.push(rate);
    }
    (median(rates), median(sizes))
}

/// One backend's medians: pushes per second and bytes per push of each kind.
struct Figures {
    all_rate: f64,
    all_bytes: f64,
    phase_rate: f64,
    phase_bytes: f64,
    edit_rate: f64,
    edit_bytes: f64,
}

/// Prints one backend's rows and its summary line.
fn emit_rows(backend: &str, f: &Figures) {
    let row = |kind: &str| format!("persistence.push_500.{backend}.{kind}");
    emit(&row("all_changed"), f.all_rate, "pushes/s", None, None);
    emit(
        &row("phase_only"),
        f.phase_rate,
        "pushes/s",
        Some(f.all_rate),
        Some(Target {
            least: Some(PHASE_ONLY_TARGET),
            text: format!(
                "phase_only (delta) / all_changed >= {PHASE_ONLY_TARGET} (reference: all_changed)"
            ),
        }),
    );
    emit(
        &row("one_edit"),
        f.edit_rate,
        "pushes/s",
        Some(f.all_rate),
        Some(Target {
            least: Some(ONE_EDIT_TARGET),
            text: format!(
                "one_edit (delta) / all_changed >= {ONE_EDIT_TARGET} (reference: all_changed)"
            ),
        }),
    );
    let bytes_target = || {
        Some(Target {
            least: None,
            text: "reference: all_changed bytes per push".into(),
        })
    };
    emit(&row("all_changed.bytes"), f.all_bytes, "bytes", None, None);
    emit(
        &row("phase_only.bytes"),
        f.phase_bytes,
        "bytes",
        Some(f.all_bytes),
        bytes_target(),
    );
    emit(
        &row("one_edit.bytes"),
        f.edit_bytes,
        "bytes",
        Some(f.all_bytes),
        bytes_target(),
    );
    eprintln!(
        "{backend}: all changed {:.1}/s ({} B), phase only {:.1}/s ({} B, ratio {:.1}), \
         one edit {:.1}/s ({} B, ratio {:.1})",
        f.all_rate,
        f.all_bytes,
        f.phase_rate,
        f.phase_bytes,
        f.phase_rate / f.all_rate,
        f.edit_rate,
        f.edit_bytes,
        f.edit_rate / f.all_rate
    );
}

/// Returns the median all-changed rate.
async fn bench(backend: &str, db: &TestStore, rounds: &Rounds) -> f64 {
    let api = serve_agent_api(db.store().clone()).await;
    let mut client = api.client().await;
    let created = db.create_agent("bench").await.expect("create agent");
    let token = created.token.into_string();
    // Registered as an agent does before its first push; the answer says whether this
    // connection may send deltas.
    let answer = client
        .update_startup(with_bearer(
            v1::UpdateStartupRequest::from(Startup {
                agent_run_id: RunId::new(RUN_ID),
                ..Startup::default()
            }),
            &token,
        ))
        .await
        .expect("startup")
        .into_inner();
    let mut planner = Planner {
        version: 0,
        base: DeltaBase::default(),
        offers_deltas: answer.delta_digest_scheme == DELTA_DIGEST_SCHEME,
    };
    eprintln!(
        "{backend}: the server offers delta pushes: {}",
        planner.offers_deltas
    );

    // Warm up with full pushes: the first inserts every row, the rest rewrite them.
    let warmup: Vec<_> = (0..rounds.warmup)
        .map(|g| {
            planner.full(snapshot(
                format!("{g:064x}"),
                resources(g),
                DiscoveryPhase::Pending,
            ))
        })
        .collect();
    measure(&mut client, &token, warmup).await;

    // Every body changed: full pushes. A delta would carry every body too (the same
    // bytes but for its flag) and cost the server the same writes plus its base check.
    let mut generation = rounds.warmup;
    let (all_rate, all_bytes) = trials(
        &mut client,
        &token,
        &format!("{backend}, every resource changed (full)"),
        rounds,
        rounds.all_changed,
        || {
            generation += 1;
            planner.full(snapshot(
                format!("{generation:064x}"),
                resources(generation),
                DiscoveryPhase::Pending,
            ))
        },
    )
    .await;

    // Only the phase changed: every body is left out.
    let current = resources(generation);
    let mut phase_pushes = 0usize;
    let (phase_rate, phase_bytes) = trials(
        &mut client,
        &token,
        &format!("{backend}, only the phase changed (delta)"),
        rounds,
        rounds.delta_pushes,
        || {
            phase_pushes += 1;
            let phase = if phase_pushes % 2 == 1 {
                DiscoveryPhase::Complete
            } else {
                DiscoveryPhase::Pending
            };
            planner.delta(snapshot(
                format!("{generation:064x}"),
                current.clone(),
                phase,
            ))
        },
    )
    .await;

    // One resource's body changed per push, a different one each time; the others are
    // left out.
    let mut current = current;
    let mut edits = 0usize;
    let (edit_rate, edit_bytes) = trials(
        &mut client,
        &token,
        &format!("{backend}, one resource changed (delta)"),
        rounds,
        rounds.delta_pushes,
        || {
            edits += 1;
            edit(&mut current[(edits * 7) % RESOURCES], edits);
            planner.delta(snapshot(
                format!("{generation:032x}{edits:032x}"),
                current.clone(),
                DiscoveryPhase::Complete,
            ))
        },
    )
    .await;

    let counters = api.metrics();
    let deltas = (2 * rounds.trials * rounds.delta_pushes) as u64;
    assert_eq!(counters.pushes_delta, deltas, "{counters:?}");
    assert_eq!(counters.pushes_delta_base_missing, 0, "{counters:?}");

    emit_rows(
        backend,
        &Figures {
            all_rate,
            all_bytes,
            phase_rate,
            phase_bytes,
            edit_rate,
            edit_bytes,
        },
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
            delta_pushes: 15,
            pgbench_seconds: 2,
        }
    } else {
        Rounds {
            warmup: 5,
            trials: 5,
            all_changed: 10,
            delta_pushes: 100,
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
