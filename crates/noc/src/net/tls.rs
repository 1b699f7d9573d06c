//! Mutual TLS between nodes, trusting the cluster's CA and nothing else.
//!
//! Both ends of a link present their node certificate: the dialling node
//! checks that the listener's certificate names the node it meant to reach,
//! and the listener requires a certificate from the cluster's CA. The
//! listener learns which node dialled from what that node says first on the
//! link, and checks the claim against its certificate with [`check_peer`].
//! TLS 1.3 only, with rustls's ring provider; the system's roots are never
//! loaded.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::{CertificateDer, ServerName};

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

/// The dialling side of links: trusts only the cluster's CA and presents
/// this node's certificate.
pub fn client_config(id: &Identity) -> Result<Arc<ClientConfig>, TlsError> {
    let verifier = WebPkiServerVerifier::builder_with_provider(roots(id)?, provider())
        .build()
        .map_err(|e| TlsError::Verifier(e.to_string()))?;
    let config = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_webpki_verifier(verifier)
        .with_client_auth_cert(vec![id.cert.clone()], id.key.clone_key())?;
    Ok(Arc::new(config))
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
