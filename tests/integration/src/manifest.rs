//! The API manifest, `sql/api-manifest.txt`: the public API of every released version of
//! pg_jobs (function signatures, types with their attributes, view columns), and the notes
//! that explain the changes between versions that are not compatible growth. The tests
//! compute the same listing from the catalogs ([`listing`]) and compare ([`difference`]), and
//! check each version against the one before ([`incompatible_changes`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use postgres::Client;

/// The query that lists the API of the database it runs in, one line per object, as the
/// manifest writes it.
pub const LISTING_QUERY: &str = include_str!("api_listing.sql");

/// The manifest's path in the repository.
pub fn path() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../sql/api-manifest.txt"
    ))
}

/// One version's section of the manifest.
#[derive(Debug)]
pub struct Section {
    /// The version, as `pg_extension.extversion` spells it.
    pub version: String,
    /// The API's lines.
    pub lines: BTreeSet<String>,
    /// Notes by the name of the object they explain (`public.jobs_complete`).
    pub notes: BTreeMap<String, String>,
}

/// Reads the manifest's sections, oldest first.
pub fn read() -> Vec<Section> {
    let text = std::fs::read_to_string(path())
        .unwrap_or_else(|e| panic!("read {}: {e}", path().display()));
    let mut sections: Vec<Section> = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim_end();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(version) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            sections.push(Section {
                version: version.to_owned(),
                lines: BTreeSet::new(),
                notes: BTreeMap::new(),
            });
            continue;
        }
        let section = sections.last_mut().unwrap_or_else(|| {
            panic!(
                "sql/api-manifest.txt line {}: entries must follow a [version] line",
                number + 1
            )
        });
        if let Some(note) = line.strip_prefix("note ") {
            let (name, why) = note.split_once(": ").unwrap_or_else(|| {
                panic!(
                    "sql/api-manifest.txt line {}: a note reads `note <object>: <why>`",
                    number + 1
                )
            });
            section.notes.insert(name.to_owned(), why.to_owned());
        } else {
            section.lines.insert(line.to_owned());
        }
    }
    sections
}

