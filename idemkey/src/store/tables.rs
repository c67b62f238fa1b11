//! The names of the library's tables in your database.
//!
//! The library owns two tables, `idempotency_records` and (with the
//! `outbox` feature) `outbox`, and keeps its migration bookkeeping in
//! `idemkey_migrations`. A prefix puts all three beside yours without a
//! clash (`acme_idempotency_records`, …); every statement the library runs
//! is written with the default names and renamed once, when the store
//! opens.

use super::StoreError;

/// The tables the library creates, by their default names.
const OWNED: [&str; 5] = [
    "idempotency_records",
    "idemkey_migrations",
    "outbox",
    "idemkey_flows",
    "idemkey_steps",
];

/// Longest prefix accepted (PostgreSQL's identifiers end at 63 bytes).
const MAX_PREFIX: usize = 24;

/// A prefix for the names of the library's tables and indexes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tables {
    prefix: String,
}

impl Tables {
    /// Tables named `{prefix}idempotency_records`, `{prefix}outbox` and
    /// `{prefix}idemkey_migrations`. The prefix is lower-case ASCII letters,
    /// digits and `_`, starting with a letter, at most 24 bytes, so that it
    /// needs no quoting on either backend.
    pub fn with_prefix(prefix: &str) -> Result<Self, StoreError> {
        let valid = prefix.len() <= MAX_PREFIX
            && prefix
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_lowercase())
            && prefix
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if valid {
            Ok(Self {
                prefix: prefix.to_owned(),
            })
        } else {
            Err(StoreError::Unsupported(
                "a table prefix is 1 to 24 of a-z, 0-9 and _, starting with a letter".into(),
            ))
        }
    }

    /// The prefix (empty by default).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The records table's name.
    pub fn records(&self) -> String {
        format!("{}idempotency_records", self.prefix)
    }

    /// The outbox table's name.
    pub fn outbox(&self) -> String {
        format!("{}outbox", self.prefix)
    }

    /// The migration bookkeeping table's name.
    pub fn migrations(&self) -> String {
        format!("{}idemkey_migrations", self.prefix)
    }

    /// [`Tables::render`] of a statement known at compile time: borrowed
    /// as it is under the default names, so the common case allocates
    /// nothing.
    pub fn render_static(&self, sql: &'static str) -> std::borrow::Cow<'static, str> {
        if self.prefix.is_empty() {
            std::borrow::Cow::Borrowed(sql)
        } else {
            std::borrow::Cow::Owned(self.render(sql))
        }
    }

    /// `sql` with every identifier that starts with one of the library's
    /// table names (the tables and their indexes and constraints, e.g.
    /// `outbox_due`) prefixed. Identifiers are whole words: `my_outbox`, a
    /// string literal's text and a `--` comment stay as they are. Use it on
    /// your own statements that join the library's tables.
    pub fn render(&self, sql: &str) -> String {
        if self.prefix.is_empty() {
            return sql.to_owned();
        }
        let mut out = String::with_capacity(sql.len() + 64);
        let mut rest = sql;
        while let Some(c) = rest.chars().next() {
            let len = if rest.starts_with("--") {
                // A comment runs to the end of its line, quotes and all.
                rest.find('\n').unwrap_or(rest.len())
            } else if c == '\'' {
                // A string literal, its doubled quotes included.
                let mut end = 1;
                loop {
                    match rest[end..].find('\'') {
                        Some(i) if rest[end + i + 1..].starts_with('\'') => end += i + 2,
                        Some(i) => break end + i + 1,
                        None => break rest.len(),
                    }
                }
            } else if c.is_ascii_alphabetic() || c == '_' {
                let end = rest.find(|c: char| !is_word(c)).unwrap_or(rest.len());
                let word = &rest[..end];
                if OWNED.iter().any(|owned| word.starts_with(owned)) {
                    out.push_str(&self.prefix);
                }
                end
            } else if is_word(c) {
                // Digits and the tails of words: never a name's start.
                rest.find(|c: char| !is_word(c)).unwrap_or(rest.len())
            } else {
                c.len_utf8()
            };
            out.push_str(&rest[..len]);
            rest = &rest[len..];
        }
        out
    }
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_changes_nothing() {
        let sql = "SELECT * FROM idempotency_records r JOIN outbox o USING (scope)";
        assert_eq!(Tables::default().render(sql), sql);
    }

    #[test]
    fn a_prefix_renames_tables_and_indexes_only() {
        let t = Tables::with_prefix("acme_").unwrap();
        assert_eq!(
            t.render(
                "CREATE INDEX outbox_due ON outbox (x); SELECT 'outbox' , my_outbox, \
                 idempotency_records.key FROM idempotency_records; -- the store's outbox\n\
                 SELECT 'it''s outbox', é, x1outbox FROM idemkey_migrations"
            ),
            "CREATE INDEX acme_outbox_due ON acme_outbox (x); SELECT 'outbox' , my_outbox, \
             acme_idempotency_records.key FROM acme_idempotency_records; -- the store's outbox\n\
             SELECT 'it''s outbox', é, x1outbox FROM acme_idemkey_migrations"
        );
        assert_eq!(t.records(), "acme_idempotency_records");
    }

    #[test]
    fn prefixes_that_would_need_quoting_are_refused() {
        for bad in ["", "Acme_", "1x", "a-b", "a b", &"a".repeat(25), "a;drop"] {
            assert!(Tables::with_prefix(bad).is_err(), "{bad}");
        }
        assert!(Tables::with_prefix("t2_").is_ok());
    }
}
