//! The SQL reference (`docs/src/reference/*.md`) against the installed extension: every function
//! of the extension is documented there with each of its arguments (name, type, default, in
//! order) and its result, every table, view and type of schema `jobs` with its columns, and
//! nothing is documented that the catalog does not have. The API is read the way the manifest
//! test reads it ([`manifest::listing`]), so "the API" means the same thing in both.
//!
//! The pages follow the convention `CONTRIBUTING.md` describes ("The SQL reference"): a
//! level-2 heading that is exactly one code span names an object (`` ## `jobs_claim` ``); in its
//! section, a table whose first column is `argument` lists the arguments (columns `argument`,
//! `type`, `default`), a line starting `**Returns**` gives the result type as a code span, or
//! says `a table` and is followed by a table whose first column is `column`, and a line starting
//! `**Errors**` gives the SQLSTATEs it raises; a table, view or
//! composite type has a `column` table (`column`, `type`); an enum names each label in a code
//! span.

use std::collections::{BTreeMap, BTreeSet};

use pg_jobs_tests::markdown::{self, code_span, Item};
use pg_jobs_tests::{manifest, Client, Cluster};

/// The short type names the pages may use, and what the catalog calls them.
const TYPE_ALIASES: &[(&str, &str)] = &[
    ("timestamptz", "timestamp with time zone"),
    ("float8", "double precision"),
];

/// A name, a type and, for arguments, a default: one row of an argument or column table.
#[derive(Debug, Clone, PartialEq)]
struct Field {
    name: String,
    sql_type: String,
    /// `None`: no default (an argument the caller must pass, or a column).
    default: Option<String>,
}

/// What a function returns.
#[derive(Debug, PartialEq)]
enum Returns {
    /// One type, or `SETOF` a type.
    Type(String),
    /// `TABLE(...)`: the columns.
    Table(Vec<Field>),
}

/// One object as the pages document it.
#[derive(Debug)]
struct Documented {
    /// `docs/src/reference/<page>.md:<line>`, for messages.
    place: String,
    arguments: Option<Vec<Field>>,
    returns: Option<Returns>,
    columns: Option<Vec<Field>>,
    /// The section's text, for the labels of an enum.
    text: String,
    /// Whether the section has a line starting `**Errors**`.
    errors: bool,
}

/// One object as the catalog has it.
#[derive(Debug)]
enum Catalogued {
    Function {
        arguments: Vec<Field>,
        returns: Returns,
    },
    Relation {
        columns: Vec<Field>,
    },
    Enum {
        labels: Vec<String>,
    },
}

/// The reference pages: (file name, text).
fn reference_pages() -> Vec<(String, String)> {
    let dir = markdown::book_source().join("reference");
    let mut pages: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            (name, text)
        })
        .collect();
    pages.sort();
    assert!(pages.len() >= 5, "the reference has its pages: {pages:?}");
    pages
}

/// `text` with the aliases of [`TYPE_ALIASES`] spelt as the catalog spells them.
fn normalize_type(text: &str) -> String {
    let mut out = text.trim().to_owned();
    for (alias, name) in TYPE_ALIASES {
        let mut from = 0;
        while let Some(found) = out[from..].find(alias) {
            let start = from + found;
            let end = start + alias.len();
            let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
            let before = out[..start].chars().next_back().is_some_and(word);
            let after = out[end..].chars().next().is_some_and(word);
            if before || after {
                from = end;
            } else {
                out.replace_range(start..end, name);
                from = start + name.len();
            }
        }
    }
    out
}

/// A cell's value: the code span's content, or the cell's text.
fn cell(text: &str) -> String {
    code_span(text).unwrap_or(text).trim().to_owned()
}

/// The fields of a table whose first columns are name, type (and, with `defaults`, default).
fn fields(
    header: &[String],
    rows: &[Vec<String>],
    defaults: bool,
    place: &str,
    problems: &mut Vec<String>,
) -> Vec<Field> {
    let wanted: &[&str] = if defaults {
        &["argument", "type", "default"]
    } else {
        &["column", "type"]
    };
    if header.len() < wanted.len() || header[..wanted.len()] != *wanted {
        problems.push(format!(
            "{place}: the table's first columns must be {wanted:?}, got {header:?}"
        ));
        return Vec::new();
    }
    rows.iter()
        .map(|row| Field {
            name: cell(&row[0]).trim_matches('"').to_owned(),
            sql_type: normalize_type(&cell(row.get(1).map_or("", |c| c.as_str()))),
            default: defaults.then(|| cell(row.get(2).map_or("", |c| c.as_str()))),
        })
        .collect()
}

