//! Who a node is: a certificate for its name from the cluster's own CA.
//!
//! `atoll ca init DIR` makes the cluster's certificate authority: `ca.pem`
//! (its certificate, which every node trusts and nothing else) and `ca.key`
//! (its key, which stays with the operator). `atoll ca issue DIR NAME` makes
//! a node's identity, `NAME.pem` and `NAME.key`, for a name that is a DNS
//! label (it is the certificate's subject alternative name, which peers
//! check). Keys are written readable by their owner only, and nothing that
//! exists is ever overwritten.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// The CA's certificate, given to every node.
pub const CA_CERT: &str = "ca.pem";
/// The CA's key, kept by the operator.
pub const CA_KEY: &str = "ca.key";

/// How long certificates are valid: a node certificate, then the CA's.
const NODE_DAYS: i64 = 2 * 365;
const CA_DAYS: i64 = 10 * 365;

/// Why an identity could not be made or loaded.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{} already exists: refusing to overwrite it", .0.display())]
    Exists(PathBuf),
    #[error("`{0}` is not a node name: use 1 to 63 lowercase letters, digits and '-', not starting or ending with '-'")]
    BadName(String),
    #[error("{}: not a PEM certificate or key: {why}", path.display())]
    Pem { path: PathBuf, why: String },
    #[error("certificate: {0}")]
    Certificate(#[from] rcgen::Error),
}

/// A node's credentials, loaded: its name, its certificate, its key and the
/// cluster's CA certificate (the only root it trusts).
#[derive(Debug)]
pub struct Identity {
    pub name: String,
    pub cert: CertificateDer<'static>,
    pub key: PrivateKeyDer<'static>,
    pub ca: CertificateDer<'static>,
}

impl Clone for Identity {
    fn clone(&self) -> Self {
        Identity {
            name: self.name.clone(),
            cert: self.cert.clone(),
            key: self.key.clone_key(),
            ca: self.ca.clone(),
        }
    }
}

impl Identity {
    /// Loads node `name`'s identity from `dir` (as `atoll ca issue` wrote it).
    pub fn load(dir: &Path, name: &str) -> Result<Identity, IdentityError> {
        check_name(name)?;
        let cert_path = dir.join(format!("{name}.pem"));
        let key_path = dir.join(format!("{name}.key"));
        let ca_path = dir.join(CA_CERT);
        Ok(Identity {
            name: name.to_owned(),
            cert: CertificateDer::from_pem_slice(&read(&cert_path)?)
                .map_err(|e| pem(&cert_path, e))?,
            key: PrivateKeyDer::from_pem_slice(&read(&key_path)?).map_err(|e| pem(&key_path, e))?,
            ca: CertificateDer::from_pem_slice(&read(&ca_path)?).map_err(|e| pem(&ca_path, e))?,
        })
    }
}

/// Makes a cluster CA in `dir` (created if missing); returns the paths of its
/// certificate and key.
pub fn init_ca(dir: &Path) -> Result<(PathBuf, PathBuf), IdentityError> {
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let (cert_path, key_path) = (dir.join(CA_CERT), dir.join(CA_KEY));
    for p in [&cert_path, &key_path] {
        if p.exists() {
            return Err(IdentityError::Exists(p.clone()));
        }
    }
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    // A name of its own, so that a certificate from another cluster's CA is
    // an unknown issuer here rather than a bad signature.
    let mut id = [0u8; 8];
    getrandom::fill(&mut id).map_err(|e| io(dir, std::io::Error::other(e.to_string())))?;
    params.distinguished_name.push(
        DnType::CommonName,
        format!("atoll cluster CA {}", hex::encode(id)),
    );
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    valid_for(&mut params, CA_DAYS);
    let cert = params.self_signed(&key)?;
    write_new(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
    write_new(&cert_path, cert.pem().as_bytes(), 0o644)?;
    Ok((cert_path, key_path))
}

/// Issues node `name` an identity from the CA in `dir`; returns the paths
/// of its certificate and key.
pub fn issue(dir: &Path, name: &str) -> Result<(PathBuf, PathBuf), IdentityError> {
    check_name(name)?;
    let (cert_path, key_path) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    for p in [&cert_path, &key_path] {
        if p.exists() {
            return Err(IdentityError::Exists(p.clone()));
        }
    }
    let ca_key_path = dir.join(CA_KEY);
    let ca_cert_path = dir.join(CA_CERT);
    let ca_key = String::from_utf8_lossy(&read(&ca_key_path)?).into_owned();
    let ca_key = KeyPair::from_pem(&ca_key).map_err(|e| pem(&ca_key_path, e))?;
    let ca_cert = String::from_utf8_lossy(&read(&ca_cert_path)?).into_owned();
    let issuer = Issuer::from_ca_cert_pem(&ca_cert, ca_key).map_err(|e| pem(&ca_cert_path, e))?;

    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec![name.to_owned()])?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    // A node is a server to the nodes that dial it and a client of those it
    // dials.
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    valid_for(&mut params, NODE_DAYS);
    let cert = params.signed_by(&key, &issuer)?;
    write_new(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
    write_new(&cert_path, cert.pem().as_bytes(), 0o644)?;
    Ok((cert_path, key_path))
}

/// Node names are DNS labels: they are the certificates' subject names.
pub fn check_name(name: &str) -> Result<(), IdentityError> {
    let ok = (1..=63).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(IdentityError::BadName(name.to_owned()))
    }
}

