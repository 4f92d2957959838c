//! The targets of issues 4, 18, 19, 10 and 11 with MET / MISSED, each beside its run-to-run noise:
//! the spread of the judged figure over the repetitions of the scenarios it comes from.

use std::fmt::Write;

use super::markdown::PG_JOBS;
use crate::format::{int, ms, opt, percent, ratio};
use crate::results::{Measurement, Run, Sample};
use crate::scenarios::{
    backlog, burndown, enqueue, flow, idle, kinds, latency, long, roles, snapshot, soak, vacuum,
    wal,
};

struct Target {
    what: String,
    measured: String,
    value: String,
    noise: String,
    verdict: String,
}

/// A target judged on one figure `q` of the run: its value is taken from the merged run (the
/// mean of the repetitions), its noise from the figure in each repetition.
struct Judge<'a> {
    view: &'a Run,
    raw: &'a Run,
}

impl Judge<'_> {
    #[allow(clippy::too_many_arguments)]
    fn target(
        &self,
        what: &str,
        scenarios: &[&str],
        q: impl Fn(&Run) -> Option<f64>,
        pass: impl Fn(f64) -> bool,
        measured: impl Fn(&Run) -> String,
        show: impl Fn(f64) -> String,
    ) -> Target {
        let value = q(self.view);
        let n = self.raw.repetitions(scenarios);
        let runs: Vec<f64> = if n > 1 {
            (0..n).filter_map(|k| q(&self.raw.repetition(k))).collect()
        } else {
            Vec::new()
        };
        let noise = if runs.len() > 1 {
            let mean = runs.iter().sum::<f64>() / runs.len() as f64;
            let (lo, hi) = runs
                .iter()
                .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
            let spread = if mean.abs() > 0.0 {
                format!("±{:.1}%", 50.0 * (hi - lo) / mean.abs())
            } else {
                "±0".into()
            };
            format!(
                "{spread} ({})",
                runs.iter().map(|v| show(*v)).collect::<Vec<_>>().join(", ")
            )
        } else {
            "one run".into()
        };
        let verdict = match value {
            None => "not measured".into(),
            Some(v) if pass(v) => "**MET**".into(),
            Some(_) => {
                let met = runs.iter().filter(|v| pass(**v)).count();
                if met > 0 {
                    format!("**MISSED** (met in {met} of {} runs)", runs.len())
                } else {
                    "**MISSED**".into()
                }
            }
        };
        Target {
            what: what.into(),
            measured: if value.is_some() {
                measured(self.view)
            } else {
                "–".into()
            },
            value: opt(value, show),
            noise,
            verdict,
        }
    }

    /// pg_jobs's rate in scenario/variant ÷ `other`'s ≥ `at_least`.
    fn rate_ratio(
        &self,
        what: &str,
        scenario: &str,
        variant: &str,
        other: &str,
        at_least: f64,
    ) -> Target {
        self.target(
            what,
            &[scenario],
            |r| Some(r.rate(scenario, variant, PG_JOBS)? / r.rate(scenario, variant, other)?),
            |v| v >= at_least,
            |r| {
                format!(
                    "pg_jobs {}/s vs {other} {}/s",
                    opt(r.rate(scenario, variant, PG_JOBS), int),
                    opt(r.rate(scenario, variant, other), int)
                )
            },
            ratio,
        )
    }
}

