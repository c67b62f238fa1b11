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

//!
//! TLS is the `postgres-tls` feature (rustls with ring, in `tls/verify.rs`).
//! A build without it connects in plaintext only: `sslmode=require` and up,
//! or a named `sslrootcert`, are refused with an error that names the
//! feature, never quietly downgraded.

use tokio_postgres::config::Host;

use super::conninfo;

mod mode;
#[cfg(feature = "postgres-tls")]
mod verify;

use mode::SslMode;

/// The connector the pool opens connections with.
#[cfg(feature = "postgres-tls")]
pub(super) type Connector = tokio_postgres_rustls::MakeRustlsConnect;
/// The connector the pool opens connections with: plaintext only.
#[cfg(not(feature = "postgres-tls"))]
pub(super) type Connector = tokio_postgres::NoTls;

/// Parses a PostgreSQL URL (`postgres://…` or `key=value …`) with its
/// `sslmode` and `sslrootcert`: the tokio-postgres configuration and the
/// TLS connector that enforces the mode. Reads the root certificates now,
/// so a missing or unreadable file fails at start-up, not at first use.
pub(super) fn configure(url: &str) -> Result<(tokio_postgres::Config, Connector), String> {
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
    Ok((
        config,
        verify::connector(mode, info.sslrootcert.as_deref())?,
    ))
}

/// Without the `postgres-tls` feature: plaintext, or a refusal that says
/// which feature the URL needs.
#[cfg(not(feature = "postgres-tls"))]
mod verify {
    use super::mode::SslMode;

    pub(super) fn connector(
        mode: SslMode,
        sslrootcert: Option<&str>,
    ) -> Result<tokio_postgres::NoTls, String> {
        if mode >= SslMode::Require || sslrootcert.is_some() {
            let asked = match sslrootcert {
                Some(_) if mode < SslMode::Require => "sslrootcert".to_owned(),
                _ => format!("sslmode={}", mode.as_str()),
            };
            return Err(format!(
                "{asked} needs TLS, which this build of idemkey does not have: \
                 enable idemkey's `postgres-tls` feature (or use sslmode=disable or prefer)"
            ));
        }
        Ok(tokio_postgres::NoTls)
    }
}

/// A connection error as an operator reads it, for the log and the CLI
/// (never for HTTP clients): a failed certificate check explained, other
/// errors with their causes, which tokio-postgres's `Display` leaves out
/// ("error performing TLS handshake: server does not support TLS").
pub(super) fn describe(err: &tokio_postgres::Error) -> String {
    #[cfg(feature = "postgres-tls")]
    if let Some(explained) = verify::explain(err) {
        return explained;
    }
    with_causes(err)
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
            #[cfg(feature = "postgres-tls")]
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

    #[cfg(feature = "postgres-tls")]
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

    #[cfg(not(feature = "postgres-tls"))]
    #[test]
    fn without_tls_the_error_names_the_feature() {
        for url in [
            "postgres://h/db?sslmode=require",
            "postgres://h/db?sslmode=verify-ca",
            "host=h sslmode=verify-full sslrootcert=/etc/ca.crt",
            "postgres://h/db?sslrootcert=system",
            "host=h sslrootcert=/etc/ca.crt",
        ] {
            let msg = mode_error(url);
            assert!(
                msg.contains("needs TLS") && msg.contains("`postgres-tls` feature"),
                "{url}: {msg}"
            );
        }
        let (config, _) = configure("postgres://h/db?sslmode=prefer").expect("plaintext");
        assert_eq!(
            config.get_ssl_mode(),
            tokio_postgres::config::SslMode::Prefer
        );
    }
}
