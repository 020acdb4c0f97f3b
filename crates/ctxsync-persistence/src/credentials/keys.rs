//! The secrets key that seals MCP sign-in credentials: 32 random bytes kept outside the
//! database, read from a file an operator made (`head -c 32 /dev/urandom`) or generated
//! into the data directory; its key id, stored beside each ciphertext; and the keyring of
//! the current key and the older ones still accepted for opening.
//!
//! Must never: print a key (`Debug` shows the key id only), accept a key file other users
//! may read or change, or read a key of any length but 32 bytes.

use std::fmt;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Length of a secrets key, and of a key file.
pub const SECRETS_KEY_BYTES: usize = 32;
/// The key file [`SecretsKey::load_or_create`] keeps in a data directory.
pub const SECRETS_KEY_FILE_NAME: &str = "secrets.key";
/// Hashed before the key to make its id, so the id is of no use for anything else.
const KEY_ID_LABEL: &[u8] = b"ctxsync secrets key id v1\0";
/// Bytes of the SHA-256 kept as the key id (16 hex digits): enough to tell a deployment's
/// few keys apart, and no help in guessing one.
const KEY_ID_BYTES: usize = 8;
/// Reading a key file stops past this many bytes, so a device or a huge file is refused
/// by its size rather than read to the end.
const READ_LIMIT: u64 = 4096;
/// The shell command a message suggests for making a key file.
const MAKE_KEY: &str = "head -c 32 /dev/urandom";

/// The short, public name of a [`SecretsKey`]: 16 lower-case hex digits of a SHA-256 over
/// a fixed label and the key. Stored beside each ciphertext, so a row names the key that
/// opens it; safe to print.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyId([u8; KEY_ID_BYTES]);

impl KeyId {
    fn of(key: &[u8; SECRETS_KEY_BYTES]) -> Self {
        let digest = Sha256::new()
            .chain_update(KEY_ID_LABEL)
            .chain_update(key)
            .finalize();
        let mut id = [0u8; KEY_ID_BYTES];
        id.copy_from_slice(&digest[..KEY_ID_BYTES]);
        Self(id)
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|byte| write!(f, "{byte:02x}"))
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({self})")
    }
}

/// A 32-byte secrets key and its [`KeyId`]. `Debug` shows the id, never the key.
#[derive(Clone)]
pub struct SecretsKey {
    bytes: [u8; SECRETS_KEY_BYTES],
    id: KeyId,
}

impl fmt::Debug for SecretsKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretsKey")
            .field("id", &self.id)
            .field("bytes", &format_args!("<redacted>"))
            .finish()
    }
}

impl SecretsKey {
    /// The key made of `bytes` (for a key that comes from elsewhere than a file, such as
    /// a key management service).
    pub fn from_bytes(bytes: [u8; SECRETS_KEY_BYTES]) -> Self {
        Self {
            id: KeyId::of(&bytes),
            bytes,
        }
    }

    /// Reads a key file: exactly 32 raw bytes (as `head -c 32 /dev/urandom` writes them)
    /// in a regular file that neither its group nor others may read or change. Every
    /// refusal says, in words, which file and what to do about it.
    pub fn from_file(path: &Path) -> Result<Self, SecretsKeyError> {
        let unreadable = |source| SecretsKeyError::Unreadable {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(unreadable)?;
        // The checks are of the file opened, not of whatever the path names later.
        let meta = file.metadata().map_err(unreadable)?;
        if !meta.is_file() {
            return Err(SecretsKeyError::NotAFile {
                path: path.to_owned(),
            });
        }
        let mode = meta.mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(SecretsKeyError::TooOpen {
                path: path.to_owned(),
                mode,
            });
        }
        let mut bytes = Vec::with_capacity(SECRETS_KEY_BYTES);
        file.take(READ_LIMIT)
            .read_to_end(&mut bytes)
            .map_err(unreadable)?;
        let key = <[u8; SECRETS_KEY_BYTES]>::try_from(bytes.as_slice()).map_err(|_| {
            SecretsKeyError::WrongLength {
                path: path.to_owned(),
                len: bytes.len(),
                hint: length_hint(&bytes),
            }
        })?;
        Ok(Self::from_bytes(key))
    }

