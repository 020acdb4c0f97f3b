//! PushContextState (SPEC §5.4): the push checked and fingerprinted before the
//! transaction, then the run gate, the version gate, the snapshot and its resources, and
//! the chats a new snapshot pins or makes dirty.

use std::collections::HashMap;

use chrono::Utc;
use ctxsync_protocol::{
    KeptResource, McpConnectTimings, McpServerBody, Push, Resource, ResourceBody, RunId,
    SnapshotPendingServer,
};
use diesel::prelude::*;
#[cfg(feature = "sqlite")]
use diesel::upsert::excluded;
use sha2::{Digest, Sha256};

use crate::agents::{RowLock, lock_agent_with_token};
use crate::chats::pin_stored_snapshot;
use crate::db::{Tx, on_backend};
use crate::error::StoreError;
use crate::ids::{AgentId, ChatId};
use crate::model::*;
use crate::notify::ChangeEvent;
use crate::schema::*;
use crate::shared::{ROWS_PER_STATEMENT, agent_event, body_json, notify_in_tx};
use crate::sql_types::{DbBodyKind, DbPhase, DbStatus, DbTime, JsonText};
use crate::store::Store;
use crate::token::{self, TokenDigest};

impl Store {
    /// SPEC §5.4, in one transaction: the run gate, the version gate, the snapshot and
    /// resource upserts, chat pinning and dirty-marking; commit; then notify when
    /// anything changed: the agent's subscribers, and each chat whose row the push
    /// changed (a first pin, marked or cleared dirty).
    ///
    /// Takes a [`ctxsync_protocol::Snapshot`] (a full push) or a [`Push`] as decoded from
    /// the wire, which may be a delta: applied under the same rules, or refused with
    /// [`PushOutcome::DeltaBaseMissing`] when its base is not stored.
    pub async fn push_context_state(
        &self,
        agent: AgentId,
        push: impl Into<Push>,
    ) -> Result<PushOutcome, StoreError> {
        self.push_checked(agent, None, push.into()).await
    }

    /// [`Self::push_context_state`] for the holder of a bearer token whose SHA-256 is
    /// `token_digest`: the push's transaction compares it with the hash on the agent row
    /// it locks, before writing anything, and fails with [`StoreError::InvalidToken`]
    /// when they differ (a token rotated since the caller last checked it). So a push is
    /// never accepted on a revoked token, whatever the caller remembered.
    pub async fn push_with_token(
        &self,
        agent: AgentId,
        token_digest: TokenDigest,
        push: Push,
    ) -> Result<PushOutcome, StoreError> {
        self.push_checked(agent, Some(*token_digest.as_bytes()), push)
            .await
    }

    async fn push_checked(
        &self,
        agent: AgentId,
        token_digest: Option<[u8; 32]>,
        push: Push,
    ) -> Result<PushOutcome, StoreError> {
        let version = push.snapshot.version;
        let (outcome, chats) = self
            .with_conn(move |conn, origin| {
                let prepared = prepare_push(push)?;
                let pusher = Pusher {
                    agent_id: agent,
                    token_digest,
                };
                conn.write(|tx| apply(tx, &pusher, &prepared, DbTime(Utc::now()), origin))
            })
            .await?;
        if let PushOutcome::Accepted(changes) = &outcome
            && changes.is_change()
        {
            self.deliver(&agent_event(agent, Some(version)));
        }
        for chat_id in chats {
            self.deliver(&chat_changed(chat_id, agent));
        }
        Ok(outcome)
    }
}

fn chat_changed(chat_id: ChatId, agent_id: AgentId) -> ChangeEvent {
    ChangeEvent::ChatChanged {
        chat_id,
        agent_id: Some(agent_id),
    }
}

/// Who pushes: the agent, and the digest of the token it presented when the push must
/// check it against the locked row.
struct Pusher {
    agent_id: AgentId,
    token_digest: Option<[u8; 32]>,
}

/// A push checked before the transaction starts, so nothing is converted inside a
/// retry or under the write lock. Body digests come with the push: the protocol layer
/// computed them from the bodies as sent (scheme 1), and a delta names the digests of the
/// bodies it left out.
struct PreparedPush {
    run_id: Option<RunId>,
    version: i64,
    push: Push,
    /// Per `push.snapshot.resources[i]` and per `push.kept[i]`: its size as stored.
    sizes: Vec<i64>,
    kept_sizes: Vec<i64>,
    /// [`resources_digest`] of this push's resources, full and kept.
    resources_digest: [u8; 32],
}

