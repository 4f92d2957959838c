//! The Markdown report: the targets of issue 4 §4 with MET / MISSED, the ratios of pg_jobs
//! against each comparator, then the absolute figures and the machine they were measured on.

use std::fmt::Write;

use serde::{Deserialize, Serialize};

use crate::machine::Machine;
use crate::scenarios::{
    backlog, burndown, enqueue, idle, latency, pgbench, snapshot, wal, Measurement,
};

/// Everything one run measured; saved as JSON so the report can be re-rendered.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Run {
    pub machine: Machine,
    pub load_after: String,
    pub minutes: f64,
    /// (comparator, how its workers wait).
    pub waiting: Vec<(String, String)>,
    pub measurements: Vec<Measurement>,
}

const PG_JOBS: &str = "pg_jobs";
const OTHERS: [&str; 3] = ["hand-rolled", "pgmq", "Graphile Worker"];

impl Run {
    fn get(&self, scenario: &str, variant: &str, comparator: &str) -> Option<&Measurement> {
        self.measurements.iter().find(|m| {
            m.scenario == scenario
                && m.variant == variant
                && m.comparator == comparator
                && m.missing.is_none()
        })
    }

    fn any(&self, scenario: &str, variant: &str, comparator: &str) -> Option<&Measurement> {
        self.measurements
            .iter()
            .find(|m| m.scenario == scenario && m.variant == variant && m.comparator == comparator)
    }

    fn rate(&self, scenario: &str, variant: &str, comparator: &str) -> Option<f64> {
        self.get(scenario, variant, comparator)?.rate
    }

    fn comparators(&self, scenario: &str, variant: &str) -> Vec<&Measurement> {
        self.measurements
            .iter()
            .filter(|m| m.scenario == scenario && m.variant == variant)
            .collect()
    }
}

/// 12345.6 → "12,346".
pub fn int(v: f64) -> String {
    let s = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    if v < 0.0 && out != "0" {
        out.insert(0, '-');
    }
    out
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "–".into(), f)
}

fn ratio(v: f64) -> String {
    format!("{v:.2}×")
}

fn ms(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.2} ms")
    } else {
        format!("{v:.1} ms")
    }
}

fn cpu(v: f64) -> String {
    format!("{v:.3}")
}

struct Target {
    what: String,
    measured: String,
    ratio: String,
    verdict: &'static str,
}

fn verdict(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => "**MET**",
        Some(false) => "**MISSED**",
        None => "not measured",
    }
}

/// A throughput target: pg_jobs's rate ÷ the other's ≥ `at_least`.
fn rate_target(
    what: &str,
    mine: Option<(f64, String)>,
    other: Option<(f64, String)>,
    at_least: f64,
) -> Target {
    match (mine, other) {
        (Some((a, an)), Some((b, bn))) => {
            let r = a / b;
            Target {
                what: what.into(),
                measured: format!("{an} {}/s vs {bn} {}/s", int(a), int(b)),
                ratio: ratio(r),
                verdict: verdict(Some(r >= at_least)),
            }
        }
        _ => Target {
            what: what.into(),
            measured: "–".into(),
            ratio: "–".into(),
            verdict: verdict(None),
        },
    }
}

