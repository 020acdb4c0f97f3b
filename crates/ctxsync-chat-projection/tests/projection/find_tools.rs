//! find_tools over the eligible catalog: exact names first, keyword ranking (BM25F
//! alone, [`Ranking::Lexical`]), requests in other words (the fused ranking), server
//! scoping (names with colons included), the 20-match cap, 80-character descriptions,
//! activation, errors and bounds.

use crate::common;

use common::*;
use ctxsync_chat_projection::{
    ActiveTools, FindToolsError, FindToolsRequest, MAX_MATCHES, Ranking, ToolIndex, View,
    find_tools, project, rank_query,
};
use ctxsync_protocol::DiscoveryPhase::Complete;
use ctxsync_protocol::Resource;
use serde_json::json;

fn rows() -> Vec<Resource> {
    vec![
        server_with(
            "fs",
            vec![
                tool(
                    "read_file",
                    "Read a file from the workspace disk",
                    &["path"],
                ),
                tool(
                    "write_file",
                    "Write content to a file",
                    &["path", "content"],
                ),
                tool("list_dir", "List files in a directory", &["path"]),
            ],
            None,
        ),
        server_with(
            "git",
            vec![
                tool("log", "Show the commit history", &["limit"]),
                tool("status", "Show the working tree status", &[]),
            ],
            None,
        ),
        server_with(
            "db:prod",
            vec![tool("query", "Run a SQL statement", &["sql"])],
            None,
        ),
        server_with(
            "db",
            vec![tool("query", "Run a SQL statement on dev", &["sql"])],
            None,
        ),
        server_with("Ops", vec![tool("deploy", "Deploy a release", &[])], None),
        server_with(
            "ops",
            vec![tool("restart", "Restart the service", &[])],
            None,
        ),
    ]
}

fn view() -> View {
    project(&agent("run-1", Some(snapshot("run-1", Complete, rows()))))
}

fn request(queries: &[&str], names: &[&str]) -> FindToolsRequest {
    let list = |items: &[&str]| {
        (!items.is_empty()).then(|| items.iter().map(|s| (*s).to_owned()).collect())
    };
    FindToolsRequest {
        queries: list(queries),
        names: list(names),
    }
}

/// Runs one call on a fresh turn and checks the match names, in order.
fn check(queries: &[&str], names: &[&str], expect: &[&str]) {
    let response = find_tools(
        view().tools(),
        &request(queries, names),
        &mut ActiveTools::new(),
    )
    .expect("a valid request");
    let actual: Vec<&str> = response.matches.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(actual, expect, "queries {queries:?}, names {names:?}");
    assert_eq!(response.total, expect.len());
    assert_eq!(
        response.activated, expect,
        "a fresh turn activates every match"
    );
}

/// The order BM25F alone gives `queries` (find_tools fuses it with the embedding's).
fn check_lexical(queries: &[&str], expect: &[&str]) {
    let view = view();
    let index = ToolIndex::build(view.tools());
    let actual = rank_query(&index, view.tools(), queries, Ranking::Lexical);
    assert_eq!(actual, expect, "queries {queries:?}");
    // find_tools finds at least as much, in its fused order.
    let response = find_tools(
        view.tools(),
        &request(queries, &[]),
        &mut ActiveTools::new(),
    );
    if let Ok(response) = response {
        let found: Vec<&str> = response.matches.iter().map(|m| m.name.as_str()).collect();
        for name in expect {
            assert!(
                found.contains(name),
                "{queries:?}: find_tools lost {name}: {found:?}"
            );
        }
    }
}

#[test]
fn keyword_ranking() {
    let check = |queries: &[&str], _: &[&str], expect: &[&str]| check_lexical(queries, expect);
    // Both terms in the name beat one term in the name beats a description prefix.
    check(
        &["read file"],
        &[],
        &["fs__read_file", "fs__write_file", "fs__list_dir"],
    );
    // Parameter names count; ties are broken by name.
    // The shorter description says more per word (BM25's length normalisation).
    check(&["sql"], &[], &["db_prod__query", "db__query"]);
    check(&["limit"], &[], &["git__log"]);
    check(&["commit history"], &[], &["git__log"]);
    // A server name finds its tools.
    check(&["git"], &[], &["git__log", "git__status"]);
    check(&["kubernetes"], &[], &[]);
    // The best of several queries counts.
    check(
        &["deploy", "restart"],
        &[],
        &["Ops__deploy", "ops__restart"],
    );
}

