//! A process's connections to its peers: one writer task per peer, fed through an
//! unbounded queue, that dials the peer from the address book (again after a failure)
//! and writes the queued messages in order; and the listener, whose authenticated
//! connections feed one inbox. A client's replies go back on the client's own
//! connection (clients do not listen).
//!
//! Messages to a peer that cannot be reached are dropped: the protocol retransmits
//! what must arrive (every request has a timeout in the core), as it would for a lost
//! packet.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use somnus_core::cluster::{Message, Peer};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::transport::{self, ConnError, FrameWriter, Identity, Inbound, WireCounters};

/// Where peers listen.
pub trait AddressBook: Send + Sync + 'static {
    fn address(&self, peer: Peer) -> Option<SocketAddr>;
}

impl AddressBook for crate::cluster_file::ClusterFile {
    fn address(&self, peer: Peer) -> Option<SocketAddr> {
        crate::cluster_file::ClusterFile::address(self, peer)
    }
}

type Queue = mpsc::UnboundedSender<Message>;

/// The sending side of a process: a queue per peer.
#[derive(Clone)]
pub struct Outbox {
    identity: Arc<Identity>,
    book: Arc<dyn AddressBook>,
    counters: Arc<WireCounters>,
    queues: Arc<Mutex<BTreeMap<Peer, Queue>>>,
    /// Where what peers send back on connections this process opened goes.
    inbox: mpsc::Sender<Inbound>,
}

impl Outbox {
    pub fn new(
        identity: Arc<Identity>,
        book: Arc<dyn AddressBook>,
        counters: Arc<WireCounters>,
        inbox: mpsc::Sender<Inbound>,
    ) -> Outbox {
        Outbox { identity, book, counters, queues: Arc::default(), inbox }
    }

    /// Queues `message` for `to`; dials `to` if no connection is up or being made.
    pub fn send(&self, to: Peer, mut message: Message) {
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(queue) = queues.get(&to) {
            match queue.send(message) {
                Ok(()) => return,
                // The writer ended: the message comes back, for a new connection.
                Err(mpsc::error::SendError(back)) => message = back,
            }
            queues.remove(&to);
        }
        let Some(address) = self.book.address(to) else {
            // A client whose connection closed: its replies have nowhere to go.
            self.counters.count_dropped();
            return;
        };
        let (queue, rx) = mpsc::unbounded_channel();
        let _ = queue.send(message);
        queues.insert(to, queue);
        let this = self.clone();
        tokio::spawn(async move {
            this.dial_and_write(address, to, rx).await;
            this.forget(to);
        });
    }

    /// Sends to `peer` over a connection it opened (a client's).
    pub fn attach(&self, peer: Peer, writer: FrameWriter) {
        let (queue, rx) = mpsc::unbounded_channel();
        self.queues.lock().unwrap_or_else(|e| e.into_inner()).insert(peer, queue);
        let (counters, this) = (self.counters.clone(), self.clone());
        tokio::spawn(async move {
            write_all(writer, rx, &counters).await;
            this.forget(peer);
        });
    }

    fn forget(&self, peer: Peer) {
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if queues.get(&peer).is_some_and(|queue| queue.is_closed()) {
            queues.remove(&peer);
        }
    }
}

impl Outbox {
    /// Dials `address` and writes the queue to it until the connection fails; then the
    /// queue's messages are dropped and a later send dials again. What the peer sends
    /// back on the connection (a client's replies) goes to the inbox.
    async fn dial_and_write(
        &self,
        address: SocketAddr,
        peer: Peer,
        mut rx: mpsc::UnboundedReceiver<Message>,
    ) {
        let counters = self.counters.clone();
        let connection = match transport::connect(address, peer, &self.identity).await {
            Ok(connection) if connection.peer == peer => connection,
            refused => {
                // The answering end was not who it should be: counted as the acceptor
                // counts what it refuses (an unreachable peer is not counted).
                if let Err(error @ (ConnError::Tls(_) | ConnError::WrongPeer { .. })) = &refused {
                    counters.count_refused(error);
                }
                // Unreachable (or not who the book says): what was queued is lost, as
                // on a lost link; wait a little so that a dead peer is not dialled in a
                // loop.
                tokio::time::sleep(Duration::from_millis(100)).await;
                rx.close();
                while rx.try_recv().is_ok() {
                    counters.count_dropped();
                }
                return;
            }
        };
        let mut writer_task = tokio::spawn({
            let counters = counters.clone();
            async move { write_all(connection.writer, rx, &counters).await }
        });
        let reading = transport::pump(connection.reader, peer, self.inbox.clone(), counters);
        tokio::select! {
            _ = &mut writer_task => {}
            () = reading => writer_task.abort(),
        }
    }
}

async fn write_all(
    mut writer: FrameWriter,
    mut rx: mpsc::UnboundedReceiver<Message>,
    counters: &WireCounters,
) {
    while let Some(message) = rx.recv().await {
        if writer.send_message(&message).await.is_err() {
            counters.count_dropped();
            break;
        }
        counters.frames_out.fetch_add(1, Ordering::Relaxed);
    }
    rx.close();
    while rx.try_recv().is_ok() {
        counters.count_dropped();
    }
}

/// Listens on `listener` and feeds every authenticated peer's messages into `inbox`;
/// a client's connection also carries the replies to it.
pub fn listen(
    listener: TcpListener,
    identity: Arc<Identity>,
    counters: Arc<WireCounters>,
    outbox: Outbox,
    inbox: mpsc::Sender<Inbound>,
) -> tokio::task::JoinHandle<()> {
    let pump_counters = counters.clone();
    tokio::spawn(transport::serve(listener, identity, counters, move |connection| {
        let peer = connection.peer;
        // A peer that listens gets its replies on the connection this process dials;
        // this one's writing half is kept open (unused) as long as the peer reads it,
        // since closing it would read as the connection's end on the other side.
        let idle_writer = match peer {
            Peer::Client(_) => {
                outbox.attach(peer, connection.writer);
                None
            }
            _ => Some(connection.writer),
        };
        let (inbox, counters) = (inbox.clone(), pump_counters.clone());
        tokio::spawn(async move {
            transport::pump(connection.reader, peer, inbox, counters).await;
            drop(idle_writer);
        });
    }))
}
