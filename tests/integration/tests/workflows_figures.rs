//! Figures of issue 37 (workflows), printed, not asserted: run by hand, on a quiet machine, with
//! a release build installed:
//!
//! ```sh
//! cargo test -p pg_jobs_tests --test workflows_figures -- --ignored --nocapture --test-threads 1
//! ```
//!
//! * fan-in: 10,000 parents and one child, 8 workers claiming 100 at a time and completing them
//!   in one batch: the parents' burn-down rate against the same jobs without a child, and how
//!   long after the last parent's settle returned a claim waiting on the child's queue has it;
//! * a chain of 1,000 steps run by two waiting workers: from a step's complete returning to the
//!   next step in a waiting worker's hands;
//! * `jobs_signal` returning to the awaiting job in a waiting worker's hands.
//!
//! The cluster is the harness's (fsync off): the figures compare pg_jobs with itself, and the
//! benchmark suite gives the ones with durable commits.

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use pg_jobs_tests::{claim, complete, scalar, unique_queue, Client, Cluster, TEST_SETTINGS};
use serde_json::json;

/// Percentile `p` (0-100) of `samples`, in microseconds.
fn percentile(samples: &mut [Duration], p: f64) -> u128 {
    samples.sort_unstable();
    let index = ((samples.len() as f64 - 1.0) * p / 100.0).round() as usize;
    samples[index].as_micros()
}

/// Enqueues `count` parents into `queue` in batches; their ids.
fn parents(client: &mut Client, queue: &str, count: i32) -> Vec<i64> {
    let mut ids = Vec::new();
    for _ in 0..count / 1000 {
        ids.extend(
            client
                .query(
                    "SELECT id FROM jobs_enqueue_batch($1, array_fill('{}'::jsonb, ARRAY[1000]))",
                    &[&queue],
                )
                .unwrap()
                .iter()
                .map(|r| r.get::<_, i64>(0)),
        );
    }
    ids
}

