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
        accepts_tool_calls -> Bool,
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
        resources_digest -> Nullable<Binary>,
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
        agent_id -> Nullable<UuidSql>,
        agent_run_id -> Nullable<Text>,
        origins -> JsonSql,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use crate::sql_types::*;

    chat_turn_activations (turn_id, tool) {
        turn_id -> UuidSql,
        tool -> Text,
        activated_at -> TimestampSql,
        server -> Nullable<Text>,
        tool_name -> Nullable<Text>,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use crate::sql_types::*;

    // Diesel declares at most 16 columns a table without its `32-column-tables` feature
    // (which would rebuild diesel for every crate), so `tool_calls` is declared twice:
    // here the call as admitted, and as `tool_call_ends` the columns its end writes.
    // Reads select the other columns by name (`tool_call/admission.rs`).
    tool_calls (id) {
        id -> UuidSql,
        turn_id -> UuidSql,
        chat_id -> UuidSql,
        call_id -> Text,
        name -> Text,
        server -> Text,
        tool -> Text,
        agent_id -> Nullable<UuidSql>,
        agent_run_id -> Nullable<Text>,
        arguments -> Nullable<Text>,
        arguments_digest -> Text,
        arguments_size -> BigInt,
        timeout_ms -> BigInt,
        status -> Text,
        started_at -> TimestampSql,
        ended_at -> Nullable<TimestampSql>,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use crate::sql_types::*;

    /// The end columns of `tool_calls` (see there), for the statements that write them.
    #[sql_name = "tool_calls"]
    tool_call_ends (id) {
        id -> UuidSql,
        chat_id -> UuidSql,
        agent_id -> Nullable<UuidSql>,
        status -> Text,
        arguments -> Nullable<Text>,
        reason -> Nullable<Text>,
        error -> Nullable<Text>,
        result -> Nullable<Text>,
        truncated -> Bool,
        progress -> Nullable<Text>,
        delivered -> Bool,
        ended_at -> Nullable<TimestampSql>,
        duration_ms -> Nullable<BigInt>,
        delivered_generation -> Nullable<BigInt>,
        cancel_requested -> Bool,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use crate::sql_types::*;

    /// Which replica holds each agent's call stream (`tool_call/routing.rs`).
    call_streams (agent_id) {
        agent_id -> UuidSql,
        agent_run_id -> Text,
        generation -> BigInt,
        replica -> Text,
        lease_until_ms -> BigInt,
        ended_at_ms -> Nullable<BigInt>,
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

diesel::table! {
    use diesel::sql_types::*;
    use crate::sql_types::*;

    // One column past diesel's 16 (see `tool_calls`): `truncated` is selected by name
    // (`audit.rs`); rows are written by `INSERT … SELECT` from `tool_calls`.
    tool_call_audit (tool_call_id) {
        tool_call_id -> UuidSql,
        agent_id -> Nullable<UuidSql>,
        chat_id -> UuidSql,
        turn_id -> UuidSql,
        call_id -> Text,
        name -> Text,
        server -> Text,
        tool -> Text,
        status -> Text,
        reason -> Nullable<Text>,
        error_code -> Nullable<BigInt>,
        duration_ms -> Nullable<BigInt>,
        arguments_digest -> Text,
        arguments_size -> BigInt,
        result_size -> Nullable<BigInt>,
        ended_at -> TimestampSql,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use crate::sql_types::*;

    /// The audit log's sign-in entries (`audit/sign_in.rs`).
    sign_in_audit (id) {
        id -> UuidSql,
        agent_id -> UuidSql,
        sign_in_id -> Nullable<UuidSql>,
        server -> Text,
        status -> Text,
        via -> Text,
        chat_id -> Nullable<UuidSql>,
        issuer -> Nullable<Text>,
        reason -> Nullable<Text>,
        recorded_at -> TimestampSql,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use crate::sql_types::*;

    deployment_secrets (name) {
        name -> Text,
        value -> Binary,
        created_at -> TimestampSql,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use crate::sql_types::*;

    /// MCP sign-in credentials, the secret part sealed (`credentials.rs`).
    mcp_credentials (agent_id, server_url, issuer) {
        agent_id -> UuidSql,
        server_name -> Text,
        server_url -> Text,
        issuer -> Text,
        account -> Nullable<Text>,
        scopes -> Text,
        access_expires_at -> Nullable<TimestampSql>,
        signed_in_at -> TimestampSql,
        signed_in_via -> Text,
        updated_at -> TimestampSql,
        key_id -> Text,
        nonce -> Binary,
        ciphertext -> Binary,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use crate::sql_types::*;

    /// OAuth dynamic client registrations, the client secret sealed (`credentials.rs`).
    mcp_oauth_clients (issuer, redirect_uri) {
        issuer -> Text,
        redirect_uri -> Text,
        client_id -> Text,
        key_id -> Nullable<Text>,
        nonce -> Nullable<Binary>,
        client_secret_ciphertext -> Nullable<Binary>,
        created_at -> TimestampSql,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use crate::sql_types::*;

    // Declared twice, as `tool_calls` is (diesel's 16-column limit): here the sign-in as
    // asked for, looked up and polled; as `mcp_sign_in_steps` the columns its steps
    // write, the sealed state among them (`sign_in.rs`).
    mcp_sign_ins (id) {
        id -> UuidSql,
        agent_id -> UuidSql,
        server_name -> Text,
        status -> Text,
        via -> Text,
        browser -> Nullable<Text>,
        state_hash -> Nullable<Text>,
        authorization_url -> Nullable<Text>,
        error -> Nullable<Text>,
        claimed_by -> Nullable<Text>,
        claimed_at -> Nullable<TimestampSql>,
        created_at -> TimestampSql,
        expires_at -> TimestampSql,
        updated_at -> TimestampSql,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use crate::sql_types::*;

    /// The columns of `mcp_sign_ins` (see there) its steps write, for those statements,
    /// and `via`, which they copy into the audit log.
    #[sql_name = "mcp_sign_ins"]
    mcp_sign_in_steps (id) {
        id -> UuidSql,
        agent_id -> UuidSql,
        server_name -> Text,
        status -> Text,
        via -> Text,
        state_hash -> Nullable<Text>,
        authorization_url -> Nullable<Text>,
        issuer -> Nullable<Text>,
        server_url -> Nullable<Text>,
        error -> Nullable<Text>,
        key_id -> Nullable<Text>,
        nonce -> Nullable<Binary>,
        ciphertext -> Nullable<Binary>,
        claimed_by -> Nullable<Text>,
        claimed_at -> Nullable<TimestampSql>,
        updated_at -> TimestampSql,
    }
}

diesel::joinable!(workspace_agent_context_snapshots -> workspace_agents (agent_id));
diesel::joinable!(workspace_agent_context_resources -> workspace_agents (agent_id));
diesel::joinable!(chat_context_resources -> chats (chat_id));
diesel::joinable!(page_links -> chats (chat_id));
diesel::joinable!(page_sessions -> chats (chat_id));
diesel::joinable!(tool_calls -> chat_turns (turn_id));
diesel::joinable!(chat_turn_activations -> chat_turns (turn_id));
diesel::joinable!(mcp_credentials -> workspace_agents (agent_id));
diesel::joinable!(mcp_sign_ins -> workspace_agents (agent_id));

diesel::allow_tables_to_appear_in_same_query!(
    workspace_agents,
    workspace_agent_context_snapshots,
    workspace_agent_context_resources,
    chats,
    chat_context_resources,
    page_links,
    page_sessions,
    chat_turns,
    chat_turn_activations,
    tool_calls,
    call_streams,
    mcp_credentials,
    mcp_sign_ins,
);