#[test]
fn exact_names_come_first_in_request_order() {
    let response = find_tools(
        view().tools(),
        &request(
            &["file"],
            &["git__status", "no_such_tool", "fs__list_dir", "git__status"],
        ),
        &mut ActiveTools::new(),
    )
    .expect("a valid request");
    let found: Vec<&str> = response.matches.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(found[..2], ["git__status", "fs__list_dir"], "{found:?}");
    for name in ["fs__write_file", "fs__read_file"] {
        assert!(
            found[2..].contains(&name),
            "the query finds {name}: {found:?}"
        );
    }
    assert_eq!(
        response.activated, found,
        "a fresh turn activates every match"
    );
    // A name slightly wrong resolves when it means one tool: the original server and
    // tool names (`db:prod__query` is the model-facing `db_prod__query`, listed once),
    // another case. `query` alone is on two servers and is never guessed.
    check(
        &[],
        &[
            "db_prod__query",
            "db:prod__query",
            "GIT__STATUS",
            "query",
            "db.query",
        ],
        &["db_prod__query", "git__status", "db__query"],
    );
}

#[test]
fn server_scoping() {
    let check = |queries: &[&str], _: &[&str], expect: &[&str]| check_lexical(queries, expect);
    check(&["git: show"], &[], &["git__log", "git__status"]);
    check(&["git: file"], &[], &[]);
    check(&[" git :  log "], &[], &["git__log"]);
    // `server:` alone lists that server's tools.
    check(
        &["fs:"],
        &[],
        &["fs__list_dir", "fs__read_file", "fs__write_file"],
    );
    // Server names may contain a colon: the longest server name wins.
    check(&["db:prod: query"], &[], &["db_prod__query"]);
    check(&["db: query"], &[], &["db__query"]);
    // Case-insensitive only when no exact name matches.
    check(&["GIT: status"], &[], &["git__status"]);
    check(&["ops:"], &[], &["ops__restart"]);
    check(&["Ops:"], &[], &["Ops__deploy"]);
    // An unknown scope is just more terms.
    check(&["nope: read"], &[], &["fs__read_file"]);
}

#[test]
fn at_most_twenty_matches_and_activation_per_turn() {
    let tools = (0..30)
        .map(|i| tool(&format!("t{i:02}"), "common thing", &[]))
        .collect();
    let view = project(&agent(
        "run-1",
        Some(snapshot(
            "run-1",
            Complete,
            vec![server_with("bulk", tools, None)],
        )),
    ));
    let mut active = ActiveTools::new();
    let first = find_tools(view.tools(), &request(&["common"], &[]), &mut active).expect("ok");
    let names: Vec<String> = first.matches.iter().map(|m| m.name.clone()).collect();
    assert_eq!(names.len(), MAX_MATCHES);
    assert_eq!(first.total, 30);
    assert_eq!(first.activated, names);
    // BM25F alone ties them all: by name.
    let index = ToolIndex::build(view.tools());
    let lexical = rank_query(&index, view.tools(), &["common"], Ranking::Lexical);
    let expect: Vec<String> = (0..MAX_MATCHES).map(|i| format!("bulk__t{i:02}")).collect();
    assert_eq!(lexical, expect);
    let never_found = (0..30)
        .map(|i| format!("bulk__t{i:02}"))
        .find(|n| !names.contains(n))
        .expect("ten were left out");

    // Already active tools are found again but not activated again.
    let again = find_tools(
        view.tools(),
        &request(&["common"], &[&never_found]),
        &mut active,
    )
    .expect("ok");
    assert_eq!(again.matches[0].name, never_found);
    assert_eq!(again.matches.len(), MAX_MATCHES);
    assert_eq!(again.total, 30);
    assert_eq!(again.activated, std::slice::from_ref(&never_found));
    let active_names: Vec<&str> = active
        .tools(view.tools())
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(active_names.len(), 21);
    assert!(active.contains(&never_found));
}

