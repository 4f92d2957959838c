//! The report's section of scenario t: a run of the schedules against the batch enqueue of the
//! same jobs.

use std::fmt::Write;

use crate::results::{Measurement, Run};

/// The section of t, when it ran.
pub fn report(out: &mut String, run: &Run) {
    let rows: Vec<&Measurement> = run
        .measurements
        .iter()
        .filter(|m| m.scenario == "t")
        .collect();
    if rows.is_empty() {
        return;
    }
    out.push_str("## t. Schedules: a run with 1,000 of 10,000 schedules due\n\n");
    out.push_str("| what | jobs/s | note |\n|---|---|---|\n");
    for m in rows {
        let rate = m.rate.map_or_else(|| "—".to_owned(), |r| format!("{r:.0}"));
        let note = m
            .note
            .clone()
            .or_else(|| m.missing.clone())
            .unwrap_or_default();
        let _ = writeln!(out, "| {} | {rate} | {note} |", m.variant);
    }
    out.push('\n');
}