fn prepare_push(push: Push) -> Result<PreparedPush, StoreError> {
    let snapshot = &push.snapshot;
    let run_id = snapshot.agent_run_id.clone();
    let version = to_i64("version", snapshot.version)?;
    if push.digests.len() != snapshot.resources.len() {
        return Err(StoreError::InvalidInput(format!(
            "a push with {} resources carries {} body digests",
            snapshot.resources.len(),
            push.digests.len()
        )));
    }
    let sizes: Vec<i64> = snapshot
        .resources
        .iter()
        .map(|r| to_i64("size_bytes", r.size_bytes))
        .collect::<Result<_, _>>()?;
    let kept_sizes: Vec<i64> = push
        .kept
        .iter()
        .map(|r| to_i64("size_bytes", r.size_bytes))
        .collect::<Result<_, _>>()?;
    let resources_digest = resources_digest(&push, &sizes, &kept_sizes);
    Ok(PreparedPush {
        run_id,
        version,
        push,
        sizes,
        kept_sizes,
        resources_digest,
    })
}

/// SHA-256 over every resource's fingerprint (source, path, body digest, content hash,
/// size, status, error: all a stored row holds but its timestamps, the body being named
/// by its digest), each field length-prefixed so no two lists hash alike by shifting
/// bytes between fields. Stored with the snapshot, it lets the next push whose resources
/// hash the same skip reading and comparing the rows: they are, field for field, what it
/// would write. In the push's order (bodies sent, then bodies kept), not sorted: an agent
/// lists its resources alike from push to push, and one that reorders them only costs
/// the full comparison.
fn resources_digest(push: &Push, sizes: &[i64], kept_sizes: &[i64]) -> [u8; 32] {
    struct Fingerprint<'a> {
        source: &'a str,
        source_path: Option<&'a str>,
        body_digest: &'a [u8],
        content_hash: &'a str,
        size_bytes: i64,
        status: &'static str,
        error: Option<&'a str>,
    }
    let full = push
        .snapshot
        .resources
        .iter()
        .zip(&push.digests)
        .zip(sizes)
        .map(|((r, digest), size)| Fingerprint {
            source: &r.source,
            source_path: r.source_path.as_deref(),
            body_digest: digest.as_bytes(),
            content_hash: &r.content_hash,
            size_bytes: *size,
            status: r.status.as_str(),
            error: r.error.as_deref(),
        });
    let kept = push
        .kept
        .iter()
        .zip(kept_sizes)
        .map(|(k, size)| Fingerprint {
            source: &k.source,
            source_path: k.source_path.as_deref(),
            body_digest: k.body_digest.as_bytes(),
            content_hash: &k.content_hash,
            size_bytes: *size,
            status: k.status.as_str(),
            error: k.error.as_deref(),
        });
    // One buffer hashed at once: thousands of small updates cost more than the hash.
    let mut text = Vec::with_capacity((push.snapshot.resources.len() + push.kept.len()) * 256);
    let mut field = |bytes: &[u8]| {
        text.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        text.extend_from_slice(bytes);
    };
    for f in full.chain(kept) {
        field(f.source.as_bytes());
        // A missing value and an empty one differ: the marker is not UTF-8, so no text.
        match f.source_path {
            Some(path) => field(path.as_bytes()),
            None => field(&[0xff; 9]),
        }
        field(f.body_digest);
        field(f.content_hash.as_bytes());
        field(&f.size_bytes.to_le_bytes());
        field(f.status.as_bytes());
        match f.error {
            Some(error) => field(error.as_bytes()),
            None => field(&[0xff; 9]),
        }
    }
    Sha256::digest(&text).into()
}

