//! The layer check: every dependency between workspace crates points strictly down the
//! order in SPEC §2, the MCP fixture is a normal dependency only of the binary, and the
//! test-support and workspace-hack crates are only ever dev-dependencies.

use serde_json::Value;

/// The crates of SPEC §2, bottom to top; the index is the layer, except that a crate in
/// [`SHARES_FLOOR_BELOW`] stands on the floor of the one listed before it.
pub(crate) const LAYERS: &[&str] = &[
    "ctxsync-mcp-fixture",
    "ctxsync-mcp-model",
    "ctxsync-agent-diagnostics",
    "ctxsync-protocol",
    "ctxsync-persistence",
    "ctxsync-agent-api",
    "ctxsync-agent-publication",
    "ctxsync-chat-projection",
    "ctxsync-first-turn-gate",
    "ctxsync-context-ui",
    "ctxsync",
];

const FIXTURE: &str = "ctxsync-mcp-fixture";
const BINARY: &str = "ctxsync";
/// Automation lives beside the layers: it may use any crate, and no crate may use it.
const TOOLING: &str = "xtask";
/// Shared test helpers live beside the layers too: they may use any crate (behind
/// features), and every crate may use them, but only as a dev-dependency.
const TEST_SUPPORT: &str = "ctxsync-test-support";
/// The generated feature-unifying crate: a dev-dependency only, like test-support.
const WORKSPACE_HACK: &str = crate::workspace_hack::NAME;

/// The leaves of layer 0 stand side by side: neither may use the other.
const SHARES_FLOOR_BELOW: &[&str] = &["ctxsync-mcp-model"];

fn layer_of(name: &str) -> Option<usize> {
    let index = LAYERS.iter().position(|l| *l == name)?;
    let shared = LAYERS[..=index]
        .iter()
        .filter(|l| SHARES_FLOOR_BELOW.contains(l))
        .count();
    Some(index - shared)
}

