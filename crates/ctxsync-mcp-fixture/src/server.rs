//! The MCP server handler: answers `initialize`, `tools/list` and `tools/call` as scripted.

use std::{
    borrow::Cow,
    sync::{
        Arc, RwLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
};

use rmcp::{
    ErrorData, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, DiscoverResult, ErrorCode, Icon, Implementation,
        InitializeRequestParams, InitializeResult, ListToolsResult, MetaObject, NumberOrString,
        PaginatedRequestParams, ProgressNotificationParam, ProgressToken, ProtocolVersion,
        ServerCapabilities, ServerConfig, SubscriptionFilter, Tool, ToolAnnotations,
    },
    service::{NotificationContext, RequestContext, SubscriptionContext},
};

use crate::{
    config::{FixtureConfig, FixtureLifecycle},
    tool_call::{Answer, CallEvent, CallRecorder, CallTool, Ending},
    tool_spec::ToolSpec,
};

/// The cursor a `--repeat-cursor` server returns on every page.
const REPEATED_CURSOR: &str = "again";

/// State shared by every session of one fixture instance.
#[derive(Debug)]
struct Shared {
    config: FixtureConfig,
    nonce: String,
    tools: RwLock<Vec<Tool>>,
    /// Whether the scripted tool change has happened.
    tools_changed: AtomicBool,
    /// Whether scripted exits may end the process (never for an in-process server).
    process_mode: bool,
    /// Calls of the `count` tool so far.
    count: AtomicU64,
}

/// One fixture server instance; clones share nonce and tools (one per HTTP session).
#[derive(Debug, Clone)]
pub struct FixtureServer {
    shared: Arc<Shared>,
}

impl FixtureServer {
    /// A server for in-process use: scripted process exits are ignored.
    pub fn new(config: FixtureConfig) -> Self {
        Self::with_mode(config, false)
    }

    pub(crate) fn with_mode(config: FixtureConfig, process_mode: bool) -> Self {
        let nonce = config
            .nonce_value()
            .map(str::to_owned)
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let shared = Shared {
            tools: RwLock::new(Vec::new()),
            tools_changed: AtomicBool::new(false),
            nonce,
            process_mode,
            count: AtomicU64::new(0),
            config,
        };
        let server = Self {
            shared: Arc::new(shared),
        };
        server.set_tools(server.shared.config.initial_tools());
        server
    }

    pub(crate) fn config(&self) -> &FixtureConfig {
        &self.shared.config
    }

    /// This instance's nonce.
    pub fn nonce(&self) -> &str {
        &self.shared.nonce
    }

    /// The scripted tool change (`--change-tools-after-ms`).
    fn change_tools(&self) {
        self.set_tools(self.shared.config.changed_tool_list());
        self.shared.tools_changed.store(true, Ordering::SeqCst);
    }

