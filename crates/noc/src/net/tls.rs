//! Mutual TLS between nodes, trusting the cluster's CA and nothing else.
//!
//! Both ends of a link present their node certificate, and each requires
//! that the other's was issued by the cluster's CA. A node is often dialled
//! by address only (`--join ADDR`), so neither side checks a name during
//! the handshake: each learns which node is at the other end from what it
//! says first on the link, and checks that claim against its certificate
//! with [`check_peer`].
//! TLS 1.3 only, with rustls's ring provider; the system's roots are never
//! loaded.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::verify_server_cert_signed_by_trust_anchor;
use rustls::crypto::{verify_tls13_signature, CryptoProvider};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

use super::identity::Identity;

/// Why a TLS configuration could not be made, or a peer is not who it says.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("TLS: {0}")]
    Rustls(#[from] rustls::Error),
    #[error("the cluster CA certificate is not usable: {0}")]
    Verifier(String),
    #[error("peer's certificate is not valid for node `{name}`: {why}")]
    NotThatPeer { name: String, why: String },
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn roots(id: &Identity) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    roots.add(id.ca.clone())?;
    Ok(Arc::new(roots))
}

/// The listening side of links: requires a client certificate from the
/// cluster's CA.
pub fn server_config(id: &Identity) -> Result<Arc<ServerConfig>, TlsError> {
    let verifier = WebPkiClientVerifier::builder_with_provider(roots(id)?, provider())
        .build()
        .map_err(|e| TlsError::Verifier(e.to_string()))?;
    let config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![id.cert.clone()], id.key.clone_key())?;
    Ok(Arc::new(config))
}

/// The dialling side of links: presents this node's certificate and
/// accepts any certificate issued by the cluster's CA (whose node name is
/// checked once the peer has said who it is).
pub fn client_config(id: &Identity) -> Result<Arc<ClientConfig>, TlsError> {
    let verifier = Arc::new(ClusterVerifier {
        roots: roots(id)?,
        provider: provider(),
    });
    let config = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_client_auth_cert(vec![id.cert.clone()], id.key.clone_key())?;
    Ok(Arc::new(config))
}

/// Checks that a listener's certificate chains to the cluster's CA and is
/// valid now, whatever name the dialler used: the name is checked after
/// the hello. TLS 1.3 only, so TLS 1.2 signatures are refused.
#[derive(Debug)]
struct ClusterVerifier {
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for ClusterVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.provider.signature_verification_algorithms.all,
        )?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::PeerIncompatible(
            rustls::PeerIncompatible::Tls12NotOffered,
        ))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The TLS name under which node `name` is dialled.
pub fn server_name(name: &str) -> Result<ServerName<'static>, TlsError> {
    ServerName::try_from(name.to_owned()).map_err(|e| TlsError::NotThatPeer {
        name: name.to_owned(),
        why: e.to_string(),
    })
}

/// Checks that `cert` (a peer's certificate, already verified against the
/// cluster's CA by the handshake) names node `name`.
pub fn check_peer(cert: &CertificateDer<'_>, name: &str) -> Result<(), TlsError> {
    let not = |why: String| TlsError::NotThatPeer {
        name: name.to_owned(),
        why,
    };
    let cert = webpki::EndEntityCert::try_from(cert).map_err(|e| not(e.to_string()))?;
    cert.verify_is_valid_for_subject_name(&server_name(name)?)
        .map_err(|e| not(e.to_string()))?;
    Ok(())
}
