//! What the gateway allows a connection before and between requests: a bound on the
//! connections open at once (one past it is answered `503 SlowDown` and closed), a
//! time to send a request's headers (a slowloris is closed), a time a keep-alive
//! connection may sit idle, and an accept loop that backs off when the process is out
//! of file descriptors instead of spinning on the error.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use metrics::counter;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// The gateway's bounds on connections (`somnus s3 --max-connections`,
/// `--header-timeout-s`, `--idle-timeout-s`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub max_connections: usize,
    /// From a connection's start (or the end of its last request) to the end of the
    /// next request's headers, while bytes come.
    pub header_timeout: Duration,
    /// With no request under way and no byte read or written.
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 4096,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// The connections open now, shared by the accept loop and each connection's task.
#[derive(Debug, Default)]
pub struct Open(AtomicUsize);

impl Open {
    /// A slot for one more connection, if there is room under `max`.
    pub fn take(self: &Arc<Open>, max: usize) -> Option<Slot> {
        let taken = self.0.fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
            (open < max).then_some(open + 1)
        });
        taken.ok().map(|_| Slot(self.clone()))
    }

    pub fn count(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }
}

/// One open connection's place, given back when it closes.
#[derive(Debug)]
pub struct Slot(Arc<Open>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Accepts the next connection; an error that says the process or the system is out
/// of descriptors or memory waits before the next try (10 ms, doubling to 1 s while
/// it lasts), where retrying at once spun a core; others (a connection reset before
/// it was accepted) are the client's and retried at once.
pub async fn accept(listener: &TcpListener, backoff: &mut Duration) -> TcpStream {
    loop {
        match listener.accept().await {
            Ok((socket, _)) => {
                *backoff = Duration::ZERO;
                return socket;
            }
            Err(error) if is_out_of_resources(&error) => {
                counter!("somnus_s3_accept_errors_total").increment(1);
                *backoff = (*backoff * 2).clamp(Duration::from_millis(10), Duration::from_secs(1));
                if *backoff == Duration::from_millis(10) {
                    eprintln!("s3: cannot accept connections ({error}): backing off");
                }
                tokio::time::sleep(*backoff).await;
            }
            Err(_) => {}
        }
    }
}

fn is_out_of_resources(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(nix::libc::EMFILE | nix::libc::ENFILE | nix::libc::ENOBUFS | nix::libc::ENOMEM)
    )
}

/// Answers a connection past the bound `503 SlowDown` (as S3 asks a client to slow
/// down) and closes it, spending at most a second on it.
pub async fn refuse(mut socket: TcpStream, max: usize) {
    counter!("somnus_s3_connections_refused_total").increment(1);
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>\
         <Message>the gateway serves {max} connections at once; try again</Message></Error>"
    );
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\n\
         Content-Length: {}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let write = async {
        socket.write_all(answer.as_bytes()).await?;
        socket.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
}

/// What a connection did last, for its bounds: when it last moved a byte, its
/// requests under way, since when it has had none, and when the first byte of the
/// next request's headers came (milliseconds since it started; `NONE`: not yet).
#[derive(Debug)]
pub struct Activity {
    started: Instant,
    last_io: AtomicU64,
    requests: AtomicUsize,
    idle_since: AtomicU64,
    headers_since: AtomicU64,
}

const NONE: u64 = u64::MAX;

/// Why a connection is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expired {
    /// No request under way and no byte moved for the idle timeout.
    Idle,
    /// A request's headers begun and not finished within the header timeout.
    Headers,
}

