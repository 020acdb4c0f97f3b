//! The README's quick tour, run as a person would (issue 49): its `sh` blocks are this
//! test's input, so the README cannot drift from the commands. Each line runs in `sh`
//! with the built binary first on `PATH` and `HOME` a fresh directory (so `~/project`
//! and the default data dir `~/.local/share/ctxsync` are new); `ctxsync server` and
//! `ctxsync agent` run in the background, every other line must exit 0.
//!
//! What the test substitutes, and nothing else:
//! - the ports: `ctxsync server` gets `--grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0`
//!   appended, the agent API address the README names (`127.0.0.1:4770`) becomes the one
//!   the server printed, and each chat command (`chats`, `turn`, `call`, `context`, `link`,
//!   `calls`) gets `--server` with the chat API's printed address appended;
//! - after starting the agent it waits until `ctxsync agents list` shows it started, as
//!   a person reading the next block would have;
//! - the capitalised words the README says come from earlier output: `TOKEN` and
//!   `AGENT_ID` from `ctxsync agents create`, `CHAT_ID` from `ctxsync chats create`.
//!
//! Also here: a command given the wrong listener, a refused or missing API token, a new
//! database made by `agents create` and a bad `--public-url` each say so in words.

use std::path::Path;
use std::process::{Output, Stdio};

use ctxsync_test_support::{ServerAddress, server_address};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::processes::{Logs, WAIT, poll};

/// The chat commands: they take the chat API's `--server`.
const CHAT_COMMANDS: [&str; 6] = ["chats", "turn", "call", "context", "link", "calls"];

/// The README's quick tour: every line of its `sh` blocks, comments removed.
fn tour_lines() -> Vec<String> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .expect("reading the README");
    let start = readme
        .find("\n## Quick tour\n")
        .expect("a Quick tour section");
    let section = &readme[start + 1..];
    let section = &section[..section[3..]
        .find("\n## ")
        .map_or(section.len(), |end| end + 3)];
    let mut lines = Vec::new();
    let mut in_sh = false;
    for line in section.lines() {
        match line.trim() {
            "```sh" => in_sh = true,
            "```" => in_sh = false,
            _ if in_sh => {
                let command = without_comment(line);
                if !command.is_empty() {
                    lines.push(command);
                }
            }
            _ => {}
        }
    }
    lines
}

/// `line` without a trailing `# comment` (a `#` after a space, outside quotes).
fn without_comment(line: &str) -> String {
    let (mut single, mut double) = (false, false);
    let mut previous = ' ';
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && previous.is_whitespace() => {
                return line[..i].trim().to_owned();
            }
            _ => {}
        }
        previous = c;
    }
    line.trim().to_owned()
}

/// `word` replaced by `value` where it stands alone (not inside a longer name).
fn substitute(line: &str, word: &str, value: &str) -> String {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find(word) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + word.len()..].chars().next();
        out.push_str(&rest[..at]);
        if before.is_some_and(is_name) || after.is_some_and(is_name) {
            out.push_str(word);
        } else {
            out.push_str(value);
        }
        rest = &rest[at + word.len()..];
    }
    out.push_str(rest);
    out
}

/// The subcommand of a `ctxsync` line (after any `NAME=value` words), if it is one.
fn subcommand(line: &str) -> Option<(&str, Option<&str>)> {
    let mut words = line
        .split_whitespace()
        .skip_while(|word| word.contains('=') && !word.starts_with('-'));
    (words.next() == Some("ctxsync")).then(|| (words.next().unwrap_or(""), words.next()))
}

/// `line` with `exec` before its command (after any `NAME=value` words), so the shell
/// becomes the process and stopping it stops the command.
fn exec(line: &str) -> String {
    let at = line.find("ctxsync ").expect("a ctxsync command");
    format!("{}exec {}", &line[..at], &line[at..])
}