#[test]
fn descriptions_are_one_line_and_at_most_80_characters() {
    let long = "é".repeat(100);
    let view = project(&agent(
        "run-1",
        Some(snapshot(
            "run-1",
            Complete,
            vec![server_with(
                "s",
                vec![
                    tool("long", &long, &[]),
                    tool("lines", "Line one.\n\n  Line two.", &[]),
                    tool("exact", &"x".repeat(80), &[]),
                ],
                None,
            )],
        )),
    ));
    let response = find_tools(
        view.tools(),
        &request(&[], &["s__long", "s__lines", "s__exact"]),
        &mut ActiveTools::new(),
    )
    .expect("ok");
    let descriptions: Vec<&str> = response
        .matches
        .iter()
        .map(|m| m.description.as_str())
        .collect();
    assert_eq!(
        descriptions,
        [
            format!("{}…", "é".repeat(79)).as_str(),
            "Line one. Line two.",
            "x".repeat(80).as_str()
        ]
    );
    assert_eq!(descriptions[0].chars().count(), 80);
}

/// Found by the libFuzzer target: a query whose first 512 bytes were whitespace was
/// refused as empty although terms followed.
#[test]
fn a_query_padded_past_the_read_limit_is_still_read() {
    let padded = format!("{}: sql", "\t".repeat(600));
    check_lexical(&[&padded], &["db_prod__query", "db__query"]);
    check_lexical(
        &[&format!("{}git", " ".repeat(513))],
        &["git__log", "git__status"],
    );
}

#[test]
fn requests_without_anything_to_find_are_refused() {
    let tools = view();
    let check_error = |request: FindToolsRequest, expect: FindToolsError, message: &str| {
        let error =
            find_tools(tools.tools(), &request, &mut ActiveTools::new()).expect_err("refused");
        assert_eq!(error, expect);
        assert_eq!(error.to_string(), message);
    };
    let nothing = "find_tools needs at least one of `names` or `queries`, with a non-empty entry";
    check_error(
        FindToolsRequest::default(),
        FindToolsError::NothingToFind,
        nothing,
    );
    check_error(
        FindToolsRequest {
            queries: Some(vec![]),
            names: Some(vec![]),
        },
        FindToolsError::NothingToFind,
        nothing,
    );
    check_error(
        request(&["  "], &[""]),
        FindToolsError::NothingToFind,
        nothing,
    );
    let many: Vec<String> = (0..17).map(|i| format!("q{i}")).collect();
    check_error(
        FindToolsRequest {
            queries: Some(many),
            names: None,
        },
        FindToolsError::TooMany {
            field: "queries",
            max: 16,
            got: 17,
        },
        "find_tools accepts at most 16 queries, got 17",
    );
    let many: Vec<String> = (0..65).map(|i| format!("n{i}")).collect();
    check_error(
        FindToolsRequest {
            queries: None,
            names: Some(many),
        },
        FindToolsError::TooMany {
            field: "names",
            max: 64,
            got: 65,
        },
        "find_tools accepts at most 64 names, got 65",
    );
}

#[test]
fn stale_tools_can_never_be_found_or_activated() {
    let fresh = view();
    let stale = project(&agent("run-2", Some(snapshot("run-1", Complete, rows()))));
    let mut active = ActiveTools::new();
    find_tools(fresh.tools(), &request(&[], &["git__log"]), &mut active).expect("ok");
    assert_eq!(active.tools(fresh.tools()).len(), 1);

    let response = find_tools(
        stale.tools(),
        &request(
            &["git: log", "read file", "fs:"],
            &["git__log", "fs__read_file"],
        ),
        &mut active,
    )
    .expect("a valid request");
    assert!(response.matches.is_empty() && response.activated.is_empty());
    assert_eq!(response.total, 0);
    // The names are reported as matching nothing, with no candidates to guess from.
    let unresolved: Vec<(&str, usize)> = response
        .unresolved
        .iter()
        .map(|u| (u.name.as_str(), u.candidates.len()))
        .collect();
    assert_eq!(unresolved, [("git__log", 0), ("fs__read_file", 0)]);
    // A tool activated before the view turned stale is not offered either.
    assert!(active.tools(stale.tools()).is_empty());
}