/// SPEC §5.4 steps 1–4, with the chats whose rows it changed; the caller commits and
/// then notifies in-process.
fn apply(
    tx: &mut Tx<'_>,
    pusher: &Pusher,
    push: &PreparedPush,
    now: DbTime,
    origin: u64,
) -> Result<(PushOutcome, Vec<ChatId>), StoreError> {
    let agent_id = pusher.agent_id;
    // 1. The token, when the caller asks, and the run gate: only the agent row's current
    // run may write.
    let (agent, token_hash) = lock_agent_with_token(tx, agent_id, RowLock::Share)?;
    if let Some(digest) = &pusher.token_digest
        && !token::digest_matches(digest, &token_hash)
    {
        return Err(StoreError::InvalidToken);
    }
    let current = RunId::new(agent.agent_run_id.as_str());
    let retired = match &push.run_id {
        Some(run) => agent.retired()?.contains(run),
        None => false,
    };
    if (current.is_some() && current != push.run_id) || retired {
        return Ok((PushOutcome::DroppedStaleRun, Vec::new()));
    }

    // 2. The version gate.
    let previous = {
        on_backend!(tx, |c| workspace_agent_context_snapshots::table
            .find(agent_id)
            .select(SnapshotRow::as_select())
            .first(c)
            .optional())?
    };
    if let Some(previous) = &previous
        && is_stale_version(push, previous)
    {
        let stored_version = stored_u64("snapshot version", previous.version)?;
        return Ok((
            PushOutcome::DroppedStaleVersion { stored_version },
            Vec::new(),
        ));
    }

    // 3. Resources this run stored with the same fingerprints are neither read nor
    // compared: the push would leave every row as it is, and the rows hold every body a
    // delta left out, with the digest it names (the digest covers them). Otherwise a
    // delta's base is checked: the stored snapshot is this run's and holds every body
    // the delta left out, with that digest. Checked before anything is written.
    let rows_unchanged = previous.as_ref().is_some_and(|p| {
        p.agent_run_id == RunId::edge(push.run_id.as_ref())
            && (push.run_id.is_some() || !push.push.delta)
            && p.resources_digest.as_deref() == Some(push.resources_digest.as_slice())
    });
    let stored = if rows_unchanged {
        Vec::new()
    } else {
        load_fingerprints(tx, agent_id)?
    };
    if push.push.delta && !rows_unchanged && !has_base(push, previous.as_ref(), &stored) {
        return Ok((PushOutcome::DeltaBaseMissing, Vec::new()));
    }

    // 4. Snapshot header and resources.
    let snapshot = &push.push.snapshot;
    let mut changes = PushChanges {
        snapshot_created: previous.is_none(),
        phase_changed: previous
            .as_ref()
            .is_none_or(|p| p.mcp_discovery_phase.0 != snapshot.phase),
        run_id_changed: previous
            .as_ref()
            .is_none_or(|p| p.agent_run_id != RunId::edge(push.run_id.as_ref())),
        aggregate_hash_changed: previous
            .as_ref()
            .is_none_or(|p| p.aggregate_hash != snapshot.aggregate_hash),
        snapshot_error_changed: previous
            .as_ref()
            .is_none_or(|p| p.snapshot_error != snapshot.snapshot_error),
        pending_changed: previous
            .as_ref()
            .is_none_or(|p| !same_names(&p.pending_servers, &snapshot.pending_servers)),
        ..PushChanges::default()
    };
    let header = header_row(agent_id, push, now);
    (changes.resources, changes.server_timings) = if rows_unchanged {
        // The same run: no unchanged row reports its timings again.
        let unchanged = snapshot.resources.len() + push.push.kept.len();
        (
            ResourceChanges {
                unchanged,
                ..ResourceChanges::default()
            },
            Vec::new(),
        )
    } else {
        write_resources(tx, agent_id, push, &stored, now, changes.run_id_changed)?
    };
    // The header last, so whether anything changed is known: on PostgreSQL its statement
    // also queues the agent's notification (one round trip, not two).
    let event = changes
        .is_change()
        .then(|| agent_event(agent_id, Some(snapshot.version)));
    upsert_header(tx, &header, event.as_ref(), origin)?;

    // 5. Chats: adopt a first pin, then mark or clear dirty against the new hash. One
    // read finds what needs writing; most pushes (no chat bound, or none to change) stop
    // there.
    let bound: Vec<(ChatId, Option<String>, Option<DbTime>)> = {
        let query = chats::table.filter(chats::agent_id.eq(agent_id)).select((
            chats::id,
            chats::pinned_aggregate_hash,
            chats::dirty_since,
        ));
        on_backend!(tx, |c| query.load(c))?
    };
    let unpinned: Vec<ChatId> = bound
        .iter()
        .filter(|(_, pin, _)| pin.is_none())
        .map(|(id, _, _)| *id)
        .collect();
    // The snapshot a chat "first sees" (SPEC §7), as just stored.
    pin_stored_snapshot(tx, &unpinned, Some(agent_id), now)?;
    let mut changed_chats = unpinned;
    let hash = &snapshot.aggregate_hash;
    let dirt_moves: Vec<ChatId> = bound
        .iter()
        .filter(|(_, pin, dirty)| match pin {
            None => false,
            Some(pin) => (pin != hash && dirty.is_none()) || (pin == hash && dirty.is_some()),
        })
        .map(|(id, _, _)| *id)
        .collect();
    if changes.aggregate_hash_changed && !dirt_moves.is_empty() {
        changes.chats_marked_dirty = mark_chats_dirty(tx, agent_id, hash, now)?;
        changed_chats.extend(dirt_moves);
    }

    for &chat_id in &changed_chats {
        notify_in_tx(tx, origin, &chat_changed(chat_id, agent_id))?;
    }
    Ok((PushOutcome::Accepted(changes), changed_chats))
}

