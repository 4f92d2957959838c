//! pg_jobs_bench: the load generator and report writer of the pg_jobs benchmark suite.
//!
//! `benchmarks/run` prepares everything (toolchain, extension, comparators, its own cluster)
//! and then runs this program, which runs every scenario (issue 4 §3, issues 18 and 19) for
//! every comparator on the same cluster, writes the figures to BENCH_JSON, the Markdown report
//! to BENCH_REPORT and its charts to `charts/` beside it. `pg_jobs_bench report` re-renders
//! the report and charts from BENCH_JSON without measuring anything.

mod comparators;
mod config;
mod counts;
mod cpu;
mod db;
mod format;
mod machine;
mod report;
mod results;
mod scenarios;

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};

use comparators::graphile::Graphile;
use comparators::handrolled::Handrolled;
use comparators::pg_jobs::PgJobs;
use comparators::pgmq::Pgmq;
use comparators::Comparator;
use config::Config;
use results::{Measurement, Run};
use scenarios::{Ctx, Runs};

fn main() -> ExitCode {
    let outcome = match std::env::args().nth(1).as_deref() {
        Some("report") => rerender().map(|()| ExitCode::SUCCESS),
        Some("counts") => count(),
        None | Some("run") => measure().map(|()| ExitCode::SUCCESS),
        Some(other) => Err(anyhow::anyhow!(
            "unknown command {other:?}: use run (default), counts or report"
        )),
    };
    outcome.unwrap_or_else(|e| {
        eprintln!("pg_jobs_bench: {e:#}");
        ExitCode::FAILURE
    })
}

/// The exit status of a counts run whose repetitions did not agree within ±2%.
const DRIFTED: u8 = 3;

/// Measures the counts per operation on the counts cluster, writes them to BENCH_COUNTS_JSON
/// and prints their table; fails with [`DRIFTED`] when a figure's repetitions disagree.
fn count() -> Result<ExitCode> {
    let path = counts_path()?;
    let counts = counts::run()?;
    std::fs::write(&path, serde_json::to_string_pretty(&counts)?)
        .with_context(|| format!("writing {}", path.display()))?;
    println!("{}", report::counts_section(&counts));
    eprintln!("wrote {}", path.display());
    let drift = counts::drifting(&counts);
    if drift.is_empty() && counts.rows.iter().all(|r| r.missing.is_none()) {
        return Ok(ExitCode::SUCCESS);
    }
    for d in &drift {
        eprintln!("pg_jobs_bench: repetitions disagree: {d}");
    }
    for r in counts.rows.iter().filter(|r| r.missing.is_some()) {
        eprintln!("pg_jobs_bench: {} · {} not measured", r.operation, r.queue);
    }
    Ok(ExitCode::from(DRIFTED))
}

/// Where the counts go (BENCH_COUNTS_JSON).
fn counts_path() -> Result<std::path::PathBuf> {
    std::env::var("BENCH_COUNTS_JSON")
        .map(Into::into)
        .context("BENCH_COUNTS_JSON is not set (run the counts through benchmarks/run counts)")
}

/// The counts this run of the suite measured before its scenarios: BENCH_COUNTS_JSON, which
/// benchmarks/run sets only when it measured them in the same invocation.
fn counts_of_this_run() -> Result<Option<results::Counts>> {
    let Ok(path) = std::env::var("BENCH_COUNTS_JSON") else {
        return Ok(None);
    };
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading the counts in {path}"))?;
    Ok(Some(
        serde_json::from_str(&text).with_context(|| format!("{path} does not hold counts"))?,
    ))
}

/// Renders the report and its charts again from the JSON of the run, measuring nothing.
fn rerender() -> Result<()> {
    let (report, json) = config::report_paths();
    let text = std::fs::read_to_string(&json).with_context(|| {
        format!(
            "reading {} (set BENCH_JSON, or BENCH_REPORT beside it)",
            json.display()
        )
    })?;
    let run: Run = serde_json::from_str(&text)
        .with_context(|| format!("{} is not the JSON of a run", json.display()))?;
    report::write_charts(&config::charts_dir(&report), &run)?;
    std::fs::write(&report, report::render(&run))
        .with_context(|| format!("writing {}", report.display()))?;
    eprintln!("wrote {}", report.display());
    Ok(())
}

