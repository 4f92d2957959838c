//! The life of a job, rule by rule: claim order, delayed jobs, attempts, fencing, reclaim,
//! retry backoff, cancel, terminal states, transactions, dead letters, queue operations,
//! observability and headers (SPEC.md, "Rules" and "Functions").
//!
//! Every test talks to a real server over real connections and commits for real. Tests share
//! the binary's cluster (whose background worker may reclaim expired leases at any moment, so
//! those tests assert on states, not on who reclaimed) and keep apart through their own
//! queues; the reclaim test runs on a private cluster without the worker, where it can count.

use std::time::Duration;

use pg_jobs_tests::{
    assert_claims_nothing, claim, claim_ids, column, enqueue, jobs_in, row, scalar, settings_with,
    settings_without, state, unique_queue, wait_until, Claimed, Client, Cluster,
};
use postgres::types::ToSql;
use serde_json::{json, Value};
use uuid::Uuid;

/// How long to wait for something the server does on its own (a lease running out, a delayed
/// job coming due) before the test gives up.
const PATIENCE: Duration = Duration::from_secs(30);

/// The job's whole row as JSON: comparing two of these proves a call changed nothing.
fn job_row(client: &mut Client, id: i64) -> Value {
    scalar(
        client,
        "SELECT to_jsonb(j) FROM jobs.job j WHERE j.id = $1",
        &[&id],
    )
}

/// Whether a job with this id exists (as seen by this connection).
fn job_exists(client: &mut Client, id: i64) -> bool {
    scalar(
        client,
        "SELECT EXISTS (SELECT FROM jobs.job WHERE id = $1)",
        &[&id],
    )
}

/// Runs a query that answers one text value (the outcome of an API call).
fn text(client: &mut Client, sql: &str, params: &[&(dyn ToSql + Sync)]) -> String {
    scalar(client, sql, params)
}

/// Enqueues a job with extra SQL named arguments (", kind => 'x'", or empty).
fn enqueue_with(client: &mut Client, queue: &str, payload: Value, options: &str) -> i64 {
    scalar(
        client,
        &format!("SELECT jobs_enqueue($1::text, $2::jsonb{options})"),
        &[&queue, &payload],
    )
}

/// Claims exactly one job and returns it.
fn claim_one(client: &mut Client, queue: &str, extra: &str) -> Claimed {
    let claimed = claim(client, queue, 1, extra);
    assert_eq!(claimed.len(), 1, "expected one job claimed from {queue}");
    claimed[0]
}

fn heartbeat(client: &mut Client, id: i64, lease: Uuid) -> String {
    text(
        client,
        "SELECT jobs_heartbeat($1::bigint, $2::uuid)",
        &[&id, &lease],
    )
}

fn complete(client: &mut Client, id: i64, lease: Uuid) -> String {
    text(
        client,
        "SELECT jobs_complete($1::bigint, $2::uuid)",
        &[&id, &lease],
    )
}

fn fail(client: &mut Client, id: i64, lease: Uuid, error: &str) -> String {
    text(
        client,
        "SELECT jobs_fail($1::bigint, $2::uuid, $3::text)",
        &[&id, &lease, &error],
    )
}

/// Fails a job with a retry that is due at once.
fn fail_now(client: &mut Client, id: i64, lease: Uuid, error: &str) -> String {
    text(
        client,
        "SELECT jobs_fail($1::bigint, $2::uuid, $3::text, retry_in => '0')",
        &[&id, &lease, &error],
    )
}

fn release(client: &mut Client, id: i64, lease: Uuid) -> String {
    text(
        client,
        "SELECT jobs_release($1::bigint, $2::uuid)",
        &[&id, &lease],
    )
}

fn cancel(client: &mut Client, id: i64) -> String {
    text(client, "SELECT jobs_cancel($1::bigint)", &[&id])
}

/// Settles many jobs in one call: (id, outcome) per pair.
fn complete_many(client: &mut Client, ids: &[i64], leases: &[Uuid]) -> Vec<(i64, String)> {
    client
        .query(
            "SELECT id, outcome FROM jobs_complete_batch($1::bigint[], $2::uuid[])",
            &[&ids, &leases],
        )
        .unwrap_or_else(|e| panic!("batch complete: {e}"))
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

/// What each of a holder's calls answers when presented with `lease`, in the order
/// heartbeat, complete, fail, release and the batch complete.
fn every_holder_call(client: &mut Client, id: i64, lease: Uuid) -> Vec<String> {
    let mut outcomes = vec![
        heartbeat(client, id, lease),
        complete(client, id, lease),
        fail(client, id, lease, "too late"),
        release(client, id, lease),
    ];
    let batch = complete_many(client, &[id], &[lease]);
    assert_eq!(batch.len(), 1, "one outcome per (id, lease) pair");
    assert_eq!(batch[0].0, id);
    outcomes.push(batch[0].1.clone());
    outcomes
}

/// The SQLSTATE of a call that must fail.
fn sqlstate<T>(result: Result<T, postgres::Error>) -> String {
    match result {
        Ok(_) => panic!("expected an error, the call succeeded"),
        Err(e) => e
            .code()
            .map(|code| code.code().to_owned())
            .unwrap_or_else(|| panic!("expected a server error, got {e}")),
    }
}

/// Runs `jobs_reclaim()` and returns how many jobs it took back.
fn reclaim(client: &mut Client) -> i64 {
    scalar(client, "SELECT jobs_reclaim()::bigint", &[])
}

/// Waits until the leases of `ids` have run out by the server's clock (or have already been
/// reclaimed, which clears lease_until).
fn wait_for_expiry(client: &mut Client, ids: &[i64]) {
    wait_until(PATIENCE, "the leases to run out", || {
        scalar(
            client,
            "SELECT bool_and(lease_until IS NULL OR lease_until < clock_timestamp())
               FROM jobs.job WHERE id = ANY ($1)",
            &[&ids],
        )
    });
}

/// On the shared cluster: waits until the job's expired lease has been taken back, by our
/// `jobs_reclaim()` or by the background worker, whichever comes first.
fn wait_for_reclaim(client: &mut Client, id: i64) {
    wait_until(PATIENCE, "the expired lease to be reclaimed", || {
        reclaim(client);
        state(client, id) != "running"
    });
}

/// A cluster of this test's own, without the preload: no background worker reclaims behind
/// its back, so `jobs_reclaim()` counts are exact.
fn cluster_without_worker(name: &str) -> Cluster {
    let settings = settings_without(&["shared_preload_libraries", "pg_jobs."]);
    Cluster::start_with_extension(name, &settings)
}

/// The element `errors[-1]` of a job row.
fn last_error(row: &Value) -> &Value {
    row["errors"]
        .as_array()
        .and_then(|errors| errors.last())
        .unwrap_or_else(|| panic!("the job has no errors: {row}"))
}

/// Rule 2 (Order): a claim returns due jobs by priority, then run_at, then id, within one
/// claim of several jobs and across claims; jobs not yet due are left alone.
#[test]
fn claims_come_in_priority_then_run_at_then_id_order() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("order", "");

    // (priority, seconds ago): equal ages get the same run_at because one transaction has one
    // now(), so the id decides between them. A negative age is in the future.
    let specs: [(i32, f64); 9] = [
        (0, 10.0),
        (1, 30.0),
        (0, 30.0),
        (-1, 5.0),
        (0, 10.0),
        (1, 30.0),
        (0, 20.0),
        (-10, -3600.0),
        (-1, 50.0),
    ];
    let mut tx = client.transaction().unwrap();
    let mut jobs = Vec::new();
    for (index, &(priority, age)) in specs.iter().enumerate() {
        let id: i64 = scalar(
            &mut tx,
            "SELECT jobs_enqueue($1::text, jsonb_build_object('index', $2::int),
                                     priority => $3::int,
                                     run_at => now() - make_interval(secs => $4::float8))",
            &[&queue, &(index as i32), &priority, &age],
        );
        jobs.push((priority, age, id));
    }
    tx.commit().unwrap();

    let mut expected: Vec<(i32, f64, i64)> = jobs.iter().copied().filter(|j| j.1 >= 0.0).collect();
    // Older (larger age) means an earlier run_at.
    expected.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.total_cmp(&a.1)).then(a.2.cmp(&b.2)));
    let expected: Vec<i64> = expected.iter().map(|j| j.2).collect();
    assert_eq!(expected.len(), 8);

    let mut claimed = Vec::new();
    for n in [3, 2, 10] {
        let batch: Vec<i64> = claim_ids(&mut client, &queue, n);
        let from = claimed.len();
        let to = (from + n as usize).min(expected.len());
        assert_eq!(
            batch,
            expected[from..to],
            "claim of n = {n} must return the next jobs in order"
        );
        claimed.extend(batch);
    }
    assert_eq!(claimed, expected);
    assert_claims_nothing(
        &mut client,
        &queue,
        10,
        "the job due in an hour must not be claimed, whatever its priority",
    );
}

/// Rule 2 (only due jobs): a job with run_at in the future is invisible to claims until it
/// comes due, and then it is claimable.
#[test]
fn delayed_job_is_invisible_until_due() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("delayed", "");
    let delayed = enqueue_with(
        &mut client,
        &queue,
        json!({"delayed": true}),
        ", run_at => now() + interval '2 seconds'",
    );
    let due = enqueue(&mut client, &queue, json!({"delayed": false}));

    // The later-enqueued due job comes first; the delayed one is not handed out with it.
    let first = claim(&mut client, &queue, 10, "");
    assert_eq!(first.iter().map(|c| c.id).collect::<Vec<_>>(), [due]);
    assert_eq!(state(&mut client, delayed), "queued");

    let mut got = Vec::new();
    wait_until(PATIENCE, "the delayed job to come due", || {
        got = claim(&mut client, &queue, 10, "");
        !got.is_empty()
    });
    assert_eq!(got.iter().map(|c| c.id).collect::<Vec<_>>(), [delayed]);
    let claimed_after_due: bool = scalar(
        &mut client,
        "SELECT started_at >= run_at FROM jobs.job WHERE id = $1",
        &[&delayed],
    );
    assert!(
        claimed_after_due,
        "the delayed job was claimed before its run_at"
    );
}

/// Rule 3 (Attempts count at claim): the first claim is attempt 1; a release gives the
/// attempt back (queued, attempt 0, release_reason stored), so the next claim is attempt 1
/// again; a failure keeps the attempt spent.
#[test]
fn attempts_count_at_claim_and_release_gives_it_back() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("attempts", "max_attempts => 3");
    let id = enqueue(&mut client, &queue, json!({}));
    assert_eq!(job_row(&mut client, id)["attempt"], 0);

    let first = claim_one(&mut client, &queue, "");
    assert_eq!((first.id, first.attempt), (id, 1));
    let row = job_row(&mut client, id);
    assert_eq!(
        (row["state"].clone(), row["attempt"].clone()),
        (json!("running"), json!(1))
    );

    let released = text(
        &mut client,
        "SELECT jobs_release($1::bigint, $2::uuid, reason => 'shutting down')",
        &[&id, &first.lease],
    );
    assert_eq!(released, "queued");
    let row = job_row(&mut client, id);
    assert_eq!(row["state"], "queued");
    assert_eq!(row["attempt"], 0);
    assert_eq!(row["release_reason"], "shutting down");
    assert_eq!(row["lease"], Value::Null);
    assert_eq!(row["errors"], json!([]), "a release is not a failure");

    let second = claim_one(&mut client, &queue, "");
    assert_eq!((second.id, second.attempt), (id, 1));
    assert_ne!(second.lease, first.lease, "every claim mints a fresh lease");

    assert_eq!(fail_now(&mut client, id, second.lease, "boom"), "queued");
    assert_eq!(
        job_row(&mut client, id)["attempt"],
        1,
        "a failure keeps the attempt spent"
    );
    let third = claim_one(&mut client, &queue, "");
    assert_eq!((third.id, third.attempt), (id, 2));
}