fn issue4(j: &Judge) -> Vec<Target> {
    let (b1, b100) = (burndown::VARIANTS[0].0, burndown::VARIANTS[1].0);
    let mut out = vec![
        j.rate_ratio(
            "b, 1 per claim: ≥ 1.3× the hand-rolled queue",
            "b",
            b1,
            "hand-rolled",
            1.3,
        ),
        j.rate_ratio("b, 1 per claim: ≥ pgmq", "b", b1, "pgmq", 1.0),
        j.rate_ratio(
            "b, 100 per claim: ≥ 1.5× the hand-rolled queue (100 per claim)",
            "b",
            b100,
            "hand-rolled",
            1.5,
        ),
    ];
    // Graphile Worker at its best: its defaults or its local queue + batched completion.
    let graphile_best = |r: &Run| {
        [b1, b100]
            .iter()
            .filter_map(|v| r.rate("b", v, "Graphile Worker").map(|x| (x, *v)))
            .max_by(|a, b| a.0.total_cmp(&b.0))
    };
    out.push(j.target(
        "b, 100 per claim: ≥ Graphile Worker (its best mode)",
        &["b"],
        |r| Some(r.rate("b", b100, PG_JOBS)? / graphile_best(r)?.0),
        |v| v >= 1.0,
        |r| {
            let (g, mode) = graphile_best(r).unwrap_or((0.0, "?"));
            format!(
                "pg_jobs {}/s vs Graphile Worker ({mode}) {}/s",
                opt(r.rate("b", b100, PG_JOBS), int),
                int(g)
            )
        },
        ratio,
    ));
    let p = |r: &Run, c: &str, p99: bool| {
        r.get("c", latency::VARIANT, c)
            .and_then(|m| if p99 { m.p99_ms } else { m.p50_ms })
    };
    out.push(j.target(
        "c: p99 ≤ ½ of Graphile Worker's",
        &["c"],
        |r| Some(p(r, PG_JOBS, true)? / p(r, "Graphile Worker", true)?),
        |v| v <= 0.5,
        |r| {
            format!(
                "pg_jobs {} vs Graphile Worker {}",
                opt(p(r, PG_JOBS, true), ms),
                opt(p(r, "Graphile Worker", true), ms)
            )
        },
        ratio,
    ));
    out.push(j.target(
        "c: p50 < 2 ms",
        &["c"],
        |r| p(r, PG_JOBS, false),
        |v| v < 2.0,
        |r| format!("pg_jobs {}", opt(p(r, PG_JOBS, false), ms)),
        ms,
    ));
    for (variant, label) in [
        (backlog::QUEUED, "1,000,000 queued"),
        (backlog::FINISHED, "1,000,000 finished"),
    ] {
        out.push(j.target(
            &format!("d: {label} ≥ 75% of the small-backlog rate"),
            &["d"],
            |r| Some(r.rate("d", variant, PG_JOBS)? / r.rate("d", backlog::SMALL, PG_JOBS)?),
            |v| v >= 0.75,
            |r| {
                format!(
                    "{}/s vs {}/s",
                    opt(r.rate("d", variant, PG_JOBS), int),
                    opt(r.rate("d", backlog::SMALL, PG_JOBS), int)
                )
            },
            percent,
        ));
    }
    out.push(j.target(
        "e: held snapshot ≥ 70% of the rate without",
        &["e"],
        |r| Some(r.rate("e", snapshot::VARIANT, PG_JOBS)? / r.rate("b", b1, PG_JOBS)?),
        |v| v >= 0.70,
        |r| {
            format!(
                "{}/s vs {}/s (b, 1 per claim)",
                opt(r.rate("e", snapshot::VARIANT, PG_JOBS), int),
                opt(r.rate("b", b1, PG_JOBS), int)
            )
        },
        percent,
    ));
    out.push(j.target(
        "f: ≤ 1 KiB of WAL per job with batches of 100",
        &["f"],
        |r| r.get("f", wal::VARIANTS[1].0, PG_JOBS)?.wal_bytes_per_job,
        |v| v <= 1024.0,
        |r| {
            opt(
                r.get("f", wal::VARIANTS[1].0, PG_JOBS)
                    .and_then(|m| m.wal_bytes_per_job),
                |v| format!("{} bytes/job", int(v)),
            )
        },
        |v| format!("{:.2}× the limit", v / 1024.0),
    ));
    out.push(j.target(
        "g: no statements from waiting workers",
        &["g"],
        |r| r.get("g", idle::VARIANT, PG_JOBS)?.statements_per_s,
        |v| v == 0.0,
        |r| {
            let m = r.get("g", idle::VARIANT, PG_JOBS);
            format!(
                "{} statements in {:.0} s from 16 waiting pg_jobs workers",
                int(m
                    .and_then(|m| m.statements_per_s.map(|s| s * m.seconds))
                    .unwrap_or(0.0)),
                m.map_or(0.0, |m| m.seconds)
            )
        },
        |v| format!("{v:.2}/s"),
    ));
    out
}

