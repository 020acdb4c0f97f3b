//! The agent run id: one shape from publisher to panel.
//!
//! In memory a run id is a [`RunId`] (never empty) and a run id that is absent — a
//! legacy agent, or one without MCP discovery — is `None`. The empty string stands for
//! absence only at the edges: the wire (`agent_run_id` is a proto3 string), database
//! columns, and the HTTP JSON fields that have always said `""`; [`RunId::new`] and
//! [`RunId::edge`] are the one crossing each way. Its length is checked once, where a
//! request is validated ([`MAX_RUN_ID_BYTES`](crate::limits::MAX_RUN_ID_BYTES)).

use std::fmt;
use std::ops::Deref;

use serde::{Deserialize, Deserializer, Serialize};

/// The id of one agent process's run (the publisher makes a UUID v4 per process).
/// Never empty: absence is `Option::None`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct RunId(String);

impl RunId {
    /// The run id `text` names; `None` for the empty string, which means "no run id" (so
    /// this is also how an edge's text comes in).
    pub fn new(text: impl Into<String>) -> Option<Self> {
        let text = text.into();
        (!text.is_empty()).then_some(Self(text))
    }

    /// `run` as an edge carries it: its text, or `""` when absent.
    pub fn edge(run: Option<&Self>) -> &str {
        run.map_or("", Self::as_str)
    }

    /// The id's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id's text, owned.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl Deref for RunId {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for RunId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Shows the text alone, as a string would be shown, so logs and records read the same
/// as before the type existed.
impl fmt::Debug for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl PartialEq<str> for RunId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for RunId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// An empty string is refused: in memory, absence is `None`.
impl<'de> Deserialize<'de> for RunId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::new(text).ok_or_else(|| serde::de::Error::custom("a run id is never empty"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_text_is_no_run_id_and_back() {
        assert_eq!(RunId::new(""), None);
        assert_eq!(RunId::edge(None), "");
        let run = RunId::new("run-1").expect("not empty");
        assert_eq!(RunId::edge(Some(&run)), "run-1");
        assert_eq!(format!("{run:?} {run}"), "\"run-1\" run-1");
        assert_eq!(serde_json::to_string(&run).unwrap(), "\"run-1\"");
        assert!(serde_json::from_str::<RunId>("\"\"").is_err());
    }
}
