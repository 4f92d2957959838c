//! The Markdown the report's sections share: table headers, rows of one measurement (or why
//! it is missing), cells made safe for a table, and the throughput table most scenarios use.

use std::fmt::Write;

use crate::format::{cpu, int, opt};
use crate::results::{Measurement, Run};

/// The queue the report is about; the others are its comparators.
pub const PG_JOBS: &str = "pg_jobs";
/// The comparators, as the scenarios name them.
pub const OTHERS: [&str; 3] = ["hand-rolled", "pgmq", "Graphile Worker"];

/// Text safe for one Markdown table cell: its first line, pipes escaped, at most 200 chars.
pub fn cell(text: &str) -> String {
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

/// The measurement's note as a table cell.
pub fn note_cell(m: &Measurement) -> String {
    cell(m.note.as_deref().unwrap_or_default())
}

/// Starts a Markdown table with `columns`.
pub fn table_header(out: &mut String, columns: &[&str]) {
    let _ = writeln!(out, "| {} |", columns.join(" | "));
    let _ = writeln!(out, "|{}", "---|".repeat(columns.len()));
}

/// Writes one row of a table `width` columns wide: the `lead` cells, then `m`'s figures from
/// `figures`, or, when `m` is missing, a dash per figure and why in the last column.
pub fn measurement_row(
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

/// The table of one throughput variant: each comparator's jobs, time, rate, CPU per 1,000
/// jobs, empty claims and notes.
pub fn throughput_table(out: &mut String, run: &Run, scenario: &str, variant: &str) {
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