/// The snapshot header a push stores.
fn header_row(agent_id: AgentId, push: &PreparedPush, now: DbTime) -> SnapshotRow {
    let snapshot = &push.push.snapshot;
    SnapshotRow {
        agent_id,
        agent_run_id: RunId::edge(push.run_id.as_ref()).to_owned(),
        mcp_discovery_phase: DbPhase(snapshot.phase),
        version: push.version,
        aggregate_hash: snapshot.aggregate_hash.clone(),
        snapshot_error: snapshot.snapshot_error.clone(),
        received_at: now,
        created_at: now,
        pending_servers: JsonText(
            serde_json::to_string(&snapshot.pending_servers).expect("names and numbers serialize"),
        ),
        resources_digest: Some(push.resources_digest.to_vec()),
    }
}

/// Inserts or overwrites the snapshot header and, given an event, notifies it with the
/// transaction (PostgreSQL: from the same statement, as a `RETURNING` subquery run once
/// for the one row; SQLite has no other process to tell).
fn upsert_header(
    tx: &mut Tx<'_>,
    header: &SnapshotRow,
    event: Option<&ChangeEvent>,
    origin: u64,
) -> Result<(), StoreError> {
    let upsert = diesel::insert_into(workspace_agent_context_snapshots::table)
        .values(header)
        .on_conflict(workspace_agent_context_snapshots::agent_id)
        .do_update()
        .set((
            workspace_agent_context_snapshots::agent_run_id.eq(&header.agent_run_id),
            workspace_agent_context_snapshots::mcp_discovery_phase.eq(header.mcp_discovery_phase),
            workspace_agent_context_snapshots::version.eq(header.version),
            workspace_agent_context_snapshots::aggregate_hash.eq(&header.aggregate_hash),
            workspace_agent_context_snapshots::snapshot_error.eq(&header.snapshot_error),
            workspace_agent_context_snapshots::received_at.eq(header.received_at),
            workspace_agent_context_snapshots::pending_servers.eq(&header.pending_servers),
            workspace_agent_context_snapshots::resources_digest.eq(&header.resources_digest),
        ));
    match tx {
        #[cfg(feature = "postgres")]
        Tx::Postgres(c) => {
            use diesel::sql_types::{Integer, Nullable, Text};
            match event.and_then(|event| crate::pg_listener::encode(origin, event)) {
                Some(payload) => {
                    let notify = diesel::dsl::sql::<Nullable<Integer>>("(SELECT 1 FROM pg_notify(")
                        .bind::<Text, _>(crate::pg_listener::CHANNEL)
                        .sql(", ")
                        .bind::<Text, _>(payload)
                        .sql("))");
                    upsert.returning(notify).get_result::<Option<i32>>(*c)?;
                }
                None => {
                    upsert.execute(*c)?;
                }
            }
        }
        #[cfg(feature = "sqlite")]
        Tx::Sqlite(c) => {
            let _ = (event, origin);
            upsert.execute(*c)?;
        }
    }
    Ok(())
}

/// Whether the stored pending list (JSON) names the same servers as `pending`, in order.
fn same_names(stored: &JsonText, pending: &[SnapshotPendingServer]) -> bool {
    let stored: Vec<SnapshotPendingServer> = serde_json::from_str(&stored.0).unwrap_or_default();
    stored.len() == pending.len()
        && stored
            .iter()
            .zip(pending)
            .all(|(a, b)| a.server_name == b.server_name)
}

