//! The regexes the published contract (`/openapi.json`) is built from say
//! exactly what the parsers accept: [`KeyProfile::field_value_pattern`]
//! against [`IdempotencyKey::parse`], and [`SKU_PATTERN`] against
//! [`NewOrder::from_json`], and [`REFERENCE_PATTERN`] likewise. Values are drawn from the patterns themselves
//! (each must parse), then mutated one character at a time and mixed with
//! random text (pattern and parser must agree on each).

use idemkey_core::{
    IdempotencyKey, KeyProfile, MAX_KEY_LEN, NewOrder, REFERENCE_MAX_LEN, REFERENCE_PATTERN,
    SKU_MAX_LEN, SKU_PATTERN,
};
use proptest::prelude::*;
use proptest::test_runner::Config;
use regex::Regex;

/// Characters that sit on the grammar's edges: quotes, escapes, separators,
/// whitespace, the starts of every bare item, controls and non-ASCII.
const EDGE_CHARS: &[char] = &[
    ' ', '\t', '"', '\\', ';', ',', '=', ':', '@', '%', '?', '*', '.', '-', '_', '/', '+', '(',
    ')', 'a', 'z', 'A', 'Z', '0', '1', '9', 'e', 'f', '\u{0}', '\u{7f}', '\u{e9}', '\n',
];

fn edge_char() -> impl Strategy<Value = char> {
    prop_oneof![
        proptest::sample::select(EDGE_CHARS),
        (0x20u8..=0x7e).prop_map(char::from),
    ]
}

/// One edit at a position: insert, replace or delete a character.
#[derive(Clone, Debug)]
enum Edit {
    Insert(usize, char),
    Replace(usize, char),
    Delete(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), edge_char()).prop_map(|(i, c)| Edit::Insert(i, c)),
        (any::<usize>(), edge_char()).prop_map(|(i, c)| Edit::Replace(i, c)),
        any::<usize>().prop_map(Edit::Delete),
    ]
}

fn apply(value: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = value.chars().collect();
    for edit in edits {
        match *edit {
            Edit::Insert(i, c) => chars.insert(i % (chars.len() + 1), c),
            Edit::Replace(i, c) if !chars.is_empty() => {
                let at = i % chars.len();
                chars[at] = c;
            }
            Edit::Delete(i) if !chars.is_empty() => {
                chars.remove(i % chars.len());
            }
            _ => {}
        }
    }
    chars.into_iter().collect()
}

/// The anchored pattern without its anchors, for proptest's generator.
fn unanchored(pattern: &str) -> &str {
    pattern
        .strip_prefix('^')
        .and_then(|p| p.strip_suffix('$'))
        .expect("an anchored pattern")
}

fn key_agrees(profile: KeyProfile, re: &Regex, value: &str) -> Result<(), TestCaseError> {
    let parsed = IdempotencyKey::parse(value.as_bytes(), profile);
    prop_assert_eq!(
        re.is_match(value),
        parsed.is_ok(),
        "{} {:?}: pattern and parser disagree ({:?})",
        profile,
        value,
        parsed
    );
    Ok(())
}

fn check_profile(profile: KeyProfile) {
    let pattern = profile.field_value_pattern();
    let re = Regex::new(&pattern).unwrap();
    let generated = proptest::string::string_regex(unanchored(&pattern)).unwrap();
    let mut runner = proptest::test_runner::TestRunner::new(Config {
        cases: 512,
        ..Config::default()
    });
    runner
        .run(
            &(
                generated,
                proptest::collection::vec(edit(), 0..4),
                proptest::collection::vec(edge_char(), 0..12),
            ),
            |(value, edits, noise)| {
                prop_assert!(
                    IdempotencyKey::parse(value.as_bytes(), profile).is_ok(),
                    "{profile}: the pattern generated {value:?}, which the parser refuses"
                );
                key_agrees(profile, &re, &apply(&value, &edits))?;
                key_agrees(profile, &re, &noise.into_iter().collect::<String>())
            },
        )
        .unwrap();
}

#[test]
fn strict_pattern_is_the_parser() {
    check_profile(KeyProfile::Strict);
}

#[test]
fn lenient_pattern_is_the_parser() {
    check_profile(KeyProfile::Lenient);
}

#[test]
fn uuid_pattern_is_the_parser() {
    check_profile(KeyProfile::Uuid);
}

