//! Statements on one shard's own tables (docs/src/internals/citus.md).
//!
//! In a database distributed by Citus, a call on a queue runs on the node that holds the queue's
//! shard, and its statements name that shard's tables (`jobs.job_102008`) rather than the
//! distributed ones, which on a Citus node are shells that Citus would plan again, route and
//! deparse. While a [`ShardTables`] is current ([`with_shard`]), every statement is prepared
//! with its table names replaced and kept under the shard's key, beside its plan for the plain
//! tables. Statements that write a reference table (`jobs.queue`) keep its name, so Citus writes
//! every copy; a few statements keep a name for a reason of their own ([`THROUGH_CITUS`]).

use std::cell::RefCell;
use std::rc::Rc;

/// One table the statements name, and what names it on the shard's node.
pub struct Rename {
    /// The name as the statements write it (`jobs.job`).
    pub table: &'static str,
    /// The shard's table, or the node's copy of a reference table (`jobs.job_102008`).
    pub local: String,
    /// Whether it is the node's copy of a reference table: read there, written through Citus.
    pub reference: bool,
}

/// The tables of one shard, and of the reference tables on its node.
pub struct ShardTables {
    /// The key kept plans are filed under (the shard id of `jobs.job`); never 0.
    pub key: i64,
    /// The names replaced.
    pub renames: Vec<Rename>,
}

thread_local! {
    static CURRENT: RefCell<Option<Rc<ShardTables>>> = const { RefCell::new(None) };
}

/// Statements that keep a distributed table's name in one place, and the text that stays:
/// a dead-letter copy goes into the dead-letter queue, whose shard may be on another node, so
/// Citus routes that insert.
const THROUGH_CITUS: &[(&str, &str)] = &[("dead_letter/insert_routed", "INSERT INTO jobs.job ")];

/// Whole-row results of `jobs.job` come back as rows of the distributed table's type, which the
/// functions declare, not as rows of the shard's.
const WHOLE_ROWS: &[(&str, &str)] = &[("SELECT j AS job", "SELECT ROW(j.*)::jobs.job AS job")];

/// Runs `work` with `tables` current (the previous ones, if any, again afterwards, also when
/// `work` raises an ERROR).
pub fn with_shard<R>(tables: Rc<ShardTables>, work: impl FnOnce() -> R) -> R {
    struct Restore(Option<Rc<ShardTables>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            CURRENT.with(|current| *current.borrow_mut() = previous);
        }
    }
    let previous = CURRENT.with(|current| current.borrow_mut().replace(tables));
    let _restore = Restore(previous);
    work()
}

/// The current shard's key, 0 when statements run on the plain tables.
pub fn current_key() -> i64 {
    CURRENT.with(|current| current.borrow().as_ref().map_or(0, |tables| tables.key))
}

/// The current shard's tables, if any.
pub fn current() -> Option<Rc<ShardTables>> {
    CURRENT.with(|current| current.borrow().clone())
}

/// `sql` of the statement `name` as it runs on the current shard's tables, when a shard is
/// current.
pub fn rewrite(name: &str, sql: &str) -> Option<String> {
    let tables = current()?;
    // A statement that writes a reference table goes through Citus for that table.
    let writes = |table: &str| {
        ["INSERT INTO ", "UPDATE ", "DELETE FROM "]
            .iter()
            .any(|verb| sql.contains(&format!("{verb}{table}")))
    };
    let mut text = sql.to_owned();
    for (from, to) in WHOLE_ROWS {
        text = text.replace(from, to);
    }
    let kept: Vec<&str> = THROUGH_CITUS
        .iter()
        .filter(|(statement, _)| *statement == name)
        .map(|(_, kept)| *kept)
        .collect();
    let renames: Vec<(&str, &str)> = tables
        .renames
        .iter()
        .filter(|rename| !rename.reference || !writes(rename.table))
        .map(|rename| (rename.table, rename.local.as_str()))
        .collect();
    Some(rename(&text, &renames, &kept))
}

/// Replaces each name of `renames` where it stands as a table name: not inside a quoted
/// literal or identifier or a comment, not as part of a longer name, not after `::` (a type),
/// and not inside one of the `kept` passages.
fn rename(sql: &str, renames: &[(&str, &str)], kept: &[&str]) -> String {
    let bytes = sql.as_bytes();
    let mut out = String::with_capacity(sql.len() + 64);
    let mut i = 0;
    while i < bytes.len() {
        let rest = &sql[i..];
        if let Some(passage) = kept.iter().find(|passage| rest.starts_with(**passage)) {
            out.push_str(passage);
            i += passage.len();
            continue;
        }
        match bytes[i] {
            b'\'' | b'"' => {
                let quote = bytes[i];
                let mut end = i + 1;
                while end < bytes.len() {
                    if bytes[end] == quote {
                        if end + 1 < bytes.len() && bytes[end + 1] == quote {
                            end += 2;
                            continue;
                        }
                        break;
                    }
                    end += 1;
                }
                let end = (end + 1).min(bytes.len());
                out.push_str(&sql[i..end]);
                i = end;
                continue;
            }
            b'-' if rest.starts_with("--") => {
                let end = rest.find('\n').map_or(bytes.len(), |n| i + n);
                out.push_str(&sql[i..end]);
                i = end;
                continue;
            }
            _ => {}
        }
        let starts_name = i == 0 || !is_name_byte(bytes[i - 1]);
        let after_cast = out.ends_with("::");
        if starts_name && !after_cast {
            if let Some((from, to)) = renames.iter().find(|(from, _)| {
                rest.starts_with(*from)
                    && rest
                        .as_bytes()
                        .get(from.len())
                        .is_none_or(|next| !is_name_byte(*next))
            }) {
                out.push_str(to);
                i += from.len();
                continue;
            }
        }
        let next = rest.chars().next().map_or(1, char::len_utf8);
        out.push_str(&rest[..next]);
        i += next;
    }
    out
}

fn is_name_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'.' || byte == b'$'
}

#[cfg(test)]
mod unit {
    use super::rename;

    #[test]
    fn names_are_replaced_only_where_they_name_the_table() {
        let renames = [("jobs.job", "jobs.job_7"), ("jobs.queue", "jobs.queue_9")];
        let sql = "SELECT j.id FROM jobs.job j JOIN jobs.queue q ON q.name = j.queue \
                   WHERE x = 'jobs.job' AND y::jobs.job IS NULL AND z IN (SELECT 1 FROM jobs.jobs) \
                   -- jobs.job in a comment\n AND jobs.job_id_seq IS NULL";
        let expected = "SELECT j.id FROM jobs.job_7 j JOIN jobs.queue_9 q ON q.name = j.queue \
                   WHERE x = 'jobs.job' AND y::jobs.job IS NULL AND z IN (SELECT 1 FROM jobs.jobs) \
                   -- jobs.job in a comment\n AND jobs.job_id_seq IS NULL";
        assert_eq!(rename(sql, &renames, &[]), expected);
    }

    #[test]
    fn kept_passages_keep_their_names() {
        let renames = [("jobs.job", "jobs.job_7")];
        let sql = "INSERT INTO jobs.job (queue) SELECT f.queue FROM jobs.job f";
        assert_eq!(
            rename(sql, &renames, &["INSERT INTO jobs.job "]),
            "INSERT INTO jobs.job (queue) SELECT f.queue FROM jobs.job_7 f"
        );
    }
}
