//! The `Idempotency-Key` request header: parsing under a [`KeyProfile`] and
//! the field value a client should send.
//!
//! draft-ietf-httpapi-idempotency-key-header, section 2.1: "`Idempotency-Key`
//! is an Item Structured Header [RFC8941]. Its value MUST be a String." and
//! "Clients MUST NOT include more than one `Idempotency-Key` header field in
//! the same request." (RFC 9651 obsoletes RFC 8941 with the same sf-string.)

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::problem::{Problem, ProblemCode};

/// Longest key accepted, in characters after unquoting.
pub const MAX_KEY_LEN: usize = 255;

/// How strictly a key's field value is read. Chosen per operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyProfile {
    /// Only an RFC 9651 sf-string: `"abc-123"` (parameters parsed and ignored).
    Strict,
    /// Strict, or a bare value of visible ASCII with no spaces, commas,
    /// semicolons or quotes (`abc-123`), as many existing clients send it.
    /// Both spellings of the same characters are the same key.
    #[default]
    Lenient,
    /// A hyphenated UUID, quoted or bare, in any letter case; compared in
    /// canonical lowercase (the article's profile).
    Uuid,
}

impl KeyProfile {
    /// Every profile.
    pub const ALL: [KeyProfile; 3] = [Self::Strict, Self::Lenient, Self::Uuid];

    /// `strict`, `lenient` or `uuid`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Strict => "strict",
            Self::Lenient => "lenient",
            Self::Uuid => "uuid",
        }
    }
}

/// One character of an RFC 9651 sf-string (printable ASCII except `"` and
/// `\`), or one of its two escapes `\"` and `\\`, as a regex. Hex escapes
/// keep the pattern valid in ECMA-262 (JSON Schema), Python and Rust alike.
const SF_STRING_CHAR: &str = r"(?:[\x20\x21\x23-\x5B\x5D-\x7E]|\x5C[\x22\x5C])";

/// A key's characters as an sf-string: 1 to [`MAX_KEY_LEN`] of them.
fn sf_key_string_pattern() -> String {
    format!("\"{SF_STRING_CHAR}{{1,{MAX_KEY_LEN}}}\"")
}

/// A hyphenated UUID in any letter case (RFC 9562, section 4).
const UUID_PATTERN: &str =
    "[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}";

/// A bare key under `lenient`: visible ASCII except `"`, `,` and `;`.
fn lenient_bare_pattern() -> String {
    format!(r"[\x21\x23-\x2B\x2D-\x3A\x3C-\x7E]{{1,{MAX_KEY_LEN}}}")
}