/// Rule 4 (Fencing): once a job has been claimed again, every call with the stale lease
/// (heartbeat, complete, fail, release, batch complete) answers 'lost' and changes nothing;
/// so does a random lease and an unknown id; a lease cleared by release or fail-with-retry
/// is stale too.
#[test]
fn stale_random_and_unknown_leases_are_lost() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("fence", "lease => '1 hour'");
    let id = enqueue(&mut client, &queue, json!({"fenced": true}));

    let stale = claim_one(&mut client, &queue, ", lease => '100 milliseconds'");
    wait_for_expiry(&mut client, &[id]);
    wait_for_reclaim(&mut client, id);
    let current = claim_one(&mut client, &queue, "");
    assert_eq!((current.id, current.attempt), (id, 2));
    assert_ne!(current.lease, stale.lease);

    let before = job_row(&mut client, id);
    assert_eq!(before["state"], "running");
    assert_eq!(
        every_holder_call(&mut client, id, stale.lease),
        vec!["lost"; 5],
        "stale lease"
    );
    assert_eq!(
        job_row(&mut client, id),
        before,
        "a stale lease changed the job"
    );

    let random = Uuid::new_v4();
    assert_eq!(
        every_holder_call(&mut client, id, random),
        vec!["lost"; 5],
        "random lease"
    );
    assert_eq!(
        job_row(&mut client, id),
        before,
        "a random lease changed the job"
    );

    let unknown: i64 = scalar(&mut client, "SELECT max(id) + 1000000 FROM jobs.job", &[]);
    assert_eq!(
        every_holder_call(&mut client, unknown, current.lease),
        vec!["lost"; 5],
        "unknown id"
    );
    assert!(!job_exists(&mut client, unknown));

    // A batch answers per pair, in input order, and settles only the pair that holds.
    let batch = complete_many(
        &mut client,
        &[id, unknown, id],
        &[stale.lease, random, random],
    );
    assert_eq!(
        batch,
        [
            (id, "lost".to_owned()),
            (unknown, "lost".to_owned()),
            (id, "lost".to_owned())
        ]
    );
    assert_eq!(job_row(&mut client, id), before);

    // The current holder is unaffected by all of that.
    assert_eq!(heartbeat(&mut client, id, current.lease), "running");
    assert_eq!(complete(&mut client, id, current.lease), "succeeded");

    // Release and fail-with-retry clear the lease: the old holder is fenced off at once.
    let other = enqueue(&mut client, &queue, json!({}));
    let released = claim_one(&mut client, &queue, "");
    assert_eq!(released.id, other);
    assert_eq!(release(&mut client, other, released.lease), "queued");
    let after_release = job_row(&mut client, other);
    assert_eq!(
        every_holder_call(&mut client, other, released.lease),
        vec!["lost"; 5],
        "lease given back by release"
    );
    assert_eq!(job_row(&mut client, other), after_release);

    let failed = claim_one(&mut client, &queue, "");
    assert_eq!(fail_now(&mut client, other, failed.lease, "boom"), "queued");
    let after_fail = job_row(&mut client, other);
    assert_eq!(
        every_holder_call(&mut client, other, failed.lease),
        vec!["lost"; 5],
        "lease of a failed attempt"
    );
    assert_eq!(job_row(&mut client, other), after_fail);
}

/// Rule 5 (Reclaim), counted exactly on a cluster without the background worker: expired
/// leases go back to queued with the attempt spent and an error 'lease expired', or end
/// failed with 'lease expired on the final attempt'; the reclaimed lease token still lets the
/// late holder heartbeat (running again) or complete ("done wins") until a newer claim, after
/// which it is 'lost'.
#[test]
fn reclaim_requeues_or_fails_and_done_wins_until_reclaimed_again() {
    let cluster = cluster_without_worker("reclaim");
    let (mut client, queue) = cluster.connect_with_queue("reclaim", "max_attempts => 2");
    assert_eq!(reclaim(&mut client), 0);

    let revived = enqueue(&mut client, &queue, json!({"job": "revived"}));
    let fenced = enqueue(&mut client, &queue, json!({"job": "fenced"}));
    let last = enqueue_with(
        &mut client,
        &queue,
        json!({"job": "last"}),
        ", max_attempts => 1",
    );
    let held = enqueue(&mut client, &queue, json!({"job": "held"}));

    let short = claim(&mut client, &queue, 3, ", lease => '200 milliseconds'");
    let lease_of = |id: i64| {
        short
            .iter()
            .find(|c| c.id == id)
            .unwrap_or_else(|| panic!("job {id} was not claimed"))
            .lease
    };
    let (revived_lease, fenced_lease, last_lease) =
        (lease_of(revived), lease_of(fenced), lease_of(last));
    assert_eq!(
        claim_one(&mut client, &queue, ", lease => '1 hour'").id,
        held
    );

    wait_for_expiry(&mut client, &[revived, fenced, last]);
    assert_eq!(
        reclaim(&mut client),
        3,
        "the three expired leases, not the live one"
    );
    assert_eq!(reclaim(&mut client), 0, "nothing left to reclaim");
    assert_eq!(state(&mut client, held), "running");

    for (id, lease) in [(revived, revived_lease), (fenced, fenced_lease)] {
        let row = job_row(&mut client, id);
        assert_eq!(row["state"], "queued");
        assert_eq!(row["attempt"], 1, "the reclaimed attempt stays spent");
        assert_eq!(
            row["lease"],
            json!(lease.to_string()),
            "a reclaimed job keeps its lease token"
        );
        assert_eq!(row["lease_until"], Value::Null);
        assert_eq!(row["errors"].as_array().unwrap().len(), 1);
        assert_eq!(last_error(&row)["error"], "lease expired");
        assert_eq!(last_error(&row)["attempt"], 1);
    }

    let row = job_row(&mut client, last);
    assert_eq!(row["state"], "failed");
    assert_ne!(row["finished_at"], Value::Null);
    assert_eq!(
        last_error(&row)["error"],
        "lease expired on the final attempt"
    );
    // Failed is terminal: the late holder cannot complete it any more.
    assert_eq!(complete(&mut client, last, last_lease), "lost");
    assert_eq!(job_row(&mut client, last), row);

    // A heartbeat after the reclaim, with no newer claim, takes the job back.
    let revived_again = text(
        &mut client,
        "SELECT jobs_heartbeat($1::bigint, $2::uuid, extend => '200 milliseconds')",
        &[&revived, &revived_lease],
    );
    assert_eq!(revived_again, "running");
    let row = job_row(&mut client, revived);
    assert_eq!(row["state"], "running");
    assert_eq!(row["attempt"], 1, "a heartbeat spends no attempt");
    assert_ne!(row["lease_until"], Value::Null);
    assert_eq!(
        claim_ids(&mut client, &queue, 10),
        [fenced],
        "the revived job is running again, so only the other reclaimed job is claimable"
    );

    // Its lease runs out again; the late holder's complete still wins.
    wait_for_expiry(&mut client, &[revived]);
    assert_eq!(reclaim(&mut client), 1);
    let row = job_row(&mut client, revived);
    assert_eq!(row["state"], "queued");
    assert_eq!(row["errors"].as_array().unwrap().len(), 2);
    assert_eq!(complete(&mut client, revived, revived_lease), "succeeded");
    assert_eq!(state(&mut client, revived), "succeeded");

    // The fenced job was claimed again above: its late holder is lost.
    let row = job_row(&mut client, fenced);
    assert_eq!(
        (row["state"].clone(), row["attempt"].clone()),
        (json!("running"), json!(2))
    );
    assert_eq!(complete(&mut client, fenced, fenced_lease), "lost");
    assert_eq!(heartbeat(&mut client, fenced, fenced_lease), "lost");
    assert_eq!(job_row(&mut client, fenced), row);
}

