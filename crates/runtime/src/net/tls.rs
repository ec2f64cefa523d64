//! TLS 1.3 on the cluster wire (rustls), both ends proving who they are by
//! certificate.
//!
//! The cluster's certificate authority is the cluster's secret: its Ed25519 key is
//! derived from the secret (BLAKE3 key derivation), so every process that holds the
//! secret file (which `somnus up` or `somnus secret create` makes) can build it, and
//! nobody else can. At start each process makes itself a fresh key and a certificate
//! the CA signs, naming its role and id (`server-3.cluster.somnus`); it never leaves
//! the process's memory. A dialer checks that the answering end's certificate names
//! the peer it meant to reach before it shows its own; an acceptor requires a
//! certificate of the CA's and checks that it names the role the peer then claims.
//! After the handshake every record is encrypted and authenticated, so a relay sees
//! nothing it can use, a recorded connection cannot be replayed, and an altered byte
//! ends the connection.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PKCS_ED25519, SanType, SerialNumber,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use somnus_core::cluster::Peer;
use somnus_wire::ClusterSecret;

/// Why the process's TLS could not be set up (a bug or a broken build, never the
/// input's fault: every input is the process's own).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot make the cluster's certificates: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("cannot configure TLS: {0}")]
    Config(#[from] rustls::Error),
    #[error("cannot configure TLS client verification: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    #[error("{0:?} is not a DNS name")]
    Name(String),
}

/// The BLAKE3 context of the CA's key; a new one makes a new CA.
const CA_KEY_CONTEXT: &str = "somnus 2026-11-29 cluster certificate authority Ed25519 key";

/// The domain under which peers are named in their certificates.
const DOMAIN: &str = "cluster.somnus";

/// A process's TLS: what it dials and accepts with.
#[derive(Debug)]
pub struct WireTls {
    pub client: Arc<ClientConfig>,
    pub server: Arc<ServerConfig>,
}

impl WireTls {
    /// The TLS of `own`, in the cluster whose secret is `secret`.
    pub fn new(secret: &ClusterSecret, own: Peer) -> Result<WireTls, TlsError> {
        // AES-128-GCM only: both ends are the cluster's own processes, and of TLS 1.3's
        // suites it is the cheapest per byte where AES has hardware (10 rounds to
        // AES-256's 14) at 128-bit security; a loopback 1 MiB read is bound by it.
        let provider = Arc::new(rustls::crypto::CryptoProvider {
            cipher_suites: vec![rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256],
            ..rustls::crypto::ring::default_provider()
        });
        let ca_key = ca_key(secret)?;
        let ca_params = ca_params();
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, ca_key);
        let (chain, key) = own_certificate(own, &issuer)?;
        let mut roots = RootCertStore::empty();
        roots.add(ca_cert.der().clone())?;
        let roots = Arc::new(roots);
        let versions = [&rustls::version::TLS13];

        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            roots.clone(),
            provider.clone(),
        )
        .build()?;
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain.clone(), key.clone_key())?;
        let mut client = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&versions)?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)?;
        // The name dialed is checked against the certificate all the same; sent in the
        // clear it would tell a watcher which server each process reaches.
        client.enable_sni = false;
        Ok(WireTls { client: Arc::new(client), server: Arc::new(server) })
    }
}

/// The name `peer`'s certificate carries, and the one a dialer asks for (a DNS name
/// of digits, letters, dots and dashes: always valid).
pub fn peer_name(peer: Peer) -> Result<ServerName<'static>, TlsError> {
    let name = match peer {
        Peer::Mds => format!("mds.{DOMAIN}"),
        Peer::Server(id) => format!("server-{}.{DOMAIN}", id.0),
        Peer::Client(id) => format!("client-{}.{DOMAIN}", id.0),
    };
    ServerName::try_from(name.clone()).map_err(|_| TlsError::Name(name))
}

/// Whether `certificate` (a peer's, already verified to be the CA's) names `peer`.
pub fn names(certificate: &CertificateDer<'_>, peer: Peer) -> bool {
    let (Ok(cert), Ok(name)) = (webpki::EndEntityCert::try_from(certificate), peer_name(peer))
    else {
        return false;
    };
    cert.verify_is_valid_for_subject_name(&name).is_ok()
}

/// The CA's key, from the secret: PKCS#8 v1 of an Ed25519 seed (RFC 8410).
fn ca_key(secret: &ClusterSecret) -> Result<KeyPair, rcgen::Error> {
    const PKCS8_ED25519_SEED_PREFIX: [u8; 16] = [
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];
    let mut der = PKCS8_ED25519_SEED_PREFIX.to_vec();
    der.extend_from_slice(&secret.derived_key(CA_KEY_CONTEXT));
    KeyPair::from_pkcs8_der_and_sign_algo(&PrivatePkcs8KeyDer::from(der), &PKCS_ED25519)
}

/// The CA's certificate: the same in every process (its key is the same, its fields
/// fixed, Ed25519 signatures deterministic).
fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, "somnus cluster CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.serial_number = Some(SerialNumber::from(1u64));
    params.not_before = rcgen::date_time_ymd(2026, 1, 1);
    params.not_after = rcgen::date_time_ymd(4000, 1, 1);
    params
}

/// A fresh key of `own`'s and its certificate, signed by the CA.
fn own_certificate(
    own: Peer,
    issuer: &Issuer<'_, KeyPair>,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), TlsError> {
    let key = KeyPair::generate_for(&PKCS_ED25519)?;
    let name = peer_name(own)?.to_str().into_owned();
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name.clone());
    params.subject_alt_names = vec![SanType::DnsName(name.try_into()?)];
    params.extended_key_usages =
        vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.is_ca = IsCa::ExplicitNoCa;
    // Valid from before any clock this cluster's machines might be set to (a machine
    // whose clock is behind would refuse a certificate valid from now).
    params.not_before = rcgen::date_time_ymd(2026, 1, 1);
    params.not_after = rcgen::date_time_ymd(4000, 1, 1);
    let cert = params.signed_by(&key, issuer)?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    Ok((vec![cert.der().clone()], key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use somnus_types::ServerId;

    fn secret(byte: u8) -> ClusterSecret {
        ClusterSecret::from_bytes([byte; 32])
    }

    #[test]
    fn a_certificate_names_its_peer_and_no_other() {
        let ca_key = ca_key(&secret(1)).unwrap();
        let issuer = Issuer::new(ca_params(), ca_key);
        let (chain, _) = own_certificate(Peer::Server(ServerId(3)), &issuer).unwrap();
        assert!(names(&chain[0], Peer::Server(ServerId(3))));
        assert!(!names(&chain[0], Peer::Server(ServerId(4))));
        assert!(!names(&chain[0], Peer::Mds));
    }

    #[test]
    fn the_ca_is_the_secrets_and_the_same_in_every_process() {
        let one = ca_params().self_signed(&ca_key(&secret(1)).unwrap()).unwrap();
        let again = ca_params().self_signed(&ca_key(&secret(1)).unwrap()).unwrap();
        let other = ca_params().self_signed(&ca_key(&secret(2)).unwrap()).unwrap();
        assert_eq!(one.der(), again.der());
        assert_ne!(one.der(), other.der());
    }
}
