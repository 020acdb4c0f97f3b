//! rmcp's errors as sentences a person or the model can act on: what failed, where, and
//! what to try. rmcp's own `Display` names Rust types and debug-formats values, so none of
//! its errors is shown as it is; each variant is put into words here, and an HTTP server's
//! refusal of the agent's credentials is kept as [`AccessRefused`], not only as words.

use std::error::Error;

use rmcp::{
    ServiceError,
    model::{ErrorData, ProtocolVersion},
    service::ClientInitializeError,
    transport::streamable_http_client::StreamableHttpError,
};

type HttpError = StreamableHttpError<reqwest::Error>;

/// An HTTP MCP server that refused the agent's request for want of credentials: what a
/// sign-in has to answer. Kept beside the server's error, which says the same in words.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AccessRefused {
    /// HTTP 401: the server needs credentials it was not given (or they expired).
    Unauthorized {
        /// The server's `WWW-Authenticate` challenge, when it sent one.
        challenge: Option<String>,
    },
    /// HTTP 403: the credentials sent are not enough (e.g. a missing scope).
    Forbidden {
        /// The server's `WWW-Authenticate` challenge, when it sent one.
        challenge: Option<String>,
    },
}

impl AccessRefused {
    /// Whether a person's sign-in is what the server asks for: any 401, or a 403 whose
    /// challenge names the error `insufficient_scope` (RFC 6750). Any other 403 refuses
    /// credentials a sign-in would not change.
    pub fn needs_sign_in(&self) -> bool {
        match self {
            Self::Unauthorized { .. } => true,
            Self::Forbidden { challenge } => challenge
                .as_deref()
                .is_some_and(|c| c.to_ascii_lowercase().contains("insufficient_scope")),
        }
    }

    /// The server's `WWW-Authenticate` challenge, when it sent one.
    pub fn challenge(&self) -> Option<&str> {
        match self {
            Self::Unauthorized { challenge } | Self::Forbidden { challenge } => {
                challenge.as_deref()
            }
        }
    }
}

/// Where a failure happened, as its sentence names it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Place<'a> {
    /// A server run as a process on stdio, or one whose transport the sentence need not name.
    Stdio,
    /// A server at `url` (sanitized with the rest of the sentence); `own_credentials` when
    /// its entry sends credentials of its own (headers, or an `oauth` block's client
    /// credentials), which a 401 then asks to fix; else a person signs in.
    Http { url: &'a str, own_credentials: bool },
}

impl Place<'_> {
    fn server(self) -> String {
        match self {
            Place::Stdio => "the server".to_owned(),
            Place::Http { url, .. } => format!("the server at {url}"),
        }
    }
}

/// A failed handshake in words.
pub(crate) struct HandshakeFailure {
    pub sentence: String,
    /// The connection closed (a process may have died) rather than the server refusing.
    pub closed: bool,
    pub refused: Option<AccessRefused>,
}

/// The protocol revisions ctxsync speaks, for sentences that name them.
fn known() -> String {
    let known: Vec<&str> = ProtocolVersion::KNOWN_VERSIONS
        .iter()
        .map(ProtocolVersion::as_str)
        .collect();
    known.join(", ")
}

/// Whether ctxsync speaks the revision a server chose.
pub(crate) fn speaks(version: &ProtocolVersion) -> bool {
    ProtocolVersion::KNOWN_VERSIONS.contains(version)
}

/// A server that chose a revision ctxsync does not know.
pub(crate) fn unknown_revision(version: &ProtocolVersion, place: Place<'_>) -> String {
    format!(
        "initialize failed: {} chose MCP revision {version}, which ctxsync does not speak (it speaks {}); update ctxsync or pin the server to one of those",
        place.server(),
        known()
    )
}