/// The objects the pages document, by the name a caller uses (`jobs_claim`, `jobs.job`).
fn documented(
    pages: &[(String, String)],
    problems: &mut Vec<String>,
) -> BTreeMap<String, Documented> {
    let mut objects: BTreeMap<String, Documented> = BTreeMap::new();
    for (page, text) in pages {
        let items = markdown::parse(text);
        let mut i = 0;
        while i < items.len() {
            let Item::Heading {
                level: 2,
                text,
                line,
            } = &items[i]
            else {
                i += 1;
                continue;
            };
            i += 1;
            let Some(name) = code_span(text) else {
                continue;
            };
            let place = format!("docs/src/reference/{page}:{line}");
            let start = i;
            while i < items.len()
                && !matches!(&items[i], Item::Heading { level, .. } if *level <= 2)
            {
                i += 1;
            }
            let section = &items[start..i];
            let mut object = Documented {
                place: place.clone(),
                arguments: None,
                returns: None,
                columns: None,
                text: String::new(),
                errors: false,
            };
            let mut after_returns_table = false;
            for item in section {
                match item {
                    Item::Text { text, line } => {
                        object.text.push_str(text);
                        object.text.push('\n');
                        object.errors |= text.starts_with("**Errors**");
                        if let Some(rest) = text.strip_prefix("**Returns**") {
                            let rest = rest.trim_start();
                            if object.returns.is_some() || after_returns_table {
                                problems.push(format!(
                                    "docs/src/reference/{page}:{line}: a second **Returns** line"
                                ));
                            } else if rest.starts_with("a table") {
                                after_returns_table = true;
                            } else if let Some(end) =
                                rest.strip_prefix('`').and_then(|r| r.find('`'))
                            {
                                object.returns =
                                    Some(Returns::Type(normalize_type(&rest[1..end + 1])));
                            } else {
                                problems.push(format!(
                                    "docs/src/reference/{page}:{line}: **Returns** is followed by the type in a code span, or by `a table` and a table of columns"
                                ));
                            }
                        }
                    }
                    Item::Table { header, rows, line } => {
                        let place = format!("docs/src/reference/{page}:{line}");
                        match header.first().map(String::as_str) {
                            Some("argument") if object.arguments.is_none() => {
                                object.arguments =
                                    Some(fields(header, rows, true, &place, problems));
                            }
                            Some("column") if after_returns_table && object.returns.is_none() => {
                                object.returns = Some(Returns::Table(fields(
                                    header, rows, false, &place, problems,
                                )));
                            }
                            Some("column") if object.columns.is_none() && !after_returns_table => {
                                object.columns =
                                    Some(fields(header, rows, false, &place, problems));
                            }
                            _ => {}
                        }
                    }
                    Item::Heading { .. } | Item::Code { .. } => {}
                }
            }
            if after_returns_table && object.returns.is_none() {
                problems.push(format!(
                    "{place}: **Returns** a table, but no table whose first column is `column` follows"
                ));
            }
            if let Some(first) = objects.get(name) {
                problems.push(format!(
                    "{place}: `{name}` is documented twice (also at {})",
                    first.place
                ));
            } else {
                objects.insert(name.to_owned(), object);
            }
        }
    }
    objects
}

/// An argument as `pg_get_function_arguments` prints it: `name type [DEFAULT expr]`.
fn catalog_argument(item: &str) -> Field {
    let (name, rest) = if let Some(quoted) = item.strip_prefix('"') {
        let end = quoted.find('"').expect("a closing quote");
        (&quoted[..end], &quoted[end + 1..])
    } else {
        item.split_once(' ')
            .unwrap_or_else(|| panic!("an argument without a type: {item}"))
    };
    assert!(
        !matches!(name, "IN" | "OUT" | "INOUT" | "VARIADIC"),
        "argument modes are not read here yet: {item}"
    );
    let (sql_type, default) = match rest.split_once(" DEFAULT ") {
        Some((sql_type, default)) => (sql_type, Some(default.to_owned())),
        None => (rest, None),
    };
    Field {
        name: name.to_owned(),
        sql_type: sql_type.trim().to_owned(),
        default,
    }
}

