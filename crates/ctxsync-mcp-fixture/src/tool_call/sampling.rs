//! The `sample` call tool: asks the client to sample in the way the request's protocol
//! version allows (rmcp forbids server-to-client requests from 2026-07-28 on).
#![expect(
    deprecated,
    reason = "the tool exists to exercise sampling, which SEP-2577 deprecates"
)]

use rmcp::model::{
    CallToolResult, ContentBlock, CreateMessageRequest, CreateMessageRequestParams,
    CreateMessageResult, InputRequest, InputRequests, InputRequiredResult, ProtocolVersion,
    SamplingMessage,
};
use serde_json::Value;

use super::tools::{Answer, CallTool};

/// The tool's description: the protocol-dependent behaviour tests rely on.
pub(crate) const DESCRIPTION: &str = "Asks the client for sampling (sampling/createMessage with \
    one user message, \"Say hello to the fixture.\") and returns the client's answer: its text \
    as a text block, the whole createMessage result as structuredContent. On protocol \
    2026-07-28 the call answers resultType \"input_required\" with one input request keyed \
    \"sample\", and the retry carrying inputResponses.sample gets the answer; on older \
    protocols the fixture sends sampling/createMessage to the client during the call. A \
    refusal (the client's error, or a retry without the response) answers isError with text \
    starting \"sampling refused by the client\".";

/// The key of the sampling request in an input-required result.
const INPUT_KEY: &str = "sample";
/// What the fixture asks the model.
const PROMPT: &str = "Say hello to the fixture.";
/// The answer's token budget (the fixture only needs a short greeting).
const MAX_TOKENS: u32 = 100;

pub(crate) async fn sample(call: &CallTool<'_>) -> Answer {
    let modern = call
        .context
        .protocol_version()
        .is_some_and(|version| version >= ProtocolVersion::V_2026_07_28);
    if modern {
        input_required(call)
    } else {
        ask_client(call).await
    }
}

fn params() -> CreateMessageRequestParams {
    CreateMessageRequestParams::new(vec![SamplingMessage::user_text(PROMPT)], MAX_TOKENS)
}

/// 2026-07-28: the first round asks for input; the retry carries the client's answer.
fn input_required(call: &CallTool<'_>) -> Answer {
    let Some(responses) = &call.request.input_responses else {
        let request = InputRequest::CreateMessage(CreateMessageRequest::new(params()));
        let requests = InputRequests::from([(INPUT_KEY.to_owned(), request)]);
        return Answer::finished(Ok(InputRequiredResult::from_input_requests(requests).into()));
    };
    match responses.get(INPUT_KEY) {
        Some(answer) => answered(answer.clone()),
        None => refused("the retry carried no response to the sampling request"),
    }
}

/// Before 2026-07-28: a sampling request to the client while the call waits.
async fn ask_client(call: &CallTool<'_>) -> Answer {
    tokio::select! {
        result = call.context.peer.create_message(params()) => match result {
            Ok(result) => match serde_json::to_value(&result) {
                Ok(answer) => answered(answer),
                Err(error) => Answer::tool_error(format!("cannot encode the client's answer: {error}")),
            },
            Err(error) => refused(&error.to_string()),
        },
        () = call.cancelled() => Answer::cancelled(),
    }
}

/// The client's createMessage result as a tool result.
fn answered(answer: Value) -> Answer {
    if let Err(error) = serde_json::from_value::<CreateMessageResult>(answer.clone()) {
        return Answer::tool_error(format!(
            "the client's answer is not a createMessage result: {error}"
        ));
    }
    // A single content block or a list of them; the first text stands for the answer.
    let content = &answer["content"];
    let text = content["text"]
        .as_str()
        .or_else(|| {
            content
                .as_array()
                .and_then(|blocks| blocks.iter().find_map(|block| block["text"].as_str()))
        })
        .map_or_else(|| answer.to_string(), str::to_owned);
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(answer);
    Answer::finished(Ok(result.into()))
}

fn refused(reason: &str) -> Answer {
    Answer::tool_error(format!("sampling refused by the client: {reason}"))
}