/// The first and last tenth of a soak (a minute each at full scale): mean throughput, and
/// the p99 of the pickups in them.
pub fn soak_ends(m: &Measurement) -> Option<((f64, f64), (f64, f64))> {
    let s = &m.samples;
    if s.len() < 2 {
        return None;
    }
    let k = (s.len() as f64 / 10.0).round().max(1.0) as usize;
    let mean = |xs: &[Sample]| xs.iter().map(|x| x.rate).sum::<f64>() / xs.len() as f64;
    let first = (mean(&s[..k]), m.first_p99_ms?);
    let last = (mean(&s[s.len() - k..]), m.last_p99_ms?);
    Some((first, last))
}

/// Growth of the table and of all its indexes over the second half of a soak (after the
/// warm-up half), as fractions.
pub fn soak_growth(m: &Measurement) -> Option<(f64, f64)> {
    let s = &m.samples;
    if s.len() < 2 {
        return None;
    }
    let (mid, end) = (&s[s.len() / 2 - 1], &s[s.len() - 1]);
    let grow = |a: i64, b: i64| (a > 0).then(|| b as f64 / a as f64 - 1.0);
    Some((
        grow(mid.table_bytes, end.table_bytes)?,
        grow(mid.all_index_bytes(), end.all_index_bytes())?,
    ))
}

/// The soak's flatness threshold: growth of the table and of its indexes over the second
/// half of the soak.
pub const FLAT: f64 = 0.10;

fn issue18(j: &Judge) -> Vec<Target> {
    let (a1, a1000) = (enqueue::VARIANTS[0].0, enqueue::VARIANTS[1].0);
    let mut out = vec![
        j.rate_ratio(
            "a, 1 per transaction: ≥ 1.0× the hand-rolled queue",
            "a",
            a1,
            "hand-rolled",
            1.0,
        ),
        j.rate_ratio(
            "a, 1,000 per call: ≥ 1.0× the hand-rolled queue",
            "a",
            a1000,
            "hand-rolled",
            1.0,
        ),
        j.rate_ratio(
            "a, 1,000 per call: ≥ pgmq's send_batch",
            "a",
            a1000,
            "pgmq",
            1.0,
        ),
        j.rate_ratio(
            "d, 1,000 queued: ≥ 1.0× the hand-rolled queue",
            "d",
            backlog::SMALL,
            "hand-rolled",
            1.0,
        ),
        j.rate_ratio(
            "b, 100 per claim, short run (b's jobs): ≥ 1.5× the hand-rolled queue",
            "b",
            burndown::VARIANTS[1].0,
            "hand-rolled",
            1.5,
        ),
    ];
    let long_secs = j
        .view
        .get("h", long::VARIANT, PG_JOBS)
        .map_or(String::new(), |m| {
            format!(" ({} jobs, {:.0} s)", int(m.jobs as f64), m.seconds)
        });
    out.push(j.rate_ratio(
        &format!("h, 100 per claim, long run{long_secs}: ≥ 1.5× the hand-rolled queue"),
        "h",
        long::VARIANT,
        "hand-rolled",
        1.5,
    ));
    let claim = |r: &Run, v: &str| r.get("k", v, PG_JOBS).and_then(|m| m.mean_ms);
    let backlog = j
        .view
        .get("k", kinds::FILTERED, PG_JOBS)
        .and_then(|m| m.note.clone())
        .and_then(|n| n.split("; ").next().map(str::to_owned))
        .unwrap_or_default();
    out.push(j.target(
        "k: a kinds-filtered claim takes ≤ 2× an unfiltered claim of the same queue",
        &["k"],
        |r| Some(claim(r, kinds::FILTERED)? / claim(r, kinds::UNFILTERED)?),
        |v| v <= 2.0,
        |r| {
            format!(
                "{} vs {} per claim (means; {backlog})",
                opt(claim(r, kinds::FILTERED), ms),
                opt(claim(r, kinds::UNFILTERED), ms)
            )
        },
        ratio,
    ));
    let soaked = |r: &Run| r.get("s", soak::SOAK, PG_JOBS).cloned();
    out.push(j.target(
        "s: the soak's last minute: throughput within 10% of the first minute's",
        &["s"],
        |r| {
            let ((first, _), (last, _)) = soak_ends(&soaked(r)?)?;
            Some(last / first)
        },
        |v| (v - 1.0).abs() <= 0.10,
        |r| {
            soaked(r)
                .and_then(|m| soak_ends(&m))
                .map_or("–".into(), |((a, _), (b, _))| {
                    format!(
                        "pg_jobs {}/s in the last vs {}/s in the first",
                        int(b),
                        int(a)
                    )
                })
        },
        percent,
    ));
    out.push(j.target(
        "s: the soak's last minute: pickup p99 ≤ 1.1× the first minute's",
        &["s"],
        |r| {
            let ((_, first), (_, last)) = soak_ends(&soaked(r)?)?;
            Some(last / first)
        },
        |v| v <= 1.10,
        |r| {
            soaked(r)
                .and_then(|m| soak_ends(&m))
                .map_or("–".into(), |((_, a), (_, b))| {
                    format!("pg_jobs {} in the last vs {} in the first", ms(b), ms(a))
                })
        },
        ratio,
    ));
    out.push(j.target(
        &format!(
            "s: sizes flat after the warm-up: table and indexes each grow < {:.0}% over the soak's second half",
            FLAT * 100.0
        ),
        &["s"],
        |r| {
            let (t, i) = soak_growth(&soaked(r)?)?;
            Some(t.max(i))
        },
        |v| v < FLAT,
        |r| {
            soaked(r).and_then(|m| soak_growth(&m)).map_or("–".into(), |(t, i)| {
                format!("pg_jobs table {:+.1}%, indexes {:+.1}%", t * 100.0, i * 100.0)
            })
        },
        |v| format!("{:+.1}%", v * 100.0),
    ));
    out
}

