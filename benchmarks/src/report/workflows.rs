//! The report's section of scenario j, workflows (issue 37): the fan-in's two sides, the
//! latencies of the child, the chain and the signal, and the counts of queues that use none
//! of it against those recorded before workflows came in.

use std::fmt::Write;

use super::markdown::{cell, note_cell, table_header};
use crate::counts::{CLAIM_1, CLAIM_100, ENQUEUE_1, ENQUEUE_1000, PG_JOBS};
use crate::format::{int, ms, opt};
use crate::results::{CountRow, Counts, PerJob, Run};
use crate::scenarios::workflows::{
    CHAIN, CHILD, FAN_IN, NO_CHILD, ONE_CHILD, SCENARIO, SIDE, SIGNAL,
};

/// The counts of the engine just before workflows came in, every pg_jobs row, as
/// `benchmarks/run counts` measured them (WAL record types left out): the figures a queue that
/// uses none of the workflow features is held to, since one run cannot install two builds.
const BASELINE: &str = include_str!("../../baselines/before-workflows.json");

/// The same rows measured on the build of the merge that brought workflows in, on the same
/// server as [`BASELINE`]: the two differ by the workflows change alone, so their ratio is
/// what that change costs a plain queue. A run's own engine carries whatever came after it too.
const AT_MERGE: &str = include_str!("../../baselines/workflows-merge.json");

/// The recorded counts from before workflows ([`BASELINE`]).
pub fn baseline() -> Counts {
    serde_json::from_str(BASELINE).expect("benchmarks/baselines/before-workflows.json holds counts")
}

/// The recorded counts of the workflows merge ([`AT_MERGE`]).
pub fn at_merge() -> Counts {
    serde_json::from_str(AT_MERGE).expect("benchmarks/baselines/workflows-merge.json holds counts")
}

/// The operations of a plain queue whose counts must stay where they were: (operation, queue
/// as the counts name them).
pub const PLAIN: [(&str, &str); 4] = [
    (ENQUEUE_1, PG_JOBS),
    (ENQUEUE_1000, PG_JOBS),
    (CLAIM_1, PG_JOBS),
    (CLAIM_100, PG_JOBS),
];

/// How far above the recorded figure a count may be and still be the same: the counts'
/// own agreement between repetitions ([`crate::counts::AGREE`]).
pub const PLAIN_TOLERANCE: f64 = crate::counts::AGREE;

/// The row of (operation, queue) in `counts`, measured.
pub fn row(counts: &Counts, operation: &str, queue: &str) -> Option<CountRow> {
    counts
        .rows
        .iter()
        .find(|r| r.operation == operation && r.queue == queue && r.missing.is_none())
        .cloned()
}

/// The mean of (operation, queue) in the recorded counts.
pub fn before(operation: &str, queue: &str) -> Option<PerJob> {
    row(&baseline(), operation, queue)?.mean()
}

/// The row of (operation, queue) recorded on the workflows merge.
pub fn merged(operation: &str, queue: &str) -> Option<CountRow> {
    row(&at_merge(), operation, queue)
}

/// 1.0163 → "1.016×": a count's ratio to its recorded figure, fine enough to tell from the
/// ±2% it is held to.
pub fn fine_ratio(v: f64) -> String {
    format!("{v:.3}×")
}

/// The section of j.
pub fn report(out: &mut String, raw: &Run) {
    let ran = raw.measurements.iter().any(|m| m.scenario == SCENARIO);
    if !ran && raw.counts.is_none() {
        return;
    }
    out.push_str("## j. Workflows (issue 37)\n\n");
    if ran {
        fan_in(out, raw);
        latencies(out, raw);
    } else {
        out.push_str("Scenario j did not run; the counts below did.\n\n");
    }
    plain(out, raw);
}