/// From a day ago (clocks of a cluster differ a little) for `days`.
fn valid_for(params: &mut CertificateParams, days: i64) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(days);
}

fn read(path: &Path) -> Result<Vec<u8>, IdentityError> {
    std::fs::read(path).map_err(|e| io(path, e))
}

fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), IdentityError> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => IdentityError::Exists(path.to_owned()),
            _ => io(path, e),
        })?;
    f.write_all(bytes).map_err(|e| io(path, e))
}

fn io(path: &Path, error: std::io::Error) -> IdentityError {
    IdentityError::Io {
        path: path.to_owned(),
        error,
    }
}

fn pem(path: &Path, why: impl std::fmt::Display) -> IdentityError {
    IdentityError::Pem {
        path: path.to_owned(),
        why: why.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_ca_issues_identities_that_load() {
        let dir = tempfile::tempdir().unwrap();
        let (_, ca_key) = init_ca(dir.path()).unwrap();
        let (_, key) = issue(dir.path(), "node-1").unwrap();
        for k in [ca_key, key] {
            let mode = std::fs::metadata(k).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let id = Identity::load(dir.path(), "node-1").unwrap();
        assert_eq!(id.name, "node-1");
        // Issued by the CA: the certificate verifies against it alone.
        let anchor = webpki::anchor_from_trusted_cert(&id.ca).unwrap();
        let cert = webpki::EndEntityCert::try_from(&id.cert).unwrap();
        cert.verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &[anchor],
            &[],
            rustls_pki_types::UnixTime::now(),
            webpki::KeyUsage::server_auth(),
            None,
            None,
        )
        .unwrap();
        let name = rustls_pki_types::ServerName::try_from("node-1").unwrap();
        cert.verify_is_valid_for_subject_name(&name).unwrap();
    }

    #[test]
    fn nothing_is_overwritten_and_bad_input_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            issue(dir.path(), "n0"),
            Err(IdentityError::Io { .. })
        ));
        init_ca(dir.path()).unwrap();
        assert!(matches!(init_ca(dir.path()), Err(IdentityError::Exists(_))));
        issue(dir.path(), "n0").unwrap();
        assert!(matches!(
            issue(dir.path(), "n0"),
            Err(IdentityError::Exists(_))
        ));
        for bad in ["", "Node", "a.b", "-x", "x-", "a/b", &"x".repeat(64)] {
            assert!(
                matches!(issue(dir.path(), bad), Err(IdentityError::BadName(_))),
                "{bad}"
            );
        }
        std::fs::write(dir.path().join("n1.pem"), b"garbage").unwrap();
        std::fs::copy(dir.path().join("n0.key"), dir.path().join("n1.key")).unwrap();
        assert!(matches!(
            Identity::load(dir.path(), "n1"),
            Err(IdentityError::Pem { .. })
        ));
    }
}
