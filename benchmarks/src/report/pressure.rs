//! The report's sections of the long-pressure scenarios: o (a transaction held open under
//! steady traffic, issue 35) and y (storage over a long steady run, issue 39).

use std::fmt::Write;

use super::markdown::{measurement_row, note_cell, table_header, PG_JOBS};
use crate::format::{cpu, int, mib, ms, opt, ratio};
use crate::results::Run;
use crate::scenarios::{horizon, storage};

/// The section of o.
pub fn held_horizon(out: &mut String, run: &Run) {
    let rows: Vec<_> = [horizon::BEFORE, horizon::DURING]
        .iter()
        .filter_map(|v| run.any(horizon::SCENARIO, v, PG_JOBS))
        .collect();
    if rows.is_empty() {
        return;
    }
    out.push_str("### o. A transaction held open under steady traffic (issue 35)\n\n");
    out.push_str(
        "Producers enqueue at a steady rate, one job per transaction, to 32 workers waiting in \
         `jobs_claim(..., wait => ...)` that complete every job. After a warm-up one window is \
         measured; then another session runs `BEGIN; SELECT txid_current();` and stays idle in \
         that transaction, holding the xmin horizon (vacuum keeps every row version and index \
         entry the queue leaves behind meanwhile), and the second window is measured until it \
         commits. Pickup latency: the enqueue's COMMIT returned to the client → the job in a \
         worker's hands, for the jobs enqueued in the window. Server CPU per job completed in \
         the window, and the shared buffers its sessions read per job (`pg_stat_database`'s \
         `blks_hit` and `blks_read`: the work the hold adds, in a count that does not move with \
         the machine's load). The oldest pg_jobs snapshot: the largest `age(backend_xmin)` of the \
         producers' and workers' sessions and of pg_jobs's background worker, read from \
         `pg_stat_activity` about once a second.\n\n",
    );
    let columns = [
        "window",
        "jobs",
        "seconds",
        "jobs/s",
        "pickup p50",
        "pickup p99",
        "max",
        "server CPU s / 1,000 jobs",
        "buffers / job",
        "oldest pg_jobs snapshot",
        "notes",
    ];
    table_header(out, &columns);
    for m in &rows {
        measurement_row(out, columns.len(), &[&m.variant], m, || {
            vec![
                int(m.jobs as f64),
                format!("{:.0}", m.seconds),
                opt(m.rate, int),
                opt(m.p50_ms, ms),
                opt(m.p99_ms, ms),
                opt(m.max_ms, ms),
                opt(m.server_cpu_per_1000(), cpu),
                opt(
                    m.horizon
                        .as_ref()
                        .and_then(|h| h.buffers)
                        .filter(|_| m.jobs > 0)
                        .map(|b| b as f64 / m.jobs as f64),
                    |b| format!("{b:.1}"),
                ),
                m.horizon
                    .as_ref()
                    .and_then(|h| h.max_xmin_age)
                    .map_or_else(|| "none".to_owned(), |a| format!("{} xids", int(a as f64))),
                note_cell(m),
            ]
        });
    }
    out.push('\n');
    let during = run.get(horizon::SCENARIO, horizon::DURING, PG_JOBS);
    if let Some(h) = during.and_then(|m| m.horizon.as_ref()) {
        let _ = writeln!(
            out,
            "During the hold, in {} readings of `pg_stat_activity`: the held transaction's xid was \
             {} transactions old at the end, the oldest pg_jobs snapshot {}; in {} readings a \
             pg_jobs session's snapshot was older than the held xid (pg_jobs, not the held \
             transaction, held the horizon back then). Waiting claims were seen asleep {} times, \
             {} of them holding a snapshot.\n",
            int(h.samples as f64),
            opt(h.holder_xid_age.map(|a| a as f64), int),
            h.max_xmin_age
                .map_or_else(|| "none".to_owned(), |a| format!("{} transactions old", int(a as f64))),
            int(h.past_holder as f64),
            int(h.asleep as f64),
            int(h.asleep_with_xmin as f64),
        );
    }
}