fn targets(run: &Run) -> Vec<Target> {
    let (b1, b100) = (burndown::VARIANTS[0].0, burndown::VARIANTS[1].0);
    let named = |scenario: &str, variant: &str, c: &str, label: &str| {
        run.rate(scenario, variant, c)
            .map(|r| (r, label.to_owned()))
    };
    let mut out = vec![
        rate_target(
            "b, 1 per claim: ≥ 1.3× the hand-rolled queue",
            named("b", b1, PG_JOBS, "pg_jobs"),
            named("b", b1, "hand-rolled", "hand-rolled"),
            1.3,
        ),
        rate_target(
            "b, 1 per claim: ≥ pgmq",
            named("b", b1, PG_JOBS, "pg_jobs"),
            named("b", b1, "pgmq", "pgmq"),
            1.0,
        ),
        rate_target(
            "b, 100 per claim: ≥ 1.5× the hand-rolled queue (100 per claim)",
            named("b", b100, PG_JOBS, "pg_jobs"),
            named("b", b100, "hand-rolled", "hand-rolled"),
            1.5,
        ),
    ];
    // Graphile Worker at its best: its defaults or its local queue + batched completion.
    let graphile_best = [b1, b100]
        .iter()
        .filter_map(|v| {
            run.rate("b", v, "Graphile Worker")
                .map(|r| (r, format!("Graphile Worker ({v})")))
        })
        .max_by(|a, b| a.0.total_cmp(&b.0));
    out.push(rate_target(
        "b, 100 per claim: ≥ Graphile Worker (its best mode)",
        named("b", b100, PG_JOBS, "pg_jobs"),
        graphile_best,
        1.0,
    ));

    let lat = |c: &str| run.get("c", latency::VARIANT, c);
    out.push(
        match (
            lat(PG_JOBS).and_then(|m| m.p99_ms),
            lat("Graphile Worker").and_then(|m| m.p99_ms),
        ) {
            (Some(a), Some(b)) => Target {
                what: "c: p99 ≤ ½ of Graphile Worker's".into(),
                measured: format!("pg_jobs {} vs Graphile Worker {}", ms(a), ms(b)),
                ratio: ratio(a / b),
                verdict: verdict(Some(a <= 0.5 * b)),
            },
            _ => Target {
                what: "c: p99 ≤ ½ of Graphile Worker's".into(),
                measured: "–".into(),
                ratio: "–".into(),
                verdict: verdict(None),
            },
        },
    );
    let p50 = lat(PG_JOBS).and_then(|m| m.p50_ms);
    out.push(Target {
        what: "c: p50 < 2 ms".into(),
        measured: opt(p50, |v| format!("pg_jobs {}", ms(v))),
        ratio: opt(p50, |v| format!("{:.2}× the limit", v / 2.0)),
        verdict: verdict(p50.map(|v| v < 2.0)),
    });

    let small = run.rate("d", backlog::SMALL, PG_JOBS);
    for (variant, label) in [
        (backlog::QUEUED, "1,000,000 queued"),
        (backlog::FINISHED, "1,000,000 finished"),
    ] {
        let big = run.rate("d", variant, PG_JOBS);
        let r = small.zip(big).map(|(s, b)| b / s);
        out.push(Target {
            what: format!("d: {label} ≥ 75% of the small-backlog rate"),
            measured: match (big, small) {
                (Some(b), Some(s)) => format!("{}/s vs {}/s", int(b), int(s)),
                _ => "–".into(),
            },
            ratio: opt(r, |v| format!("{:.0}%", v * 100.0)),
            verdict: verdict(r.map(|v| v >= 0.75)),
        });
    }

    let held = run.rate("e", snapshot::VARIANT, PG_JOBS);
    let free = run.rate("b", b1, PG_JOBS);
    let r = held.zip(free).map(|(h, f)| h / f);
    out.push(Target {
        what: "e: held snapshot ≥ 70% of the rate without".into(),
        measured: match (held, free) {
            (Some(h), Some(f)) => format!("{}/s vs {}/s", int(h), int(f)),
            _ => "–".into(),
        },
        ratio: opt(r, |v| format!("{:.0}%", v * 100.0)),
        verdict: verdict(r.map(|v| v >= 0.70)),
    });

    let walb = run
        .get("f", wal::VARIANTS[1].0, PG_JOBS)
        .and_then(|m| m.wal_bytes_per_job);
    out.push(Target {
        what: "f: ≤ 1 KiB of WAL per job with batches of 100".into(),
        measured: opt(walb, |v| format!("{} bytes/job", int(v))),
        ratio: opt(walb, |v| format!("{:.2}× the limit", v / 1024.0)),
        verdict: verdict(walb.map(|v| v <= 1024.0)),
    });

    let idle_pg = run.get("g", idle::VARIANT, PG_JOBS);
    let statements = idle_pg.and_then(|m| m.statements_per_s.map(|s| (s * m.seconds).round()));
    out.push(Target {
        what: "g: no statements from waiting workers".into(),
        measured: opt(statements, |s| {
            format!(
                "{} statements in {:.0} s from 16 waiting pg_jobs workers",
                int(s),
                idle_pg.map_or(0.0, |m| m.seconds)
            )
        }),
        ratio: opt(statements, |s| {
            format!(
                "{}/s",
                if s == 0.0 {
                    "0".into()
                } else {
                    format!("{:.2}", s / idle_pg.map_or(1.0, |m| m.seconds))
                }
            )
        }),
        verdict: verdict(statements.map(|s| s == 0.0)),
    });
    out
}

