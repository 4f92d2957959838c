//! Jobs made claimable outside the enqueuing backend's own commit: two-phase commit
//! (`PREPARE TRANSACTION` then `COMMIT PREPARED` / `ROLLBACK PREPARED`, maybe from another
//! session) and rows written behind the functions' back. Claims start at their queue's claim
//! floor (README "How it works"), so every way a job becomes queued must reach the floor; these
//! are the ways the committing backend's callbacks do not see. Sessions also keep the rows of
//! the queues they enqueue into, so a queue dropped by a prepared transaction (or a plain one)
//! must reach them before anyone waiting for its lock goes on.
//!
//! The two-phase tests run on a cluster without the background worker, so only the prepared
//! transaction's own bookkeeping can make the job claimable; the last tests show the worker's
//! floor check catching a change no code path announced, leaving alone what claims in flight
//! hold, and claims moving the floor when they cannot raise it.

use std::sync::OnceLock;
use std::thread;

use pg_jobs_tests::{
    assert_claims_nothing, claim, claim_ids, complete, enqueue, enqueue_empty, freed_heads,
    jobs_in, offered, row, scalar, settings_with, unique_queue, wait_for_a_lock, Client, Cluster,
};
use postgres::error::SqlState;
use serde_json::json;

/// A cluster with prepared transactions enabled and no background worker.
fn cluster_without_worker() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let settings = settings_with(&["pg_jobs.databases = ''", "max_prepared_transactions = 10"]);
        Cluster::start_with_extension("two-phase", &settings)
    })
}

/// Enqueues `count` jobs and claims them all from another session, so the queue's floor rises
/// past every job the claimer can see.
fn burn(client: &mut Client, queue: &str, count: usize) {
    for n in 0..count {
        enqueue(client, queue, json!({ "burn": n }));
    }
    let claimed = claim(client, queue, count as i32, "");
    assert_eq!(claimed.len(), count);
}

/// Runs `work` in a transaction of a new session of `cluster` and prepares the transaction as
/// `gid`; returns what `work` returned. The prepared transaction outlives the session.
fn prepare<T>(cluster: &Cluster, gid: &str, work: impl FnOnce(&mut Client) -> T) -> T {
    let mut session = cluster.connect();
    session.batch_execute("BEGIN").unwrap();
    let done = work(&mut session);
    session
        .batch_execute(&format!("PREPARE TRANSACTION '{gid}'"))
        .unwrap();
    done
}

/// Ends the prepared transaction `gid` from a session of its own: `end` is `COMMIT` or
/// `ROLLBACK`.
fn end_prepared(cluster: &Cluster, end: &str, gid: &str) {
    cluster
        .connect()
        .batch_execute(&format!("{end} PREPARED '{gid}'"))
        .unwrap();
}

/// Enqueues a job into `queue` with `enqueue` (`$1` is the queue) in a transaction prepared as
/// `pe-<queue>`, then claims `burnt` jobs enqueued after it from another session, so that the
/// floor may pass a job claims cannot see yet; returns the prepared job's id.
fn enqueue_prepared_behind_claims(
    cluster: &Cluster,
    queue: &str,
    enqueue: &str,
    burnt: usize,
) -> i64 {
    let id = prepare(cluster, &format!("pe-{queue}"), |s| {
        scalar(s, enqueue, &[&queue])
    });
    burn(&mut cluster.connect(), queue, burnt);
    id
}

/// The floor the queue's shared state holds now (its id), if any.
fn floor_id(client: &mut Client, queue: &str) -> Option<i64> {
    scalar(
        client,
        "SELECT floor_id FROM jobs.runtime_state($1)",
        &[&queue],
    )
}

