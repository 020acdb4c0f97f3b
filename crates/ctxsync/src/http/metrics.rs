//! `/metrics`: the Prometheus text format (0.0.4), behind the bearer token. Counters end
//! in `_total`, durations are histograms in seconds, gauges carry no suffix; every
//! family has HELP and TYPE lines and no label takes a caller-controlled value.

use std::fmt::{Display, Write as _};

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use ctxsync_agent_api::{AgentApiMetrics, CallMetricsSnapshot, HistogramSnapshot};
use ctxsync_mcp_model::CallStatus;

use super::{ApiError, AppState};

/// The text format's content type; scrapers pick the parser by it.
pub(super) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Agent API pushes (counts and durations), the MCP server connects agents report, the
/// gate's waits, open event streams, how many agents are in each discovery phase, how
/// many are connected now, and tool calls (ends by status, durations, in flight).
#[utoipa::path(get, path = "/metrics", tag = "operations",
    responses((status = 200, description = "Prometheus text exposition (format 0.0.4)", content_type = "text/plain", body = String)))]
pub(super) async fn metrics(State(state): State<AppState>) -> Result<Response, ApiError> {
    // One aggregate query, however many agents: a scrape never reads a context.
    let phases = ctxsync_chat_projection::store::agent_phase_counts(&state.store).await?;
    let connected = state.store.connected_agents().await?;
    let mut out = Exposition::default();
    write_agent_api(&mut out, &state.agent_api);
    write_tool_calls(&mut out, &state.calls.metrics());
    state
        .gate
        .metrics()
        .write_prometheus("ctxsync_gate", &mut out.text);
    out.family(
        "ctxsync_event_streams_open",
        "gauge",
        "Context event streams (server-sent events) open now.",
    );
    out.sample(
        "ctxsync_event_streams_open",
        &[],
        state.event_streams.open_count(),
    );
    out.family(
        "ctxsync_agents",
        "gauge",
        "Agents by MCP discovery phase and freshness.",
    );
    for (phase, stale, count) in phases {
        let stale = if stale { "true" } else { "false" };
        out.sample(
            "ctxsync_agents",
            &[("phase", phase.as_str()), ("stale", stale)],
            count,
        );
    }
    out.family(
        "ctxsync_agents_connected",
        "gauge",
        "Agents whose current process holds its call stream open now, on any replica.",
    );
    out.sample("ctxsync_agents_connected", &[], connected);
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], out.text).into_response())
}