/// A shell for one line: the built binary first on `PATH`, `HOME` the test's own, and
/// none of the variables that would point it elsewhere.
fn shell(home: &Path, line: &str) -> Command {
    let bin = Path::new(env!("CARGO_BIN_EXE_ctxsync")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(line)
        .current_dir(home)
        .env("HOME", home)
        .env("PATH", path)
        .env("RUST_LOG", "info,rmcp=warn")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for name in [
        "XDG_DATA_HOME",
        "CTXSYNC_DATA_DIR",
        "CTXSYNC_AGENT_TOKEN",
        "CTXSYNC_API_TOKEN",
        "CTXSYNC_DATABASE_URL",
        "CTXSYNC_PUBLIC_URL",
        "CTXSYNC_CA_CERT",
        "CTXSYNC_LOG_FORMAT",
    ] {
        command.env_remove(name);
    }
    command
}

async fn finish(command: &mut Command, line: &str) -> Output {
    tokio::time::timeout(WAIT, command.output())
        .await
        .unwrap_or_else(|_| panic!("`{line}` did not finish in time"))
        .expect("running sh")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The value after `label` on a line of `out`.
fn printed<'a>(out: &'a str, label: &str) -> &'a str {
    out.lines()
        .find_map(|line| line.strip_prefix(label))
        .unwrap_or_else(|| panic!("no `{label}` line in:\n{out}"))
        .trim()
}

/// A `ctxsync server` started by `line` (in the background), with its printed addresses.
struct Server {
    child: Child,
    agent_url: String,
    http_url: String,
    links: Option<String>,
}

