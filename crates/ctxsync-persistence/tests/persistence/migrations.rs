//! Every migration is reversible on both backends (run, revert all, run again), and the
//! two migration trees carry the same names.

use ctxsync_persistence::migrations;
use ctxsync_persistence::test_support::TestDatabase;
use diesel::migration::MigrationSource;
use diesel::prelude::*;
use diesel::sql_types::Text;
use diesel_migrations::MigrationHarness;

#[derive(QueryableByName)]
struct Name {
    #[diesel(sql_type = Text)]
    name: String,
}

const TABLES: &[&str] = &[
    "call_streams",
    "chat_context_resources",
    "chat_turn_activations",
    "chat_turns",
    "chats",
    "deployment_secrets",
    "gate_attempts",
    "mcp_credentials",
    "mcp_oauth_clients",
    "mcp_sign_ins",
    "page_links",
    "page_sessions",
    "sign_in_audit",
    "tool_call_audit",
    "tool_calls",
    "workspace_agent_context_resources",
    "workspace_agent_context_snapshots",
    "workspace_agents",
];

fn names<C: Connection>(conn: &mut C, sql: &str) -> Vec<String>
where
    diesel::query_builder::SqlQuery: diesel::query_dsl::LoadQuery<'static, C, Name>,
{
    let mut names: Vec<String> = diesel::sql_query(sql)
        .load::<Name>(conn)
        .expect("listing schema objects")
        .into_iter()
        .map(|n| n.name)
        .filter(|n| n != "__diesel_schema_migrations")
        .collect();
    names.sort();
    names
}

#[test]
fn both_trees_have_the_same_migrations() {
    let pg: Vec<String> = MigrationSource::<diesel::pg::Pg>::migrations(&migrations::POSTGRES)
        .unwrap()
        .iter()
        .map(|m| m.name().to_string())
        .collect();
    let sqlite: Vec<String> =
        MigrationSource::<diesel::sqlite::Sqlite>::migrations(&migrations::SQLITE)
            .unwrap()
            .iter()
            .map(|m| m.name().to_string())
            .collect();
    assert!(!pg.is_empty());
    assert_eq!(pg, sqlite);
}

#[test]
fn sqlite_migrations_are_reversible() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.sqlite3");
    let mut conn = SqliteConnection::establish(path.to_str().unwrap()).unwrap();
    let tables = |conn: &mut SqliteConnection| {
        names(
            conn,
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
        )
    };
    for round in 0..2 {
        conn.run_pending_migrations(migrations::SQLITE).unwrap();
        assert_eq!(tables(&mut conn), TABLES, "round {round}: after run");
        conn.revert_all_migrations(migrations::SQLITE).unwrap();
        assert!(
            tables(&mut conn).is_empty(),
            "round {round}: revert left tables"
        );
    }
    conn.run_pending_migrations(migrations::SQLITE).unwrap();
    assert_eq!(tables(&mut conn), TABLES);
}

#[test]
fn postgres_migrations_are_reversible() {
    let Some(database) = TestDatabase::create() else {
        return;
    };
    let mut conn = PgConnection::establish(database.url()).unwrap();
    let tables = |conn: &mut PgConnection| {
        names(
            conn,
            "SELECT tablename AS name FROM pg_tables WHERE schemaname = 'public'",
        )
    };
    let enums = |conn: &mut PgConnection| {
        names(
            conn,
            "SELECT typname AS name FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace \
             WHERE n.nspname = 'public' AND t.typtype = 'e'",
        )
    };
    let all_enums = [
        "context_body_kind",
        "context_resource_status",
        "mcp_discovery_phase",
    ];
    // The test database comes from the migrated template.
    assert_eq!(tables(&mut conn), TABLES);
    assert_eq!(enums(&mut conn), all_enums);
    for round in 0..2 {
        conn.revert_all_migrations(migrations::POSTGRES).unwrap();
        assert!(
            tables(&mut conn).is_empty(),
            "round {round}: revert left tables"
        );
        assert!(
            enums(&mut conn).is_empty(),
            "round {round}: revert left types"
        );
        conn.run_pending_migrations(migrations::POSTGRES).unwrap();
        assert_eq!(tables(&mut conn), TABLES, "round {round}: after run");
        assert_eq!(enums(&mut conn), all_enums);
    }
}