/// A failed MCP handshake. `failed_send` is the transport's error when it could only close
/// the connection (see `ProbeWatch::take_failed_send`).
pub(crate) fn handshake(
    error: &ClientInitializeError,
    place: Place<'_>,
    failed_send: Option<&(dyn Error + 'static)>,
) -> HandshakeFailure {
    let server = place.server();
    let plain = |sentence: String| HandshakeFailure {
        sentence,
        closed: false,
        refused: None,
    };
    match error {
        // After a refused `server/discover`, the fallback's failure is the one that explains.
        ClientInitializeError::LegacyFallbackFailed { fallback, .. } => {
            handshake(fallback, place, failed_send)
        }
        ClientInitializeError::ConnectionClosed(_) => match failed_send {
            Some(failed) => {
                let (sentence, refused) = transport(failed, place);
                HandshakeFailure {
                    sentence: format!("initialize failed: {sentence}"),
                    closed: false,
                    refused,
                }
            }
            None => HandshakeFailure {
                sentence: format!(
                    "initialize failed: {server} closed the connection during the MCP handshake; check its log"
                ),
                closed: true,
                refused: None,
            },
        },
        ClientInitializeError::TransportError { error, .. } => {
            let (sentence, refused) = transport(error.error.as_ref(), place);
            HandshakeFailure {
                sentence: format!("initialize failed: {sentence}"),
                closed: matches!(place, Place::Stdio),
                refused,
            }
        }
        // rmcp's wording ("conflict initialized response id") hides the point.
        ClientInitializeError::ConflictInitResponseId(expected, got)
        | ClientInitializeError::UncorrelatedErrorResponse {
            expected,
            received: got,
        } => plain(format!(
            "initialize failed: the server answered with id {got}, not the request's id {expected}; it does not follow JSON-RPC, so check that it is an MCP server"
        )),
        ClientInitializeError::JsonRpcError(data) => plain(format!(
            "initialize failed: {server} refused the handshake: {}; check its log and its entry in .mcp.json",
            rpc_error(data)
        )),
        ClientInitializeError::ExpectedInitResponse(_)
        | ClientInitializeError::ExpectedInitResult(_) => plain(format!(
            "initialize failed: {server} answered the handshake with something that is not a handshake result; check that it is an MCP server of revision 2025-03-26 or later"
        )),
        ClientInitializeError::NoCompatibleProtocolVersion {
            server_supported, ..
        } => {
            let offered: Vec<&str> = server_supported
                .iter()
                .map(ProtocolVersion::as_str)
                .collect();
            plain(format!(
                "initialize failed: {server} speaks only MCP revisions {}, none of which ctxsync speaks ({}); update the server or ctxsync",
                offered.join(", "),
                known()
            ))
        }
        ClientInitializeError::Cancelled => {
            plain("initialize failed: the handshake was cancelled".to_owned())
        }
        _ => plain(format!(
            "initialize failed: the MCP handshake with {server} did not complete; check its log"
        )),
    }
}

/// A server-supplied JSON-RPC error: its message and code (sanitized with the sentence).
fn rpc_error(data: &ErrorData) -> String {
    format!("\"{}\" (error {})", data.message, data.code.0)
}

/// A transport's error in words, and the refusal it carries, if any.
fn transport(error: &(dyn Error + 'static), place: Place<'_>) -> (String, Option<AccessRefused>) {
    let server = place.server();
    if let Some(http) = find::<HttpError>(error) {
        return http_error(http, place);
    }
    if let Some(io) = find::<std::io::Error>(error) {
        return (
            format!("cannot talk to {server}: {io}; check that it is running"),
            None,
        );
    }
    (
        format!("the connection to {server} failed; check that it is running"),
        None,
    )
}

/// The first error of type `E` in `error`'s source chain.
fn find<'a, E: Error + 'static>(error: &'a (dyn Error + 'static)) -> Option<&'a E> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(found) = error.downcast_ref::<E>() {
            return Some(found);
        }
        current = error.source();
    }
    None
}

