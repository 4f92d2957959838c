//! The report's sections for the scenarios of issues 18 and 19 (h, k, v, w, s) and the
//! run-to-run noise of the repeated scenarios.

use std::fmt::Write;

use super::charts;
use super::markdown::{cell, measurement_row, note_cell, table_header, throughput_table, PG_JOBS};
use super::targets::{soak_ends, soak_growth, FLAT};
use crate::format::{cpu, int, mib, ms, opt, ratio};
use crate::results::{Measurement, Run};
use crate::scenarios::{burndown, enqueue, kinds, latency, long, roles, scaling, soak, vacuum};

pub fn long_burn_down(out: &mut String, run: &Run) {
    if run.comparators("h", long::VARIANT).is_empty() {
        return;
    }
    out.push_str("### h. Long burn-down (100 per claim, 8 workers)\n\n");
    out.push_str(
        "b's 100-per-claim burn-down lasts about a second at full scale; this one runs long \
         enough (15 s and more) for autovacuum, checkpoints and the table's growth to weigh in.\n\n",
    );
    throughput_table(out, run, "h", long::VARIANT);
}

pub fn kinds_filtered(out: &mut String, run: &Run) {
    let rows: Vec<_> = [kinds::UNFILTERED, kinds::FILTERED]
        .iter()
        .flat_map(|v| run.comparators("k", v))
        .collect();
    if rows.is_empty() {
        return;
    }
    out.push_str("### k. Kinds-filtered claims\n\n");
    let columns = ["claim", "claims", "mean", "p50", "p99", "max", "notes"];
    table_header(out, &columns);
    for m in rows {
        measurement_row(out, columns.len(), &[&m.variant], m, || {
            vec![
                int(m.jobs as f64),
                opt(m.mean_ms, ms),
                opt(m.p50_ms, ms),
                opt(m.p99_ms, ms),
                opt(m.max_ms, ms),
                note_cell(m),
            ]
        });
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "k's queue claims by kind (`claims_by_kind`), so its jobs are in the kinds index \
         (`job_kind_claim_idx`), which lets a filtered claim skip other kinds; the queues of the \
         other scenarios, made with the defaults, are not. What the index costs an enqueue is in \
         the counts, beside pg_jobs's plain rows.\n"
    );
}

pub fn dead_rows(out: &mut String, run: &Run) {
    let mut rows = run.comparators("v", vacuum::BASELINE);
    rows.extend(run.comparators("v", vacuum::VARIANT));
    if rows.is_empty() {
        return;
    }
    out.push_str("### v. Dead rows held back while 16 workers wait on an empty queue\n\n");
    let secs = rows.iter().map(|m| m.seconds).fold(0.0, f64::max);
    let _ = writeln!(
        out,
        "While the workers wait, another session updates rows of an unrelated table (100 rows \
         per transaction, for {secs:.0} s, starting 2 s after the workers began waiting; \
         autovacuum is off for that table); then `VACUUM (VERBOSE)` of it runs at once and \
         reports how many dead row versions are \"dead but not yet removable\": those a snapshot \
         still held by some session may see. The oldest snapshot is the age of the longest-running \
         statement of the load generator's sessions that holds an xmin, just before VACUUM.\n"
    );
    let columns = [
        "comparator",
        "dead rows made",
        "not removable",
        "oldest worker snapshot",
        "how workers wait",
    ];
    table_header(out, &columns);
    for m in rows {
        let label = if m.comparator == "-" {
            vacuum::BASELINE
        } else {
            &m.comparator
        };
        measurement_row(out, columns.len(), &[label], m, || {
            vec![
                opt(m.dead_rows_made.map(|v| v as f64), int),
                opt(m.dead_rows_kept.map(|v| v as f64), int),
                m.oldest_snapshot_s
                    .map_or_else(|| "none".into(), |s| format!("{s:.1} s")),
                note_cell(m),
            ]
        });
    }
    out.push('\n');
}