async fn start_server(home: &Path, line: &str, logs: &Logs) -> Server {
    // `exec`: the server is the shell's process, so stopping it stops the server.
    let mut child = shell(home, &exec(line))
        .stdout(Stdio::piped())
        .stderr(logs.file("server"))
        .spawn()
        .expect("starting the server");
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut agent_url, mut http_url, mut links) = (None, None, None);
    tokio::time::timeout(WAIT, async {
        // The token's line is the last of the start-up lines.
        while let Some(line) = stdout.next_line().await.unwrap() {
            match server_address(&line) {
                Some(ServerAddress::Agent(url)) => agent_url = Some(url),
                Some(ServerAddress::Http(url)) => http_url = Some(url),
                None if line.starts_with("API token:") => break,
                None => {
                    if let Some(rest) = line.strip_prefix("web page links:") {
                        links = Some(rest.trim().to_owned());
                    }
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the server printed no addresses:\n{}", logs.read("server")));
    // The rest of its stdout is drained so it never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = stdout.next_line().await {} });
    Server {
        child,
        agent_url: agent_url.expect("the agent API's address"),
        http_url: http_url.expect("the chat API's address"),
        links,
    }
}

async fn stop(child: &mut Child) {
    if let Some(pid) = child.id() {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    if tokio::time::timeout(WAIT, child.wait()).await.is_err() {
        let _ = child.kill().await;
    }
}

/// What each tour command must have printed; records the values later lines use.
async fn check_output(
    command: (Option<&str>, Option<&str>),
    out: &Output,
    values: &mut Vec<(&'static str, String)>,
    server: &Server,
) {
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    match command {
        (Some("agents"), Some("create")) => {
            values.push(("AGENT_ID", printed(&stdout, "agent id:").to_owned()));
            values.push(("TOKEN", printed(&stdout, "token:").to_owned()));
            // The tour's data dir is the one the server made: no second database.
            assert!(!stderr.contains("a new one is made"), "{stderr}");
        }
        (Some("chats"), Some("create")) => {
            values.push(("CHAT_ID", printed(&stdout, "chat id:").to_owned()));
        }
        (Some("discover"), _) => assert!(stdout.contains("docs"), "{stdout}"),
        (Some("turn"), _) => {
            assert!(stdout.contains("discovery: complete"), "{stdout}");
            assert!(
                stdout.contains("  docs__tool_0 — Fixture tool 0"),
                "{stdout}"
            );
        }
        (Some("call"), _) => assert!(
            stdout.contains(r#"tool_0 called with {"query":"tls"}"#),
            "{stdout}"
        ),
        (Some("context"), _) => assert!(stdout.contains("docs"), "{stdout}"),
        (Some("link"), _) => {
            let link = stdout.trim();
            let chat = &values.iter().find(|(w, _)| *w == "CHAT_ID").unwrap().1;
            assert!(
                link.starts_with(&format!("{}/chats/{chat}?token=", server.http_url)),
                "a full URL under the chat API's address: {link}"
            );
            // What a browser sees first: the link's page with its one button.
            let page = reqwest::get(link).await.unwrap();
            assert_eq!(page.status(), 200);
            assert!(
                page.text()
                    .await
                    .unwrap()
                    .contains("Open the chat's context")
            );
        }
        (Some("calls"), _) => assert!(stdout.contains("docs__tool_0"), "{stdout}"),
        (Some("agents"), Some("list")) => assert!(stdout.contains("laptop"), "{stdout}"),
        (Some("agents"), Some("delete")) => {
            assert!(stdout.contains("deleted agent"), "{stdout}")
        }
        _ => {}
    }
}

#[tokio::test]
async fn the_readme_quick_tour_runs_command_by_command() {
    let lines = tour_lines();
    assert!(
        lines.len() >= 10,
        "the quick tour has too few commands: {lines:#?}"
    );
    assert!(
        lines.iter().all(|line| !line.contains("curl")),
        "the quick tour needs no curl: {lines:#?}"
    );
    let scratch = tempfile::tempdir().unwrap();
    let home = scratch.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let logs = Logs::new();

    let mut server: Option<Server> = None;
    let mut agent: Option<Child> = None;
    let mut values: Vec<(&'static str, String)> = Vec::new();
    let mut ran = Vec::new();
    for raw in &lines {
        let mut line = raw.clone();
        for (word, value) in &values {
            line = substitute(&line, word, value);
        }
        let command = subcommand(&line).map(|(sub, _)| sub.to_owned());
        let action = subcommand(&line).and_then(|(_, action)| action.map(str::to_owned));
        match command.as_deref() {
            Some("server") => {
                let line = format!("{line} --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0");
                server = Some(start_server(&home, &line, &logs).await);
                ran.push(line);
                continue;
            }
            Some("agent") => {
                let agent_url = &server.as_ref().expect("the server runs first").agent_url;
                let line = line.replace("http://127.0.0.1:4770", agent_url);
                assert_ne!(line, *raw, "the agent line names the agent API's address");
                let child = shell(&home, &exec(&line))
                    .stdout(Stdio::null())
                    .stderr(logs.file("agent"))
                    .spawn()
                    .expect("starting the agent");
                agent = Some(child);
                // A person reads the next block before typing it; the test instead waits
                // until the agent has started (a first turn waits for an agent that is
                // running, not for one still starting: the server's --snapshot-grace-ms).
                poll("the agent's first start, as `ctxsync agents list` shows it")
                    .within(WAIT)
                    .until_true(|| {
                        let list = shell(&home, "ctxsync agents list --json").output();
                        async move {
                            let out = list.await.expect("running agents list");
                            serde_json::from_slice::<serde_json::Value>(&out.stdout)
                                .ok()
                                .and_then(|agents| agents.as_array().cloned())
                                .is_some_and(|agents| {
                                    agents.iter().any(|agent| !agent["started_at"].is_null())
                                })
                        }
                    })
                    .await;
                ran.push(line);
                continue;
            }
            Some(sub) if CHAT_COMMANDS.contains(&sub) => {
                let http_url = &server.as_ref().expect("the server runs first").http_url;
                line = format!("{line} --server {http_url}");
            }
            _ => {}
        }
        let out = finish(&mut shell(&home, &line), &line).await;
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            out.status.success(),
            "`{line}` failed ({}):\n{stdout}\n{stderr}\nserver log:\n{}\nagent log:\n{}",
            out.status,
            logs.read("server"),
            logs.read("agent")
        );
        check_output(
            (command.as_deref(), action.as_deref()),
            &out,
            &mut values,
            server.as_ref().expect("the server runs first"),
        )
        .await;
        ran.push(line);
    }
    let mut server = server.expect("the tour starts a server");
    assert_eq!(
        server.links.as_deref(),
        Some(format!("{}/chats/… (`ctxsync link --chat ID`)", server.http_url).as_str()),
        "the server says where page links point"
    );
    let mut agent = agent.expect("the tour starts an agent");
    let agent_log = logs.read("agent");
    assert!(
        !agent_log.contains("looks like the HTTP port"),
        "{agent_log}"
    );
    stop(&mut agent).await;
    stop(&mut server.child).await;
    // Every step of the tour ran, in order (the README's `sh` lines, as substituted).
    assert_eq!(ran.len(), lines.len(), "{ran:#?}");
}

/// Each listener pointed at by the other's commands says which one it is.
#[tokio::test]
async fn a_command_at_the_wrong_listener_names_the_one_it_needs() {
    let scratch = tempfile::tempdir().unwrap();
    let home = scratch.path().to_path_buf();
    let data = home.join("data");
    let logs = Logs::new();
    let data_flag = format!("--data-dir {}", data.display());
    let mut server = start_server(
        &home,
        &format!("ctxsync server {data_flag} --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0"),
        &logs,
    )
    .await;
    let chat = "00000000-0000-4000-8000-000000000000";
    let run = async |line: String| {
        let out = finish(&mut shell(&home, &line), &line).await;
        assert!(!out.status.success(), "`{line}` should fail");
        text(&out.stderr)
    };

    // A chat command at the agent API's port.
    let error = run(format!(
        "ctxsync context --chat {chat} {data_flag} --server {}",
        server.agent_url
    ))
    .await;
    assert!(
        error.contains("this looks like the gRPC port")
            && error.contains(&server.agent_url)
            && error.lines().count() == 1,
        "{error}"
    );

    // The agent at the chat API's port: its log says which port it needs.
    let workspace = home.join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let out = finish(
        &mut shell(
            &home,
            &format!("ctxsync agents create laptop {data_flag} --json"),
        ),
        "agents create",
    )
    .await;
    let created: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut agent = shell(
        &home,
        &exec(&format!(
            "ctxsync agent --no-mcp --server {} --workspace {}",
            server.http_url,
            workspace.display()
        )),
    )
    .env("CTXSYNC_AGENT_TOKEN", created["token"].as_str().unwrap())
    .stdout(Stdio::null())
    .stderr(logs.file("agent"))
    .spawn()
    .unwrap();
    poll("the agent's wrong-port hint")
        .within(WAIT)
        .until_true(|| {
            let hinted = logs.read("agent").contains("this looks like the HTTP port");
            async move { hinted }
        })
        .await;
    let log = logs.read("agent");
    assert!(
        log.contains(&format!("the agent API at {}", server.http_url))
            && log.contains("the agent needs the gRPC one"),
        "{log}"
    );
    stop(&mut agent).await;
    stop(&mut server.child).await;
}

/// A refused or unreadable token names where it came from; `agents create` on a new
/// data dir says it made a database; a bad `--public-url` is refused in words.
#[tokio::test]
async fn refused_tokens_new_data_dirs_and_bad_public_urls_are_named() {
    let scratch = tempfile::tempdir().unwrap();
    let home = scratch.path().to_path_buf();
    let logs = Logs::new();
    let mut server = start_server(
        &home,
        &format!(
            "ctxsync server --data-dir {} --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0",
            home.join("data").display()
        ),
        &logs,
    )
    .await;
    let chat = "00000000-0000-4000-8000-000000000000";
    let run = async |line: String| {
        let out = finish(&mut shell(&home, &line), &line).await;
        assert!(!out.status.success(), "`{line}` should fail");
        text(&out.stderr)
    };

    // A token file of another data dir: refused, naming the file and the address.
    let other = home.join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("api-token"), "not-this-servers-token-at-all").unwrap();
    let error = run(format!(
        "ctxsync link --chat {chat} --data-dir {} --server {}",
        other.display(),
        server.http_url
    ))
    .await;
    let token_file = other.join("api-token");
    assert!(
        error.contains(&format!(
            "the chat API at {} refused the API token read from {}",
            server.http_url,
            token_file.display()
        )) && !error.contains("not-this-servers-token"),
        "{error}"
    );
    // No token file at all: the path and what to give instead.
    let empty = home.join("empty");
    let error = run(format!(
        "CTXSYNC_DATA_DIR={} ctxsync turn --chat {chat} --server {}",
        empty.display(),
        server.http_url
    ))
    .await;
    assert!(
        error.contains(&format!(
            "cannot read the API token from {}",
            empty.join("api-token").display()
        )) && error.contains("--data-dir or CTXSYNC_DATA_DIR"),
        "{error}"
    );

    // `agents create` on a data dir with no database says it makes one.
    let out = finish(
        &mut shell(
            &home,
            &format!("ctxsync agents create stray --data-dir {}", empty.display()),
        ),
        "agents create",
    )
    .await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!("no database was in {}", empty.display())),
        "{}",
        text(&out.stderr)
    );

    // A public URL that is not one.
    let out = finish(
        &mut shell(
            &home,
            "ctxsync server --public-url 'https://ctxsync.example/?a=1'",
        ),
        "server --public-url",
    )
    .await;
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("has a query or fragment"),
        "{}",
        text(&out.stderr)
    );
    stop(&mut server.child).await;
}

#[test]
fn comments_and_placeholders_are_handled_as_documented() {
    assert_eq!(
        without_comment(r##"echo '{"a": "#x"}' > f   # writes f"##),
        r##"echo '{"a": "#x"}' > f"##
    );
    assert_eq!(
        substitute("CTXSYNC_AGENT_TOKEN=TOKEN ctxsync agent", "TOKEN", "t1"),
        "CTXSYNC_AGENT_TOKEN=t1 ctxsync agent"
    );
    assert_eq!(
        subcommand("CTXSYNC_AGENT_TOKEN=t ctxsync agent --server x"),
        Some(("agent", Some("--server")))
    );
    assert_eq!(subcommand("mkdir -p ~/project"), None);
    assert_eq!(
        exec("CTXSYNC_AGENT_TOKEN=t ctxsync agent"),
        "CTXSYNC_AGENT_TOKEN=t exec ctxsync agent"
    );
}

/// `--public-url` makes page links full URLs under it (the API's `link`, `ctxsync link`);
/// a server that listens on a wildcard address without one answers the path, and
/// `ctxsync link` puts it under the address it reached the server at. The page's 401
/// names the command that prints a link.
#[tokio::test]
async fn page_links_are_full_urls_under_the_public_url() {
    let scratch = tempfile::tempdir().unwrap();
    let home = scratch.path().to_path_buf();
    let logs = Logs::new();
    let run = async |line: String| {
        let out = finish(&mut shell(&home, &line), &line).await;
        assert!(out.status.success(), "`{line}`: {}", text(&out.stderr));
        text(&out.stdout)
    };
    for (addr, public, expected) in [
        (
            "127.0.0.1:0",
            " --public-url https://ctxsync.example/team/",
            Some("https://ctxsync.example/team"),
        ),
        ("0.0.0.0:0", "", None),
    ] {
        let data = home.join(format!("data-{}", addr.replace([':', '.'], "-")));
        let data_flag = format!("--data-dir {}", data.display());
        let mut server = start_server(
            &home,
            &format!(
                "ctxsync server {data_flag} --grpc-addr 127.0.0.1:0 --http-addr {addr}{public}"
            ),
            &logs,
        )
        .await;
        assert_eq!(
            server.links,
            expected.map(|base| format!("{base}/chats/… (`ctxsync link --chat ID`)")),
            "{}",
            logs.read("server")
        );
        // The client reaches a wildcard listener on loopback.
        let port = server.http_url.rsplit(':').next().unwrap().to_owned();
        let client_url = format!("http://127.0.0.1:{port}");
        let agent: serde_json::Value =
            serde_json::from_str(&run(format!("ctxsync agents create a {data_flag} --json")).await)
                .unwrap();
        let chat: serde_json::Value = serde_json::from_str(
            &run(format!(
                "ctxsync chats create --agent {} {data_flag} --server {client_url} --json",
                agent["id"].as_str().unwrap()
            ))
            .await,
        )
        .unwrap();
        let chat = chat["id"].as_str().unwrap();
        // A plan turn never waits (the agent never starts here) and is stored as one.
        let turn: serde_json::Value = serde_json::from_str(
            &run(format!(
                "ctxsync turn --chat {chat} --mode plan {data_flag} --server {client_url} --json"
            ))
            .await,
        )
        .unwrap();
        assert_eq!(turn["mode"], "plan", "{turn}");
        assert!(turn["turn_id"].is_string(), "{turn}");
        let link: serde_json::Value = serde_json::from_str(
            &run(format!(
                "ctxsync link --chat {chat} {data_flag} --server {client_url} --json"
            ))
            .await,
        )
        .unwrap();
        let path = link["url"].as_str().unwrap();
        assert!(path.starts_with(&format!("/chats/{chat}?token=")), "{link}");
        let base = expected.map_or(client_url.clone(), str::to_owned);
        assert_eq!(link["link"], format!("{base}{path}"), "{link}");
        let printed = run(format!(
            "ctxsync link --chat {chat} {data_flag} --server {client_url}"
        ))
        .await;
        assert!(
            printed
                .trim()
                .starts_with(&format!("{base}/chats/{chat}?token=")),
            "{printed}"
        );

        let page = reqwest::get(format!("{client_url}/chats/{chat}"))
            .await
            .unwrap();
        assert_eq!(page.status(), 401);
        let page = page.text().await.unwrap();
        assert!(
            page.contains(&format!("`ctxsync link --chat {chat}` prints one")),
            "{page}"
        );
        stop(&mut server.child).await;
    }
}
