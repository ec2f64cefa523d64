//! A small S3 client over one HTTP/1.1 connection, each request signed with SigV4
//! (unsigned payload): what `somnus bench s3` and `somnus demo` drive an endpoint with.

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

use crate::sigv4::{self, Signer, UNSIGNED_PAYLOAD};

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("cannot connect to {0}: {1}")]
    Connect(SocketAddr, std::io::Error),
    #[error("HTTP: {0}")]
    Http(#[from] hyper::Error),
    #[error("{request}: HTTP {status}: {body}")]
    Refused { request: String, status: u16, body: String },
    #[error("measuring the disk: {0}")]
    Disk(String),
    #[error("TLS with {0}: {1}")]
    Tls(SocketAddr, std::io::Error),
}

/// A TLS error, with what to do about the one people meet most: a self-signed
/// certificate made as a CA (`openssl req -x509` marks it so by default), which TLS
/// refuses as a server's own.
fn with_hint(error: std::io::Error) -> std::io::Error {
    if error.to_string().contains("CaUsedAsEndEntity") {
        return std::io::Error::other(format!(
            "{error}: the endpoint's certificate is marked as a certificate authority, \
             which a server's own must not be (make it with `-addext \
             basicConstraints=critical,CA:FALSE`, or sign it with a CA and trust that)"
        ));
    }
    error
}

/// Where an endpoint is and how to speak to it: HTTP, or HTTPS to a host name the
/// endpoint's certificate names.
#[derive(Clone)]
pub struct Endpoint {
    pub address: SocketAddr,
    /// `host:port` as the requests name it (and sign it).
    host: String,
    tls: Option<(std::sync::Arc<rustls::ClientConfig>, rustls::pki_types::ServerName<'static>)>,
}

impl Endpoint {
    pub fn http(address: SocketAddr) -> Endpoint {
        Endpoint { address, host: address.to_string(), tls: None }
    }

    /// HTTPS to `address`, whose certificate must name `host` and be signed by an
    /// authority in the PEM file `ca`.
    pub fn https(
        address: SocketAddr,
        host: &str,
        ca: &std::path::Path,
    ) -> Result<Endpoint, crate::https::HttpsError> {
        let tls = crate::https::client_config(ca, host)?;
        // An IPv6 address is written in brackets before its port.
        let authority = if host.contains(':') { format!("[{host}]") } else { host.to_owned() };
        Ok(Endpoint { address, host: format!("{authority}:{}", address.port()), tls: Some(tls) })
    }

    pub fn is_https(&self) -> bool {
        self.tls.is_some()
    }
}

/// A connection to the endpoint, signing every request.
pub struct Connection {
    sender: SendRequest<Full<Bytes>>,
    host: String,
}

#[allow(clippy::disallowed_methods, reason = "a request is signed with the time of day")]
fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

impl Connection {
    pub async fn open(endpoint: &Endpoint) -> Result<Connection, BenchError> {
        let address = endpoint.address;
        let stream = tokio::net::TcpStream::connect(address)
            .await
            .map_err(|e| BenchError::Connect(address, e))?;
        let _ = stream.set_nodelay(true);
        let sender = match &endpoint.tls {
            None => {
                let (sender, connection) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
                tokio::spawn(connection);
                sender
            }
            Some((config, name)) => {
                let connector = tokio_rustls::TlsConnector::from(config.clone());
                let stream = connector
                    .connect(name.clone(), stream)
                    .await
                    .map_err(|e| BenchError::Tls(address, with_hint(e)))?;
                let (sender, connection) =
                    hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
                tokio::spawn(connection);
                sender
            }
        };
        Ok(Connection { sender, host: endpoint.host.clone() })
    }

    /// Sends one signed request (`path` is `/bucket/key`, not yet percent-encoded);
    /// the status and the body.
    pub async fn send(
        &mut self,
        signer: &Signer,
        method: &str,
        path: &str,
        body: Bytes,
    ) -> Result<(u16, Bytes), BenchError> {
        let path = sigv4::encode_path(path);
        let date = sigv4::amz_date(unix_now());
        let headers = [
            ("host", self.host.as_str()),
            ("x-amz-content-sha256", UNSIGNED_PAYLOAD),
            ("x-amz-date", date.as_str()),
        ];
        let authorization =
            signer.authorization(method, &path, "", &headers, UNSIGNED_PAYLOAD, &date);
        let mut request = hyper::Request::builder().method(method).uri(&path);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let request = request
            .header("authorization", authorization)
            .header("content-length", body.len())
            .body(Full::new(body))
            .map_err(|e| BenchError::Refused {
                request: path.clone(),
                status: 0,
                body: e.to_string(),
            })?;
        self.sender.ready().await?;
        let response = self.sender.send_request(request).await?;
        let status = response.status().as_u16();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((status, body))
    }
}