/// A row of the ratio table: one metric where pg_jobs is compared with each other queue,
/// expressed so that > 1 means pg_jobs did better.
fn advantage_row(
    out: &mut String,
    label: &str,
    values: impl Fn(&str) -> Option<f64>,
    higher_is_better: bool,
) {
    let mine = values(PG_JOBS);
    let _ = write!(out, "| {label} |");
    for other in OTHERS {
        let cell = match (mine, values(other)) {
            (Some(a), Some(b)) if a > 0.0 && b > 0.0 => {
                ratio(if higher_is_better { a / b } else { b / a })
            }
            (Some(a), Some(b)) => format!("{} vs {}", fmt_small(a), fmt_small(b)),
            _ => "–".into(),
        };
        let _ = write!(out, " {cell} |");
    }
    out.push('\n');
}

fn fmt_small(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() < 10.0 {
        format!("{v:.2}")
    } else {
        int(v)
    }
}

fn ratios(out: &mut String, run: &Run) {
    out.push_str("## pg_jobs against each comparator\n\n");
    out.push_str(
        "Each cell is pg_jobs's advantage: **> 1 means pg_jobs did better** (more jobs per second, \
         lower latency, fewer WAL bytes or commits, less server CPU). Where one side is zero the \
         two values are shown instead.\n\n",
    );
    out.push_str("| scenario · metric | vs hand-rolled | vs pgmq | vs Graphile Worker |\n|---|---|---|---|\n");
    for (variant, _) in enqueue::VARIANTS {
        advantage_row(
            out,
            &format!("a. enqueue, {variant} · jobs/s"),
            |c| run.rate("a", variant, c),
            true,
        );
    }
    for (variant, _) in burndown::VARIANTS {
        advantage_row(
            out,
            &format!("b. burn-down, {variant} · jobs/s"),
            |c| run.rate("b", variant, c),
            true,
        );
        advantage_row(
            out,
            &format!("b. burn-down, {variant} · server CPU per job"),
            |c| {
                run.get("b", variant, c)
                    .and_then(|m| m.server_cpu_per_1000())
            },
            false,
        );
    }
    let lat = |c: &str| run.get("c", latency::VARIANT, c);
    advantage_row(
        out,
        "c. pickup latency · p50",
        |c| lat(c).and_then(|m| m.p50_ms),
        false,
    );
    advantage_row(
        out,
        "c. pickup latency · p99",
        |c| lat(c).and_then(|m| m.p99_ms),
        false,
    );
    for variant in [backlog::SMALL, backlog::QUEUED, backlog::FINISHED] {
        advantage_row(
            out,
            &format!("d. backlog, {variant} · jobs/s"),
            |c| run.rate("d", variant, c),
            true,
        );
    }
    advantage_row(
        out,
        "e. held snapshot · jobs/s",
        |c| run.rate("e", snapshot::VARIANT, c),
        true,
    );
    for (variant, _) in wal::VARIANTS {
        advantage_row(
            out,
            &format!("f. {variant} · WAL bytes per job"),
            |c| run.get("f", variant, c).and_then(|m| m.wal_bytes_per_job),
            false,
        );
        advantage_row(
            out,
            &format!("f. {variant} · commits per job"),
            |c| run.get("f", variant, c).and_then(|m| m.commits_per_job),
            false,
        );
    }
    let idle = |c: &str| run.get("g", idle::VARIANT, c);
    advantage_row(
        out,
        "g. idle · statements/s",
        |c| idle(c).and_then(|m| m.statements_per_s),
        false,
    );
    advantage_row(
        out,
        "g. idle · server CPU (% of a core)",
        |c| idle(c).and_then(|m| m.server_cpu_s.map(|s| 100.0 * s / m.seconds)),
        false,
    );
    out.push('\n');

    // How each queue holds up when the table is big or vacuum is held back.
    out.push_str("### How each queue holds up (rate ÷ its own rate in the easy case)\n\n");
    out.push_str("| comparator | d. 1,000,000 queued ÷ 1,000 queued | d. 1,000,000 finished ÷ 1,000 queued | e. held snapshot ÷ b (1 per claim) |\n|---|---|---|---|\n");
    for c in std::iter::once(PG_JOBS).chain(OTHERS) {
        let small = run.rate("d", backlog::SMALL, c);
        let cell = |big: Option<f64>, base: Option<f64>| {
            opt(big.zip(base).map(|(a, b)| a / b), |v| {
                format!("{:.0}%", v * 100.0)
            })
        };
        let _ = writeln!(
            out,
            "| {c} | {} | {} | {} |",
            cell(run.rate("d", backlog::QUEUED, c), small),
            cell(run.rate("d", backlog::FINISHED, c), small),
            cell(
                run.rate("e", snapshot::VARIANT, c),
                run.rate("b", burndown::VARIANTS[0].0, c)
            ),
        );
    }
    out.push('\n');
    if let (Some(tps), Some(b1)) = (
        run.rate("p", pgbench::VARIANT, "pgbench"),
        run.rate("b", burndown::VARIANTS[0].0, PG_JOBS),
    ) {
        let _ = writeln!(
            out,
            "Against the machine's ceiling: `pgbench -N` ran {} transactions/s; pg_jobs's one-per-claim \
             burn-down ({} jobs/s) commits two transactions per job (claim, complete), i.e. {} commits/s = {:.0}% of pgbench's rate.\n",
            int(tps),
            int(b1),
            int(2.0 * b1),
            200.0 * b1 / tps
        );
    }
}