/// RFC 9651 parameters (`;name=value`, section 3.1.2) as `parse_sf_string`
/// reads them: any number of them, each with any bare item as its value.
fn sf_parameters_pattern() -> String {
    let key = r"[a-z\x2A][a-z0-9_\x2D\x2E\x2A]*";
    let base64 = "[A-Za-z0-9+/]";
    let cont = "%[89ab][0-9a-f]";
    // A display string holds escaped UTF-8: each `%xx` run must decode to
    // valid UTF-8 (no overlong forms, no surrogates, at most U+10FFFF).
    let utf8 = format!(
        "%[0-7][0-9a-f]|%c[2-9a-f]{cont}|%d[0-9a-f]{cont}|%e0%[ab][0-9a-f]{cont}\
         |%e[1-9a-c]{cont}{cont}|%ed%[89][0-9a-f]{cont}|%e[ef]{cont}{cont}\
         |%f0%[9ab][0-9a-f]{cont}{cont}|%f[1-3]{cont}{cont}{cont}|%f4%8[0-9a-f]{cont}{cont}"
    );
    let bare_item = [
        // Boolean.
        r"\x3F[01]".to_owned(),
        // String.
        format!("\"{SF_STRING_CHAR}*\""),
        // Byte sequence: base64, padding optional, never in the middle.
        format!(":(?:{base64}{{4}})*(?:{base64}{{2}}(?:==?)?|{base64}{{3}}=?)?:"),
        // Date (integer seconds).
        "@-?[0-9]{1,15}".to_owned(),
        // Display string.
        format!(r#"%"(?:[\x20\x21\x23\x24\x26-\x7E]|{utf8})*""#),
        // Token.
        r"[A-Za-z\x2A][\x21\x23-\x27\x2A\x2B\x2D-\x3A\x41-\x5A\x5E-\x7A\x7C\x7E]*".to_owned(),
        // Integer or decimal.
        r"-?(?:[0-9]{1,15}|[0-9]{1,12}\x2E[0-9]{1,3})".to_owned(),
    ]
    .join("|");
    format!("(?:;\\x20*{key}(?:=(?:{bare_item}))?)*")
}

impl KeyProfile {
    /// The key sent as an sf-string, with parameters, as a regex without
    /// anchors: every profile accepts this form (under `uuid` the string
    /// must hold a UUID).
    pub fn quoted_pattern(self) -> String {
        let string = match self {
            Self::Strict | Self::Lenient => sf_key_string_pattern(),
            Self::Uuid => format!("\"{UUID_PATTERN}\""),
        };
        format!("{string}{}", sf_parameters_pattern())
    }

    /// The bare (unquoted) form this profile also accepts, as a regex
    /// without anchors; `None` under `strict`.
    pub fn bare_pattern(self) -> Option<String> {
        match self {
            Self::Strict => None,
            Self::Lenient => Some(lenient_bare_pattern()),
            Self::Uuid => Some(UUID_PATTERN.to_owned()),
        }
    }

    /// Exactly the `Idempotency-Key` field values that
    /// [`IdempotencyKey::parse`] accepts under this profile, as an anchored
    /// ECMA-262 regex (also valid for Rust's `regex` and Python's `re`), so
    /// the published contract (a JSON Schema `pattern`) can state the rule
    /// the server enforces, length limit included, instead of a looser one.
    pub fn field_value_pattern(self) -> String {
        let item = match self.bare_pattern() {
            Some(bare) => format!("{}|{bare}", self.quoted_pattern()),
            None => self.quoted_pattern(),
        };
        format!(r"^[\x20\x09]*(?:{item})[\x20\x09]*$")
    }
}

impl fmt::Display for KeyProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown profile name.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("unknown key profile {0:?}: expected strict, lenient or uuid")]
pub struct UnknownProfile(pub String);

impl FromStr for KeyProfile {
    type Err = UnknownProfile;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownProfile(s.to_owned()))
    }
}

/// Why an `Idempotency-Key` field was refused. Each variant has a stable
/// [`reason`](KeyError::reason) and maps to one [`ProblemCode`].
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum KeyError {
    /// No `Idempotency-Key` field line at all.
    #[error("This operation requires an Idempotency-Key header.")]
    Missing,
    /// More than one `Idempotency-Key` field line.
    #[error("Send exactly one Idempotency-Key header.")]
    Repeated,
    /// The value is empty after unquoting.
    #[error("The Idempotency-Key must not be empty.")]
    Empty,
    /// Longer than [`MAX_KEY_LEN`].
    #[error("The Idempotency-Key must be at most 255 characters.")]
    TooLong,
    /// Not a structured-field string (nor a bare value, under `lenient`).
    #[error(
        "The Idempotency-Key must be a structured-field string, e.g. \"8e03978e-40d5-43e8-bc93-6894a57f9324\"."
    )]
    Syntax,
    /// Not a UUID under the `uuid` profile.
    #[error("The Idempotency-Key must be a UUID, e.g. \"8e03978e-40d5-43e8-bc93-6894a57f9324\".")]
    NotUuid,
}

impl KeyError {
    /// Stable sub-code: `missing`, `repeated`, `empty`, `too-long`, `syntax`, `not-uuid`.
    pub const fn reason(&self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Repeated => "repeated",
            Self::Empty => "empty",
            Self::TooLong => "too-long",
            Self::Syntax => "syntax",
            Self::NotUuid => "not-uuid",
        }
    }

    /// The problem code this error is answered with.
    pub const fn code(&self) -> ProblemCode {
        match self {
            Self::Missing => ProblemCode::IdempotencyKeyMissing,
            _ => ProblemCode::IdempotencyKeyInvalid,
        }
    }

    /// The problem document for this error.
    pub fn to_problem(&self) -> Problem {
        Problem::new(self.code(), self.to_string())
    }
}

