//! Instructions a backend executed, from the files callgrind writes.
//!
//! The counts cluster's postmaster runs under `valgrind --tool=callgrind
//! --dump-before=pg_sleep --callgrind-out-file=DIR/callgrind.out.%p` (benchmarks/run starts
//! it), so every backend is counted, and each time a backend enters `pg_sleep` callgrind writes
//! what the backend executed since its last dump to `callgrind.out.<pid>.<n>` (n = 1, 2, ...).
//! A measured session marks its stretch with `SELECT pg_sleep(0)`: what lies between two
//! markers is in one file.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The file of the `part`-th dump of backend `pid`.
pub fn part_file(dir: &Path, pid: i32, part: u32) -> PathBuf {
    dir.join(format!("callgrind.out.{pid}.{part}"))
}

/// The instructions of one dump: its `summary:` line (callgrind counts one event, Ir).
pub fn instructions(file: &Path) -> Result<u64> {
    let text = std::fs::read_to_string(file).with_context(|| {
        format!(
            "reading {} (is the counts cluster's postmaster running under callgrind with \
             --dump-before=pg_sleep, writing there?)",
            file.display()
        )
    })?;
    summary(&text).with_context(|| format!("{} has no summary: line", file.display()))
}

fn summary(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("summary:"))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::summary;

    #[test]
    fn reads_the_summary_of_a_dump() {
        let text = "# callgrind format\nversion: 1\npart: 3\n\nevents: Ir\nsummary: 4466309\n\nfn=(1) main\n0 5\ntotals: 4466309\n";
        assert_eq!(summary(text), Some(4_466_309));
        assert_eq!(summary("events: Ir\n"), None);
    }
}
