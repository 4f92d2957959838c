//! The book's Markdown (`docs/src`), read as far as the tests that hold it to the installed
//! extension need: headings, tables, fenced code blocks and the other lines, in order. Not a
//! Markdown parser: the pages follow the conventions `CONTRIBUTING.md` describes (tables and
//! fences at the start of a line, a table's header followed by its `|---|` line), and anything
//! else is an ordinary line.

use std::path::{Path, PathBuf};

/// The book's source directory, `docs/src`.
pub fn book_source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/src")
}

/// One piece of a page, with the 1-based number of the line it starts on.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// `## text`: the level (number of `#`) and the text after them.
    Heading {
        level: usize,
        text: String,
        line: usize,
    },
    /// A table: its header cells and its rows' cells, trimmed, backticks kept.
    Table {
        header: Vec<String>,
        rows: Vec<Vec<String>>,
        line: usize,
    },
    /// A fenced code block: its info string (`sql`, `text`, ...) and its lines, joined.
    Code {
        info: String,
        text: String,
        line: usize,
    },
    /// Any other line (blank lines included).
    Text { text: String, line: usize },
}

/// A page's items, in order.
pub fn parse(page: &str) -> Vec<Item> {
    let lines: Vec<&str> = page.lines().collect();
    let mut items = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let number = i + 1;
        let trimmed = line.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            let indent = line.len() - trimmed.len();
            let mut body = Vec::new();
            i += 1;
            while i < lines.len() && !lines[i].trim_start().starts_with("```") {
                let text = lines[i];
                // A block inside a list item is indented with the item: take the indent off.
                let cut = text.len() - text.trim_start().len();
                body.push(&text[cut.min(indent)..]);
                i += 1;
            }
            items.push(Item::Code {
                info: info.trim().to_owned(),
                text: body.join("\n"),
                line: number,
            });
            i += 1;
            continue;
        }
        if line.starts_with('#') {
            let level = line.chars().take_while(|&c| c == '#').count();
            if line[level..].starts_with(' ') {
                items.push(Item::Heading {
                    level,
                    text: line[level..].trim().to_owned(),
                    line: number,
                });
                i += 1;
                continue;
            }
        }
        if line.starts_with('|') && lines.get(i + 1).is_some_and(|next| is_separator(next)) {
            let header = cells(line);
            let mut rows = Vec::new();
            i += 2;
            while i < lines.len() && lines[i].starts_with('|') {
                rows.push(cells(lines[i]));
                i += 1;
            }
            items.push(Item::Table {
                header,
                rows,
                line: number,
            });
            continue;
        }
        items.push(Item::Text {
            text: line.to_owned(),
            line: number,
        });
        i += 1;
    }
    items
}

/// Whether `line` is a table's `|---|---|` line.
fn is_separator(line: &str) -> bool {
    line.starts_with('|')
        && line.contains('-')
        && line.chars().all(|c| matches!(c, '|' | '-' | ':' | ' '))
}

/// The cells of a table row, split at the `|`s outside code spans, trimmed.
fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut cells = Vec::new();
    let mut current = String::new();
    let mut in_code = false;
    for c in inner.chars() {
        match c {
            '`' => {
                in_code = !in_code;
                current.push(c);
            }
            '|' if !in_code => cells.push(std::mem::take(&mut current).trim().to_owned()),
            _ => current.push(c),
        }
    }
    cells.push(current.trim().to_owned());
    cells
}

/// The content of `text` when it is exactly one code span (`` `jobs_claim` ``), else `None`.
pub fn code_span(text: &str) -> Option<&str> {
    let inner = text.trim().strip_prefix('`')?.strip_suffix('`')?;
    (!inner.is_empty() && !inner.contains('`')).then_some(inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_headings_tables_and_code_blocks() {
        let page = "# Title\n\n## `jobs_claim`\n\n| argument | type |\n|---|---|\n| `queue` | `text` |\n| `kinds` | `a | b` |\nafter\n\n```sql\nSELECT 1;\n```\n";
        let items = parse(page);
        assert_eq!(
            items[2],
            Item::Heading {
                level: 2,
                text: "`jobs_claim`".into(),
                line: 3
            }
        );
        assert_eq!(
            items[4],
            Item::Table {
                header: vec!["argument".into(), "type".into()],
                rows: vec![
                    vec!["`queue`".into(), "`text`".into()],
                    vec!["`kinds`".into(), "`a | b`".into()]
                ],
                line: 5
            }
        );
        assert!(items.contains(&Item::Code {
            info: "sql".into(),
            text: "SELECT 1;".into(),
            line: 11
        }));
        assert_eq!(code_span("`jobs.job`"), Some("jobs.job"));
        assert_eq!(code_span("`a` and `b`"), None);
    }
}