fn issue19(j: &Judge) -> Vec<Target> {
    let kept = |r: &Run| r.get("v", vacuum::VARIANT, PG_JOBS).cloned();
    // "Unchanged": the pickup and idle targets of issue 4 still hold in this run.
    let c_ok = |r: &Run| {
        let m = r.get("c", latency::VARIANT, PG_JOBS)?;
        let p50_ok = m.p50_ms? < 2.0;
        let p99_ok = match r
            .get("c", latency::VARIANT, "Graphile Worker")
            .and_then(|g| g.p99_ms)
        {
            Some(g) => m.p99_ms? <= 0.5 * g,
            None => true,
        };
        Some(p50_ok && p99_ok)
    };
    let g_ok = |r: &Run| Some(r.get("g", idle::VARIANT, PG_JOBS)?.statements_per_s? == 0.0);
    let side_ok = |r: &Run| c_ok(r).unwrap_or(true) && g_ok(r).unwrap_or(true);
    let view_ok = side_ok(j.view);
    vec![j.target(
        "v: 0 dead rows held back by 16 waiting workers, with pickup p50/p99 (c) and idle statements/s (g) unchanged (their targets above still met)",
        &["v"],
        |r| kept(r)?.dead_rows_kept.map(|k| k as f64),
        |v| v == 0.0 && view_ok,
        |r| {
            let m = kept(r);
            let c = r.get("c", latency::VARIANT, PG_JOBS);
            let g = r.get("g", idle::VARIANT, PG_JOBS);
            format!(
                "pg_jobs: {} dead rows not removable{}; c p50 {}, p99 {}; g {} statements/s",
                m.as_ref().map_or("–".into(), vacuum::kept_of_made),
                m.as_ref()
                    .and_then(|m| m.oldest_snapshot_s)
                    .map_or(String::new(), |s| format!(" (oldest worker snapshot {s:.1} s old)")),
                opt(c.and_then(|m| m.p50_ms), ms),
                opt(c.and_then(|m| m.p99_ms), ms),
                opt(g.and_then(|m| m.statements_per_s), |v| format!("{v:.2}"))
            )
        },
        |v| format!("{} rows", int(v)),
    )]
}