#[test]
fn a_job_committed_by_commit_prepared_is_claimable() {
    let cluster = cluster_without_worker();
    let (_, queue) = cluster.connect_with_queue("prepared-enqueue", "");

    // Other claims move the floor past the prepared job, which they cannot see.
    let prepared = enqueue_prepared_behind_claims(
        cluster,
        &queue,
        "SELECT jobs_enqueue($1, '{\"prepared\": true}')",
        5,
    );
    let mut worker = cluster.connect();
    let floor = floor_id(&mut worker, &queue).expect("the claims set a floor");
    assert!(
        floor > prepared,
        "the floor ({floor}) should have passed the prepared job ({prepared})"
    );
    assert_claims_nothing(
        &mut worker,
        &queue,
        1,
        "the prepared job is not visible yet",
    );

    // COMMIT PREPARED from yet another session.
    end_prepared(cluster, "COMMIT", &format!("pe-{queue}"));
    assert_eq!(
        claim_ids(&mut worker, &queue, 1),
        [prepared],
        "the job committed by COMMIT PREPARED must be claimable at once"
    );
}

#[test]
fn a_waiting_claim_wakes_for_a_job_committed_by_commit_prepared() {
    let cluster = cluster_without_worker();
    let (mut admin, queue) = cluster.connect_with_queue("prepared-wake", "");
    let prepared = enqueue_prepared_behind_claims(
        cluster,
        &queue,
        "SELECT jobs_enqueue($1, '{}', kind => 'late')",
        3,
    );

    // Filtered and unfiltered waiters both start before the commit.
    let waiters: Vec<_> = ["", ", kinds => ARRAY['late']"]
        .into_iter()
        .map(|extra| {
            let mut client = cluster.connect();
            let queue = queue.clone();
            thread::spawn(move || {
                claim(
                    &mut client,
                    &queue,
                    1,
                    &format!("{extra}, wait => '20 seconds'"),
                )
                .iter()
                .map(|c| c.id)
                .collect::<Vec<_>>()
            })
        })
        .collect();
    pg_jobs_tests::wait_until(
        std::time::Duration::from_secs(10),
        "both claims to be waiting",
        || {
            scalar::<i32>(
                &mut admin,
                "SELECT waiters FROM jobs.runtime_state($1)",
                &[&queue],
            ) == 2
        },
    );
    end_prepared(cluster, "COMMIT", &format!("pe-{queue}"));
    // One of the two takes the job; the other is woken by the end of the wait at the latest,
    // so enqueue a second job for it.
    scalar::<i64>(
        &mut admin,
        "SELECT jobs_enqueue($1, '{}', kind => 'late')",
        &[&queue],
    );
    let mut got: Vec<i64> = waiters
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    got.sort_unstable();
    assert!(
        got.contains(&prepared),
        "a waiting claim must get the job committed by COMMIT PREPARED, got {got:?}"
    );
}

#[test]
fn jobs_of_a_claim_rolled_back_by_rollback_prepared_are_claimable() {
    let cluster = cluster_without_worker();
    let (mut admin, queue) = cluster.connect_with_queue("prepared-claim", "");
    let first = enqueue(&mut admin, &queue, json!({"n": 1}));

    prepare(cluster, &format!("pc-{queue}"), |s| {
        let held = claim(s, &queue, 1, "");
        assert_eq!(held[0].id, first);
    });

    // Other claims take later jobs and move the floor past the prepared claim's job.
    let mut worker = cluster.connect();
    burn(&mut worker, &queue, 5);
    burn(&mut worker, &queue, 5);
    assert!(floor_id(&mut worker, &queue).is_some_and(|floor| floor > first));

    end_prepared(cluster, "ROLLBACK", &format!("pc-{queue}"));
    let claimed = claim(&mut worker, &queue, 1, "");
    assert_eq!(
        claimed
            .iter()
            .map(|c| (c.id, c.attempt))
            .collect::<Vec<_>>(),
        [(first, 1)],
        "the job of the rolled-back prepared claim must be claimable again, attempt unspent"
    );
}

