//! WAL records by type between two positions of the log: `pg_waldump --stats=record`, read
//! from the cluster's `pg_wal`.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

/// One record type's line of the statistics.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordType {
    /// "Heap/INSERT", "Btree/SPLIT_L" and so on.
    pub name: String,
    pub count: u64,
    /// Bytes of the records, of the full-page images they carry, and both.
    pub record_bytes: u64,
    pub fpi_bytes: u64,
    pub combined_bytes: u64,
}

/// Record types other processes write on their own schedule, whatever the measured session
/// does: the standby snapshots the background writer and checkpoints log, and checkpoints.
/// They are left out of a stretch's counts, so a snapshot falling into one run and not the
/// next does not move its figures.
pub fn not_the_sessions(name: &str) -> bool {
    name.starts_with("Standby/") || name.starts_with("XLOG/CHECKPOINT")
}

/// Runs `pg_waldump --stats=record` over [start, end) of the WAL in `wal_dir`.
pub fn stats(waldump: &Path, wal_dir: &Path, start: &str, end: &str) -> Result<Vec<RecordType>> {
    let output = Command::new(waldump)
        .arg("--stats=record")
        .arg("--path")
        .arg(wal_dir)
        .args(["--start", start, "--end", end])
        .output()
        .with_context(|| format!("running {}", waldump.display()))?;
    if !output.status.success() {
        bail!(
            "pg_waldump from {start} to {end} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    parse(&String::from_utf8_lossy(&output.stdout))
}

/// Reads the per-type lines of `pg_waldump --stats=record`: the type, its count, then record,
/// full-page image and combined sizes, each followed by its percentage in parentheses.
pub fn parse(text: &str) -> Result<Vec<RecordType>> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(name) = words.next() else {
            continue;
        };
        if !name.contains('/') {
            continue;
        }
        // The numbers of the line, without the percentages (a "(" word, or "(12.34)").
        let numbers: Vec<u64> = words
            .filter(|w| !w.starts_with('(') && !w.ends_with(')'))
            .map(|w| {
                w.parse::<u64>()
                    .with_context(|| format!("unexpected pg_waldump line: {line:?}"))
            })
            .collect::<Result<_>>()?;
        let [count, record_bytes, fpi_bytes, combined_bytes] = numbers[..] else {
            bail!("unexpected pg_waldump line: {line:?}");
        };
        out.push(RecordType {
            name: name.to_owned(),
            count,
            record_bytes,
            fpi_bytes,
            combined_bytes,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{not_the_sessions, parse};

    const STATS: &str = "WAL statistics between 0/193BE28 and 0/1940D68:
Type                                           N      (%)          Record size      (%)             FPI size      (%)        Combined size      (%)
----                                           -      ---          -----------      ---             --------      ---        -------------      ---
XLOG/CHECKPOINT_ONLINE                         1 (  2.56)                  114 (  3.88)                    0 (  0.00)                  114 (  0.57)
Transaction/COMMIT                             6 ( 15.38)                  204 (  6.94)                    0 (  0.00)                  204 (  1.02)
Standby/RUNNING_XACTS                          2 (  5.13)                  100 (  3.40)                    0 (  0.00)                  100 (  0.50)
Heap2/PRUNE                                    2 (  5.13)                  117 (  3.98)                 6620 ( 38.60)                 6737 ( 33.53)
Btree/INSERT_LEAF                             19 ( 48.72)                 1343 ( 45.70)                 7920 ( 46.18)                 9263 ( 46.11)
                                        --------                      --------                      --------                      --------
Total                                         39                          2939 [14.63%]                17152 [85.37%]                20091 [100%]
";

    #[test]
    fn reads_each_record_type_and_its_sizes() {
        let types = parse(STATS).unwrap();
        let names: Vec<&str> = types.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "XLOG/CHECKPOINT_ONLINE",
                "Transaction/COMMIT",
                "Standby/RUNNING_XACTS",
                "Heap2/PRUNE",
                "Btree/INSERT_LEAF"
            ]
        );
        let leaf = &types[4];
        assert_eq!(
            (
                leaf.count,
                leaf.record_bytes,
                leaf.fpi_bytes,
                leaf.combined_bytes
            ),
            (19, 1343, 7920, 9263)
        );
        let kept: Vec<&str> = names.into_iter().filter(|n| !not_the_sessions(n)).collect();
        assert_eq!(
            kept,
            ["Transaction/COMMIT", "Heap2/PRUNE", "Btree/INSERT_LEAF"]
        );
    }

    #[test]
    fn a_line_it_cannot_read_is_an_error() {
        assert!(parse("Heap/INSERT 3 ( 1.0) 12").is_err());
    }
}