/// The fan-in's sides: each round's rate and their mean.
fn fan_in(out: &mut String, raw: &Run) {
    out.push_str(
        "pg_jobs only. Fan-in: the same parents burnt down by 8 workers claiming 100 at a time \
         (`jobs_claim(n => 100, wait => ...)`: a worker that runs out of jobs sleeps rather than \
         polls as in b; each claim's jobs completed by one `jobs_complete_batch` in a \
         transaction of its own), \
         without a child and with one child enqueued `after` all of them into a queue of its \
         own, where one worker waits in `jobs_claim(wait => ...)`; the two sides in alternating \
         order, round after round.\n\n",
    );
    table_header(
        out,
        &[
            "side",
            "rounds",
            "jobs/s (mean)",
            "each round",
            "server CPU s / 1,000 jobs",
            "notes",
        ],
    );
    for side in [NO_CHILD, ONE_CHILD] {
        let rounds: Vec<_> = raw
            .measurements
            .iter()
            .filter(|m| m.scenario == SCENARIO && m.variant == FAN_IN && m.comparator == side)
            .collect();
        if rounds.is_empty() {
            continue;
        }
        let rates: Vec<f64> = rounds.iter().filter_map(|m| m.rate).collect();
        let cpu: Vec<f64> = rounds
            .iter()
            .filter_map(|m| m.server_cpu_per_1000())
            .collect();
        let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
        let each: Vec<String> = rounds
            .iter()
            .map(|m| m.rate.map_or_else(|| "failed".to_owned(), int))
            .collect();
        let notes = rounds
            .iter()
            .find_map(|m| m.missing.clone())
            .map_or_else(|| note_cell(rounds[0]), |why| cell(&why));
        let _ = writeln!(
            out,
            "| {side} | {} | {} | {} | {} | {notes} |",
            rounds.len(),
            opt(mean(&rates), int),
            each.join(", "),
            opt(mean(&cpu), |c| format!("{c:.3}")),
        );
    }
    out.push('\n');
}

/// The child's, the chain's and the signal's latencies.
fn latencies(out: &mut String, raw: &Run) {
    out.push_str(
        "Latencies, on the server's clock (`clock_timestamp()`): the settle or the signal is \
         sent as `BEGIN; ...; COMMIT; SELECT clock_timestamp()` in one message, so the clock is \
         read right after the commit, before the client hears of it; the claim reads it in its \
         own statement once it has the job. Neither client's wake-up counts. A claim that read \
         the clock before the settler did counts 0. In the chain, the worker that settled a \
         step waits until another has the next one, so every handoff wakes a sleeping worker.\n\n",
    );
    table_header(out, &["measure", "samples", "p50", "p99", "max", "notes"]);
    for variant in [CHILD, CHAIN, SIGNAL] {
        let Some(m) = raw.any(SCENARIO, variant, SIDE) else {
            continue;
        };
        let samples = if variant == CHAIN {
            // The chain's jobs are its steps; its samples are the handoffs between them.
            m.jobs.saturating_sub(1)
        } else {
            m.jobs
        };
        let notes = m.missing.as_deref().map_or_else(|| note_cell(m), cell);
        let _ = writeln!(
            out,
            "| {variant} | {} | {} | {} | {} | {notes} |",
            int(samples as f64),
            opt(m.p50_ms, ms),
            opt(m.p99_ms, ms),
            opt(m.max_ms, ms),
        );
    }
    out.push('\n');
}

/// Queues that use none of it: the counts recorded on the workflows merge, and those of this
/// run, against those recorded before.
fn plain(out: &mut String, raw: &Run) {
    let (recorded, merge) = (baseline(), at_merge());
    let _ = writeln!(
        out,
        "Queues that use none of this, in counts (see \"Counts per operation\"), which do not \
         drift with the machine's load, so figures of different runs compare; a figure within \
         ±{:.0}% of another (the counts' own agreement between repetitions) is the same. What \
         workflows cost a plain queue: the engine that brought them in ({}, {}; \
         `benchmarks/baselines/workflows-merge.json`) against the engine just before ({}, {}; \
         `benchmarks/baselines/before-workflows.json`), both counted on {}.\n",
        PLAIN_TOLERANCE * 100.0,
        merge.engine,
        merge.started,
        recorded.engine,
        recorded.started,
        recorded.postgres,
    );
    ratios(out, &recorded, &merge, "at the merge");
    let Some(counts) = &raw.counts else {
        out.push_str("This run measured no counts (BENCH_COUNTS=0): nothing more to compare.\n\n");
        return;
    };
    let _ = writeln!(
        out,
        "This run's engine ({}) against the same recorded figures: workflows and whatever came \
         after them{}.\n",
        counts.engine,
        if counts.postgres == recorded.postgres {
            String::new()
        } else {
            format!(
                " (counted on {}: a server of another build counts other instructions)",
                counts.postgres
            )
        }
    );
    ratios(out, &recorded, counts, "this run");
}

