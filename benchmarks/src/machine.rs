//! What the report says about the machine and the server: CPU, cores, memory, kernel, OS,
//! PostgreSQL version and its non-default settings, the versions of the comparators, and the
//! load average (other work on the machine makes absolute figures noisy).

use std::fs;

use anyhow::Result;
use postgres::Client;
use serde::{Deserialize, Serialize};

use crate::config::Config;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Machine {
    /// (what, value) lines, in report order.
    pub facts: Vec<(String, String)>,
    /// PostgreSQL settings not at their built-in defaults, as (name, value).
    pub settings: Vec<(String, String)>,
    /// When the run started (UTC) and the load average then.
    pub started: String,
    pub load_before: String,
}

fn first_line_with(path: &str, key: &str) -> Option<String> {
    let text = fs::read_to_string(path).ok()?;
    text.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_once([':', '=']))
        .map(|(_, v)| v.trim().trim_matches('"').to_owned())
}

pub fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Settings that initdb writes for the locale and time zone: not performance-relevant.
const NOISE: &[&str] = &[
    "DateStyle",
    "TimeZone",
    "log_timezone",
    "default_text_search_config",
    "dynamic_shared_memory_type",
    "application_name",
    "client_encoding",
    "transaction_deferrable",
    "transaction_isolation",
    "transaction_read_only",
];

pub fn describe(admin: &mut Client, cfg: &Config) -> Result<Machine> {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_kb: f64 = first_line_with("/proc/meminfo", "MemTotal")
        .and_then(|v| v.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0.0);
    let version: String = admin.query_one("SELECT version()", &[])?.get(0);
    let pg_jobs: Option<String> = admin
        .query_opt(
            "SELECT extversion FROM pg_extension WHERE extname = 'pg_jobs'",
            &[],
        )?
        .map(|r| r.get(0));
    let started: String = admin
        .query_one(
            "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI \"UTC\"')",
            &[],
        )?
        .get(0);
    let facts = vec![
        (
            "CPU".into(),
            first_line_with("/proc/cpuinfo", "model name").unwrap_or_else(|| "?".into()),
        ),
        ("cores".into(), cores.to_string()),
        (
            "memory".into(),
            format!("{:.1} GiB", mem_kb / 1024.0 / 1024.0),
        ),
        (
            "kernel".into(),
            fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_owned(),
        ),
        (
            "OS".into(),
            first_line_with("/etc/os-release", "PRETTY_NAME").unwrap_or_else(|| "?".into()),
        ),
        ("PostgreSQL".into(), version),
        (
            "pg_jobs".into(),
            format!(
                "{} (git {})",
                pg_jobs.unwrap_or_else(|| "?".into()),
                std::env::var("BENCH_GIT").unwrap_or_else(|_| "?".into())
            ),
        ),
        (
            "pgmq".into(),
            format!(
                "{} (SQL embedded in the pgmq crate, installed as plain SQL)",
                cfg.pgmq_version
            ),
        ),
        (
            "Graphile Worker".into(),
            format!("{} on Node {}", cfg.graphile_version, cfg.node_version),
        ),
        ("scale".into(), cfg.scale.name.into()),
    ];
    let mut settings = Vec::new();
    for row in admin.query(
        "SELECT name, setting, coalesce(unit, '') FROM pg_settings
          WHERE source NOT IN ('default', 'override', 'client', 'session')
            AND name NOT LIKE 'lc\\_%'
          ORDER BY name",
        &[],
    )? {
        let name: String = row.get(0);
        if NOISE.contains(&name.as_str()) {
            continue;
        }
        let (setting, unit): (String, String) = (row.get(1), row.get(2));
        settings.push((name, pretty_setting(&setting, &unit)));
    }
    Ok(Machine {
        facts,
        settings,
        started,
        load_before: load_average(),
    })
}

/// `131072` with unit `8kB` reads better as `1 GB`.
fn pretty_setting(setting: &str, unit: &str) -> String {
    let kb = match unit {
        "8kB" => 8.0,
        "kB" => 1.0,
        "MB" => 1024.0,
        _ => return format!("{setting}{unit}"),
    };
    match setting.parse::<f64>() {
        Ok(v) if v >= 0.0 => {
            let kb = v * kb;
            if kb >= 1024.0 * 1024.0 && (kb / 1024.0 / 1024.0).fract() == 0.0 {
                format!("{} GB", kb / 1024.0 / 1024.0)
            } else if kb >= 1024.0 && (kb / 1024.0).fract() == 0.0 {
                format!("{} MB", kb / 1024.0)
            } else {
                format!("{kb} kB")
            }
        }
        _ => format!("{setting}{unit}"),
    }
}