#[test]
fn hostile_input_is_bounded() {
    // Whatever the ranking, hostile requests get a plain answer (`check` runs find_tools
    // too); the bounds themselves are BM25F's.
    let check = |queries: &[&str], names: &[&str], expect: &[&str]| {
        if names.is_empty() {
            check_lexical(queries, expect);
        }
        let response = find_tools(
            view().tools(),
            &request(queries, names),
            &mut ActiveTools::new(),
        )
        .expect("a plain answer");
        assert!(response.matches.len() <= MAX_MATCHES);
    };
    // Only the first 512 bytes of a query are read: a match beyond them is not found.
    let padded = format!("{} status", "zz ".repeat(200_000));
    check(&[&padded], &[], &[]);
    // Many terms, colons and long names still give a plain answer.
    let noisy = (0..10_000).map(|i| format!("x{i}:")).collect::<String>();
    let long_name = "n".repeat(1 << 20);
    let queries: Vec<&str> = std::iter::repeat_n(noisy.as_str(), 16).collect();
    let names: Vec<&str> = std::iter::repeat_n(long_name.as_str(), 64).collect();
    check(&queries, &names, &[]);
    // Terms after the 8th of a query, and after the 32nd of a request, are ignored.
    let junk = |from: usize| {
        (from..from + 8)
            .map(|i| format!("w{i} "))
            .collect::<String>()
    };
    check(&[&format!("{} log", junk(0))], &[], &[]);
    check(&["w0 w1 w2 w3 w4 w5 w6 log"], &[], &["git__log"]);
    let full: Vec<String> = (0..4).map(|q| junk(q * 8)).collect();
    let mut queries: Vec<&str> = full.iter().map(String::as_str).collect();
    queries.push("commit history");
    check(&queries, &[], &[]);
    queries[0] = "w8";
    check(&queries, &[], &["git__log"]);
}

#[test]
fn wire_shapes() {
    // A scope of one tool: one match, whatever ranks it.
    let request: FindToolsRequest =
        serde_json::from_value(json!({"queries": ["db:prod: sql"]})).expect("parses");
    assert_eq!(request.names, None);
    let response = find_tools(view().tools(), &request, &mut ActiveTools::new()).expect("ok");
    assert_eq!(
        serde_json::to_value(&response).expect("serializes"),
        json!({
            "matches": [{"name": "db_prod__query", "description": "Run a SQL statement"}],
            "activated": ["db_prod__query"],
            "total": 1
        })
    );
}

/// A request sharing no word with the tool it means still finds it: the embedding model
/// decides when no word of the query occurs in the catalog.
#[test]
fn requests_in_other_words_find_their_tools() {
    let view = view();
    let index = ToolIndex::build(view.tools());
    assert!(index.is_semantic(), "the model is compiled in by default");
    for (query, meant) in [
        ("reboot the server", "ops__restart"),
        ("ship the new version to production", "Ops__deploy"),
        ("previous changes made to the code", "git__log"),
    ] {
        assert!(
            rank_query(&index, view.tools(), &[query], Ranking::Lexical).is_empty(),
            "{query:?} shares no word with the catalog"
        );
        let fused = rank_query(&index, view.tools(), &[query], Ranking::Fused);
        let position = fused.iter().position(|n| *n == meant);
        assert!(
            position.is_some_and(|p| p < 3),
            "{query:?} finds {meant} among the first three: {fused:?}"
        );
    }
}