/// Fails a claimed job with the queue's backoff and returns bounds on the delay it got, by the
/// server's clock: the failure happened between two clock readings, so the delay
/// (run_at − fail time) lies in [run_at − after, run_at − before].
fn fail_and_measure(client: &mut Client, job: Claimed, options: &str) -> (f64, f64) {
    let before: String = scalar(client, "SELECT clock_timestamp()::text", &[]);
    let outcome = text(
        client,
        &format!("SELECT jobs_fail($1::bigint, $2::uuid, 'boom'{options})"),
        &[&job.id, &job.lease],
    );
    let after: String = scalar(client, "SELECT clock_timestamp()::text", &[]);
    assert_eq!(outcome, "queued");
    let row = client
        .query_one(
            "SELECT extract(epoch FROM run_at - $2::text::timestamptz)::float8,
                    extract(epoch FROM run_at - $3::text::timestamptz)::float8
               FROM jobs.job WHERE id = $1",
            &[&job.id, &after, &before],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

/// Rule 6 (Retry): the delay after failed attempt k is min(max, base × 2^(k−1)), stretched by
/// at most the jitter fraction and never shortened; retry_in overrides it; retry => false ends
/// the job failed at once; jobs.backoff_delay keeps the same bounds and does jitter.
#[test]
fn retries_follow_the_backoff_and_its_overrides() {
    let mut client = Cluster::shared().connect();
    // (settings, jitter, expected delays in seconds after attempts 1, 2, ...)
    let cases: [(&str, f64, &[f64]); 3] = [
        (
            "backoff_base => '1 second', backoff_max => '1 hour', jitter => 0",
            0.0,
            &[1.0, 2.0, 4.0, 8.0, 16.0],
        ),
        (
            "backoff_base => '10 seconds', backoff_max => '30 seconds', jitter => 0",
            0.0,
            &[10.0, 20.0, 30.0, 30.0],
        ),
        (
            "backoff_base => '2 seconds', backoff_max => '1 hour', jitter => 0.5",
            0.5,
            &[2.0, 4.0, 8.0, 16.0],
        ),
    ];
    for (settings, jitter, delays) in cases {
        let attempts = delays.len() as i32;
        let queue = unique_queue(
            &mut client,
            "backoff",
            &format!("{settings}, max_attempts => {}", attempts + 1),
        );
        // Job k fails its attempts before k with a retry due at once, then attempt k with the
        // backoff and is measured; so round k claims jobs k, k+1, ...
        let jobs: Vec<i64> = (1..=attempts)
            .map(|k| enqueue(&mut client, &queue, json!({ "k": k })))
            .collect();
        for round in 1..=attempts {
            let claimed = claim(&mut client, &queue, attempts, "");
            let ids: Vec<i64> = claimed.iter().map(|c| c.id).collect();
            assert_eq!(ids, jobs[round as usize - 1..], "{settings}: round {round}");
            for job in claimed {
                assert_eq!(job.attempt, round);
                if job.id != jobs[round as usize - 1] {
                    assert_eq!(fail_now(&mut client, job.id, job.lease, "boom"), "queued");
                    continue;
                }
                let delay = delays[round as usize - 1];
                let (low, high) = fail_and_measure(&mut client, job, "");
                assert!(
                    high >= delay && low <= delay * (1.0 + jitter),
                    "{settings}: attempt {round} was delayed between {low}s and {high}s, \
                     expected {delay}s stretched by at most {jitter}"
                );
                // Measured; out of play, so it cannot come due during a later round.
                assert_eq!(cancel(&mut client, job.id), "cancelled");
            }
        }
    }

    // retry_in overrides the backoff, jitter included.
    let queue = unique_queue(
        &mut client,
        "retry-in",
        "backoff_base => '1 hour', backoff_max => '2 hours', jitter => 0.5",
    );
    enqueue(&mut client, &queue, json!({}));
    let job = claim_one(&mut client, &queue, "");
    let (low, high) = fail_and_measure(&mut client, job, ", retry_in => '7 seconds'");
    assert!(
        low <= 7.0 && high >= 7.0,
        "retry_in '7 seconds' gave a delay between {low}s and {high}s"
    );
    assert_eq!(cancel(&mut client, job.id), "cancelled");

    // retry => false ends the job at once, attempts left or not.
    let id = enqueue(&mut client, &queue, json!({}));
    let job = claim_one(&mut client, &queue, "");
    let outcome = text(
        &mut client,
        "SELECT jobs_fail($1::bigint, $2::uuid, 'fatal', retry => false)",
        &[&id, &job.lease],
    );
    assert_eq!(outcome, "failed");
    let row = job_row(&mut client, id);
    assert_eq!(row["state"], "failed");
    assert_eq!(row["attempt"], 1);
    assert_ne!(row["finished_at"], Value::Null);
    assert_eq!(last_error(&row)["error"], "fatal");
    assert_eq!(last_error(&row)["attempt"], 1);

    // The delay function itself, over many draws.
    let draws = |client: &mut Client, args: &str| -> Vec<f64> {
        scalar(
            client,
            &format!(
                "SELECT array_agg(extract(epoch FROM jobs.backoff_delay({args}))::float8)
                   FROM generate_series(1, 300)"
            ),
            &[],
        )
    };
    for (args, delay, jitter) in [
        ("'1 second', '1 hour', 0, 1", 1.0, 0.0),
        ("'1 second', '1 hour', 0, 6", 32.0, 0.0),
        ("'10 seconds', '30 seconds', 0, 3", 30.0, 0.0),
        ("'2 seconds', '1 hour', 0.5, 3", 8.0, 0.5),
        ("'10 seconds', '30 seconds', 0.5, 5", 30.0, 0.5),
        ("'1 second', '1 hour', 1.0, 1", 1.0, 1.0),
    ] {
        let values = draws(&mut client, args);
        let (min, max) = values
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        assert!(
            min >= delay && max <= delay * (1.0 + jitter),
            "backoff_delay({args}) ranged over [{min}, {max}], expected within [{delay}, {}]",
            delay * (1.0 + jitter)
        );
        if jitter > 0.0 {
            assert!(max > min, "backoff_delay({args}) is constant: no jitter");
        } else {
            assert_eq!(min, max, "backoff_delay({args}) varies without jitter");
        }
    }
}

/// Rule 7 (Cancel): a queued or a running job is cancelled at once; the running holder's
/// heartbeat, complete, fail, release and batch complete then answer 'cancelled' and record
/// nothing.
#[test]
fn cancel_is_immediate_and_the_holder_learns_it() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("cancel", "");
    let mut operator = Cluster::shared().connect();

    let queued = enqueue(&mut client, &queue, json!({"which": "queued"}));
    assert_eq!(cancel(&mut operator, queued), "cancelled");
    let row = job_row(&mut client, queued);
    assert_eq!(row["state"], "cancelled");
    assert_ne!(row["finished_at"], Value::Null);
    assert_claims_nothing(&mut client, &queue, 10, "a cancelled job was claimed");

    let running = enqueue(&mut client, &queue, json!({"which": "running"}));
    let held = claim_one(&mut client, &queue, "");
    assert_eq!(held.id, running);
    assert_eq!(cancel(&mut operator, running), "cancelled");
    let cancelled = job_row(&mut client, running);
    assert_eq!(cancelled["state"], "cancelled");
    assert_ne!(cancelled["finished_at"], Value::Null);

    assert_eq!(
        every_holder_call(&mut client, running, held.lease),
        vec!["cancelled"; 5]
    );
    let progress = text(
        &mut client,
        "SELECT jobs_heartbeat($1::bigint, $2::uuid, progress => '{\"done\": 50}')",
        &[&running, &held.lease],
    );
    assert_eq!(progress, "cancelled");
    assert_eq!(
        job_row(&mut client, running),
        cancelled,
        "the holder's calls recorded something on a cancelled job"
    );
    assert_eq!(cancel(&mut operator, running), "cancelled");
    assert_eq!(job_row(&mut client, running), cancelled);
}

/// Rule 8 (Terminal states stay terminal): succeeded, failed and cancelled jobs are not
/// changed by complete, fail, release, heartbeat, cancel or reclaim; only jobs_retry brings a
/// failed or cancelled job back (queued, attempt 0, errors kept), and it refuses (55000) a
/// queued, running or succeeded job.
#[test]
fn terminal_states_stay_terminal_except_through_retry() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("terminal", "max_attempts => 3");

    let succeeded = enqueue(&mut client, &queue, json!({"ends": "succeeded"}));
    let s = claim_one(&mut client, &queue, "");
    assert_eq!(complete(&mut client, succeeded, s.lease), "succeeded");

    let failed = enqueue(&mut client, &queue, json!({"ends": "failed"}));
    let f = claim_one(&mut client, &queue, "");
    let outcome = text(
        &mut client,
        "SELECT jobs_fail($1::bigint, $2::uuid, 'fatal', retry => false)",
        &[&failed, &f.lease],
    );
    assert_eq!(outcome, "failed");

    let cancelled = enqueue(&mut client, &queue, json!({"ends": "cancelled"}));
    let c = claim_one(&mut client, &queue, "");
    assert_eq!(cancel(&mut client, cancelled), "cancelled");

    for (id, lease, end, answer) in [
        (succeeded, s.lease, "succeeded", "lost"),
        (failed, f.lease, "failed", "lost"),
        (cancelled, c.lease, "cancelled", "cancelled"),
    ] {
        let before = job_row(&mut client, id);
        assert_eq!(before["state"], end);
        assert_eq!(
            every_holder_call(&mut client, id, lease),
            vec![answer; 5],
            "{end}"
        );
        assert_eq!(cancel(&mut client, id), end, "cancel of a {end} job");
        reclaim(&mut client);
        assert_eq!(job_row(&mut client, id), before, "a {end} job changed");
    }

    for (id, end) in [(failed, "failed"), (cancelled, "cancelled")] {
        let before = job_row(&mut client, id);
        assert_eq!(
            text(&mut client, "SELECT jobs_retry($1::bigint)", &[&id]),
            "queued",
            "retry of a {end} job"
        );
        let after = job_row(&mut client, id);
        assert_eq!(after["state"], "queued");
        assert_eq!(after["attempt"], 0);
        assert_eq!(
            after["errors"], before["errors"],
            "retry keeps the error history"
        );
        assert_eq!(after["finished_at"], Value::Null);
    }
    assert_eq!(
        job_row(&mut client, failed)["errors"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    // Queued (just retried), running and succeeded jobs refuse a retry.
    let retry = |client: &mut Client, id: i64| {
        sqlstate(client.query_one("SELECT jobs_retry($1::bigint)", &[&id]))
    };
    assert_eq!(retry(&mut client, failed), "55000", "retry of a queued job");
    let again = claim(&mut client, &queue, 10, "");
    assert_eq!(again.len(), 2, "both retried jobs are claimable");
    assert!(
        again.iter().all(|j| j.attempt == 1),
        "fresh attempts after retry"
    );
    assert_eq!(state(&mut client, failed), "running");
    assert_eq!(
        retry(&mut client, failed),
        "55000",
        "retry of a running job"
    );
    assert_eq!(
        retry(&mut client, succeeded),
        "55000",
        "retry of a succeeded job"
    );
    assert_eq!(state(&mut client, succeeded), "succeeded");
    assert_eq!(retry(&mut client, -1), "P0002", "retry of an unknown job");
}

/// Rule 9 (Transactions): everything joins the caller's transaction. A rolled-back enqueue
/// (single or batch) never existed for anyone; a rolled-back claim leaves the job queued with
/// its attempt and no lease; a rolled-back heartbeat (with a new lease length and progress),
/// complete, fail or release leaves it running under its lease, exactly as it was.
#[test]
fn rolled_back_calls_leave_no_trace() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("tx", "max_attempts => 2");
    let mut other = Cluster::shared().connect();

    let mut tx = client.transaction().unwrap();
    let single: i64 = scalar(
        &mut tx,
        "SELECT jobs_enqueue($1::text, '{\"n\": 1}')",
        &[&queue],
    );
    let batch: Vec<i64> = column(
        &mut tx,
        "SELECT id FROM jobs_enqueue_batch($1::text, ARRAY['{\"n\": 2}', '{\"n\": 3}']::jsonb[])",
        &[&queue],
    );
    assert_eq!(batch.len(), 2);
    let all: Vec<i64> = std::iter::once(single).chain(batch).collect();
    let visible_inside: i64 = scalar(
        &mut tx,
        "SELECT count(*) FROM jobs.job WHERE id = ANY ($1)",
        &[&all],
    );
    assert_eq!(visible_inside, 3, "the transaction sees its own jobs");
    let count_outside = |other: &mut Client| -> i64 { jobs_in(other, &queue) };
    assert_eq!(count_outside(&mut other), 0, "uncommitted jobs leaked");
    assert!(claim(&mut other, &queue, 10, "").is_empty());
    tx.rollback().unwrap();
    assert_eq!(count_outside(&mut other), 0);
    assert_eq!(count_outside(&mut client), 0);
    assert!(claim(&mut other, &queue, 10, "").is_empty());

    // A claim that rolls back.
    let id = enqueue(&mut client, &queue, json!({"n": 4}));
    let before = job_row(&mut client, id);
    let mut tx = client.transaction().unwrap();
    let claimed: i64 = scalar(&mut tx, "SELECT id FROM jobs_claim($1::text)", &[&queue]);
    assert_eq!(claimed, id);
    tx.rollback().unwrap();
    assert_eq!(
        job_row(&mut client, id),
        before,
        "a rolled-back claim left a trace"
    );
    assert_eq!(before["state"], "queued");
    assert_eq!(before["attempt"], 0);
    assert_eq!(before["lease"], Value::Null);

    // Settles that roll back.
    let held = claim_one(&mut client, &queue, "");
    assert_eq!((held.id, held.attempt), (id, 1));
    let running = job_row(&mut client, id);
    for (call, answer) in [
        (
            "SELECT jobs_heartbeat($1::bigint, $2::uuid, extend => '1 hour', progress => '{\"p\": 1}')",
            "running",
        ),
        (
            "SELECT jobs_complete($1::bigint, $2::uuid, '{\"ok\": true}')",
            "succeeded",
        ),
        ("SELECT jobs_fail($1::bigint, $2::uuid, 'boom')", "queued"),
        (
            "SELECT jobs_fail($1::bigint, $2::uuid, 'boom', retry => false)",
            "failed",
        ),
        (
            "SELECT jobs_release($1::bigint, $2::uuid, 'later')",
            "queued",
        ),
    ] {
        let mut tx = client.transaction().unwrap();
        let outcome: String = scalar(&mut tx, call, &[&id, &held.lease]);
        assert_eq!(outcome, answer, "{call}");
        tx.rollback().unwrap();
        assert_eq!(
            job_row(&mut client, id),
            running,
            "{call} rolled back left a trace"
        );
    }
    assert_eq!(complete(&mut client, id, held.lease), "succeeded");
}

/// A claim rolled back to a savepoint (or by an exception block) gives its jobs back, and
/// the next claims find them: the claim had raised its queue's claim floor past them, and the
/// floor must not outlive the part of the transaction that moved it.
#[test]
fn jobs_of_a_claim_rolled_back_to_a_savepoint_are_claimable_again() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("savepoint", "");
    let ids: Vec<i64> = (1..=4)
        .map(|n| enqueue(&mut client, &queue, json!({ "n": n })))
        .collect();
    // A first claim that commits puts a floor on the queue.
    assert_eq!(claim_one(&mut client, &queue, "").id, ids[0]);

    let mut tx = client.transaction().unwrap();
    tx.batch_execute("SAVEPOINT before_claim").unwrap();
    let claimed: i64 = scalar(&mut tx, "SELECT id FROM jobs_claim($1::text)", &[&queue]);
    assert_eq!(claimed, ids[1]);
    tx.batch_execute("ROLLBACK TO SAVEPOINT before_claim")
        .unwrap();
    tx.commit().unwrap();

    let in_exception_block = format!(
        "DO $$ BEGIN
             PERFORM jobs_claim('{queue}');
             RAISE EXCEPTION 'the job cannot run now';
         EXCEPTION WHEN raise_exception THEN NULL;
         END $$"
    );
    client.batch_execute(&in_exception_block).unwrap();

    let again: Vec<i64> = claim_ids(&mut client, &queue, 10);
    assert_eq!(
        again,
        ids[1..].to_vec(),
        "jobs given back by a rolled-back savepoint were not claimable"
    );
}