    /// The embedded default: the key in `data_dir`'s [`SECRETS_KEY_FILE_NAME`], created
    /// there first (32 random bytes, mode 0600 whatever the umask; missing directories
    /// 0700) when the file does not exist. An existing file is read as by
    /// [`Self::from_file`], refusals included. Of processes creating it at once, one key
    /// wins and all read it: the file appears whole or not at all.
    pub fn load_or_create(data_dir: &Path) -> Result<Self, SecretsKeyError> {
        let path = data_dir.join(SECRETS_KEY_FILE_NAME);
        match Self::from_file(&path) {
            Err(SecretsKeyError::Unreadable { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound => {}
            found => return found,
        }
        let failed = |source| SecretsKeyError::Create {
            path: path.clone(),
            source,
        };
        crate::db::create_private_dirs(data_dir).map_err(failed)?;
        let key = Self::generate()?;
        let mut suffix = [0u8; 8];
        getrandom::fill(&mut suffix).map_err(|e| SecretsKeyError::NoRandomness(e.to_string()))?;
        let temp = data_dir.join(format!(
            ".{SECRETS_KEY_FILE_NAME}.{}.{}",
            std::process::id(),
            u64::from_le_bytes(suffix)
        ));
        let written = write_private(&temp, &key.bytes).and_then(|()| {
            // A hard link never replaces an existing file: the first key linked wins.
            match std::fs::hard_link(&temp, &path) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
                _ => Ok(()),
            }
        });
        let removed = std::fs::remove_file(&temp);
        written.map_err(failed)?;
        removed.map_err(failed)?;
        Self::from_file(&path)
    }

    /// A new random key.
    fn generate() -> Result<Self, SecretsKeyError> {
        let mut bytes = [0u8; SECRETS_KEY_BYTES];
        getrandom::fill(&mut bytes).map_err(|e| SecretsKeyError::NoRandomness(e.to_string()))?;
        Ok(Self::from_bytes(bytes))
    }

    /// The key's public name.
    pub fn id(&self) -> KeyId {
        self.id
    }

    pub(super) fn bytes(&self) -> &[u8; SECRETS_KEY_BYTES] {
        &self.bytes
    }
}

/// Creates `path` (which must not exist) with mode 0600, writes `bytes` and syncs them.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    // The umask may have taken bits the mode asked for; never more than 0600 is asked.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// A hint for the common ways of writing a key file as text.
fn length_hint(bytes: &[u8]) -> &'static str {
    let text = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    if text.len() == 2 * SECRETS_KEY_BYTES && text.iter().all(u8::is_ascii_hexdigit) {
        " (it looks like hex digits: the file holds the raw bytes, not text)"
    } else if text.len() == 44 && text.ends_with(b"=") {
        " (it looks like base64: the file holds the raw bytes, not text)"
    } else if bytes.len() == SECRETS_KEY_BYTES + 1 && bytes.ends_with(b"\n") {
        " (it ends with a newline: the file holds the raw bytes only)"
    } else {
        ""
    }
}

/// Why a secrets key file cannot be used. Each message names the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum SecretsKeyError {
    /// The file cannot be opened or read (missing, no permission, I/O error).
    #[error("cannot read the secrets key file {}: {source}", path.display())]
    Unreadable {
        /// The key file.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// The path names a directory, a device or some other non-file.
    #[error(
        "the secrets key file {} is not a regular file; it must be a file holding exactly \
         32 random bytes, e.g. from `{MAKE_KEY}`",
        path.display()
    )]
    NotAFile {
        /// The key file.
        path: PathBuf,
    },
    /// The file holds more or fewer than 32 bytes.
    #[error(
        "the secrets key file {} holds {len} bytes{hint}; it must hold exactly 32 random \
         bytes, e.g. from `{MAKE_KEY}`",
        path.display()
    )]
    WrongLength {
        /// The key file.
        path: PathBuf,
        /// The bytes it holds (reading stops a little past any plausible key).
        len: usize,
        /// Words on what the content looks like, or nothing.
        hint: &'static str,
    },
    /// Users other than the file's owner may read or change it.
    #[error(
        "the secrets key file {} can be read or changed by users other than its owner \
         (mode {mode:04o}); run `chmod 600 {}` and give every replica its own private copy",
        path.display(),
        path.display()
    )]
    TooOpen {
        /// The key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Generating the key file of the embedded default failed.
    #[error("cannot create the secrets key file {}: {source}", path.display())]
    Create {
        /// The key file.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// The system gave no randomness for a new key.
    #[error("no randomness for a new secrets key: {0}")]
    NoRandomness(String),
}

/// The keys a store operation may use: the current one, which seals everything written,
/// and older ones accepted only for opening what they sealed (rotation: see
/// [`crate::Store::rekey_credentials`]). `Debug` shows key ids only.
#[derive(Clone)]
pub struct Keyring {
    current: SecretsKey,
    previous: Vec<SecretsKey>,
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let previous: Vec<KeyId> = self.previous.iter().map(SecretsKey::id).collect();
        f.debug_struct("Keyring")
            .field("current", &self.current.id)
            .field("previous", &previous)
            .finish()
    }
}

