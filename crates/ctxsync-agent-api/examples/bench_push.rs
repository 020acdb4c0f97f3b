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
//!
//! The commit floor, per backend: one single-row `UPDATE` and its commit, on the same
//! database with the same durability (`pgbench` with its own script on PostgreSQL; a
//! connection with the store's pragmas on SQLite). `…<backend>.commit_floor` is its time
//! per transaction and `…<backend>.phase_only_beyond_floor` the phase-only push's time
//! beyond it, as the agent sees it (target ≤ 1.0 ms; the ratio is the push's time ÷ the
//! floor's).
//!
//! Every trial lasts at least 5 s, every phase starts after a checkpoint (`CHECKPOINT`;
//! SQLite's `wal_checkpoint`), and every figure is the median of five trials. `--quick`
//! (CI's smoke run, whose numbers nobody reads) runs one 1 s trial per figure.
//!
//! `cargo run --release -p ctxsync-agent-api --example bench_push -- [--quick]`
//! prints one JSON object per line on stdout; progress goes to stderr.

use std::{
    path::PathBuf,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use ctxsync_agent_api::test_support::{serve_agent_api, with_bearer};
use ctxsync_persistence::DatabaseConfig;
use ctxsync_persistence::test_support::TestStore;
use ctxsync_protocol::{
    DELTA_DIGEST_SCHEME, DeltaBase, DiscoveryPhase, InstructionFileBody, McpServerBody, McpTool,
    Resource, ResourceBody, ResourceStatus, RunId, SkillBody, Snapshot, Startup, v1,
};
use diesel::connection::SimpleConnection;
use diesel::{Connection, PgConnection, SqliteConnection};
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
/// Most a phase-only push may take beyond the one-row commit floor, in milliseconds.
const BEYOND_FLOOR_TARGET_MS: f64 = 1.0;

struct Rounds {
    warmup: usize,
    /// Trials per figure; each figure is their median.
    trials: usize,
    /// Least seconds per trial, ours and pgbench's alike.
    trial_seconds: u32,
}

/// Pushes planned (untimed) between timed stretches of a trial.
const ALL_CHANGED_BATCH: usize = 2;
const DELTA_BATCH: usize = 20;

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

/// Pushes `planned` one after another; returns how long they took.
async fn measure(
    client: &mut v1::agent_client::AgentClient<tonic::transport::Channel>,
    token: &str,
    planned: Vec<Planned>,
) -> Duration {
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
    started.elapsed()
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

/// The commit floor: one single-row `UPDATE` and its commit.
const FLOOR_SETUP: &str = "CREATE TABLE bench_commit_floor (id int PRIMARY KEY, n bigint NOT NULL);\n\
     INSERT INTO bench_commit_floor VALUES (1, 0);\n";
const FLOOR_SCRIPT: &str = "BEGIN;\nUPDATE bench_commit_floor SET n = n + 1 WHERE id = 1;\nEND;\n";

/// The all-changed reference's setup: the agent row its upserts belong to.
fn pgbench_setup() -> String {
    format!(
        "INSERT INTO workspace_agents (id, name, token_hash, agent_run_id) VALUES \
         ('{PGBENCH_AGENT}', 'pgbench', sha256('pgbench'::bytea), '{RUN_ID}');\n"
    )
}

/// Median transactions per second of `rounds.trials` pgbench runs of `script`, after
/// `setup` once, a short warm-up and a `CHECKPOINT`.
fn pgbench_tps(
    url: &str,
    rounds: &Rounds,
    setup_sql: &str,
    script_sql: &str,
) -> Result<f64, String> {
    let pgbench = find_pgbench().ok_or("pgbench not found")?;
    let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
    let setup = dir.path().join("setup.sql");
    let script = dir.path().join("script.sql");
    std::fs::write(&setup, setup_sql).map_err(|e| format!("writing {}: {e}", setup.display()))?;
    std::fs::write(&script, script_sql)
        .map_err(|e| format!("writing {}: {e}", script.display()))?;
    let file = |path: &PathBuf| vec!["-n".to_owned(), "-f".into(), path.display().to_string()];
    let mut once = file(&setup);
    once.extend(["-t".into(), "1".into()]);
    run_pgbench(&pgbench, &once, url)?;
    // Warm-up: the first transactions insert the rows.
    let mut warm = file(&script);
    warm.extend(["-t".into(), "5".into()]);
    run_pgbench(&pgbench, &warm, url)?;
    postgres_checkpoint(url)?;
    let mut rates = Vec::with_capacity(rounds.trials);
    for trial in 0..rounds.trials {
        let mut timed = file(&script);
        timed.extend([
            "-c".into(),
            "1".into(),
            "-T".into(),
            rounds.trial_seconds.to_string(),
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

/// After a checkpoint, runs `rounds.trials` trials of at least `rounds.trial_seconds`
/// each, pushing batches of `batch` requests planned (untimed) by `plan`; returns the
/// median rate, the median encoded request size and how many pushes were deltas.
#[allow(clippy::too_many_arguments)]
async fn trials(
    client: &mut v1::agent_client::AgentClient<tonic::transport::Channel>,
    token: &str,
    db: &TestStore,
    label: &str,
    rounds: &Rounds,
    batch: usize,
    mut plan: impl FnMut() -> Planned,
) -> (f64, f64, u64) {
    checkpoint(db).await;
    let least = Duration::from_secs(u64::from(rounds.trial_seconds));
    let mut rates = Vec::with_capacity(rounds.trials);
    let mut sizes = Vec::new();
    let mut deltas = 0;
    for trial in 0..rounds.trials {
        let (mut pushes, mut spent) = (0usize, Duration::ZERO);
        while spent < least {
            let planned: Vec<Planned> = (0..batch).map(|_| plan()).collect();
            sizes.extend(planned.iter().map(|p| p.request.encoded_len() as f64));
            deltas += planned.iter().filter(|p| p.delta).count() as u64;
            pushes += planned.len();
            spent += measure(client, token, planned).await;
        }
        let rate = pushes as f64 / spent.as_secs_f64();
        eprintln!(
            "{label}: trial {}, {pushes} pushes in {:.1} s: {rate:.1}/s",
            trial + 1,
            spent.as_secs_f64()
        );
        rates.push(rate);
    }
    (median(rates), median(sizes), deltas)
}

/// Writes the database's dirty pages out, so a phase does not pay for the last one's.
async fn checkpoint(db: &TestStore) {
    let config = db.config().clone();
    tokio::task::spawn_blocking(move || match config {
        DatabaseConfig::Postgres { url } => postgres_checkpoint(&url),
        DatabaseConfig::Sqlite { path } => {
            let path = path.to_str().expect("a UTF-8 test path").to_owned();
            let mut c = SqliteConnection::establish(&path).map_err(|e| format!("SQLite: {e}"))?;
            c.batch_execute("PRAGMA wal_checkpoint(TRUNCATE)")
                .map_err(|e| format!("SQLite checkpoint: {e}"))
        }
        #[allow(unreachable_patterns)]
        _ => Ok(()),
    })
    .await
    .expect("checkpoint task")
    .unwrap_or_else(|reason| eprintln!("warning: the phase starts without a checkpoint: {reason}"));
}

fn postgres_checkpoint(url: &str) -> Result<(), String> {
    let mut c = PgConnection::establish(url).map_err(|e| format!("PostgreSQL: {e}"))?;
    c.batch_execute("CHECKPOINT")
        .map_err(|e| format!("PostgreSQL checkpoint: {e}"))
}

/// The SQLite commit floor: median transactions per second of one-row `UPDATE`s, each
/// in its own `BEGIN IMMEDIATE` transaction, on a database file beside the store's with
/// the store's journal and sync settings.
fn sqlite_floor_tps(dir: &std::path::Path, rounds: &Rounds) -> Result<f64, String> {
    let path = dir.join("commit-floor.sqlite3");
    let mut c = SqliteConnection::establish(path.to_str().ok_or("non-UTF-8 path")?)
        .map_err(|e| format!("opening {}: {e}", path.display()))?;
    let sql = |c: &mut SqliteConnection, text: &str| {
        c.batch_execute(text).map_err(|e| format!("{text}: {e}"))
    };
    sql(
        &mut c,
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
         CREATE TABLE bench_commit_floor (id INTEGER PRIMARY KEY, n INTEGER NOT NULL); \
         INSERT INTO bench_commit_floor VALUES (1, 0);",
    )?;
    let one = |c: &mut SqliteConnection| {
        sql(
            c,
            "BEGIN IMMEDIATE; UPDATE bench_commit_floor SET n = n + 1 WHERE id = 1; COMMIT;",
        )
    };
    for _ in 0..100 {
        one(&mut c)?;
    }
    sql(&mut c, "PRAGMA wal_checkpoint(TRUNCATE)")?;
    let least = Duration::from_secs(u64::from(rounds.trial_seconds));
    let mut rates = Vec::with_capacity(rounds.trials);
    for trial in 0..rounds.trials {
        let (started, mut count) = (Instant::now(), 0u64);
        while started.elapsed() < least {
            one(&mut c)?;
            count += 1;
        }
        let tps = count as f64 / started.elapsed().as_secs_f64();
        eprintln!("  sqlite commit floor trial {}: {tps:.1} tps", trial + 1);
        rates.push(tps);
    }
    Ok(median(rates))
}

/// The floor rows: the commit floor's time per transaction, and the phase-only push's
/// time beyond it (or rows saying why the floor is missing).
fn emit_floor_rows(backend: &str, phase_rate: f64, floor_tps: Result<f64, String>) {
    let row = |kind: &str| format!("persistence.push_500.{backend}.{kind}");
    let push_ms = 1000.0 / phase_rate;
    match floor_tps {
        Ok(tps) => {
            let floor_ms = 1000.0 / tps;
            let beyond = push_ms - floor_ms;
            emit(&row("commit_floor"), floor_ms, "ms", None, None);
            ctxsync_test_support::bench_row(
                &row("phase_only_beyond_floor"),
                beyond,
                "ms",
                Some(floor_ms),
                Some(push_ms / floor_ms),
                Some(&format!(
                    "phase-only push ms - one-row UPDATE commit ms <= {BEYOND_FLOOR_TARGET_MS} \
                     (reference: the floor's ms; ratio: push ms / floor ms)"
                )),
                Some(beyond <= BEYOND_FLOOR_TARGET_MS),
            );
            eprintln!(
                "{backend}: commit floor {floor_ms:.3} ms; phase-only push {push_ms:.3} ms, \
                 {beyond:.3} ms beyond it ({:.1}x)",
                push_ms / floor_ms
            );
        }
        Err(reason) => {
            eprintln!("{backend}: commit floor unavailable: {reason}");
            for kind in ["commit_floor", "phase_only_beyond_floor"] {
                ctxsync_test_support::bench_row(
                    &row(kind),
                    f64::NAN,
                    "ms",
                    None,
                    None,
                    Some(&format!("floor not measured: {reason}")),
                    None,
                );
            }
        }
    }
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

/// Returns the median all-changed and phase-only rates.
async fn bench(backend: &str, db: &TestStore, rounds: &Rounds) -> (f64, f64) {
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
    let (all_rate, all_bytes, _) = trials(
        &mut client,
        &token,
        db,
        &format!("{backend}, every resource changed (full)"),
        rounds,
        ALL_CHANGED_BATCH,
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
    let (phase_rate, phase_bytes, phase_deltas) = trials(
        &mut client,
        &token,
        db,
        &format!("{backend}, only the phase changed (delta)"),
        rounds,
        DELTA_BATCH,
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
    let (edit_rate, edit_bytes, edit_deltas) = trials(
        &mut client,
        &token,
        db,
        &format!("{backend}, one resource changed (delta)"),
        rounds,
        DELTA_BATCH,
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
    assert_eq!(
        counters.pushes_delta,
        phase_deltas + edit_deltas,
        "{counters:?}"
    );
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
    (all_rate, phase_rate)
}

#[tokio::main]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let rounds = if quick {
        // A smoke run: every path once, no statistics.
        Rounds {
            warmup: 1,
            trials: 1,
            trial_seconds: 1,
        }
    } else {
        Rounds {
            warmup: 5,
            trials: 5,
            trial_seconds: 5,
        }
    };
    eprintln!(
        "bench_push: {RESOURCES} resources per push{}",
        if quick { " (quick)" } else { "" }
    );
    let sqlite = TestStore::sqlite().await;
    let (_, sqlite_phase) = bench("sqlite", &sqlite, &rounds).await;
    let dir = sqlite.sqlite_data_dir().expect("a SQLite store").to_owned();
    let floor = tokio::task::block_in_place(|| sqlite_floor_tps(&dir, &rounds));
    emit_floor_rows("sqlite", sqlite_phase, floor);
    let Some(db) = TestStore::postgres().await else {
        eprintln!("bench_push: PostgreSQL skipped");
        return;
    };
    let (ours, postgres_phase) = bench("postgres", &db, &rounds).await;
    let url = db
        .postgres_database()
        .expect("a PostgreSQL store")
        .url()
        .to_owned();
    eprintln!("pgbench: the one-row UPDATE and its commit on the same database");
    let floor =
        tokio::task::block_in_place(|| pgbench_tps(&url, &rounds, FLOOR_SETUP, FLOOR_SCRIPT));
    emit_floor_rows("postgres", postgres_phase, floor);
    eprintln!("pgbench: the equivalent SQL transaction on the same database");
    let name = "persistence.push_500.postgres.all_changed_vs_pgbench";
    let line = match tokio::task::block_in_place(|| {
        pgbench_tps(&url, &rounds, &pgbench_setup(), &pgbench_script())
    }) {
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