impl From<KeyError> for Problem {
    fn from(err: KeyError) -> Self {
        err.to_problem()
    }
}

/// A validated idempotency key: 1 to 255 printable ASCII characters, already
/// unquoted (and lowercased under the `uuid` profile).
///
/// Constructing one is the validation; there is no other way to get one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Parses one field line's value under `profile`.
    ///
    /// ```
    /// use idemkey_core::{IdempotencyKey, KeyProfile};
    /// let key = IdempotencyKey::parse(br#" "abc-123";v=1 "#, KeyProfile::Strict).unwrap();
    /// assert_eq!(key.as_str(), "abc-123");
    /// let bare = IdempotencyKey::parse(b"abc-123", KeyProfile::Lenient).unwrap();
    /// assert_eq!(key, bare);
    /// ```
    pub fn parse(value: &[u8], profile: KeyProfile) -> Result<Self, KeyError> {
        match profile {
            KeyProfile::Strict => parse_sf_string(value).and_then(Self::checked),
            KeyProfile::Lenient => parse_lenient(value).and_then(Self::checked),
            KeyProfile::Uuid => {
                let raw = parse_lenient(value)?;
                if raw.is_empty() {
                    return Err(KeyError::Empty);
                }
                // RFC 9562 section 4: the hyphenated 8-4-4-4-12 form only.
                if raw.len() != 36 {
                    return Err(KeyError::NotUuid);
                }
                let uuid = uuid::Uuid::try_parse(&raw).map_err(|_| KeyError::NotUuid)?;
                Ok(Self(uuid.hyphenated().to_string()))
            }
        }
    }

    /// Parses all `Idempotency-Key` field lines of a request: none is
    /// [`KeyError::Missing`], more than one is [`KeyError::Repeated`].
    pub fn from_field_lines<'a, I>(lines: I, profile: KeyProfile) -> Result<Self, KeyError>
    where
        I: IntoIterator<Item = &'a [u8]>,
    {
        let mut lines = lines.into_iter();
        let first = lines.next().ok_or(KeyError::Missing)?;
        if lines.next().is_some() {
            return Err(KeyError::Repeated);
        }
        Self::parse(first, profile)
    }

    /// A new UUIDv4 key from 16 random bytes the caller drew from a CSPRNG
    /// (the core has no randomness of its own).
    pub fn from_random_bytes(bytes: [u8; 16]) -> Self {
        Self(
            uuid::Builder::from_random_bytes(bytes)
                .into_uuid()
                .hyphenated()
                .to_string(),
        )
    }

    /// The key's characters, unquoted.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The field value a client sends: always a quoted sf-string, e.g.
    /// `"abc-123"` (RFC 9651, section 4.1.6).
    pub fn to_header_value(&self) -> String {
        let mut out = String::with_capacity(self.0.len() + 2);
        out.push('"');
        for ch in self.0.chars() {
            if ch == '"' || ch == '\\' {
                out.push('\\');
            }
            out.push(ch);
        }
        out.push('"');
        out
    }

    fn checked(raw: String) -> Result<Self, KeyError> {
        if raw.is_empty() {
            Err(KeyError::Empty)
        } else if raw.len() > MAX_KEY_LEN {
            Err(KeyError::TooLong)
        } else {
            Ok(Self(raw))
        }
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for IdempotencyKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// RFC 9651, section 4.2: "Parsers MUST ignore leading SP characters and
/// trailing SP characters"; HTTP (RFC 9110, section 5.5) already strips OWS.
fn trim_ows(value: &[u8]) -> &[u8] {
    let start = value
        .iter()
        .position(|b| *b != b' ' && *b != b'\t')
        .unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|b| *b != b' ' && *b != b'\t')
        .map_or(start, |i| i + 1);
    &value[start..end]
}