/// Issue 11: unique keys and groups against the same work without them, and the rate limit.
fn issue11(j: &Judge) -> Vec<Target> {
    let u = flow::SCENARIO;
    let side_ratio = |what: String,
                      variant: &'static str,
                      ours: &'static str,
                      base: &'static str,
                      at_least: f64| {
        j.target(
            &what,
            &[u],
            |r| Some(r.rate(u, variant, ours)? / r.rate(u, variant, base)?),
            |v| v >= at_least,
            |r| {
                format!(
                    "{ours} {}/s vs {base} {}/s",
                    opt(r.rate(u, variant, ours), int),
                    opt(r.rate(u, variant, base), int)
                )
            },
            ratio,
        )
    };
    let mut out = Vec::new();
    for (variant, _) in flow::ENQUEUE {
        out.push(side_ratio(
            format!(
                "u, {variant}: distinct unique keys ≥ {}× plain enqueue",
                flow::UNIQUE_TARGET
            ),
            variant,
            flow::UNIQUE,
            flow::PLAIN,
            flow::UNIQUE_TARGET,
        ));
    }
    for (variant, _) in flow::BURN {
        out.push(side_ratio(
            format!(
                "u, {variant}: over 1,000 groups at concurrency 1 ≥ {}× the same queue without groups",
                flow::GROUPS_TARGET
            ),
            variant,
            flow::GROUPED,
            flow::UNGROUPED,
            flow::GROUPS_TARGET,
        ));
    }
    let limited = |r: &Run, v: &str| r.get(u, v, flow::LIMITED).cloned();
    out.push(j.target(
        &format!(
            "u: a queue limited to {} jobs/s with 8 waiting workers admits within {:.0}% of the limit",
            int(flow::LIMIT),
            flow::RATE_TOLERANCE * 100.0
        ),
        &[u],
        |r| Some(limited(r, flow::RATE)?.rate? / flow::LIMIT),
        |v| (v - 1.0).abs() <= flow::RATE_TOLERANCE,
        |r| {
            limited(r, flow::RATE).map_or("–".into(), |m| {
                format!(
                    "{} jobs in {:.1} s: {:.1} jobs/s",
                    int(m.jobs as f64),
                    m.seconds,
                    m.rate.unwrap_or(0.0)
                )
            })
        },
        |v| format!("{v:.3}× the limit"),
    ));
    out.push(j.target(
        "u: idle waiters (jobs queued, no token for them) issue no statements",
        &[u],
        |r| limited(r, flow::QUIET)?.statements_per_s,
        |v| v == 0.0,
        |r| {
            limited(r, flow::QUIET).map_or("–".into(), |m| {
                format!(
                    "{} statements and {} jobs admitted in {:.0} s, 8 pg_jobs workers waiting",
                    int(m.statements_per_s.unwrap_or(0.0) * m.seconds),
                    int(m.jobs as f64),
                    m.seconds
                )
            })
        },
        |v| format!("{v:.2}/s"),
    ));
    out
}

/// Issue 10: definer functions and row-level security cost little. Each variant of r as the
/// `jobs_worker` role acting for a tenant against the same work as the extension's owner.
fn issue10(j: &Judge) -> Vec<Target> {
    roles::VARIANTS
        .iter()
        .map(|&(variant, _)| {
            let rate = |r: &Run, c: &str| r.rate("r", variant, c);
            j.target(
                &format!(
                    "r, {variant}: as jobs_worker with a tenant ≥ {:.2}× as the owner without",
                    roles::TARGET
                ),
                &["r"],
                |r| Some(rate(r, roles::WORKER)? / rate(r, roles::OWNER)?),
                |v| v >= roles::TARGET,
                |r| {
                    format!(
                        "jobs_worker + tenant {}/s vs owner {}/s",
                        opt(rate(r, roles::WORKER), int),
                        opt(rate(r, roles::OWNER), int)
                    )
                },
                ratio,
            )
        })
        .collect()
}