fn write_agent_api(out: &mut Exposition, metrics: &AgentApiMetrics) {
    let api = metrics.snapshot();
    let counter = |out: &mut Exposition, name: &str, help: &str, rows: &[(Labels<'_>, u64)]| {
        out.family(name, "counter", help);
        for (labels, value) in rows {
            out.sample(name, labels, value);
        }
    };
    counter(
        out,
        "ctxsync_agent_pushes_total",
        "Context pushes by result.",
        &[
            (&[("result", "accepted")], api.pushes_accepted),
            (
                &[("result", "dropped_stale_run")],
                api.pushes_dropped_stale_run,
            ),
            (
                &[("result", "dropped_stale_version")],
                api.pushes_dropped_stale_version,
            ),
            (
                &[("result", "delta_base_missing")],
                api.pushes_delta_base_missing,
            ),
        ],
    );
    counter(
        out,
        "ctxsync_agent_delta_pushes_total",
        "Context pushes sent as deltas (bodies the server holds left out), any result.",
        &[(&[], api.pushes_delta)],
    );
    counter(
        out,
        "ctxsync_agent_startups_total",
        "UpdateStartup calls by result.",
        &[
            (&[("result", "accepted")], api.startups_accepted),
            (&[("result", "superseded")], api.startups_superseded),
        ],
    );
    counter(
        out,
        "ctxsync_agent_requests_rejected_total",
        "Agent API requests refused before or during storage, by reason.",
        &[
            (&[("reason", "invalid")], api.requests_invalid),
            (
                &[("reason", "unauthenticated")],
                api.requests_unauthenticated,
            ),
            (&[("reason", "unavailable")], api.requests_unavailable),
            (&[("reason", "failed")], api.requests_failed),
        ],
    );

    let histograms = metrics.histograms();
    let name = "ctxsync_agent_push_duration_seconds";
    out.family(
        name,
        "histogram",
        "Time from receiving a PushContextState call to its answer, token lookup included, \
         by result (error: refused after authentication).",
    );
    for (result, h) in &histograms.push_seconds {
        out.histogram(name, &[("result", result)], h);
    }
    let name = "ctxsync_mcp_server_connect_duration_seconds";
    out.family(
        name,
        "histogram",
        "Each MCP server connect (process start, handshake, first tool list) as its agent \
         reported it; counted once per connect, not per push.",
    );
    out.histogram(name, &[], &histograms.server_connect_seconds);
    let name = "ctxsync_mcp_server_connect_phase_duration_seconds";
    out.family(
        name,
        "histogram",
        "The steps of the same connects, by phase (start: stdio servers only).",
    );
    for (phase, h) in &histograms.server_connect_phase_seconds {
        out.histogram(name, &[("phase", phase)], h);
    }
}

/// The calls this replica saw end, by status (every status, 0 when none), their
/// durations and the calls it has sent that have not ended.
fn write_tool_calls(out: &mut Exposition, calls: &CallMetricsSnapshot) {
    let name = "ctxsync_tool_calls_total";
    out.family(
        name,
        "counter",
        "Tool calls whose end this replica recorded or saw, by status.",
    );
    for status in CallStatus::ALL {
        let label = status.as_str();
        let count = calls
            .ended
            .iter()
            .find(|(s, _)| *s == label)
            .map_or(0, |(_, n)| *n);
        out.sample(name, &[("status", label)], count);
    }
    let name = "ctxsync_tool_call_duration_seconds";
    out.family(
        name,
        "histogram",
        "How long tool calls ran, from storing the call to its end (the agent's figure for calls that reached it).",
    );
    out.histogram(
        name,
        &[],
        &HistogramSnapshot {
            buckets: calls.duration_buckets.clone(),
            count: calls.duration_count,
            sum: calls.duration_sum,
        },
    );
    let name = "ctxsync_tool_calls_in_flight";
    out.family(
        name,
        "gauge",
        "Tool calls this replica has sent to agents that have not ended yet.",
    );
    out.sample(name, &[], calls.in_flight);
}

type Labels<'a> = &'a [(&'a str, &'a str)];

/// Prometheus text being written; writing to a `String` cannot fail.
#[derive(Debug, Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let help = help.replace('\\', r"\\").replace('\n', r"\n");
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: Labels<'_>, value: impl Display) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (key, value)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{key}=\"{}\"", escape_label(value));
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {value}");
    }

    /// `_bucket` lines (cumulative, ending with `+Inf`, which is the count), `_sum` and
    /// `_count`.
    fn histogram(&mut self, name: &str, labels: Labels<'_>, h: &HistogramSnapshot) {
        let bucket = format!("{name}_bucket");
        for (le, count) in &h.buckets {
            let le = le.to_string();
            self.sample(&bucket, &with_le(labels, &le), count);
        }
        self.sample(&bucket, &with_le(labels, "+Inf"), h.count);
        self.sample(&format!("{name}_sum"), labels, h.sum);
        self.sample(&format!("{name}_count"), labels, h.count);
    }
}

fn with_le<'a>(labels: Labels<'a>, le: &'a str) -> Vec<(&'a str, &'a str)> {
    let mut all = labels.to_vec();
    all.push(("le", le));
    all
}