/// One table: each recorded row's instructions and WAL bytes per job in `then` and `now`.
fn ratios(out: &mut String, then: &Counts, now: &Counts, label: &str) {
    let ratio = format!("{label} ÷ before");
    table_header(
        out,
        &[
            "operation",
            "queue",
            "instructions / job",
            "before",
            &ratio,
            "WAL bytes / job",
            "before",
            &ratio,
        ],
    );
    for old in &then.rows {
        let (Some(new), Some(old_mean)) = (
            row(now, &old.operation, &old.queue).and_then(|r| r.mean()),
            old.mean(),
        ) else {
            continue;
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            old.operation,
            old.queue,
            int(new.instructions),
            int(old_mean.instructions),
            fine_ratio(new.instructions / old_mean.instructions),
            int(new.wal_bytes),
            int(old_mean.wal_bytes),
            fine_ratio(new.wal_bytes / old_mean.wal_bytes),
        );
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::{at_merge, baseline, before, fine_ratio, merged, report, PLAIN};
    use crate::results::{CountRow, Counts, Measurement, PerJob, Run};
    use crate::scenarios::workflows::{CHAIN, FAN_IN, NO_CHILD, ONE_CHILD, SCENARIO, SIDE};

    #[test]
    fn the_recorded_counts_hold_every_plain_operation() {
        for recorded in [baseline(), at_merge()] {
            assert!(recorded.engine.contains("git "), "{}", recorded.engine);
        }
        assert_eq!(
            baseline().postgres,
            at_merge().postgres,
            "one server for both"
        );
        for (operation, queue) in PLAIN {
            let per = before(operation, queue).unwrap_or_else(|| panic!("{operation} · {queue}"));
            assert!(per.instructions > 0.0 && per.wal_bytes > 0.0);
            let merge = merged(operation, queue).and_then(|r| r.mean());
            assert!(
                merge.is_some_and(|m| m.instructions > 0.0),
                "{operation} · {queue}"
            );
        }
    }

    fn fan(side: &str, repeat: u32, rate: f64) -> Measurement {
        let mut m = Measurement::new(SCENARIO, FAN_IN, side);
        m.rate = Some(rate);
        m.repeat = repeat;
        m
    }

    #[test]
    fn the_section_shows_each_round_and_compares_the_counts_with_the_recorded_ones() {
        let recorded = baseline();
        let (operation, queue) = PLAIN[0];
        let then = before(operation, queue).unwrap();
        let mut chain = Measurement::new(SCENARIO, CHAIN, SIDE);
        chain.jobs = 1000;
        chain.p50_ms = Some(0.4);
        let run = Run {
            measurements: vec![
                fan(NO_CHILD, 0, 1000.0),
                fan(ONE_CHILD, 0, 900.0),
                fan(ONE_CHILD, 1, 700.0),
                fan(NO_CHILD, 1, 1000.0),
                chain,
            ],
            counts: Some(Counts {
                rows: vec![CountRow {
                    operation: operation.to_owned(),
                    queue: queue.to_owned(),
                    runs: vec![PerJob {
                        instructions: then.instructions * 1.1,
                        wal_bytes: then.wal_bytes,
                        ..PerJob::default()
                    }],
                    ..CountRow::default()
                }],
                ..Counts::default()
            }),
            ..Run::default()
        };
        let mut out = String::new();
        report(&mut out, &run);
        assert!(
            out.contains("| one child after all of them | 2 | 800 | 900, 700 |"),
            "{out}"
        );
        assert!(out.contains("| 999 | 0.40 ms |"), "{out}");
        assert!(out.contains(&recorded.engine), "{out}");
        assert!(out.contains(&at_merge().engine), "{out}");
        let lines: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with(&format!("| {operation} | {queue} |")))
            .collect();
        let [merge, this_run] = lines[..] else {
            panic!("one row in each of the two tables: {lines:?}")
        };
        let merge_mean = merged(operation, queue).unwrap().mean().unwrap();
        assert!(
            merge.contains(&format!(
                "| {} |",
                fine_ratio(merge_mean.instructions / then.instructions)
            )),
            "{merge}"
        );
        assert!(
            this_run.contains("| 1.100× |") && this_run.ends_with("| 1.000× |"),
            "{this_run}"
        );
    }
}
