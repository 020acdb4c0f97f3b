//! A server transport that drops chosen requests unanswered: `server/discover` for a
//! server that ignores methods it does not know (the `silent` lifecycle), and
//! `subscriptions/listen` for one that never acknowledges a listen (`--ignore-listen`).

use rmcp::{
    RoleServer,
    model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage, ServerJsonRpcMessage},
    transport::Transport,
};

/// Which requests [`DropRequests`] drops.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Dropped {
    pub(crate) discover: bool,
    pub(crate) listen: bool,
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