/// An Item whose bare item is a String; parameters are parsed and ignored.
/// RFC 9651's Item grammar (sections 3.3 and 4.2), written here rather than
/// taken from a Structured Fields crate: the key is the one field the
/// library parses, and a crate would cost every user six. The grammar it
/// accepts is exactly [`KeyProfile::field_value_pattern`]'s (a test holds
/// the two together).
fn parse_sf_string(value: &[u8]) -> Result<String, KeyError> {
    let value = trim_ows(value);
    if value.is_empty() {
        return Err(KeyError::Empty);
    }
    let mut cursor = Cursor { rest: value };
    let key = cursor.string().ok_or(KeyError::Syntax)?;
    while !cursor.rest.is_empty() {
        cursor.parameter().ok_or(KeyError::Syntax)?;
    }
    Ok(key)
}

/// What is left of a Structured Field value being parsed.
struct Cursor<'a> {
    rest: &'a [u8],
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.rest.first().copied()
    }

    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        if found {
            self.rest = &self.rest[1..];
        }
        found
    }

    /// Takes the longest run (up to `max`) of bytes `ok` admits; its length.
    fn run(&mut self, max: usize, ok: impl Fn(u8) -> bool) -> usize {
        let n = self.rest.iter().take(max).take_while(|b| ok(**b)).count();
        self.rest = &self.rest[n..];
        n
    }

    /// An sf-string: `"`, printable ASCII with `\"` and `\\` escaped, `"`.
    fn string(&mut self) -> Option<String> {
        if !self.eat(b'"') {
            return None;
        }
        let mut out = String::new();
        loop {
            let b = self.peek()?;
            self.rest = &self.rest[1..];
            match b {
                b'"' => return Some(out),
                b'\\' => {
                    let escaped = self.peek().filter(|e| matches!(e, b'"' | b'\\'))?;
                    self.rest = &self.rest[1..];
                    out.push(char::from(escaped));
                }
                0x20..=0x7e => out.push(char::from(b)),
                _ => return None,
            }
        }
    }

    /// `;`, spaces, a key and, optionally, `=` and a bare item.
    fn parameter(&mut self) -> Option<()> {
        if !self.eat(b';') {
            return None;
        }
        self.run(usize::MAX, |b| b == b' ');
        if !matches!(self.peek(), Some(b'a'..=b'z' | b'*')) {
            return None;
        }
        self.run(
            usize::MAX,
            |b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' | b'*'),
        );
        if self.eat(b'=') {
            self.bare_item()?;
        }
        Some(())
    }

    fn bare_item(&mut self) -> Option<()> {
        match self.peek()? {
            b'?' => {
                self.rest = &self.rest[1..];
                (self.run(1, |b| matches!(b, b'0' | b'1')) == 1).then_some(())
            }
            b'"' => self.string().map(drop),
            b':' => self.byte_sequence(),
            b'@' => {
                self.rest = &self.rest[1..];
                self.eat(b'-');
                (self.run(15, |b| b.is_ascii_digit()) > 0).then_some(())
            }
            b'%' => self.display_string(),
            b'A'..=b'Z' | b'a'..=b'z' | b'*' => {
                self.run(usize::MAX, |b| {
                    b.is_ascii_alphanumeric()
                        || matches!(
                            b,
                            b'!' | b'#'
                                ..=b'\''
                                    | b'*'
                                    | b'+'
                                    | b'-'
                                    | b'.'
                                    | b'^'
                                    | b'_'
                                    | b'`'
                                    | b'|'
                                    | b'~'
                                    | b':'
                                    | b'/'
                        )
                });
                Some(())
            }
            _ => self.number(),
        }
    }

    /// `-?` then 1 to 15 digits, or 1 to 12 digits, `.`, 1 to 3 digits.
    fn number(&mut self) -> Option<()> {
        self.eat(b'-');
        let int = self.run(16, |b| b.is_ascii_digit());
        if int == 0 {
            return None;
        }
        if self.eat(b'.') {
            let frac = self.run(4, |b| b.is_ascii_digit());
            (int <= 12 && (1..=3).contains(&frac)).then_some(())
        } else {
            (int <= 15).then_some(())
        }
    }

    /// `:`, base64 (padding optional, only at the end), `:`.
    fn byte_sequence(&mut self) -> Option<()> {
        self.rest = &self.rest[1..];
        let data = self.run(usize::MAX, |b| {
            b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/')
        });
        let pad = self.run(2, |b| b == b'=');
        let ok = match data % 4 {
            0 => pad == 0,
            2 => pad <= 2,
            3 => pad <= 1,
            _ => false,
        };
        (ok && self.eat(b':')).then_some(())
    }

    /// `%"`, printable ASCII but `"` and `%`, or `%xx` runs (lowercase hex)
    /// that decode to valid UTF-8, then `"`.
    fn display_string(&mut self) -> Option<()> {
        self.rest = &self.rest[1..];
        if !self.eat(b'"') {
            return None;
        }
        let mut bytes = Vec::new();
        loop {
            match self.peek()? {
                b'"' => {
                    self.rest = &self.rest[1..];
                    return std::str::from_utf8(&bytes).is_ok().then_some(());
                }
                b'%' => {
                    let hex = |b: u8| match b {
                        b'0'..=b'9' => Some(b - b'0'),
                        b'a'..=b'f' => Some(b - b'a' + 10),
                        _ => None,
                    };
                    let (hi, lo) = (hex(*self.rest.get(1)?)?, hex(*self.rest.get(2)?)?);
                    bytes.push(hi << 4 | lo);
                    self.rest = &self.rest[3..];
                }
                b @ 0x20..=0x7e => {
                    // A run of escapes must be whole UTF-8 before plain text.
                    if std::str::from_utf8(&bytes).is_err() {
                        return None;
                    }
                    bytes.push(b);
                    self.rest = &self.rest[1..];
                }
                _ => return None,
            }
        }
    }
}

