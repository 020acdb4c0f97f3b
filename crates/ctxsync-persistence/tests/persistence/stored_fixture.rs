//! A database written before issue 35 reads back as it did then, on both backends.
//!
//! `tests/fixtures/stored-before-35/` holds one database per backend, filled (commit
//! dde9c9a, "a database of each backend filled by the current code") by the code as it was
//! before persistence moved to one module pattern and the run id to one type, and what
//! every read of it answered then. Its generator is gone on purpose: run by today's code
//! it would write today's answers, and prove nothing. The
//! reads are written out field by field, so a type that changes shape in memory (the run
//! id) but not in the rows still has to answer the same text.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use ctxsync_persistence::test_support::postgres_url;
use ctxsync_persistence::{AgentId, ChatId, DatabaseConfig, SQLITE_FILE_NAME, Store, TurnId};
use ctxsync_protocol::{Resource, RunId};
use diesel::connection::SimpleConnection as _;
use diesel::prelude::*;
use uuid::Uuid;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/stored-before-35")
}

/// What the reads need besides the database: ids no listing returns, and secrets.
#[derive(serde::Deserialize)]
struct Keys {
    chats: Vec<Uuid>,
    turns: Vec<(Uuid, Uuid)>,
    gate: Vec<(Uuid, Uuid, String)>,
    link: String,
    session: String,
}

fn resources(out: &mut String, resources: &[Resource]) {
    for r in resources {
        writeln!(
            out,
            "    resource {:?} path={:?} kind={:?} hash={} size={} status={:?} error={:?}\n      body={}",
            r.source,
            r.source_path,
            r.body.kind(),
            r.content_hash,
            r.size_bytes,
            r.status,
            r.error,
            r.body.to_json().unwrap()
        )
        .unwrap();
    }
}

/// Every read the store offers of what [`fill`] wrote, as text.
async fn describe(store: &Store, keys: &Keys) -> String {
    let mut out = String::new();
    for agent in store.list_agents().await.unwrap() {
        writeln!(
            out,
            "agent {} {:?} run={:?} startup={:?} dir={:?} retired={:?} started={:?} created={:?} updated={:?}",
            agent.id,
            agent.name,
            RunId::edge(agent.agent_run_id.as_ref()),
            agent.startup_version,
            agent.expanded_directory,
            agent.retired_agent_run_ids,
            agent.started_at,
            agent.created_at,
            agent.updated_at
        )
        .unwrap();
        let context = store.read_agent_context(agent.id).await.unwrap().unwrap();
        assert_eq!(context.agent, agent);
        if let Some(s) = &context.snapshot {
            writeln!(
                out,
                "  snapshot run={:?} phase={:?} version={} hash={} error={:?} received={:?} pending={:?}",
                RunId::edge(s.agent_run_id.as_ref()),
                s.phase,
                s.version,
                s.aggregate_hash,
                s.snapshot_error,
                s.received_at,
                s.pending_servers
            )
            .unwrap();
        }
        resources(&mut out, &context.resources);
    }
    // The aggregate query promises no order.
    let mut groups: Vec<String> = store
        .agent_phase_groups()
        .await
        .unwrap()
        .iter()
        .map(|group| format!("group {group:?}\n"))
        .collect();
    groups.sort();
    out.extend(groups);
    for chat in keys.chats.iter().map(|c| ChatId::from_uuid(*c)) {
        let chat = &chat;
        let context = store.read_chat_context(*chat).await.unwrap().unwrap();
        assert_eq!(
            Some(&context.chat),
            store.get_chat(*chat).await.unwrap().as_ref()
        );
        let c = &context.chat;
        writeln!(
            out,
            "chat {} agent={:?} pinned={:?} pinned_at={:?} dirty={:?} error={:?} created={:?} updated={:?}",
            c.id,
            c.agent_id.map(|a| a.to_string()),
            c.pinned_aggregate_hash,
            c.pinned_at,
            c.dirty_since,
            c.context_error,
            c.created_at,
            c.updated_at
        )
        .unwrap();
        resources(&mut out, &context.pinned);
        writeln!(
            out,
            "  latest {:?}",
            store.turn_activations(*chat, None).await.unwrap()
        )
        .unwrap();
    }
    for (chat, turn) in &keys.turns {
        let (chat, turn) = (ChatId::from_uuid(*chat), TurnId::from_uuid(*turn));
        let t = store.get_turn(chat, turn).await.unwrap().unwrap();
        writeln!(
            out,
            "turn {} chat={} number={} mode={:?} outcome={} tools={} activated={:?} created={:?}",
            t.id, t.chat_id, t.number, t.mode, t.outcome, t.tools, t.activated, t.created_at
        )
        .unwrap();
    }
    for (chat, agent, run) in &keys.gate {
        let (chat, agent) = (ChatId::from_uuid(*chat), AgentId::from_uuid(*agent));
        let attempt = store
            .read_gate_attempt(chat, agent, RunId::new(run.as_str()).as_ref())
            .await
            .unwrap();
        writeln!(out, "gate {chat} {agent} {run:?} {attempt:?}").unwrap();
    }
    writeln!(
        out,
        "link {:?}",
        store.page_link_chat(&keys.link).await.unwrap()
    )
    .unwrap();
    writeln!(
        out,
        "session {:?}",
        store.page_session_chat(&keys.session).await.unwrap()
    )
    .unwrap();
    out
}