/// A rolled-back part of a transaction that took no job (a waiting claim's empty attempt, a
/// savepoint around a claim that found nothing) leaves the claim floor where it is, even when
/// the transaction took jobs before it; one that took jobs resets it (the jobs come back).
/// Resetting it for nothing made every claim after a busy queue's contended wake-ups start at
/// the head of the queue, walking every dead index entry an old snapshot keeps.
#[test]
fn a_rolled_back_part_that_took_nothing_leaves_the_floor() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("floor-kept", "");
    let ids: Vec<i64> = (1..=5)
        .map(|n| enqueue(&mut client, &queue, json!({ "n": n })))
        .collect();
    let floor = |client: &mut postgres::Transaction<'_>| -> Option<i64> {
        scalar(
            client,
            "SELECT floor_id FROM jobs.runtime_state($1)",
            &[&queue],
        )
    };
    let mut tx = client.transaction().unwrap();
    let taken: Vec<i64> = claim_ids(&mut tx, &queue, 2);
    assert_eq!(taken, ids[..2]);
    let raised = floor(&mut tx);
    assert!(raised.is_some(), "the claim raised the floor");
    tx.batch_execute("SAVEPOINT nothing").unwrap();
    assert!(claim(&mut tx, &queue, 1, ", kinds => ARRAY['no-such-kind']").is_empty());
    tx.batch_execute("ROLLBACK TO SAVEPOINT nothing").unwrap();
    assert_eq!(
        floor(&mut tx),
        raised,
        "a part that took nothing reset the floor"
    );
    tx.batch_execute("SAVEPOINT something").unwrap();
    assert_eq!(claim(&mut tx, &queue, 1, "")[0].id, ids[2]);
    tx.batch_execute("ROLLBACK TO SAVEPOINT something").unwrap();
    assert_eq!(
        floor(&mut tx),
        None,
        "a part that took a job must reset the floor"
    );
    tx.commit().unwrap();
    let again: Vec<i64> = claim_ids(&mut client, &queue, 10);
    assert_eq!(again, ids[2..]);
}

/// Claims start past the jobs that claims in flight hold (the queue's reach), but a job
/// enqueued before them in claim order, and the jobs of such a claim that rolls back, are
/// claimed first.
#[test]
fn jobs_of_a_rolled_back_claim_come_before_later_ones() {
    let mut holder = Cluster::shared().connect();
    let (mut client, queue) = Cluster::shared().connect_with_queue("reach", "");
    let ids: Vec<i64> = (1..=20)
        .map(|n| enqueue(&mut client, &queue, json!({ "n": n })))
        .collect();
    let ids_of = |claimed: Vec<Claimed>| -> Vec<i64> { claimed.iter().map(|c| c.id).collect() };
    // A committed claim puts a floor on the queue.
    assert_eq!(ids_of(claim(&mut client, &queue, 2, "")), ids[0..2]);

    let mut tx = holder.transaction().unwrap();
    let held: Vec<i64> = column(
        &mut tx,
        "SELECT id FROM jobs_claim($1::text, n => 5)",
        &[&queue],
    );
    assert_eq!(held, ids[2..7]);
    assert_eq!(
        ids_of(claim(&mut client, &queue, 5, "")),
        ids[7..12],
        "a claim while another holds the head"
    );
    // A job that comes before the jobs claims in flight hold is claimed first.
    let urgent = enqueue_with(
        &mut client,
        &queue,
        json!({"urgent": true}),
        ", priority => -1",
    );
    assert_eq!(ids_of(claim(&mut client, &queue, 1, "")), [urgent]);
    tx.rollback().unwrap();
    assert_eq!(
        ids_of(claim(&mut client, &queue, 5, "")),
        ids[2..7],
        "the rolled-back claim's jobs were not claimed next"
    );
    assert_eq!(ids_of(claim(&mut client, &queue, 10, "")), ids[12..20]);
}

/// A claim sees the jobs its own transaction made queued in claim order, also those below the
/// queue's floor (which their commit would lower only for the claims after it): Rule 2 within
/// one transaction.
#[test]
fn a_claim_takes_first_a_job_its_own_transaction_queued_before_the_floor() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("own-floor", "");
    let ids: Vec<i64> = (1..=4)
        .map(|n| enqueue(&mut client, &queue, json!({ "n": n })))
        .collect();
    let ids_of = |claimed: Vec<Claimed>| -> Vec<i64> { claimed.iter().map(|c| c.id).collect() };
    // A committed claim puts a floor on the queue, past its job.
    assert_eq!(ids_of(claim(&mut client, &queue, 2, "")), ids[0..2]);
    client.batch_execute("BEGIN").unwrap();
    let urgent = enqueue_with(
        &mut client,
        &queue,
        json!({"urgent": true}),
        ", priority => -1",
    );
    assert_eq!(
        ids_of(claim(&mut client, &queue, 1, "")),
        [urgent],
        "the claim passed over its own transaction's job"
    );
    client.batch_execute("ROLLBACK").unwrap();
    assert_eq!(ids_of(claim(&mut client, &queue, 5, "")), ids[2..4]);
}

/// The dead-letter copies of job `id` in queue `dead_letter`, as full rows.
fn dead_letter_copies(client: &mut Client, dead_letter: &str, id: i64) -> Vec<Value> {
    column(
        client,
        "SELECT to_jsonb(j) FROM jobs.job j
              WHERE j.queue = $1 AND (j.origin ->> 'id')::bigint = $2",
        &[&dead_letter, &id],
    )
}

/// Checks the single dead-letter copy of a failed job: same kind, payload and headers, queued
/// in the dead-letter queue, with origin {queue, id, errors}.
fn assert_dead_lettered(client: &mut Client, queue: &str, dead_letter: &str, id: i64) {
    let failed = job_row(client, id);
    assert_eq!(failed["state"], "failed");
    let copies = dead_letter_copies(client, dead_letter, id);
    assert_eq!(copies.len(), 1, "one dead-letter copy of job {id}");
    let copy = &copies[0];
    assert_eq!(copy["state"], "queued");
    assert_eq!(copy["attempt"], 0);
    for field in ["kind", "payload", "headers"] {
        assert_eq!(copy[field], failed[field], "the copy's {field}");
    }
    assert_eq!(
        copy["origin"],
        json!({"queue": queue, "id": id, "errors": failed["errors"]})
    );
}

