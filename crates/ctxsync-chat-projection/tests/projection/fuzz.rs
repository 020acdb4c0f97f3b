//! Fuzz-style property tests of find_tools (proptest; the libFuzzer twin is
//! `fuzz/fuzz_targets/find_tools.rs`): random catalogs with hostile names and descriptions, and
//! random requests. Nothing panics; a result has at most 20 matches, one-line
//! descriptions of at most 80 characters, only catalog names, and activates only what it
//! returns. `PROPTEST_CASES` raises the budget (`cargo xtask fuzz`).

use crate::common;

use std::collections::BTreeSet;

use common::*;
use ctxsync_chat_projection::{
    ActiveTools, FindToolsError, FindToolsRequest, MAX_MATCHES, View, find_tools, project,
};
use ctxsync_protocol::DiscoveryPhase::Complete;
use proptest::prelude::*;

const MAX_DESCRIPTION_CHARS: usize = 80;

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-c]{1,4}",
        "[a-c:_ ]{1,6}",
        "\\PC{0,6}",
        Just("<script>".to_owned()),
        "[a-c]{60,70}",
    ]
}

fn description() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::collection::vec(
            prop_oneof!["[a-c]{1,5}", Just("\n\t\r ".to_owned()), "\\PC{1,3}"],
            0..40
        )
        .prop_map(|w| w.join(" ")),
        Just("abc ".repeat(1200)),
        Just("é".repeat(300)),
    ]
}

fn view() -> impl Strategy<Value = View> {
    let tools = prop::collection::vec(
        (
            word(),
            description(),
            prop::collection::vec("[a-c]{1,4}", 0..3),
        ),
        0..12,
    );
    prop::collection::vec((word(), tools), 0..5).prop_map(|servers| {
        let rows = servers
            .iter()
            .map(|(name, tools)| {
                let tools = tools
                    .iter()
                    .map(|(t, d, params)| {
                        let params: Vec<&str> = params.iter().map(String::as_str).collect();
                        tool(t, d, &params)
                    })
                    .collect();
                server_with(name, tools, None)
            })
            .collect();
        project(&agent("run-1", Some(snapshot("run-1", Complete, rows))))
    })
}

fn list() -> impl Strategy<Value = Option<Vec<String>>> {
    prop::option::of(prop_oneof![
        8 => prop::collection::vec(
            prop_oneof![
                word(),
                (word(), word()).prop_map(|(s, q)| format!("{s}: {q}")),
                "[a-c ]{0,700}",
                prop::collection::vec("[a-c]{1,3}", 0..20).prop_map(|w| w.join(" ")),
            ],
            0..6,
        ),
        1 => prop::collection::vec("[a-c]{1,3}", 15..70),
    ])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(96), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn fuzz_find_tools(view in view(), queries in list(), names in list(), calls in 1usize..3) {
        let catalog = view.tools();
        let known: BTreeSet<&str> = catalog.iter().map(|t| t.name.as_str()).collect();
        let request = FindToolsRequest { queries: queries.clone(), names: names.clone() };
        let mut active = ActiveTools::new();
        for _ in 0..calls {
            let before: BTreeSet<String> = active.names().map(str::to_owned).collect();
            match find_tools(catalog, &request, &mut active) {
                Ok(response) => {
                    prop_assert!(response.matches.len() <= MAX_MATCHES, "{} matches", response.matches.len());
                    prop_assert!(response.total >= response.matches.len());
                    let mut seen = BTreeSet::new();
                    for m in &response.matches {
                        prop_assert!(known.contains(m.name.as_str()), "unknown match {:?}", m.name);
                        prop_assert!(seen.insert(m.name.clone()), "duplicate match {:?}", m.name);
                        prop_assert!(m.description.chars().count() <= MAX_DESCRIPTION_CHARS, "{:?}", m.description);
                        prop_assert!(!m.description.contains(['\n', '\r']), "{:?}", m.description);
                        prop_assert!(active.contains(&m.name));
                    }
                    for name in &response.activated {
                        prop_assert!(seen.contains(name), "activated {name:?} without returning it");
                        prop_assert!(!before.contains(name), "re-activated {name:?}");
                    }
                    let after: BTreeSet<String> = active.names().map(str::to_owned).collect();
                    prop_assert_eq!(after, before.union(&seen).cloned().collect::<BTreeSet<_>>());
                }
                Err(FindToolsError::TooMany { max, got, .. }) => prop_assert!(got > max),
                Err(FindToolsError::NothingToFind) => {
                    let blank = |l: &Option<Vec<String>>| l.as_ref().is_none_or(|l| l.iter().all(|s| s.trim().is_empty()));
                    prop_assert!(blank(&queries) && blank(&names), "NothingToFind for {request:?}");
                }
            }
        }
    }
}