/// The innermost cause of `error`: the words that say what happened on the wire (e.g.
/// "Connection refused (os error 111)"), without the layers around it.
pub(crate) fn innermost(error: &(dyn Error + 'static)) -> String {
    let mut current = error;
    while let Some(source) = current.source() {
        current = source;
    }
    current.to_string()
}

/// The refusal for want of credentials (HTTP 401, or 403 with a challenge) somewhere in
/// `error`'s chain, if any.
pub(crate) fn refusal_in(error: &(dyn Error + 'static)) -> Option<AccessRefused> {
    let error = find::<HttpError>(error)?;
    let place = Place::Http {
        url: "",
        own_credentials: false,
    };
    http_error(error, place).1
}

fn http_error(error: &HttpError, place: Place<'_>) -> (String, Option<AccessRefused>) {
    let server = &place.server();
    let unauthorized = |challenge: Option<String>| {
        let remedy = match place {
            Place::Http {
                own_credentials: false,
                ..
            } => {
                "it needs a person to sign in (the Sign in button on the chat's page, or the chat API's sign-in route)"
            }
            _ => {
                "it needs a sign-in; give it credentials in its entry in .mcp.json (an Authorization header, or an \"oauth\" block with client credentials)"
            }
        };
        (
            format!("{server} answered 401 Unauthorized: {remedy}"),
            Some(AccessRefused::Unauthorized { challenge }),
        )
    };
    let forbidden = |challenge: Option<String>| {
        (
            format!(
                "{server} answered 403 Forbidden: the credentials sent are not allowed to use it; check the credentials in its entry in .mcp.json"
            ),
            Some(AccessRefused::Forbidden { challenge }),
        )
    };
    let words = match error {
        StreamableHttpError::AuthRequired(auth) => {
            return unauthorized(Some(auth.www_authenticate_header.clone()));
        }
        StreamableHttpError::InsufficientScope(scope) => {
            return forbidden(Some(scope.www_authenticate_header.clone()));
        }
        StreamableHttpError::UnexpectedServerResponse(text) => {
            // rmcp keeps only the words of a 401 or 403 that came without a challenge
            // ("HTTP 401 Unauthorized: <body>"); its status is read back here, once.
            if text.starts_with("HTTP 401") {
                return unauthorized(None);
            }
            if text.starts_with("HTTP 403") {
                return forbidden(None);
            }
            format!(
                "{server} gave an answer that is not MCP ({}); check that the URL is the server's MCP endpoint",
                first_line(text)
            )
        }
        StreamableHttpError::Client(client) => {
            let what = if client.is_timeout() {
                "it did not answer in time".to_owned()
            } else {
                innermost(client)
            };
            format!(
                "cannot reach {server} ({what}); check that it is running and that the URL is right"
            )
        }
        StreamableHttpError::HttpStatus(status) => format!(
            "{server} answered HTTP {}; it may be overloaded or failing, so try again later or check its log",
            status.status
        ),
        StreamableHttpError::SessionExpired | StreamableHttpError::ReinitializationFailed(_) => {
            format!(
                "{server} no longer knows the session (HTTP 404) and a new one could not be started; check its log"
            )
        }
        StreamableHttpError::UnexpectedContentType(kind) => format!(
            "{server} answered with content type {} instead of JSON or an event stream; check that the URL is the server's MCP endpoint",
            kind.as_deref().unwrap_or("none")
        ),
        StreamableHttpError::ResponseBodyTooLarge { max_size } => {
            format!("{server} sent an answer larger than {max_size} bytes; check what it returns")
        }
        StreamableHttpError::Deserialize(_) | StreamableHttpError::Sse(_) => format!(
            "{server} sent a message that is not valid MCP; check that the URL is the server's MCP endpoint"
        ),
        StreamableHttpError::Io(io) => {
            format!("cannot talk to {server}: {io}; check that it is running")
        }
        StreamableHttpError::ReservedHeaderConflict(name) => format!(
            "the header {name} in the server's entry in .mcp.json is one MCP sets itself; remove it"
        ),
        _ => format!(
            "the connection to {server} failed; check that it is running and that the URL is right"
        ),
    };
    (words, None)
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default().trim()
}

/// A failed request on a working connection (`what` names it, e.g. "tools/list"), and the
/// refusal it carries, if any.
pub(crate) fn request(
    error: &ServiceError,
    what: &str,
    place: Place<'_>,
) -> (String, Option<AccessRefused>) {
    let server = place.server();
    let words = match error {
        ServiceError::McpError(data) => format!(
            "{what} failed: {server} answered with an error: {}",
            rpc_error(data)
        ),
        ServiceError::TransportSend(error) => {
            let (words, refused) = transport(error.error.as_ref(), place);
            return (format!("{what} failed: {words}"), refused);
        }
        ServiceError::TransportClosed => {
            format!("{what} failed: the connection to {server} closed")
        }
        ServiceError::UnexpectedResponse => {
            format!("{what} failed: {server} answered with something that is not a {what} result")
        }
        ServiceError::Timeout { timeout } => format!(
            "{what} failed: {server} did not answer within {}",
            crate::connection::human_duration(*timeout)
        ),
        ServiceError::Cancelled { .. } => format!("{what} was cancelled"),
        _ => format!("{what} failed: {server} could not complete it; check its log"),
    };
    (words, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the sentences promise: no Rust paths, generics or debug formatting.
    fn assert_words(sentence: &str) {
        ctxsync_test_support::assert_in_words(sentence);
        assert!(!sentence.contains("Some("), "{sentence}");
    }

    #[test]
    fn handshake_failures_read_as_words() {
        let url = Place::Http {
            url: "http://127.0.0.1:9/mcp",
            own_credentials: false,
        };
        for (error, expect) in [
            (
                ClientInitializeError::ExpectedInitResult(Some(
                    rmcp::model::ServerResult::EmptyResult(rmcp::model::EmptyResult {}),
                )),
                "not a handshake result",
            ),
            (
                ClientInitializeError::ConnectionClosed("initialize response".into()),
                "closed the connection",
            ),
            (
                ClientInitializeError::NoCompatibleProtocolVersion {
                    client_supported: vec![ProtocolVersion::V_2026_07_28],
                    server_supported: vec![ProtocolVersion::V_2024_11_05],
                },
                "only MCP revisions 2024-11-05",
            ),
            (
                ClientInitializeError::JsonRpcError(ErrorData::internal_error("boom", None)),
                "\"boom\" (error -32603)",
            ),
        ] {
            let failure = handshake(&error, url, None);
            assert!(failure.sentence.contains(expect), "{}", failure.sentence);
            assert!(
                failure.sentence.contains("http://127.0.0.1:9/mcp")
                    || !failure.sentence.contains("server at")
            );
            assert_words(&failure.sentence);
        }
    }

    #[test]
    fn unchallenged_refusals_are_typed() {
        let server = Place::Http {
            url: "http://x/mcp",
            own_credentials: false,
        };
        let unauthorized =
            StreamableHttpError::UnexpectedServerResponse("HTTP 401 Unauthorized: go away".into());
        let (words, refused) = http_error(&unauthorized, server);
        assert!(
            words.contains("the server at http://x/mcp answered 401 Unauthorized: it needs a person to sign in (the Sign in button on the chat's page"),
            "{words}"
        );
        assert_eq!(
            refused,
            Some(AccessRefused::Unauthorized { challenge: None })
        );
        // An entry with credentials of its own is told to fix them.
        let own = Place::Http {
            url: "http://x/mcp",
            own_credentials: true,
        };
        let (words, _) = http_error(&unauthorized, own);
        assert!(
            words.contains("give it credentials in its entry"),
            "{words}"
        );
        let (words, refused) = http_error(
            &StreamableHttpError::UnexpectedServerResponse("HTTP 403 Forbidden: no".into()),
            server,
        );
        assert!(words.contains("403 Forbidden"), "{words}");
        assert_eq!(refused, Some(AccessRefused::Forbidden { challenge: None }));
        // A bare 403 refuses credentials a sign-in would not change.
        assert!(!AccessRefused::Forbidden { challenge: None }.needs_sign_in());
        assert!(
            AccessRefused::Forbidden {
                challenge: Some(r#"Bearer error="insufficient_scope", scope="a b""#.into())
            }
            .needs_sign_in()
        );
        assert!(AccessRefused::Unauthorized { challenge: None }.needs_sign_in());
        let (words, refused) = http_error(
            &StreamableHttpError::UnexpectedServerResponse("HTTP 404 Not Found: nothing".into()),
            server,
        );
        assert!(
            words.contains("not MCP (HTTP 404 Not Found: nothing)"),
            "{words}"
        );
        assert_eq!(refused, None);
        assert_words(&words);
    }
}