/// Dead letters (SPEC "Operating"): a job that ends failed in a queue with dead_letter set
/// (final failed attempt, retry => false, reclaim on the final attempt) is copied into the
/// dead-letter queue in the same transaction; a rolled-back final fail leaves no copy, and
/// jobs that do not end failed are not copied.
#[test]
fn jobs_that_end_failed_are_copied_to_the_dead_letter_queue() {
    let (mut client, dead_letter) = Cluster::shared().connect_with_queue("dlq", "");
    let queue = unique_queue(
        &mut client,
        "dlq-source",
        &format!("max_attempts => 2, dead_letter => '{dead_letter}'"),
    );
    let headers = json!({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"});
    let enqueue_kind = |client: &mut Client, kind: &str, options: &str| -> i64 {
        scalar(
            client,
            &format!(
                "SELECT jobs_enqueue($1::text, jsonb_build_object('kind', $2::text),
                                     kind => $2::text, headers => $3::jsonb{options})"
            ),
            &[&queue, &kind, &headers],
        )
    };

    // Fails on its last attempt; the retry before it makes no copy.
    let exhausted = enqueue_kind(&mut client, "exhausted", "");
    let job = claim_one(&mut client, &queue, "");
    assert_eq!(
        fail_now(&mut client, exhausted, job.lease, "first"),
        "queued"
    );
    assert!(dead_letter_copies(&mut client, &dead_letter, exhausted).is_empty());
    let job = claim_one(&mut client, &queue, "");
    assert_eq!(fail(&mut client, exhausted, job.lease, "second"), "failed");
    assert_dead_lettered(&mut client, &queue, &dead_letter, exhausted);

    // Fails with retry => false on its first attempt.
    let fatal = enqueue_kind(&mut client, "fatal", "");
    let job = claim_one(&mut client, &queue, "");
    let outcome = text(
        &mut client,
        "SELECT jobs_fail($1::bigint, $2::uuid, 'fatal', retry => false)",
        &[&fatal, &job.lease],
    );
    assert_eq!(outcome, "failed");
    assert_dead_lettered(&mut client, &queue, &dead_letter, fatal);

    // Its lease runs out on the final attempt.
    let expired = enqueue_kind(&mut client, "expired", ", max_attempts => 1");
    let job = claim_one(&mut client, &queue, ", lease => '100 milliseconds'");
    assert_eq!(job.id, expired);
    wait_for_expiry(&mut client, &[expired]);
    wait_for_reclaim(&mut client, expired);
    assert_dead_lettered(&mut client, &queue, &dead_letter, expired);
    assert_eq!(
        last_error(&job_row(&mut client, expired))["error"],
        "lease expired on the final attempt"
    );

    // A final fail that rolls back: the copy exists inside the transaction, then never did.
    let rolled_back = enqueue_kind(&mut client, "rolled-back", ", max_attempts => 1");
    let job = claim_one(&mut client, &queue, "");
    let running = job_row(&mut client, rolled_back);
    let mut tx = client.transaction().unwrap();
    let outcome: String = scalar(
        &mut tx,
        "SELECT jobs_fail($1::bigint, $2::uuid, 'boom')",
        &[&rolled_back, &job.lease],
    );
    assert_eq!(outcome, "failed");
    let copies_inside: i64 = scalar(
        &mut tx,
        "SELECT count(*) FROM jobs.job WHERE queue = $1 AND (origin ->> 'id')::bigint = $2",
        &[&dead_letter, &rolled_back],
    );
    assert_eq!(
        copies_inside, 1,
        "the copy is made in the failing transaction"
    );
    tx.rollback().unwrap();
    assert!(dead_letter_copies(&mut client, &dead_letter, rolled_back).is_empty());
    assert_eq!(job_row(&mut client, rolled_back), running);

    // Jobs that end otherwise are not copied.
    assert_eq!(complete(&mut client, rolled_back, job.lease), "succeeded");
    let cancelled = enqueue_kind(&mut client, "cancelled", "");
    assert_eq!(cancel(&mut client, cancelled), "cancelled");
    let copies = jobs_in(&mut client, &dead_letter);
    assert_eq!(copies, 3, "only the three failed jobs were dead-lettered");
}

/// Queue operations (SPEC "Queues"): jobs_create_queue updates only the settings given; a
/// paused queue hands out nothing until resumed; drop refuses (55006) while jobs are queued or
/// running unless forced, and force drops the queue with its jobs; `default` exists.
#[test]
fn queue_settings_pause_resume_and_drop() {
    let (mut client, queue) = Cluster::shared().connect_with_queue(
        "ops",
        "lease => '10 seconds', max_attempts => 3, backoff_base => '2 seconds', \
         backoff_max => '1 minute', jitter => 0.2, retention => '1 day'",
    );
    let settings = |client: &mut Client| -> Value {
        scalar(
            client,
            "SELECT to_jsonb(q) - 'updated_at' FROM jobs.queue q WHERE name = $1",
            &[&queue],
        )
    };
    let before = settings(&mut client);
    let created_as_given: bool = scalar(
        &mut client,
        "SELECT lease = '10 seconds' AND max_attempts = 3 AND backoff_base = '2 seconds'
                AND backoff_max = '1 minute' AND jitter = 0.2 AND retention = '1 day'
                AND NOT paused AND dead_letter IS NULL
           FROM jobs.queue WHERE name = $1",
        &[&queue],
    );
    assert!(created_as_given, "queue settings: {before}");

    let returned: Value = scalar(
        &mut client,
        "SELECT to_jsonb(jobs_create_queue($1::text, max_attempts => 7))",
        &[&queue],
    );
    assert_eq!(returned["max_attempts"], 7);
    let mut expected = before.clone();
    expected["max_attempts"] = json!(7);
    assert_eq!(
        settings(&mut client),
        expected,
        "only max_attempts may change"
    );

    let other = unique_queue(&mut client, "ops-dlq", "");
    scalar::<Value>(
        &mut client,
        "SELECT to_jsonb(jobs_create_queue($1::text, dead_letter => $2::text))",
        &[&queue, &other],
    );
    expected["dead_letter"] = json!(other);
    assert_eq!(settings(&mut client), expected);
    scalar::<Value>(
        &mut client,
        "SELECT to_jsonb(jobs_create_queue($1::text, dead_letter => ''))",
        &[&queue],
    );
    expected["dead_letter"] = Value::Null;
    assert_eq!(
        settings(&mut client),
        expected,
        "dead_letter => '' clears it"
    );

    // Pause and resume.
    let first = enqueue(&mut client, &queue, json!({"n": 1}));
    let second = enqueue(&mut client, &queue, json!({"n": 2}));
    client
        .execute("SELECT jobs_pause($1::text)", &[&queue])
        .unwrap();
    assert_claims_nothing(&mut client, &queue, 10, "a paused queue handed out a job");
    let (paused, queued): (bool, i64) = row(
        &mut client,
        "SELECT paused, ready + scheduled FROM jobs.queue_stats WHERE queue = $1",
        &[&queue],
    );
    assert!(paused);
    assert_eq!(queued, 2, "a paused queue keeps its jobs");
    client
        .execute("SELECT jobs_resume($1::text)", &[&queue])
        .unwrap();
    let held = claim_one(&mut client, &queue, "");
    assert_eq!(held.id, first);

    // Drop refuses while jobs are queued or running.
    let drop_queue =
        |client: &mut Client| client.execute("SELECT jobs_drop_queue($1::text)", &[&queue]);
    assert_eq!(
        sqlstate(drop_queue(&mut client)),
        "55006",
        "queued and running jobs"
    );
    assert_eq!(cancel(&mut client, second), "cancelled");
    assert_eq!(sqlstate(drop_queue(&mut client)), "55006", "a running job");
    assert_eq!(
        state(&mut client, first),
        "running",
        "a refused drop changed nothing"
    );
    client
        .execute("SELECT jobs_drop_queue($1::text, force => true)", &[&queue])
        .unwrap();
    let left: i64 = scalar(
        &mut client,
        "SELECT (SELECT count(*) FROM jobs.queue WHERE name = $1)
              + (SELECT count(*) FROM jobs.job WHERE queue = $1)",
        &[&queue],
    );
    assert_eq!(left, 0, "force drops the queue and its jobs");
    assert_eq!(
        sqlstate(client.query_one("SELECT jobs_enqueue($1::text)", &[&queue])),
        "42704",
        "enqueue into a dropped queue"
    );

    // Finished jobs do not hold a drop back.
    let finished = unique_queue(&mut client, "ops-finished", "");
    let id = enqueue(&mut client, &finished, json!({}));
    let job = claim_one(&mut client, &finished, "");
    assert_eq!(complete(&mut client, id, job.lease), "succeeded");
    client
        .execute("SELECT jobs_drop_queue($1::text)", &[&finished])
        .unwrap();
    assert!(!job_exists(&mut client, id));

    // The default queue exists, with the default settings, and takes jobs.
    let defaults: bool = scalar(
        &mut client,
        "SELECT lease = '30 seconds' AND max_attempts = 5 AND backoff_base = '1 second'
                AND backoff_max = '1 hour' AND jitter = 0.1 AND retention = '7 days'
           FROM jobs.queue WHERE name = 'default'",
        &[],
    );
    assert!(
        defaults,
        "the default queue has the SPEC's default settings"
    );
    let mut tx = client.transaction().unwrap();
    let id: i64 = scalar(&mut tx, "SELECT jobs_enqueue('default')", &[]);
    assert!(id > 0);
    tx.rollback().unwrap();
}

/// Observability (SPEC "Operating"): jobs_get returns the row; jobs_list pages newest first
/// through before_id, covering every job once, and filters by state and kind;
/// jobs.queue_stats counts by state; jobs_metrics() reports the same.
#[test]
fn get_list_stats_and_metrics_report_the_jobs() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("observe", "");
    let kinds = ["a", "b", "a", "b", "a", "b", "a"];
    let ids: Vec<i64> = kinds
        .iter()
        .map(|kind| {
            enqueue_with(
                &mut client,
                &queue,
                json!({"kind": kind}),
                &format!(", kind => '{kind}'"),
            )
        })
        .collect();
    let scheduled = enqueue_with(
        &mut client,
        &queue,
        json!({}),
        ", kind => 'later', run_at => now() + interval '1 hour'",
    );

    // States: ids[0] succeeded, ids[1] failed, ids[2] cancelled, ids[3] running, the rest
    // queued (three due, one scheduled).
    let held = claim(&mut client, &queue, 2, "");
    assert_eq!(held.iter().map(|c| c.id).collect::<Vec<_>>(), ids[..2]);
    assert_eq!(complete(&mut client, ids[0], held[0].lease), "succeeded");
    let outcome = text(
        &mut client,
        "SELECT jobs_fail($1::bigint, $2::uuid, 'fatal', retry => false)",
        &[&ids[1], &held[1].lease],
    );
    assert_eq!(outcome, "failed");
    assert_eq!(cancel(&mut client, ids[2]), "cancelled");
    assert_eq!(claim_one(&mut client, &queue, "").id, ids[3]);

    // jobs_get
    let got: Value = scalar(
        &mut client,
        "SELECT to_jsonb(jobs_get($1::bigint))",
        &[&ids[0]],
    );
    assert_eq!(got, job_row(&mut client, ids[0]));
    assert_eq!(got["result"], Value::Null);
    assert_eq!(got["state"], "succeeded");
    let missing: Option<Value> = scalar(&mut client, "SELECT to_jsonb(jobs_get(-1::bigint))", &[]);
    assert_eq!(missing, None);

    // jobs_list, in pages of two.
    let list = |client: &mut Client,
                state: Option<&str>,
                kind: Option<&str>,
                limit: i32,
                before: Option<i64>|
     -> Vec<i64> {
        column(
            client,
            "SELECT id FROM jobs_list($1::text, state => $2::text, kind => $3::text,
                                          \"limit\" => $4::int, before_id => $5::bigint)",
            &[&queue, &state, &kind, &limit, &before],
        )
    };
    let mut all: Vec<i64> = ids.iter().copied().chain([scheduled]).collect();
    all.sort_unstable_by(|a, b| b.cmp(a));
    let mut paged = Vec::new();
    let mut before = None;
    for _ in 0..all.len() + 1 {
        let page = list(&mut client, None, None, 2, before);
        assert!(page.len() <= 2);
        let Some(&last) = page.last() else { break };
        paged.extend(page);
        before = Some(last);
    }
    assert_eq!(paged, all, "pages of two, newest first, each job once");
    assert_eq!(list(&mut client, None, None, 100, None), all);

    let queued_ids: Vec<i64> = all
        .iter()
        .copied()
        .filter(|id| *id == scheduled || ids[4..].contains(id))
        .collect();
    assert_eq!(
        list(&mut client, Some("queued"), None, 100, None),
        queued_ids
    );
    assert_eq!(
        list(&mut client, Some("running"), None, 100, None),
        [ids[3]]
    );
    assert_eq!(list(&mut client, Some("failed"), None, 100, None), [ids[1]]);
    let kind_a: Vec<i64> = all
        .iter()
        .copied()
        .filter(|id| {
            ids.iter()
                .position(|x| x == id)
                .is_some_and(|i| kinds[i] == "a")
        })
        .collect();
    assert_eq!(list(&mut client, None, Some("a"), 100, None), kind_a);
    assert_eq!(
        list(&mut client, Some("queued"), Some("a"), 100, None),
        [ids[6], ids[4]]
    );
    assert_eq!(
        sqlstate(client.query(
            "SELECT * FROM jobs_list($1::text, state => 'done')",
            &[&queue]
        )),
        "22023"
    );

    // jobs.queue_stats: ready counts the queued jobs that are due, scheduled those not yet
    // due, so the states add up to the queue's jobs.
    let row = client
        .query_one(
            "SELECT ready, scheduled, running, succeeded, failed, cancelled,
                    finished_last_minute, oldest_ready_age >= interval '0', paused,
                    (SELECT count(*) FROM jobs.job WHERE queue = $1)
               FROM jobs.queue_stats WHERE queue = $1",
            &[&queue],
        )
        .unwrap();
    let counts: Vec<i64> = (0..7).map(|i| row.get(i)).collect();
    assert_eq!(counts, [3, 1, 1, 1, 1, 1, 3]);
    assert!(
        row.get::<_, bool>(7),
        "oldest_ready_age is set while due jobs wait"
    );
    assert!(!row.get::<_, bool>(8));
    assert_eq!(
        counts[..6].iter().sum::<i64>(),
        row.get::<_, i64>(9),
        "the states add up to the queue's jobs"
    );

    // jobs_metrics()
    let metrics = text(&mut client, "SELECT jobs_metrics()", &[]);
    for (state, n) in [
        ("ready", 3),
        ("scheduled", 1),
        ("running", 1),
        ("succeeded", 1),
        ("failed", 1),
        ("cancelled", 1),
    ] {
        let line = format!("pg_jobs_queue_jobs{{queue=\"{queue}\",state=\"{state}\"}} {n}");
        assert!(
            metrics.lines().any(|l| l == line),
            "jobs_metrics() lacks {line:?}:\n{metrics}"
        );
    }
    for line in [
        format!("pg_jobs_finished_last_minute{{queue=\"{queue}\"}} 3"),
        format!("pg_jobs_queue_paused{{queue=\"{queue}\"}} 0"),
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "jobs_metrics() lacks {line:?}:\n{metrics}"
        );
    }
    assert!(metrics.lines().any(|l| l.starts_with(&format!(
        "pg_jobs_oldest_ready_age_seconds{{queue=\"{queue}\"}} "
    ))));
}

