//! Keeps heavy tests apart from each other and from timing-bound tests.
//!
//! Each crate's integration tests are one binary, so tests that used to run in separate
//! binaries (one after another) now share a process and the machine's cores. A test that
//! loads the machine (a browser, HAProxy with replicas, fault injection, two servers)
//! holds [`heavy`]'s guard for its whole run; a test that asserts how long something
//! took holds [`timing_bound`]'s. A heavy test runs beside no other heavy or
//! timing-bound test; timing-bound tests may run beside each other, as they did in their
//! own binaries; light tests are never held up. A tokio lock, so it works across the
//! per-test runtimes (`heavy` is its write side, `timing_bound` its read side).

use std::sync::LazyLock;

use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

static MACHINE: LazyLock<RwLock<()>> = LazyLock::new(|| RwLock::new(()));

/// Held for a heavy test's whole run; dropping it lets the next one start.
#[derive(Debug)]
#[must_use = "the guard only keeps tests apart while it is held"]
pub struct HeavyTest {
    _held: RwLockWriteGuard<'static, ()>,
}

/// Held for a timing-bound test's whole run.
#[derive(Debug)]
#[must_use = "the guard only keeps tests apart while it is held"]
pub struct TimingBound {
    _held: RwLockReadGuard<'static, ()>,
}

/// Waits until no other heavy or timing-bound test of this binary runs; hold the guard
/// to the test's end.
pub async fn heavy() -> HeavyTest {
    HeavyTest {
        _held: MACHINE.write().await,
    }
}

/// Waits until no heavy test of this binary runs; hold the guard to the test's end.
pub async fn timing_bound() -> TimingBound {
    TimingBound {
        _held: MACHINE.read().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_heavy_test_waits_for_timing_bound_ones_and_they_for_it() {
        let first = timing_bound().await;
        let second = timing_bound().await;
        let mut heavy_test = std::pin::pin!(heavy());
        assert!(
            futures_poll_once(heavy_test.as_mut()).await.is_none(),
            "a heavy test starts only when no timing-bound test runs"
        );
        drop((first, second));
        let held = heavy_test.await;
        assert!(
            futures_poll_once(std::pin::pin!(timing_bound()))
                .await
                .is_none(),
            "a timing-bound test waits for the heavy one"
        );
        drop(held);
        let _again = timing_bound().await;
    }

    /// Polls `future` once: `Some` if it finished.
    async fn futures_poll_once<F: Future>(future: std::pin::Pin<&mut F>) -> Option<F::Output> {
        tokio::time::timeout(std::time::Duration::ZERO, future)
            .await
            .ok()
    }
}
