//! What the transport's tests share: a listener that pumps what it receives into one
//! inbox, and waits bounded in time.
#![allow(dead_code, unreachable_pub)] // Each test file uses its share.

use std::sync::Arc;
use std::time::Duration;

use somnus_runtime::net::transport::{self, Identity, Inbound, WireCounters};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// Every wait in these tests is bounded by this.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// A listener on loopback that pumps every authenticated peer's messages into one inbox.
pub async fn listener(
    identity: Identity,
) -> (std::net::SocketAddr, Arc<WireCounters>, mpsc::Receiver<Inbound>, tokio::task::JoinHandle<()>)
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let counters = Arc::new(WireCounters::default());
    let (inbox, received) = mpsc::channel(64);
    let pump_counters = counters.clone();
    let task = tokio::spawn(transport::serve(
        listener,
        Arc::new(identity),
        counters.clone(),
        move |connection| {
            let (reader, from) = (connection.reader, connection.peer);
            // The writer is dropped: these tests only send to the listener.
            tokio::spawn(transport::pump(reader, from, inbox.clone(), pump_counters.clone()));
        },
    ));
    (addr, counters, received, task)
}

/// Waits until `kind` has been counted `n` times, and not more.
pub async fn refused(counters: &WireCounters, kind: &str, n: u64) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while counters.refused(kind) < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{kind} never counted {n} times: {:?}",
            counters.refusals().collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(counters.refused(kind), n, "{kind}");
}

/// The next message received, within `PATIENCE`.
pub async fn next(received: &mut mpsc::Receiver<Inbound>) -> Inbound {
    tokio::time::timeout(PATIENCE, received.recv()).await.unwrap().unwrap()
}

/// Nothing received, after a moment for it to have come: `what` did not reach the
/// receiver.
pub async fn nothing_received(received: &mut mpsc::Receiver<Inbound>, what: &str) {
    tokio::time::sleep(Duration::from_millis(200)).await;
    let got = received.try_recv().map(|inbound| inbound.message);
    assert!(got.is_err(), "{what} reached the receiver: {got:?}");
}
