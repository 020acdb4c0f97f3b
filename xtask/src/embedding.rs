//! What embedders rely on: the API docs build without a warning (broken intra-doc links
//! included), every library crate builds with its default features off, each database
//! backend builds alone, and those builds leave out what they promise to leave out.

use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::layers::LAYERS;

/// Crates of the layer table not checked with `--no-default-features`: persistence and
/// the agent API need a backend (persistence is checked with each one alone instead), and
/// the binary is no library.
const NOT_WITHOUT_DEFAULTS: &[&str] = &["ctxsync-persistence", "ctxsync-agent-api", "ctxsync"];

/// A build, and the crates its normal dependency tree must not contain.
struct Promise {
    package: &'static str,
    features: &'static [&'static str],
    absent: &'static [&'static str],
}

const PROMISES: &[Promise] = &[
    // The store knows no gRPC: the protocol's messages come without tonic.
    Promise {
        package: "ctxsync-persistence",
        features: &[],
        absent: &["tonic", "tonic-prost"],
    },
    Promise {
        package: "ctxsync-first-turn-gate",
        features: &["--no-default-features"],
        absent: &["diesel", "pq-sys", "libsqlite3-sys", "ctxsync-persistence"],
    },
    // The panel only renders a view: no store, no database, no C library.
    Promise {
        package: "ctxsync-context-ui",
        features: &[],
        absent: &["diesel", "pq-sys", "libsqlite3-sys", "ctxsync-persistence"],
    },
    Promise {
        package: "ctxsync-chat-projection",
        features: &["--no-default-features"],
        absent: &["diesel", "pq-sys", "libsqlite3-sys", "ctxsync-persistence"],
    },
    Promise {
        package: "ctxsync-persistence",
        features: &["--no-default-features", "--features", "postgres"],
        absent: &["libsqlite3-sys"],
    },
    Promise {
        package: "ctxsync-persistence",
        features: &["--no-default-features", "--features", "sqlite"],
        absent: &["pq-sys", "openssl-sys", "tokio-postgres"],
    },
];

pub(crate) fn check(root: &Path, cargo: &Path) -> Result<()> {
    let started = std::time::Instant::now();
    crate::run_with_env(
        root,
        cargo.to_owned(),
        // With the examples (which take dev-dependencies) and the workspace-hack's
        // `unify`, the documented crates' dependencies are the ones clippy checked.
        &[
            "doc",
            "--workspace",
            "--no-deps",
            // Not `--bins`: a binary named like its library would overwrite its docs.
            "--lib",
            "--examples",
            "--features",
            crate::workspace_hack::UNIFY,
        ],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    let openssl = prebuilt_openssl(root);
    let prebuilt = openssl
        .as_deref()
        .and_then(|install| Some((install, prebuilt_openssl_env(install)?)));
    let openssl_env: Vec<(&str, &str)> = match prebuilt {
        Some((install, env)) => {
            println!(
                "embedding: the checks use the OpenSSL already built in {}",
                install.display()
            );
            env.to_vec()
        }
        None => Vec::new(),
    };
    let libraries = LAYERS
        .iter()
        .filter(|name| !NOT_WITHOUT_DEFAULTS.contains(name));
    for package in libraries {
        crate::run_with_env(
            root,
            cargo.to_owned(),
            &["check", "-p", package, "--no-default-features"],
            &openssl_env,
        )?;
    }
    for backend in ["sqlite", "postgres"] {
        let args = [
            "check",
            "-p",
            "ctxsync-persistence",
            "--no-default-features",
        ];
        crate::run_with_env(
            root,
            cargo.to_owned(),
            &[&args[..], &["--features", backend]].concat(),
            &openssl_env,
        )?;
    }
    for promise in PROMISES {
        let tree = normal_dependencies(root, promise)?;
        let present: Vec<&str> = promise
            .absent
            .iter()
            .copied()
            .filter(|name| tree.iter().any(|crate_name| crate_name == name))
            .collect();
        if !present.is_empty() {
            bail!(
                "`{}` with {} depends on {}, which that build promises to leave out",
                promise.package,
                features_text(promise),
                present.join(", ")
            );
        }
        println!(
            "embedding: {} with {}: {} crates, none of {}",
            promise.package,
            features_text(promise),
            tree.len(),
            promise.absent.join(", ")
        );
    }
    println!(
        "embedding: docs and feature builds checked in {:.0?}",
        started.elapsed()
    );
    Ok(())
}

/// The OpenSSL that the debug build (the workspace-hack's features, as clippy's and the
/// tests') compiled from source, once its build script has finished. A crate checked alone
/// resolves its own host build dependencies (`cc` and `libc` with fewer features than the
/// unified set), so its `openssl-sys` build script differs and would compile OpenSSL again:
/// about 2.5 minutes on two cores, for a type check that links nothing. Pointing
/// `openssl-sys` at the built copy checks the same Rust code against the same headers.
/// CI's release build links it too: `openssl-src` compiles OpenSSL with the same flags in
/// every profile (its own `-O2`, whatever the profile's level), so the copy is the one a
/// release build would compile.
pub(crate) fn prebuilt_openssl(root: &Path) -> Option<std::path::PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| root.join("target"), std::path::PathBuf::from);
    let builds = std::fs::read_dir(target.join("debug").join("build")).ok()?;
    builds
        .filter_map(Result::ok)
        .filter(|entry| {
            entry
                .file_name()
                .to_string_lossy()
                .starts_with("openssl-sys-")
        })
        // Cargo writes `output` when the build script has exited: the install is whole.
        .filter(|entry| entry.path().join("output").is_file())
        .map(|entry| entry.path().join("out/openssl-build/install"))
        .filter(|install| {
            install.join("include/openssl/ssl.h").exists() && install.join("lib/libssl.a").exists()
        })
        .max_by_key(|install| {
            std::fs::metadata(install.join("lib/libssl.a"))
                .and_then(|meta| meta.modified())
                .ok()
        })
}

/// The variables that point `openssl-sys` at [`prebuilt_openssl`]'s copy, linked statically.
pub(crate) fn prebuilt_openssl_env(install: &Path) -> Option<[(&'static str, &str); 3]> {
    Some([
        ("OPENSSL_NO_VENDOR", "1"),
        ("OPENSSL_DIR", install.to_str()?),
        ("OPENSSL_STATIC", "1"),
    ])
}

/// How a promise's build is named in messages.
fn features_text(promise: &Promise) -> String {
    if promise.features.is_empty() {
        "its default features".to_owned()
    } else {
        promise.features.join(" ")
    }
}

/// The distinct crate names of the build's normal (not dev, not build) dependency tree.
fn normal_dependencies(root: &Path, promise: &Promise) -> Result<Vec<String>> {
    let tree = [
        "tree",
        "-p",
        promise.package,
        "-e",
        "normal",
        "--prefix",
        "none",
    ];
    let args = [&tree[..], promise.features, &["--format", "{p}"]].concat();
    let output = crate::cargo_stdout(root, &args)
        .with_context(|| format!("listing {}'s normal dependencies", promise.package))?;
    let mut names: Vec<String> = String::from_utf8_lossy(&output)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}