/// The API of the database `client` is connected to, as manifest lines.
pub fn listing(client: &mut Client) -> BTreeSet<String> {
    client
        .query(LISTING_QUERY, &[])
        .unwrap_or_else(|e| panic!("list the API: {e}"))
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// `None` when the manifest's section and the database's listing agree; otherwise what to
/// change in the manifest, line by line.
pub fn difference(section: &Section, listed: &BTreeSet<String>) -> Option<String> {
    if section.lines == *listed {
        return None;
    }
    let mut text = format!(
        "the API differs from section [{}] of sql/api-manifest.txt. If the change is intended, update that section (the lines below: - to remove, + to add) and, unless it only appends parameters with defaults (or columns), add `note <object>: <why>` for it:\n",
        section.version
    );
    for line in section.lines.difference(listed) {
        text.push_str(&format!("- {line}\n"));
    }
    for line in listed.difference(&section.lines) {
        text.push_str(&format!("+ {line}\n"));
    }
    Some(text)
}

/// One object of a manifest line.
#[derive(Debug, PartialEq)]
pub struct Entry {
    /// `function`, `type` or `view`.
    pub kind: String,
    /// The schema-qualified name (`public.jobs_claim`, `jobs.job`).
    pub name: String,
    /// Parameters of a function, attributes of a type, columns of a view, labels of an enum.
    pub items: Vec<String>,
    /// A function's result; `enum` for an enum type; empty otherwise.
    pub result: String,
}

/// Splits `text` at top-level `, ` (outside parentheses, brackets and quotes).
pub fn split_items(text: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut depth = 0i32;
    let mut quote: Option<char> = None;
    let mut current = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), _) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(' | '[') => depth += 1,
            (None, ')' | ']') => depth -= 1,
            (None, ',') if depth == 0 && chars.peek() == Some(&' ') => {
                chars.next();
                items.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    if !current.is_empty() {
        items.push(current);
    }
    items
}

/// The index just past the parenthesis that closes the one at `open`.
fn closing(text: &str, open: usize) -> usize {
    let mut depth = 0;
    let mut quote: Option<char> = None;
    for (i, c) in text.char_indices().skip(open) {
        match (quote, c) {
            (Some(q), _) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(') => depth += 1,
            (None, ')') => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced parentheses in manifest line: {text}")
}

/// The object a manifest line (or a line of [`listing`]) describes.
pub fn parse(line: &str) -> Entry {
    let (kind, rest) = line
        .split_once(' ')
        .unwrap_or_else(|| panic!("manifest line without a kind: {line}"));
    match kind {
        "function" => {
            let open = rest.find('(').expect("a parameter list");
            let close = closing(rest, open);
            Entry {
                kind: kind.to_owned(),
                name: rest[..open].to_owned(),
                items: split_items(&rest[open + 1..close - 1]),
                result: rest[close..]
                    .strip_prefix(" -> ")
                    .unwrap_or_else(|| panic!("a function line ends with ` -> result`: {line}"))
                    .to_owned(),
            }
        }
        "type" | "view" => {
            let (name, list) = rest
                .split_once(' ')
                .unwrap_or_else(|| panic!("no attribute list: {line}"));
            let (result, list) = match list.strip_prefix("enum ") {
                Some(labels) => ("enum", labels),
                None => ("", list),
            };
            let inner = list
                .strip_prefix('(')
                .and_then(|l| l.strip_suffix(')'))
                .unwrap_or_else(|| panic!("the attribute list is in parentheses: {line}"));
            Entry {
                kind: kind.to_owned(),
                name: name.to_owned(),
                items: split_items(inner),
                result: result.to_owned(),
            }
        }
        _ => panic!("unknown kind {kind:?} in manifest line: {line}"),
    }
}

/// Why `new` is not `old` grown compatibly (parameters with defaults, attributes, columns or
/// labels appended; the same result), or `None` when it is.
fn incompatibility(old: &Entry, new: &Entry) -> Option<String> {
    if old.kind != new.kind {
        return Some(format!("was a {}, is a {}", old.kind, new.kind));
    }
    if old.result != new.result {
        return Some(format!(
            "its result changed from {} to {}",
            old.result, new.result
        ));
    }
    let what = match old.kind.as_str() {
        "function" => "parameters",
        "view" => "columns",
        _ => "attributes",
    };
    if new.items.len() < old.items.len() || new.items[..old.items.len()] != old.items[..] {
        return Some(format!(
            "its {what} changed from ({}) to ({}): only appending keeps callers working",
            old.items.join(", "),
            new.items.join(", ")
        ));
    }
    if old.kind == "function" {
        if let Some(added) = new.items[old.items.len()..]
            .iter()
            .find(|p| !p.contains(" DEFAULT "))
        {
            return Some(format!(
                "the new parameter `{added}` has no default: calls written for the old version would fail"
            ));
        }
    }
    None
}

/// The changes from `old` to `new` that are not compatible growth and carry no note in
/// `new`, and the notes of `new` that name no object of either section; one sentence each.
pub fn incompatible_changes(old: &Section, new: &Section) -> Vec<String> {
    let by_name = |section: &Section| {
        let mut map: BTreeMap<String, Vec<Entry>> = BTreeMap::new();
        for line in &section.lines {
            let entry = parse(line);
            map.entry(entry.name.clone()).or_default().push(entry);
        }
        map
    };
    let before = by_name(old);
    let after = by_name(new);
    let mut problems = Vec::new();
    for (name, olds) in &before {
        if new.notes.contains_key(name) {
            continue;
        }
        let news = after.get(name);
        for old_entry in olds {
            let reason = match news {
                None => Some("it was removed".to_owned()),
                Some(news) if news.iter().any(|n| incompatibility(old_entry, n).is_none()) => None,
                Some(news) => incompatibility(old_entry, &news[0]),
            };
            if let Some(reason) = reason {
                problems.push(format!(
                    "{name} ({} in {}): {reason}. If that is intended, add `note {name}: <why, and what callers do instead>` to section [{}] of sql/api-manifest.txt",
                    old_entry.kind, old.version, new.version
                ));
            }
        }
    }
    for name in new.notes.keys() {
        if !before.contains_key(name) && !after.contains_key(name) {
            problems.push(format!(
                "the note on {name} in section [{}] names no object of [{}] or [{}]",
                new.version, old.version, new.version
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(version: &str, lines: &[&str], notes: &[(&str, &str)]) -> Section {
        Section {
            version: version.to_owned(),
            lines: lines.iter().map(|l| (*l).to_owned()).collect(),
            notes: notes
                .iter()
                .map(|(n, w)| ((*n).to_owned(), (*w).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn appending_a_parameter_with_a_default_is_compatible() {
        let old = section(
            "1",
            &["function public.f(a text, b integer DEFAULT 1) -> text"],
            &[],
        );
        let new = section(
            "2",
            &["function public.f(a text, b integer DEFAULT 1, c jsonb DEFAULT '{\"x\": 1, \"y\": 2}'::jsonb) -> text"],
            &[],
        );
        assert_eq!(incompatible_changes(&old, &new), Vec::<String>::new());
    }

    #[test]
    fn other_changes_need_a_note() {
        let old = section(
            "1",
            &[
                "function public.f(a text, b integer DEFAULT 1) -> text",
                "function public.g(a text) -> text",
                "function public.h(a text) -> text",
                "function public.gone() -> void",
                "view jobs.v (a text, b bigint)",
            ],
            &[],
        );
        let new = section(
            "2",
            &[
                "function public.f(a text, x integer DEFAULT 0, b integer DEFAULT 1) -> text",
                "function public.g(a text, b text) -> text",
                "function public.h(a text) -> bigint",
                "view jobs.v (a text, c bigint)",
            ],
            &[],
        );
        let problems = incompatible_changes(&old, &new);
        assert_eq!(problems.len(), 5, "{problems:#?}");
        for name in ["public.f", "public.g", "public.h", "public.gone", "jobs.v"] {
            assert!(
                problems.iter().any(|p| p.starts_with(name)),
                "{name} in {problems:#?}"
            );
        }
        let noted = section(
            "2",
            &new.lines.iter().map(String::as_str).collect::<Vec<_>>(),
            &[
                ("public.f", "x"),
                ("public.g", "x"),
                ("public.h", "x"),
                ("public.gone", "x"),
                ("jobs.v", "x"),
            ],
        );
        assert_eq!(incompatible_changes(&old, &noted), Vec::<String>::new());
    }

    #[test]
    fn a_note_must_name_an_object() {
        let old = section("1", &["function public.f() -> text"], &[]);
        let new = section(
            "2",
            &["function public.f() -> text"],
            &[("public.typo", "x")],
        );
        assert_eq!(incompatible_changes(&old, &new).len(), 1);
    }
}
