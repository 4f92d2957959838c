//! The report's section of scenario u, flow control: unique keys and groups beside the same
//! work without them, and the rate-limited queue.

use std::fmt::Write;

use crate::format::int;
use crate::results::{Measurement, Run};
use crate::scenarios::flow::{
    BURN, ENQUEUE, GROUPED, LIMITED, PLAIN, QUIET, RATE, SCENARIO, UNGROUPED, UNIQUE,
};

/// The section of u.
pub fn report(out: &mut String, run: &Run) {
    if !run.measurements.iter().any(|m| m.scenario == SCENARIO) {
        return;
    }
    let get = |variant: &str, side: &str| {
        run.measurements
            .iter()
            .find(|m| m.scenario == SCENARIO && m.variant == variant && m.comparator == side)
    };
    let figure = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or("–".to_owned(), f);
    let why = |m: &Measurement| {
        m.missing
            .as_deref()
            .or(m.note.as_deref())
            .unwrap_or("")
            .replace('|', "\\|")
    };
    out.push_str("## u. Flow control (issue 11)\n\n");
    out.push_str(
        "pg_jobs only. Unique keys and groups each beside the same work without them, 8 \
         sessions, the two sides in alternating order over the repetitions (figures are their \
         means); then a rate-limited queue with 8 waiting workers.\n\n",
    );
    out.push_str("| variant | side | jobs | seconds | jobs/s | server CPU s / 1,000 jobs | empty claims | notes |\n|---|---|---|---|---|---|---|---|\n");
    let pairs: Vec<(&str, [&str; 2])> = ENQUEUE
        .iter()
        .map(|(v, _)| (*v, [PLAIN, UNIQUE]))
        .chain(BURN.iter().map(|(v, _)| (*v, [UNGROUPED, GROUPED])))
        .collect();
    for (variant, sides) in &pairs {
        for side in sides {
            let Some(m) = get(variant, side) else {
                continue;
            };
            let _ = writeln!(
                out,
                "| {variant} | {side} | {} | {:.1} | {} | {} | {} | {} |",
                int(m.jobs as f64),
                m.seconds,
                figure(m.rate, &|r| int(r)),
                figure(m.server_cpu_per_1000(), &|c| format!("{c:.3}")),
                m.empty_claims.map_or("–".to_owned(), |e| int(e as f64)),
                why(m)
            );
        }
    }
    out.push('\n');
    if let (Some(rate), Some(quiet)) = (get(RATE, LIMITED), get(QUIET, LIMITED)) {
        out.push_str(
            "Rate limit. Statements: pg_stat_statements calls by the workers' role, nested \
             statements included (track = 'all' for that role); commits: the whole bench \
             database.\n\n",
        );
        out.push_str("| window | seconds | jobs admitted | admitted/s | statements/s | statements per admitted job | commits/s | server CPU | notes |\n|---|---|---|---|---|---|---|---|---|\n");
        for m in [rate, quiet] {
            let per_job = match (m.statements_per_s, m.jobs) {
                (Some(s), j) if j > 0 => format!("{:.2}", s * m.seconds / j as f64),
                _ => "–".to_owned(),
            };
            let _ = writeln!(
                out,
                "| {} | {:.1} | {} | {} | {} | {per_job} | {} | {} | {} |",
                m.variant,
                m.seconds,
                int(m.jobs as f64),
                figure((m.seconds > 0.0).then(|| m.jobs as f64 / m.seconds), &|r| {
                    format!("{r:.1}")
                }),
                figure(m.statements_per_s, &|s| format!("{s:.2}")),
                figure(m.commits_per_s, &|c| format!("{c:.2}")),
                figure(m.server_cpu_s, &|c| format!(
                    "{:.1}% of a core",
                    100.0 * c / m.seconds.max(1e-9)
                )),
                why(m)
            );
        }
        out.push('\n');
    }
}
