//! TLS to PostgreSQL with libpq's conventions, over rustls.
//!
//! `sslmode` in the URL decides what is checked, `sslrootcert` what is
//! trusted:
//!
//! | `sslmode` | TLS | chain checked | host name checked |
//! |---|---|---|---|
//! | `disable` | never | – | – |
//! | `prefer` (default) | if the server offers it | if roots are known | no |
//! | `require` | always | if roots are known (then as `verify-ca`) | no |
//! | `verify-ca` | always | yes | no |
//! | `verify-full` | always | yes | yes |
//!
//! Roots are known when `sslrootcert` names a PEM file, when it is
//! `system` (the platform's store; only with `verify-full`, which is then
//! the default, as in libpq 16), or when `~/.postgresql/root.crt` exists.
//! From `require` up a server that refuses TLS, or a handshake that fails,
//! is an error: never a fall-back to plaintext. Unlike libpq, `prefer` does
//! not retry in plaintext after a failed handshake either, and a named
//! `sslrootcert` that cannot be read is an error in every mode.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_cert_signed_by_trust_anchor, verify_server_name};
use rustls::crypto::{WebPkiSupportedAlgorithms, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
use tokio_postgres::config::Host;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::conninfo;

/// libpq's `sslmode` values that idemkey supports (all but `allow`, which
/// tries plaintext first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum SslMode {
    /// Plaintext only.
    Disable,
    /// TLS when the server offers it (libpq's default).
    Prefer,
    /// TLS or no connection; the certificate is checked only against roots
    /// that are known (see the module docs).
    Require,
    /// TLS, and the certificate chains to a trusted root.
    VerifyCa,
    /// [`SslMode::VerifyCa`], and the certificate names the host connected to.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<Self, String> {
        Ok(match value {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            "allow" => {
                return Err(
                    "sslmode=allow is not supported: use prefer, require, verify-ca or verify-full"
                        .into(),
                );
            }
            other => {
                return Err(format!(
                    "invalid sslmode {other:?}: use disable, prefer, require, verify-ca or verify-full"
                ));
            }
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }
}

/// Parses a PostgreSQL URL (`postgres://…` or `key=value …`) with its
/// `sslmode` and `sslrootcert`: the tokio-postgres configuration and the
/// TLS connector that enforces the mode. Reads the root certificates now,
/// so a missing or unreadable file fails at start-up, not at first use.
pub(super) fn configure(url: &str) -> Result<(tokio_postgres::Config, MakeRustlsConnect), String> {
    let info = conninfo::split(url)?;
    let mut config: tokio_postgres::Config = info
        .rest
        .parse()
        .map_err(|e: tokio_postgres::Error| with_causes(&e))?;
    let system = info.sslrootcert.as_deref() == Some("system");
    let mode = match info.sslmode.as_deref() {
        Some(value) => SslMode::parse(value)?,
        None if system => SslMode::VerifyFull,
        None => SslMode::Prefer,
    };
    if system && mode < SslMode::VerifyFull {
        return Err(format!(
            "sslmode={} may not be used with sslrootcert=system (use verify-full)",
            mode.as_str()
        ));
    }
    // libpq ignores sslmode on Unix sockets: there is no network to guard.
    let local = !config.get_hosts().is_empty()
        && config.get_hostaddrs().is_empty()
        && config
            .get_hosts()
            .iter()
            .all(|h| matches!(h, Host::Unix(_)));
    let mode = if local { SslMode::Disable } else { mode };
    config.ssl_mode(match mode {
        SslMode::Disable => tokio_postgres::config::SslMode::Disable,
        SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
            tokio_postgres::config::SslMode::Require
        }
    });
    let roots = roots(
        mode,
        info.sslrootcert.as_deref(),
        default_root_file().as_deref(),
    )?;
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
    Ok((config, MakeRustlsConnect::new(tls)))
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

/// A connection error as an operator reads it, for the log and the CLI
/// (never for HTTP clients): a failed certificate check explained, other
/// errors with their causes, which tokio-postgres's `Display` leaves out
/// ("error performing TLS handshake: server does not support TLS").
pub(super) fn describe(err: &tokio_postgres::Error) -> String {
    explain(err).unwrap_or_else(|| with_causes(err))
}

fn with_causes(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(next) = cause {
        text.push_str(": ");
        text.push_str(&next.to_string());
        cause = next.source();
    }
    text
}

/// A failed certificate check, explained; `None` for other errors.
fn explain(err: &tokio_postgres::Error) -> Option<String> {
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

    fn mode_error(url: &str) -> String {
        match configure(url) {
            Ok(_) => panic!("{url} configured"),
            Err(e) => e,
        }
    }

    #[test]
    fn modes_map_to_what_tokio_postgres_enforces() {
        use tokio_postgres::config::SslMode as Wire;
        for (mode, wire) in [
            ("", Wire::Prefer),
            ("?sslmode=disable", Wire::Disable),
            ("?sslmode=prefer", Wire::Prefer),
            ("?sslmode=require", Wire::Require),
        ] {
            let (config, _) = configure(&format!("postgres://h/db{mode}")).unwrap();
            assert_eq!(config.get_ssl_mode(), wire, "{mode}");
        }
    }

    #[test]
    fn unknown_and_unsupported_modes_are_refused_by_name() {
        assert!(mode_error("postgres://h/db?sslmode=verify_full").contains("invalid sslmode"));
        assert!(mode_error("postgres://h/db?sslmode=allow").contains("allow is not supported"));
    }

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

    #[test]
    fn a_named_root_file_must_be_readable_in_every_mode() {
        for mode in ["prefer", "require", "verify-ca"] {
            let msg = mode_error(&format!(
                "host=h sslmode={mode} sslrootcert=/nonexistent/idemkey/ca.crt"
            ));
            assert!(
                msg.contains("/nonexistent/idemkey/ca.crt: cannot read it"),
                "{msg}"
            );
        }
    }

    #[test]
    fn tokio_postgres_errors_keep_their_cause() {
        let msg = mode_error("host=h sslmode=require sslcert=/etc/client.crt");
        assert!(msg.contains("unknown option `sslcert`"), "{msg}");
    }

    #[test]
    fn system_roots_demand_verify_full() {
        let msg = mode_error("postgres://h/db?sslrootcert=system&sslmode=require");
        assert!(
            msg.contains("sslmode=require may not be used with sslrootcert=system"),
            "{msg}"
        );
    }

    #[test]
    fn unix_sockets_ignore_sslmode_as_in_libpq() {
        let (config, _) =
            configure("host=/var/run/postgresql sslmode=require").expect("configures");
        assert_eq!(
            config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Disable
        );
    }
}
