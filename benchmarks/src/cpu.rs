//! CPU time from /proc: the bench cluster's server processes (the postmaster, its live
//! children, and the children that already exited, which the kernel adds to the postmaster's
//! cutime/cstime once reaped) and single processes such as the load generator or Node.

use std::fs;
use std::path::Path;

use anyhow::{Context, Result};

fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// The fields of /proc/PID/stat after the command name (which may hold spaces and parens):
/// index 0 is the state (field 3), so field N is at index N - 3.
fn stat_fields(pid: i32) -> Option<Vec<u64>> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 2..];
    Some(
        rest.split_whitespace()
            .map(|f| f.parse::<i64>().map_or(0, |v| v.max(0) as u64))
            .collect(),
    )
}

const PPID: usize = 4 - 3;
const UTIME: usize = 14 - 3;
const STIME: usize = 15 - 3;
const CUTIME: usize = 16 - 3;
const CSTIME: usize = 17 - 3;

/// CPU seconds (user + system) one process has used so far; 0 when it is gone.
pub fn process_seconds(pid: i32) -> f64 {
    stat_fields(pid).map_or(0.0, |f| (f[UTIME] + f[STIME]) as f64 / ticks_per_second())
}

/// CPU seconds this load generator has used so far (all its threads).
pub fn own_seconds() -> f64 {
    process_seconds(std::process::id() as i32)
}

/// The CPU time of one PostgreSQL cluster's processes.
pub struct ServerCpu {
    postmaster: i32,
}

impl ServerCpu {
    /// Finds the cluster's postmaster through `DATA/postmaster.pid`.
    pub fn new(data_dir: &Path) -> Result<ServerCpu> {
        let file = data_dir.join("postmaster.pid");
        let text = fs::read_to_string(&file).with_context(|| {
            format!("reading {} (is the bench cluster running?)", file.display())
        })?;
        let postmaster = text
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .with_context(|| format!("no pid in {}", file.display()))?;
        Ok(ServerCpu { postmaster })
    }

    /// CPU seconds used so far by the postmaster, every live child, and every reaped child.
    pub fn seconds(&self) -> f64 {
        let mut ticks = 0u64;
        if let Some(f) = stat_fields(self.postmaster) {
            ticks += f[UTIME] + f[STIME] + f[CUTIME] + f[CSTIME];
        }
        if let Ok(entries) = fs::read_dir("/proc") {
            for entry in entries.flatten() {
                let Some(pid) = entry
                    .file_name()
                    .to_str()
                    .and_then(|s| s.parse::<i32>().ok())
                else {
                    continue;
                };
                if let Some(f) = stat_fields(pid) {
                    if f[PPID] == self.postmaster as u64 {
                        ticks += f[UTIME] + f[STIME];
                    }
                }
            }
        }
        ticks as f64 / ticks_per_second()
    }
}