/// SPEC §5.4 step 2. A push that is not `initial` must be above the stored version (an
/// equal one is a replay). An `initial` push (the first of a connection) may start the
/// count again only for a run other than the stored snapshot's: within one non-empty
/// run versions only grow, so a lower version of the stored run is a push that
/// committed late (say, retried after a serialization conflict while the agent had
/// reconnected and pushed a newer one) and is dropped, `initial` or not; the same
/// version is the same snapshot sent again on a reconnect, an idempotent repeat that is
/// accepted and changes nothing. Legacy agents (no run id) cannot tell a reconnect
/// from a restart, so their `initial` pushes bypass the gate.
fn is_stale_version(push: &PreparedPush, stored: &SnapshotRow) -> bool {
    if !push.push.snapshot.initial {
        return push.version <= stored.version;
    }
    let same_run = push
        .run_id
        .as_ref()
        .is_some_and(|run| *run == *stored.agent_run_id);
    same_run && push.version < stored.version
}

fn load_fingerprints(
    tx: &mut Tx<'_>,
    agent_id: AgentId,
) -> Result<Vec<ResourceFingerprint>, StoreError> {
    Ok(on_backend!(tx, |c| {
        workspace_agent_context_resources::table
            .filter(workspace_agent_context_resources::agent_id.eq(agent_id))
            .select(ResourceFingerprint::as_select())
            .load(c)
    })?)
}

/// Whether the server holds the base a delta relies on: the stored snapshot belongs to
/// the pushing run (a run id is required: without one, reconnects and restarts look
/// alike), and every omitted body is stored for its source with the digest sent.
fn has_base(
    push: &PreparedPush,
    previous: Option<&SnapshotRow>,
    stored: &[ResourceFingerprint],
) -> bool {
    let same_run = previous.is_some_and(|p| {
        push.run_id
            .as_ref()
            .is_some_and(|run| *run == *p.agent_run_id)
    });
    if !same_run {
        return false;
    }
    let digests: HashMap<&str, &[u8]> = stored
        .iter()
        .map(|r| (r.source.as_str(), r.body_digest.as_slice()))
        .collect();
    push.push
        .kept
        .iter()
        .all(|k| digests.get(k.source.as_str()) == Some(&k.body_digest.as_bytes().as_slice()))
}

/// Upserts changed and new rows, updates the other columns of kept rows whose body
/// stays, leaves unchanged rows alone, deletes absent sources. Also returns the connect
/// timings this push reports for the first time in its run (see [`changed_timings`]).
fn write_resources(
    tx: &mut Tx<'_>,
    agent_id: AgentId,
    push: &PreparedPush,
    stored: &[ResourceFingerprint],
    now: DbTime,
    run_changed: bool,
) -> Result<(ResourceChanges, Vec<McpConnectTimings>), StoreError> {
    let mut stored: HashMap<&str, &ResourceFingerprint> =
        stored.iter().map(|r| (r.source.as_str(), r)).collect();
    let mut changes = ResourceChanges::default();
    let mut to_write = Vec::new();
    // A server's timings count once per connect: on a new row or a new run at once; on a
    // row rewritten within the run only if the stored timings differ (a reconnect, not a
    // tool list or status change). Unchanged and kept rows of the same run hold the same
    // timings. Nothing is read for this on a push that rewrites no server row.
    let mut timings = Vec::new();
    let mut rewritten = Vec::new();
    let resources = push.push.snapshot.resources.iter();
    for ((resource, digest), size) in resources.zip(&push.push.digests).zip(&push.sizes) {
        let candidate = ResourceCandidate {
            resource,
            body_digest: digest.as_bytes(),
            size_bytes: *size,
        };
        let reported = server_timings(resource);
        match stored.remove(resource.source.as_str()) {
            None => {
                changes.inserted += 1;
                timings.extend(reported);
            }
            Some(old) if candidate.matches(old) => {
                changes.unchanged += 1;
                timings.extend(reported.filter(|_| run_changed));
                continue;
            }
            Some(_) => {
                changes.updated += 1;
                match reported {
                    Some(t) if run_changed => timings.push(t),
                    Some(t) => rewritten.push((resource.source.as_str(), t)),
                    None => {}
                }
            }
        }
        to_write.push(candidate.into_row(agent_id, now));
    }
    timings.extend(changed_timings(tx, agent_id, &rewritten)?);
    let mut kept_changed = Vec::new();
    for (kept, size) in push.push.kept.iter().zip(&push.kept_sizes) {
        // `has_base` found every kept source stored with its digest.
        let old = stored.remove(kept.source.as_str());
        if old.is_some_and(|old| kept_matches(kept, *size, old)) {
            changes.unchanged += 1;
        } else {
            changes.updated += 1;
            kept_changed.push((kept, *size));
        }
    }
    upsert_rows(tx, &to_write)?;
    // A kept row changes only when its status, warning, hashes or size do: rare enough
    // (a file turned unreadable, a retained connection's warning) for one statement each.
    for (kept, size) in kept_changed {
        use workspace_agent_context_resources::dsl as r;
        let update = diesel::update(
            r::workspace_agent_context_resources
                .filter(r::agent_id.eq(agent_id))
                .filter(r::source.eq(&kept.source)),
        )
        .set((
            r::source_path.eq(&kept.source_path),
            r::content_hash.eq(&kept.content_hash),
            r::size_bytes.eq(size),
            r::status.eq(DbStatus(kept.status)),
            r::error.eq(&kept.error),
            r::updated_at.eq(now),
        ));
        on_backend!(tx, |c| update.execute(c))?;
    }
    let absent: Vec<&str> = stored.into_keys().collect();
    changes.deleted = absent.len();
    for chunk in absent.chunks(ROWS_PER_STATEMENT) {
        use workspace_agent_context_resources::dsl as r;
        let delete = diesel::delete(
            r::workspace_agent_context_resources
                .filter(r::agent_id.eq(agent_id))
                .filter(r::source.eq_any(chunk)),
        );
        on_backend!(tx, |c| delete.execute(c))?;
    }
    Ok((changes, timings))
}

