//! A minimal W3C WebDriver client for the browser tests: only the commands they need, over
//! plain HTTP to a local chromedriver, and where the browser and its driver are. Kept
//! rather than `fantoccini`/`thirtyfour` (ARCHITECTURE.md, Tests): the CSP checks need
//! ChromeDriver's non-W3C console log, and those crates would add a second ICU
//! generation and more to every test build.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

/// The browser and its driver: Debian's packages by default; `CTXSYNC_CHROMIUM` and
/// `CTXSYNC_CHROMEDRIVER` point elsewhere (e.g. a CI image's preinstalled Chrome).
pub(crate) fn browser_paths() -> (PathBuf, PathBuf) {
    let path = |var: &str, default: &str| {
        std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from)
    };
    (
        path("CTXSYNC_CHROMIUM", "/usr/bin/chromium"),
        path("CTXSYNC_CHROMEDRIVER", "/usr/bin/chromedriver"),
    )
}

pub(crate) fn browser_available() -> bool {
    let (chromium, chromedriver) = browser_paths();
    let present = chromium.exists() && chromedriver.exists();
    if !present {
        let (chromium, chromedriver) = (chromium.display(), chromedriver.display());
        if std::env::var_os("CI").is_some() {
            panic!(
                "{chromium} and {chromedriver} are required in CI (apt-get install chromium chromium-driver, or set CTXSYNC_CHROMIUM and CTXSYNC_CHROMEDRIVER)"
            );
        }
        eprintln!(
            "SKIPPED: the browser test needs {chromium} and {chromedriver} (apt-get install chromium chromium-driver)"
        );
    }
    present
}

/// A running chromedriver with one headless Chromium session; both end on drop.
pub(crate) struct Browser {
    http: reqwest::Client,
    base: String,
    session: String,
    _driver: Child,
}

impl Browser {
    /// Starts chromedriver on a free loopback port and opens a headless session.
    pub(crate) async fn start(chromium: &Path, chromedriver: &Path) -> Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", chromedriver.display()))?;
        let http = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        // chromedriver takes a moment to listen; bounded wait.
        let mut ready = false;
        for _ in 0..100 {
            if let Ok(r) = http.get(format!("{base}/status")).send().await
                && r.status().is_success()
            {
                ready = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if !ready {
            bail!("chromedriver did not start listening on port {port}");
        }
        let profile =
            std::env::temp_dir().join(format!("ctxsync-chromium-{}-{port}", std::process::id()));
        let caps = json!({
            "capabilities": { "alwaysMatch": {
                "browserName": "chrome",
                // Keeps the console (CSP violations land there) for `console_log`.
                "goog:loggingPrefs": { "browser": "ALL" },
                "goog:chromeOptions": {
                    "binary": chromium.to_string_lossy(),
                    "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                             "--disable-background-networking", "--disable-component-update", "--disable-sync",
                             "--window-size=1000,1400", format!("--user-data-dir={}", profile.display())]
                }
            }}
        });
        let response: Value = http
            .post(format!("{base}/session"))
            .json(&caps)
            .send()
            .await?
            .json()
            .await?;
        let session = response["value"]["sessionId"]
            .as_str()
            .with_context(|| format!("no session in {response}"))?
            .to_string();
        Ok(Self {
            http,
            base,
            session,
            _driver: driver,
        })
    }

    async fn command(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value> {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let mut request = self.http.request(method, url);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response: Value = request.send().await?.json().await?;
        if let Some(error) = response["value"]["error"].as_str() {
            bail!(
                "webdriver {path}: {error}: {}",
                response["value"]["message"]
            );
        }
        Ok(response["value"].clone())
    }

    pub(crate) async fn goto(&self, url: &str) -> Result<()> {
        self.command(reqwest::Method::POST, "/url", Some(json!({ "url": url })))
            .await
            .map(drop)
    }

    pub(crate) async fn current_url(&self) -> Result<String> {
        Ok(self
            .command(reqwest::Method::GET, "/url", None)
            .await?
            .as_str()
            .unwrap_or_default()
            .to_string())
    }

    /// Runs a script in the page and returns its value.
    pub(crate) async fn eval(&self, script: &str) -> Result<Value> {
        self.command(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({ "script": script, "args": [] })),
        )
        .await
    }

