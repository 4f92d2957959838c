//! What the catalogs say about pg_jobs in a database, as a set of (object, property, value)
//! rows ([`snapshot`]), and a readable difference of two such sets ([`difference`]): the
//! upgrade test compares an upgraded database with a fresh install this way, the dump test a
//! restored database with its source.

use std::collections::BTreeSet;

use postgres::Client;

/// The query: every function (signature, result, security, settings, volatility, strictness,
/// ACL), relation (columns with types, defaults, collations and NOT NULL; indexes;
/// constraints; policies; triggers; options; row security; ACL; view definitions), type,
/// comment, initial privilege, `pg_extension_config_dump` entry and extension member.
pub const QUERY: &str = include_str!("catalog.sql");

/// One fact about one object.
pub type Fact = (String, String, String);

/// The catalog facts of pg_jobs in the database `client` is connected to.
pub fn snapshot(client: &mut Client) -> BTreeSet<Fact> {
    client
        .query(QUERY, &[])
        .unwrap_or_else(|e| panic!("read the catalogs: {e}"))
        .iter()
        .map(|row| {
            let value: Option<String> = row.get(2);
            (row.get(0), row.get(1), value.unwrap_or_default())
        })
        .collect()
}

/// `None` when `left` and `right` hold the same facts; otherwise the facts only one side has,
/// one per line, marked `-` (only in `left_name`) or `+` (only in `right_name`), sorted by
/// object and property so the two versions of a changed fact stand together.
pub fn difference(
    left_name: &str,
    left: &BTreeSet<Fact>,
    right_name: &str,
    right: &BTreeSet<Fact>,
) -> Option<String> {
    let mut lines: Vec<(&Fact, char)> = left
        .difference(right)
        .map(|f| (f, '-'))
        .chain(right.difference(left).map(|f| (f, '+')))
        .collect();
    if lines.is_empty() {
        return None;
    }
    lines.sort();
    let mut text = format!(
        "{} facts differ (- only in {left_name}, + only in {right_name}):\n",
        lines.len()
    );
    for ((object, property, value), side) in lines {
        text.push_str(&format!("{side} {object} | {property} | {value}\n"));
    }
    Some(text)
}
