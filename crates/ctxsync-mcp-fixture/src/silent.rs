//! A server transport that drops `server/discover` requests unanswered: a server that
//! ignores methods it does not know (the `silent` lifecycle).

use rmcp::{
    RoleServer,
    model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage, ServerJsonRpcMessage},
    transport::Transport,
};

pub(crate) struct DropDiscover<T>(pub(crate) T);

impl<T: Transport<RoleServer>> Transport<RoleServer> for DropDiscover<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.0.send(item)
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            let message = self.0.receive().await?;
            let is_discover = matches!(
                &message,
                JsonRpcMessage::Request(request)
                    if matches!(request.request, ClientRequest::DiscoverRequest(_))
            );
            if !is_discover {
                return Some(message);
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.0.close().await
    }
}
