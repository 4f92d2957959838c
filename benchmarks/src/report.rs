//! The Markdown report: the targets of issue 4 §4 with MET / MISSED, the ratios of pg_jobs
//! against each comparator, then the absolute figures and the machine they were measured on.

use std::fmt::Write;

use serde::{Deserialize, Serialize};

mod sections;
mod targets;

use crate::machine::Machine;
use crate::scenarios::{
    backlog, burndown, enqueue, idempotency, idle, latency, long, pgbench, snapshot, soak, vacuum,
    wal, Measurement,
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

    /// Measurements grouped by what they measure: the repetitions of one figure together.
    fn groups(&self) -> Vec<Vec<&Measurement>> {
        let mut groups: Vec<Vec<&Measurement>> = Vec::new();
        for m in &self.measurements {
            match groups.iter_mut().find(|g| same_figure(g[0], m)) {
                Some(g) => g.push(m),
                None => groups.push(vec![m]),
            }
        }
        groups
    }

    /// The run with the repetitions of each figure replaced by their mean: what the report
    /// shows and judges.
    pub fn merged(&self) -> Run {
        Run {
            measurements: self.groups().iter().map(|g| mean_of(g)).collect(),
            ..self.clone()
        }
    }

    /// The run as its `k`-th repetition saw it: repetition `k` of each repeated figure, and
    /// the single measurement of every other.
    fn repetition(&self, k: u32) -> Run {
        Run {
            measurements: self
                .groups()
                .iter()
                .filter_map(|g| {
                    if g.len() == 1 {
                        Some(g[0].clone())
                    } else {
                        g.iter().find(|m| m.repeat == k).map(|m| (*m).clone())
                    }
                })
                .collect(),
            ..self.clone()
        }
    }

    /// How many repetitions the figures of `scenarios` had (1 when they ran once).
    fn repetitions(&self, scenarios: &[&str]) -> u32 {
        1 + self
            .measurements
            .iter()
            .filter(|m| scenarios.contains(&m.scenario.as_str()))
            .map(|m| m.repeat)
            .max()
            .unwrap_or(0)
    }
}

fn same_figure(a: &Measurement, b: &Measurement) -> bool {
    a.scenario == b.scenario
        && a.variant == b.variant
        && a.comparator == b.comparator
        && a.workers == b.workers
}

/// The mean of a figure's repetitions (those that did not fail); the notes are the first's.
fn mean_of(group: &[&Measurement]) -> Measurement {
    let ok: Vec<&Measurement> = group
        .iter()
        .copied()
        .filter(|m| m.missing.is_none())
        .collect();
    if group.len() == 1 || ok.is_empty() {
        return group[0].clone();
    }
    let mean = |f: &dyn Fn(&Measurement) -> Option<f64>| {
        let v: Vec<f64> = ok.iter().filter_map(|m| f(m)).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let mut m = ok[0].clone();
    m.repeat = 0;
    m.jobs = mean(&|m| Some(m.jobs as f64)).unwrap_or(0.0).round() as u64;
    m.seconds = mean(&|m| Some(m.seconds)).unwrap_or(0.0);
    m.rate = mean(&|m| m.rate);
    m.server_cpu_s = mean(&|m| m.server_cpu_s);
    m.client_cpu_s = mean(&|m| m.client_cpu_s);
    m.p50_ms = mean(&|m| m.p50_ms);
    m.p99_ms = mean(&|m| m.p99_ms);
    m.max_ms = mean(&|m| m.max_ms);
    m.mean_ms = mean(&|m| m.mean_ms);
    m.wal_bytes_per_job = mean(&|m| m.wal_bytes_per_job);
    m.commits_per_job = mean(&|m| m.commits_per_job);
    m.statements_per_s = mean(&|m| m.statements_per_s);
    m.commits_per_s = mean(&|m| m.commits_per_s);
    m.empty_claims = mean(&|m| m.empty_claims.map(|e| e as f64)).map(|e| e.round() as u64);
    if ok.len() < group.len() {
        m.note = Some(format!(
            "{}mean of {} of {} runs (the others failed)",
            m.note.map(|n| format!("{n}; ")).unwrap_or_default(),
            ok.len(),
            group.len()
        ));
    }
    m
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
    advantage_row(
        out,
        "h. long burn-down, 100 per claim · jobs/s",
        |c| run.rate("h", long::VARIANT, c),
        true,
    );
    advantage_row(
        out,
        "v. waiting workers · dead rows not removable",
        |c| {
            run.get("v", vacuum::VARIANT, c)
                .and_then(|m| m.dead_rows_kept.map(|k| k as f64))
        },
        false,
    );
    advantage_row(
        out,
        "s. soak · pickup p99",
        |c| run.get("s", soak::SOAK, c).and_then(|m| m.p99_ms),
        false,
    );
    advantage_row(
        out,
        "s. soak · server CPU per job",
        |c| {
            run.get("s", soak::SOAK, c)
                .and_then(|m| m.server_cpu_per_1000())
        },
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
    sections::long_burn_down(out, run);
    sections::kinds_filtered(out, run);
    sections::roles_cost(out, run);
    sections::dead_rows(out, run);
    sections::scaling_curve(out, run);
    sections::soak_section(out, run);
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
         background worker's ticks and autovacuum, which are small here) over enqueue + burn-down.\n\
         - h: b's 100-per-claim burn-down on a queue big enough to last 15 s and more.\n\
         - k: one session; each round times one claim with `kinds` (its jobs queued behind the \
         other kind's) and one without, each completed at once; the means are compared.\n\
         - v: the busy table has autovacuum off, so only the measured `VACUUM (VERBOSE)` removes \
         rows; its \"dead but not yet removable\" count is the figure.\n\
         - r: pg_jobs's producers and workers log in as a role granted `jobs_worker` in every \
         scenario; r runs a and b (8 sessions each) once as the extension's owner (superuser, no \
         tenant) and once as that role with `SET pg_jobs.tenant` at session start, back to back, \
         the order alternating between variants and repetitions; it checks that every job \
         carries the tenant (or none) and that each login is what it says before measuring.\n\
         - w: every point loads, vacuums and checkpoints its queue afresh.\n\
         - s: see the soak's section; capacity and soak each start with 5 s of the same traffic \
         and an `ANALYZE` of the table.\n\
         - Noise: a, b, c and r run several times (BENCH_REPEATS), every other time with the \
         queues in reverse order; their figures here are the means.\n\n",
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

/// The report of a run (repeated figures are shown as their means, with their spread).
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
             in b, 100,000 instead of 1,000,000 in d, 5 s instead of 30 s in c and g, a soak of \
             60 s instead of 10 minutes); the scenario names keep the full-scale sizes, the notes \
             give the real ones. For iterating on the suite, not for judging the targets.\n\n",
        );
    }
    let view = run.merged();
    targets::write(&mut out, &view, run);
    ratios(&mut out, &view);
    absolute(&mut out, &view);
    crate::scenarios::clients::render(&mut out, &view);
    idempotency::report(&mut out, &view);
    crate::scenarios::schedules::report(&mut out, &view);
    sections::noise(&mut out, run);
    method(&mut out, run);
    machine(&mut out, run);
    out
}