/// Checks `cargo metadata --format-version 1 --no-deps` output and returns every
/// violation as a sentence naming both crates (empty when the graph is layered).
pub(crate) fn check(metadata: &Value) -> Vec<String> {
    let mut violations = Vec::new();
    let packages = metadata["packages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let workspace: Vec<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();

    for package in packages {
        let Some(name) = package["name"].as_str() else {
            continue;
        };
        if name == TOOLING || name == TEST_SUPPORT || name == WORKSPACE_HACK {
            continue;
        }
        let Some(layer) = layer_of(name) else {
            violations.push(format!(
                "crate `{name}` is not in the layer table (SPEC §2); add it to xtask's LAYERS"
            ));
            continue;
        };
        let deps = package["dependencies"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        for dep in deps {
            let Some(dep_name) = dep["name"].as_str() else {
                continue;
            };
            if !workspace.contains(&dep_name) {
                continue;
            }
            let kind = dep["kind"].as_str().unwrap_or("normal");
            // A crate's dev-dependency on itself only turns on its own test features
            // (e.g. persistence's `test-support`): no edge between layers.
            if dep_name == name && kind == "dev" {
                continue;
            }
            if dep_name == TOOLING {
                violations.push(format!("`{name}` depends on `{TOOLING}` ({kind})"));
                continue;
            }
            if dep_name == TEST_SUPPORT || dep_name == WORKSPACE_HACK {
                if kind != "dev" {
                    violations.push(format!(
                        "`{name}` uses `{dep_name}` as a {kind} dependency; it may only be a dev-dependency"
                    ));
                }
                continue;
            }
            let Some(dep_layer) = layer_of(dep_name) else {
                continue;
            };
            if dep_layer >= layer {
                let relation = if dep_layer == layer {
                    "same-layer"
                } else {
                    "upward"
                };
                violations.push(format!(
                    "`{name}` (layer {layer}) has a {relation} {kind} dependency on `{dep_name}` (layer {dep_layer})"
                ));
            } else if dep_name == FIXTURE && kind != "dev" && name != BINARY {
                violations.push(format!(
                    "`{name}` uses the test fixture `{FIXTURE}` as a {kind} dependency; only `{BINARY}` may, others as a dev-dependency"
                ));
            }
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Builds metadata with the given `(package, [(dependency, kind)])` edges.
    fn metadata(edges: &[(&str, &[(&str, &str)])]) -> Value {
        let packages: Vec<Value> = edges
            .iter()
            .map(|(name, deps)| {
                let deps: Vec<Value> = deps
                    .iter()
                    .map(|(dep, kind)| {
                        let kind = if *kind == "normal" {
                            Value::Null
                        } else {
                            json!(kind)
                        };
                        json!({ "name": dep, "kind": kind })
                    })
                    .collect();
                json!({ "name": name, "dependencies": deps })
            })
            .collect();
        json!({ "packages": packages })
    }

    fn check_edges(edges: &[(&str, &[(&str, &str)])], expect: &[&str]) {
        let violations = check(&metadata(edges));
        assert_eq!(
            violations.len(),
            expect.len(),
            "violations: {violations:#?}"
        );
        for (violation, needle) in violations.iter().zip(expect) {
            assert!(
                violation.contains(needle),
                "`{violation}` should mention `{needle}`"
            );
        }
    }

    #[test]
    fn downward_edges_pass() {
        check_edges(
            &[
                ("ctxsync-mcp-fixture", &[]),
                ("ctxsync-protocol", &[("serde", "normal")]),
                (
                    "ctxsync-agent-diagnostics",
                    &[("ctxsync-mcp-fixture", "dev")],
                ),
                ("ctxsync-persistence", &[("ctxsync-protocol", "normal")]),
                (
                    "ctxsync",
                    &[
                        ("ctxsync-mcp-fixture", "normal"),
                        ("ctxsync-persistence", "normal"),
                    ],
                ),
                ("xtask", &[("ctxsync", "normal")]),
            ],
            &[],
        );
    }

    #[test]
    fn the_two_leaves_share_layer_zero() {
        assert_eq!(layer_of("ctxsync-mcp-fixture"), Some(0));
        assert_eq!(layer_of("ctxsync-mcp-model"), Some(0));
        assert_eq!(layer_of("ctxsync-agent-diagnostics"), Some(1));
        assert_eq!(layer_of("ctxsync"), Some(9));
        check_edges(
            &[
                ("ctxsync-mcp-fixture", &[]),
                ("ctxsync-mcp-model", &[("ctxsync-mcp-fixture", "dev")]),
                (
                    "ctxsync-agent-diagnostics",
                    &[("ctxsync-mcp-model", "normal")],
                ),
            ],
            &["same-layer dev dependency on `ctxsync-mcp-fixture`"],
        );
    }

    #[test]
    fn upward_edge_is_rejected() {
        check_edges(
            &[
                ("ctxsync-protocol", &[("ctxsync-persistence", "normal")]),
                ("ctxsync-persistence", &[]),
            ],
            &["upward normal dependency on `ctxsync-persistence`"],
        );
    }

    #[test]
    fn upward_build_and_dev_edges_are_rejected() {
        check_edges(
            &[
                (
                    "ctxsync-protocol",
                    &[("ctxsync-persistence", "build"), ("ctxsync", "dev")],
                ),
                ("ctxsync-persistence", &[]),
                ("ctxsync", &[]),
            ],
            &[
                "upward build dependency",
                "upward dev dependency on `ctxsync`",
            ],
        );
    }

    #[test]
    fn same_layer_edge_is_rejected() {
        check_edges(
            &[("ctxsync-protocol", &[("ctxsync-protocol", "normal")])],
            &["same-layer normal dependency"],
        );
    }

    #[test]
    fn a_self_dev_dependency_for_test_features_passes() {
        check_edges(
            &[
                ("ctxsync-protocol", &[]),
                (
                    "ctxsync-persistence",
                    &[
                        ("ctxsync-protocol", "normal"),
                        ("ctxsync-persistence", "dev"),
                    ],
                ),
            ],
            &[],
        );
    }

    #[test]
    fn fixture_as_normal_dependency_is_rejected_outside_the_binary() {
        check_edges(
            &[
                ("ctxsync-mcp-fixture", &[]),
                ("ctxsync-persistence", &[("ctxsync-mcp-fixture", "normal")]),
                (
                    "ctxsync-agent-diagnostics",
                    &[("ctxsync-mcp-fixture", "build")],
                ),
            ],
            &[
                "`ctxsync-persistence` uses the test fixture",
                "`ctxsync-agent-diagnostics` uses the test fixture",
            ],
        );
    }

    #[test]
    fn test_support_is_a_dev_dependency_only() {
        check_edges(
            &[
                (
                    "ctxsync-test-support",
                    &[("ctxsync-persistence", "normal"), ("ctxsync", "normal")],
                ),
                ("ctxsync-persistence", &[("ctxsync-test-support", "dev")]),
                ("ctxsync-protocol", &[("ctxsync-test-support", "normal")]),
                ("ctxsync", &[("ctxsync-test-support", "build")]),
            ],
            &[
                "`ctxsync-protocol` uses `ctxsync-test-support` as a normal dependency",
                "`ctxsync` uses `ctxsync-test-support` as a build dependency",
            ],
        );
    }

    #[test]
    fn unknown_crate_and_dependency_on_xtask_are_rejected() {
        check_edges(
            &[
                ("ctxsync-extra", &[]),
                ("ctxsync-protocol", &[("xtask", "dev")]),
                ("xtask", &[]),
            ],
            &[
                "`ctxsync-extra` is not in the layer table",
                "depends on `xtask`",
            ],
        );
    }

    #[test]
    fn the_real_workspace_is_layered() {
        let output = std::process::Command::new(env!("CARGO"))
            .args([
                "metadata",
                "--format-version",
                "1",
                "--no-deps",
                "--offline",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("cargo metadata runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let metadata: Value = serde_json::from_slice(&output.stdout).expect("metadata is JSON");
        assert!(
            metadata["packages"]
                .as_array()
                .is_some_and(|p| p.len() >= 2),
            "metadata lists the workspace crates"
        );
        let violations = check(&metadata);
        assert!(
            violations.is_empty(),
            "layer violations:\n{}",
            violations.join("\n")
        );
    }
}
