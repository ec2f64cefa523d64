//! The gateway's HTTP server: S3 over HTTP/1.1 on a TCP listener, every connection
//! with TCP_NODELAY (without it a small GET's last segment waits for the client's
//! delayed ACK, about 40 ms, as Garage's users found), every request signed with
//! AWS Signature V4 by a key the gateway knows (anonymous requests are refused), every
//! connection within the gateway's bounds (`connections`).

use std::future::Future;
use std::sync::Arc;

use hyper_util::rt::TokioIo;
use s3s::auth::{S3Auth, SecretKey, SimpleAuth};
use s3s::service::{S3Service, S3ServiceBuilder};
use s3s::{S3Result, s3_error};
use tokio::net::TcpListener;

use crate::compat::{self, RequestIds};
use crate::connections::{self, Activity, Limits, Open, ReadToEnd, Watched};
use crate::gateway::Gateway;
use crate::observe::{self, AccessLog, Answered};
use crate::store::Store;

/// An access key and its secret.
#[derive(Clone, Debug)]
pub struct Credentials {
    pub access_key: String,
    pub secret_key: String,
}

/// The keys the gateway knows; an unknown one is `InvalidAccessKeyId`, as S3 answers
/// (s3s's own answer is `NotSignedUp`).
struct Keys(SimpleAuth);

#[async_trait::async_trait]
impl S3Auth for Keys {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.0.lookup(access_key) {
            Some(secret) => Ok(secret.clone()),
            None => Err(s3_error!(
                InvalidAccessKeyId,
                "the access key {access_key:?} is not one of this gateway's"
            )),
        }
    }
}

/// The S3 service over `store`, accepting requests signed with `credentials`.
pub fn service(store: Store, credentials: &[Credentials]) -> S3Service {
    let mut builder = S3ServiceBuilder::new(Gateway::new(store));
    let mut auth = SimpleAuth::new();
    for c in credentials {
        auth.register(c.access_key.clone(), c.secret_key.clone().into());
    }
    builder.set_auth(Keys(auth));
    builder.build()
}

/// Serves `service` on `listener` until `shutdown` completes, within the default
/// [`Limits`]; connections then open end with their requests in flight.
pub async fn serve(
    listener: TcpListener,
    service: S3Service,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_logged(listener, service, shutdown, None, Limits::default(), None).await
}

/// [`serve`] within `limits`, each request also written to `log` (and always to the
/// metrics), over HTTPS when given `tls` (the TLS handshake within the header
/// timeout).
pub async fn serve_logged(
    listener: TcpListener,
    service: S3Service,
    shutdown: impl Future<Output = ()>,
    log: Option<AccessLog>,
    limits: Limits,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> std::io::Result<()> {
    let tls = tls.map(tokio_rustls::TlsAcceptor::from);
    let service = Arc::new(service);
    let ids = Arc::new(RequestIds::new());
    let open = Arc::new(Open::default());
    let mut shutdown = std::pin::pin!(shutdown);
    let mut backoff = std::time::Duration::ZERO;
    loop {
        let socket = tokio::select! {
            socket = connections::accept(&listener, &mut backoff) => socket,
            () = &mut shutdown => return Ok(()),
        };
        let _ = socket.set_nodelay(true);
        let Some(slot) = open.take(limits.max_connections) else {
            // Over HTTPS an answer in the clear would read as a TLS error: closed.
            if tls.is_none() {
                tokio::spawn(connections::refuse(socket, limits.max_connections));
            } else {
                metrics::counter!("somnus_s3_connections_refused_total").increment(1);
            }
            continue;
        };
        let activity = Activity::new();
        let service = as_s3_answers((*service).clone(), ids.clone(), log.clone(), activity.clone());
        let tls = tls.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let Some(tls) = tls else {
                return serve_connection(socket, service, activity, limits).await;
            };
            let handshake = tokio::time::timeout(limits.header_timeout, tls.accept(socket));
            match handshake.await {
                Ok(Ok(stream)) => serve_connection(stream, service, activity, limits).await,
                Ok(Err(_)) | Err(_) => {
                    metrics::counter!("somnus_s3_connections_closed_total", "why" => "tls")
                        .increment(1);
                }
            }
        });
    }
}

