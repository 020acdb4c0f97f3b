//! The feature-unifying crate `ctxsync-workspace-hack`: its manifest names every
//! third-party package of the workspace with the features the whole workspace turns on.
//!
//! Why: the README's test command runs each crate's tests alone (`cargo test -p NAME`),
//! and Cargo resolves features per invocation. Without this crate, tokio, hyper, rmcp and
//! the C libraries built from source (OpenSSL, libpq, aws-lc) were each compiled with up
//! to eight feature sets, one per crate's view, and every crate above them again; that was
//! most of CI's test step. Every member takes the crate as a dev-dependency, and with its
//! feature `unify` ([`UNIFY`], which `cargo xtask test`, CI's clippy and fuzz-check pass)
//! each test build resolves the same features and reuses the same artifacts. Without it
//! the crate is empty: a plain `cargo test -p NAME` builds only what NAME needs, the
//! benchmarks' release build compiles no test-only packages, and a crate's normal build
//! (what an embedder gets, what `cargo xtask embedding` checks) never sees it.
//!
//! The manifest is generated from `cargo metadata` (`cargo xtask workspace-hack`) and
//! checked by `--check`: a dependency or feature change that makes it stale fails CI
//! with the command that fixes it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

pub(crate) const NAME: &str = "ctxsync-workspace-hack";
/// The `--features` value that turns the unification on for a member's build.
pub(crate) const UNIFY: &str = "ctxsync-workspace-hack/unify";
const MANIFEST: &str = "crates/ctxsync-workspace-hack/Cargo.toml";

/// Writes the manifest, or with `check` fails when the committed one differs from what
/// `cargo metadata` says now, or when a member does not take the crate as a
/// dev-dependency.
pub(crate) fn run(root: &Path, check: bool) -> Result<()> {
    let host = host_triple()?;
    let metadata = crate::cargo_stdout(
        root,
        &[
            "metadata",
            "--format-version",
            "1",
            "--filter-platform",
            &host,
        ],
    )?;
    let metadata: Value = serde_json::from_slice(&metadata).context("parsing cargo metadata")?;
    let built = built_features(root, &host)?;
    let resolve = Resolve::of(&metadata)?;
    let manifest = render(&resolve, &built);
    let path = root.join(MANIFEST);
    let missing = resolve.members_without_hack();
    if check {
        let committed = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        if committed != manifest {
            bail!(
                "{MANIFEST} is stale (a dependency, version or feature changed): run \
                 `cargo xtask workspace-hack` and commit the result"
            );
        }
        if !missing.is_empty() {
            bail!(
                "these members do not take `{NAME}` as a dev-dependency \
                 (`{NAME}.workspace = true`), so their tests build other feature sets: {}",
                missing.join(", ")
            );
        }
        println!("workspace-hack: the manifest is current and every member uses it");
        return Ok(());
    }
    std::fs::write(&path, manifest).with_context(|| format!("writing {}", path.display()))?;
    println!("workspace-hack: wrote {MANIFEST}");
    for member in missing {
        println!("workspace-hack: add `{NAME}.workspace = true` to {member}'s [dev-dependencies]");
    }
    Ok(())
}

/// Package `name vVERSION` → the features a workspace test build compiles it with (host
/// and target side together). `cargo metadata` over-approximates: its resolve merges
/// both sides and lists optional packages no build compiles (quinn, ring), so the
/// packages and features come from `cargo tree`, which resolves as a build does.
type Built = BTreeMap<String, BTreeSet<String>>;

fn built_features(root: &Path, host: &str) -> Result<Built> {
    let edges = "normal,build,dev";
    let args = ["tree", "--workspace", "-e", edges, "--prefix", "none"];
    let output = crate::cargo_stdout(
        root,
        &[&args[..], &["--format", "{p}|{f}", "--target", host]].concat(),
    )?;
    let mut built = Built::new();
    for line in String::from_utf8_lossy(&output).lines() {
        let Some((package, features)) = line.split_once('|') else {
            continue;
        };
        let mut words = package.split_whitespace();
        let (Some(name), Some(version)) = (words.next(), words.next()) else {
            continue;
        };
        built
            .entry(format!("{name} {version}"))
            .or_default()
            .extend(
                features
                    .trim_end_matches(" (*)")
                    .split(',')
                    .filter(|f| !f.is_empty())
                    .map(str::to_owned),
            );
    }
    Ok(built)
}

/// The platform CI builds for; the manifest names only packages built there.
fn host_triple() -> Result<String> {
    let output = Command::new("rustc")
        .arg("-vV")
        .output()
        .context("running rustc -vV")?;
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .map(str::to_owned)
        .context("rustc -vV printed no host line")
}

