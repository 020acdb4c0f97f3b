//! Model-facing tool names through the projection: sanitized, at most 64 characters,
//! never two tools with one name, independent of input order, mapped back for
//! invocation; a property test over random (and adversarial) names.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use ctxsync_chat_projection::{MAX_TOOL_NAME_LEN, View, project};
use ctxsync_protocol::DiscoveryPhase::Complete;
use proptest::prelude::*;

/// An oracle for `^[A-Za-z0-9_-]{1,64}$`, written apart from the crate's own check.
fn is_valid(name: &str) -> bool {
    !name.is_empty()
        && name.chars().count() <= 64
        && name
            .chars()
            .all(|c| matches!(c, 'A'..='Z' | 'a'..='z' | '0'..='9' | '_' | '-'))
}

fn sanitized(part: &str) -> String {
    part.chars()
        .map(|c| if is_valid(&c.to_string()) { c } else { '_' })
        .collect()
}

/// The view of one fresh, complete snapshot offering `pairs` (server, tool).
fn view_of(pairs: &[(String, String)]) -> View {
    let mut by_server: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut order: Vec<&str> = Vec::new();
    for (server, tool) in pairs {
        if !by_server.contains_key(server.as_str()) {
            order.push(server);
        }
        by_server.entry(server).or_default().push(tool);
    }
    let rows = order
        .into_iter()
        .map(|s| server(s, &by_server[s]))
        .collect();
    project(&agent("run-1", Some(snapshot("run-1", Complete, rows))))
}

/// `(name, server, tool)` of every tool in catalog order.
fn named(view: &View) -> Vec<(String, String, String)> {
    view.tools()
        .iter()
        .map(|t| (t.name.clone(), t.server.clone(), t.tool.clone()))
        .collect()
}

fn check_invariants(pairs: &[(String, String)]) -> Result<(), TestCaseError> {
    let view = view_of(pairs);
    let distinct: BTreeSet<(String, String)> = pairs.iter().cloned().collect();
    let tools = named(&view);
    prop_assert_eq!(tools.len(), distinct.len(), "one tool per distinct pair");

    let mut names = BTreeSet::new();
    for (name, server, tool) in &tools {
        prop_assert!(is_valid(name), "invalid name {:?}", name);
        prop_assert!(names.insert(name.clone()), "duplicate name {:?}", name);
        prop_assert_eq!(
            view.tools().resolve(name),
            Some((server.as_str(), tool.as_str()))
        );
        // A valid natural name nobody else sanitizes to is kept as it is.
        let natural = format!("{server}__{tool}");
        let contested = distinct.iter().any(|(s, t)| {
            (s, t) != (server, tool) && format!("{}__{}", sanitized(s), sanitized(t)) == natural
        });
        if is_valid(&natural) && !contested {
            prop_assert_eq!(name, &natural);
        }
    }
    let offered: BTreeSet<(String, String)> = tools.into_iter().map(|(_, s, t)| (s, t)).collect();
    prop_assert_eq!(offered, distinct);

    // Input order never changes a name.
    let mut reversed = pairs.to_vec();
    reversed.reverse();
    prop_assert_eq!(named(&view_of(&reversed)), named(&view));
    Ok(())
}

/// Names that collide often: tiny alphabets with characters that sanitize alike, the
/// separator inside names, lengths around the limit, and arbitrary text.
fn part() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ab._ ]{1,3}",
        "[a-z_]{1,4}(__[a-z]{1,2})?",
        "[a-z]{55,70}",
        "\\PC{1,8}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn names_are_always_valid_unique_and_order_independent(
        pairs in prop::collection::vec((part(), part()), 0..40)
    ) {
        check_invariants(&pairs)?;
    }
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(s, t)| ((*s).to_owned(), (*t).to_owned()))
        .collect()
}

/// Checks `server/tool => name` for each pair, in input order.
fn check(list: &[(&str, &str)], expect: &[&str]) {
    let view = view_of(&pairs(list));
    let actual: Vec<String> = list
        .iter()
        .map(|(server, tool)| {
            let t = view
                .tools()
                .iter()
                .find(|t| t.server == *server && t.tool == *tool)
                .expect("offered");
            format!("{server}/{tool} => {}", t.name)
        })
        .collect();
    assert_eq!(actual, expect);
    check_invariants(&pairs(list)).expect("invariants hold");
}

#[test]
fn sanitizing_and_the_length_limit() {
    let at_limit = "t".repeat(MAX_TOOL_NAME_LEN - "srv__".len());
    check(
        &[("my server", "read.file"), ("srv", &at_limit)],
        &[
            "my server/read.file => my_server__read_file",
            &format!("srv/{at_limit} => srv__{at_limit}"),
        ],
    );
    let view = view_of(&pairs(&[("srv", &"t".repeat(65))]));
    let name = &view.tools().iter().next().expect("offered").name;
    assert_eq!(name.len(), MAX_TOOL_NAME_LEN);
    assert!(
        name.starts_with(&format!("srv__{}_", "t".repeat(50))),
        "{name}"
    );
}

#[test]
fn collisions_get_distinct_hashed_names() {
    let view = view_of(&pairs(&[("a.b", "c"), ("a_b", "c"), ("a b", "c")]));
    let names: Vec<&str> = view.tools().iter().map(|t| t.name.as_str()).collect();
    // The natural `a_b__c` keeps its name; both look-alikes are hashed.
    assert_eq!(view.tools().resolve("a_b__c"), Some(("a_b", "c")));
    assert_eq!(names.iter().filter(|n| n.starts_with("a_b__c_")).count(), 2);
    // Two long names sharing their first 64 characters.
    let long = "x".repeat(70);
    let view = view_of(&pairs(&[
        ("s", &format!("{long}1")),
        ("s", &format!("{long}2")),
    ]));
    let names: BTreeSet<&str> = view.tools().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names.len(), 2);
}

/// The documented suffix: the first 8 hex digits of sha256 over the length-prefixed
/// (u64 big-endian) server and tool names. Pinned so names stay stable across releases.
fn documented_suffix(server: &str, tool: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for part in [server, tool] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
    hasher.finalize()[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn hashed_names_are_stable_and_yield_to_a_tool_that_already_has_them() {
    let hashed = format!("a_b__c_{}", documented_suffix("a.b", "c"));
    check(
        &[("a.b", "c"), ("a_b", "c")],
        &[format!("a.b/c => {hashed}").as_str(), "a_b/c => a_b__c"],
    );
    // An adversarial server names its tool exactly what `a.b/c` hashes to: it keeps its
    // natural name and `a.b/c` moves to another, still unique, name.
    let (server, tool) = hashed.split_once("__").expect("separator");
    let view = view_of(&pairs(&[("a.b", "c"), ("a_b", "c"), (server, tool)]));
    assert_eq!(view.tools().resolve(&hashed), Some((server, tool)));
    let moved = view
        .tools()
        .iter()
        .find(|t| t.server == "a.b")
        .expect("offered");
    assert_ne!(moved.name, hashed);
    assert!(moved.name.starts_with("a_b__c_") && is_valid(&moved.name));
    check_invariants(&pairs(&[("a.b", "c"), ("a_b", "c"), (server, tool)])).expect("invariants");
}