pub fn scaling_curve(out: &mut String, run: &Run) {
    let points: Vec<_> = run
        .measurements
        .iter()
        .filter(|m| m.scenario == "w")
        .collect();
    if points.is_empty() {
        return;
    }
    out.push_str("### w. Scaling curve: burn-down by 1 to 32 workers\n\n");
    let _ = writeln!(
        out,
        "Each point burns down a freshly loaded queue; jobs/s, with pg_jobs ÷ hand-rolled beside \
         them. ![scaling curve](charts/{})\n",
        charts::SCALING
    );
    let find = |variant: &str, c: &str, w: u32| {
        points
            .iter()
            .find(|m| m.variant == variant && m.comparator == c && m.workers == Some(w))
    };
    let mut columns = vec!["workers".to_owned()];
    for (variant, _) in scaling::VARIANTS {
        columns.push(format!("pg_jobs, {variant}"));
        columns.push(format!("hand-rolled, {variant}"));
        columns.push("ratio".into());
    }
    let refs: Vec<&str> = columns.iter().map(String::as_str).collect();
    table_header(out, &refs);
    for w in scaling::WORKER_COUNTS {
        let mut row = vec![w.to_string()];
        for (variant, _) in scaling::VARIANTS {
            let cell = |c: &str| {
                find(variant, c, w).map_or("–".to_owned(), |m| match (&m.missing, m.rate) {
                    (None, Some(r)) => int(r),
                    _ => "failed".into(),
                })
            };
            let rate = |c: &str| find(variant, c, w).and_then(|m| m.rate);
            row.push(cell(PG_JOBS));
            row.push(cell("hand-rolled"));
            row.push(opt(
                rate(PG_JOBS).zip(rate("hand-rolled")).map(|(a, b)| a / b),
                ratio,
            ));
        }
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    let jobs = |batch: i32| {
        points
            .iter()
            .find(|m| m.variant == burndown_variant(batch) && m.missing.is_none())
            .map_or("?".into(), |m| int(m.jobs as f64))
    };
    let _ = writeln!(
        out,
        "\n{} jobs per point at 1 per claim, {} at 100 per claim.\n",
        jobs(1),
        jobs(100)
    );
}

fn burndown_variant(batch: i32) -> &'static str {
    scaling::VARIANTS
        .iter()
        .find(|(_, b)| *b == batch)
        .map_or(burndown::VARIANTS[0].0, |(v, _)| v)
}

