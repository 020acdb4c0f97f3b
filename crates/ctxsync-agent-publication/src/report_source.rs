//! The seam through which the MCP engine's report reaches the publisher: a
//! [`ReportSource`] hands out the engine's own `ctxsync_mcp_model::Report`, shared, never
//! copied or mapped.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ctxsync_mcp_model::Report;
use tokio::sync::watch;

/// The engine's report stream ended for good (the engine was dropped).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the discovery report source was closed")]
pub struct SourceClosed;

/// A future returned by [`ReportSource::changed`].
pub type ChangedFuture<'a> = Pin<Box<dyn Future<Output = Result<(), SourceClosed>> + Send + 'a>>;

/// Where the publisher reads discovery reports from.
///
/// The publisher calls [`sample`](Self::sample) exactly once per resolve, before walking
/// the file system, so the phase, servers and config outcomes of one snapshot describe one
/// engine state; between resolves it awaits [`changed`](Self::changed).
pub trait ReportSource: Send + 'static {
    /// The current report; marks it seen. Must never block on I/O.
    fn sample(&mut self) -> Arc<Report>;

    /// Completes when a report newer than the last sampled one exists (at once if one
    /// already does), or with [`SourceClosed`] when no new report will ever come.
    fn changed(&mut self) -> ChangedFuture<'_>;
}

/// The receiving half of a `watch` channel of reports: what the engine's `subscribe()`
/// returns, so the engine plugs in as it is. It closes when the engine is closed or
/// dropped.
impl ReportSource for watch::Receiver<Arc<Report>> {
    fn sample(&mut self) -> Arc<Report> {
        self.borrow_and_update().clone()
    }

    fn changed(&mut self) -> ChangedFuture<'_> {
        Box::pin(async move {
            watch::Receiver::changed(self)
                .await
                .map_err(|_| SourceClosed)
        })
    }
}

#[cfg(test)]
mod tests {
    use ctxsync_mcp_model::{McpTool, ReportPhase, ServerReport};

    use super::*;

    #[test]
    fn sampling_hands_out_the_engine_report_itself() {
        let report = Arc::new(Report {
            phase: ReportPhase::Complete,
            servers: vec![ServerReport {
                name: "fs".into(),
                connected: true,
                tools: vec![McpTool::default(); 3].into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        let (_tx, mut rx) = watch::channel(report.clone());
        let sampled = rx.sample();
        // Neither the report nor its tool lists are copied on the way.
        assert!(Arc::ptr_eq(&sampled, &report));
        assert!(Arc::ptr_eq(
            &sampled.servers[0].tools,
            &report.servers[0].tools
        ));
    }

    #[test]
    fn a_sampled_report_is_marked_seen() {
        let (tx, mut rx) = watch::channel(Arc::new(Report::default()));
        tx.send_replace(Arc::new(Report {
            phase: ReportPhase::Complete,
            ..Default::default()
        }));
        assert!(rx.has_changed().unwrap());
        assert_eq!(rx.sample().phase, ReportPhase::Complete);
        assert!(!rx.has_changed().unwrap());
    }

    #[test]
    fn the_first_report_is_pending() {
        let (_tx, mut rx) = watch::channel(Arc::new(Report::default()));
        assert_eq!(rx.sample().phase, ReportPhase::Pending);
    }

    #[tokio::test]
    async fn follows_the_subscription_and_closes_with_it() {
        let (tx, mut source) = watch::channel(Arc::new(Report::default()));
        let first = source.sample();
        assert_eq!(first.phase, ReportPhase::Pending);
        // An unchanged report is the same value.
        assert!(Arc::ptr_eq(&first, &source.sample()));

        tx.send_replace(Arc::new(Report {
            phase: ReportPhase::Complete,
            ..Default::default()
        }));
        ReportSource::changed(&mut source).await.expect("a change");
        assert_eq!(source.sample().phase, ReportPhase::Complete);

        drop(tx);
        assert_eq!(ReportSource::changed(&mut source).await, Err(SourceClosed));
    }
}