fn read_keys(backend: &str) -> Keys {
    let text = std::fs::read_to_string(dir().join(format!("{backend}.keys.json")))
        .expect("the fixture's keys");
    serde_json::from_str(&text).expect("the fixture's keys parse")
}

fn expected(backend: &str) -> String {
    std::fs::read_to_string(dir().join(format!("{backend}.reads.txt")))
        .expect("the fixture's reads")
}

#[tokio::test]
async fn a_sqlite_database_written_before_reads_the_same() {
    let data = tempfile::tempdir().unwrap();
    std::fs::copy(
        dir().join("sqlite.sqlite3"),
        data.path().join(SQLITE_FILE_NAME),
    )
    .unwrap();
    let store = Store::open(DatabaseConfig::sqlite_in(data.path()))
        .await
        .unwrap();
    let reads = describe(&store, &read_keys("sqlite")).await;
    assert_eq!(reads, expected("sqlite"));
}

#[tokio::test]
async fn a_postgres_database_written_before_reads_the_same() {
    // An empty database of its own (not the migrated template): the dump brings the
    // schema and the migrations table as they were.
    let server = postgres_url();
    let Ok(mut admin) = PgConnection::establish(&server) else {
        if std::env::var_os("CI").is_some() {
            panic!("PostgreSQL is unreachable at {server}");
        }
        return;
    };
    let name = format!("ctxsync_fixture_{}", std::process::id());
    for statement in [
        format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        format!("CREATE DATABASE {name} TEMPLATE template0"),
    ] {
        admin.batch_execute(&statement).unwrap();
    }
    let url = match server.rsplit_once('/') {
        Some((base, _)) => format!("{base}/{name}"),
        None => unreachable!("a PostgreSQL URL names its database"),
    };
    // psql meta-commands (pg_dump's `\restrict`) are not SQL.
    let dump: String = std::fs::read_to_string(dir().join("postgres.sql"))
        .unwrap()
        .lines()
        .filter(|line| !line.starts_with('\\'))
        .map(|line| format!("{line}\n"))
        .collect();
    PgConnection::establish(&url)
        .unwrap()
        .batch_execute(&dump)
        .unwrap();
    let store = Store::open(DatabaseConfig::Postgres { url }).await.unwrap();
    let reads = describe(&store, &read_keys("postgres")).await;
    drop(store);
    admin
        .batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .unwrap();
    assert_eq!(reads, expected("postgres"));
}
