//! The HTTP API's bearer token: given by flag or environment, or generated once into
//! `<data-dir>/api-token` (mode 0600) so a restarted server keeps accepting its clients.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// Where the token came from, so the server can tell the person where to find it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    Given,
    File(PathBuf),
    Generated(PathBuf),
}

/// The minimum length of a given token: a short one is guessable.
const MIN_TOKEN_CHARS: usize = 16;

pub fn resolve(given: Option<String>, data_dir: &Path) -> Result<(String, TokenSource)> {
    if let Some(token) = given {
        let token = token.trim().to_string();
        if token.chars().count() < MIN_TOKEN_CHARS {
            bail!("the API token must be at least {MIN_TOKEN_CHARS} characters");
        }
        return Ok((token, TokenSource::Given));
    }
    let path = data_dir.join("api-token");
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let mode = std::fs::metadata(&path)?.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                bail!(
                    "{} is readable by other users (mode {mode:o}); run chmod 600 on it",
                    path.display()
                );
            }
            let token = text.trim().to_string();
            if token.is_empty() {
                bail!(
                    "{} is empty; delete it to generate a new token",
                    path.display()
                );
            }
            Ok((token, TokenSource::File(path)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Mode 0700 for directories made here; an existing one the user chose is theirs.
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(data_dir)
                .with_context(|| format!("creating {}", data_dir.display()))?;
            let token = random_token();
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .with_context(|| format!("creating {}", path.display()))?;
            writeln!(file, "{token}")?;
            Ok((token, TokenSource::Generated(path)))
        }
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// 32 random bytes, hex-encoded.
pub fn random_token() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the OS random source is available");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