/// Text safe for one Markdown table cell: its first line, pipes escaped, at most 200 chars.
fn cell(text: &str) -> String {
    let line = text.lines().next().unwrap_or("").replace('|', "\\|");
    if line.chars().count() > 200 {
        format!("{}…", line.chars().take(200).collect::<String>())
    } else {
        line
    }
}

fn missing_cell(m: &Measurement) -> String {
    cell(m.missing.as_deref().unwrap_or_default())
}

fn note_cell(m: &Measurement) -> String {
    cell(m.note.as_deref().unwrap_or_default())
}

/// Starts a Markdown table with `columns`.
fn table_header(out: &mut String, columns: &[&str]) {
    let _ = writeln!(out, "| {} |", columns.join(" | "));
    let _ = writeln!(out, "|{}", "---|".repeat(columns.len()));
}

/// Writes one row of a table `width` columns wide: the `lead` cells, then `m`'s figures from
/// `figures`, or, when `m` is missing, a dash per figure and why in the last column.
fn measurement_row(
    out: &mut String,
    width: usize,
    lead: &[&str],
    m: &Measurement,
    figures: impl FnOnce() -> Vec<String>,
) {
    let mut row: Vec<String> = lead.iter().map(|c| c.to_string()).collect();
    if m.missing.is_some() {
        row.extend(std::iter::repeat_n("–".to_owned(), width - lead.len() - 1));
        row.push(missing_cell(m));
    } else {
        row.extend(figures());
    }
    let _ = writeln!(out, "| {} |", row.join(" | "));
}

fn throughput_table(out: &mut String, run: &Run, scenario: &str, variant: &str) {
    let rows = run.comparators(scenario, variant);
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(out, "**{variant}**\n");
    let all_columns = [
        "comparator",
        "jobs",
        "seconds",
        "jobs/s",
        "server CPU s / 1,000 jobs",
        "client CPU s / 1,000 jobs",
        "empty claims",
        "notes",
    ];
    // Enqueue claims nothing and needs no notes.
    let columns = &all_columns[..if scenario == "a" { 6 } else { 8 }];
    table_header(out, columns);
    for m in rows {
        measurement_row(out, columns.len(), &[&m.comparator], m, || {
            let mut figures = vec![
                int(m.jobs as f64),
                format!("{:.1}", m.seconds),
                opt(m.rate, int),
                opt(m.server_cpu_per_1000(), cpu),
                opt(m.client_cpu_per_1000(), cpu),
                m.empty_claims.map_or_else(|| "–".into(), |e| int(e as f64)),
                note_cell(m),
            ];
            figures.truncate(columns.len() - 1);
            figures
        });
    }
    out.push('\n');
}

