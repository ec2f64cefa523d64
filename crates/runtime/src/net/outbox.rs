//! A process's connections to its peers: one writer task per peer, fed through a
//! bounded queue, that dials the peer from the address book (again after a failure)
//! and writes the queued messages in order; and the listener, whose authenticated
//! connections feed one inbox. A client's replies go back on the client's own
//! connection (clients do not listen).
//!
//! Messages to a peer that cannot be reached are dropped, and so are those that find
//! its queue full ([`QUEUE_MESSAGES_MAX`], [`QUEUE_BYTES_MAX`]): the protocol
//! retransmits what must arrive (every request has a timeout in the core), as it would
//! for a lost packet, and a slow or dead peer holds no more of this process's memory
//! than its queue's bound. (The inbox is bounded too: a process that reads slowly
//! stops reading its connections, and TCP holds its peers' writers back.)

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use somnus_core::cluster::{Message, Payload, Peer};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::net::transport::{self, ConnError, FrameWriter, Identity, Inbound, WireCounters};

/// Where peers listen.
pub trait AddressBook: Send + Sync + 'static {
    fn address(&self, peer: Peer) -> Option<SocketAddr>;
}

impl AddressBook for crate::cluster_file::ClusterFile {
    fn address(&self, peer: Peer) -> Option<SocketAddr> {
        crate::cluster_file::ClusterFile::address(self, peer)
    }
}

/// Messages queued for one peer at most.
pub const QUEUE_MESSAGES_MAX: usize = 4096;
/// Bytes of data (the messages' attachments) queued for one peer at most: a writer
/// behind a slow link holds back at most this.
pub const QUEUE_BYTES_MAX: u64 = 128 << 20;

/// A message and the bytes it counts for in its queue.
type Queued = (Message, u64);

/// A peer's queue: its sender and the bytes it holds.
#[derive(Clone)]
struct Queue {
    tx: mpsc::Sender<Queued>,
    bytes: Arc<AtomicU64>,
}

impl Queue {
    fn new() -> (Queue, QueueReceiver) {
        let (tx, rx) = mpsc::channel(QUEUE_MESSAGES_MAX);
        let bytes = Arc::new(AtomicU64::new(0));
        (Queue { tx, bytes: bytes.clone() }, QueueReceiver { rx, bytes })
    }

    /// Queues `message`; a full queue drops it (`Ok(false)`); a queue whose writer
    /// ended gives it back.
    fn push(&self, message: Message) -> Result<bool, Message> {
        let size = attached_bytes(&message);
        // Counted before the writer can take it (and count it out): counted after,
        // the writer's subtraction could come first and wrap the count.
        if self.bytes.fetch_add(size, Ordering::Relaxed) + size > QUEUE_BYTES_MAX {
            self.bytes.fetch_sub(size, Ordering::Relaxed);
            return Ok(false);
        }
        match self.tx.try_send((message, size)) {
            Ok(()) => Ok(true),
            Err(error) => {
                self.bytes.fetch_sub(size, Ordering::Relaxed);
                match error {
                    mpsc::error::TrySendError::Full(_) => Ok(false),
                    mpsc::error::TrySendError::Closed((message, _)) => Err(message),
                }
            }
        }
    }
}

/// The writer's end of a peer's queue.
struct QueueReceiver {
    rx: mpsc::Receiver<Queued>,
    bytes: Arc<AtomicU64>,
}

impl QueueReceiver {
    async fn recv(&mut self) -> Option<Message> {
        let (message, size) = self.rx.recv().await?;
        self.bytes.fetch_sub(size, Ordering::Relaxed);
        Some(message)
    }

    /// Closes the queue and counts what was left in it as dropped.
    fn drop_rest(&mut self, counters: &WireCounters) {
        self.rx.close();
        while let Ok((_, size)) = self.rx.try_recv() {
            self.bytes.fetch_sub(size, Ordering::Relaxed);
            counters.count_dropped();
        }
    }
}

