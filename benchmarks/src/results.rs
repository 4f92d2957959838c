//! What a run measured, as plain data: the scenarios fill it in, the JSON beside the report
//! keeps it, and the report renders it. Nothing here measures or renders, so every other part
//! of the suite may depend on it and it depends on none of them.

use serde::{Deserialize, Serialize};

use crate::db::Span;
use crate::machine::Machine;

/// Everything one run measured; saved as JSON so the report can be rendered again.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Run {
    /// The machine and server, and when the run started.
    pub machine: Machine,
    /// The load average when the run ended.
    pub load_after: String,
    /// How long the run took.
    pub minutes: f64,
    /// (comparator, how its workers wait).
    pub waiting: Vec<(String, String)>,
    pub measurements: Vec<Measurement>,
    /// The counts per operation (`pg_jobs_bench counts`), when this run measured them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<Counts>,
}

/// One figure of the report: a scenario, a variant of it, a comparator, and what was measured.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Measurement {
    pub scenario: String,
    pub variant: String,
    pub comparator: String,
    pub jobs: u64,
    pub seconds: f64,
    /// Jobs per second.
    pub rate: Option<f64>,
    /// Server CPU seconds in the window (all processes of the bench cluster).
    pub server_cpu_s: Option<f64>,
    /// Load-generator CPU seconds in the window (this process, plus Node for Graphile).
    pub client_cpu_s: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
    pub wal_bytes_per_job: Option<f64>,
    pub commits_per_job: Option<f64>,
    pub statements_per_s: Option<f64>,
    pub commits_per_s: Option<f64>,
    /// Claims that came back empty although due jobs were surely queued.
    pub empty_claims: Option<u64>,
    pub note: Option<String>,
    /// Why there is no figure: not applicable, or the error that stopped it.
    pub missing: Option<String>,
    /// Which repetition of its scenario this is (0 for scenarios that run once): the report
    /// averages repetitions and shows their spread as the run-to-run noise.
    #[serde(default)]
    pub repeat: u32,
    /// w: workers that burnt the queue down.
    #[serde(default)]
    pub workers: Option<u32>,
    /// k: mean time per claim.
    #[serde(default)]
    pub mean_ms: Option<f64>,
    /// v: dead row versions the updates made, and those VACUUM could not remove.
    #[serde(default)]
    pub dead_rows_made: Option<u64>,
    #[serde(default)]
    pub dead_rows_kept: Option<u64>,
    /// v: age of the oldest snapshot a worker session held when VACUUM ran, in seconds.
    #[serde(default)]
    pub oldest_snapshot_s: Option<f64>,
    /// s: jobs per second the producers were asked to enqueue.
    #[serde(default)]
    pub offered_rate: Option<f64>,
    /// s: pickup p99 over the soak's first and last tenth (a minute each at full scale).
    #[serde(default)]
    pub first_p99_ms: Option<f64>,
    #[serde(default)]
    pub last_p99_ms: Option<f64>,
    /// s: one sample per interval of the soak.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples: Vec<Sample>,
    /// o: what pg_jobs's sessions held of the xmin horizon in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub horizon: Option<Horizon>,
    /// y: the sizes of the table over a long steady run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<Storage>,
}

/// o: pg_jobs's sessions' snapshots (`pg_stat_activity.backend_xmin`), sampled about once a
/// second through a window, beside the transaction held open (when one was).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Horizon {
    /// Times `pg_stat_activity` was read.
    pub samples: u64,
    /// The largest `age(backend_xmin)` of a pg_jobs session (its producers' and workers'
    /// role, and its background worker) in any sample; none when none held a snapshot.
    pub max_xmin_age: Option<i64>,
    /// `age(backend_xid)` of the transaction held open, at the last sample (none before the
    /// hold).
    pub holder_xid_age: Option<i64>,
    /// Samples in which a pg_jobs session's snapshot was older than the held transaction's
    /// xid: samples in which pg_jobs, not the held transaction, held the horizon back.
    pub past_holder: u64,
    /// Waiting claims seen asleep (wait event type `Extension`) over all samples, and those of
    /// them that held a snapshot while they slept.
    pub asleep: u64,
    pub asleep_with_xmin: u64,
    /// Shared buffers the bench database's sessions read in the window (`pg_stat_database`'s
    /// `blks_hit` plus `blks_read`): what the window's work touched, which, unlike its times,
    /// does not move with the machine's load. None in runs from before it was counted.
    #[serde(default)]
    pub buffers: Option<i64>,
}

