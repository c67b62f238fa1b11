//! The `postgres-tls` half of [`super`]: the rustls connector, its roots
//! and the certificate check each `sslmode` asks for.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_cert_signed_by_trust_anchor, verify_server_name};
use rustls::crypto::{WebPkiSupportedAlgorithms, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::mode::SslMode;

/// The connector that enforces `mode`, with the roots `sslrootcert` names
/// (read now, so a missing file fails at start-up, not at first use).
pub(super) fn connector(
    mode: SslMode,
    sslrootcert: Option<&str>,
) -> Result<MakeRustlsConnect, String> {
    let roots = roots(mode, sslrootcert, default_root_file().as_deref())?;
    let verifier = PgVerifier {
        roots,
        check_name: mode == SslMode::VerifyFull,
        algorithms: provider().signature_verification_algorithms,
    };
    let mut tls = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_no_client_auth();
    // PostgreSQL 17 requires it for sslnegotiation=direct; older servers ignore it.
    tls.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(MakeRustlsConnect::new(tls))
}

/// rustls with ring, the one provider the workspace builds (no C toolchain
/// or cmake for a user's build, unlike aws-lc-rs), named explicitly so that a
/// user whose tree also enables aws-lc-rs gets no ambiguous process default.
///
/// rustls 0.23.48 deprecates `ring::default_provider` for lacking
/// post-quantum key exchange and offers no other way to name ring: the
/// `allow` keeps a fresh resolve's build warning-free
/// (scripts/test.d/57-scratch-app.sh builds one with warnings denied).
/// Post-quantum groups come with a move to aws-lc-rs, a decision of its own.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    #[allow(deprecated)]
    let ring = rustls::crypto::ring::default_provider();
    Arc::new(ring)
}

/// The roots to check the server's certificate against, if any: the
/// named file, the system's store, or libpq's default file if it exists.
fn roots(
    mode: SslMode,
    sslrootcert: Option<&str>,
    default_file: Option<&Path>,
) -> Result<Option<Arc<RootCertStore>>, String> {
    let roots = match (mode, sslrootcert) {
        (SslMode::Disable, _) => return Ok(None),
        (_, Some("system")) => system_roots()?,
        (_, Some(file)) => file_roots(Path::new(file))?,
        (_, None) => match default_file {
            Some(file) if file.exists() => file_roots(file)?,
            _ if mode >= SslMode::VerifyCa => {
                return Err(format!(
                    "sslmode={} needs trusted roots: add sslrootcert=FILE (PEM) or \
                     sslrootcert=system to the URL, or use sslmode=require to encrypt \
                     without checking the certificate",
                    mode.as_str()
                ));
            }
            _ => return Ok(None),
        },
    };
    Ok(Some(Arc::new(roots)))
}

/// libpq's default `sslrootcert`.
fn default_root_file() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".postgresql/root.crt"))
}

fn file_roots(file: &Path) -> Result<RootCertStore, String> {
    let shown = file.display();
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(file)
        .map_err(|e| format!("sslrootcert {shown}: cannot read it: {e}"))?;
    for cert in certs {
        let cert = cert.map_err(|e| format!("sslrootcert {shown}: not PEM: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("sslrootcert {shown}: a bad certificate: {e}"))?;
    }
    if roots.is_empty() {
        return Err(format!("sslrootcert {shown} holds no certificate"));
    }
    Ok(roots)
}

fn system_roots() -> Result<RootCertStore, String> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        let why: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
        return Err(format!(
            "sslrootcert=system: no trusted roots found on this system ({})",
            why.join("; ")
        ));
    }
    Ok(roots)
}

/// Checks the server's certificate as the mode says: the chain when roots
/// are known, the host name too under `verify-full`; the handshake's
/// signatures always (so encryption-only still talks to the key holder of
/// the certificate presented).
#[derive(Debug)]
struct PgVerifier {
    roots: Option<Arc<RootCertStore>>,
    check_name: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PgVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if let Some(roots) = &self.roots {
            let cert = ParsedCertificate::try_from(end_entity)?;
            verify_server_cert_signed_by_trust_anchor(
                &cert,
                roots,
                intermediates,
                now,
                self.algorithms.all,
            )?;
            if self.check_name {
                verify_server_name(&cert, server_name)?;
            }
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// A failed certificate check, explained; `None` for other errors.
pub(super) fn explain(err: &tokio_postgres::Error) -> Option<String> {
    let io = std::error::Error::source(err)?.downcast_ref::<std::io::Error>()?;
    let tls = io.get_ref()?.downcast_ref::<rustls::Error>()?;
    let hint = match tls {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => {
            "the server's certificate is not signed by a CA in sslrootcert"
        }
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => {
            "the server's certificate does not name the host in the URL \
             (sslmode=verify-full checks the name; connect by a name the certificate holds)"
        }
        rustls::Error::InvalidCertificate(
            CertificateError::Expired | CertificateError::ExpiredContext { .. },
        ) => "the server's certificate has expired",
        _ => "the TLS handshake failed",
    };
    Some(format!("TLS to PostgreSQL failed: {hint} ({tls})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifying_modes_need_roots() {
        let absent = Path::new("/nonexistent/idemkey/root.crt");
        for mode in [SslMode::VerifyCa, SslMode::VerifyFull] {
            let msg = roots(mode, None, Some(absent)).expect_err("an error");
            assert!(msg.contains("needs trusted roots"), "{msg}");
        }
        for mode in [SslMode::Disable, SslMode::Prefer, SslMode::Require] {
            assert!(
                roots(mode, None, Some(absent)).unwrap().is_none(),
                "{mode:?}"
            );
        }
    }
}
