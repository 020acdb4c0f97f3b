//! Chat context pinning (SPEC §7): a chat pins the instruction files and skills of the
//! first snapshot it sees; MCP servers are never pinned and always come from the live
//! view.

use ctxsync_protocol::{InstructionFileBody, Resource, ResourceBody, SkillBody};

use crate::input::{Binding, SnapshotState};
use crate::view::{View, project};

/// A chat's pinned copy of the instruction files and skills of one snapshot. It holds no
/// MCP rows by construction.
#[derive(Clone, Debug, PartialEq)]
pub struct PinnedContext {
    aggregate_hash: String,
    dirty: bool,
    resources: Vec<Resource>,
}

impl PinnedContext {
    /// A pin as the store holds it: the pinned aggregate hash, whether the chat is marked
    /// dirty (`dirty_since` is set), and the pinned rows. MCP rows are dropped: they are
    /// runtime capabilities and never pinned.
    pub fn from_stored(aggregate_hash: String, dirty: bool, resources: Vec<Resource>) -> Self {
        Self {
            aggregate_hash,
            dirty,
            resources: resources.into_iter().filter(is_pinnable).collect(),
        }
    }

    /// Pins a snapshot's instruction files and skills (whatever their status), clean.
    /// Also what "refresh" does with the live snapshot.
    pub fn pin(snapshot: &SnapshotState) -> Self {
        Self {
            aggregate_hash: snapshot.aggregate_hash.clone(),
            dirty: false,
            resources: snapshot
                .resources
                .iter()
                .filter(|r| is_pinnable(r))
                .cloned()
                .collect(),
        }
    }

    /// The aggregate hash of the snapshot this pin copied.
    pub fn aggregate_hash(&self) -> &str {
        &self.aggregate_hash
    }

    /// Whether the store has marked the chat dirty since this pin.
    pub fn is_marked_dirty(&self) -> bool {
        self.dirty
    }

    /// The pinned rows: instruction files and skills only.
    pub fn resources(&self) -> &[Resource] {
        &self.resources
    }

    /// The pinned instruction files with their bodies.
    pub fn instruction_files(&self) -> impl Iterator<Item = (&Resource, &InstructionFileBody)> {
        self.resources.iter().filter_map(|r| match &r.body {
            ResourceBody::InstructionFile(body) => Some((r, body)),
            _ => None,
        })
    }

    /// The pinned skills with their bodies.
    pub fn skills(&self) -> impl Iterator<Item = (&Resource, &SkillBody)> {
        self.resources.iter().filter_map(|r| match &r.body {
            ResourceBody::Skill(body) => Some((r, body)),
            _ => None,
        })
    }
}

fn is_pinnable(resource: &Resource) -> bool {
    matches!(
        resource.body,
        ResourceBody::InstructionFile(_) | ResourceBody::Skill(_)
    )
}

/// The context of one chat turn: instruction files and skills from the chat's pin, MCP
/// from the live view through the freshness rule.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatContext {
    pinned: Option<PinnedContext>,
    newly_pinned: bool,
    dirty: bool,
    mcp: View,
}

impl ChatContext {
    /// Combines a chat's pin with the agent's live state. A chat without a pin pins the
    /// live snapshot it first sees ([`Self::newly_pinned`] tells the caller to store it).
    /// The pin is dirty when the store marked it so or the live snapshot's aggregate hash
    /// differs. MCP servers and tools come only from [`project`] of the live state.
    pub fn new(pin: Option<PinnedContext>, live: &Binding) -> Self {
        let live_snapshot = match live {
            Binding::Agent(agent) => agent.snapshot.as_ref(),
            Binding::NoAgent | Binding::MissingAgent => None,
        };
        let (pinned, newly_pinned) = match pin {
            Some(pin) => (Some(pin), false),
            None => match live_snapshot {
                Some(snapshot) => (Some(PinnedContext::pin(snapshot)), true),
                None => (None, false),
            },
        };
        let dirty = pinned.as_ref().is_some_and(|pin| {
            pin.dirty || live_snapshot.is_some_and(|s| s.aggregate_hash != pin.aggregate_hash)
        });
        Self {
            pinned,
            newly_pinned,
            dirty,
            mcp: project(live),
        }
    }

    /// The chat's instruction files and skills; `None` before any snapshot was seen.
    pub fn pinned(&self) -> Option<&PinnedContext> {
        self.pinned.as_ref()
    }

    /// The pin made by this call, which the caller must store; `None` when the chat
    /// already had one (or there was nothing to pin).
    pub fn newly_pinned(&self) -> Option<&PinnedContext> {
        self.pinned.as_ref().filter(|_| self.newly_pinned)
    }

    /// The workspace's files changed since the pin: offer "refresh"
    /// ([`PinnedContext::pin`] of the live snapshot).
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// The live MCP view.
    pub fn mcp(&self) -> &View {
        &self.mcp
    }
}