/// The connect timings an MCP server row reports, if any.
fn server_timings(resource: &Resource) -> Option<McpConnectTimings> {
    match &resource.body {
        ResourceBody::McpServer(body) => body.timings,
        _ => None,
    }
}

/// Of `rewritten` (server rows of this run about to be overwritten, with their new
/// timings), the timings that differ from the stored row's. Reads the old bodies of
/// those rows only, before they are overwritten; rare (a reconnect, a tool list change).
fn changed_timings(
    tx: &mut Tx<'_>,
    agent_id: AgentId,
    rewritten: &[(&str, McpConnectTimings)],
) -> Result<Vec<McpConnectTimings>, StoreError> {
    if rewritten.is_empty() {
        return Ok(Vec::new());
    }
    let mut before: HashMap<String, Option<McpConnectTimings>> = HashMap::new();
    let sources: Vec<&str> = rewritten.iter().map(|(source, _)| *source).collect();
    for chunk in sources.chunks(ROWS_PER_STATEMENT) {
        use workspace_agent_context_resources::dsl as r;
        let query = r::workspace_agent_context_resources
            .filter(r::agent_id.eq(agent_id))
            .filter(r::source.eq_any(chunk))
            .select((r::source, r::body));
        let rows: Vec<(String, JsonText)> = on_backend!(tx, |c| query.load(c))?;
        // A body that no longer parses as a server's counts as other timings.
        before.extend(rows.into_iter().map(|(source, body)| {
            let old = serde_json::from_str::<McpServerBody>(&body.0).ok();
            (source, old.and_then(|b| b.timings))
        }));
    }
    Ok(rewritten
        .iter()
        .filter(|(source, new)| before.get(*source) != Some(&Some(*new)))
        .map(|(_, new)| *new)
        .collect())
}

/// Inserts or overwrites `rows`. PostgreSQL: [`UnnestUpsert`], one prepared statement
/// instead of a statement of 12 parameters a row per [`ROWS_PER_STATEMENT`] rows.
/// SQLite, in process, takes multi-row `VALUES` statements.
fn upsert_rows(tx: &mut Tx<'_>, rows: &[ResourceRow]) -> Result<(), StoreError> {
    if rows.is_empty() {
        return Ok(());
    }
    match tx {
        #[cfg(feature = "postgres")]
        Tx::Postgres(conn) => {
            UnnestUpsert::new(rows).execute(*conn)?;
        }
        #[cfg(feature = "sqlite")]
        Tx::Sqlite(conn) => {
            for chunk in rows.chunks(ROWS_PER_STATEMENT) {
                use workspace_agent_context_resources::dsl as r;
                diesel::insert_into(r::workspace_agent_context_resources)
                    .values(chunk)
                    .on_conflict((r::agent_id, r::source))
                    .do_update()
                    .set((
                        r::source_path.eq(excluded(r::source_path)),
                        r::body_kind.eq(excluded(r::body_kind)),
                        r::body.eq(excluded(r::body)),
                        r::body_digest.eq(excluded(r::body_digest)),
                        r::content_hash.eq(excluded(r::content_hash)),
                        r::size_bytes.eq(excluded(r::size_bytes)),
                        r::status.eq(excluded(r::status)),
                        r::error.eq(excluded(r::error)),
                        r::updated_at.eq(excluded(r::updated_at)),
                    ))
                    .execute(*conn)?;
            }
        }
    }
    Ok(())
}

