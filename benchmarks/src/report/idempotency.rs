//! The report's section of scenario i: idempotency records beside a hand-written table.

use std::fmt::Write;

use crate::format::int;
use crate::results::Run;
use crate::scenarios::idempotency::{HAND_WRITTEN, PG_JOBS, SCENARIO, VARIANT};

/// The section of i.
pub fn report(out: &mut String, run: &Run) {
    let get = |name: &str| {
        run.measurements
            .iter()
            .find(|m| m.scenario == SCENARIO && m.comparator == name)
    };
    let (Some(ours), Some(theirs)) = (get(PG_JOBS), get(HAND_WRITTEN)) else {
        return;
    };
    out.push_str("## i. Idempotency records (issue 13)\n\n");
    let _ = writeln!(
        out,
        "{VARIANT}: each request is a `save`, an `update` with the save's token and a `get`, \
         each its own transaction, on a fresh key; pg_jobs's functions beside a hand-written \
         `INSERT ... ON CONFLICT DO UPDATE ... WHERE` table with the same columns and indexes \
         (`benchmarks/comparators/idempotency.sql`).\n"
    );
    out.push_str("| side | requests | seconds | requests/s | server CPU s per 1,000 requests | note |\n|---|---|---|---|---|---|\n");
    for m in [ours, theirs] {
        let figure = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or("–".to_owned(), f);
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} | {} | {} | {} |",
            m.comparator,
            int(m.jobs as f64),
            m.seconds,
            figure(m.rate, &|r| int(r)),
            figure(m.server_cpu_per_1000(), &|c| format!("{c:.3}")),
            m.missing.as_deref().or(m.note.as_deref()).unwrap_or("")
        );
    }
    out.push('\n');
}