impl Activity {
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity {
            started: Instant::now(),
            last_io: AtomicU64::new(0),
            requests: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            headers_since: AtomicU64::new(NONE),
        })
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn moved(&self, read: bool) {
        let now = self.now_ms();
        self.last_io.fetch_max(now, Ordering::Relaxed);
        if read && self.requests.load(Ordering::Acquire) == 0 {
            // The first byte of the next request: its headers' time starts.
            let _ =
                self.headers_since.compare_exchange(NONE, now, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// Marks a request under way (its headers read) until the guard is dropped (its
    /// answer given).
    pub fn request(self: &Arc<Activity>) -> RequestGuard {
        self.requests.fetch_add(1, Ordering::AcqRel);
        self.headers_since.store(NONE, Ordering::Release);
        RequestGuard(self.clone())
    }

    /// Whether the connection has outlived a bound of `limits`, and which.
    pub fn expired(&self, limits: &Limits) -> Option<Expired> {
        if self.requests.load(Ordering::Acquire) > 0 {
            return None;
        }
        let now = self.now_ms();
        let headers_since = self.headers_since.load(Ordering::Acquire);
        if headers_since != NONE {
            let taken = Duration::from_millis(now.saturating_sub(headers_since));
            return (taken >= limits.header_timeout).then_some(Expired::Headers);
        }
        let last =
            self.last_io.load(Ordering::Relaxed).max(self.idle_since.load(Ordering::Acquire));
        let idle = Duration::from_millis(now.saturating_sub(last));
        (idle >= limits.idle_timeout).then_some(Expired::Idle)
    }
}

/// A request under way on a connection.
#[derive(Debug)]
pub struct RequestGuard(Arc<Activity>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        let activity = &self.0;
        activity.idle_since.fetch_max(activity.now_ms(), Ordering::AcqRel);
        activity.requests.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Watches a connection's `activity` every tenth of its shortest bound (at least
/// every 50 ms) until it outlives one; then says which.
pub async fn watch(activity: &Activity, limits: &Limits) -> Expired {
    let shortest = limits.header_timeout.min(limits.idle_timeout);
    let mut tick = tokio::time::interval((shortest / 10).max(Duration::from_millis(50)));
    loop {
        tick.tick().await;
        if let Some(expired) = activity.expired(limits) {
            let why = match expired {
                Expired::Idle => "idle",
                Expired::Headers => "header_timeout",
            };
            counter!("somnus_s3_connections_closed_total", "why" => why).increment(1);
            return expired;
        }
    }
}

/// A connection's stream (a socket, or TLS over one) that records each read and write
/// that moved bytes.
pub struct Watched<S> {
    socket: S,
    activity: Arc<Activity>,
}

impl<S> Watched<S> {
    pub fn new(socket: S, activity: Arc<Activity>) -> Watched<S> {
        Watched { socket, activity }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.socket).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.moved(true);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.socket).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.moved(false);
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.socket).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.moved(false);
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.socket.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.socket).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.socket).poll_shutdown(cx)
    }
}

/// A request's body that tells whether it was read to its end. An answer given before
/// its request's body was read (a refusal of an `Expect: 100-continue` PUT, whose
/// client then never sends the body) leaves the connection unusable for the next
/// request: hyper closes it after the answer, and a client that reused it meanwhile
/// saw it closed under its next request. Such an answer says `Connection: close`.
pub struct ReadToEnd<B> {
    body: B,
    ended: Arc<std::sync::atomic::AtomicBool>,
}

impl<B: hyper::body::Body + Unpin> ReadToEnd<B> {
    /// `body`, and a flag that is set once it has been read to its end.
    pub fn new(body: B) -> (ReadToEnd<B>, Arc<std::sync::atomic::AtomicBool>) {
        let ended = Arc::new(std::sync::atomic::AtomicBool::new(body.is_end_stream()));
        (ReadToEnd { body, ended: ended.clone() }, ended)
    }
}

impl<B: hyper::body::Body + Unpin> hyper::body::Body for ReadToEnd<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<B::Data>, B::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.body.is_end_stream() {
            self.ended.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// Says `Connection: close` on `response` unless its request's body was read to its
/// end (`ended`).
pub fn close_unless_read(
    response: &mut http::Response<s3s::Body>,
    ended: &std::sync::atomic::AtomicBool,
) {
    if !ended.load(Ordering::Acquire) {
        counter!("somnus_s3_connections_closed_total", "why" => "body_unread").increment(1);
        response
            .headers_mut()
            .insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
    }
}