/// The section of y.
pub fn storage_run(out: &mut String, run: &Run) {
    let Some(m) = run.any(storage::SCENARIO, storage::VARIANT, PG_JOBS) else {
        return;
    };
    out.push_str("### y. Storage over a long steady run (issue 39)\n\n");
    out.push_str(
        "The queue loaded with the live jobs alone and vacuumed is the baseline; then it is \
         emptied and jobs run through it at a steady rate: producers enqueue 100 per call on one \
         schedule, 8 workers wait in `jobs_claim(n => 100, wait => ...)` and complete what they \
         claim in one batched call; finished jobs are kept for the queue's retention (7 days: \
         none is purged in the run); autovacuum runs at its defaults. Heap: `pg_table_size` \
         (heap, TOAST, free-space and visibility maps); indexes: `pg_indexes_size`; sampled \
         through the run. Throughput: jobs completed per second in the run's first and last \
         windows while the producers ran.\n\n",
    );
    if let Some(why) = &m.missing {
        let _ = writeln!(out, "pg_jobs: {why}\n");
        return;
    }
    let Some(s) = &m.storage else {
        return;
    };
    if !s.full_size {
        let _ = writeln!(
            out,
            "**Not the full size:** {} jobs against {} live jobs; issue 39's target is for \
             2,000,000 jobs against 100,000 live (BENCH_SCALE=full).\n",
            int(s.run_jobs as f64),
            int(s.live as f64)
        );
    }
    out.push_str("| `jobs.job` | heap MiB | indexes MiB | together MiB |\n|---|---|---|---|\n");
    for (label, t, i) in [
        (
            format!("{} live jobs (the baseline)", int(s.live as f64)),
            s.baseline_table_bytes,
            s.baseline_index_bytes,
        ),
        (
            "largest over the run".to_owned(),
            s.max_table_bytes,
            s.max_index_bytes,
        ),
        (
            "at the end".to_owned(),
            s.end_table_bytes,
            s.end_index_bytes,
        ),
    ] {
        let _ = writeln!(
            out,
            "| {label} | {} | {} | {} |",
            mib(t),
            mib(i),
            mib(t + i)
        );
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "{} jobs completed in {:.0} s ({} jobs/s, {} offered; server CPU {} s per 1,000 jobs); \
         {} jobs/s in the first {:.0} s, {} jobs/s in the last (last ÷ first {}), while the \
         producers enqueued {} and {} jobs/s; {} autovacuums of the table, {} dead tuples at \
         the end. {}\n",
        int(m.jobs as f64),
        m.seconds,
        opt(m.rate, int),
        opt(m.offered_rate, int),
        opt(m.server_cpu_per_1000(), cpu),
        int(s.first_rate),
        s.window_secs,
        int(s.last_rate),
        opt(s.last_over_first(), ratio),
        int(s.first_enqueued_rate),
        int(s.last_enqueued_rate),
        int(s.autovacuums as f64),
        int(s.end_dead_tuples as f64),
        note_cell(m)
    );
}

#[cfg(test)]
mod tests {
    use super::{held_horizon, storage_run};
    use crate::results::{Horizon, Measurement, Run, Storage};
    use crate::scenarios::{horizon, storage};

    #[test]
    fn the_held_transaction_section_shows_both_windows_and_the_snapshots() {
        let mut before = Measurement::new(horizon::SCENARIO, horizon::BEFORE, "pg_jobs");
        before.p99_ms = Some(9.5);
        let mut during = Measurement::new(horizon::SCENARIO, horizon::DURING, "pg_jobs");
        during.jobs = 1_000;
        during.horizon = Some(Horizon {
            samples: 180,
            buffers: Some(24_500),
            max_xmin_age: Some(12_345),
            holder_xid_age: Some(12_345),
            asleep: 3_000,
            ..Horizon::default()
        });
        let run = Run {
            measurements: vec![before, during],
            ..Run::default()
        };
        let mut out = String::new();
        held_horizon(&mut out, &run);
        assert!(
            out.contains("| before the hold | 0 | 0 | – | – | 9.50 ms | – | – | – | none |"),
            "{out}"
        );
        assert!(out.contains("| 24.5 | 12,345 xids |"), "{out}");
        assert!(
            out.contains("in 0 readings a pg_jobs session's snapshot was older than the held xid"),
            "{out}"
        );
        assert!(
            out.contains("seen asleep 3,000 times, 0 of them holding a snapshot"),
            "{out}"
        );
    }

    #[test]
    fn a_storage_run_below_the_full_size_is_marked() {
        let mut m = Measurement::new(storage::SCENARIO, storage::VARIANT, "pg_jobs");
        m.storage = Some(Storage {
            run_jobs: 200_000,
            live: 10_000,
            baseline_table_bytes: 1 << 20,
            max_table_bytes: 5 << 20,
            ..Storage::default()
        });
        let run = Run {
            measurements: vec![m.clone()],
            ..Run::default()
        };
        let mut out = String::new();
        storage_run(&mut out, &run);
        assert!(
            out.contains("**Not the full size:** 200,000 jobs against 10,000 live jobs"),
            "{out}"
        );
        assert!(
            out.contains("| largest over the run | 5.0 | 0.0 | 5.0 |"),
            "{out}"
        );
        m.storage.as_mut().unwrap().full_size = true;
        let run = Run {
            measurements: vec![m],
            ..Run::default()
        };
        let mut out = String::new();
        storage_run(&mut out, &run);
        assert!(!out.contains("Not the full size"), "{out}");
    }
}
