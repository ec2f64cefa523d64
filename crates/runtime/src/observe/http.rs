//! Each process's HTTP endpoint (docs/runtime.md, "HTTP"): `GET /status` (the
//! process's report as JSON), `GET /metrics` (Prometheus text), and on the MDS the
//! operator's commands, which need the operator token (a keyed hash of the cluster's
//! secret, `ClusterSecret::operator_token`) as `Authorization: Bearer <token>`:
//! `POST /gear/{n}` and `POST /servers/{id}/remove`.
//!
//! Also the small client that calls them (the CLI, the benchmarks, the tests), with
//! a deadline, so a command against a cluster that is not there fails fast.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use metrics_exporter_prometheus::PrometheusHandle;
use somnus_core::cluster::mds::MdsEvent;
use somnus_core::gear::GearMode;
use somnus_types::ServerId;
use somnus_wire::ClusterSecret;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::cluster_file::ClusterFile;
use crate::observe::status::{MdsReport, ServerReport};

/// What a process's endpoint serves.
#[derive(Clone)]
pub struct Endpoint {
    /// The process's report as JSON; also records its gauges for `/metrics`.
    pub report: Arc<dyn Fn() -> serde_json::Value + Send + Sync>,
    pub metrics: Option<PrometheusHandle>,
    pub operator: Option<Operator>,
}

/// The MDS's operator commands.
#[derive(Clone)]
pub struct Operator {
    pub secret: ClusterSecret,
    pub events: mpsc::Sender<MdsEvent>,
    pub servers: u32,
    pub replicas: u32,
    /// The MDS runs a gear scheduler (`[gear]` in the cluster file).
    pub scheduled: bool,
}

/// Serves `endpoint` on `listener` until the task is aborted.
pub fn serve(listener: TcpListener, endpoint: Endpoint) -> tokio::task::JoinHandle<()> {
    let app = Router::new()
        .route("/status", get(status))
        .route("/metrics", get(metrics))
        .route("/gear/{gear}", post(gear))
        .route("/servers/{id}/remove", post(remove))
        .with_state(endpoint);
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            eprintln!("the HTTP endpoint stopped: {error}");
        }
    })
}

async fn status(State(endpoint): State<Endpoint>) -> Response {
    axum::Json((endpoint.report)()).into_response()
}

async fn metrics(State(endpoint): State<Endpoint>) -> Response {
    (endpoint.report)();
    match &endpoint.metrics {
        Some(handle) => {
            ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], handle.render()).into_response()
        }
        None => (StatusCode::NOT_FOUND, "this process records no metrics\n").into_response(),
    }
}

/// The operator, if the token is right; else the answer to give.
fn authorized(
    endpoint: &Endpoint,
    headers: &HeaderMap,
) -> Result<Operator, (StatusCode, &'static str)> {
    let Some(operator) = endpoint.operator.clone() else {
        return Err((StatusCode::NOT_FOUND, "only the MDS takes operator commands\n"));
    };
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    match token {
        Some(token) if operator.secret.is_operator_token(token) => Ok(operator),
        _ => Err((StatusCode::UNAUTHORIZED, "the operator token is missing or wrong\n")),
    }
}

async fn gear(
    State(endpoint): State<Endpoint>,
    headers: HeaderMap,
    Path(gear): Path<String>,
) -> Response {
    let operator = match authorized(&endpoint, &headers) {
        Ok(operator) => operator,
        Err(answer) => return answer.into_response(),
    };
    if !operator.scheduled && (gear == "auto" || gear == "hold") {
        let message = "this cluster has no gear scheduler (no [gear] section in its cluster \
                       file): the gear is only set by hand\n";
        return (StatusCode::BAD_REQUEST, message).into_response();
    }
    let (mode, done) = match gear.as_str() {
        "auto" => (GearMode::Auto, "the gear scheduler decides the gear\n".to_string()),
        "hold" => (GearMode::Hold, "the gear is held as it is\n".to_string()),
        number => match number.parse::<u32>() {
            Ok(n) if (1..=operator.replicas).contains(&n) => {
                (GearMode::Set(n), format!("gear set to {n}\n"))
            }
            _ => {
                let message = format!(
                    "gear {gear:?} is not auto, hold or a gear between 1 and {}\n",
                    operator.replicas
                );
                return (StatusCode::BAD_REQUEST, message).into_response();
            }
        },
    };
    send(&operator, MdsEvent::GearMode { mode }, done)
}