/// Headers (SPEC "The model"): carried untouched to every attempt, through failure, retry,
/// release and batch enqueue.
#[test]
fn headers_reach_every_attempt_untouched() {
    let (mut client, queue) = Cluster::shared().connect_with_queue("headers", "max_attempts => 3");
    let headers = json!({
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "request_id": "req-42",
        "nested": {"list": [1, 2, 3], "empty": {}}
    });
    let id: i64 = scalar(
        &mut client,
        "SELECT jobs_enqueue($1::text, '{\"x\": 1}', headers => $2::jsonb)",
        &[&queue, &headers],
    );
    let claim_headers = |client: &mut Client| -> (i64, Uuid, i32, Value) {
        row(
            client,
            "SELECT id, lease, attempt, headers FROM jobs_claim($1::text)",
            &[&queue],
        )
    };

    let (got, lease, attempt, seen) = claim_headers(&mut client);
    assert_eq!((got, attempt), (id, 1));
    assert_eq!(seen, headers);
    assert_eq!(fail_now(&mut client, id, lease, "boom"), "queued");

    let (_, lease, attempt, seen) = claim_headers(&mut client);
    assert_eq!(attempt, 2);
    assert_eq!(seen, headers, "headers after a failed attempt");
    assert_eq!(release(&mut client, id, lease), "queued");

    let (_, lease, attempt, seen) = claim_headers(&mut client);
    assert_eq!(attempt, 2);
    assert_eq!(seen, headers, "headers after a release");
    let outcome = text(
        &mut client,
        "SELECT jobs_fail($1::bigint, $2::uuid, 'fatal', retry => false)",
        &[&id, &lease],
    );
    assert_eq!(outcome, "failed");
    assert_eq!(
        text(&mut client, "SELECT jobs_retry($1::bigint)", &[&id]),
        "queued"
    );
    let (_, _, attempt, seen) = claim_headers(&mut client);
    assert_eq!(attempt, 1);
    assert_eq!(seen, headers, "headers after jobs_retry");
    assert_eq!(job_row(&mut client, id)["headers"], headers);

    let batch: Vec<i64> = column(
        &mut client,
        "SELECT id FROM jobs_enqueue_batch($1::text, ARRAY['{}', '{}']::jsonb[], headers => $2::jsonb)",
        &[&queue, &headers],
    );
    let claimed: Vec<(i64, Value)> = client
        .query(
            "SELECT id, headers FROM jobs_claim($1::text, n => 10)",
            &[&queue],
        )
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(
        claimed,
        batch
            .iter()
            .map(|&id| (id, headers.clone()))
            .collect::<Vec<_>>()
    );
}

// ---------------------------------------------------------------------------------------------
// Rules that need a test able to fail on the bug they name (issue 16)
// ---------------------------------------------------------------------------------------------

/// The server's clock, in microseconds since the epoch.
const SERVER_MICROS: &str = "(extract(epoch FROM clock_timestamp()) * 1000000)::int8";

/// A timestamp column of job `id`, in microseconds since the epoch (`None`: NULL).
fn job_micros(client: &mut Client, id: i64, column: &str) -> Option<i64> {
    scalar(
        client,
        &format!(
            "SELECT (extract(epoch FROM {column}) * 1000000)::int8 FROM jobs.job WHERE id = $1"
        ),
        &[&id],
    )
}

/// Changes settings of an existing queue (SQL named arguments).
fn set_queue(client: &mut Client, queue: &str, settings: &str) {
    client
        .batch_execute(&format!("SELECT jobs_create_queue('{queue}', {settings})"))
        .unwrap_or_else(|e| panic!("change queue {queue} ({settings}): {e}"));
}

/// Claims one job of `queue` with `extra` arguments between two readings of the server's
/// clock: (job, reported lease_until, max_attempts, clock before, clock after), times in µs.
fn claim_timed(client: &mut Client, queue: &str, extra: &str) -> (Claimed, i64, i32, i64, i64) {
    let before: i64 = scalar(client, &format!("SELECT {SERVER_MICROS}"), &[]);
    let row = client
        .query_one(
            &format!(
                "SELECT id, lease, attempt, (extract(epoch FROM lease_until) * 1000000)::int8,
                        max_attempts
                   FROM jobs_claim($1::text{extra})"
            ),
            &[&queue],
        )
        .unwrap_or_else(|e| panic!("claim from {queue}: {e}"));
    let after: i64 = scalar(client, &format!("SELECT {SERVER_MICROS}"), &[]);
    let job = Claimed {
        id: row.get(0),
        lease: row.get(1),
        attempt: row.get(2),
    };
    (job, row.get(3), row.get(4), before, after)
}

/// A claim that names no lease takes its queue's as last changed: by a commit of another
/// session (the settings a session keeps go then), and by its own transaction before that
/// commits, but not by one that rolled back.
#[test]
fn a_claim_takes_its_queues_lease_as_last_changed() {
    let cluster = Cluster::shared();
    let (mut client, queue) = cluster.connect_with_queue("lease-changed", "lease => '45 seconds'");
    let mut other = cluster.connect();
    for n in 0..4 {
        enqueue(&mut client, &queue, json!({ "n": n }));
    }
    // The lease length (seconds) the claim of the next job gave it, read by `tx`.
    fn claim_lease(tx: &mut impl postgres::GenericClient, queue: &str) -> i64 {
        let id: i64 = tx
            .query_one("SELECT id FROM jobs_claim($1)", &[&queue])
            .expect("claim")
            .get(0);
        scalar(
            tx,
            "SELECT extract(epoch FROM lease_duration)::int8 FROM jobs.job WHERE id = $1",
            &[&id],
        )
    }
    assert_eq!(claim_lease(&mut client, &queue), 45);
    other
        .execute(
            "SELECT jobs_create_queue($1, lease => '2 minutes')",
            &[&queue],
        )
        .unwrap();
    assert_eq!(
        claim_lease(&mut client, &queue),
        120,
        "another session's committed change"
    );
    let mut tx = client.transaction().unwrap();
    tx.execute(
        "SELECT jobs_create_queue($1, lease => '3 minutes')",
        &[&queue],
    )
    .unwrap();
    assert_eq!(
        claim_lease(&mut tx, &queue),
        180,
        "the change of the claim's own transaction"
    );
    tx.rollback().unwrap();
    assert_eq!(
        claim_lease(&mut client, &queue),
        120,
        "a change rolled back"
    );
}

/// A claim sees its queue paused or resumed as last changed, though its session keeps the
/// queue's settings (claims do not read the queue row while no queue changed): another
/// session's committed pause and resume, its own transaction's resume, not a rolled-back one.
#[test]
fn a_claim_sees_its_queue_paused_and_resumed_as_last_changed() {
    let cluster = Cluster::shared();
    let (mut client, queue) = cluster.connect_with_queue("paused-changed", "");
    let mut other = cluster.connect();
    for n in 0..4 {
        enqueue(&mut client, &queue, json!({ "n": n }));
    }
    // How many jobs a claim of one by `tx` gets now.
    fn claimed(tx: &mut impl postgres::GenericClient, queue: &str) -> usize {
        tx.query("SELECT id FROM jobs_claim($1)", &[&queue])
            .expect("claim")
            .len()
    }
    assert_eq!(claimed(&mut client, &queue), 1);
    other
        .execute("SELECT jobs_pause($1::text)", &[&queue])
        .unwrap();
    assert_eq!(claimed(&mut client, &queue), 0, "another session paused it");
    let mut tx = client.transaction().unwrap();
    tx.execute("SELECT jobs_resume($1::text)", &[&queue])
        .unwrap();
    assert_eq!(
        claimed(&mut tx, &queue),
        1,
        "its own transaction resumed it"
    );
    tx.rollback().unwrap();
    assert_eq!(
        claimed(&mut client, &queue),
        0,
        "the resume was rolled back"
    );
    other
        .execute("SELECT jobs_resume($1::text)", &[&queue])
        .unwrap();
    assert_eq!(
        claimed(&mut client, &queue),
        1,
        "another session resumed it"
    );
}

/// An enqueue takes its queue's `max_attempts` as last changed, though the session keeps the
/// queue rows it read (an enqueue does not read `jobs.queue` while no queue changed): another
/// session's committed change is seen by the next enqueue, the enqueuing transaction's own
/// change is seen at once and a rolled-back one never. A REPEATABLE READ transaction reads
/// the row as its snapshot has it, and keeps nothing: what its old snapshot saw must not pass
/// for the current row afterwards.
#[test]
fn an_enqueue_takes_its_queues_max_attempts_as_last_changed() {
    let cluster = Cluster::shared();
    let (mut client, queue) = cluster.connect_with_queue("attempts-changed", "max_attempts => 3");
    let mut other = cluster.connect();
    // The max_attempts of a job enqueued now by `tx`.
    fn enqueued_attempts(tx: &mut impl postgres::GenericClient, queue: &str) -> i32 {
        let id: i64 = tx
            .query_one("SELECT jobs_enqueue($1, '{}')", &[&queue])
            .expect("enqueue")
            .get(0);
        scalar(
            tx,
            "SELECT max_attempts FROM jobs.job WHERE id = $1",
            &[&id],
        )
    }
    // Sets the queue's max_attempts through `tx`.
    fn set(tx: &mut impl postgres::GenericClient, queue: &str, attempts: i32) {
        tx.execute(
            "SELECT jobs_create_queue($1, max_attempts => $2)",
            &[&queue, &attempts],
        )
        .unwrap();
    }
    assert_eq!(enqueued_attempts(&mut client, &queue), 3);
    assert_eq!(enqueued_attempts(&mut client, &queue), 3, "kept");
    set(&mut other, &queue, 7);
    assert_eq!(
        enqueued_attempts(&mut client, &queue),
        7,
        "another session's committed change"
    );
    let mut tx = client.transaction().unwrap();
    set(&mut tx, &queue, 9);
    assert_eq!(
        enqueued_attempts(&mut tx, &queue),
        9,
        "the change of the enqueue's own transaction"
    );
    tx.rollback().unwrap();
    assert_eq!(
        enqueued_attempts(&mut client, &queue),
        7,
        "a change rolled back"
    );

    let mut tx = client
        .build_transaction()
        .isolation_level(postgres::IsolationLevel::RepeatableRead)
        .start()
        .unwrap();
    tx.execute("SELECT 1", &[]).unwrap();
    set(&mut other, &queue, 4);
    assert_eq!(
        enqueued_attempts(&mut tx, &queue),
        7,
        "REPEATABLE READ reads the row its snapshot sees"
    );
    tx.commit().unwrap();
    assert_eq!(
        enqueued_attempts(&mut client, &queue),
        4,
        "what the older snapshot read was not kept"
    );
}

