//! The report's section of the counts per operation (`pg_jobs_bench counts`): per job, the
//! instructions the server's backend executed, the WAL it wrote by record type, the buffers it
//! dirtied and the commits, for each operation on each queue, and each job's whole lifecycle.

use std::fmt::Write;

use super::markdown::{cell, table_header};
use crate::counts::{
    drifting, AGREE, CHECKED, CLAIM_1, CLAIM_100, ENQUEUE_1, ENQUEUE_1000, HANDROLLED, ONE_COMMIT,
    PGMQ, PG_JOBS, TENANTS,
};
use crate::format::{int, small};
use crate::results::{CountRow, Counts, PerJob};

/// The lifecycles: a name, and the enqueue and the claim whose per-job counts add up to it.
pub const LIFECYCLES: [(&str, &str, &str); 2] = [
    ("lifecycle, batches of 1", ENQUEUE_1, CLAIM_1),
    (
        "lifecycle, batches of 1,000 enqueued and 100 claimed",
        ENQUEUE_1000,
        CLAIM_100,
    ),
];

/// The lifecycles the table adds up: the row's queue, the queue of the enqueue's row and that
/// of the claim's. pg_jobs's variants touch one operation each, so the tenant's is the only
/// one with a whole lifecycle of its own; one commit per claim is pg_jobs's plain enqueue with
/// that claim.
const LIFECYCLE_QUEUES: [(&str, &str, &str); 5] = [
    (PG_JOBS, PG_JOBS, PG_JOBS),
    (ONE_COMMIT, PG_JOBS, ONE_COMMIT),
    (HANDROLLED, HANDROLLED, HANDROLLED),
    (PGMQ, PGMQ, PGMQ),
    (TENANTS, TENANTS, TENANTS),
];

/// A job's lifecycle on `queue`, as a row whose repetitions add up the operations' (each
/// operation's k-th repetition with the other's k-th).
pub fn lifecycle(counts: &Counts, name: &str, enqueue: &str, claim: &str, queue: &str) -> CountRow {
    lifecycle_of(counts, name, (enqueue, queue), (claim, queue), queue)
}

/// A lifecycle whose enqueue and claim are the rows of (operation, queue) given, shown as
/// `queue`'s.
pub fn lifecycle_of(
    counts: &Counts,
    name: &str,
    enqueue: (&str, &str),
    claim: (&str, &str),
    queue: &str,
) -> CountRow {
    let find = |(op, queue): (&str, &str)| {
        counts
            .rows
            .iter()
            .find(|r| r.operation == op && r.queue == queue)
    };
    let (a, b) = (find(enqueue), find(claim));
    let runs = match (a, b) {
        (Some(a), Some(b)) if a.missing.is_none() && b.missing.is_none() => {
            a.runs.iter().zip(&b.runs).map(|(x, y)| x.plus(y)).collect()
        }
        _ => Vec::new(),
    };
    CountRow {
        operation: name.to_owned(),
        queue: queue.to_owned(),
        jobs: 0,
        missing: runs
            .is_empty()
            .then(|| "an operation of it was not measured".to_owned()),
        runs,
    }
}

/// The largest spread of the checked figures over the row's repetitions.
fn spread(row: &CountRow) -> String {
    CHECKED
        .iter()
        .filter_map(|(_, f)| row.spread(*f))
        .max_by(f64::total_cmp)
        .map_or("–".to_owned(), |s| format!("±{:.2}%", s * 100.0))
}

fn figures_row(out: &mut String, row: &CountRow, jobs: &str) {
    let lead = [cell(&row.operation), cell(&row.queue), jobs.to_owned()];
    let Some(m) = row.mean().filter(|_| row.missing.is_none()) else {
        let why = cell(row.missing.as_deref().unwrap_or("not measured"));
        let _ = writeln!(out, "| {} |{} {why} |", lead.join(" | "), " – |".repeat(10));
        return;
    };
    let _ = writeln!(
        out,
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        lead.join(" | "),
        int(m.instructions),
        int(m.wal_bytes),
        int(m.fpi_bytes),
        small(m.wal_records),
        small(m.heap_records),
        small(m.heap2_records),
        small(m.btree_inserts),
        small(m.btree_splits),
        small(m.buffers_dirtied),
        small(m.commits),
        spread(row)
    );
}