/// The API of the installed extension, by the name a caller uses.
fn catalogued(client: &mut Client) -> BTreeMap<String, Catalogued> {
    let mut objects = BTreeMap::new();
    for line in manifest::listing(client) {
        let entry = manifest::parse(&line);
        let object = match entry.kind.as_str() {
            "function" => {
                let arguments = entry.items.iter().map(|i| catalog_argument(i)).collect();
                let returns = match entry
                    .result
                    .strip_prefix("TABLE(")
                    .and_then(|r| r.strip_suffix(')'))
                {
                    Some(columns) => Returns::Table(
                        manifest::split_items(columns)
                            .iter()
                            .map(|c| catalog_argument(c))
                            .collect(),
                    ),
                    None => Returns::Type(entry.result.clone()),
                };
                Catalogued::Function { arguments, returns }
            }
            _ if entry.result == "enum" => Catalogued::Enum {
                labels: entry
                    .items
                    .iter()
                    .map(|l| l.trim_matches('\'').to_owned())
                    .collect(),
            },
            _ => Catalogued::Relation {
                columns: entry.items.iter().map(|i| catalog_argument(i)).collect(),
            },
        };
        // The jobs_* functions are called unqualified (they live in the schema CREATE
        // EXTENSION was given); everything of schema jobs is named with it.
        let name = match entry.name.split_once('.') {
            Some(("jobs", _)) => entry.name.clone(),
            Some((_, name)) => name.to_owned(),
            None => entry.name.clone(),
        };
        objects.insert(name, object);
    }
    objects
}

/// Whether the documented default `documented` is the catalog's `catalog` for `sql_type`, as
/// the server evaluates them; `Err` with the server's message when `documented` is not SQL.
fn same_default(
    client: &mut Client,
    documented: &str,
    catalog: &str,
    sql_type: &str,
) -> Result<bool, String> {
    let query = format!(
        "SELECT (({documented})::{sql_type}) IS NOT DISTINCT FROM (({catalog})::{sql_type})"
    );
    client
        .query_one(&query, &[])
        .map(|row| row.get(0))
        .map_err(|e| e.to_string())
}

/// Compares fields in order: names, types and (for arguments) defaults.
fn compare_fields(
    client: &mut Client,
    what: &str,
    place: &str,
    name: &str,
    documented: &[Field],
    catalog: &[Field],
    problems: &mut Vec<String>,
) {
    let documented_names: Vec<&str> = documented.iter().map(|f| f.name.as_str()).collect();
    let catalog_names: Vec<&str> = catalog.iter().map(|f| f.name.as_str()).collect();
    if documented_names != catalog_names {
        problems.push(format!(
            "{place}: the {what} of `{name}` are documented as {documented_names:?}; the extension has {catalog_names:?}"
        ));
        return;
    }
    for (doc, cat) in documented.iter().zip(catalog) {
        if doc.sql_type != cat.sql_type {
            problems.push(format!(
                "{place}: `{name}`'s {} is documented as `{}`; the extension has `{}`",
                cat.name, doc.sql_type, cat.sql_type
            ));
            continue;
        }
        let Some(documented_default) = &doc.default else {
            continue;
        };
        match (&cat.default, documented_default.as_str()) {
            (None, "required") => {}
            (None, other) => problems.push(format!(
                "{place}: `{name}`'s {} has no default in the extension; document it as `required`, not {other:?}",
                cat.name
            )),
            (Some(default), "required") => problems.push(format!(
                "{place}: `{name}`'s {} defaults to {default} in the extension; document that default, not `required`",
                cat.name
            )),
            (Some(default), documented_default) => {
                match same_default(client, documented_default, default, &cat.sql_type) {
                    Ok(true) => {}
                    Ok(false) => problems.push(format!(
                        "{place}: `{name}`'s {} is documented with default {documented_default:?}; the extension's default is {default}",
                        cat.name
                    )),
                    Err(error) => problems.push(format!(
                        "{place}: `{name}`'s {} has the default {documented_default:?}, which is not an SQL expression of type {} ({error})",
                        cat.name, cat.sql_type
                    )),
                }
            }
        }
    }
}