/// Visible ASCII except `"`, `,` and `;` (which would make the value a
/// list, a parameter or a quoted string).
fn is_bare_key_byte(b: u8) -> bool {
    matches!(b, 0x21..=0x7e) && !matches!(b, b'"' | b',' | b';')
}

fn parse_lenient(value: &[u8]) -> Result<String, KeyError> {
    let trimmed = trim_ows(value);
    if trimmed.first() == Some(&b'"') {
        return parse_sf_string(trimmed);
    }
    if trimmed.iter().all(|b| is_bare_key_byte(*b)) {
        // Every byte is ASCII, so this is valid UTF-8.
        Ok(String::from_utf8_lossy(trimmed).into_owned())
    } else {
        Err(KeyError::Syntax)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn article_key_parses_in_every_profile() {
        let v = br#""8e03978e-40d5-43e8-bc93-6894a57f9324""#;
        for profile in KeyProfile::ALL {
            let key = IdempotencyKey::parse(v, profile).unwrap();
            assert_eq!(key.as_str(), "8e03978e-40d5-43e8-bc93-6894a57f9324");
        }
    }

    #[test]
    fn uuid_profile_lowercases() {
        let key = IdempotencyKey::parse(b"8E03978E-40D5-43E8-BC93-6894A57F9324", KeyProfile::Uuid)
            .unwrap();
        assert_eq!(key.as_str(), "8e03978e-40d5-43e8-bc93-6894a57f9324");
    }

    #[test]
    fn field_lines_count() {
        let none: [&[u8]; 0] = [];
        assert_eq!(
            IdempotencyKey::from_field_lines(none, KeyProfile::Strict),
            Err(KeyError::Missing)
        );
        let two: [&[u8]; 2] = [b"\"a\"", b"\"a\""];
        assert_eq!(
            IdempotencyKey::from_field_lines(two, KeyProfile::Strict),
            Err(KeyError::Repeated)
        );
    }

    #[test]
    fn random_bytes_give_a_v4_uuid_that_parses_under_uuid_profile() {
        let key = IdempotencyKey::from_random_bytes([0xab; 16]);
        assert_eq!(key.as_str().len(), 36);
        assert_eq!(&key.as_str()[14..15], "4");
        let again =
            IdempotencyKey::parse(key.to_header_value().as_bytes(), KeyProfile::Uuid).unwrap();
        assert_eq!(again, key);
    }

    #[test]
    fn escapes_round_trip() {
        let key = IdempotencyKey::parse(br#""a\"b\\c""#, KeyProfile::Strict).unwrap();
        assert_eq!(key.as_str(), r#"a"b\c"#);
        assert_eq!(key.to_header_value(), r#""a\"b\\c""#);
    }
}
