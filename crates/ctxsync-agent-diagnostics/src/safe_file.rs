//! Opening files a workspace names without trusting them: regular files only (a FIFO must
//! never block the reader, a device never feed it), symlinks resolved and optionally kept
//! inside a root, reads bounded. Shared by `.mcp.json` and the agent's context files.

use std::{
    fs::{self, File},
    io::{self, Read},
    os::unix::fs::{FileTypeExt, OpenOptionsExt},
    path::{Path, PathBuf},
};

use nix::fcntl::OFlag;

/// The most a config file may hold; `.mcp.json` files are a few KiB in practice.
pub const MAX_CONFIG_FILE_BYTES: u64 = 1024 * 1024;

/// Why a file was not opened or read.
#[derive(Debug, thiserror::Error)]
pub enum SafeFileError {
    /// Nothing at the path.
    #[error("does not exist")]
    Missing,
    /// A symlink whose target does not exist.
    #[error("is a symlink whose target does not exist")]
    Dangling,
    /// The resolved path lies outside the root the file had to stay in.
    #[error("resolves to {}, outside {}", target.display(), root.display())]
    Outside {
        /// Where the path resolves to.
        target: PathBuf,
        /// The (canonical) root it had to stay inside.
        root: PathBuf,
    },
    /// A FIFO, socket, device or directory.
    #[error("not a regular file ({kind})")]
    NotRegular {
        /// What it is instead, with its article ("a FIFO").
        kind: &'static str,
        /// Where the path resolves to.
        target: PathBuf,
    },
    /// More than the read's limit.
    #[error("larger than {}", describe_bytes(*limit))]
    TooLarge {
        /// The limit in bytes.
        limit: u64,
    },
    /// Any other I/O error.
    #[error("unreadable: {0}")]
    Io(#[from] io::Error),
}

/// A regular file opened by [`open_regular_file`].
#[derive(Debug)]
pub struct RegularFile {
    /// The open file; its type was checked on this handle, not only on the path.
    pub file: File,
    /// The path with every symlink resolved.
    pub canonical: PathBuf,
    /// Its size when it was opened.
    pub len: u64,
}

/// Opens `path` for reading if it resolves to a regular file (inside `root`, a canonical
/// directory, when given). Never blocks on a FIFO and never opens a device for reading.
///
/// The type is checked twice: on the resolved path, so a device is not even opened, and on
/// the opened handle, so a file swapped for a FIFO in between is still refused. The open is
/// non-blocking (a FIFO without a writer would otherwise block it) and does not follow a
/// symlink swapped in after resolution.
pub fn open_regular_file(path: &Path, root: Option<&Path>) -> Result<RegularFile, SafeFileError> {
    let canonical = match fs::canonicalize(path) {
        Ok(canonical) => canonical,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(if fs::symlink_metadata(path).is_ok() {
                SafeFileError::Dangling
            } else {
                SafeFileError::Missing
            });
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(root) = root
        && !canonical.starts_with(root)
    {
        return Err(SafeFileError::Outside {
            target: canonical,
            root: root.to_owned(),
        });
    }
    check_regular(&fs::symlink_metadata(&canonical)?, &canonical)?;
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NONBLOCK | OFlag::O_NOFOLLOW | OFlag::O_NOCTTY).bits())
        .open(&canonical)?;
    // O_NONBLOCK stays set: it changes nothing for reads of a regular file.
    let meta = file.metadata()?;
    check_regular(&meta, &canonical)?;
    Ok(RegularFile {
        file,
        canonical,
        len: meta.len(),
    })
}

/// Reads the whole of `path` as [`open_regular_file`] opens it, refusing more than `limit`
/// bytes (also when the file grows while being read).
pub fn read_regular_file(
    path: &Path,
    root: Option<&Path>,
    limit: u64,
) -> Result<Vec<u8>, SafeFileError> {
    let opened = open_regular_file(path, root)?;
    if opened.len > limit {
        return Err(SafeFileError::TooLarge { limit });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(opened.len).unwrap_or(0));
    opened
        .file
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(SafeFileError::TooLarge { limit });
    }
    Ok(bytes)
}

fn check_regular(meta: &fs::Metadata, canonical: &Path) -> Result<(), SafeFileError> {
    let kind = meta.file_type();
    if kind.is_file() {
        return Ok(());
    }
    let kind = if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_symlink() {
        // Only when a symlink was swapped in after the path was resolved.
        "a symlink"
    } else {
        "an unknown kind of file"
    };
    Err(SafeFileError::NotRegular {
        kind,
        target: canonical.to_owned(),
    })
}