/// Serves one connection's requests until it closes or outlives a bound of
/// `limits`.
async fn serve_connection<S, F>(
    stream: S,
    service: impl hyper::service::Service<
        http::Request<hyper::body::Incoming>,
        Response = s3s::HttpResponse,
        Error = s3s::HttpError,
        Future = F,
    >,
    activity: Arc<Activity>,
    limits: Limits,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    F: Future<Output = Result<s3s::HttpResponse, s3s::HttpError>> + Send + 'static,
{
    let io = TokioIo::new(Watched::new(stream, activity.clone()));
    let connection =
        hyper::server::conn::http1::Builder::new().keep_alive(true).serve_connection(io, service);
    // A client that goes away mid-request ends only its connection; one that outlives
    // a bound (no request under way) is dropped, which closes it.
    tokio::select! {
        _ = connection => {}
        _ = connections::watch(&activity, &limits) => {}
    }
}

/// `service`, as S3 answers. Before it: a presigned URL's expiry checked against S3's
/// limits, a request signed both by header and by query refused, a request signed
/// with `Date` given its `X-Amz-Date`, a write asking for a feature out of scope or a
/// storage class not here refused, and a Streaming SigV4 body sent without a length
/// (`Transfer-Encoding: chunked`) given the decoded length it declares. After it: a HEAD
/// that asked for a range answered 206 (s3s answers it 200, with the range's length
/// and Content-Range right), a listing's control characters encoded, a request id on
/// every answer, and the request counted, timed and logged. Meanwhile the request is
/// under way on its connection (`activity`), which no bound closes.
fn as_s3_answers(
    service: S3Service,
    ids: Arc<RequestIds>,
    log: Option<AccessLog>,
    activity: Arc<Activity>,
) -> impl hyper::service::Service<
    http::Request<hyper::body::Incoming>,
    Response = s3s::HttpResponse,
    Error = s3s::HttpError,
    Future = impl Future<Output = Result<s3s::HttpResponse, s3s::HttpError>> + Send,
> + Clone {
    hyper::service::service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
        let under_way = activity.request();
        let started = tokio::time::Instant::now();
        let id = ids.next();
        let method = request.method().clone();
        let ranged_head =
            method == http::Method::HEAD && request.headers().contains_key(http::header::RANGE);
        compat::date_as_amz_date(request.headers_mut());
        compat::decoded_length_as_content_length(request.headers_mut());
        let path = request.uri().path().to_owned();
        let query = request.uri().query().unwrap_or("").to_owned();
        let operation = observe::operation(&method, &path, &query, request.headers());
        let bytes_in = content_length(request.headers());
        let refused = compat::presign_expiry_refused(&query)
            .or_else(|| compat::two_signatures_refused(request.headers(), &query))
            .or_else(|| compat::out_of_scope_refused(&method, request.headers()))
            .or_else(|| compat::storage_class_refused(request.headers()));
        let (parts, body) = request.into_parts();
        let (body, body_read) = ReadToEnd::new(body);
        let request = http::Request::from_parts(parts, s3s::Body::http_body(body));
        let call = match refused {
            None => {
                let service = service.clone();
                Ok(async move { service.call(request).await })
            }
            Some(error) => Err(error),
        };
        let log = log.clone();
        async move {
            let mut response = match call {
                Ok(call) => call.await?,
                Err(error) => {
                    error.to_http_response().map_err(|e| s3s::HttpError::new(Box::new(e)))?
                }
            };
            if ranged_head && response.status() == http::StatusCode::OK {
                *response.status_mut() = http::StatusCode::PARTIAL_CONTENT;
            }
            if compat::gateway_xml(operation, response.headers()) {
                escape_control_characters(&mut response);
            }
            compat::with_request_id(&mut response, &id);
            connections::close_unless_read(&mut response, &body_read);
            let code = response.body().bytes().filter(|_| response.status().as_u16() >= 400);
            let answered = Answered {
                id: &id,
                operation,
                path: &path,
                status: response.status().as_u16(),
                code: code.as_deref().and_then(observe::error_code),
                bytes_in,
                bytes_out: content_length(response.headers()),
                seconds: started.elapsed().as_secs_f64(),
            };
            observe::record(&answered, log.as_ref());
            drop(under_way);
            Ok(response)
        }
    })
}

/// A header's `Content-Length`, or 0.
fn content_length(headers: &http::HeaderMap) -> u64 {
    let length = headers.get(http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok());
    length.and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// An XML answer of the gateway's with the control characters of the keys in it written
/// as character references (the document is whole in memory; a listing asked for with
/// `encoding-type=url` has none left).
fn escape_control_characters(response: &mut s3s::HttpResponse) {
    let Some(body) = response.body().bytes() else { return };
    if let Some(escaped) = compat::escape_control_characters(&body) {
        let length = escaped.len();
        *response.body_mut() = s3s::Body::from(bytes::Bytes::from(escaped));
        if let Ok(value) = http::HeaderValue::from_str(&length.to_string()) {
            response.headers_mut().insert(http::header::CONTENT_LENGTH, value);
        }
    }
}

/// The gateway's housekeeping, for as long as the runtime runs: every `every`, the
/// uploads left unfinished for longer than `older_than` are aborted, their data freed
/// (S3 keeps them until a lifecycle rule says; the gateway has no lifecycle rules, so
/// it sweeps by itself).
pub fn sweep_abandoned_uploads(
    store: Store,
    older_than: std::time::Duration,
    every: std::time::Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            match store.sweep_uploads(older_than.as_millis() as i64).await {
                Ok(0) => {}
                Ok(n) => {
                    eprintln!("somnus s3: aborted {n} upload(s) unfinished for {older_than:?}")
                }
                Err(error) => eprintln!("somnus s3: sweeping abandoned uploads: {error}"),
            }
        }
    })
}