/// y: the table's size at the baseline of live jobs, and over a long steady run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Storage {
    /// Jobs the run was to put through the queue.
    pub run_jobs: u64,
    /// Live (queued) jobs in the table of the baseline, and its heap and index bytes then.
    pub live: u64,
    pub baseline_table_bytes: i64,
    pub baseline_index_bytes: i64,
    /// The largest heap and index bytes over the run (sampled), and at its end.
    pub max_table_bytes: i64,
    pub max_index_bytes: i64,
    pub end_table_bytes: i64,
    pub end_index_bytes: i64,
    /// Jobs completed per second in the run's first and last window (a minute each at full
    /// scale), and how long those windows were.
    pub first_rate: f64,
    pub last_rate: f64,
    pub window_secs: f64,
    /// Jobs enqueued per second in the same windows: whether the producers kept to their
    /// schedule (a producer behind it catches up at once).
    #[serde(default)]
    pub first_enqueued_rate: f64,
    #[serde(default)]
    pub last_enqueued_rate: f64,
    /// Autovacuums of the table during the run, and its dead tuples at the end.
    pub autovacuums: i64,
    pub end_dead_tuples: i64,
    /// Whether the run had the full scale's size (2,000,000 jobs against 100,000 live).
    pub full_size: bool,
}

impl Storage {
    /// The table and its indexes at their largest over the run ÷ at the baseline.
    pub fn growth(&self) -> Option<f64> {
        let base = self.baseline_table_bytes + self.baseline_index_bytes;
        (base > 0).then(|| (self.max_table_bytes + self.max_index_bytes) as f64 / base as f64)
    }

    /// Throughput in the run's last window ÷ its first.
    pub fn last_over_first(&self) -> Option<f64> {
        (self.first_rate > 0.0).then(|| self.last_rate / self.first_rate)
    }
}

impl Measurement {
    /// A figure of `comparator` in `scenario`/`variant`, nothing measured yet.
    pub fn new(scenario: &str, variant: &str, comparator: &str) -> Measurement {
        Measurement {
            scenario: scenario.into(),
            variant: variant.into(),
            comparator: comparator.into(),
            ..Measurement::default()
        }
    }

    /// A throughput figure: `jobs` done in the span.
    pub fn throughput(mut self, jobs: u64, span: &Span) -> Measurement {
        self.jobs = jobs;
        self.seconds = span.seconds;
        self.rate = Some(jobs as f64 / span.seconds.max(1e-9));
        self.server_cpu_s = Some(span.server_cpu);
        self.client_cpu_s = Some(span.client_cpu);
        self
    }

    /// Sets the note the report shows beside the figure.
    pub fn note(mut self, note: impl Into<String>) -> Measurement {
        self.note = Some(note.into());
        self
    }

    /// Puts `note` in front of the note the measurement already has.
    pub fn note_first(mut self, note: impl Into<String>) -> Measurement {
        let note = note.into();
        self.note = Some(match self.note.take() {
            Some(old) => format!("{note}; {old}"),
            None => note,
        });
        self
    }

    /// Says why there is no figure.
    pub fn missing(mut self, why: impl Into<String>) -> Measurement {
        self.missing = Some(why.into());
        self
    }

    /// Server CPU seconds per 1,000 jobs.
    pub fn server_cpu_per_1000(&self) -> Option<f64> {
        let cpu = self.server_cpu_s?;
        (self.jobs > 0).then(|| cpu * 1000.0 / self.jobs as f64)
    }

    /// Load-generator CPU seconds per 1,000 jobs.
    pub fn client_cpu_per_1000(&self) -> Option<f64> {
        let cpu = self.client_cpu_s?;
        (self.jobs > 0).then(|| cpu * 1000.0 / self.jobs as f64)
    }
}

/// What one interval of the soak (s) looked like.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since the start, at the end of the interval.
    pub t: f64,
    /// Jobs completed (succeeded) in the interval, per second.
    pub rate: f64,
    /// Jobs enqueued in the interval, per second.
    pub enqueued_rate: f64,
    /// Pickup latency of the jobs first picked up in the interval (retries excluded).
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// Jobs enqueued and not yet completed (queued, running or waiting for their retry).
    pub backlog: u64,
    /// pg_stat_user_tables of the queue's table.
    pub dead_tuples: i64,
    pub live_tuples: i64,
    /// Autovacuums of the table since the measurement window opened.
    pub autovacuums: i64,
    /// pg_relation_size of the table (main fork) and of each of its indexes, in bytes.
    pub table_bytes: i64,
    pub index_bytes: Vec<(String, i64)>,
    /// Server CPU in the interval, as a fraction of one core.
    pub server_cpu: f64,
}

impl Sample {
    /// The sizes of all the table's indexes together.
    pub fn all_index_bytes(&self) -> i64 {
        self.index_bytes.iter().map(|(_, b)| b).sum()
    }
}

