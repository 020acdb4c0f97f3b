//! One poller for "wait until this holds": bounded by a deadline, failing with a message
//! that says what was awaited and the last state seen.

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

/// Default bound: never reached when the code works, short enough to fail a hung test.
const DEFAULT_DEADLINE: Duration = Duration::from_secs(20);
/// Default pause between probes.
const DEFAULT_EVERY: Duration = Duration::from_millis(25);

/// A bounded wait for `what` (shown when it times out).
#[must_use = "a poll does nothing until `until` or `until_some` is awaited"]
pub struct Poll<'a> {
    what: String,
    deadline: Duration,
    every: Duration,
    explain: Option<Box<dyn Fn() -> String + 'a>>,
}

/// Starts a poll for `what`, bounded by 20 s and probing every 25 ms unless set otherwise.
pub fn poll<'a>(what: impl Into<String>) -> Poll<'a> {
    Poll {
        what: what.into(),
        deadline: DEFAULT_DEADLINE,
        every: DEFAULT_EVERY,
        explain: None,
    }
}

/// A poll that reached its deadline: what was awaited, the last state seen and any
/// explanation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedOut(String);

impl std::fmt::Display for TimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TimedOut {}

impl Debug for Poll<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poll")
            .field("what", &self.what)
            .field("deadline", &self.deadline)
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

impl<'a> Poll<'a> {
    /// Fails once `deadline` has passed without success.
    pub fn within(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// Pauses `every` between probes.
    pub fn every(mut self, every: Duration) -> Self {
        self.every = every;
        self
    }

    /// Adds `explain()`'s text (e.g. a process's log) to the timeout message; only called
    /// on timeout.
    pub fn explain(mut self, explain: impl Fn() -> String + 'a) -> Self {
        self.explain = Some(Box::new(explain));
        self
    }

    /// Probes until `probe` returns `Ok`; panics at the deadline with the last `Err`.
    /// Tokio's clock, so a test on a paused clock waits in virtual time.
    pub async fn until<T, E, F, Fut>(self, probe: F) -> T
    where
        E: Debug,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        match self.try_until(probe).await {
            Ok(value) => value,
            Err(timed_out) => panic!("{timed_out}"),
        }
    }

    /// [`Poll::until`], but the timeout is returned (its text is what `until` panics
    /// with), for helpers whose callers report a failure in their own words.
    pub async fn try_until<T, E, F, Fut>(self, mut probe: F) -> Result<T, TimedOut>
    where
        E: Debug,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let deadline = tokio::time::Instant::now() + self.deadline;
        loop {
            let last = match probe().await {
                Ok(value) => return Ok(value),
                Err(last) => last,
            };
            if tokio::time::Instant::now() >= deadline {
                let extra = self
                    .explain
                    .as_ref()
                    .map(|explain| format!("\n{}", explain()))
                    .unwrap_or_default();
                return Err(TimedOut(format!(
                    "timed out after {:?} waiting for {}; last seen: {last:#?}{extra}",
                    self.deadline, self.what
                )));
            }
            tokio::time::sleep(self.every).await;
        }
    }

    /// [`Poll::until`] for a probe that has no state worth showing.
    pub async fn until_some<T, F, Fut>(self, mut probe: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        self.until(|| {
            let next = probe();
            async move { next.await.ok_or("nothing yet") }
        })
        .await
    }

    /// [`Poll::until`] for a condition.
    pub async fn until_true<F, Fut>(self, mut probe: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        self.until_some(|| {
            let next = probe();
            async move { next.await.then_some(()) }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn returns_the_first_success() {
        let mut probes = 0;
        let got = poll("the third probe")
            .until(|| {
                probes += 1;
                let n = probes;
                async move { if n == 3 { Ok(n) } else { Err(n) } }
            })
            .await;
        assert_eq!(got, 3);
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "waiting for a miracle; last seen: 7")]
    async fn times_out_with_what_and_the_last_state() {
        poll("a miracle")
            .within(Duration::from_secs(1))
            .until(|| async { Err::<(), _>(7) })
            .await;
    }

    #[tokio::test(start_paused = true)]
    async fn try_until_returns_the_timeout_instead_of_panicking() {
        let timed_out = poll("a miracle")
            .within(Duration::from_secs(1))
            .explain(|| "nobody came".to_owned())
            .try_until(|| async { Err::<(), _>(7) })
            .await
            .unwrap_err()
            .to_string();
        assert!(
            timed_out.starts_with("timed out after 1s waiting for a miracle; last seen: 7"),
            "{timed_out}"
        );
        assert!(timed_out.ends_with("\nnobody came"), "{timed_out}");
        let got = poll("at once").try_until(|| async { Ok::<_, ()>(5) }).await;
        assert_eq!(got, Ok(5));
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "the log said: nothing")]
    async fn explains_a_timeout() {
        poll("a line")
            .within(Duration::from_millis(100))
            .explain(|| "the log said: nothing".to_owned())
            .until_true(|| async { false })
            .await;
    }
}