/// 8 workers burn `queue` down, 100 a claim, each batch completed in one call; returns the time
/// it took and when the last settle returned.
fn burn_down(cluster: &'static Cluster, queue: &str) -> (Duration, Instant) {
    let started = Instant::now();
    let last = Arc::new(Mutex::new(started));
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let queue = queue.to_owned();
            let last = last.clone();
            thread::spawn(move || {
                let mut client = cluster.connect();
                loop {
                    let claimed = claim(&mut client, &queue, 100, "");
                    if claimed.is_empty() {
                        return;
                    }
                    let ids: Vec<i64> = claimed.iter().map(|c| c.id).collect();
                    let leases: Vec<uuid::Uuid> = claimed.iter().map(|c| c.lease).collect();
                    client
                        .query(
                            "SELECT * FROM jobs_complete_batch($1, $2)",
                            &[&ids, &leases],
                        )
                        .unwrap();
                    let now = Instant::now();
                    let mut last = last.lock().unwrap();
                    *last = (*last).max(now);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let last = *last.lock().unwrap();
    (last - started, last)
}

fn figures_cluster() -> &'static Cluster {
    static CLUSTER: std::sync::OnceLock<Cluster> = std::sync::OnceLock::new();
    CLUSTER.get_or_init(|| Cluster::start_with_extension("workflows-figures", TEST_SETTINGS))
}

#[test]
#[ignore = "prints figures; run by hand"]
fn fan_in_of_ten_thousand_parents() {
    let cluster = figures_cluster();
    let mut client = cluster.connect();
    let mut plain_rates = Vec::new();
    let mut fan_in_rates = Vec::new();
    let mut latencies = Vec::new();
    for round in 0..5 {
        let queue = unique_queue(&mut client, "plain", "");
        parents(&mut client, &queue, 10_000);
        let (took, _) = burn_down(cluster, &queue);
        plain_rates.push(10_000.0 / took.as_secs_f64());

        let queue = unique_queue(&mut client, "parts", "");
        let merges = unique_queue(&mut client, "merge", "");
        let ids = parents(&mut client, &queue, 10_000);
        let child: i64 = scalar(
            &mut client,
            "SELECT jobs_enqueue($1, '{}', after => $2)",
            &[&merges, &ids],
        );
        let waiter = {
            let merges = merges.clone();
            thread::spawn(move || {
                let mut client = cluster.connect();
                let got = claim(&mut client, &merges, 1, ", wait => '60 seconds'");
                (got, Instant::now())
            })
        };
        thread::sleep(Duration::from_millis(200));
        let (took, last) = burn_down(cluster, &queue);
        fan_in_rates.push(10_000.0 / took.as_secs_f64());
        let (got, at) = waiter.join().unwrap();
        assert_eq!(got[0].id, child);
        latencies.push(at.saturating_duration_since(last));
        println!(
            "round {round}: plain {:.0} jobs/s, with a child {:.0} jobs/s, child in hand {} us after the last settle returned",
            plain_rates[round],
            fan_in_rates[round],
            latencies[round].as_micros()
        );
    }
    let mean = |rates: &[f64]| rates.iter().sum::<f64>() / rates.len() as f64;
    println!(
        "fan-in: parents burn down at {:.2}x the rate without a child ({:.0} against {:.0} jobs/s); child claimable after the last settle: max {} us, p50 {} us over {} rounds",
        mean(&fan_in_rates) / mean(&plain_rates),
        mean(&fan_in_rates),
        mean(&plain_rates),
        percentile(&mut latencies, 100.0),
        percentile(&mut latencies, 50.0),
        latencies.len()
    );
}

#[test]
#[ignore = "prints figures; run by hand"]
fn chain_of_a_thousand_steps() {
    let cluster = figures_cluster();
    let (mut client, queue) = cluster.connect_with_queue("chain", "");
    let mut previous: i64 = scalar(&mut client, "SELECT jobs_enqueue($1)", &[&queue]);
    for _ in 1..1000 {
        previous = scalar(
            &mut client,
            "SELECT jobs_enqueue($1, after => ARRAY[$2::bigint])",
            &[&queue, &previous],
        );
    }
    let last = previous;
    // When each job's complete returned, and when each job was claimed.
    let completed = Arc::new(Mutex::new(Vec::<(i64, Instant)>::new()));
    let claimed = Arc::new(Mutex::new(Vec::<(i64, Instant)>::new()));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (queue, completed, claimed) = (queue.clone(), completed.clone(), claimed.clone());
            thread::spawn(move || {
                let mut client = cluster.connect();
                loop {
                    let got = claim(&mut client, &queue, 1, ", wait => '2 seconds'");
                    let Some(job) = got.first() else { return };
                    claimed.lock().unwrap().push((job.id, Instant::now()));
                    let _: String = complete(&mut client, job);
                    completed.lock().unwrap().push((job.id, Instant::now()));
                    if job.id == last {
                        return;
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let completed = completed.lock().unwrap().clone();
    let claimed = claimed.lock().unwrap().clone();
    let mut handoffs: Vec<Duration> = completed
        .iter()
        .filter_map(|(id, done)| {
            let next = claimed.iter().find(|(next, _)| *next == id + 1)?;
            Some(next.1.saturating_duration_since(*done))
        })
        .collect();
    println!(
        "chain: {} handoffs, parent's settle returned -> child in a waiting worker's hands: p50 {} us, p99 {} us",
        handoffs.len(),
        percentile(&mut handoffs, 50.0),
        percentile(&mut handoffs, 99.0)
    );
}

#[test]
#[ignore = "prints figures; run by hand"]
fn signal_to_a_waiting_worker() {
    let cluster = figures_cluster();
    let (mut client, queue) = cluster.connect_with_queue("signal", "");
    let mut latencies = Vec::new();
    for n in 0..200 {
        let id: i64 = scalar(&mut client, "SELECT jobs_enqueue($1)", &[&queue]);
        let job = claim(&mut client, &queue, 1, "");
        assert_eq!(job[0].id, id);
        let signal = format!("s-{n}");
        let _: String = scalar(
            &mut client,
            "SELECT jobs_await($1, $2, $3)",
            &[&job[0].id, &job[0].lease, &signal],
        );
        let waiter = {
            let queue = queue.clone();
            thread::spawn(move || {
                let mut client = cluster.connect();
                client
                    .batch_execute("SET application_name = 'figures-waiter'")
                    .unwrap();
                let got = claim(&mut client, &queue, 1, ", wait => '10 seconds'");
                (got, Instant::now())
            })
        };
        // Until the worker sleeps.
        while !scalar::<bool>(
            &mut client,
            "SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'figures-waiter' AND wait_event_type = 'Extension'",
            &[],
        ) {
            thread::sleep(Duration::from_millis(2));
        }
        let _: i32 = scalar(
            &mut client,
            "SELECT jobs_signal($1, $2)",
            &[&signal, &json!({"n": n})],
        );
        let sent = Instant::now();
        let (got, at) = waiter.join().unwrap();
        assert_eq!(got[0].id, id);
        latencies.push(at.saturating_duration_since(sent));
    }
    println!(
        "signal: jobs_signal returned -> awaiting job in a waiting worker's hands: p50 {} us, p99 {} us over {}",
        percentile(&mut latencies, 50.0),
        percentile(&mut latencies, 99.0),
        latencies.len()
    );
}