/// Lease length: a claim holds the job for exactly the lease it asked for (or the queue's)
/// from the moment of the claim on the server's clock: `lease_until = started_at + lease`,
/// `started_at` lies between readings of the server's clock taken around the claim, and the
/// claim reports the `lease_until` it stored. A claim that granted a shorter lease fails here.
/// A heartbeat renews by its `extend`, else by the claim's lease, from the heartbeat's time.
#[test]
fn a_claim_holds_the_job_for_exactly_the_lease_it_asks_for() {
    let (mut client, queue) =
        Cluster::shared().connect_with_queue("lease-length", "lease => '45 seconds'");
    for (extra, lease) in [
        (", lease => '7 seconds'", 7_000_000i64),
        (", lease => '1 hour 30 minutes'", 5_400_000_000),
        (", lease => '250 milliseconds'", 250_000),
        ("", 45_000_000),
    ] {
        let id = enqueue(&mut client, &queue, json!({ "lease": lease }));
        let (job, reported, _, before, after) = claim_timed(&mut client, &queue, extra);
        assert_eq!(job.id, id);
        let started = job_micros(&mut client, id, "started_at").expect("started_at");
        let until = job_micros(&mut client, id, "lease_until");
        assert!(
            (before..=after).contains(&started),
            "claim{extra}: started_at {started} outside the claim's [{before}, {after}]"
        );
        assert_eq!(
            until,
            Some(started + lease),
            "claim{extra}: lease_until must be started_at + {lease} µs"
        );
        assert_eq!(
            Some(reported),
            until,
            "claim{extra}: the claim reports what it stored"
        );
        let lease_duration: i64 = scalar(
            &mut client,
            "SELECT (extract(epoch FROM lease_duration) * 1000000)::int8 FROM jobs.job WHERE id = $1",
            &[&id],
        );
        assert_eq!(
            lease_duration, lease,
            "claim{extra}: the lease length kept for heartbeats"
        );

        if lease < 1_000_000 {
            // It may run out under a slow heartbeat; the long leases cover renewal.
            assert_eq!(cancel(&mut client, id), "cancelled");
            continue;
        }
        for (call, renewal) in [
            (
                "jobs_heartbeat($1::bigint, $2::uuid, extend => '90 seconds')",
                90_000_000,
            ),
            ("jobs_heartbeat($1::bigint, $2::uuid)", lease),
        ] {
            let before: i64 = scalar(&mut client, &format!("SELECT {SERVER_MICROS}"), &[]);
            assert_eq!(
                text(&mut client, &format!("SELECT {call}"), &[&id, &job.lease]),
                "running"
            );
            let after: i64 = scalar(&mut client, &format!("SELECT {SERVER_MICROS}"), &[]);
            let beat = job_micros(&mut client, id, "heartbeat_at").expect("heartbeat_at");
            assert!(
                (before..=after).contains(&beat),
                "{call}: heartbeat_at {beat} outside [{before}, {after}]"
            );
            assert_eq!(
                job_micros(&mut client, id, "lease_until"),
                Some(beat + renewal),
                "{call}: lease_until must be heartbeat_at + {renewal} µs"
            );
        }
        assert_eq!(complete(&mut client, id, job.lease), "succeeded");
    }
}

/// Rule 3: `max_attempts` is fixed per job at enqueue. Lowering or raising the queue's setting
/// afterwards changes neither the job's own value nor what its claims report, nor when a
/// failure or a reclaim ends it.
#[test]
fn max_attempts_stays_what_it_was_at_enqueue() {
    let (mut client, queue) =
        Cluster::shared().connect_with_queue("fixed-attempts", "max_attempts => 2");
    let two = enqueue(&mut client, &queue, json!({"enqueued with": 2}));
    set_queue(&mut client, &queue, "max_attempts => 4");
    let four = enqueue(&mut client, &queue, json!({"enqueued with": 4}));
    set_queue(&mut client, &queue, "max_attempts => 1");

    // Each job fails with a retry due at once until it ends; the queue says 1 meanwhile.
    let mut outcomes: Vec<(i64, i32, i32, String)> = Vec::new();
    loop {
        let claimed = client
            .query(
                "SELECT id, lease, attempt, max_attempts FROM jobs_claim($1::text, n => 10)",
                &[&queue],
            )
            .unwrap();
        if claimed.is_empty() {
            break;
        }
        for row in claimed {
            let (id, lease, attempt, max): (i64, Uuid, i32, i32) =
                (row.get(0), row.get(1), row.get(2), row.get(3));
            outcomes.push((id, attempt, max, fail_now(&mut client, id, lease, "boom")));
        }
    }
    let of = |job: i64| -> Vec<(i32, i32, String)> {
        outcomes
            .iter()
            .filter(|o| o.0 == job)
            .map(|o| (o.1, o.2, o.3.clone()))
            .collect()
    };
    let expect = |max: i32| -> Vec<(i32, i32, String)> {
        (1..=max)
            .map(|a| (a, max, if a < max { "queued" } else { "failed" }.to_owned()))
            .collect()
    };
    assert_eq!(of(two), expect(2), "the job enqueued under max_attempts 2");
    assert_eq!(of(four), expect(4), "the job enqueued under max_attempts 4");

    // A reclaim decides by the job's own value too, both ways.
    let one = enqueue(&mut client, &queue, json!({"enqueued with": 1}));
    set_queue(&mut client, &queue, "max_attempts => 3");
    let three = enqueue(&mut client, &queue, json!({"enqueued with": 3}));
    set_queue(&mut client, &queue, "max_attempts => 1");
    let held = claim(&mut client, &queue, 2, ", lease => '100 milliseconds'");
    assert_eq!(held.len(), 2);
    for id in [one, three] {
        wait_for_reclaim(&mut client, id);
    }
    let row = job_row(&mut client, one);
    assert_eq!(
        (row["state"].clone(), row["max_attempts"].clone()),
        (json!("failed"), json!(1))
    );
    assert_eq!(
        last_error(&row)["error"],
        "lease expired on the final attempt"
    );
    let row = job_row(&mut client, three);
    assert_eq!(
        (row["state"].clone(), row["max_attempts"].clone()),
        (json!("queued"), json!(3))
    );
    assert_eq!(last_error(&row)["error"], "lease expired");
    assert_eq!(cancel(&mut client, three), "cancelled");
}

/// The retry delay a failure gave job `id`, in µs: run_at minus the failure's own `at` (both
/// stamped by the same statement from the server's clock), so it is exact.
fn retry_delay(client: &mut Client, id: i64) -> i64 {
    scalar(
        client,
        "SELECT (extract(epoch FROM run_at - (errors -> -1 ->> 'at')::timestamptz) * 1000000)::int8
           FROM jobs.job WHERE id = $1",
        &[&id],
    )
}

/// Rule 6: `jobs_fail` stretches the backoff by the jitter. Twenty failures of attempt 1 with a
/// 10 s base and jitter 0.5 get delays in [10 s, 15 s] that spread over more than a second
/// and average 11–14 s (12.5 s expected; a sample mean's deviation is 0.32 s); with jitter 0
/// the delay is exactly 10 s. The delays are exact (see [`retry_delay`]), so a failure that
/// applies no jitter, or too little, fails here.
#[test]
fn jobs_fail_applies_the_jitter() {
    let mut client = Cluster::shared().connect();
    let base = 10_000_000i64;
    for (jitter, count) in [(0.5, 20), (0.0, 3)] {
        let queue = unique_queue(
            &mut client,
            "jitter",
            &format!("backoff_base => '10 seconds', backoff_max => '1 hour', jitter => {jitter}"),
        );
        for n in 0..count {
            enqueue(&mut client, &queue, json!({ "n": n }));
        }
        let delays: Vec<i64> = claim(&mut client, &queue, count, "")
            .into_iter()
            .map(|job| {
                assert_eq!(fail(&mut client, job.id, job.lease, "boom"), "queued");
                let delay = retry_delay(&mut client, job.id);
                assert_eq!(cancel(&mut client, job.id), "cancelled");
                delay
            })
            .collect();
        assert_eq!(delays.len(), count as usize);
        let (min, max) = (*delays.iter().min().unwrap(), *delays.iter().max().unwrap());
        let mean = delays.iter().sum::<i64>() as f64 / delays.len() as f64;
        if jitter == 0.0 {
            assert!(
                delays.iter().all(|&d| d == base),
                "jitter 0: delays {delays:?}"
            );
            continue;
        }
        assert!(
            min >= base && max <= base + base / 2,
            "jitter 0.5: delays {delays:?} outside [10 s, 15 s]"
        );
        assert!(
            max - min > 1_000_000,
            "jitter 0.5: delays {delays:?} barely vary: no jitter"
        );
        assert!(
            (11_000_000.0..=14_000_000.0).contains(&mean),
            "jitter 0.5: delays average {mean} µs, expected about 12.5 s: {delays:?}"
        );
        println!("jitter 0.5 over 10 s: delays from {min} to {max} µs, mean {mean:.0} µs");
    }
}

/// Rule 6: the queue's backoff settings are read when the job fails, not when it was claimed
/// (or enqueued): jobs claimed under a 10 s base without jitter fail after the settings
/// changed, and get the new delays.
#[test]
fn backoff_settings_are_read_when_the_job_fails() {
    let (mut client, queue) = Cluster::shared().connect_with_queue(
        "backoff-now",
        "backoff_base => '10 seconds', backoff_max => '1 hour', jitter => 0",
    );
    for n in 0..3 {
        enqueue(&mut client, &queue, json!({ "n": n }));
    }
    let held = claim(&mut client, &queue, 3, "");
    assert_eq!(held.len(), 3);

    set_queue(&mut client, &queue, "backoff_base => '20 seconds'");
    assert_eq!(
        fail(&mut client, held[0].id, held[0].lease, "boom"),
        "queued"
    );
    assert_eq!(
        retry_delay(&mut client, held[0].id),
        20_000_000,
        "the new base"
    );

    set_queue(
        &mut client,
        &queue,
        "backoff_base => '2 seconds', backoff_max => '3 seconds'",
    );
    assert_eq!(
        fail(&mut client, held[1].id, held[1].lease, "boom"),
        "queued"
    );
    assert_eq!(
        retry_delay(&mut client, held[1].id),
        2_000_000,
        "the new base, under the new cap"
    );

    set_queue(&mut client, &queue, "jitter => 1");
    assert_eq!(
        fail(&mut client, held[2].id, held[2].lease, "boom"),
        "queued"
    );
    let delay = retry_delay(&mut client, held[2].id);
    assert!(
        delay > 2_000_000 && delay < 4_000_000,
        "jitter 1 set after the claim: delay {delay} µs, expected in (2 s, 4 s)"
    );
    for job in held {
        assert_eq!(cancel(&mut client, job.id), "cancelled");
    }
}