/// A job of a group that a prepared transaction enqueued, with a lower id than a freed head of
/// the group, comes first once `COMMIT PREPARED` makes it visible: a claim reads the group again
/// rather than take the head as its settle offered it.
#[test]
fn a_freed_head_behind_a_job_of_a_prepared_enqueue_is_not_taken() {
    let cluster = cluster_without_worker();
    let (mut admin, queue) = cluster.connect_with_queue("prepared-late", "");
    let enqueue_into_g = "SELECT jobs_enqueue($1, '{}', group_key => 'g')";
    let _: i64 = scalar(&mut admin, enqueue_into_g, &[&queue]);
    let running = claim(&mut admin, &queue, 1, "");
    let late: i64 = prepare(cluster, &format!("pl-{queue}"), |s| {
        scalar(s, enqueue_into_g, &[&queue])
    });
    let head: i64 = scalar(&mut admin, enqueue_into_g, &[&queue]);
    assert_claims_nothing(&mut admin, &queue, 1, "marks the head");
    assert_eq!(complete(&mut admin, &running[0]), "succeeded");
    assert_eq!(freed_heads(&mut admin, &queue), offered([head]));
    end_prepared(cluster, "COMMIT", &format!("pl-{queue}"));
    assert_eq!(
        claim_ids(&mut admin, &queue, 10),
        [late],
        "the freed head ran beside an earlier job of its group"
    );
}

/// A settle of a grouped job hands its group's next job to the next claim (a freed head in
/// shared memory, the job still marked waiting), but a prepared settle cannot: its commit may
/// come after a restart that empties shared memory. Its prepare clears the next job's mark in
/// the job's row instead, so the commit frees it through the table, and a prepared claim that
/// took it gives it back when it is rolled back.
#[test]
fn freed_heads_follow_prepared_settles_and_claims() {
    let cluster = cluster_without_worker();
    let (mut admin, queue) = cluster.connect_with_queue("prepared-freed", "");
    let ids: Vec<i64> = (0..2)
        .map(|n| {
            scalar(
                &mut admin,
                "SELECT jobs_enqueue($1, jsonb_build_object('n', $2::int), group_key => 'g')",
                &[&queue, &n],
            )
        })
        .collect();
    let head = claim(&mut admin, &queue, 1, "");
    assert_claims_nothing(&mut admin, &queue, 1, "marks the next job");

    prepare(cluster, &format!("ps-{queue}"), |s| {
        assert_eq!(complete(s, &head[0]), "succeeded");
    });
    // Prepared, not committed: the group's lock is held, so no claim takes the next job.
    let mut worker = cluster.connect();
    assert_claims_nothing(
        &mut worker,
        &queue,
        1,
        "the prepared settle holds the group",
    );
    end_prepared(cluster, "COMMIT", &format!("ps-{queue}"));
    assert_eq!(
        freed_heads(&mut worker, &queue),
        Vec::<i64>::new(),
        "nothing of a prepared transaction lives only in shared memory"
    );
    let marked: bool = scalar(
        &mut worker,
        "SELECT group_wait FROM jobs.job WHERE id = $1",
        &[&ids[1]],
    );
    assert!(
        !marked,
        "the prepared settle cleared the next job's mark in its row"
    );

    prepare(cluster, &format!("pf-{queue}"), |s| {
        let held = claim(s, &queue, 1, "");
        assert_eq!(held[0].id, ids[1]);
    });
    assert_claims_nothing(&mut worker, &queue, 1, "held by the prepared claim");
    end_prepared(cluster, "ROLLBACK", &format!("pf-{queue}"));
    let claimed = claim(&mut worker, &queue, 1, "");
    assert_eq!(
        claimed
            .iter()
            .map(|c| (c.id, c.attempt))
            .collect::<Vec<_>>(),
        [(ids[1], 1)],
        "the freed head the rolled-back prepared claim took is claimable again"
    );
}

/// Rounds of each way to commit in the dropped-queue test.
const ROUNDS: usize = 15;

/// How a test's transaction commits.
#[derive(Clone, Copy, Debug)]
enum Commit {
    /// `COMMIT`.
    Plain,
    /// `PREPARE TRANSACTION`, then `COMMIT PREPARED` from another session.
    Prepared,
}