fn absolute(out: &mut String, run: &Run) {
    out.push_str("## Absolute figures\n\n");
    out.push_str(
        "Server CPU is the CPU time of all processes of the bench cluster (postmaster, backends, \
         background workers, autovacuum) in the measurement window; client CPU is the load \
         generator's (plus the Node worker's, for Graphile Worker). Server and clients share the \
         machine's cores.\n\n",
    );
    out.push_str("### Ceiling: pgbench\n\n");
    if let Some(m) = run.any("p", pgbench::VARIANT, "pgbench") {
        if let Some(why) = &m.missing {
            let _ = writeln!(out, "pgbench: {why}\n");
        } else {
            let _ = writeln!(
                out,
                "`pgbench -N -c 8 -j 2 -M prepared -T {:.0}` (scale 10): **{} transactions/s**, server CPU {} s per 1,000 transactions.\n",
                m.seconds,
                opt(m.rate, int),
                opt(m.server_cpu_per_1000(), cpu)
            );
        }
    }
    out.push_str("### a. Enqueue (8 sessions, fixed time)\n\n");
    for (variant, _) in enqueue::VARIANTS {
        throughput_table(out, run, "a", variant);
    }
    out.push_str("### b. Burn-down of queued no-op jobs by 8 workers\n\n");
    for (variant, _) in burndown::VARIANTS {
        throughput_table(out, run, "b", variant);
    }
    out.push_str("### c. Pickup latency (one job every 10 ms, 8 waiting workers)\n\n");
    out.push_str(
        "From the client's return from the enqueue's COMMIT to the job in a worker's hands.\n\n",
    );
    let columns = [
        "comparator",
        "jobs",
        "p50",
        "p99",
        "max",
        "server CPU s / 1,000 jobs",
        "how workers wait",
    ];
    table_header(out, &columns);
    for m in run.comparators("c", latency::VARIANT) {
        measurement_row(out, columns.len(), &[&m.comparator], m, || {
            vec![
                int(m.jobs as f64),
                opt(m.p50_ms, ms),
                opt(m.p99_ms, ms),
                opt(m.max_ms, ms),
                opt(m.server_cpu_per_1000(), cpu),
                note_cell(m),
            ]
        });
    }
    out.push('\n');
    out.push_str("### d. Backlog (one job per claim)\n\n");
    for variant in [backlog::SMALL, backlog::QUEUED, backlog::FINISHED] {
        throughput_table(out, run, "d", variant);
    }
    out.push_str(
        "### e. Held snapshot (one job per claim, a REPEATABLE READ snapshot open throughout)\n\n",
    );
    throughput_table(out, run, "e", snapshot::VARIANT);
    out.push_str(
        "### f. WAL and commits per job over a whole lifecycle (enqueue + claim + complete)\n\n",
    );
    let columns = [
        "comparator",
        "batch",
        "jobs",
        "WAL bytes / job",
        "commits / job",
        "server CPU s / 1,000 jobs",
    ];
    table_header(out, &columns);
    for (variant, _) in wal::VARIANTS {
        for m in run.comparators("f", variant) {
            measurement_row(out, columns.len(), &[&m.comparator, variant], m, || {
                vec![
                    int(m.jobs as f64),
                    opt(m.wal_bytes_per_job, int),
                    opt(m.commits_per_job, |v| format!("{v:.2}")),
                    opt(m.server_cpu_per_1000(), cpu),
                ]
            });
        }
    }
    out.push('\n');
    out.push_str("### g. Idle: 16 workers waiting on an empty queue\n\n");
    out.push_str(
        "Statements: pg_stat_statements calls by the workers' role, nested statements included \
         (track = 'all' for that role). Commits: all of the bench database (the baseline row shows \
         what the cluster does without workers: the pg_jobs background worker's tick, autovacuum). \
         CPU as a percentage of one core.\n\n",
    );
    let columns = [
        "comparator",
        "seconds",
        "statements/s",
        "commits/s",
        "server CPU",
        "client CPU",
        "how workers wait",
    ];
    table_header(out, &columns);
    let mut idle_rows = run.comparators("g", idle::BASELINE);
    idle_rows.extend(run.comparators("g", idle::VARIANT));
    for m in idle_rows {
        let label = if m.comparator == "-" {
            idle::BASELINE
        } else {
            &m.comparator
        };
        let pct = |v: Option<f64>| opt(v, |c| format!("{:.1}%", 100.0 * c / m.seconds));
        measurement_row(out, columns.len(), &[label], m, || {
            vec![
                format!("{:.0}", m.seconds),
                opt(m.statements_per_s, |v| format!("{v:.2}")),
                opt(m.commits_per_s, |v| format!("{v:.2}")),
                pct(m.server_cpu_s),
                pct(m.client_cpu_s),
                note_cell(m),
            ]
        });
    }
    out.push('\n');
}

