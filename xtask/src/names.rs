//! The naming checks (`cargo xtask tidy`): a concept has one name. No two public types of
//! the workspace share a name unless the doc comment of each names the other by path
//! (why they differ is then said where a reader meets them), and nothing is re-exported
//! under another name (`pub use a::B as C`), single- or multi-line; `as _` is fine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One `pub struct|enum|trait|type` declaration.
#[derive(Debug)]
struct Declaration {
    file: PathBuf,
    line: usize,
    name: String,
    /// The `///` lines right above it (attributes between are skipped).
    doc: String,
}

/// Library sources under `root`'s `crates/*/src` (generated code included: its types
/// are public too); tests, examples and benchmarks are not an API.
fn library_files(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    let Ok(crates) = std::fs::read_dir(root.join("crates")) else {
        return files;
    };
    for krate in crates.flatten() {
        walk(&krate.path().join("src"), &mut files);
    }
    files.sort();
    files
}

fn declarations(file: &Path, text: &str) -> Vec<Declaration> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let Some(rest) = ["pub struct ", "pub enum ", "pub trait ", "pub type "]
            .iter()
            .find_map(|keyword| trimmed.strip_prefix(keyword))
        else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue;
        }
        // The item's doc lines: every `///` line between it and the previous item (a
        // blank line or a line closing something), attributes of any length skipped.
        let mut doc = Vec::new();
        let mut above = index;
        while above > 0 {
            above -= 1;
            let previous = lines[above].trim();
            if let Some(text) = previous.strip_prefix("///") {
                doc.push(text.trim());
            } else if previous.is_empty() || previous.ends_with(['}', ';', '{']) {
                break;
            }
        }
        doc.reverse();
        found.push(Declaration {
            file: file.to_owned(),
            line: index + 1,
            name,
            doc: doc.join(" "),
        });
    }
    found
}

/// True when `doc` names some `path::name` in backticks.
fn names_a_namesake(doc: &str, name: &str) -> bool {
    doc.split('`')
        .skip(1)
        .step_by(2)
        .any(|code| code.contains("::") && code.ends_with(name))
}

/// Every public type name declared more than once where some declaration's doc comment
/// does not name another by path, as sentences.
pub(crate) fn shared_names(root: &Path) -> Vec<String> {
    let mut by_name: BTreeMap<String, Vec<Declaration>> = BTreeMap::new();
    for file in library_files(root) {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for declaration in declarations(&file, &text) {
            by_name
                .entry(declaration.name.clone())
                .or_default()
                .push(declaration);
        }
    }
    let mut problems = Vec::new();
    for (name, declared) in by_name {
        if declared.len() < 2 {
            continue;
        }
        for declaration in &declared {
            if !names_a_namesake(&declaration.doc, &name) {
                let others: Vec<String> = declared
                    .iter()
                    .filter(|other| other.file != declaration.file)
                    .map(|other| relative(root, &other.file))
                    .collect();
                problems.push(format!(
                    "{}:{}: the public type `{name}` is also declared in {}; rename one, or say \
                     in each doc comment why both exist, naming the other by path",
                    relative(root, &declaration.file),
                    declaration.line,
                    others.join(", ")
                ));
            }
        }
    }
    problems
}

/// Every `pub use` or `pub(crate) use` that renames what it re-exports, as sentences.
pub(crate) fn renaming_reexports(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    for dir in ["crates", "xtask"] {
        crate::tidy::rust_files(&root.join(dir), &mut files);
    }
    files.sort();
    let mut problems = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for (line, statement) in use_statements(&text) {
            if renames(&statement) {
                problems.push(format!(
                    "{}:{line}: `{statement}` re-exports under another name; use the item's own name",
                    relative(root, &file)
                ));
            }
        }
    }
    problems
}

/// Each `pub use …;` / `pub(…) use …;` statement with the line it starts on, its lines
/// joined by spaces.
fn use_statements(text: &str) -> Vec<(usize, String)> {
    let mut statements = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if current.is_none() {
            let public = trimmed.starts_with("pub use ")
                || (trimmed.starts_with("pub(") && trimmed.contains(") use "));
            if !public {
                continue;
            }
            current = Some((index + 1, String::new()));
        }
        if let Some((_, statement)) = current.as_mut() {
            if !statement.is_empty() {
                statement.push(' ');
            }
            statement.push_str(trimmed);
            if trimmed.ends_with(';') {
                statements.extend(current.take());
            }
        }
    }
    statements
}

/// True when a use statement has `as NAME` with a name other than `_`.
fn renames(statement: &str) -> bool {
    let words: Vec<&str> = statement
        .split(|c: char| c.is_whitespace() || matches!(c, ',' | '{' | '}' | ';'))
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .any(|pair| pair[0] == "as" && pair[1] != "_")
}

fn relative(root: &Path, file: &Path) -> String {
    file.strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renaming_reexports_are_found_on_one_line_or_several() {
        let check = |text: &str, expect: bool| {
            let found = use_statements(text).iter().any(|(_, s)| renames(s));
            assert_eq!(found, expect, "{text}");
        };
        check("pub use a::B as C;", true);
        check("pub(crate) use a::{B, C as D};", true);
        check("pub use a::{\n    B,\n    C as D,\n};", true);
        check("pub use a::Trait as _;", false);
        check("pub use a::{B, C};", false);
        check("use a::B as C;", false);
        check("pub(super) use a::{\n    Alias,\n    asked,\n};", false);
    }

    #[test]
    fn a_shared_name_needs_each_doc_to_name_the_other() {
        let dir = std::env::temp_dir().join(format!("ctxsync-names-{}", std::process::id()));
        let write = |path: &str, text: &str| {
            let path = dir.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write("crates/a/src/lib.rs", "/// One.\npub struct Same;\n");
        write(
            "crates/b/src/lib.rs",
            "/// Differs from `a::Same`.\n#[derive(Debug)]\npub struct Same;\n",
        );
        let problems = shared_names(&dir);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("crates/a/src/lib.rs:2:"),
            "{problems:?}"
        );
        write(
            "crates/a/src/lib.rs",
            "/// Not `b::Same`: it is another.\npub struct Same;\n",
        );
        let problems = shared_names(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(problems.is_empty(), "{problems:?}");
    }

    #[test]
    fn the_workspace_has_one_name_per_concept() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let mut problems = shared_names(root);
        problems.extend(renaming_reexports(root));
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
}