    /// The scripted answer to a handshake (`initialize` or `server/discover`): hang, delay
    /// or fail as configured.
    async fn handshake_script(&self) -> Result<(), ErrorData> {
        let config = &self.shared.config;
        if config.hangs() {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(config.init_delay_value()).await;
        match config.initialize_failure() {
            Some(message) => Err(ErrorData::internal_error(message.to_owned(), None)),
            None => Ok(()),
        }
    }

    fn set_tools(&self, specs: Vec<ToolSpec>) {
        let tools = specs.into_iter().map(|spec| self.to_tool(spec)).collect();
        *self.shared.tools.write().unwrap_or_else(|e| e.into_inner()) = tools;
    }

    fn to_tool(&self, spec: ToolSpec) -> Tool {
        let description = if self.shared.config.nonce_in_descriptions_enabled() {
            format!("{} [nonce {}]", spec.description, self.shared.nonce)
        } else {
            spec.description
        };
        let tool = Tool::new(spec.name, description, Arc::new(spec.input_schema));
        if !self.shared.config.rich_tools_enabled() {
            return tool;
        }
        let object = |value: serde_json::Value| match value {
            serde_json::Value::Object(map) => map,
            _ => unreachable!("literal objects"),
        };
        let name = tool.name.to_string();
        tool.with_title(format!("Title of {name}"))
            .with_annotations(
                ToolAnnotations::with_title(format!("Hint title of {name}"))
                    .read_only(true)
                    .destructive(false)
                    .open_world(false),
            )
            .with_raw_output_schema(Arc::new(object(serde_json::json!({
                "type": "object",
                "properties": { "result": { "type": "string" } },
            }))))
            .with_icons(vec![
                Icon::new("data:image/png;base64,iVBORw0KGgo=")
                    .with_mime_type("image/png")
                    .with_sizes(vec!["16x16".into()]),
            ])
            .with_meta(MetaObject(object(serde_json::json!({
                "ui": { "resourceUri": format!("ui://fixture/{name}") },
            }))))
    }

    fn tools(&self) -> Vec<Tool> {
        self.shared
            .tools
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn page(&self, cursor: Option<&str>) -> Result<ListToolsResult, ErrorData> {
        let tools = self.tools();
        let config = &self.shared.config;
        let Some(page_size) = config.page_size_value() else {
            if config.repeats_cursor() {
                return Ok(ListToolsResult {
                    next_cursor: Some(REPEATED_CURSOR.into()),
                    ..ListToolsResult::with_all_items(tools)
                });
            }
            return Ok(self.with_ttl(ListToolsResult::with_all_items(tools)));
        };
        let offset = match cursor {
            None => 0,
            Some(REPEATED_CURSOR) if config.repeats_cursor() => 0,
            Some(cursor) => cursor
                .strip_prefix("offset:")
                .and_then(|n| n.parse::<usize>().ok())
                .ok_or_else(|| ErrorData::invalid_params("unknown cursor", None))?,
        };
        let end = offset.saturating_add(page_size).min(tools.len());
        let page = tools.get(offset..end).unwrap_or_default().to_vec();
        let next_cursor = if config.repeats_cursor() {
            Some(REPEATED_CURSOR.to_owned())
        } else {
            (end < tools.len()).then(|| format!("offset:{end}"))
        };
        Ok(self.with_ttl(ListToolsResult {
            next_cursor,
            ..ListToolsResult::with_all_items(page)
        }))
    }

    /// Unknown tools are invalid params; call tools run; `whoami` names the instance; any
    /// other tool echoes its arguments.
    async fn answer_call(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
        recorder: &CallRecorder,
    ) -> Answer {
        let known = self.tools().iter().any(|tool| tool.name == request.name);
        if !known {
            return Answer::finished(Err(ErrorData::invalid_params(
                Cow::Owned(format!("unknown tool {}", request.name)),
                None,
            )));
        }
        if self.shared.config.call_tools_enabled() {
            let tool = CallTool {
                request,
                context,
                recorder,
                counter: &self.shared.count,
            };
            if let Some(answer) = tool.run().await {
                return answer;
            }
        }
        let text = if request.name == "whoami" {
            self.shared.nonce.clone()
        } else {
            let arguments =
                serde_json::Value::Object(request.arguments.clone().unwrap_or_default());
            format!("{} called with {arguments}", request.name)
        };
        Answer::text(text)
    }

    fn with_ttl(&self, result: ListToolsResult) -> ListToolsResult {
        ListToolsResult {
            ttl_ms: self.shared.config.tools_ttl_value(),
            ..result
        }
    }
}

impl ServerHandler for FixtureServer {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .build();
        let instructions = match self.shared.config.instructions_value() {
            Some(text) => text,
            None => format!("nonce={} pid={}", self.shared.nonce, std::process::id()),
        };
        let mut info = InitializeResult::new(capabilities).with_instructions(instructions);
        info.server_info = Implementation::new("ctxsync-mcp-fixture", env!("CARGO_PKG_VERSION"))
            .with_description(format!("nonce {}", self.shared.nonce));
        info
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        if let Some(version) = self.shared.config.protocol_version_value() {
            // The SDK answers `initialize` with the newest supported version it can.
            let version = serde_json::Value::String(version.to_owned());
            return Cow::Owned(serde_json::from_value(version).into_iter().collect());
        }
        if self.shared.config.is_modern_only() {
            Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
        } else {
            Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS)
        }
    }

    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        match self.shared.config.lifecycle_value() {
            FixtureLifecycle::Modern => {
                self.handshake_script().await?;
                Ok(DiscoverResult::from_server_info(
                    self.supported_protocol_versions().into_owned(),
                    self.get_info(),
                ))
            }
            // What a server from before 2026-07-28 answers to a method it does not know (a
            // lenient server's transport answers `{}` before this is reached).
            FixtureLifecycle::Legacy | FixtureLifecycle::Lenient => Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                "Method not found: server/discover",
                None,
            )),
            // Reached only where the transport could not drop the request unanswered.
            FixtureLifecycle::Silent => std::future::pending().await,
        }
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        // The SDK intersects this with what was requested and what get_info advertises.
        (self.shared.config.lifecycle_value() == FixtureLifecycle::Modern)
            .then(|| requested.clone())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        // The modern lifecycle's counterpart of the scripted change after `initialized`.
        if let Some((delay, _)) = self.shared.config.tool_change() {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                () = tokio::time::sleep(delay) => {}
            }
            self.change_tools();
            if !self.shared.config.changes_quietly() {
                // The client may already be gone; nothing to report to anyone then.
                let _ = context.sink().notify_tool_list_changed().await;
            }
        }
        context.cancelled().await;
        Ok(())
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        if self.shared.config.is_modern_only() {
            // The Python SDK 2.x's answer, at once: its `server/discover` is what is slow.
            let supported = self.supported_protocol_versions();
            return Err(ErrorData::new(
                ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
                "connection is serving the 2026-07-28 protocol; the initialize handshake is not accepted",
                Some(serde_json::json!({
                    "requested": request.protocol_version,
                    "supported": supported,
                })),
            ));
        }
        self.handshake_script().await?;
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        if self.shared.config.fails_relist() && self.shared.tools_changed.load(Ordering::SeqCst) {
            return Err(ErrorData::internal_error(
                "tools/list is broken (scripted)",
                None,
            ));
        }
        let cursor = request.as_ref().and_then(|r| r.cursor.as_deref());
        self.page(cursor)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let recorder = CallRecorder::new(
            self.shared.config.call_log_path().cloned(),
            &request.name,
            context.id.clone(),
        );
        recorder.record(CallEvent::Started);
        let answer = self.answer_call(&request, &context, &recorder).await;
        if answer.ending == Ending::Finished {
            recorder.record(CallEvent::Finished);
        }
        answer.response
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let config = &self.shared.config;
        if let Some((delay, _)) = config.tool_change() {
            let server = self.clone();
            let peer = context.peer.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                server.change_tools();
                if !server.shared.config.changes_quietly() {
                    // The client may already be gone; nothing to report to anyone then.
                    let _ = peer.notify_tool_list_changed().await;
                }
            });
        }
        let flood = config.notification_flood_value();
        if flood > 0 {
            let peer = context.peer.clone();
            tokio::spawn(async move {
                let token = ProgressToken(NumberOrString::String("never-issued".into()));
                let mut progress = 0.0;
                for _ in 0..flood {
                    progress += 1.0;
                    let params = ProgressNotificationParam::new(token.clone(), progress);
                    if peer.notify_progress(params).await.is_err() {
                        break; // the client is gone
                    }
                }
            });
        }
        if let Some(delay) = config.exit_after_value()
            && self.shared.process_mode
            && crate::scripted_exit::should_exit(config)
        {
            let code = config.exit_code_value();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                std::process::exit(code);
            });
        }
    }
}