/// A queue dropped while an enqueue waits for its lock is gone for that enqueue, though the
/// enqueuing session keeps the rows of the queues it enqueued into (it reads `jobs.queue` only
/// when queue settings changed): the drop's commit, plain or prepared, tells every session
/// before its queue lock goes. Then the queue is created again under the same name with other
/// settings, and the session's next enqueue takes them. The race it guards against is short
/// (a commit that told the sessions only after its locks went let the waiting enqueue put a job
/// into the dropped queue in about one round of thirty), so it runs many rounds.
#[test]
fn an_enqueue_that_waited_for_a_drop_finds_no_queue_though_its_session_kept_the_row() {
    let cluster = cluster_without_worker();
    let mut admin = cluster.connect();
    let mut watcher = cluster.connect();
    let mut producer = cluster.connect();
    let producer_pid: i32 = scalar(&mut producer, "SELECT pg_backend_pid()", &[]);
    let queue = unique_queue(&mut admin, "drop-while-kept", "max_attempts => 2");
    let attempts_of = |client: &mut Client, id: i64| -> i32 {
        scalar(
            client,
            "SELECT max_attempts FROM jobs.job WHERE id = $1",
            &[&id],
        )
    };
    for (round, commit) in [Commit::Plain, Commit::Prepared]
        .repeat(ROUNDS)
        .into_iter()
        .enumerate()
    {
        let expected = 2 + round as i32;
        let kept = enqueue(&mut producer, &queue, json!({ "round": round }));
        assert_eq!(attempts_of(&mut producer, kept), expected, "round {round}");

        let mut dropper = cluster.connect();
        dropper.batch_execute("BEGIN").unwrap();
        dropper
            .execute("SELECT jobs_drop_queue($1, force => true)", &[&queue])
            .unwrap();
        let waiting = {
            let queue = queue.clone();
            thread::spawn(move || {
                let result = producer.query_one("SELECT jobs_enqueue($1, '{}')", &[&queue]);
                (producer, result.map(|row| row.get::<_, i64>(0)))
            })
        };
        wait_for_a_lock(
            &mut watcher,
            producer_pid,
            "the enqueue to wait for the drop",
        );
        match commit {
            Commit::Plain => dropper.batch_execute("COMMIT").unwrap(),
            Commit::Prepared => {
                let gid = format!("drop-{queue}-{round}");
                dropper
                    .batch_execute(&format!("PREPARE TRANSACTION '{gid}'"))
                    .unwrap();
                watcher
                    .batch_execute(&format!("COMMIT PREPARED '{gid}'"))
                    .unwrap();
            }
        }
        let (returned, result) = waiting.join().unwrap();
        producer = returned;
        let error = result.expect_err(&format!(
            "round {round} ({commit:?}): the enqueue that waited must find no queue"
        ));
        assert_eq!(error.code(), Some(&SqlState::UNDEFINED_OBJECT), "{error:?}");
        let left = jobs_in(&mut watcher, &queue);
        assert_eq!(
            left, 0,
            "round {round} ({commit:?}): no job in a dropped queue"
        );

        admin
            .execute(
                "SELECT jobs_create_queue($1, max_attempts => $2)",
                &[&queue, &(expected + 1)],
            )
            .unwrap();
    }
}

/// Settings for a worker that ticks only when told to (a reload wakes it), so a test decides
/// when its checks run.
fn ticking_on_reload() -> Vec<&'static str> {
    settings_with(&["pg_jobs.tick = '1h'"])
}

/// The worker's counters: ticks run and floors reset.
fn worker_counts(client: &mut Client) -> (i64, i64) {
    row(
        client,
        "SELECT ticks, floors_healed FROM jobs_worker_status()",
        &[],
    )
}

/// Runs `insert` (a row written into `queue` by hand, `$1` the queue, returning its id), as a
/// restore would write it, with no function to announce it, and checks that it sits below the
/// queue's claim floor: a claim does not see it until the worker's check heals the floor.
fn written_below_the_floor(admin: &mut Client, queue: &str, insert: &str) -> i64 {
    let id = scalar(admin, insert, &[&queue]);
    assert_claims_nothing(
        admin,
        queue,
        1,
        "before the worker's check the job sits below the floor (this test needs that)",
    );
    id
}