async fn remove(
    State(endpoint): State<Endpoint>,
    headers: HeaderMap,
    Path(id): Path<u32>,
) -> Response {
    let operator = match authorized(&endpoint, &headers) {
        Ok(operator) => operator,
        Err(answer) => return answer.into_response(),
    };
    if id >= operator.servers {
        let message = format!("there is no server {id}: the cluster has {}\n", operator.servers);
        return (StatusCode::BAD_REQUEST, message).into_response();
    }
    let event = MdsEvent::DeclareLost { server: ServerId(id) };
    send(&operator, event, format!("server {id} removed: its chunk groups are rebuilt\n"))
}

fn send(operator: &Operator, event: MdsEvent, done: String) -> Response {
    match operator.events.try_send(event) {
        Ok(()) => (StatusCode::OK, done).into_response(),
        Err(mpsc::error::TrySendError::Full(_)) => {
            let busy = "the MDS has operator commands waiting: try again in a moment\n";
            (StatusCode::SERVICE_UNAVAILABLE, busy).into_response()
        }
        Err(mpsc::error::TrySendError::Closed(_)) => {
            (StatusCode::SERVICE_UNAVAILABLE, "the MDS is stopping\n").into_response()
        }
    }
}

/// Why a call to an endpoint failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("nothing answers at {address}: {source}")]
    Connect { address: SocketAddr, source: std::io::Error },
    #[error("{address} did not answer within {after:?}")]
    TimedOut { address: SocketAddr, after: Duration },
    #[error("{address}: {source}")]
    Http { address: SocketAddr, source: hyper::Error },
    #[error("{address} refused: {status}: {body}")]
    Refused { address: SocketAddr, status: StatusCode, body: String },
    #[error(
        "the cluster file gives the {role} no HTTP address: add `http = \"IP:PORT\"` to its \
         section and restart it"
    )]
    NoAddress { role: String },
    #[error("{address} answered something that is not its status: {reason}")]
    NotAReport { address: SocketAddr, reason: String },
}

/// How long a call may take, connection included.
pub const CALL_DEADLINE: Duration = Duration::from_secs(3);

/// `method path` at `address`, with the operator's token if given; the body of a
/// success.
pub async fn call(
    address: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> Result<Bytes, CallError> {
    let request = async {
        let stream = tokio::net::TcpStream::connect(address)
            .await
            .map_err(|source| CallError::Connect { address, source })?;
        let http = |source| CallError::Http { address, source };
        let io = hyper_util::rt::TokioIo::new(stream);
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(io).await.map_err(http)?;
        tokio::spawn(connection);
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, address.to_string());
        if let Some(token) = token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request.body(http_body_util::Empty::<Bytes>::new()).map_err(|e| {
            CallError::Refused { address, status: StatusCode::BAD_REQUEST, body: e.to_string() }
        })?;
        let response = sender.send_request(request).await.map_err(http)?;
        let status = response.status();
        let body = http_body_util::BodyExt::collect(response.into_body()).await.map_err(http)?;
        let body = body.to_bytes();
        if !status.is_success() {
            let body = String::from_utf8_lossy(&body).trim().to_owned();
            return Err(CallError::Refused { address, status, body });
        }
        Ok(body)
    };
    tokio::time::timeout(CALL_DEADLINE, request)
        .await
        .unwrap_or(Err(CallError::TimedOut { address, after: CALL_DEADLINE }))
}

/// `GET /status` at `address`, as a report of type `T`.
async fn report<T: serde::de::DeserializeOwned>(address: SocketAddr) -> Result<T, CallError> {
    let body = call(address, "GET", "/status", None).await?;
    serde_json::from_slice(&body)
        .map_err(|error| CallError::NotAReport { address, reason: error.to_string() })
}

/// The report of the MDS of `file`.
pub async fn mds_report(file: &ClusterFile) -> Result<MdsReport, CallError> {
    let address = file.mds.http.ok_or_else(|| CallError::NoAddress { role: "MDS".into() })?;
    report(address).await
}

/// Every server's report, by id, all asked at once; `None` for one that does not
/// answer (stopped, suspended for real, or without an HTTP address).
pub async fn server_reports(file: &ClusterFile) -> Vec<Option<ServerReport>> {
    let calls: Vec<_> = file
        .servers
        .iter()
        .map(|server| {
            let address = server.http;
            tokio::spawn(async move { report(address?).await.ok() })
        })
        .collect();
    let mut reports = Vec::with_capacity(calls.len());
    for call in calls {
        reports.push(call.await.ok().flatten());
    }
    reports
}

/// An operator's command (`/gear/{n}`, `/servers/{id}/remove`) to the MDS of `file`,
/// with the token from its secret; the MDS's answer.
pub async fn operator(
    file: &ClusterFile,
    secret: &ClusterSecret,
    path: &str,
) -> Result<Bytes, CallError> {
    let address = file.mds.http.ok_or_else(|| CallError::NoAddress { role: "MDS".into() })?;
    call(address, "POST", path, Some(&secret.operator_token())).await
}
