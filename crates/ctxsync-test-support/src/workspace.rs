//! A temporary workspace directory that tests write files into.

use std::path::{Path, PathBuf};

/// A temporary directory, removed when dropped.
#[derive(Debug)]
pub struct Workspace {
    dir: tempfile::TempDir,
}

impl Default for Workspace {
    fn default() -> Self {
        Self::new()
    }
}

impl Workspace {
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("a temp workspace"),
        }
    }

    /// The directory, canonical so sources and containment checks see one spelling.
    pub fn path(&self) -> PathBuf {
        self.dir.path().canonicalize().expect("the workspace path")
    }

    /// `relative` inside the workspace (nothing is created).
    pub fn file(&self, relative: &str) -> PathBuf {
        self.path().join(relative)
    }

    /// Writes `content` to `relative`, creating parent directories. Write-then-rename, so
    /// a watcher or resolver never reads a half-written file.
    pub fn write(&self, relative: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let path = self.file(relative);
        std::fs::create_dir_all(path.parent().expect("a file has a parent"))
            .expect("creating the file's directory");
        let name = path
            .file_name()
            .expect("a file has a name")
            .to_string_lossy();
        let temporary = path.with_file_name(format!(".{name}.tmp"));
        std::fs::write(&temporary, content).expect("writing a workspace file");
        std::fs::rename(&temporary, &path).expect("renaming a workspace file into place");
        path
    }

    /// Replaces `relative` atomically (the same as [`Workspace::write`]; the name says
    /// the file existed).
    pub fn replace(&self, relative: &str, content: impl AsRef<[u8]>) {
        self.write(relative, content);
    }

    /// A skill with valid front matter named after its directory.
    pub fn skill(&self, container: &str, name: &str) -> PathBuf {
        self.write(
            &format!("{container}/{name}/SKILL.md"),
            format!("---\nname: {name}\ndescription: The {name} skill.\n---\nBody of {name}.\n"),
        )
    }

    /// A symbolic link at `relative` pointing at `target`.
    pub fn symlink(&self, target: &Path, relative: &str) -> PathBuf {
        let link = self.file(relative);
        std::fs::create_dir_all(link.parent().expect("a link has a parent"))
            .expect("creating the link's directory");
        std::os::unix::fs::symlink(target, &link).expect("creating a symlink");
        link
    }
}