#[test]
fn the_worker_resets_a_floor_that_a_job_written_behind_the_functions_back_sits_below() {
    let cluster = Cluster::start_with_extension("floor-heal", &ticking_on_reload());
    let (mut admin, queue) = cluster.connect_with_queue("behind-the-back", "");
    burn(&mut admin, &queue, 5);

    // A restore, or a hand-written INSERT: no function announces this job.
    let restored = written_below_the_floor(
        &mut admin,
        &queue,
        "INSERT INTO jobs.job (queue, max_attempts, run_at) VALUES ($1, 5, now() - interval '1 hour')
         RETURNING id",
    );
    let healed_before: i64 = scalar(
        &mut admin,
        "SELECT floors_healed FROM jobs_worker_status()",
        &[],
    );
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    pg_jobs_tests::wait_until(
        std::time::Duration::from_secs(30),
        "the worker to check the floors",
        || {
            scalar::<i64>(
                &mut admin,
                "SELECT floors_healed FROM jobs_worker_status()",
                &[],
            ) > healed_before
        },
    );
    let claimed = claim(&mut admin, &queue, 1, "");
    assert_eq!(claimed.iter().map(|c| c.id).collect::<Vec<_>>(), [restored]);
}

/// A claim raises the floor past the jobs it takes before it commits, so the worker's check
/// still sees them queued below the floor; they are under the claim's job locks, and the
/// worker leaves the floor alone. (It reset it before, whenever its check met a claim in
/// flight: a busy queue's next claim then walked the claim index from the queue's head, and a
/// test of tenants' workers found the floor gone.)
#[test]
fn the_worker_leaves_alone_the_floor_a_claim_in_flight_raised() {
    let cluster = Cluster::start_with_extension("floor-in-flight", &ticking_on_reload());
    let (mut admin, queue) = cluster.connect_with_queue("in-flight", "");
    burn(&mut admin, &queue, 3);
    let ids: Vec<i64> = (0..3)
        .map(|n| enqueue(&mut admin, &queue, json!({ "n": n })))
        .collect();
    let mut holder = cluster.connect();
    holder.batch_execute("BEGIN").unwrap();
    let taken = claim(&mut holder, &queue, 2, "");
    assert_eq!(taken.iter().map(|c| c.id).collect::<Vec<_>>(), ids[..2]);
    let raised = floor_id(&mut admin, &queue);
    assert!(
        raised.is_some_and(|floor| floor > ids[1]),
        "the open claim raised the floor ({raised:?}) past its jobs {:?} (this test needs that)",
        &ids[..2]
    );

    let (ticks_before, healed_before) = worker_counts(&mut admin);
    admin.batch_execute("SELECT pg_reload_conf()").unwrap();
    pg_jobs_tests::wait_until(
        std::time::Duration::from_secs(30),
        "the worker to run a tick",
        || worker_counts(&mut admin).0 > ticks_before,
    );
    assert_eq!(
        worker_counts(&mut admin).1,
        healed_before,
        "the worker reset the floor of a claim in flight"
    );
    assert_eq!(floor_id(&mut admin, &queue), raised);

    holder.batch_execute("COMMIT").unwrap();
    let next = claim(&mut admin, &queue, 1, "");
    assert_eq!(next.iter().map(|c| c.id).collect::<Vec<_>>(), [ids[2]]);
}