#[cfg(feature = "postgres")]
/// [`upsert_rows`] on PostgreSQL: one statement of fixed text whatever the row count, the
/// agent and time bound once and each column as one array expanded by `unnest`. A query
/// type of its own (not `sql_query`, which diesel never caches) with a static query id,
/// so diesel prepares it once per connection and PostgreSQL neither parses nor plans it
/// again for each push.
struct UnnestUpsert<'a> {
    agent_id: AgentId,
    now: DbTime,
    sources: Vec<&'a str>,
    source_paths: Vec<Option<&'a str>>,
    body_kinds: Vec<&'static str>,
    bodies: Vec<&'a str>,
    body_digests: Vec<&'a [u8]>,
    content_hashes: Vec<&'a str>,
    sizes: Vec<i64>,
    statuses: Vec<&'static str>,
    errors: Vec<Option<&'a str>>,
}

#[cfg(feature = "postgres")]
impl<'a> UnnestUpsert<'a> {
    /// Every row of a push shares its agent and time; `rows` is not empty.
    fn new(rows: &'a [ResourceRow]) -> Self {
        Self {
            agent_id: rows[0].agent_id,
            now: rows[0].updated_at,
            sources: rows.iter().map(|r| r.source.as_str()).collect(),
            source_paths: rows.iter().map(|r| r.source_path.as_deref()).collect(),
            body_kinds: rows.iter().map(|r| r.body_kind.0.as_str()).collect(),
            bodies: rows.iter().map(|r| r.body.0.as_str()).collect(),
            body_digests: rows.iter().map(|r| r.body_digest.as_slice()).collect(),
            content_hashes: rows.iter().map(|r| r.content_hash.as_str()).collect(),
            sizes: rows.iter().map(|r| r.size_bytes).collect(),
            statuses: rows.iter().map(|r| r.status.0.as_str()).collect(),
            errors: rows.iter().map(|r| r.error.as_deref()).collect(),
        }
    }
}

#[cfg(feature = "postgres")]
impl RunQueryDsl<PgConnection> for UnnestUpsert<'_> {}

#[cfg(feature = "postgres")]
impl diesel::query_builder::QueryId for UnnestUpsert<'_> {
    type QueryId = UnnestUpsert<'static>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

