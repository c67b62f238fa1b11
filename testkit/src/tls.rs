//! TLS-only clusters ([`crate::PgOptions::tls_only`]): certificates made
//! here with rcgen, `ssl = on`, and a `pg_hba.conf` whose only TCP lines
//! are `hostssl`, so a plaintext TCP connection is refused by the server.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// The only host name the server's certificate holds. `127.0.0.1` is not in
/// it, so a URL on `127.0.0.1` names the wrong host under `verify-full`.
pub const SERVER_NAME: &str = "localhost";

/// `pg_hba.conf` of a TLS-only cluster: the Unix socket stays open for the
/// testkit's own `psql` and `createdb`; TCP needs TLS.
const HBA: &str = "# Written by idemkey-testkit: TCP connections need TLS.\n\
                   local all all trust\n\
                   hostssl all all 127.0.0.1/32 trust\n\
                   hostssl all all ::1/128 trust\n";

/// The certificates of a TLS-only cluster (in `ROOT/tls/`).
#[derive(Debug, Clone)]
pub struct PgTls {
    dir: PathBuf,
}

impl PgTls {
    /// PEM file of the CA that signed the server's certificate: the right
    /// `sslrootcert`.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// PEM file of another CA, unrelated to the server: a wrong
    /// `sslrootcert`.
    pub fn other_ca_file(&self) -> PathBuf {
        self.dir.join("other-ca.crt")
    }

    fn server_cert(&self) -> PathBuf {
        self.dir.join("server.crt")
    }

    fn server_key(&self) -> PathBuf {
        self.dir.join("server.key")
    }

    /// Makes the certificates under `root/tls` unless they are there, and
    /// writes `data/pg_hba.conf`. `give` hands a file to the server's OS
    /// user (the key must be its own, mode 0600, or the server refuses it).
    pub(crate) fn prepare(
        root: &Path,
        data: &Path,
        give: impl Fn(&Path) -> io::Result<()>,
    ) -> io::Result<PgTls> {
        let tls = PgTls {
            dir: root.join("tls"),
        };
        if !tls.ca_file().exists() {
            fs::create_dir_all(&tls.dir)?;
            fs::set_permissions(&tls.dir, fs::Permissions::from_mode(0o755))?;
            tls.generate()?;
        }
        give(&tls.server_cert())?;
        fs::set_permissions(tls.server_key(), fs::Permissions::from_mode(0o600))?;
        give(&tls.server_key())?;
        let hba = data.join("pg_hba.conf");
        fs::write(&hba, HBA)?;
        give(&hba)?;
        Ok(tls)
    }

    /// The `postgresql.conf` settings that turn TLS on.
    pub(crate) fn settings(&self) -> io::Result<Vec<(&'static str, String)>> {
        let path = |p: PathBuf| {
            p.to_str()
                .map(str::to_owned)
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "TLS path is not UTF-8"))
        };
        Ok(vec![
            ("ssl", "on".to_owned()),
            ("ssl_cert_file", path(self.server_cert())?),
            ("ssl_key_file", path(self.server_key())?),
        ])
    }

    fn generate(&self) -> io::Result<()> {
        let ca = new_ca("idemkey-testkit CA")?;
        let other = new_ca("idemkey-testkit unrelated CA")?;
        let mut params = CertificateParams::new(vec![SERVER_NAME.to_owned()]).map_err(other_err)?;
        params
            .distinguished_name
            .push(DnType::CommonName, SERVER_NAME);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate().map_err(other_err)?;
        let cert = params.signed_by(&key, &ca).map_err(other_err)?;
        fs::write(self.ca_file(), ca.pem())?;
        fs::write(self.other_ca_file(), other.pem())?;
        fs::write(self.server_cert(), cert.pem())?;
        fs::write(self.server_key(), key.serialize_pem())?;
        Ok(())
    }
}

fn new_ca(name: &str) -> io::Result<CertifiedIssuer<'static, KeyPair>> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(other_err)?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let key = KeyPair::generate().map_err(other_err)?;
    CertifiedIssuer::self_signed(params, key).map_err(other_err)
}

fn other_err(e: rcgen::Error) -> io::Error {
    io::Error::other(format!("making test certificates: {e}"))
}