/// The ranking is a function of the catalog and the query alone: two indexes of one
/// catalog (two replicas) order every query alike, and an index of another catalog is
/// never used for this one.
#[test]
fn every_index_of_a_catalog_ranks_alike() {
    let view = view();
    let (a, b) = (
        ToolIndex::build(view.tools()),
        ToolIndex::build(view.tools()),
    );
    for query in [
        "read file",
        "reboot the server",
        "git: history",
        "sql",
        "zzz",
    ] {
        for ranking in [Ranking::Lexical, Ranking::Semantic, Ranking::Fused] {
            assert_eq!(
                rank_query(&a, view.tools(), &[query], ranking),
                rank_query(&b, view.tools(), &[query], ranking),
                "{query:?} {ranking:?}"
            );
        }
    }
    let other = project(&agent(
        "run-1",
        Some(snapshot(
            "run-1",
            Complete,
            vec![server_with("x", vec![tool("only", "Only tool", &[])], None)],
        )),
    ));
    let wrong = ToolIndex::build(other.tools());
    assert_eq!(
        rank_query(&wrong, view.tools(), &["read file"], Ranking::Lexical),
        rank_query(&a, view.tools(), &["read file"], Ranking::Lexical),
        "a mismatched index is replaced, not trusted"
    );
}

/// The cache keeps one index per distinct catalog text, evicts the least recently used
/// past its byte bound, and builds an index larger than the bound without keeping it.
#[test]
fn the_index_cache_is_bounded_and_shared() {
    use ctxsync_chat_projection::ToolIndexCache;
    let catalog = |name: &str| {
        project(&agent(
            "run-1",
            Some(snapshot(
                "run-1",
                Complete,
                vec![server_with(name, vec![tool("t", "A tool", &[])], None)],
            )),
        ))
    };
    let (a, b, c) = (catalog("a"), catalog("b"), catalog("c"));
    let size = ToolIndex::build(a.tools()).heap_bytes();
    let cache = ToolIndexCache::new(size * 2 + size / 2);
    let first = cache.index(a.tools());
    assert!(
        std::sync::Arc::ptr_eq(&first, &cache.index(a.tools())),
        "reused"
    );
    // The same text from another agent shares the index.
    assert!(std::sync::Arc::ptr_eq(
        &first,
        &cache.index(catalog("a").tools())
    ));
    cache.index(b.tools());
    cache.index(a.tools()); // a is now the most recent
    cache.index(c.tools()); // evicts b
    let (entries, bytes, builds) = cache.stats();
    assert_eq!((entries, builds), (2, 3));
    assert!(bytes <= size * 2 + size / 2);
    assert!(
        std::sync::Arc::ptr_eq(&first, &cache.index(a.tools())),
        "a kept"
    );
    cache.index(b.tools());
    assert_eq!(cache.stats().2, 4, "b was evicted and built again");

    let tiny = ToolIndexCache::new(1);
    tiny.index(a.tools());
    assert_eq!(tiny.stats(), (0, 0, 1), "too large to keep, still served");
}

/// Server instructions are read once per distinct text and counted for every tool that
/// shares them: each tool of each server with those instructions matches a word of them,
/// and the initials of their words, alike (BM25F ties, so by name).
#[test]
fn shared_server_instructions_count_for_every_tool() {
    let with_instructions = |name: &str, tools: Vec<ctxsync_protocol::McpTool>| {
        let mut row = server_with(name, tools, None);
        if let ctxsync_protocol::ResourceBody::McpServer(body) = &mut row.body {
            body.instructions = "Keeps the zebra ledger for the team.".into();
        }
        row
    };
    let view = project(&agent(
        "run-1",
        Some(snapshot(
            "run-1",
            Complete,
            vec![
                with_instructions(
                    "a",
                    vec![
                        tool("one", "First", &[]),
                        tool("two", "Second", &[]),
                        tool("three", "Third", &[]),
                    ],
                ),
                with_instructions("b", vec![tool("four", "Fourth", &[])]),
                server_with("c", vec![tool("five", "Fifth", &[])], None),
            ],
        )),
    ));
    let index = ToolIndex::build(view.tools());
    let all = ["a__one", "a__three", "a__two", "b__four"];
    for query in ["zebra", "zl"] {
        assert_eq!(
            rank_query(&index, view.tools(), &[query], Ranking::Lexical),
            all,
            "{query:?}"
        );
    }
}