/// Everything the pages and the catalog disagree on, one sentence each.
fn problems(client: &mut Client, pages: &[(String, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    let documented = documented(pages, &mut problems);
    let catalogued = catalogued(client);
    assert!(
        catalogued.len() > 30,
        "the listing sees the API: {catalogued:?}"
    );
    let names: BTreeSet<&String> = documented.keys().chain(catalogued.keys()).collect();
    for name in names {
        match (documented.get(name), catalogued.get(name)) {
            (Some(doc), None) => problems.push(format!(
                "{}: `{name}` is documented, but the installed extension has no such function, table, view or type",
                doc.place
            )),
            (None, Some(_)) => problems.push(format!(
                "`{name}` is not documented: give it a section headed ## `{name}` on its area's page in docs/src/reference (CONTRIBUTING.md, \"The SQL reference\")"
            )),
            (Some(doc), Some(Catalogued::Function { arguments, returns })) => {
                let place = &doc.place;
                match &doc.arguments {
                    Some(documented) => compare_fields(
                        client, "arguments", place, name, documented, arguments, &mut problems,
                    ),
                    None if arguments.is_empty() => {}
                    None => problems.push(format!(
                        "{place}: `{name}` takes arguments, and its section has no table whose first column is `argument`"
                    )),
                }
                if !doc.errors {
                    problems.push(format!(
                        "{place}: `{name}`'s section has no **Errors** line (the SQLSTATEs it raises, and when)"
                    ));
                }
                match (&doc.returns, returns) {
                    (None, _) => problems.push(format!(
                        "{place}: `{name}`'s section has no **Returns** line"
                    )),
                    (Some(Returns::Type(doc)), Returns::Type(cat)) if doc == cat => {}
                    (Some(Returns::Table(documented)), Returns::Table(columns)) => {
                        compare_fields(
                            client, "result columns", place, name, documented, columns,
                            &mut problems,
                        )
                    }
                    (Some(doc), cat) => problems.push(format!(
                        "{place}: `{name}` is documented to return {doc:?}; the extension's result is {cat:?}"
                    )),
                }
            }
            (Some(doc), Some(Catalogued::Relation { columns })) => match &doc.columns {
                Some(documented) => compare_fields(
                    client, "columns", &doc.place, name, documented, columns, &mut problems,
                ),
                None => problems.push(format!(
                    "{}: `{name}`'s section has no table whose first column is `column`",
                    doc.place
                )),
            },
            (Some(doc), Some(Catalogued::Enum { labels })) => {
                for label in labels {
                    if !doc.text.contains(&format!("`{label}`")) {
                        problems.push(format!(
                            "{}: the enum `{name}` has the label {label:?}, which its section does not name",
                            doc.place
                        ));
                    }
                }
            }
            (None, None) => unreachable!("a name from one of the two maps"),
        }
    }
    problems
}

#[test]
fn the_reference_documents_exactly_the_installed_api() {
    let mut client = Cluster::shared().connect();
    let problems = problems(&mut client, &reference_pages());
    assert!(
        problems.is_empty(),
        "the SQL reference and the installed extension differ:\n{}",
        problems.join("\n")
    );
}

/// The check finds each kind of drift: an argument left out, a wrong default, a wrong type, a
/// function that does not exist, a missing column, an object left undocumented, a function
/// whose errors are not given.
#[test]
fn the_check_finds_what_drifted() {
    let mut client = Cluster::shared().connect();
    let pages = reference_pages();
    let edit = |file: &str, from: &str, to: &str| -> Vec<(String, String)> {
        pages
            .iter()
            .map(|(name, text)| {
                if name == file {
                    assert!(text.contains(from), "{file} contains {from:?}");
                    (name.clone(), text.replacen(from, to, 1))
                } else {
                    (name.clone(), text.clone())
                }
            })
            .collect()
    };
    let cases = [
        (
            edit(
                "consuming.md",
                "| `n` | `integer` | `1` |",
                "| `n` | `integer` | `2` |",
            ),
            "`jobs_claim`'s n is documented with default \"2\"",
        ),
        (
            edit(
                "consuming.md",
                "| `wait` | `interval` | `'0'` |",
                "| `wait` | `interval` | required |",
            ),
            "`jobs_claim`'s wait defaults to",
        ),
        (
            edit(
                "producing.md",
                "| `priority` | `integer` | `0` |",
                "| `priority` | `smallint` | `0` |",
            ),
            "`jobs_enqueue`'s priority is documented as `smallint`",
        ),
        (
            edit(
                "operating.md",
                "| `before_id` | `bigint` | `NULL` | | to page: the last id of the previous page |\n",
                "",
            ),
            "the arguments of `jobs_list` are documented as",
        ),
        (
            edit(
                "operating.md",
                "## `jobs_reclaim`",
                "## `jobs_reclaim_all`",
            ),
            "`jobs_reclaim_all` is documented, but the installed extension has no such",
        ),
        (
            edit("operating.md", "## `jobs_reclaim`", "## jobs_reclaim"),
            "`jobs_reclaim` is not documented",
        ),
        (
            edit(
                "tables.md",
                "| `group_wait` | `boolean` |",
                "| `group_waits` | `boolean` |",
            ),
            "the columns of `jobs.job` are documented as",
        ),
        (
            edit("queues.md", "**Returns** `void`.", "**Returns** `text`."),
            "`jobs_drop_queue` is documented to return",
        ),
        (
            edit("operating.md", "**Errors**: `42501` (not a `jobs_admin`); `25006`", "`42501`"),
            "`jobs_reclaim`'s section has no **Errors** line",
        ),
    ];
    for (pages, expected) in cases {
        let found = problems(&mut client, &pages);
        assert!(
            found.iter().any(|p| p.contains(expected)),
            "expected a problem containing {expected:?}, found {found:#?}"
        );
    }
}
