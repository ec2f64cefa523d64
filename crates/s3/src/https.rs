//! HTTPS for the gateway and for the clients of `somnus bench s3` and `somnus demo`:
//! TLS 1.3 and 1.2 (rustls, ring), a certificate chain and key from PEM files the
//! operator gives (`somnus s3 --tls-cert FILE --tls-key FILE`), and on the client
//! side the certificate authorities to trust from a PEM file (`--ca-cert FILE`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// Why a PEM file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum HttpsError {
    #[error("{path}: {what}")]
    File { path: PathBuf, what: String },
    #[error("{path} holds no certificate (expected PEM: -----BEGIN CERTIFICATE-----)")]
    NoCertificate { path: PathBuf },
    #[error("the certificate and key do not make a TLS server: {0}")]
    Server(rustls::Error),
    #[error("{host:?} is not a host name or address a certificate could name")]
    Host { host: String },
    #[error("the private key {path} can be read by others (mode {mode:o}); run `chmod 600 {path}`")]
    Exposed { path: PathBuf, mode: u32 },
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, HttpsError> {
    let file_error = |error: rustls::pki_types::pem::Error| HttpsError::File {
        path: path.to_owned(),
        what: error.to_string(),
    };
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(file_error)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(file_error)?;
    if certificates.is_empty() {
        return Err(HttpsError::NoCertificate { path: path.to_owned() });
    }
    Ok(certificates)
}

/// The gateway's TLS: the chain in `cert` (its own certificate first) and the key in
/// `key` (PKCS#8, PKCS#1 or SEC1 PEM), serving HTTP/1.1.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, HttpsError> {
    let chain = certificates(cert)?;
    let exposed = somnus_runtime::files::durable::exposed_mode(key)
        .map_err(|error| HttpsError::File { path: key.to_owned(), what: error.to_string() })?;
    if let Some(mode) = exposed {
        return Err(HttpsError::Exposed { path: key.to_owned(), mode });
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|error| HttpsError::File {
        path: key.to_owned(),
        what: format!("no private key read: {error}"),
    })?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(HttpsError::Server)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(HttpsError::Server)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A client's TLS toward `host`, trusting the authorities (or self-signed
/// certificates) in the PEM file `ca`.
pub fn client_config(
    ca: &Path,
    host: &str,
) -> Result<(Arc<rustls::ClientConfig>, ServerName<'static>), HttpsError> {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in certificates(ca)? {
        roots.add(certificate).map_err(|error| HttpsError::File {
            path: ca.to_owned(),
            what: format!("not a certificate to trust: {error}"),
        })?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(HttpsError::Server)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let name = ServerName::try_from(host.to_owned())
        .map_err(|_| HttpsError::Host { host: host.to_owned() })?;
    Ok((Arc::new(config), name))
}
