//! libpq's `sslmode`, as idemkey reads it.

/// libpq's `sslmode` values that idemkey supports (all but `allow`, which
/// tries plaintext first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum SslMode {
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
    pub(super) fn parse(value: &str) -> Result<Self, String> {
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

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }
}
