//! The server's end: creating a channel (memfd, header, doorbells) and the SHM.OPEN reply.
use crate::layout::{Layout, Mapping, Protocol, Side, LAYOUT_NAME, VERSION};
use crate::ring::{Consumer, Direction, Producer};
use crate::sys;
use crate::wait::Doorbell;
use std::sync::Arc;

/// A new mapping of a fresh sealed memfd with its header written; the memfd is returned to be passed.
pub fn create_mapping(layout: Layout) -> std::io::Result<(Mapping, i32)> {
    layout.check().map_err(std::io::Error::other)?;
    let memfd = sys::memfd_sealed("fallow-shm", layout.total_bytes())?;
    match Mapping::map(memfd, layout.total_bytes()) {
        Ok((base, len)) => Ok((Mapping::initialise(base, len, layout), memfd)),
        Err(error) => {
            sys::close(memfd);
            Err(error)
        }
    }
}

/// A channel as the server holds it.
pub struct ServerChannel {
    pub mapping: Arc<Mapping>,
    pub requests: Consumer,
    pub replies: Producer,
    /// Rung by the client when the server sleeps; the server's poller waits on it.
    pub server_bell: Doorbell,
    /// Rung by the server when the client sleeps.
    pub client_bell: Doorbell,
    /// The memfd, until it has been passed (`take_memfd`).
    memfd: Option<i32>,
}

impl ServerChannel {
    pub fn create(layout: Layout) -> std::io::Result<ServerChannel> {
        let (mapping, memfd) = create_mapping(layout)?;
        let mapping = Arc::new(mapping);
        let bells = Doorbell::new().and_then(|server| Ok((server, Doorbell::new()?)));
        let (server_bell, client_bell) = match bells {
            Ok(bells) => bells,
            Err(error) => {
                sys::close(memfd);
                return Err(error);
            }
        };
        Ok(ServerChannel {
            requests: Consumer::new(mapping.clone(), Direction::Request),
            replies: Producer::new(mapping.clone(), Direction::Reply),
            mapping,
            server_bell,
            client_bell,
            memfd: Some(memfd),
        })
    }

    /// The descriptors to pass to the client, in the order the reply names: memfd, server's doorbell,
    /// client's doorbell.
    pub fn fds_to_pass(&self) -> [i32; 3] {
        [
            self.memfd.expect("memfd already passed"),
            self.server_bell.fd(),
            self.client_bell.fd(),
        ]
    }

    /// Closes the server's copy of the memfd once passed (the mapping keeps the memory).
    pub fn forget_memfd(&mut self) {
        if let Some(fd) = self.memfd.take() {
            sys::close(fd);
        }
    }

    /// Rings the client's doorbell if it sleeps (after the server moved an index or closed).
    pub fn wake_client_if_sleeping(&self) {
        if self.mapping.peer_needs_wake(Side::Server) {
            self.client_bell.ring();
        }
    }

    /// Tells the client no more replies come, and wakes it to see that.
    pub fn close(&self) {
        self.mapping.mark_closed(Side::Server);
        self.client_bell.ring();
    }
}

impl Drop for ServerChannel {
    fn drop(&mut self) {
        self.forget_memfd();
    }
}

/// The SHM.OPEN reply: the layout as name/value pairs (a RESP3 map, or a flat RESP2 array).
pub fn open_reply(layout: &Layout, resp3: bool) -> Vec<u8> {
    let protocol = match layout.protocol {
        Protocol::Resp => "resp",
        Protocol::Memcache => "memcache",
    };
    let fields: [(&str, Field); 6] = [
        ("version", Field::Int(VERSION as u64)),
        ("layout", Field::Text(LAYOUT_NAME)),
        ("protocol", Field::Text(protocol)),
        (
            "request-ring-bytes",
            Field::Int(layout.request_ring_bytes as u64),
        ),
        (
            "reply-ring-bytes",
            Field::Int(layout.reply_ring_bytes as u64),
        ),
        ("fds", Field::Text("memfd,server-doorbell,client-doorbell")),
    ];
    let mut out = if resp3 {
        format!("%{}\r\n", fields.len()).into_bytes()
    } else {
        format!("*{}\r\n", fields.len() * 2).into_bytes()
    };
    for (name, value) in fields {
        out.extend_from_slice(format!("${}\r\n{name}\r\n", name.len()).as_bytes());
        match value {
            Field::Int(n) => out.extend_from_slice(format!(":{n}\r\n").as_bytes()),
            Field::Text(text) => {
                out.extend_from_slice(format!("${}\r\n{text}\r\n", text.len()).as_bytes())
            }
        }
    }
    out
}

enum Field {
    Int(u64),
    Text(&'static str),
}