/// A claim that starts past the queue's reach (the jobs claims in flight picked) cannot raise
/// the floor past what lies between the floor and the reach; it advances the floor to the
/// first due queued job instead. Before, the floor stayed behind until the worker forgot the
/// reach at its next tick, and the first claims after each tick walked the index entries of
/// every job claimed since (3,678 jobs behind in a benchmark). The worker here ticks only when
/// told to, so no tick moves anything.
#[test]
fn a_claim_past_the_reach_advances_the_floor() {
    let cluster = Cluster::start_with_extension("floor-past-reach", &ticking_on_reload());
    let (mut admin, queue) = cluster.connect_with_queue("past-reach", "");
    burn(&mut admin, &queue, 3);
    let burnt_floor = floor_id(&mut admin, &queue).expect("the burn raised the floor");
    let ids: Vec<i64> = (0..6)
        .map(|n| enqueue(&mut admin, &queue, json!({ "n": n })))
        .collect();

    // A cancel holds the first job's lock, so a claim passes over it: it may not raise the
    // floor past that job, and it extends the reach to the job it took.
    let mut canceller = cluster.connect();
    canceller.batch_execute("BEGIN").unwrap();
    let _: String = scalar(&mut canceller, "SELECT jobs_cancel($1)", &[&ids[0]]);
    let mut first = cluster.connect();
    let taken = claim(&mut first, &queue, 1, "");
    assert_eq!(taken.iter().map(|c| c.id).collect::<Vec<_>>(), [ids[1]]);
    canceller.batch_execute("COMMIT").unwrap();
    assert_eq!(
        floor_id(&mut admin, &queue),
        Some(burnt_floor),
        "the claim that passed over a held job kept the floor below it (this test needs that)"
    );

    // The next claim starts past the reach.
    let mut next = cluster.connect();
    let taken = claim(&mut next, &queue, 1, "");
    assert_eq!(taken.iter().map(|c| c.id).collect::<Vec<_>>(), [ids[2]]);
    assert_eq!(
        floor_id(&mut admin, &queue),
        Some(ids[3]),
        "a claim past the reach leaves the floor behind the first queued job ({})",
        ids[3]
    );
}

/// Below a floor an old snapshot keeps a dead entry for every job claimed since. The worker's
/// check walks a bounded share of them a tick (ten windows of 1,000 entries) and goes on at the
/// next tick where it stopped, so a job written behind the functions' back deep below the floor
/// is found a few ticks later, and no tick walks them all.
#[test]
fn the_worker_finds_a_job_deep_below_a_floor_a_bounded_walk_a_tick() {
    const FIRST: i32 = 29_000;
    const SECOND: i32 = 1_000;
    let cluster = Cluster::start_with_extension("floor-heal-deep", &ticking_on_reload());
    let (mut admin, queue) = cluster.connect_with_queue("deep", "");
    // The snapshot that keeps every claimed job's dead entry in the claim index.
    let mut holder = cluster.connect();
    holder
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pg_class")
        .unwrap();
    // Two batches, the second due a little later than the first.
    for count in [FIRST, SECOND] {
        enqueue_empty(&mut admin, &queue, count);
        admin.batch_execute("SELECT pg_sleep(0.01)").unwrap();
    }
    for _ in 0..(FIRST + SECOND) / 1000 {
        admin
            .execute("SELECT count(*) FROM jobs_claim($1, n => 1000)", &[&queue])
            .unwrap();
    }
    // Due just before the second batch: past the first batch's 29,000 dead entries, below the
    // floor the claims raised past the second.
    let restored = written_below_the_floor(
        &mut admin,
        &queue,
        "INSERT INTO jobs.job (queue, max_attempts, run_at)
         SELECT $1, 5, max(run_at) - interval '1 microsecond' FROM jobs.job WHERE queue = $1
         RETURNING id",
    );
    let (_, healed_before) = worker_counts(&mut admin);
    let mut ticks = 0;
    loop {
        let (ticks_before, _) = worker_counts(&mut admin);
        admin.batch_execute("SELECT pg_reload_conf()").unwrap();
        pg_jobs_tests::wait_until(
            std::time::Duration::from_secs(30),
            "the worker's tick",
            || worker_counts(&mut admin).0 > ticks_before,
        );
        ticks += 1;
        if worker_counts(&mut admin).1 > healed_before {
            break;
        }
        assert!(
            ticks < 20,
            "the job below the floor was not found in {ticks} ticks"
        );
    }
    holder.batch_execute("ROLLBACK").unwrap();
    println!("a job behind {FIRST} dead entries below the floor was found at tick {ticks}");
    assert!(
        ticks >= 3,
        "one tick walked {FIRST} dead entries: the check must walk at most 10,000 a tick"
    );
    let claimed = claim(&mut admin, &queue, 1, "");
    assert_eq!(claimed.iter().map(|c| c.id).collect::<Vec<_>>(), [restored]);
}