/// One resolved third-party package.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Package {
    name: String,
    version: String,
    features: BTreeSet<String>,
}

/// Where a package is built: for the target (linked into tests) or for the host (build
/// scripts, proc-macros). Cargo resolves the two sides' features apart, so the manifest
/// unifies each side in its own section.
#[derive(Default)]
struct Sides {
    target: BTreeSet<String>,
    host: BTreeSet<String>,
}

fn render(resolve: &Resolve<'_>, built: &Built) -> String {
    let sides = resolve.sides();
    let target = resolve.packages_of(&sides.target, built);
    let host = resolve.packages_of(&sides.host, built);
    // Cargo requires one key per package across all sections: a package built in two
    // versions on either side is keyed by its series on both.
    let mut versions: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for package in target.iter().chain(&host) {
        versions
            .entry(&package.name)
            .or_default()
            .insert(&package.version);
    }
    let mut keys = BTreeSet::new();
    let mut lines = |packages: &[Package]| -> String {
        packages
            .iter()
            .map(|p| {
                let (key, line) = entry(p, versions[p.name.as_str()].len() > 1);
                keys.insert(key);
                line
            })
            .collect()
    };
    let dependencies = lines(&target);
    let build_dependencies = lines(&host);
    let mut out = String::from(HEADER);
    out.push_str("\n[features]\n");
    out.push_str(&unify_feature(&keys));
    out.push_str("\n[dependencies]\n");
    out.push_str(&dependencies);
    out.push_str("\n[build-dependencies]\n");
    out.push_str(&build_dependencies);
    out.push_str("\n[lints]\nworkspace = true\n");
    out
}

const HEADER: &str = "\
# Generated by `cargo xtask workspace-hack`; `cargo xtask workspace-hack --check` (CI)
# fails when it is stale. Do not edit by hand.
#
# Every third-party package of the workspace with the features the whole workspace turns
# on, behind the feature `unify`. Each member takes this crate as a dev-dependency; with
# `--features ctxsync-workspace-hack/unify` (as `cargo xtask test`, CI's clippy and
# fuzz-check pass it) `cargo test -p NAME` resolves the same features for every crate and
# the test builds share their artifacts. Without it (a plain `cargo test -p NAME`, the
# benchmarks' release build) the crate is empty; normal builds never see it.
[package]
name = \"ctxsync-workspace-hack\"
description = \"Dev-only: unifies third-party features across the workspace's test builds (generated).\"
version.workspace = true
edition.workspace = true
rust-version.workspace = true
license.workspace = true
publish.workspace = true
";

/// The resolved graph: packages by id, their dependency edges, the workspace members.
struct Resolve<'a> {
    packages: BTreeMap<&'a str, &'a Value>,
    nodes: BTreeMap<&'a str, &'a Value>,
    members: BTreeSet<&'a str>,
}

impl<'a> Resolve<'a> {
    fn of(metadata: &'a Value) -> Result<Self> {
        let packages = metadata["packages"]
            .as_array()
            .context("cargo metadata has no packages")?
            .iter()
            .filter_map(|p| Some((p["id"].as_str()?, p)))
            .collect();
        let nodes = metadata["resolve"]["nodes"]
            .as_array()
            .context("cargo metadata has no resolve graph")?
            .iter()
            .filter_map(|n| Some((n["id"].as_str()?, n)))
            .collect();
        let members = metadata["workspace_members"]
            .as_array()
            .context("cargo metadata has no workspace members")?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        Ok(Self {
            packages,
            nodes,
            members,
        })
    }