/// Rule 10 inside a long transaction: time decisions and stamps use the server's clock at the
/// call, not the transaction's start (`now()`). In a transaction open for 400 ms, a job that
/// came due 200 ms after it began is claimable; the claim's `started_at` and `lease_until`, a
/// heartbeat's `heartbeat_at` and `lease_until`, a failure's `errors.at` and backoff `run_at`,
/// a complete's `finished_at`, and a reclaim of a lease that ran out after the transaction
/// began all follow `clock_timestamp()` read just before each call. On a cluster without the
/// worker, so only the reclaim in the transaction can take the lease back.
#[test]
fn time_decisions_use_the_server_clock_inside_a_long_transaction() {
    let cluster = cluster_without_worker("long-transaction");
    let (mut client, queue) = cluster.connect_with_queue(
        "clock",
        "lease => '300 milliseconds', backoff_base => '1 second', jitter => 0",
    );
    let mut other = cluster.connect();
    let clock = |client: &mut postgres::Transaction| -> i64 {
        scalar(client, &format!("SELECT {SERVER_MICROS}"), &[])
    };
    let stamp = |client: &mut postgres::Transaction, id: i64, column: &str| -> i64 {
        scalar(
            client,
            &format!(
                "SELECT (extract(epoch FROM {column}) * 1000000)::int8 FROM jobs.job WHERE id = $1"
            ),
            &[&id],
        )
    };

    let mut tx = client.transaction().unwrap();
    let began: i64 = scalar(
        &mut tx,
        "SELECT (extract(epoch FROM now()) * 1000000)::int8",
        &[],
    );
    // Committed by another session: one job due at once, one due 200 ms after `began`.
    let due = enqueue(&mut other, &queue, json!({"due": "now"}));
    let later: i64 = scalar(
        &mut other,
        "SELECT jobs_enqueue($1::text, '{\"due\": \"later\"}',
                             run_at => to_timestamp(($2::int8 + 200000) / 1000000.0))",
        &[&queue, &began],
    );
    tx.batch_execute("SELECT pg_sleep(0.4)").unwrap();

    let before = clock(&mut tx);
    assert!(before >= began + 400_000);
    let claimed: Vec<(i64, Uuid)> = tx
        .query(
            "SELECT id, lease FROM jobs_claim($1::text, n => 10)",
            &[&queue],
        )
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let ids: Vec<i64> = claimed.iter().map(|c| c.0).collect();
    assert_eq!(
        ids,
        [due, later],
        "the job due after the transaction began is claimable"
    );
    for (id, _) in &claimed {
        let started = stamp(&mut tx, *id, "started_at");
        assert!(
            started >= before,
            "job {id}: started_at {started} is before the call ({before})"
        );
        assert_eq!(
            stamp(&mut tx, *id, "lease_until"),
            started + 300_000,
            "job {id}: lease_until"
        );
    }
    let (due_lease, later_lease) = (claimed[0].1, claimed[1].1);

    let before = clock(&mut tx);
    let beat: String = scalar(
        &mut tx,
        "SELECT jobs_heartbeat($1, $2, extend => '1 second')",
        &[&later, &later_lease],
    );
    assert_eq!(beat, "running");
    let heartbeat_at = stamp(&mut tx, later, "heartbeat_at");
    assert!(
        heartbeat_at >= before,
        "heartbeat_at {heartbeat_at} is before the call ({before})"
    );
    assert_eq!(
        stamp(&mut tx, later, "lease_until"),
        heartbeat_at + 1_000_000
    );

    let before = clock(&mut tx);
    let failed: String = scalar(
        &mut tx,
        "SELECT jobs_fail($1, $2, 'boom')",
        &[&due, &due_lease],
    );
    assert_eq!(failed, "queued");
    let failed_at = stamp(&mut tx, due, "(errors -> -1 ->> 'at')::timestamptz");
    assert!(
        failed_at >= before,
        "errors.at {failed_at} is before the call ({before})"
    );
    assert_eq!(
        stamp(&mut tx, due, "run_at"),
        failed_at + 1_000_000,
        "backoff from the failure"
    );

    let before = clock(&mut tx);
    let done: String = scalar(
        &mut tx,
        "SELECT jobs_complete($1, $2)",
        &[&later, &later_lease],
    );
    assert_eq!(done, "succeeded");
    let finished = stamp(&mut tx, later, "finished_at");
    assert!(
        finished >= before,
        "finished_at {finished} is before the call ({before})"
    );
    tx.commit().unwrap();

    // A lease that runs out while a transaction is open is reclaimed by a jobs_reclaim() in it.
    let held = enqueue(&mut other, &queue, json!({"held": true}));
    let short = claim(&mut other, &queue, 10, ", lease => '200 milliseconds'");
    assert_eq!(short.iter().map(|c| c.id).collect::<Vec<_>>(), [held]);
    let mut tx = client.transaction().unwrap();
    let began: i64 = scalar(
        &mut tx,
        "SELECT (extract(epoch FROM now()) * 1000000)::int8",
        &[],
    );
    let until = stamp(&mut tx, held, "lease_until");
    assert!(
        until > began,
        "the lease runs out after the transaction began"
    );
    tx.batch_execute("SELECT pg_sleep(0.4)").unwrap();
    let before = clock(&mut tx);
    let reclaimed: i32 = scalar(&mut tx, "SELECT jobs_reclaim()", &[]);
    assert_eq!(
        reclaimed, 1,
        "the lease ran out by the server's clock, not by now()"
    );
    let reclaimed_at = stamp(&mut tx, held, "(errors -> -1 ->> 'at')::timestamptz");
    assert!(
        reclaimed_at >= before,
        "the reclaim's stamp {reclaimed_at} is before the call ({before})"
    );
    tx.commit().unwrap();
}

/// Rule 9 for a heartbeat that revives a reclaimed job: rolled back, it leaves no trace, in
/// the table or in shared memory. While it was open, a claim skipped the job (its job lock
/// was held) and took the next one; after the rollback the job is queued under its old lease
/// again and the next claim of one job takes it, ahead of the jobs behind it (rule 2). On a
/// cluster with the preload whose worker does not tick, so no periodic reset of the claim
/// floor and reach hides a trace the rollback left.
#[test]
fn a_rolled_back_heartbeat_of_a_reclaimed_job_leaves_no_trace() {
    let settings = settings_with(&["pg_jobs.tick = '1h'"]);
    let cluster = Cluster::start_with_extension("heartbeat-rollback", &settings);
    let (mut holder, queue) = cluster.connect_with_queue("revive", "");
    let mut claimer = cluster.connect();
    let revived = enqueue(&mut holder, &queue, json!({"n": 0}));
    let old = claim_one(&mut holder, &queue, ", lease => '100 milliseconds'");
    assert_eq!(old.id, revived);
    let behind: Vec<i64> = (1..=3)
        .map(|n| enqueue(&mut holder, &queue, json!({ "n": n })))
        .collect();
    wait_for_expiry(&mut holder, &[revived]);
    assert_eq!(reclaim(&mut holder), 1);
    let reclaimed = job_row(&mut holder, revived);
    assert_eq!(reclaimed["state"], "queued");

    let mut tx = holder.transaction().unwrap();
    let beat: String = scalar(
        &mut tx,
        "SELECT jobs_heartbeat($1, $2, progress => '{\"step\": 1}')",
        &[&revived, &old.lease],
    );
    assert_eq!(beat, "running");
    let skipped = claim_one(&mut claimer, &queue, "");
    assert_eq!(
        skipped.id, behind[0],
        "the claim skips the job the heartbeat holds"
    );
    tx.rollback().unwrap();

    assert_eq!(
        job_row(&mut claimer, revived),
        reclaimed,
        "the table kept a trace"
    );
    let next = claim_one(&mut claimer, &queue, "");
    assert_eq!(
        (next.id, next.attempt),
        (revived, 2),
        "the next claim must take the job the rolled-back heartbeat had revived, first in order"
    );
    assert_eq!(heartbeat(&mut holder, revived, old.lease), "lost");
}

/// A row of `jobs_complete_and_claim`: a settled job with its outcome, or a claimed job.
#[derive(Debug, PartialEq)]
enum Cycled {
    Settled(i64, String),
    Claimed(i64, i32),
}

/// Completes `held` (with `results`, when given) and claims up to `n` jobs of `queue`.
fn complete_and_claim(
    client: &mut impl postgres::GenericClient,
    queue: &str,
    held: &[Claimed],
    results: Option<Vec<Value>>,
    n: i32,
) -> Vec<Cycled> {
    let ids: Vec<i64> = held.iter().map(|c| c.id).collect();
    let leases: Vec<Uuid> = held.iter().map(|c| c.lease).collect();
    client
        .query(
            "SELECT settled, outcome, (claimed).id, (claimed).attempt
               FROM jobs_complete_and_claim($1, $2, $3, results => $4, n => $5)",
            &[&queue, &ids, &leases, &results, &n],
        )
        .unwrap()
        .iter()
        .map(|row| match row.get::<_, Option<i64>>(0) {
            Some(id) => Cycled::Settled(id, row.get(1)),
            None => Cycled::Claimed(row.get(2), row.get(3)),
        })
        .collect()
}

/// One commit per job: `jobs_complete_and_claim` completes what a worker finished (with each
/// result) and claims its next jobs in one call and one transaction, answering each settle's
/// outcome first (`succeeded`, `cancelled`, `lost`), then the claimed jobs in claim order; a
/// rollback undoes both, and it never waits.
#[test]
fn one_call_completes_and_claims_in_one_transaction() {
    let cluster = Cluster::shared();
    let (mut client, queue) = cluster.connect_with_queue("cycle", "");
    let ids: Vec<i64> = (0..5)
        .map(|n| enqueue_with(&mut client, &queue, json!({ "n": n }), ""))
        .collect();
    let first = claim_one(&mut client, &queue, "");
    assert_eq!(first.id, ids[0]);

    // A rolled-back call leaves no trace: the job still runs, nothing else was claimed.
    let mut transaction = client.transaction().unwrap();
    let rows = complete_and_claim(&mut transaction, &queue, &[first], None, 2);
    assert_eq!(
        rows,
        [
            Cycled::Settled(ids[0], "succeeded".into()),
            Cycled::Claimed(ids[1], 1),
            Cycled::Claimed(ids[2], 1),
        ]
    );
    transaction.rollback().unwrap();
    assert_eq!(state(&mut client, ids[0]), "running");
    assert_eq!(state(&mut client, ids[1]), "queued");

    // Committed: the result is stored, the next jobs run.
    let rows = complete_and_claim(
        &mut client,
        &queue,
        &[first],
        Some(vec![json!({ "sent": true })]),
        2,
    );
    assert_eq!(
        rows,
        [
            Cycled::Settled(ids[0], "succeeded".into()),
            Cycled::Claimed(ids[1], 1),
            Cycled::Claimed(ids[2], 1),
        ]
    );
    assert_eq!(
        job_row(&mut client, ids[0])["result"],
        json!({ "sent": true })
    );
    assert_eq!(state(&mut client, ids[1]), "running");

    // Each settle's outcome: a cancelled job and a stale lease.
    let running: Vec<Claimed> = client
        .query(
            "SELECT id, lease, attempt FROM jobs.job WHERE id = ANY($1) ORDER BY id",
            &[&vec![ids[1], ids[2]]],
        )
        .unwrap()
        .iter()
        .map(Claimed::from_row)
        .collect();
    assert_eq!(cancel(&mut client, ids[1]), "cancelled");
    let stale = Claimed {
        lease: Uuid::new_v4(),
        ..running[1]
    };
    let rows = complete_and_claim(&mut client, &queue, &[running[0], stale], None, 5);
    assert_eq!(
        rows,
        [
            Cycled::Settled(ids[1], "cancelled".into()),
            Cycled::Settled(ids[2], "lost".into()),
            Cycled::Claimed(ids[3], 1),
            Cycled::Claimed(ids[4], 1),
        ]
    );

    // Nothing to settle and nothing due: no rows (it has no wait to sleep in).
    assert_eq!(complete_and_claim(&mut client, &queue, &[], None, 1), []);
}