fn method(out: &mut String, run: &Run) {
    out.push_str("## Method\n\n");
    out.push_str(
        "- One PostgreSQL cluster of the suite's own, fsync and synchronous_commit on; every \
         comparator in the same database, run one after another, never at the same time.\n\
         - Every load-generator session uses prepared statements (the `postgres` Rust crate); \
         Graphile Worker uses its own (prepared) queries through node-postgres.\n\
         - Same no-op work everywhere: payload `{\"n\": <number>}`, nothing done with it.\n\
         - Before each measurement the queue is emptied (TRUNCATE), loaded if the scenario needs \
         a backlog (set-up, not measured), then `VACUUM (ANALYZE)` and `CHECKPOINT`.\n\
         - b, d and e: 8 workers, each claim in its own transaction and each completion in another \
         (pg_jobs: `jobs_claim(n => 1 | 100)` + `jobs_complete(id, lease)` or \
         `jobs_complete(ids[], leases[])`; hand-rolled: `UPDATE ... WHERE id IN (SELECT ... FOR \
         UPDATE SKIP LOCKED)` + `UPDATE ... SET state = 'done'`; pgmq: `pgmq.read(q, 30, n)` + \
         `pgmq.delete(q, id)` or `pgmq.delete(q, ids[])`; Graphile Worker: its worker process \
         at concurrency 8 — with its defaults for \"1 per claim\", with `localQueue.size = 100` \
         and `completeJobBatchDelay = 0` for \"100 per claim\"; timed from its first job to an \
         empty job table). A claim that returns nothing is retried after 1 ms, as a polling worker would; \
         \"empty claims\" counts those that came back empty while more jobs than the 8 workers \
         could hold were still queued.\n\
         - c: the producer enqueues one job every 10 ms in its own session and notes when COMMIT \
         returned; pickup is when the worker's claim returned (Graphile: when the task started, \
         stamped by Node with the same wall clock).\n\
         - d (small): rounds of 1,000 queued jobs, each burnt down, the rate over all rounds. \
         d (1,000,000 finished) is not applicable to pgmq and Graphile Worker, which delete \
         finished jobs.\n\
         - e: the snapshot is taken after the load and vacuum, just before the workers start.\n\
         - f: WAL = `pg_current_wal_insert_lsn()` difference, commits = \
         `pg_stat_database.xact_commit` difference (whole bench database, including the pg_jobs \
         background worker's ticks and autovacuum, which are small here) over enqueue + burn-down.\n\n",
    );
    out.push_str("How each comparator's workers wait for work (c, g):\n\n");
    for (name, mode) in &run.waiting {
        let _ = writeln!(out, "- {name}: {mode}");
    }
    out.push('\n');
}

fn machine(out: &mut String, run: &Run) {
    let m = &run.machine;
    out.push_str("## Machine\n\n");
    for (what, value) in &m.facts {
        let _ = writeln!(out, "- {what}: {value}");
    }
    let _ = writeln!(
        out,
        "- run started {}; load average {} before, {} after; the run took {:.0} minutes",
        m.started, m.load_before, run.load_after, run.minutes
    );
    out.push_str("\nPostgreSQL settings that differ from the built-in defaults:\n\n");
    out.push_str("| setting | value |\n|---|---|\n");
    for (name, value) in &m.settings {
        let _ = writeln!(out, "| {name} | {value} |");
    }
    out.push('\n');
}

pub fn render(run: &Run) -> String {
    let mut out = String::new();
    out.push_str("# pg_jobs benchmark report\n\n");
    let _ =
        writeln!(
        out,
        "Written by `benchmarks/run` (scale: {}, started {}). Every figure comes from this one \
         run, on one PostgreSQL cluster, with every queue doing the same no-op work. Absolute \
         numbers depend on the machine (described at the end) and on whatever else ran on it; \
         compare the ratios.\n",
        run.machine.facts.iter().find(|(k, _)| k == "scale").map_or("?", |(_, v)| v.as_str()),
        run.machine.started
    );
    if run
        .machine
        .facts
        .iter()
        .any(|(k, v)| k == "scale" && v == "small")
    {
        out.push_str(
            "**Small scale** (BENCH_SCALE=small): every size is cut down (for instance 10,000 jobs \
             in b, 100,000 instead of 1,000,000 in d, 5 s instead of 30 s in c and g); the \
             scenario names keep the full-scale sizes, the notes give the real ones. For iterating \
             on the suite, not for judging the targets.\n\n",
        );
    }
    out.push_str("## Targets (issue 4 §4)\n\n");
    out.push_str("| target | measured | ratio | verdict |\n|---|---|---|---|\n");
    for t in targets(run) {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            t.what, t.measured, t.ratio, t.verdict
        );
    }
    out.push('\n');
    ratios(&mut out, run);
    absolute(&mut out, run);
    crate::scenarios::schedules::report(&mut out, run);
    method(&mut out, run);
    machine(&mut out, run);
    out
}
