//! Degraded watching with real files and the real platform watcher: a workspace with
//! thousands of files and a watch budget far below the directories the resolver wants.
//! The budget is how these tests reach "the limit" without touching the machine-wide
//! inotify settings; the system's own limit takes the same path in the watcher.

use crate::support;

use std::time::{Duration, Instant};

use ctxsync_agent_publication::{
    DEFAULT_MAX_WATCHED_DIRS, PublishError, Publisher, PublisherStatus,
};
use ctxsync_protocol::v1::PushContextStateRequest;
use ctxsync_protocol::v1::context_resource::Status;
use support::{FakeServer, Recorder, WAIT, Workspace, config};
use tokio::sync::watch;
use tokio::task::JoinHandle;

type Running = JoinHandle<Result<std::convert::Infallible, PublishError>>;

/// Skill directories per container: 600 in all, over the resolver's 500-resource cap.
const SKILL_DIRS: [(&str, usize); 3] = [
    ("skills", 300),
    (".agents/skills", 150),
    (".claude/skills", 150),
];
/// The scan root, `.agents`, `.claude` and the three skill containers.
const FIXED_DIRS: usize = 6;
const WANTED_DIRS: usize = FIXED_DIRS + 300 + 150 + 150;
const SMALL_BUDGET: usize = 20;
/// Small, so polling finds a change quickly; real budgets are far larger.
const POLL_INTERVAL: Duration = Duration::from_millis(300);
const WATCHING: &str = "watching context files:";

/// 2001 files: per skill directory a `SKILL.md` (every tenth invalid) and two files no
/// rule matches; 200 unrelated documents; one instruction file.
fn big_workspace() -> (Workspace, usize) {
    let ws = Workspace::new();
    let mut files = 0;
    ws.write("AGENTS.md", "Be brief.");
    files += 1;
    for (container, count) in SKILL_DIRS {
        for i in 0..count {
            let name = format!("s-{i:04}");
            if i % 10 == 9 {
                ws.write(
                    &format!("{container}/{name}/SKILL.md"),
                    "---\nname: Not_Kebab\n---\n",
                );
            } else {
                ws.skill(container, &name);
            }
            ws.write(&format!("{container}/{name}/README.md"), "not a skill");
            ws.write(&format!("{container}/{name}/notes.txt"), "not a skill");
            files += 3;
        }
    }
    for i in 0..200 {
        ws.write(&format!("docs/page-{i:03}.md"), "documentation");
        files += 1;
    }
    (ws, files)
}

fn start(url: &str, ws: &Workspace, budget: usize) -> (Running, watch::Receiver<PublisherStatus>) {
    let mut config = config(url, &ws.path());
    config.max_watched_dirs = budget;
    config.timing.poll_interval = POLL_INTERVAL;
    let publisher = Publisher::new(config, None).unwrap();
    let status = publisher.status();
    (tokio::spawn(publisher.run()), status)
}

fn error(push: &PushContextStateRequest) -> &str {
    &push.snapshot_error
}

fn row<'a>(
    push: &'a PushContextStateRequest,
    source: &str,
) -> Option<&'a ctxsync_protocol::v1::ContextResource> {
    push.resources.iter().find(|r| r.source == source)
}