    fn name(&self, id: &str) -> &'a str {
        self.packages
            .get(id)
            .and_then(|p| p["name"].as_str())
            .unwrap_or_default()
    }

    /// Members whose manifest does not name the hack as a dev-dependency.
    fn members_without_hack(&self) -> Vec<String> {
        self.members
            .iter()
            .filter_map(|id| self.packages.get(id))
            .filter(|p| p["name"] != NAME)
            .filter(|p| {
                !p["dependencies"].as_array().is_some_and(|deps| {
                    deps.iter().any(|d| d["name"] == NAME && d["kind"] == "dev")
                })
            })
            .filter_map(|p| p["name"].as_str().map(str::to_owned))
            .collect()
    }

    fn is_proc_macro(&self, id: &str) -> bool {
        self.packages.get(id).is_some_and(|p| {
            p["targets"].as_array().is_some_and(|targets| {
                targets.iter().any(|t| {
                    t["kind"]
                        .as_array()
                        .is_some_and(|k| k.iter().any(|k| k == "proc-macro"))
                })
            })
        })
    }

    /// Walks every member's dependencies (the hack's own excepted, so the result does
    /// not feed on itself) and sorts each third-party package to the side it is built on.
    fn sides(&self) -> Sides {
        let mut sides = Sides::default();
        let mut stack: Vec<(&str, bool)> = Vec::new();
        for member in &self.members {
            if self.name(member) == NAME {
                continue;
            }
            stack.extend(self.edges(member, false, true));
        }
        while let Some((id, host)) = stack.pop() {
            let seen = if host {
                &mut sides.host
            } else {
                &mut sides.target
            };
            if !seen.insert(id.to_owned()) {
                continue;
            }
            stack.extend(self.edges(id, host, false));
        }
        sides
    }

    /// The third-party packages `id` depends on, each with the side it is built on.
    fn edges(&self, id: &str, host: bool, with_dev: bool) -> Vec<(&'a str, bool)> {
        let Some(deps) = self.nodes.get(id).and_then(|n| n["deps"].as_array()) else {
            return Vec::new();
        };
        let mut edges = Vec::new();
        for dep in deps {
            let Some(dep_id) = dep["pkg"].as_str() else {
                continue;
            };
            if self.members.contains(dep_id) {
                continue;
            }
            let kinds = dep["dep_kinds"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            for kind in kinds {
                let kind = kind["kind"].as_str().unwrap_or("normal");
                if kind == "dev" && !with_dev {
                    continue;
                }
                let on_host = host || kind == "build" || self.is_proc_macro(dep_id);
                edges.push((dep_id, on_host));
            }
        }
        edges
    }

    /// The registry packages among `ids` that a build compiles, sorted, with the
    /// features it compiles them with.
    fn packages_of(&self, ids: &BTreeSet<String>, built: &Built) -> Vec<Package> {
        ids.iter()
            .filter_map(|id| {
                let package = self.packages.get(id.as_str())?;
                // Registry packages only: path and git sources are the workspace's own.
                if !package["source"].as_str()?.starts_with("registry+") {
                    return None;
                }
                let name = package["name"].as_str()?;
                let version = package["version"].as_str()?;
                let features = built.get(&format!("{name} v{version}"))?.clone();
                Some(Package {
                    name: name.to_owned(),
                    version: version.to_owned(),
                    features,
                })
            })
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    }
}

/// `unify`, the one feature: it turns every (optional) dependency on.
fn unify_feature(keys: &BTreeSet<String>) -> String {
    let mut feature = String::from("unify = [\n");
    for key in keys {
        feature.push_str(&format!("    \"dep:{key}\",\n"));
    }
    feature.push_str("]\n");
    feature
}

/// The manifest key of a package and its dependency line.
fn entry(package: &Package, several_versions: bool) -> (String, String) {
    let key = if several_versions {
        format!("{}-{}", package.name, compatible_series(&package.version))
    } else {
        package.name.clone()
    };
    let default = package.features.contains("default");
    let features: Vec<String> = package
        .features
        .iter()
        .filter(|f| *f != "default")
        .map(|f| format!("{f:?}"))
        .collect();
    // Build metadata (`+spec-1.1.0`) is no part of a version requirement.
    let version = package.version.split('+').next().unwrap_or_default();
    let line = format!(
        "{key} = {{ package = \"{}\", version = \"{version}\", optional = true, default-features = {default}, features = [{}] }}\n",
        package.name,
        features.join(", ")
    );
    (key, line)
}

/// The part of a version two semver-compatible releases share: `2` for 2.0.119, `0-4`
/// for 0.4.3 (Cargo never builds two versions of one series).
fn compatible_series(version: &str) -> String {
    let mut parts = version.split(['.', '+', '-']);
    match (parts.next(), parts.next()) {
        (Some("0"), Some(minor)) => format!("0-{minor}"),
        (Some(major), _) => major.to_owned(),
        _ => version.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_package_built_in_two_series_is_keyed_by_its_series() {
        assert_eq!(compatible_series("2.0.119"), "2");
        assert_eq!(compatible_series("0.22.1"), "0-22");
        let package = Package {
            name: "base64".into(),
            version: "0.22.1".into(),
            features: ["alloc", "default", "std"].map(String::from).into(),
        };
        assert_eq!(
            entry(&package, true),
            (
                "base64-0-22".to_owned(),
                "base64-0-22 = { package = \"base64\", version = \"0.22.1\", optional = true, default-features = true, features = [\"alloc\", \"std\"] }\n".to_owned()
            )
        );
        assert!(entry(&package, false).1.starts_with("base64 = "));
        let keys = ["base64-0-22".to_owned(), "tokio".to_owned()].into();
        assert_eq!(
            unify_feature(&keys),
            "unify = [\n    \"dep:base64-0-22\",\n    \"dep:tokio\",\n]\n"
        );
    }
}