pub fn soak_section(out: &mut String, run: &Run) {
    let capacity = run.comparators("s", soak::CAPACITY);
    let soaks = run.comparators("s", soak::SOAK);
    if capacity.is_empty() && soaks.is_empty() {
        return;
    }
    out.push_str("### s. Soak: producers and waiting workers together at 70% of capacity\n\n");
    out.push_str(
        "Capacity first: the completion rate with producers and workers flat out together, the \
         producers pausing while more than 1,000 jobs are queued (the rate at which the queue \
         keeps up with its producers). The soak then offers 70% of the lower of the two \
         capacities to both queues, on a fixed schedule; 1 job in 20 fails on its first attempt \
         and is retried 1 s later; finished jobs are purged once older than the retention (pg_jobs: \
         the queue's `retention` and its background worker; hand-rolled: a janitor `DELETE` once \
         a second); autovacuum runs at its defaults. Pickup latency counts first attempts only.\n\n",
    );
    let columns = [
        "comparator",
        "jobs",
        "seconds",
        "jobs/s",
        "pickup p50",
        "pickup p99",
        "server CPU s / 1,000 jobs",
        "notes",
    ];
    let _ = writeln!(out, "**Capacity**\n");
    table_header(out, &columns);
    for m in &capacity {
        measurement_row(out, columns.len(), &[&m.comparator], m, || {
            vec![
                int(m.jobs as f64),
                format!("{:.0}", m.seconds),
                opt(m.rate, int),
                opt(m.p50_ms, ms),
                opt(m.p99_ms, ms),
                opt(m.server_cpu_per_1000(), cpu),
                note_cell(m),
            ]
        });
    }
    out.push('\n');
    let _ = writeln!(out, "**Soak**\n");
    let columns = [
        "comparator",
        "jobs/s offered",
        "jobs/s completed",
        "pickup p50",
        "pickup p99",
        "max",
        "first → last tenth: jobs/s",
        "first → last tenth: p99",
        "growth over the second half: table, indexes",
        "server CPU s / 1,000 jobs",
    ];
    table_header(out, &columns);
    for m in &soaks {
        measurement_row(out, columns.len(), &[&m.comparator], m, || {
            let ends = soak_ends(m);
            let growth = soak_growth(m);
            vec![
                opt(m.offered_rate, int),
                opt(m.rate, int),
                opt(m.p50_ms, ms),
                opt(m.p99_ms, ms),
                opt(m.max_ms, ms),
                ends.map_or("–".into(), |((a, _), (b, _))| {
                    format!("{} → {} ({:+.1}%)", int(a), int(b), 100.0 * (b / a - 1.0))
                }),
                ends.map_or("–".into(), |((_, a), (_, b))| {
                    format!("{} → {}", ms(a), ms(b))
                }),
                growth.map_or("–".into(), |(t, i)| {
                    format!("{:+.1}%, {:+.1}%", 100.0 * t, 100.0 * i)
                }),
                opt(m.server_cpu_per_1000(), cpu),
            ]
        });
    }
    out.push('\n');
    if let Some(note) = soaks.iter().find_map(|m| m.note.clone()) {
        let _ = writeln!(out, "{note}.\n");
    }
    let _ = writeln!(
        out,
        "\"Flat\" means: the table (main fork) and the sum of its indexes, each, at most {:.0}% \
         larger at the end than half-way through (the first half is the warm-up: the table fills \
         up to its retention's worth of finished jobs and autovacuum settles into its cycle). \
         The first and last tenth are a minute each at full scale.\n",
        FLAT * 100.0
    );
    let sampled: Vec<_> = soaks.iter().filter(|m| !m.samples.is_empty()).collect();
    if sampled.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "![soak: throughput and p99 over time](charts/{})\n\n![soak: table and index sizes, dead tuples over time](charts/{})\n",
        charts::SOAK_THROUGHPUT,
        charts::SOAK_SIZES
    );
    let _ = writeln!(
        out,
        "**Every interval** (jobs/s completed; pickup p50 / p99 in ms; dead tuples; table and all \
         its indexes in MiB; autovacuums of the table so far)\n"
    );
    let mut columns = vec!["t (s)".to_owned()];
    for m in &sampled {
        for what in [
            "jobs/s",
            "p50 / p99",
            "dead",
            "table / indexes",
            "autovacuums",
        ] {
            columns.push(format!("{} {what}", m.comparator));
        }
    }
    let refs: Vec<&str> = columns.iter().map(String::as_str).collect();
    table_header(out, &refs);
    let rows = sampled.iter().map(|m| m.samples.len()).max().unwrap_or(0);
    for i in 0..rows {
        let t = sampled
            .iter()
            .find_map(|m| m.samples.get(i))
            .map_or(0.0, |s| s.t);
        let mut row = vec![format!("{t:.0}")];
        for m in &sampled {
            match m.samples.get(i) {
                Some(s) => {
                    row.push(int(s.rate));
                    row.push(format!(
                        "{} / {}",
                        opt(s.p50_ms, |v| format!("{v:.2}")),
                        opt(s.p99_ms, |v| format!("{v:.2}"))
                    ));
                    row.push(int(s.dead_tuples as f64));
                    row.push(format!(
                        "{} / {}",
                        mib(s.table_bytes),
                        mib(s.all_index_bytes())
                    ));
                    row.push(s.autovacuums.to_string());
                }
                None => row.extend(std::iter::repeat_n("–".to_owned(), 5)),
            }
        }
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    out.push('\n');
    if let Some(s) = sampled
        .iter()
        .find_map(|m| m.samples.last().map(|s| (m, s)))
    {
        let (m, s) = s;
        let sizes: Vec<String> = s
            .index_bytes
            .iter()
            .map(|(n, b)| format!("{n} {} MiB", mib(*b)))
            .collect();
        let _ = writeln!(
            out,
            "Index sizes at the end, {}: {}. The JSON beside the report has every index's size in \
             every interval.\n",
            m.comparator,
            sizes.join(", ")
        );
    }
}