/// "1 MiB", "64 KiB" or "100 bytes".
fn describe_bytes(bytes: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;
    if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= KIB && bytes.is_multiple_of(KIB) {
        format!("{} KiB", bytes / KIB)
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;
    use std::time::{Duration, Instant};

    use super::*;

    fn make_fifo(path: &Path) {
        nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    }

    /// `read_regular_file` on `name` inside a fresh directory prepared by `setup`, with the
    /// directory as the root; the outcome as the text a config outcome would show.
    fn check(setup: impl FnOnce(&Path), name: &str, limit: u64, expect: &str) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        setup(&root);
        let started = Instant::now();
        let got = match read_regular_file(&root.join(name), Some(&root), limit) {
            Ok(bytes) => format!("ok: {}", String::from_utf8_lossy(&bytes)),
            Err(e) => e.to_string().replace(&root.display().to_string(), "ROOT"),
        };
        assert!(started.elapsed() < Duration::from_secs(5), "{name} blocked");
        assert_eq!(got, expect, "{name}");
    }

    #[test]
    fn regular_files_within_the_limit_are_read() {
        check(
            |d| fs::write(d.join("f"), "hello").unwrap(),
            "f",
            5,
            "ok: hello",
        );
        check(|d| fs::write(d.join("f"), "").unwrap(), "f", 5, "ok: ");
        check(
            |d| {
                fs::create_dir(d.join("sub")).unwrap();
                fs::write(d.join("sub/f"), "inner").unwrap();
                symlink("sub/f", d.join("link")).unwrap();
            },
            "link",
            100,
            "ok: inner",
        );
    }

    #[test]
    fn oversized_files_are_refused() {
        check(
            |d| fs::write(d.join("f"), "hello!").unwrap(),
            "f",
            5,
            "larger than 5 bytes",
        );
        check(
            |d| fs::write(d.join("f"), vec![b' '; 1024 * 1024 + 1]).unwrap(),
            "f",
            MAX_CONFIG_FILE_BYTES,
            "larger than 1 MiB",
        );
    }

    #[test]
    fn fifos_devices_and_directories_are_refused_without_blocking() {
        check(
            |d| make_fifo(&d.join("p")),
            "p",
            10,
            "not a regular file (a FIFO)",
        );
        check(
            |d| fs::create_dir(d.join("d")).unwrap(),
            "d",
            10,
            "not a regular file (a directory)",
        );
        // /dev/zero would never end; /dev/null is a device too.
        let dir = tempfile::tempdir().unwrap();
        let zero = dir.path().join("zero");
        symlink("/dev/zero", &zero).unwrap();
        let error = read_regular_file(&zero, None, MAX_CONFIG_FILE_BYTES).unwrap_err();
        assert_eq!(error.to_string(), "not a regular file (a character device)");
        let error = open_regular_file(Path::new("/dev/null"), None).unwrap_err();
        assert_eq!(error.to_string(), "not a regular file (a character device)");
    }

    #[test]
    fn the_opened_handle_is_checked_not_only_the_path() {
        // Simulates the race: the handle of a FIFO opened without blocking is refused by
        // the same check the open applies after it.
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("p");
        make_fifo(&fifo);
        let file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(OFlag::O_NONBLOCK.bits())
            .open(&fifo)
            .expect("a non-blocking open of a FIFO returns at once");
        let error = check_regular(&file.metadata().unwrap(), &fifo).unwrap_err();
        assert_eq!(error.to_string(), "not a regular file (a FIFO)");
    }

    #[test]
    fn symlinks_stay_inside_the_root() {
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().canonicalize().unwrap().join("secret");
        fs::write(&target, "x").unwrap();
        let expect = format!("resolves to {}, outside ROOT", target.display());
        check(|d| symlink(&target, d.join("l")).unwrap(), "l", 10, &expect);
        check(
            |d| symlink("/dev/zero", d.join("z")).unwrap(),
            "z",
            10,
            "resolves to /dev/zero, outside ROOT",
        );
        check(
            |d| symlink("nowhere", d.join("l")).unwrap(),
            "l",
            10,
            "is a symlink whose target does not exist",
        );
        check(|_| {}, "absent", 10, "does not exist");
        // Without a root, a symlink may lead anywhere.
        let dir = tempfile::tempdir().unwrap();
        symlink(&target, dir.path().join("l")).unwrap();
        assert_eq!(
            read_regular_file(&dir.path().join("l"), None, 10).unwrap(),
            b"x"
        );
    }

    #[test]
    fn sizes_are_described_in_their_unit() {
        assert_eq!(describe_bytes(1024 * 1024), "1 MiB");
        assert_eq!(describe_bytes(64 * 1024), "64 KiB");
        assert_eq!(describe_bytes(1000), "1000 bytes");
    }
}