/// What `pg_jobs_bench counts` measured: per operation and queue, what the server did for each
/// job, in counts that do not depend on the machine's speed or load.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Counts {
    /// When the counts were taken (UTC).
    pub started: String,
    /// pg_jobs's version and commit, PostgreSQL's version, valgrind's version.
    pub engine: String,
    pub postgres: String,
    pub valgrind: String,
    /// How many times every row was measured.
    pub repetitions: u32,
    pub rows: Vec<CountRow>,
}

/// One operation on one queue, measured in each repetition.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CountRow {
    /// What was done, e.g. "enqueue, 1 per transaction".
    pub operation: String,
    /// The queue and how it was used, e.g. "pg_jobs, unique keys".
    pub queue: String,
    /// Jobs in the measured stretch of each repetition.
    pub jobs: u64,
    /// The counts of each repetition, per job.
    pub runs: Vec<PerJob>,
    /// Why there is no figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<String>,
}

/// What the server did per job in one measured stretch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PerJob {
    /// Instructions the measured session's backend executed (callgrind).
    pub instructions: f64,
    /// WAL written: the records without the full-page images they carry, and those images.
    /// The stretch starts right after a checkpoint, so the images are those of every page the
    /// stretch writes, once each; how many a deployment writes depends on how often its
    /// checkpoints come.
    pub wal_bytes: f64,
    pub fpi_bytes: f64,
    /// WAL records, and of them: heap (Heap/*), heap2 (Heap2/*), btree inserts
    /// (Btree/INSERT_*), btree page splits (Btree/SPLIT_*).
    pub wal_records: f64,
    pub heap_records: f64,
    pub heap2_records: f64,
    pub btree_inserts: f64,
    pub btree_splits: f64,
    /// Shared buffers the session's statements dirtied (pg_stat_statements): after the
    /// checkpoint, every page the stretch writes or sets hint bits on, once each.
    pub buffers_dirtied: f64,
    /// Commit records in the WAL.
    pub commits: f64,
    /// Every WAL record type in the stretch, as (type, records per job).
    #[serde(default)]
    pub records: Vec<(String, f64)>,
}

impl PerJob {
    /// The sum of two per-job counts: one job's whole lifecycle from its operations.
    pub fn plus(&self, other: &PerJob) -> PerJob {
        let mut records = self.records.clone();
        for (kind, n) in &other.records {
            match records.iter_mut().find(|(k, _)| k == kind) {
                Some((_, m)) => *m += n,
                None => records.push((kind.clone(), *n)),
            }
        }
        PerJob {
            instructions: self.instructions + other.instructions,
            wal_bytes: self.wal_bytes + other.wal_bytes,
            fpi_bytes: self.fpi_bytes + other.fpi_bytes,
            wal_records: self.wal_records + other.wal_records,
            heap_records: self.heap_records + other.heap_records,
            heap2_records: self.heap2_records + other.heap2_records,
            btree_inserts: self.btree_inserts + other.btree_inserts,
            btree_splits: self.btree_splits + other.btree_splits,
            buffers_dirtied: self.buffers_dirtied + other.buffers_dirtied,
            commits: self.commits + other.commits,
            records,
        }
    }
}

impl CountRow {
    /// The mean of the repetitions, none when there is none.
    pub fn mean(&self) -> Option<PerJob> {
        let n = self.runs.len() as f64;
        let first = self.runs.first()?;
        let sum = self.runs[1..].iter().fold(first.clone(), |a, b| a.plus(b));
        let scale = |v: f64| v / n;
        Some(PerJob {
            instructions: scale(sum.instructions),
            wal_bytes: scale(sum.wal_bytes),
            fpi_bytes: scale(sum.fpi_bytes),
            wal_records: scale(sum.wal_records),
            heap_records: scale(sum.heap_records),
            heap2_records: scale(sum.heap2_records),
            btree_inserts: scale(sum.btree_inserts),
            btree_splits: scale(sum.btree_splits),
            buffers_dirtied: scale(sum.buffers_dirtied),
            commits: scale(sum.commits),
            records: sum.records.into_iter().map(|(k, v)| (k, v / n)).collect(),
        })
    }

    /// Half the range of `figure` over the repetitions, relative to its mean (0 for a figure
    /// that is 0 in every repetition); none from fewer than two repetitions.
    pub fn spread(&self, figure: fn(&PerJob) -> f64) -> Option<f64> {
        if self.runs.len() < 2 {
            return None;
        }
        let values: Vec<f64> = self.runs.iter().map(figure).collect();
        let (lo, hi) = values
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        Some(if mean == 0.0 {
            0.0
        } else {
            (hi - lo) / 2.0 / mean.abs()
        })
    }
}

impl Run {
    /// The figure of `comparator` in `scenario`/`variant`, unless it is missing.
    pub fn get(&self, scenario: &str, variant: &str, comparator: &str) -> Option<&Measurement> {
        self.measurements.iter().find(|m| {
            m.scenario == scenario
                && m.variant == variant
                && m.comparator == comparator
                && m.missing.is_none()
        })
    }