impl From<SecretsKey> for Keyring {
    fn from(current: SecretsKey) -> Self {
        Self::new(current)
    }
}

impl Keyring {
    /// A keyring of one key.
    pub fn new(current: SecretsKey) -> Self {
        Self {
            current,
            previous: Vec::new(),
        }
    }

    /// Adds an older key, accepted for opening only. A key the ring holds already is
    /// left out.
    pub fn with_previous(mut self, key: SecretsKey) -> Self {
        if self.find(&key.id.to_string()).is_none() {
            self.previous.push(key);
        }
        self
    }

    /// The key everything is sealed under.
    pub fn current(&self) -> &SecretsKey {
        &self.current
    }

    /// The key whose id is `id` (as stored, in hex).
    pub(super) fn find(&self, id: &str) -> Option<&SecretsKey> {
        std::iter::once(&self.current)
            .chain(&self.previous)
            .find(|key| key.id.to_string() == id)
    }

    /// The ring's key ids, for messages: `"0123… (current), 4567…"`.
    pub(super) fn describe(&self) -> String {
        std::iter::once(format!("{} (current)", self.current.id))
            .chain(self.previous.iter().map(|key| key.id.to_string()))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_key_ids_only() {
        let key = SecretsKey::from_bytes([0xAB; SECRETS_KEY_BYTES]);
        let id = key.id().to_string();
        assert_eq!(id.len(), 16);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(
            format!("{key:?}"),
            format!("SecretsKey {{ id: KeyId({id}), bytes: <redacted> }}")
        );
        let ring = Keyring::new(SecretsKey::from_bytes([1; SECRETS_KEY_BYTES])).with_previous(key);
        let debug = format!("{ring:?}");
        assert!(debug.contains(&id), "{debug}");
        for shown in [format!("{ring:?}"), format!("{:?}", ring.current())] {
            assert!(!shown.contains("171, 171"), "key bytes in {shown}");
        }
    }

    #[test]
    fn key_ids_are_stable_and_tell_keys_apart() {
        let a = SecretsKey::from_bytes([1; SECRETS_KEY_BYTES]);
        assert_eq!(a.id(), SecretsKey::from_bytes([1; SECRETS_KEY_BYTES]).id());
        assert_ne!(a.id(), SecretsKey::from_bytes([2; SECRETS_KEY_BYTES]).id());
        // Not simply a prefix of the key's own SHA-256.
        let plain = Sha256::digest([1u8; SECRETS_KEY_BYTES]);
        assert_ne!(a.id().0[..], plain[..KEY_ID_BYTES]);
    }

    #[test]
    fn a_keyring_finds_its_keys_and_keeps_one_of_each() {
        let (a, b) = (
            SecretsKey::from_bytes([1; SECRETS_KEY_BYTES]),
            SecretsKey::from_bytes([2; SECRETS_KEY_BYTES]),
        );
        let ring = Keyring::new(b.clone())
            .with_previous(a.clone())
            .with_previous(a.clone())
            .with_previous(b.clone());
        assert_eq!(ring.previous.len(), 1);
        assert_eq!(ring.current().id(), b.id());
        assert!(ring.find(&a.id().to_string()).is_some());
        assert!(ring.find("0000000000000000").is_none());
        assert_eq!(ring.describe(), format!("{} (current), {}", b.id(), a.id()));
    }

    #[test]
    fn text_written_for_a_key_is_named() {
        let check = |bytes: &[u8], expect: &str| assert_eq!(length_hint(bytes), expect);
        check(
            &[b'a'; 64],
            " (it looks like hex digits: the file holds the raw bytes, not text)",
        );
        check(
            &[[b'0'; 64].as_slice(), b"\n"].concat(),
            length_hint(&[b'a'; 64]),
        );
        let mut base64 = vec![b'A'; 43];
        base64.push(b'=');
        check(
            &base64,
            " (it looks like base64: the file holds the raw bytes, not text)",
        );
        let mut newline = vec![0u8; 32];
        newline.push(b'\n');
        check(
            &newline,
            " (it ends with a newline: the file holds the raw bytes only)",
        );
        check(&[0u8; 31], "");
    }
}
