//! The adapter from the MCP engine (layer 1) to the publisher: maps the engine's
//! [`Report`] to this crate's [`DiscoveryReport`] and follows the engine's subscription.
//! Tools, server details and pending servers are the engine's own records (tool lists
//! shared, not copied).

use std::sync::Arc;

use ctxsync_agent_diagnostics::{Engine, Phase, Report};
use tokio::sync::watch;

use crate::report::{
    ChangedFuture, ConfigOutcome, DiscoveryReport, ReportPhase, ReportSource, ServerOutcome,
    SourceClosed,
};

/// The engine's report in the publisher's terms: phase, every server with a result (with
/// its tools, error or warning, and what it said about itself), every config file's
/// outcome, and the servers still connecting, in the engine's order.
pub fn discovery_report(report: &Report) -> DiscoveryReport {
    DiscoveryReport {
        phase: match report.phase {
            Phase::Pending => ReportPhase::Pending,
            Phase::Complete => ReportPhase::Complete,
        },
        servers: report
            .servers
            .iter()
            .map(|server| ServerOutcome {
                name: server.name.clone(),
                connected: server.connected,
                tools: server.tools.clone(),
                error: server.error.clone(),
                warning: server.warning.clone(),
                details: server.details.clone(),
                always_load: server.always_load,
            })
            .collect(),
        config_outcomes: report
            .config_outcomes
            .iter()
            .map(|outcome| ConfigOutcome {
                path: outcome.path.clone(),
                error: outcome.error.clone(),
                warning: outcome.warning.clone(),
            })
            .collect(),
        pending: report.pending.clone(),
    }
}

/// A [`ReportSource`] following an [`Engine`]'s report subscription. It closes when the
/// engine is closed or dropped.
#[derive(Debug)]
pub struct EngineReports {
    reports: watch::Receiver<Arc<Report>>,
    /// The last engine report converted and its conversion, so sampling an unchanged
    /// report does not copy every tool again.
    last: Option<(Arc<Report>, Arc<DiscoveryReport>)>,
}

impl EngineReports {
    /// Follows `engine`'s reports from now on.
    pub fn new(engine: &Engine) -> Self {
        Self::from_receiver(engine.subscribe())
    }

    /// Follows a report subscription (what [`Engine::subscribe`] returns).
    pub fn from_receiver(reports: watch::Receiver<Arc<Report>>) -> Self {
        Self {
            reports,
            last: None,
        }
    }
}

impl ReportSource for EngineReports {
    fn sample(&mut self) -> Arc<DiscoveryReport> {
        let report = self.reports.borrow_and_update().clone();
        match &self.last {
            Some((seen, converted)) if Arc::ptr_eq(seen, &report) => converted.clone(),
            _ => {
                let converted = Arc::new(discovery_report(&report));
                self.last = Some((report, converted.clone()));
                converted
            }
        }
    }

    fn changed(&mut self) -> ChangedFuture<'_> {
        Box::pin(async move { self.reports.changed().await.map_err(|_| SourceClosed) })
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use ctxsync_agent_diagnostics::{ServerReport, ToolInfo};
    use ctxsync_protocol::McpTool;

    use super::*;

    fn check(report: Report, expect: DiscoveryReport) {
        assert_eq!(discovery_report(&report), expect);
    }

    #[test]
    fn every_field_is_carried_over() {
        let schema = serde_json::json!({"type": "object"});
        check(
            Report {
                phase: Phase::Complete,
                servers: vec![
                    ServerReport {
                        name: "fs".into(),
                        connected: true,
                        tools: vec![ToolInfo {
                            name: "read".into(),
                            description: "Reads".into(),
                            input_schema: schema.clone(),
                            ..Default::default()
                        }]
                        .into(),
                        error: None,
                        warning: Some("kept old tools".into()),
                        details: None,
                        always_load: true,
                    },
                    ServerReport {
                        name: "gone".into(),
                        connected: false,
                        tools: Arc::default(),
                        error: Some("command not found: gone".into()),
                        warning: None,
                        details: None,
                        always_load: false,
                    },
                ],
                config_outcomes: vec![ctxsync_agent_diagnostics::ConfigOutcome {
                    path: PathBuf::from("/w/.mcp.json"),
                    error: Some("entry `bad`: both command and url".into()),
                    warning: Some("duplicate".into()),
                }],
                pending: Vec::new(),
            },
            DiscoveryReport {
                phase: ReportPhase::Complete,
                servers: vec![
                    ServerOutcome {
                        name: "fs".into(),
                        connected: true,
                        tools: vec![McpTool {
                            name: "read".into(),
                            description: "Reads".into(),
                            input_schema: schema,
                            ..Default::default()
                        }]
                        .into(),
                        error: None,
                        warning: Some("kept old tools".into()),
                        always_load: true,
                        ..Default::default()
                    },
                    ServerOutcome {
                        name: "gone".into(),
                        connected: false,
                        tools: Arc::default(),
                        error: Some("command not found: gone".into()),
                        warning: None,
                        ..Default::default()
                    },
                ],
                config_outcomes: vec![ConfigOutcome {
                    path: PathBuf::from("/w/.mcp.json"),
                    error: Some("entry `bad`: both command and url".into()),
                    warning: Some("duplicate".into()),
                }],
                ..Default::default()
            },
        );
    }

    #[test]
    fn tool_lists_are_shared_with_the_engine_not_copied() {
        let report = Report {
            phase: Phase::Complete,
            servers: vec![ServerReport {
                name: "fs".into(),
                connected: true,
                tools: vec![ToolInfo::default(); 3].into(),
                error: None,
                warning: None,
                details: None,
                always_load: false,
            }],
            config_outcomes: vec![],
            pending: Vec::new(),
        };
        let converted = discovery_report(&report);
        assert!(Arc::ptr_eq(
            &report.servers[0].tools,
            &converted.servers[0].tools
        ));
    }

    #[test]
    fn a_pending_empty_report_stays_pending() {
        check(
            Report {
                phase: Phase::Pending,
                servers: vec![],
                config_outcomes: vec![],
                pending: Vec::new(),
            },
            DiscoveryReport::default(),
        );
    }

    #[tokio::test]
    async fn follows_the_subscription_and_closes_with_it() {
        let empty = Report {
            phase: Phase::Pending,
            servers: vec![],
            config_outcomes: vec![],
            pending: Vec::new(),
        };
        let (tx, rx) = watch::channel(Arc::new(empty.clone()));
        let mut source = EngineReports::from_receiver(rx);
        let first = source.sample();
        assert_eq!(first.phase, ReportPhase::Pending);
        // An unchanged report is not converted again.
        assert!(Arc::ptr_eq(&first, &source.sample()));

        tx.send_replace(Arc::new(Report {
            phase: Phase::Complete,
            ..empty
        }));
        source.changed().await.expect("a change");
        assert_eq!(source.sample().phase, ReportPhase::Complete);

        drop(tx);
        assert_eq!(source.changed().await, Err(SourceClosed));
    }
}