#[tokio::test]
async fn over_the_budget_snapshots_say_so_and_polling_still_publishes() {
    let (ws, files) = big_workspace();
    assert_eq!(files, 2001);
    let server = FakeServer::start(Recorder::new()).await;
    let (running, mut status) = start(&server.url(), &ws, SMALL_BUDGET);

    let first = server
        .recorder
        .wait_for_push("a degraded snapshot", |p| error(p).contains(WATCHING))
        .await;
    let text = error(&first);
    assert!(
        text.contains(&format!(
            "{WANTED_DIRS} directories exceed the watch budget of {SMALL_BUDGET}"
        )),
        "{text}"
    );
    assert!(text.contains("polling every 300 ms"), "{text}");
    // The resolver's cap note is kept beside it.
    assert!(text.contains("101 resources excluded"), "{text}");
    assert!(text.len() <= ctxsync_protocol::limits::MAX_ERROR_BYTES);
    let excluded = first
        .resources
        .iter()
        .filter(|r| r.status == Status::Excluded as i32)
        .count();
    assert_eq!(excluded, 101);
    assert_eq!(first.resources.len(), 601);

    // Watched shallowest first: the root, `.agents`, `.claude`, the three containers and
    // the first 14 of `skills/*`. `skills/s-0250` is not watched, and a file changed inside
    // it raises no event in its watched parent: only polling can find the change.
    // Startup resolves twice (the second covers changes made while the watches began);
    // change the file only after both, so only a later resolve can see it.
    tokio::time::timeout(WAIT, status.wait_for(|s| s.resolves >= 2))
        .await
        .expect("the startup resolves")
        .unwrap();
    let source = "skills/s-0250/SKILL.md";
    let before = row(&first, source).expect("the row").content_hash.clone();
    let changed_at = Instant::now();
    ws.replace(
        source,
        "---\nname: s-0250\ndescription: Changed while degraded.\n---\n",
    );
    let after = server
        .recorder
        .wait_for_push("the change found by polling", |p| {
            row(p, source).is_some_and(|r| r.content_hash != before)
        })
        .await;
    eprintln!(
        "{files} files, {WANTED_DIRS} directories wanted, budget {SMALL_BUDGET}: \
         a change in an unwatched directory was published after {:?} (poll interval {POLL_INTERVAL:?})",
        changed_at.elapsed()
    );
    assert!(error(&after).contains(WATCHING), "still degraded");
    assert!(after.version > first.version);

    // Fewer directories than the budget: everything is watched, the note goes away (and
    // with 19 resources, so does the resolver's).
    std::fs::remove_dir_all(ws.path().join(".agents")).unwrap();
    std::fs::remove_dir_all(ws.path().join(".claude")).unwrap();
    for i in 18..300 {
        std::fs::remove_dir_all(ws.path().join(format!("skills/s-{i:04}"))).unwrap();
    }
    let recovered = server
        .recorder
        .wait_for_push("the note cleared", |p| {
            p.snapshot_error.is_empty() && p.resources.len() == 19
        })
        .await;
    assert!(recovered.version > after.version);

    // Watching again: a change in a skill directory is published by its event.
    let before = row(&recovered, "skills/s-0017/SKILL.md")
        .expect("the row")
        .content_hash
        .clone();
    ws.replace(
        "skills/s-0017/SKILL.md",
        "---\nname: s-0017\ndescription: Changed while watched.\n---\n",
    );
    server
        .recorder
        .wait_for_push("the watched change", |p| {
            row(p, "skills/s-0017/SKILL.md").is_some_and(|r| r.content_hash != before)
                && p.snapshot_error.is_empty()
        })
        .await;
    running.abort();
}

#[tokio::test]
async fn within_the_default_budget_only_the_resolver_caps_remain() {
    let (ws, _) = big_workspace();
    let server = FakeServer::start(Recorder::new()).await;
    let (running, _status) = start(&server.url(), &ws, DEFAULT_MAX_WATCHED_DIRS);
    let first = server
        .recorder
        .wait_for_push("a snapshot", |p| p.resources.len() == 601)
        .await;
    let text = error(&first);
    assert!(text.contains("101 resources excluded"), "{text}");
    assert!(!text.contains(WATCHING), "{text}");
    running.abort();
}

/// Entering and leaving degraded watching changes no resource, only the snapshot error:
/// each is still a new version (with the same aggregate hash).
#[tokio::test]
async fn a_snapshot_error_change_alone_is_published() {
    let ws = Workspace::new();
    ws.write("AGENTS.md", "Be brief.");
    ws.skill("skills", "a");
    let server = FakeServer::start(Recorder::new()).await;
    // Wanted: the root, `skills` and `skills/a`.
    let (running, _status) = start(&server.url(), &ws, 3);
    let first = server.recorder.wait_for_push("a snapshot", |_| true).await;
    assert_eq!(first.snapshot_error, "");

    // An empty directory adds a directory to watch, not a resource.
    std::fs::create_dir(ws.path().join("skills/b")).unwrap();
    let degraded = server
        .recorder
        .wait_for_push("the degraded snapshot", |p| error(p).contains(WATCHING))
        .await;
    assert!(
        error(&degraded).contains("4 directories exceed the watch budget of 3"),
        "{}",
        error(&degraded)
    );
    assert!(degraded.version > first.version);
    assert_eq!(degraded.aggregate_hash, first.aggregate_hash);

    std::fs::remove_dir(ws.path().join("skills/b")).unwrap();
    let cleared = server
        .recorder
        .wait_for_push("the cleared snapshot", |p| {
            p.version > degraded.version && p.snapshot_error.is_empty()
        })
        .await;
    assert_eq!(cleared.aggregate_hash, first.aggregate_hash);
    running.abort();
}
