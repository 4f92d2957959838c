//! pg_jobs_bench: the load generator and report writer of the pg_jobs benchmark suite.
//!
//! `benchmarks/run` prepares everything (toolchain, extension, comparators, its own cluster)
//! and then runs this program, which runs every scenario (issue 4 §3, issues 18 and 19) for
//! every comparator on the same cluster, writes the figures to BENCH_JSON, the Markdown report
//! to BENCH_REPORT and its charts to `charts/` beside it. `pg_jobs_bench report` re-renders
//! the report and charts from BENCH_JSON without measuring anything.

mod comparators;
mod config;
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
use postgres::Client;

use comparators::graphile::Graphile;
use comparators::handrolled::Handrolled;
use comparators::pg_jobs::PgJobs;
use comparators::pgmq::Pgmq;
use comparators::Comparator;
use config::Config;
use results::{Measurement, Run};
use scenarios::{
    backlog, burndown, enqueue, flow, idempotency, idle, kinds, latency, long, pgbench, roles,
    scaling, snapshot, soak, vacuum, wal, Ctx,
};

fn main() -> ExitCode {
    let outcome = match std::env::args().nth(1).as_deref() {
        Some("report") => rerender(),
        None | Some("run") => measure(),
        Some(other) => Err(anyhow::anyhow!(
            "unknown command {other:?}: use run (default) or report"
        )),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pg_jobs_bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn rerender() -> Result<()> {
    let cfg = Config::from_env()?;
    let text = std::fs::read_to_string(&cfg.json)
        .with_context(|| format!("reading {}", cfg.json.display()))?;
    let run: Run = serde_json::from_str(&text)?;
    report::write_charts(&cfg.charts_dir(), &run)?;
    std::fs::write(&cfg.report, report::render(&run))?;
    eprintln!("wrote {}", cfg.report.display());
    Ok(())
}

type Scenario = fn(&Ctx, &mut Client, &dyn Comparator) -> Vec<Measurement>;

/// Scenarios run `BENCH_REPEATS` times, so that the report shows their run-to-run noise: the
/// ones most targets come from, and short enough to repeat (r repeats too; it runs on its own).
const REPEATED: &str = "abc";

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
    let comparators: Vec<&dyn Comparator> = all
        .iter()
        .zip(keys)
        .filter(|(_, key)| ctx.cfg.wants(key))
        .map(|(c, _)| c.as_ref())
        .collect();
    let mut waiting = Vec::new();
    for c in &comparators {
        waiting.push((c.name().to_owned(), c.waiting_mode()));
    }

    let mut results: Vec<Measurement> = Vec::new();
    if ctx.cfg.runs('p') {
        eprintln!("\n== pgbench: the machine's commit-rate ceiling");
        results.push(pgbench::run(&ctx, &mut admin));
    }
    let scenarios: [(char, &str, Scenario); 9] = [
        ('a', "enqueue", enqueue::run),
        ('b', "burn-down", burndown::run),
        ('c', "pickup latency", latency::run),
        ('d', "backlog", backlog::run),
        ('e', "held snapshot", snapshot::run),
        ('f', "WAL and commits per job", wal::run),
        ('h', "long burn-down", long::run),
        ('k', "kinds-filtered claims", kinds::run),
        ('w', "scaling curve", scaling::run),
    ];
    let backwards: Vec<&dyn Comparator> = comparators.iter().rev().copied().collect();
    for (letter, title, run) in scenarios {
        if !ctx.cfg.runs(letter) {
            continue;
        }
        let repeats = if REPEATED.contains(letter) {
            ctx.cfg.repeats
        } else {
            1
        };
        for repeat in 0..repeats {
            if repeats > 1 {
                eprintln!("\n== {letter}. {title} (run {} of {repeats})", repeat + 1);
            } else {
                eprintln!("\n== {letter}. {title}");
            }
            // Every other run takes the queues in reverse order, so that none always runs
            // first (or last) after a change of scenario.
            let order = if repeat % 2 == 0 {
                &comparators
            } else {
                &backwards
            };
            for c in order {
                results.extend(run(&ctx, &mut admin, *c).into_iter().map(|mut m| {
                    m.repeat = repeat;
                    m
                }));
            }
        }
        // Keep what is measured so far, should a later scenario kill the run.
        save(&ctx.cfg, &machine, &waiting, started, &results)?;
    }
    if ctx.cfg.runs('r') && ctx.cfg.wants("pg_jobs") {
        for repeat in 0..ctx.cfg.repeats {
            eprintln!(
                "\n== r. roles and tenants cost (run {} of {})",
                repeat + 1,
                ctx.cfg.repeats
            );
            // r numbers its measurements itself: each repetition measures every variant in
            // two pairs.
            results.extend(roles::run(&ctx, &mut admin, repeat));
        }
        save(&ctx.cfg, &machine, &waiting, started, &results)?;
    }
    if ctx.cfg.runs('g') {
        eprintln!("\n== g. idle");
        results.push(idle::baseline(&ctx, &mut admin));
        // pg_jobs waits longer than the window, so any statement in it would come from polling
        // inside the wait; the 10-second loop shows the cost of re-issuing the wait.
        let long_wait = PgJobs::new("pg_jobs", "60 seconds");
        let loop_wait = PgJobs::new("pg_jobs (10 s wait loop)", "10 seconds");
        let mut idle_set: Vec<&dyn Comparator> = Vec::new();
        for c in &comparators {
            if c.name() == "pg_jobs" {
                idle_set.push(&long_wait);
                idle_set.push(&loop_wait);
            } else {
                idle_set.push(*c);
            }
        }
        for c in idle_set {
            results.extend(idle::run(&ctx, &mut admin, c));
        }
    }
    if ctx.cfg.runs('l') {
        eprintln!("\n== l. client libraries");
        results.extend(scenarios::clients::run(&ctx, &mut admin));
        save(&ctx.cfg, &machine, &waiting, started, &results)?;
    }
    if ctx.cfg.runs('i') {
        eprintln!("\n== i. idempotency records");
        results.extend(idempotency::run(&ctx, &mut admin));
        save(&ctx.cfg, &machine, &waiting, started, &results)?;
    }
    if ctx.cfg.runs('v') {
        eprintln!("\n== v. dead rows held back while workers wait");
        results.push(vacuum::baseline(&ctx, &mut admin));
        for c in &comparators {
            results.extend(vacuum::run(&ctx, &mut admin, *c));
        }
        save(&ctx.cfg, &machine, &waiting, started, &results)?;
    }
    if ctx.cfg.runs('t') && ctx.cfg.wants("pg_jobs") {
        eprintln!("\n== t. schedules");
        results.extend(scenarios::schedules::run(&ctx, &mut admin));
        save(&ctx.cfg, &machine, &waiting, started, &results)?;
    }
    if ctx.cfg.runs('u') && ctx.cfg.wants("pg_jobs") {
        eprintln!("\n== u. flow control");
        results.extend(flow::run(&ctx, &mut admin));
        save(&ctx.cfg, &machine, &waiting, started, &results)?;
    }
    if ctx.cfg.runs('s') {
        eprintln!("\n== s. soak");
        results.extend(soak::run(&ctx, &mut admin, &comparators));
    }

    let run = save(&ctx.cfg, &machine, &waiting, started, &results)?;
    eprintln!(
        "\nwrote {} and {} ({:.0} minutes)",
        ctx.cfg.report.display(),
        ctx.cfg.json.display(),
        run.minutes
    );
    Ok(())
}

/// Writes the figures so far to the JSON file and the report.
fn save(
    cfg: &Config,
    machine: &machine::Machine,
    waiting: &[(String, String)],
    started: Instant,
    results: &[Measurement],
) -> Result<Run> {
    let run = Run {
        machine: machine.clone(),
        load_after: machine::load_average(),
        minutes: started.elapsed().as_secs_f64() / 60.0,
        waiting: waiting.to_vec(),
        measurements: results.to_vec(),
    };
    std::fs::write(&cfg.json, serde_json::to_string_pretty(&run)?)
        .with_context(|| format!("writing {}", cfg.json.display()))?;
    report::write_charts(&cfg.charts_dir(), &run)?;
    std::fs::write(&cfg.report, report::render(&run))
        .with_context(|| format!("writing {}", cfg.report.display()))?;
    Ok(run)
}