    /// The figure of `comparator` in `scenario`/`variant`, missing or not.
    pub fn any(&self, scenario: &str, variant: &str, comparator: &str) -> Option<&Measurement> {
        self.measurements
            .iter()
            .find(|m| m.scenario == scenario && m.variant == variant && m.comparator == comparator)
    }

    /// The rate of `comparator` in `scenario`/`variant`, unless it is missing.
    pub fn rate(&self, scenario: &str, variant: &str, comparator: &str) -> Option<f64> {
        self.get(scenario, variant, comparator)?.rate
    }

    /// Every comparator's figure of `scenario`/`variant`.
    pub fn comparators(&self, scenario: &str, variant: &str) -> Vec<&Measurement> {
        self.measurements
            .iter()
            .filter(|m| m.scenario == scenario && m.variant == variant)
            .collect()
    }

    /// Whether `scenario` measured anything in this run.
    pub fn ran(&self, scenario: &str) -> bool {
        self.measurements.iter().any(|m| m.scenario == scenario)
    }

    /// Measurements grouped by what they measure: the repetitions of one figure together.
    fn groups(&self) -> Vec<Vec<&Measurement>> {
        let mut groups: Vec<Vec<&Measurement>> = Vec::new();
        for m in &self.measurements {
            match groups.iter_mut().find(|g| same_figure(g[0], m)) {
                Some(g) => g.push(m),
                None => groups.push(vec![m]),
            }
        }
        groups
    }

    /// The run with the repetitions of each figure replaced by their mean: what the report
    /// shows and judges.
    pub fn merged(&self) -> Run {
        Run {
            measurements: self.groups().iter().map(|g| mean_of(g)).collect(),
            ..self.clone()
        }
    }

    /// The run as its `k`-th repetition saw it: repetition `k` of each repeated figure, and
    /// the single measurement of every other.
    pub fn repetition(&self, k: u32) -> Run {
        Run {
            measurements: self
                .groups()
                .iter()
                .filter_map(|g| {
                    if g.len() == 1 {
                        Some(g[0].clone())
                    } else {
                        g.iter().find(|m| m.repeat == k).map(|m| (*m).clone())
                    }
                })
                .collect(),
            ..self.clone()
        }
    }

    /// How many repetitions the figures of `scenarios` had (1 when they ran once).
    pub fn repetitions(&self, scenarios: &[&str]) -> u32 {
        1 + self
            .measurements
            .iter()
            .filter(|m| scenarios.contains(&m.scenario.as_str()))
            .map(|m| m.repeat)
            .max()
            .unwrap_or(0)
    }
}

fn same_figure(a: &Measurement, b: &Measurement) -> bool {
    a.scenario == b.scenario
        && a.variant == b.variant
        && a.comparator == b.comparator
        && a.workers == b.workers
}

/// The mean of a figure's repetitions (those that did not fail); the notes are the first's.
fn mean_of(group: &[&Measurement]) -> Measurement {
    let ok: Vec<&Measurement> = group
        .iter()
        .copied()
        .filter(|m| m.missing.is_none())
        .collect();
    if group.len() == 1 || ok.is_empty() {
        return group[0].clone();
    }
    let mean = |f: &dyn Fn(&Measurement) -> Option<f64>| {
        let v: Vec<f64> = ok.iter().filter_map(|m| f(m)).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let mut m = ok[0].clone();
    m.repeat = 0;
    m.jobs = mean(&|m| Some(m.jobs as f64)).unwrap_or(0.0).round() as u64;
    m.seconds = mean(&|m| Some(m.seconds)).unwrap_or(0.0);
    m.rate = mean(&|m| m.rate);
    m.server_cpu_s = mean(&|m| m.server_cpu_s);
    m.client_cpu_s = mean(&|m| m.client_cpu_s);
    m.p50_ms = mean(&|m| m.p50_ms);
    m.p99_ms = mean(&|m| m.p99_ms);
    m.max_ms = mean(&|m| m.max_ms);
    m.mean_ms = mean(&|m| m.mean_ms);
    m.wal_bytes_per_job = mean(&|m| m.wal_bytes_per_job);
    m.commits_per_job = mean(&|m| m.commits_per_job);
    m.statements_per_s = mean(&|m| m.statements_per_s);
    m.commits_per_s = mean(&|m| m.commits_per_s);
    m.empty_claims = mean(&|m| m.empty_claims.map(|e| e as f64)).map(|e| e.round() as u64);
    if ok.len() < group.len() {
        m.note = Some(format!(
            "{}mean of {} of {} runs (the others failed)",
            m.note.map(|n| format!("{n}; ")).unwrap_or_default(),
            ok.len(),
            group.len()
        ));
    }
    m
}