/// A label value as the text format quotes it: backslash, double quote and line feed
/// escaped.
fn escape_label(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str(r"\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str(r"\n"),
            c => escaped.push(c),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_is_written_cumulative_with_inf_sum_and_count() {
        let mut out = Exposition::default();
        let h = HistogramSnapshot {
            buckets: vec![(0.005, 1), (0.5, 3), (1.0, 3)],
            count: 4,
            sum: 12.25,
        };
        out.family("x_seconds", "histogram", "A test.");
        out.histogram("x_seconds", &[("result", "accepted")], &h);
        assert_eq!(
            out.text,
            "# HELP x_seconds A test.\n\
             # TYPE x_seconds histogram\n\
             x_seconds_bucket{result=\"accepted\",le=\"0.005\"} 1\n\
             x_seconds_bucket{result=\"accepted\",le=\"0.5\"} 3\n\
             x_seconds_bucket{result=\"accepted\",le=\"1\"} 3\n\
             x_seconds_bucket{result=\"accepted\",le=\"+Inf\"} 4\n\
             x_seconds_sum{result=\"accepted\"} 12.25\n\
             x_seconds_count{result=\"accepted\"} 4\n"
        );
    }

    #[test]
    fn every_call_status_is_counted_with_the_histogram_and_gauge() {
        let mut out = Exposition::default();
        let calls = CallMetricsSnapshot {
            ended: vec![("complete", 3), ("refused", 1)],
            in_flight: 2,
            duration_buckets: vec![(0.1, 2), (1.0, 4)],
            duration_sum: 1.5,
            duration_count: 4,
        };
        write_tool_calls(&mut out, &calls);
        for status in CallStatus::ALL {
            assert!(
                out.text.contains(&format!(
                    "ctxsync_tool_calls_total{{status=\"{}\"}}",
                    status.as_str()
                )),
                "{status:?}: {}",
                out.text
            );
        }
        assert!(
            out.text
                .contains("ctxsync_tool_calls_total{status=\"complete\"} 3\n")
        );
        assert!(
            out.text
                .contains("ctxsync_tool_calls_total{status=\"timed_out\"} 0\n")
        );
        assert!(
            out.text
                .contains("ctxsync_tool_call_duration_seconds_bucket{le=\"+Inf\"} 4\n")
        );
        assert!(
            out.text
                .contains("ctxsync_tool_call_duration_seconds_sum 1.5\n")
        );
        assert!(out.text.contains("ctxsync_tool_calls_in_flight 2\n"));
    }

    #[test]
    fn label_values_and_help_are_escaped() {
        let mut out = Exposition::default();
        out.family("g", "gauge", "two\nlines \\ here");
        out.sample("g", &[("k", "a\"b\\c\nd")], 1);
        out.sample("g", &[], 2);
        assert_eq!(
            out.text,
            "# HELP g two\\nlines \\\\ here\n# TYPE g gauge\n\
             g{k=\"a\\\"b\\\\c\\nd\"} 1\ng 2\n"
        );
    }

    #[test]
    fn every_agent_api_family_is_declared_once_with_help_and_type() {
        let mut out = Exposition::default();
        write_agent_api(&mut out, &AgentApiMetrics::default());
        let types: Vec<&str> = out
            .text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .collect();
        assert_eq!(
            types,
            [
                "ctxsync_agent_pushes_total counter",
                "ctxsync_agent_delta_pushes_total counter",
                "ctxsync_agent_startups_total counter",
                "ctxsync_agent_requests_rejected_total counter",
                "ctxsync_agent_push_duration_seconds histogram",
                "ctxsync_mcp_server_connect_duration_seconds histogram",
                "ctxsync_mcp_server_connect_phase_duration_seconds histogram",
            ]
        );
        let helps = out
            .text
            .lines()
            .filter(|l| l.starts_with("# HELP "))
            .count();
        assert_eq!(helps, types.len());
        assert!(out.text.contains(
            "ctxsync_agent_push_duration_seconds_bucket{result=\"error\",le=\"+Inf\"} 0\n"
        ));
        assert!(out.text.contains(
            "ctxsync_mcp_server_connect_phase_duration_seconds_count{phase=\"start\"} 0\n"
        ));
    }
}