#[test]
fn key_patterns_hold_the_length_limit_and_the_grammar_edges() {
    let at_limit = "k".repeat(MAX_KEY_LEN);
    let over = "k".repeat(MAX_KEY_LEN + 1);
    let uuid = "8E03978E-40D5-43E8-BC93-6894A57F9324";
    let cases = [
        format!("\"{at_limit}\""),
        format!("\"{over}\""),
        format!("\"{}\\\"\"", "k".repeat(MAX_KEY_LEN - 1)),
        format!("\"{}\\\"\"", "k".repeat(MAX_KEY_LEN)),
        at_limit.clone(),
        over.clone(),
        String::new(),
        "\"\"".to_owned(),
        " \t\"abc\" ".to_owned(),
        "\"abc\" ;v=1".to_owned(),
        "\"abc\";v=1;w;x=?0;y=:QUJD:;z=@-12;d=%\"caf%c3%a9\";t=a:b/c;n=-1.5".to_owned(),
        "\"abc\";d=%\"%c3\"".to_owned(),
        "\"abc\";b=:QUJ=:".to_owned(),
        "\"abc\";b=:Q:".to_owned(),
        "\"abc\";n=1234567890123.1".to_owned(),
        "\"abc\";n=1.1234".to_owned(),
        "\"abc\";n=1234567890123456".to_owned(),
        "\"abc\";V=1".to_owned(),
        "abc-123".to_owned(),
        "abc;v=1".to_owned(),
        "a,b".to_owned(),
        uuid.to_owned(),
        format!("\"{uuid}\";v=1"),
        format!("{{{uuid}}}"),
        uuid.replace('-', ""),
    ];
    for profile in KeyProfile::ALL {
        let re = Regex::new(&profile.field_value_pattern()).unwrap();
        for value in &cases {
            let parsed = IdempotencyKey::parse(value.as_bytes(), profile);
            assert_eq!(
                re.is_match(value),
                parsed.is_ok(),
                "{profile} {value:?}: {parsed:?}"
            );
        }
        // The limit itself, in the profiles that allow long keys.
        if profile != KeyProfile::Uuid {
            assert!(re.is_match(&format!("\"{at_limit}\"")), "{profile}");
            assert!(!re.is_match(&format!("\"{over}\"")), "{profile}");
        }
    }
}

fn sku_accepted(sku: &str) -> bool {
    let body = serde_json::json!({ "sku": sku, "quantity": 1 }).to_string();
    NewOrder::from_json(body.as_bytes()).is_ok()
}

proptest! {
    #[test]
    fn sku_pattern_is_the_validation(
        value in proptest::string::string_regex(unanchored(SKU_PATTERN)).unwrap(),
        edits in proptest::collection::vec(edit(), 0..3),
        noise in "[A-Z0-9a-z_ -]{0,40}",
    ) {
        let re = Regex::new(SKU_PATTERN).unwrap();
        prop_assert!(sku_accepted(&value), "{:?}", value);
        for candidate in [apply(&value, &edits), noise] {
            prop_assert_eq!(re.is_match(&candidate), sku_accepted(&candidate), "{:?}", candidate);
        }
    }
}

#[test]
fn sku_pattern_holds_the_length_limit() {
    let re = Regex::new(SKU_PATTERN).unwrap();
    let at = "A".repeat(SKU_MAX_LEN);
    let over = "A".repeat(SKU_MAX_LEN + 1);
    assert!(re.is_match(&at) && sku_accepted(&at));
    assert!(!re.is_match(&over) && !sku_accepted(&over));
}

fn reference_accepted(reference: &str) -> bool {
    let body = serde_json::json!({ "sku": "A", "quantity": 1, "reference": reference });
    NewOrder::from_json(body.to_string().as_bytes()).is_ok()
}

proptest! {
    #[test]
    fn reference_pattern_is_the_validation(
        value in proptest::string::string_regex(unanchored(REFERENCE_PATTERN)).unwrap(),
        edits in proptest::collection::vec(edit(), 0..3),
        noise in "[A-Za-z0-9._ /~-]{0,70}",
    ) {
        let re = Regex::new(REFERENCE_PATTERN).unwrap();
        prop_assert!(reference_accepted(&value), "{:?}", value);
        for candidate in [apply(&value, &edits), noise] {
            prop_assert_eq!(re.is_match(&candidate), reference_accepted(&candidate), "{:?}", candidate);
        }
    }
}

#[test]
fn reference_pattern_holds_the_length_limit() {
    let re = Regex::new(REFERENCE_PATTERN).unwrap();
    let at = "r".repeat(REFERENCE_MAX_LEN);
    let over = "r".repeat(REFERENCE_MAX_LEN + 1);
    assert!(re.is_match(&at) && reference_accepted(&at));
    assert!(!re.is_match(&over) && !reference_accepted(&over));
    assert!(!re.is_match("") && !reference_accepted(""));
}
