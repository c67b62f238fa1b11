//! The connection string (`DATABASE_URL`) as libpq reads it, where
//! tokio-postgres falls short: it knows only three `sslmode` values and no
//! `sslrootcert`, and its `options` setter replaces the user's `options`.
//!
//! [`split`] takes `sslmode` and `sslrootcert` out of the string (both the
//! `postgres://…?…` form and the `key=value` form) and leaves every other
//! byte as it was, so tokio-postgres parses the rest exactly as before.
//! [`add_options`] appends our session settings to the user's `options`.
//!
//! Hand-written because no maintained crate parses libpq's conninfo with
//! `sslmode`/`sslrootcert` for tokio-postgres (tokio-postgres's own parser
//! is the one that falls short).

use std::ops::Range;

use percent_encoding::percent_decode_str;

/// The parameters idemkey reads itself.
const OURS: [&str; 2] = ["sslmode", "sslrootcert"];

/// A connection string with libpq's TLS parameters taken out.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct ConnInfo {
    /// The string without `sslmode` and `sslrootcert`, for tokio-postgres.
    pub rest: String,
    /// `sslmode`, decoded (the last one given wins, as in libpq).
    pub sslmode: Option<String>,
    /// `sslrootcert`, decoded (the last one given wins).
    pub sslrootcert: Option<String>,
}

impl ConnInfo {
    fn keep(&mut self, key: &str, value: String) -> bool {
        match key {
            "sslmode" => self.sslmode = Some(value),
            "sslrootcert" => self.sslrootcert = Some(value),
            _ => return false,
        }
        true
    }
}

/// Whether `s` is libpq's `key=value` form (`host=db dbname=app …`)
/// rather than a URL.
pub(crate) fn is_key_value(s: &str) -> bool {
    let s = s.trim_start();
    let keyword = s
        .find(|c: char| c.is_whitespace() || c == '=')
        .unwrap_or(s.len());
    !s.contains("://") && keyword > 0 && s[keyword..].trim_start().starts_with('=')
}

/// Splits `url` into what tokio-postgres parses and our TLS parameters.
/// A string that tokio-postgres would reject as malformed is returned
/// whole, for tokio-postgres to name the error.
pub(super) fn split(url: &str) -> Result<ConnInfo, String> {
    for prefix in ["postgres://", "postgresql://"] {
        if url.starts_with(prefix) {
            return split_url(url, prefix.len());
        }
    }
    Ok(split_key_values(url))
}

/// `postgres://user:pw@host/db?key=value&…`, cut as tokio-postgres cuts it:
/// the query starts at the first `?` after the first `@` (or after the
/// prefix when there is no `@`).
fn split_url(url: &str, prefix: usize) -> Result<ConnInfo, String> {
    let after = &url[prefix..];
    let from = after.find('@').map_or(0, |at| at + 1);
    let Some(question) = after[from..].find('?') else {
        return Ok(unchanged(url));
    };
    let query_start = prefix + from + question;
    let mut info = ConnInfo::default();
    let mut kept = Vec::new();
    for segment in url[query_start + 1..].split('&') {
        let taken = match segment.split_once('=') {
            Some((key, value)) if OURS.contains(&decode(key)?.as_str()) => {
                info.keep(&decode(key)?, decode(value)?)
            }
            _ => false,
        };
        if !taken {
            kept.push(segment);
        }
    }
    info.rest = url[..query_start].to_owned();
    if !kept.is_empty() {
        info.rest.push('?');
        info.rest.push_str(&kept.join("&"));
    }
    Ok(info)
}

fn decode(s: &str) -> Result<String, String> {
    percent_decode_str(s)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| "a connection parameter is not valid UTF-8".to_owned())
}

/// `host=… sslmode=verify-full sslrootcert='/a b/ca.crt'`: whitespace
/// between pairs, optional whitespace around `=`, values plain or in single
/// quotes, `\` escaping the next character (tokio-postgres's grammar).
fn split_key_values(s: &str) -> ConnInfo {
    let mut info = ConnInfo::default();
    let mut taken: Vec<Range<usize>> = Vec::new();
    let mut lexer = Lexer { s, at: 0 };
    loop {
        lexer.skip_ws();
        let start = lexer.at;
        let key = lexer.take_while(|c| !c.is_whitespace() && c != '=');
        if key.is_empty() {
            break;
        }
        lexer.skip_ws();
        let equals = lexer.eat('=');
        lexer.skip_ws();
        let Some(value) = equals.then(|| lexer.value()).flatten() else {
            // Malformed: tokio-postgres will say where.
            return unchanged(s);
        };
        if info.keep(key, value) {
            taken.push(start..lexer.at);
        }
    }
    let mut rest = String::with_capacity(s.len());
    let mut from = 0;
    for range in taken {
        rest.push_str(&s[from..range.start]);
        rest.push(' ');
        from = range.end;
    }
    rest.push_str(&s[from..]);
    info.rest = rest;
    info
}

fn unchanged(s: &str) -> ConnInfo {
    ConnInfo {
        rest: s.to_owned(),
        ..ConnInfo::default()
    }
}

/// A cursor over a `key=value` string.
struct Lexer<'a> {
    s: &'a str,
    at: usize,
}

impl<'a> Lexer<'a> {
    fn peek(&self) -> Option<char> {
        self.s[self.at..].chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.at += c.len_utf8();
        Some(c)
    }