/// Writes the target tables.
pub fn write(out: &mut String, view: &Run, raw: &Run) {
    let j = Judge { view, raw };
    out.push_str("## Targets\n\n");
    out.push_str(
        "Each figure is the mean over the runs of its scenario in this report; \"noise\" is half \
         the spread between those runs relative to the mean, then each run's own figure (a, b, \
         c and r run several times, alternating the order of the queues; see \
         [Run-to-run noise](#run-to-run-noise)). A figure that missed its target by less than \
         its noise says in how many runs it was met.\n\n",
    );
    for (title, targets) in [
        ("Issue 4 §4", issue4(&j)),
        ("Issue 18", issue18(&j)),
        ("Issue 19", issue19(&j)),
        ("Issue 10", issue10(&j)),
        ("Issue 11", issue11(&j)),
    ] {
        let _ = writeln!(out, "**{title}**\n");
        out.push_str("| target | measured | figure | noise | verdict |\n|---|---|---|---|---|\n");
        for t in targets {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                t.what, t.measured, t.value, t.noise, t.verdict
            );
        }
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::{issue10, soak_ends, soak_growth, Judge};
    use crate::results::{Measurement, Run, Sample};
    use crate::scenarios::roles;

    fn rate(scenario: &str, comparator: &str, repeat: u32, rate: f64) -> Measurement {
        let mut m = Measurement::new(scenario, "1 per claim", comparator);
        m.rate = Some(rate);
        m.repeat = repeat;
        m
    }

    fn two_runs() -> Run {
        Run {
            measurements: vec![
                rate("b", "pg_jobs", 0, 120.0),
                rate("b", "hand-rolled", 0, 100.0),
                rate("b", "hand-rolled", 1, 100.0),
                rate("b", "pg_jobs", 1, 140.0),
            ],
            ..Run::default()
        }
    }

    #[test]
    fn a_target_is_judged_on_the_mean_and_shows_each_run() {
        let raw = two_runs();
        let view = raw.merged();
        let j = Judge {
            view: &view,
            raw: &raw,
        };
        let met = j.rate_ratio("t", "b", "1 per claim", "hand-rolled", 1.3);
        assert_eq!(met.value, "1.30×");
        assert_eq!(met.noise, "±7.7% (1.20×, 1.40×)");
        assert_eq!(met.verdict, "**MET**");
        let missed = j.rate_ratio("t", "b", "1 per claim", "hand-rolled", 1.35);
        assert_eq!(missed.verdict, "**MISSED** (met in 1 of 2 runs)");
        let never = j.rate_ratio("t", "b", "1 per claim", "hand-rolled", 1.5);
        assert_eq!(never.verdict, "**MISSED**");
        let absent = j.rate_ratio("t", "b", "1 per claim", "pgmq", 1.0);
        assert_eq!(absent.verdict, "not measured");
    }

    #[test]
    fn roles_targets_divide_the_worker_by_the_owner_in_each_run() {
        let variant = roles::VARIANTS[2].0;
        let m = |comparator: &str, repeat: u32, rate: f64| {
            let mut m = Measurement::new("r", variant, comparator);
            m.rate = Some(rate);
            m.repeat = repeat;
            m
        };
        let raw = Run {
            measurements: vec![
                m(roles::OWNER, 0, 1000.0),
                m(roles::WORKER, 0, 900.0),
                m(roles::WORKER, 1, 1000.0),
                m(roles::OWNER, 1, 1000.0),
            ],
            ..Run::default()
        };
        let view = raw.merged();
        let j = Judge {
            view: &view,
            raw: &raw,
        };
        let targets = issue10(&j);
        assert_eq!(targets.len(), roles::VARIANTS.len());
        let t = &targets[2];
        // The mean rates: 950 / 1000.
        assert_eq!(t.value, "0.95×");
        assert_eq!(t.noise, "±5.3% (0.90×, 1.00×)");
        assert_eq!(t.verdict, "**MET**");
        assert_eq!(targets[0].verdict, "not measured");
    }

    #[test]
    fn a_figure_of_one_run_has_no_spread() {
        let raw = Run {
            measurements: vec![
                rate("h", "pg_jobs", 0, 150.0),
                rate("h", "hand-rolled", 0, 100.0),
            ],
            ..Run::default()
        };
        let view = raw.merged();
        let j = Judge {
            view: &view,
            raw: &raw,
        };
        let t = j.rate_ratio("t", "h", "1 per claim", "hand-rolled", 1.5);
        assert_eq!(
            (t.noise.as_str(), t.verdict.as_str()),
            ("one run", "**MET**")
        );
    }

    fn flow(variant: &str, comparator: &str, repeat: u32, rate: f64) -> Measurement {
        let mut m = Measurement::new("u", variant, comparator);
        m.rate = Some(rate);
        m.repeat = repeat;
        m
    }

    #[test]
    fn flow_control_is_judged_per_side_and_against_the_limit() {
        use crate::scenarios::flow;
        let (enqueue, _) = flow::ENQUEUE[0];
        let mut quiet = Measurement::new("u", flow::QUIET, flow::LIMITED);
        quiet.statements_per_s = Some(0.0);
        quiet.seconds = 30.0;
        let mut polled = quiet.clone();
        polled.statements_per_s = Some(0.1);
        polled.repeat = 1;
        let raw = Run {
            measurements: vec![
                flow(enqueue, flow::PLAIN, 0, 1000.0),
                flow(enqueue, flow::UNIQUE, 0, 860.0),
                flow(flow::RATE, flow::LIMITED, 0, 1010.0),
                quiet,
                flow(enqueue, flow::UNIQUE, 1, 740.0),
                flow(enqueue, flow::PLAIN, 1, 1000.0),
                flow(flow::RATE, flow::LIMITED, 1, 1040.0),
                polled,
            ],
            ..Run::default()
        };
        let view = raw.merged();
        let j = Judge {
            view: &view,
            raw: &raw,
        };
        let t = super::issue11(&j);
        assert_eq!(t.len(), 6);
        assert_eq!(
            (t[0].value.as_str(), t[0].verdict.as_str()),
            ("0.80×", "**MET**")
        );
        assert_eq!(t[0].noise, "±7.5% (0.86×, 0.74×)");
        assert_eq!(t[2].verdict, "not measured");
        // 1,025/s on average: 2.5% over, met, though one run at 4% over missed it.
        assert_eq!(t[4].value, "1.025× the limit");
        assert_eq!(t[4].verdict, "**MET**");
        // One statement in one of the two quiet windows is polling.
        assert_eq!(t[5].verdict, "**MISSED** (met in 1 of 2 runs)");
    }

    fn soak(tables: &[i64], rates: &[f64]) -> Measurement {
        let mut m = Measurement::new("s", "soak", "pg_jobs");
        m.first_p99_ms = Some(2.0);
        m.last_p99_ms = Some(2.1);
        m.samples = tables
            .iter()
            .zip(rates)
            .enumerate()
            .map(|(i, (&t, &r))| Sample {
                t: 10.0 * (i + 1) as f64,
                rate: r,
                table_bytes: t,
                index_bytes: vec![("i".into(), t / 2)],
                ..Sample::default()
            })
            .collect();
        m
    }

    #[test]
    fn the_soak_compares_its_ends_and_the_growth_of_its_second_half() {
        // 20 samples: the first and last tenth are two samples each.
        let mut tables: Vec<i64> = (1..=10).map(|i| i * 100).collect();
        tables.extend(std::iter::repeat_n(1000, 9));
        tables.push(1050);
        let mut rates = vec![100.0, 102.0];
        rates.extend(std::iter::repeat_n(100.0, 16));
        rates.extend([90.0, 92.0]);
        let m = soak(&tables, &rates);
        let ((first, p99_first), (last, p99_last)) = soak_ends(&m).unwrap();
        assert_eq!((first, last), (101.0, 91.0));
        assert_eq!((p99_first, p99_last), (2.0, 2.1));
        let (table, indexes) = soak_growth(&m).unwrap();
        assert!((table - 0.05).abs() < 1e-9, "{table}");
        assert!((indexes - 0.05).abs() < 1e-9, "{indexes}");
    }
}
