//! A server transport that drops chosen requests unanswered: `server/discover` for a
//! server that ignores methods it does not know (the `silent` lifecycle), and
//! `subscriptions/listen` for one that never acknowledges a listen (`--ignore-listen`); or
//! answers `server/discover` with an empty result itself (the `lenient` lifecycle).

use rmcp::{
    RoleServer,
    model::{
        ClientJsonRpcMessage, ClientRequest, EmptyResult, JsonRpcMessage, ServerJsonRpcMessage,
        ServerResult,
    },
    transport::Transport,
};

/// Which requests [`DropRequests`] drops.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Dropped {
    pub(crate) discover: bool,
    pub(crate) listen: bool,
    /// Answer `server/discover` with `{}` instead of passing it on.
    pub(crate) empty_discover: bool,
}

impl Dropped {
    fn drops(self, request: &ClientRequest) -> bool {
        match request {
            ClientRequest::DiscoverRequest(_) => self.discover,
            ClientRequest::SubscriptionsListenRequest(_) => self.listen,
            _ => false,
        }
    }
}

pub(crate) struct DropRequests<T> {
    pub(crate) inner: T,
    pub(crate) dropped: Dropped,
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for DropRequests<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            let message = self.inner.receive().await?;
            if let JsonRpcMessage::Request(request) = &message
                && self.dropped.empty_discover
                && matches!(request.request, ClientRequest::DiscoverRequest(_))
            {
                let empty = ServerResult::EmptyResult(EmptyResult {});
                let answer = ServerJsonRpcMessage::response(empty, request.id.clone());
                // A client that is gone needs no answer; the loop ends at its EOF.
                let _ = self.inner.send(answer).await;
                continue;
            }
            let dropped = matches!(
                &message,
                JsonRpcMessage::Request(request) if self.dropped.drops(&request.request)
            );
            if !dropped {
                return Some(message);
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.inner.close().await
    }
}
