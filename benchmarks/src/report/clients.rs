//! The report's section of scenario l: the client libraries against the load generator's SQL
//! loop, directly and through PgBouncer.

use std::fmt::Write;

use crate::format::int;
use crate::results::Run;
use crate::scenarios::clients::{DIRECT, SQL_LOOP};

/// The section of l: each library against the SQL loop (its targets are in the targets
/// table).
pub fn report(out: &mut String, run: &Run) {
    let rows: Vec<_> = run
        .measurements
        .iter()
        .filter(|m| m.scenario == "l")
        .collect();
    if rows.is_empty() {
        return;
    }
    let rate = |variant: &str, c: &str| {
        rows.iter()
            .find(|m| m.variant == variant && m.comparator == c && m.missing.is_none())
            .and_then(|m| m.rate)
    };
    out.push_str("## l. Client libraries: burn-down of 20,000 no-op jobs, concurrency 8\n\n");
    out.push_str(
        "Each library's worker with its defaults (one claim waiting for as many jobs as it has free slots, \
         jobs without a result completed by `jobs_complete_batch` as they finish, heartbeats every lease/3), \
         in a process of its own, against the load \
         generator's SQL loop (8 sessions, `jobs_claim(n => 1)` + `jobs_complete`), in one run. Client CPU is \
         the library process's (or the load generator's); server and clients share the cores.\n\n",
    );
    let base = rate(DIRECT, SQL_LOOP);
    let _ = writeln!(
        out,
        "| client | connection | jobs | seconds | jobs/s | ÷ SQL loop | server CPU s / 1,000 jobs | client CPU s / 1,000 jobs | notes |\n|---|---|---|---|---|---|---|---|---|"
    );
    for m in rows {
        if let Some(why) = &m.missing {
            let _ = writeln!(
                out,
                "| {} | {} | – | – | – | – | – | – | {} |",
                m.comparator,
                m.variant,
                why.replace('|', "\\|")
            );
            continue;
        }
        let cell = |v: Option<f64>| v.map_or_else(|| "–".into(), |v| format!("{v:.3}"));
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.1} | {} | {} | {} | {} | {} |",
            m.comparator,
            m.variant,
            int(m.jobs as f64),
            m.seconds,
            m.rate.map_or_else(|| "–".into(), int),
            m.rate
                .zip(base)
                .map_or_else(|| "–".into(), |(a, b)| format!("{:.2}×", a / b)),
            cell(m.server_cpu_per_1000()),
            cell(m.client_cpu_per_1000()),
            m.note.clone().unwrap_or_default()
        );
    }
    out.push('\n');
}