/// pg_jobs's figure ÷ another queue's, for one operation.
fn ratio_cell(counts: &Counts, operation: &str, other: &str, figure: fn(&PerJob) -> f64) -> String {
    let mean = |queue: &str| {
        counts
            .rows
            .iter()
            .find(|r| r.operation == operation && r.queue == queue && r.missing.is_none())
            .and_then(CountRow::mean)
            .map(|m| figure(&m))
    };
    match (mean(PG_JOBS), mean(other)) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "–".to_owned(),
    }
}

/// The section (also what `pg_jobs_bench counts` prints).
pub fn report(out: &mut String, counts: &Counts) {
    out.push_str("## Counts per operation\n\n");
    let _ = writeln!(
        out,
        "What the server did per job, counted rather than timed, so the figures do not move \
         with the machine's speed or load: the instructions the session's backend executed \
         (callgrind); the WAL it wrote (`pg_waldump --stats=record`): the bytes of its records, \
         the bytes of the full-page images apart (FPI), the records, and of them those of the \
         heap, heap2, btree inserts and btree page splits; the shared buffers its statements \
         dirtied (pg_stat_statements); its commits. One session per row, on a cluster of its \
         own whose postmaster runs under callgrind, started afresh for the row; after a \
         warm-up, the stretch measured starts right after a checkpoint, so every page it \
         writes is dirtied and imaged once (benchmarks/README.md, \"The counts\"). Each \
         figure is the mean of {} repetitions; \"spread\" is the largest half-range of the \
         instructions, WAL bytes and records, buffers and commits over them, as a percentage \
         of their mean. {}; {}; {}; counted {}.\n",
        counts.repetitions,
        counts.engine,
        counts
            .postgres
            .split(" on ")
            .next()
            .unwrap_or(&counts.postgres),
        counts.valgrind,
        counts.started
    );
    let drift = drifting(counts);
    if counts.repetitions > 1 {
        if drift.is_empty() {
            let _ = writeln!(
                out,
                "Every figure of every row repeated within ±{:.0}%.\n",
                AGREE * 100.0
            );
        } else {
            let _ = writeln!(
                out,
                "Further apart than ±{:.0}% between repetitions: {}.\n",
                AGREE * 100.0,
                drift.join("; ")
            );
        }
    }
    let columns = [
        "operation",
        "queue",
        "jobs",
        "instructions",
        "WAL bytes",
        "FPI bytes",
        "WAL records",
        "heap",
        "heap2",
        "btree inserts",
        "btree splits",
        "buffers dirtied",
        "commits",
        "spread",
    ];
    out.push_str("Per job:\n\n");
    table_header(out, &columns);
    for row in &counts.rows {
        figures_row(out, row, &int(row.jobs as f64));
    }
    for (name, enqueue, claim) in LIFECYCLES {
        for (queue, enqueue_queue, claim_queue) in LIFECYCLE_QUEUES {
            let row = lifecycle_of(
                counts,
                name,
                (enqueue, enqueue_queue),
                (claim, claim_queue),
                queue,
            );
            figures_row(out, &row, "");
        }
    }
    out.push('\n');
    out.push_str("pg_jobs per job ÷ the other queue's (> 1: pg_jobs does more):\n\n");
    table_header(
        out,
        &[
            "operation",
            "instructions ÷ hand-rolled",
            "instructions ÷ pgmq",
            "WAL bytes ÷ hand-rolled",
            "WAL bytes ÷ pgmq",
        ],
    );
    for operation in [ENQUEUE_1, ENQUEUE_1000, CLAIM_1, CLAIM_100] {
        let _ = writeln!(
            out,
            "| {operation} | {} | {} | {} | {} |",
            ratio_cell(counts, operation, HANDROLLED, |p| p.instructions),
            ratio_cell(counts, operation, PGMQ, |p| p.instructions),
            ratio_cell(counts, operation, HANDROLLED, |p| p.wal_bytes),
            ratio_cell(counts, operation, PGMQ, |p| p.wal_bytes),
        );
    }
    out.push('\n');
    if counts.repetitions > 1 {
        out.push_str("Each repetition's instructions and WAL bytes per job:\n\n");
        let mut columns = vec!["operation".to_owned(), "queue".to_owned()];
        for k in 1..=counts.repetitions {
            columns.push(format!("instructions, run {k}"));
        }
        for k in 1..=counts.repetitions {
            columns.push(format!("WAL bytes, run {k}"));
        }
        let refs: Vec<&str> = columns.iter().map(String::as_str).collect();
        table_header(out, &refs);
        for row in &counts.rows {
            let mut cells = vec![cell(&row.operation), cell(&row.queue)];
            cells.extend(row.runs.iter().map(|p| int(p.instructions)));
            cells.extend(row.runs.iter().map(|p| int(p.wal_bytes)));
            let _ = writeln!(out, "| {} |", cells.join(" | "));
        }
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::{lifecycle, lifecycle_of, report, LIFECYCLES};
    use crate::counts::{CLAIM_1, ENQUEUE_1, ONE_COMMIT, PG_JOBS};
    use crate::results::{CountRow, Counts, PerJob};

    fn row(operation: &str, instructions: [f64; 2], btree: f64) -> CountRow {
        CountRow {
            operation: operation.into(),
            queue: PG_JOBS.into(),
            jobs: 100,
            runs: instructions
                .iter()
                .map(|&i| PerJob {
                    instructions: i,
                    wal_bytes: 400.0,
                    btree_inserts: btree,
                    commits: 1.0,
                    records: vec![("Btree/INSERT_LEAF".into(), btree)],
                    ..PerJob::default()
                })
                .collect(),
            missing: None,
        }
    }

    fn counts() -> Counts {
        Counts {
            started: "2026-12-06 10:00 UTC".into(),
            engine: "pg_jobs 0.3.0 (git abc1234)".into(),
            postgres: "PostgreSQL 15.19 on x86_64".into(),
            valgrind: "valgrind-3.19.0".into(),
            repetitions: 2,
            rows: vec![
                row(ENQUEUE_1, [100_000.0, 101_000.0], 3.0),
                row(CLAIM_1, [200_000.0, 200_000.0], 0.5),
            ],
        }
    }

    #[test]
    fn a_lifecycle_adds_up_its_operations_repetition_by_repetition() {
        let (name, enqueue, claim) = LIFECYCLES[0];
        let l = lifecycle(&counts(), name, enqueue, claim, PG_JOBS);
        assert_eq!(l.runs.len(), 2);
        assert_eq!(l.runs[1].instructions, 301_000.0);
        assert_eq!(l.runs[0].btree_inserts, 3.5);
        assert_eq!(l.runs[0].records, [("Btree/INSERT_LEAF".to_owned(), 3.5)]);
        assert_eq!(l.mean().unwrap().commits, 2.0);
        let (name, enqueue, claim) = LIFECYCLES[1];
        assert!(lifecycle(&counts(), name, enqueue, claim, PG_JOBS)
            .missing
            .is_some());
    }

    #[test]
    fn one_commit_per_claim_adds_pg_jobs_plain_enqueue_to_its_claim() {
        let mut c = counts();
        let mut one = row(CLAIM_1, [150_000.0, 150_000.0], 0.5);
        one.queue = ONE_COMMIT.into();
        c.rows.push(one);
        let l = lifecycle_of(
            &c,
            "l",
            (ENQUEUE_1, PG_JOBS),
            (CLAIM_1, ONE_COMMIT),
            ONE_COMMIT,
        );
        assert_eq!(l.runs[0].instructions, 250_000.0);
        assert_eq!(l.queue, ONE_COMMIT);
        let mut out = String::new();
        report(&mut out, &c);
        assert!(
            out.contains(&format!(
                "| lifecycle, batches of 1 | {ONE_COMMIT} |  | 250,500 | 800 |"
            )),
            "{out}"
        );
    }

    #[test]
    fn the_section_shows_each_row_its_spread_and_each_repetition() {
        let mut out = String::new();
        report(&mut out, &counts());
        assert!(
            out.contains("Every figure of every row repeated within ±2%."),
            "{out}"
        );
        assert!(
            out.contains("| enqueue, 1 per transaction | pg_jobs | 100 | 100,500 | 400 | 0 | 0 | 0 | 0 | 3.00 | 0 | 0 | 1.00 | ±0.50% |"),
            "{out}"
        );
        assert!(
            out.contains("| lifecycle, batches of 1 | pg_jobs |  | 300,500 | 800 |"),
            "{out}"
        );
        assert!(
            out.contains(
                "| enqueue, 1 per transaction | pg_jobs | 100,000 | 101,000 | 400 | 400 |"
            ),
            "{out}"
        );
    }
}
