//! The diesel schema shared by both backends. Written by hand (see `diesel.toml`): the
//! column types are the backend-neutral ones of [`crate::sql_types`], and the
//! migrations under `migrations/{postgres,sqlite}` create matching tables.

diesel::table! {
    use diesel::sql_types::*;
    use crate::sql_types::*;

    workspace_agents (id) {
        id -> UuidSql,
        name -> Text,
        token_hash -> Binary,
        agent_run_id -> Text,
        startup_version -> Text,
        expanded_directory -> Text,
        retired_agent_run_ids -> JsonSql,
        started_at -> Nullable<TimestampSql>,
        created_at -> TimestampSql,
        updated_at -> TimestampSql,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use crate::sql_types::*;

    workspace_agent_context_snapshots (agent_id) {
        agent_id -> UuidSql,
        agent_run_id -> Text,
        mcp_discovery_phase -> DiscoveryPhaseSql,
        version -> BigInt,
        aggregate_hash -> Text,
        snapshot_error -> Nullable<Text>,
        received_at -> TimestampSql,
        created_at -> TimestampSql,
        pending_servers -> JsonSql,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use crate::sql_types::*;

    workspace_agent_context_resources (agent_id, source) {
        agent_id -> UuidSql,
        source -> Text,
        source_path -> Nullable<Text>,
        body_kind -> BodyKindSql,
        body -> JsonSql,
        body_digest -> Binary,
        content_hash -> Text,
        size_bytes -> BigInt,
        status -> ResourceStatusSql,
        error -> Nullable<Text>,
        created_at -> TimestampSql,
        updated_at -> TimestampSql,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use crate::sql_types::*;

    chats (id) {
        id -> UuidSql,
        agent_id -> Nullable<UuidSql>,
        pinned_aggregate_hash -> Nullable<Text>,
        pinned_at -> Nullable<TimestampSql>,
        dirty_since -> Nullable<TimestampSql>,
        context_error -> Nullable<Text>,
        created_at -> TimestampSql,
        updated_at -> TimestampSql,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use crate::sql_types::*;

    chat_context_resources (chat_id, source) {
        chat_id -> UuidSql,
        source -> Text,
        source_path -> Nullable<Text>,
        body_kind -> BodyKindSql,
        body -> JsonSql,
        content_hash -> Text,
        size_bytes -> BigInt,
        status -> ResourceStatusSql,
        error -> Nullable<Text>,
        pinned_at -> TimestampSql,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use crate::sql_types::*;

    chat_turns (id) {
        id -> UuidSql,
        chat_id -> UuidSql,
        seq -> BigInt,
        mode -> Text,
        outcome -> JsonSql,
        tools -> JsonSql,
        created_at -> TimestampSql,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use crate::sql_types::*;

    chat_turn_activations (turn_id, tool) {
        turn_id -> UuidSql,
        tool -> Text,
        activated_at -> TimestampSql,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use crate::sql_types::*;

    page_links (token_digest) {
        token_digest -> Binary,
        chat_id -> UuidSql,
        expires_at -> TimestampSql,
        created_at -> TimestampSql,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use crate::sql_types::*;

    page_sessions (session_digest) {
        session_digest -> Binary,
        chat_id -> UuidSql,
        expires_at -> TimestampSql,
        created_at -> TimestampSql,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use crate::sql_types::*;

    gate_attempts (chat_id, agent_id, agent_run_id) {
        chat_id -> UuidSql,
        agent_id -> UuidSql,
        agent_run_id -> Text,
        started_at -> TimestampSql,
        wait_limit_ms -> BigInt,
        ended_at -> Nullable<TimestampSql>,
        timed_out -> Bool,
    }
}

diesel::joinable!(workspace_agent_context_snapshots -> workspace_agents (agent_id));
diesel::joinable!(workspace_agent_context_resources -> workspace_agents (agent_id));
diesel::joinable!(chat_context_resources -> chats (chat_id));
diesel::joinable!(page_links -> chats (chat_id));
diesel::joinable!(page_sessions -> chats (chat_id));

diesel::allow_tables_to_appear_in_same_query!(
    workspace_agents,
    workspace_agent_context_snapshots,
    workspace_agent_context_resources,
    chats,
    chat_context_resources,
    page_links,
    page_sessions,
);