#[cfg(feature = "postgres")]
impl diesel::query_builder::QueryFragment<diesel::pg::Pg> for UnnestUpsert<'_> {
    fn walk_ast<'b>(
        &'b self,
        mut out: diesel::query_builder::AstPass<'_, 'b, diesel::pg::Pg>,
    ) -> QueryResult<()> {
        use diesel::sql_types::{Array, BigInt, Binary, Nullable, Text};

        use crate::sql_types::{TimestampSql, UuidSql};
        out.push_sql(
            "INSERT INTO workspace_agent_context_resources (agent_id, source, source_path, \
             body_kind, body, body_digest, content_hash, size_bytes, status, error, created_at, \
             updated_at) SELECT ",
        );
        out.push_bind_param::<UuidSql, _>(&self.agent_id)?;
        out.push_sql(
            ", r.source, r.source_path, r.body_kind::context_body_kind, r.body::jsonb, \
             r.body_digest, r.content_hash, r.size_bytes, r.status::context_resource_status, \
             r.error, ",
        );
        out.push_bind_param::<TimestampSql, _>(&self.now)?;
        out.push_sql(", ");
        out.push_bind_param::<TimestampSql, _>(&self.now)?;
        out.push_sql(" FROM unnest(");
        out.push_bind_param::<Array<Text>, _>(&self.sources)?;
        out.push_sql("::text[], ");
        out.push_bind_param::<Array<Nullable<Text>>, _>(&self.source_paths)?;
        out.push_sql("::text[], ");
        out.push_bind_param::<Array<Text>, _>(&self.body_kinds)?;
        out.push_sql("::text[], ");
        out.push_bind_param::<Array<Text>, _>(&self.bodies)?;
        out.push_sql("::text[], ");
        out.push_bind_param::<Array<Binary>, _>(&self.body_digests)?;
        out.push_sql("::bytea[], ");
        out.push_bind_param::<Array<Text>, _>(&self.content_hashes)?;
        out.push_sql("::text[], ");
        out.push_bind_param::<Array<BigInt>, _>(&self.sizes)?;
        out.push_sql("::int8[], ");
        out.push_bind_param::<Array<Text>, _>(&self.statuses)?;
        out.push_sql("::text[], ");
        out.push_bind_param::<Array<Nullable<Text>>, _>(&self.errors)?;
        out.push_sql(
            "::text[]) AS r(source, source_path, body_kind, body, body_digest, content_hash, \
             size_bytes, status, error) \
             ON CONFLICT (agent_id, source) DO UPDATE SET source_path = excluded.source_path, \
             body_kind = excluded.body_kind, body = excluded.body, \
             body_digest = excluded.body_digest, content_hash = excluded.content_hash, \
             size_bytes = excluded.size_bytes, status = excluded.status, \
             error = excluded.error, updated_at = excluded.updated_at",
        );
        Ok(())
    }
}

/// True when a kept resource's columns other than its body equal the stored row's.
fn kept_matches(kept: &KeptResource, size_bytes: i64, stored: &ResourceFingerprint) -> bool {
    kept.source_path == stored.source_path
        && kept.content_hash == stored.content_hash
        && size_bytes == stored.size_bytes
        && kept.status == stored.status.0
        && kept.error == stored.error
}

/// A pushed resource with its server-computed body digest.
struct ResourceCandidate<'a> {
    resource: &'a Resource,
    body_digest: &'a [u8],
    size_bytes: i64,
}

impl ResourceCandidate<'_> {
    /// True when nothing a reader sees differs from the stored row.
    fn matches(&self, stored: &ResourceFingerprint) -> bool {
        let r = self.resource;
        r.source_path == stored.source_path
            && r.body.kind() == stored.body_kind.0
            && self.body_digest == stored.body_digest.as_slice()
            && r.content_hash == stored.content_hash
            && self.size_bytes == stored.size_bytes
            && r.status == stored.status.0
            && r.error == stored.error
    }

    fn into_row(self, agent_id: AgentId, now: DbTime) -> ResourceRow {
        let r = self.resource;
        ResourceRow {
            agent_id,
            source: r.source.clone(),
            source_path: r.source_path.clone(),
            body_kind: DbBodyKind(r.body.kind()),
            body: body_json(&r.body),
            body_digest: self.body_digest.to_vec(),
            content_hash: r.content_hash.clone(),
            size_bytes: self.size_bytes,
            status: DbStatus(r.status),
            error: r.error.clone(),
            created_at: now,
            updated_at: now,
        }
    }
}

/// Marks chats pinned to another hash dirty (keeping an earlier `dirty_since`) and
/// clears chats whose pin equals the new hash again. Returns how many became dirty.
fn mark_chats_dirty(
    tx: &mut Tx<'_>,
    agent_id: AgentId,
    aggregate_hash: &str,
    now: DbTime,
) -> Result<usize, StoreError> {
    let mark = diesel::update(
        chats::table
            .filter(chats::agent_id.eq(agent_id))
            .filter(chats::pinned_aggregate_hash.ne(aggregate_hash))
            .filter(chats::dirty_since.is_null()),
    )
    .set((chats::dirty_since.eq(Some(now)), chats::updated_at.eq(now)));
    let marked = on_backend!(tx, |c| mark.execute(c))?;
    let clear = diesel::update(
        chats::table
            .filter(chats::agent_id.eq(agent_id))
            .filter(chats::pinned_aggregate_hash.eq(aggregate_hash))
            .filter(chats::dirty_since.is_not_null()),
    )
    .set((
        chats::dirty_since.eq(None::<DbTime>),
        chats::updated_at.eq(now),
    ));
    on_backend!(tx, |c| clear.execute(c))?;
    Ok(marked)
}