    fn take_while(&mut self, keep: impl Fn(char) -> bool) -> &'a str {
        let start = self.at;
        while self.peek().is_some_and(&keep) {
            self.bump();
        }
        &self.s[start..self.at]
    }

    fn skip_ws(&mut self) {
        self.take_while(char::is_whitespace);
    }

    fn eat(&mut self, c: char) -> bool {
        let hit = self.peek() == Some(c);
        if hit {
            self.bump();
        }
        hit
    }

    /// A plain or quoted value; `None` if it is empty or unterminated.
    fn value(&mut self) -> Option<String> {
        let quoted = self.eat('\'');
        let mut value = String::new();
        loop {
            match self.peek() {
                None if quoted => return None,
                None => break,
                Some('\'') if quoted => {
                    self.bump();
                    return Some(value);
                }
                Some(c) if c.is_whitespace() && !quoted => break,
                Some('\\') => {
                    self.bump();
                    value.extend(self.bump());
                }
                Some(c) => {
                    self.bump();
                    value.push(c);
                }
            }
        }
        (!value.is_empty()).then_some(value)
    }
}

/// Adds our `-c name=value` settings after the user's own `options` (say
/// `-c search_path=app`), instead of replacing them. Ours come last, so
/// the flags that set them win over the same setting in the URL.
pub(super) fn add_options(config: &mut tokio_postgres::Config, ours: &str) {
    let merged = match config.get_options().map(str::trim) {
        Some(user) if !user.is_empty() => format!("{user} {ours}"),
        _ => ours.to_owned(),
    };
    config.options(merged);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(rest: &str, sslmode: Option<&str>, sslrootcert: Option<&str>) -> ConnInfo {
        ConnInfo {
            rest: rest.to_owned(),
            sslmode: sslmode.map(str::to_owned),
            sslrootcert: sslrootcert.map(str::to_owned),
        }
    }

    #[test]
    fn url_parameters_are_taken_out_and_the_rest_is_kept_byte_for_byte() {
        let url = "postgres://u:p%3Fw@db.example:5433/app?sslmode=verify-full\
                   &application_name=x&sslrootcert=%2Fetc%2Fca%20dir%2Froot.crt&options=-c%20a%3Db";
        assert_eq!(
            split(url).unwrap(),
            info(
                "postgres://u:p%3Fw@db.example:5433/app?application_name=x&options=-c%20a%3Db",
                Some("verify-full"),
                Some("/etc/ca dir/root.crt"),
            )
        );
    }

    #[test]
    fn a_url_with_only_our_parameters_loses_its_question_mark() {
        assert_eq!(
            split("postgresql://h/db?sslmode=require").unwrap(),
            info("postgresql://h/db", Some("require"), None)
        );
        assert_eq!(
            split("postgresql://h/db").unwrap(),
            info("postgresql://h/db", None, None)
        );
    }

    #[test]
    fn a_question_mark_in_the_password_is_not_the_query() {
        assert_eq!(
            split("postgres://u:a?sslmode=x@h/db?sslmode=disable").unwrap(),
            info("postgres://u:a?sslmode=x@h/db", Some("disable"), None)
        );
    }

    #[test]
    fn the_last_value_wins_as_in_libpq() {
        assert_eq!(
            split("postgres://h/db?sslmode=disable&sslmode=verify-ca")
                .unwrap()
                .sslmode
                .as_deref(),
            Some("verify-ca")
        );
        assert_eq!(
            split("sslmode=disable host=h sslmode = require")
                .unwrap()
                .sslmode
                .as_deref(),
            Some("require")
        );
    }

    #[test]
    fn key_values_are_taken_out_with_quotes_and_escapes() {
        let s = r"host=localhost sslrootcert = '/tmp/a b/it\'s.crt' dbname=app sslmode=verify\-full options='-c search_path=x'";
        let got = split(s).unwrap();
        assert_eq!(got.sslmode.as_deref(), Some("verify-full"));
        assert_eq!(got.sslrootcert.as_deref(), Some("/tmp/a b/it's.crt"));
        assert_eq!(
            got.rest,
            "host=localhost   dbname=app   options='-c search_path=x'"
        );
        let config: tokio_postgres::Config = got.rest.parse().unwrap();
        assert_eq!(config.get_dbname(), Some("app"));
        assert_eq!(config.get_options(), Some("-c search_path=x"));
    }

    #[test]
    fn a_malformed_string_is_left_for_tokio_postgres_to_reject() {
        for s in [
            "host=h sslmode",
            "host=h sslrootcert='unterminated",
            "host=h sslmode=",
        ] {
            let got = split(s).unwrap();
            assert_eq!(got, info(s, None, None), "{s}");
            assert!(got.rest.parse::<tokio_postgres::Config>().is_err(), "{s}");
        }
    }

    #[test]
    fn the_key_value_form_is_told_from_urls() {
        assert!(is_key_value("host=localhost dbname=app"));
        assert!(is_key_value("  dbname = app"));
        assert!(!is_key_value("postgres://h/db?sslmode=require"));
        assert!(!is_key_value("sqlite://a=b.db"));
        assert!(!is_key_value("idemkey.db"));
        assert!(!is_key_value(""));
    }

    #[test]
    fn our_options_follow_the_users() {
        let mut config: tokio_postgres::Config =
            "host=h options='-c search_path=app'".parse().unwrap();
        add_options(&mut config, "-c lock_timeout=2000");
        assert_eq!(
            config.get_options(),
            Some("-c search_path=app -c lock_timeout=2000")
        );
        let mut config: tokio_postgres::Config = "host=h".parse().unwrap();
        add_options(&mut config, "-c lock_timeout=2000");
        assert_eq!(config.get_options(), Some("-c lock_timeout=2000"));
    }
}