    /// The visible text of the first element matching a CSS selector, if any.
    pub(crate) async fn text(&self, selector: &str) -> Result<Option<String>> {
        let script = format!(
            "const e = document.querySelector({}); return e ? e.innerText : null;",
            serde_json::to_string(selector)?
        );
        Ok(self.eval(&script).await?.as_str().map(str::to_owned))
    }

    /// Waits (bounded) until `predicate` holds for the page's evaluated `script`.
    pub(crate) async fn wait_for(&self, script: &str, timeout: Duration) -> Result<Value> {
        // A failed evaluation ends the wait at once (`Ok(Err)`); only a falsy value waits.
        ctxsync_test_support::poll(format!("`{script}`"))
            .within(timeout)
            .every(Duration::from_millis(50))
            .try_until(|| async {
                match self.eval(script).await {
                    Ok(value) if value.is_null() || value == Value::Bool(false) => Err(value),
                    settled => Ok(settled),
                }
            })
            .await?
    }

    /// The WebDriver id of the first element matching a CSS selector.
    async fn element(&self, selector: &str) -> Result<String> {
        let element = self
            .command(
                reqwest::Method::POST,
                "/element",
                Some(json!({ "using": "css selector", "value": selector })),
            )
            .await?;
        Ok(element
            .as_object()
            .and_then(|e| e.values().next())
            .and_then(Value::as_str)
            .with_context(|| format!("no element id for {selector} in {element}"))?
            .to_string())
    }

    /// Clicks the first element matching a CSS selector (a real click: it submits forms
    /// and runs the page's own handlers).
    pub(crate) async fn click(&self, selector: &str) -> Result<()> {
        let id = self.element(selector).await?;
        self.command(
            reqwest::Method::POST,
            &format!("/element/{id}/click"),
            Some(json!({})),
        )
        .await
        .map(drop)
    }

    /// Types `text` into the first element matching a CSS selector, key by key as a
    /// person would (the page sees real `input` events).
    pub(crate) async fn type_into(&self, selector: &str, text: &str) -> Result<()> {
        let id = self.element(selector).await?;
        self.command(
            reqwest::Method::POST,
            &format!("/element/{id}/value"),
            Some(json!({ "text": text })),
        )
        .await
        .map(drop)
    }

    /// Runs an asynchronous script in the page: it ends by calling its last argument
    /// with the value to return. Bounded by `timeout`.
    pub(crate) async fn eval_async(&self, script: &str, timeout: Duration) -> Result<Value> {
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        self.command(
            reqwest::Method::POST,
            "/timeouts",
            Some(json!({ "script": ms })),
        )
        .await?;
        self.command(
            reqwest::Method::POST,
            "/execute/async",
            Some(json!({ "script": script, "args": [] })),
        )
        .await
    }

    /// The browser console's messages since the last call (chromedriver's log endpoint).
    pub(crate) async fn console_log(&self) -> Result<Vec<String>> {
        let entries = self
            .command(
                reqwest::Method::POST,
                "/se/log",
                Some(json!({ "type": "browser" })),
            )
            .await?;
        Ok(entries
            .as_array()
            .context("the console log is a list")?
            .iter()
            .map(|entry| format!("{} {}", entry["level"], entry["message"]))
            .collect())
    }

    /// Resizes the window: a phone-sized one shows whether the page's layout holds.
    pub(crate) async fn set_window_size(&self, width: u32, height: u32) -> Result<()> {
        let rect = json!({ "width": width, "height": height });
        self.command(reqwest::Method::POST, "/window/rect", Some(rect))
            .await
            .map(drop)
    }

    /// Saves a PNG of the browser's viewport at `path` (its directory is created).
    pub(crate) async fn screenshot(&self, path: &Path) -> Result<()> {
        use base64::Engine as _;
        let data = self
            .command(reqwest::Method::GET, "/screenshot", None)
            .await?;
        let png = base64::engine::general_purpose::STANDARD
            .decode(data.as_str().context("screenshot data")?)?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, png)?;
        Ok(())
    }

    pub(crate) async fn close(self) -> Result<()> {
        self.http
            .delete(format!("{}/session/{}", self.base, self.session))
            .send()
            .await?;
        Ok(())
    }
}
