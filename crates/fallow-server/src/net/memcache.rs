//! memcached protocol connections (being written).
use crate::server::{ClientHandle, Server};
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};

pub async fn serve<S>(_server: Arc<Server>, _stream: S, _handle: Arc<ClientHandle>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
}