/// The bytes a message's attachment carries, and a little for its header.
fn attached_bytes(message: &Message) -> u64 {
    Payload::total_bytes(&message.payloads()) as u64 + 64
}

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
            match queue.push(message) {
                Ok(true) => return,
                Ok(false) => {
                    self.counters.count_queue_full();
                    return;
                }
                // The writer ended: the message comes back, for a new connection.
                Err(back) => message = back,
            }
            queues.remove(&to);
        }
        let Some(address) = self.book.address(to) else {
            // A client whose connection closed: its replies have nowhere to go.
            self.counters.count_dropped();
            return;
        };
        let (queue, rx) = Queue::new();
        let _ = queue.push(message);
        queues.insert(to, queue);
        let this = self.clone();
        tokio::spawn(async move {
            this.dial_and_write(address, to, rx).await;
            this.forget(to);
        });
    }

    /// Sends to `peer` over a connection it opened (a client's).
    pub fn attach(&self, peer: Peer, writer: FrameWriter) {
        let (queue, rx) = Queue::new();
        self.queues.lock().unwrap_or_else(|e| e.into_inner()).insert(peer, queue);
        let (counters, this) = (self.counters.clone(), self.clone());
        tokio::spawn(async move {
            write_all(writer, rx, &counters).await;
            this.forget(peer);
        });
    }

    fn forget(&self, peer: Peer) {
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if queues.get(&peer).is_some_and(|queue| queue.tx.is_closed()) {
            queues.remove(&peer);
        }
    }
}

impl Outbox {
    /// Dials `address` and writes the queue to it until the connection fails; then the
    /// queue's messages are dropped and a later send dials again. What the peer sends
    /// back on the connection (a client's replies) goes to the inbox.
    async fn dial_and_write(&self, address: SocketAddr, peer: Peer, mut rx: QueueReceiver) {
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
                rx.drop_rest(&counters);
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

async fn write_all(mut writer: FrameWriter, mut rx: QueueReceiver, counters: &WireCounters) {
    while let Some(message) = rx.recv().await {
        if writer.send_message(&message).await.is_err() {
            counters.count_dropped();
            break;
        }
        counters.frames_out.fetch_add(1, Ordering::Relaxed);
    }
    rx.drop_rest(counters);
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use somnus_core::cluster::{ChunkId, ChunkIndex, Epoch, Payload, Stamp};
    use somnus_types::{ByteRange, ChunkGroupId, ObjectId, ServerId};
    use somnus_wire::ClusterSecret;

    use super::*;

    struct At(SocketAddr);

    impl AddressBook for At {
        fn address(&self, _: Peer) -> Option<SocketAddr> {
            Some(self.0)
        }
    }

    #[tokio::test]
    async fn a_peer_that_never_answers_holds_no_more_than_its_queue_bound() {
        // Connections are taken (the kernel's backlog) and never answered.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let secret = ClusterSecret::from_bytes([3; 32]);
        let wire = crate::cluster_file::Wire::Plain;
        let identity = Identity::on(wire, Peer::Server(ServerId(0)), secret).unwrap();
        let counters = Arc::new(WireCounters::default());
        let (inbox, _) = mpsc::channel(1);
        let book = Arc::new(At(silent.local_addr().unwrap()));
        let outbox = Outbox::new(Arc::new(identity), book, counters.clone(), inbox);
        let data = Payload::new(vec![7u8; 64 << 10].into());
        let to = Peer::Server(ServerId(1));
        let sent = 3000;
        for request in 0..sent {
            let message = Message::ClientWrite {
                request,
                group: ChunkGroupId(0),
                epoch: Epoch(1),
                chunk: ChunkId { object: ObjectId(1), chunk: ChunkIndex(0) },
                range: ByteRange::new(0, 64 << 10),
                stamp: Stamp(request),
                data: data.clone(),
            };
            outbox.send(to, message);
        }
        let queued = {
            let queues = outbox.queues.lock().unwrap();
            queues[&to].bytes.load(Ordering::Relaxed)
        };
        let each = (64 << 10) + 64;
        assert_eq!(queued, QUEUE_BYTES_MAX / each * each, "the queue is full to its bound");
        assert_eq!(counters.queue_full(), sent - QUEUE_BYTES_MAX / each, "the rest dropped");
    }
}