/// r: each variant as the owner and as the jobs_worker role with a tenant, side by side, with
/// the ratios of their rates and of their server CPU per job.
pub fn roles_cost(out: &mut String, run: &Run) {
    if roles::VARIANTS
        .iter()
        .all(|(v, _)| run.comparators("r", v).is_empty())
    {
        return;
    }
    out.push_str(
        "### r. Roles and tenants cost (8 sessions, pg_jobs only)

",
    );
    out.push_str(
        "a's enqueue and b's burn-down, each side as the extension's owner (a \
         superuser, no tenant set: the functions' role checks pass at once and no tenant filter \
         applies) and as a login role granted `jobs_worker` that sets `pg_jobs.tenant` at session \
         start (the role is granted the tenant, every job carries it, every claim is limited to \
         it). Each repetition runs each variant as A B B A (two pairs, the second reversed), so \
         that the machine's drift falls on both sides alike; which login is A alternates between \
         variants and between repetitions. Figures are the means of each side's runs. \
         Ratio: jobs_worker + tenant ÷ owner (> 1 means the worker was faster); for CPU, owner ÷ \
         jobs_worker + tenant (> 1 means the worker used less).\n\n",
    );
    let columns = [
        "variant",
        "owner jobs/s",
        "jobs_worker + tenant jobs/s",
        "rate ratio",
        "owner server CPU s / 1,000 jobs",
        "jobs_worker + tenant server CPU s / 1,000 jobs",
        "CPU ratio",
        "notes",
    ];
    table_header(out, &columns);
    for (variant, _) in roles::VARIANTS {
        let owner = run.get("r", variant, roles::OWNER);
        let worker = run.get("r", variant, roles::WORKER);
        let why = || {
            [roles::OWNER, roles::WORKER]
                .iter()
                .filter_map(|c| run.any("r", variant, c).and_then(|m| m.missing.clone()))
                .next()
        };
        let rate = |m: Option<&Measurement>| m.and_then(|m| m.rate);
        let cpu_of = |m: Option<&Measurement>| m.and_then(|m| m.server_cpu_per_1000());
        let rate_ratio = rate(worker).zip(rate(owner)).map(|(w, o)| w / o);
        let cpu_ratio = cpu_of(owner).zip(cpu_of(worker)).map(|(o, w)| o / w);
        let row = [
            variant.to_owned(),
            opt(rate(owner), int),
            opt(rate(worker), int),
            opt(rate_ratio, ratio),
            opt(cpu_of(owner), cpu),
            opt(cpu_of(worker), cpu),
            opt(cpu_ratio, ratio),
            if owner.is_none() || worker.is_none() {
                why().map_or_else(String::new, |why| cell(&why))
            } else {
                String::new()
            },
        ];
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    out.push('\n');
    for c in [roles::OWNER, roles::WORKER] {
        if let Some(note) = roles::VARIANTS
            .iter()
            .find_map(|(v, _)| run.get("r", v, c).and_then(|m| m.note.clone()))
        {
            let _ = writeln!(out, "- {c}: {note}");
        }
    }
    out.push('\n');
}

/// One figure of the noise table: scenario, variant, label, how to show it, where it is.
type NoiseRow = (
    &'static str,
    &'static str,
    &'static str,
    fn(f64) -> String,
    fn(&Measurement) -> Option<f64>,
);

/// What the noise section's table covers: how often the repeated scenarios of this run ran,
/// naming only those that did.
fn noise_intro(raw: &Run, n: u32, r_runs: u32) -> String {
    let ran = |scenario: &str| raw.measurements.iter().any(|m| m.scenario == scenario);
    let repeated: Vec<&str> = ["a", "b", "c"].into_iter().filter(|s| ran(s)).collect();
    let mut parts = Vec::new();
    if let Some((last, first)) = repeated.split_last() {
        let names = if first.is_empty() {
            last.to_string()
        } else {
            format!("{} and {last}", first.join(", "))
        };
        parts.push(format!(
            "{names} ran {n} times in this run, the queues in alternating order (forward, then \
             backward), so no queue always runs first or last"
        ));
    }
    if ran("r") {
        parts.push(format!(
            "r measured each side {r_runs} times, in blocks of two pairs (A B B A) per repetition"
        ));
    }
    parts.join("; ")
        + ". Each row: the figure of each run, and half their spread relative to their mean. \
             The report's figures are the means."
}

/// The spread of the repeated scenarios' figures, per queue.
pub fn noise(out: &mut String, raw: &Run) {
    let n = raw.repetitions(&["a", "b", "c"]);
    let r_runs = raw.repetitions(&["r"]);
    if n.max(r_runs) < 2 {
        return;
    }
    out.push_str("## Run-to-run noise\n\n");
    let _ = writeln!(out, "{}\n", noise_intro(raw, n, r_runs));
    let columns = ["scenario", "comparator", "figure", "runs", "noise"];
    table_header(out, &columns);
    let mut metric_rows: Vec<NoiseRow> = Vec::new();
    for (v, _) in enqueue::VARIANTS {
        metric_rows.push(("a", v, "jobs/s", int, |m| m.rate));
    }
    for (v, _) in burndown::VARIANTS {
        metric_rows.push(("b", v, "jobs/s", int, |m| m.rate));
    }
    metric_rows.push(("c", latency::VARIANT, "p50", ms, |m| m.p50_ms));
    metric_rows.push(("c", latency::VARIANT, "p99", ms, |m| m.p99_ms));
    for (v, _) in roles::VARIANTS {
        metric_rows.push(("r", v, "jobs/s", int, |m| m.rate));
    }
    for (scenario, variant, label, show, f) in metric_rows {
        let mut names: Vec<&str> = Vec::new();
        for m in raw.comparators(scenario, variant) {
            if !names.contains(&m.comparator.as_str()) {
                names.push(&m.comparator);
            }
        }
        for name in names {
            let mut runs: Vec<(u32, f64)> = raw
                .comparators(scenario, variant)
                .into_iter()
                .filter(|m| m.comparator == name && m.missing.is_none())
                .filter_map(|m| f(m).map(|v| (m.repeat, v)))
                .collect();
            runs.sort_by_key(|r| r.0);
            let values: Vec<f64> = runs.iter().map(|r| r.1).collect();
            let spread = if values.len() > 1 {
                let mean = values.iter().sum::<f64>() / values.len() as f64;
                let (lo, hi) = values
                    .iter()
                    .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
                if mean > 0.0 {
                    format!("±{:.1}%", 50.0 * (hi - lo) / mean)
                } else {
                    "±0".into()
                }
            } else {
                "–".into()
            };
            let _ = writeln!(
                out,
                "| {scenario}. {variant} | {name} | {label} | {} | {spread} |",
                values
                    .iter()
                    .map(|v| show(*v))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::noise_intro;
    use crate::results::{Measurement, Run};

    fn run_of(scenarios: &[&str]) -> Run {
        Run {
            measurements: scenarios
                .iter()
                .map(|s| Measurement::new(s, "1 per claim", "pg_jobs"))
                .collect(),
            ..Run::default()
        }
    }

    #[test]
    fn the_noise_intro_names_only_the_scenarios_that_ran() {
        let b_only = noise_intro(&run_of(&["b", "d"]), 2, 1);
        assert!(b_only.starts_with("b ran 2 times in this run"), "{b_only}");
        assert!(!b_only.contains("r measured"), "{b_only}");
        let all = noise_intro(&run_of(&["a", "b", "c", "r"]), 2, 4);
        assert!(all.starts_with("a, b and c ran 2 times"), "{all}");
        assert!(all.contains("; r measured each side 4 times"), "{all}");
        let r_only = noise_intro(&run_of(&["r"]), 1, 6);
        assert!(
            r_only.starts_with("r measured each side 6 times"),
            "{r_only}"
        );
    }
}
