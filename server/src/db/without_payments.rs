//! The order service without its payments: the baseline that the outbox's
//! cost on the order path is measured against (`bench/run.sh` builds it
//! with the `without-payments` feature, beside the real server). The
//! statements are today's, their charge's insert turned into a select of
//! no message, so the two builds differ by the outbox's row and nothing
//! else. Never for users: an order made by such a build is never charged
//! (its server says so when it starts).

/// Whether this build leaves the charge out.
pub(crate) const ENABLED: bool = cfg!(feature = "without-payments");

/// `sql` with its `charge` CTE's `INSERT INTO outbox ... RETURNING id`
/// turned into `SELECT NULL::bigint AS id, <the same columns>` under the
/// same conditions: the order then keeps no message, and every parameter
/// is still referenced with its type, so the statement takes the same
/// parameters. `None` when `sql` has no such CTE.
pub(crate) fn without_charge(sql: &str) -> Option<String> {
    let start = sql.find("charge AS (\n")? + "charge AS (\n".len();
    let len = sql[start..].find("\n), ")?;
    let (head, rest) = sql.split_at(start);
    let (cte, tail) = rest.split_at(len);
    let mut lines = cte.lines();
    if !lines
        .next()?
        .trim_start()
        .starts_with("INSERT INTO outbox ")
    {
        return None;
    }
    let mut body = Vec::new();
    for line in lines {
        let trimmed = line.trim_start();
        if trimmed == "RETURNING id" {
            continue;
        }
        match trimmed.strip_prefix("SELECT ") {
            Some(columns) if body.is_empty() => {
                body.push(format!("    SELECT NULL::bigint AS id, {columns}"));
            }
            _ => body.push(line.to_owned()),
        }
    }
    if body.is_empty() || !body[0].starts_with("    SELECT NULL") {
        return None;
    }
    Some(format!("{head}{}{tail}", body.join("\n")))
}

/// `sql`, or without its charge in a `without-payments` build.
pub(crate) fn statement(sql: &'static str) -> std::borrow::Cow<'static, str> {
    if ENABLED {
        // The statements are this crate's own: a test below checks that
        // each one has the CTE to turn.
        without_charge(sql).map_or(std::borrow::Cow::Borrowed(sql), std::borrow::Cow::Owned)
    } else {
        std::borrow::Cow::Borrowed(sql)
    }
}

#[cfg(test)]
mod tests {
    use super::without_charge;

    const STATEMENTS: [(&str, &str); 2] = [
        (
            "create_order",
            include_str!("postgres/sql/create_order.sql"),
        ),
        (
            "insert_order",
            include_str!("postgres/sql/insert_order.sql"),
        ),
    ];

    #[test]
    fn every_order_statement_loses_its_outbox_insert_and_nothing_else() {
        for (name, sql) in STATEMENTS {
            let turned = without_charge(sql).unwrap_or_else(|| panic!("{name}: no charge CTE"));
            assert!(!turned.contains("INSERT INTO outbox"), "{name}: {turned}");
            assert!(turned.contains("SELECT NULL::bigint AS id, "), "{name}");
            assert!(turned.contains("INSERT INTO orders"), "{name}");
            // Every parameter of the original is still there.
            for n in 1..=18 {
                let p = format!("${n}::");
                assert_eq!(sql.contains(&p), turned.contains(&p), "{name}: {p}");
            }
            // Only the CTE's lines changed: one line fewer (the INSERT) and
            // one fewer RETURNING.
            assert_eq!(sql.lines().count() - 2, turned.lines().count(), "{name}");
        }
    }

    #[test]
    fn a_statement_without_the_cte_is_left_alone() {
        assert_eq!(without_charge("SELECT 1"), None);
        assert_eq!(
            without_charge("WITH charge AS (\n    SELECT 1\n), x AS (SELECT 2) SELECT 3"),
            None
        );
    }
}