fn measure() -> Result<()> {
    let cfg = Config::from_env()?;
    let server = cpu::ServerCpu::new(&cfg.data_dir)?;
    let ctx = Ctx { cfg, server };
    let mut admin = db::connect(&ctx.cfg.admin_dsn)?;
    let started = Instant::now();
    let machine = machine::describe(&mut admin, &ctx.cfg)?;

    // Every comparator runs every scenario against the same cluster, one after another.
    let all: Vec<Box<dyn Comparator>> = vec![
        Box::new(PgJobs::new("pg_jobs", "10 seconds")),
        Box::new(Handrolled),
        Box::new(Pgmq),
        Box::new(Graphile::new(&ctx.cfg)),
    ];
    let keys = ["pg_jobs", "handrolled", "pgmq", "graphile"];
    let queues: Vec<&dyn Comparator> = all
        .iter()
        .zip(keys)
        .filter(|(_, key)| ctx.cfg.wants(key))
        .map(|(c, _)| c.as_ref())
        .collect();
    let backwards: Vec<&dyn Comparator> = queues.iter().rev().copied().collect();
    let mut run = Run {
        machine,
        waiting: queues
            .iter()
            .map(|c| (c.name().to_owned(), c.waiting_mode()))
            .collect(),
        counts: counts_of_this_run()?,
        ..Run::default()
    };

    let mut results: Vec<Measurement> = Vec::new();
    for scenario in &scenarios::ALL {
        let wanted = scenario.only.is_none_or(|only| ctx.cfg.wants(only));
        if !ctx.cfg.runs(scenario.letter) || !wanted {
            continue;
        }
        let (letter, title) = (scenario.letter, scenario.title);
        match scenario.runs {
            Runs::Once(run) => {
                eprintln!("\n== {letter}. {title}");
                results.extend(run(&ctx, &mut admin, &queues));
            }
            Runs::EachQueue(run) => {
                eprintln!("\n== {letter}. {title}");
                for c in &queues {
                    results.extend(run(&ctx, &mut admin, *c));
                }
            }
            Runs::EachQueueRepeated(run) => {
                let repeats = ctx.cfg.repeats;
                for repeat in 0..repeats {
                    eprintln!("\n== {letter}. {title} (run {} of {repeats})", repeat + 1);
                    // Every other run takes the queues in reverse order, so that none always
                    // runs first (or last) after a change of scenario.
                    let order = if repeat % 2 == 0 { &queues } else { &backwards };
                    for c in order {
                        results.extend(run(&ctx, &mut admin, *c).into_iter().map(|mut m| {
                            m.repeat = repeat;
                            m
                        }));
                    }
                }
            }
        }
        // Keep what is measured so far, should a later scenario kill the run.
        save(&ctx.cfg, &mut run, started, &results)?;
    }

    save(&ctx.cfg, &mut run, started, &results)?;
    eprintln!(
        "\nwrote {} and {} ({:.0} minutes)",
        ctx.cfg.report.display(),
        ctx.cfg.json.display(),
        run.minutes
    );
    Ok(())
}

/// Writes the figures so far to the JSON file and the report.
fn save(cfg: &Config, run: &mut Run, started: Instant, results: &[Measurement]) -> Result<()> {
    run.load_after = machine::load_average();
    run.minutes = started.elapsed().as_secs_f64() / 60.0;
    run.measurements = results.to_vec();
    std::fs::write(&cfg.json, serde_json::to_string_pretty(&run)?)
        .with_context(|| format!("writing {}", cfg.json.display()))?;
    report::write_charts(&cfg.charts_dir(), run)?;
    std::fs::write(&cfg.report, report::render(run))
        .with_context(|| format!("writing {}", cfg.report.display()))?;
    Ok(())
}
