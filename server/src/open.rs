//! Opening the database a command names: the URL (flag, `DATABASE_URL`
//! or the SQLite default) and the settings of a one-off command.

use idemkey_server::config::DatabaseArgs;
use idemkey_server::db::{DEFAULT_DATABASE_URL, Db, PgSettings};

/// The PostgreSQL settings of a one-off command.
pub(crate) fn cli_settings(database: &DatabaseArgs) -> PgSettings {
    PgSettings {
        pooler: database.pg_pooler,
        ..PgSettings::default()
    }
}

/// The database URL: the flag or `DATABASE_URL`, else the SQLite default.
pub(crate) fn database_url(database: &DatabaseArgs) -> (&str, bool) {
    match database.database_url.as_deref() {
        Some(url) if !url.is_empty() => (url, false),
        _ => (DEFAULT_DATABASE_URL, true),
    }
}

pub(crate) async fn open_store(
    database: &DatabaseArgs,
    settings: &PgSettings,
) -> Result<Db, String> {
    let (url, _) = database_url(database);
    let store = Db::open(url, settings)
        .await
        .map_err(|e| format!("cannot open the database: {e}"))?;
    Ok(store)
}
