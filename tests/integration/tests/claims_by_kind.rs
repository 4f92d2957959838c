//! A queue's `claims_by_kind`: whether its jobs go into the kinds index, which its claims of
//! some kinds then read alone. The one rule that matters: while the setting is on, no
//! unfinished job of the queue is missing from that index, or claims by kind never see it.
//!
//! Turning the setting on marks the queue's unfinished jobs. The tests race it against an
//! enqueue in flight, run it and enqueues under REPEATABLE READ, and follow a dead-letter copy,
//! over real connections, each time checking that a claim of some kinds through the kinds
//! index finds every job.

use pg_jobs_tests::{scalar, settings_with, unique_queue, wait_for_a_lock, Client, Cluster};
use postgres::error::SqlState;

/// `kind_indexed` of job `id`.
fn kind_indexed(client: &mut Client, id: i64) -> bool {
    scalar(
        client,
        "SELECT kind_indexed FROM jobs.job WHERE id = $1",
        &[&id],
    )
}

/// The queue's claims_by_kind as its row says.
fn claims_by_kind(client: &mut Client, queue: &str) -> bool {
    scalar(
        client,
        "SELECT claims_by_kind FROM jobs.queue WHERE name = $1",
        &[&queue],
    )
}

/// Sets `queue`'s claims_by_kind to `on` with jobs_create_queue; returns the setting as the
/// queue's row says, or the error.
fn set_claims_by_kind(
    client: &mut impl postgres::GenericClient,
    queue: &str,
    on: bool,
) -> Result<bool, postgres::Error> {
    client
        .query_one(
            "SELECT claims_by_kind FROM jobs_create_queue($1, claims_by_kind => $2)",
            &[&queue, &on],
        )
        .map(|row| row.get(0))
}

/// Checks a refused change of `queue`'s claims_by_kind: SQLSTATE `state`, a message naming
/// the setting, the queue and each of `named`; and that nothing changed (the setting is still
/// off, none of `jobs` is marked).
fn assert_refused(
    admin: &mut Client,
    error: &postgres::Error,
    state: &SqlState,
    queue: &str,
    named: &[&str],
    jobs: &[i64],
) {
    assert_eq!(error.code(), Some(state), "{error:?}");
    let message = error.as_db_error().expect("a server error").message();
    assert!(
        ["claims_by_kind", queue]
            .iter()
            .chain(named)
            .all(|word| message.contains(word)),
        "the message names the setting, the queue and {named:?}: {message}"
    );
    assert!(!claims_by_kind(admin, queue), "the setting stays off");
    for id in jobs {
        assert!(!kind_indexed(admin, *id), "job {id} stays unmarked");
    }
}

/// Enqueues one job of `kind` into `queue` and returns its id.
fn enqueue_kind(client: &mut impl postgres::GenericClient, queue: &str, kind: &str) -> i64 {
    client
        .query_one(
            "SELECT jobs_enqueue($1, '{}', kind => $2)",
            &[&queue, &kind],
        )
        .expect("enqueue")
        .get(0)
}

/// The ids a claim of `kinds` takes from `queue` (at most 100), in claim order, in a
/// transaction rolled back. In a queue with claims_by_kind the claim's statement reads the
/// kinds index and repeats its condition, so it takes only jobs with `kind_indexed`.
fn claimed_by_kind(client: &mut Client, queue: &str, kinds: &[&str]) -> Vec<i64> {
    let kinds: Vec<&str> = kinds.to_vec();
    let mut transaction = client.transaction().expect("begin");
    let ids = transaction
        .query(
            "SELECT id FROM jobs_claim($1, n => 100, kinds => $2)",
            &[&queue, &kinds],
        )
        .expect("claim")
        .iter()
        .map(|row| row.get(0))
        .collect();
    transaction.rollback().expect("roll back");
    ids
}

/// An enqueue in flight when claims_by_kind is turned on holds the queue's lock, so the change
/// waits for it to commit and then marks its job; an enqueue after the change reads it on.
#[test]
fn turning_claims_by_kind_on_waits_for_enqueues_in_flight_and_marks_their_jobs() {
    let cluster = Cluster::shared();
    let mut admin = cluster.connect();
    let queue = unique_queue(&mut admin, "kinds-race", "");
    let before = enqueue_kind(&mut admin, &queue, "a");

    let mut producer = cluster.connect();
    let mut in_flight = producer.transaction().expect("begin");
    let racing = enqueue_kind(&mut in_flight, &queue, "a");

    let mut switcher = cluster.connect();
    let pid: i32 = scalar(&mut switcher, "SELECT pg_backend_pid()", &[]);
    let switch = std::thread::scope(|scope| {
        let queue = &queue;
        let turned = scope.spawn(move || set_claims_by_kind(&mut switcher, queue, true));
        wait_for_a_lock(
            &mut admin,
            pid,
            "the change to wait for the enqueue in flight",
        );
        in_flight.commit().expect("commit the enqueue");
        turned.join().unwrap()
    });
    assert!(switch.expect("turn claims_by_kind on"), "the row says on");

    let after = enqueue_kind(&mut admin, &queue, "a");
    for (what, id) in [("before", before), ("in flight", racing), ("after", after)] {
        assert!(
            kind_indexed(&mut admin, id),
            "the job enqueued {what} the change is in the kinds index"
        );
    }
    assert_eq!(
        claimed_by_kind(&mut admin, &queue, &["a"]),
        [before, racing, after],
        "a claim of the kind through the kinds index takes all three"
    );
}

/// Under REPEATABLE READ an enqueue's snapshot may predate a change that turned the setting on
/// and marked the queue's jobs without seeing this one: its job goes into the kinds index
/// whatever the setting it sees says.
#[test]
fn an_enqueue_under_repeatable_read_goes_into_the_kinds_index() {
    let cluster = Cluster::shared();
    let mut admin = cluster.connect();
    let queue = unique_queue(&mut admin, "kinds-rr", "");

    let mut producer = cluster.connect();
    producer
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1;")
        .unwrap();
    set_claims_by_kind(&mut admin, &queue, true).expect("turn claims_by_kind on");
    let late = enqueue_kind(&mut producer, &queue, "b");
    producer.batch_execute("COMMIT").unwrap();
    assert!(
        kind_indexed(&mut admin, late),
        "the job enqueued under a snapshot older than the change is in the kinds index"
    );
    assert_eq!(claimed_by_kind(&mut admin, &queue, &["b"]), [late]);

    // The same in a queue that never claims by kind: a job in the index costs only its entry.
    let plain = unique_queue(&mut admin, "kinds-rr-plain", "");
    producer
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .unwrap();
    let id = enqueue_kind(&mut producer, &plain, "b");
    producer.batch_execute("COMMIT").unwrap();
    assert!(kind_indexed(&mut admin, id));
    let id = enqueue_kind(&mut producer, &plain, "b");
    assert!(
        !kind_indexed(&mut admin, id),
        "under READ COMMITTED the setting decides"
    );
}

/// Turning the setting on under REPEATABLE READ or SERIALIZABLE would mark the queue's jobs
/// with a snapshot that misses the ones enqueued since: refused, naming the setting, and
/// nothing changes. A new queue may start with it on, and turning it off needs no marking.
#[test]
fn turning_claims_by_kind_on_under_repeatable_read_is_refused_and_changes_nothing() {
    let cluster = Cluster::shared();
    let mut admin = cluster.connect();
    let queue = unique_queue(&mut admin, "kinds-refused", "");
    let job = enqueue_kind(&mut admin, &queue, "a");

    for level in ["REPEATABLE READ", "SERIALIZABLE"] {
        admin
            .batch_execute(&format!("BEGIN ISOLATION LEVEL {level}"))
            .unwrap();
        let error = set_claims_by_kind(&mut admin, &queue, true).expect_err(&format!(
            "{level}: turning claims_by_kind on must be refused"
        ));
        admin.batch_execute("ROLLBACK").unwrap();
        let state = SqlState::INVALID_TRANSACTION_STATE;
        assert_refused(&mut admin, &error, &state, &queue, &[level], &[job]);
    }

    admin
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .unwrap();
    let fresh = format!("{queue}-new");
    let created = set_claims_by_kind(&mut admin, &fresh, true).expect("create it on");
    let turned_off = set_claims_by_kind(&mut admin, &fresh, false).expect("turn it off");
    admin.batch_execute("COMMIT").unwrap();
    assert!(
        created,
        "a queue created with it on: it has no jobs to mark"
    );
    assert!(!turned_off, "turning it off marks nothing");
}

/// A dead-letter copy is inserted by the settle of a job of another queue, which does not hold
/// the dead-letter queue's lock: it goes into the kinds index whatever that queue's setting,
/// so a change racing the settle cannot leave it out.
#[test]
fn dead_letter_copies_are_in_the_kinds_index() {
    let cluster = Cluster::shared();
    let mut admin = cluster.connect();
    let dead = unique_queue(&mut admin, "kinds-dead", "claims_by_kind => true");
    let source = unique_queue(
        &mut admin,
        "kinds-source",
        &format!("max_attempts => 1, dead_letter => '{dead}'"),
    );
    enqueue_kind(&mut admin, &source, "c");
    let outcome: String = scalar(
        &mut admin,
        "SELECT jobs_fail(id, lease, 'broken') FROM jobs_claim($1)",
        &[&source],
    );
    assert_eq!(outcome, "failed");
    let copy: i64 = scalar(
        &mut admin,
        "SELECT id FROM jobs.job WHERE queue = $1",
        &[&dead],
    );
    assert!(kind_indexed(&mut admin, copy));
    assert_eq!(claimed_by_kind(&mut admin, &dead, &["c"]), [copy]);
}

/// Claims read claims_by_kind from the queue settings their sessions keep. Turned off, jobs
/// enqueued afterwards stay out of the kinds index, so a session that kept the setting on
/// would never find them: the change reaches a session's next claim.
#[test]
fn a_session_that_kept_claims_by_kind_on_sees_it_turned_off() {
    let cluster = Cluster::shared();
    let mut admin = cluster.connect();
    let queue = unique_queue(&mut admin, "kinds-off", "claims_by_kind => true");
    let mut worker = cluster.connect();
    let first = enqueue_kind(&mut admin, &queue, "d");
    // The worker's session keeps the queue's settings, claims_by_kind on among them.
    assert_eq!(claimed_by_kind(&mut worker, &queue, &["d"]), [first]);

    set_claims_by_kind(&mut admin, &queue, false).expect("turn claims_by_kind off");
    let second = enqueue_kind(&mut admin, &queue, "d");
    assert!(
        !kind_indexed(&mut admin, second),
        "enqueued with the setting off"
    );
    assert_eq!(
        claimed_by_kind(&mut worker, &queue, &["d"]),
        [first, second],
        "the worker's next claim reads the claim index and finds the unmarked job too"
    );
}

/// Turning the setting on marks the queue's jobs of every tenant. A session acting for some
/// tenants may see only theirs (row-level security), so it is refused there: SQLSTATE 42501,
/// naming the setting, the queue and pg_jobs.tenant, and nothing changes. Without the tenant
/// setting the same admin turns it on, and every tenant's job is marked.
#[test]
fn a_session_acting_for_some_tenants_cannot_turn_claims_by_kind_on() {
    let cluster = Cluster::shared();
    let mut admin = cluster.connect();
    admin
        .batch_execute(
            "DO $$ BEGIN
                 IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'kinds_admin') THEN
                     CREATE ROLE kinds_admin LOGIN;
                 END IF;
             END $$;
             GRANT jobs_admin TO kinds_admin;
             SELECT jobs_grant_tenant('kinds_admin', 'kinds-acme');",
        )
        .expect("an admin granted one tenant");
    let queue = unique_queue(&mut admin, "kinds-tenants", "");
    let jobs: Vec<i64> = ["kinds-acme", "kinds-other"]
        .iter()
        .map(|tenant| {
            scalar(
                &mut admin,
                "SELECT jobs_enqueue($1, '{}', kind => 'e', tenant => $2)",
                &[&queue, tenant],
            )
        })
        .collect();

    let mut scoped = cluster.connect_as("kinds_admin");
    scoped
        .batch_execute("SET pg_jobs.tenant = 'kinds-acme'")
        .unwrap();
    let error = set_claims_by_kind(&mut scoped, &queue, true)
        .expect_err("a session acting for one tenant must be refused");
    let state = SqlState::INSUFFICIENT_PRIVILEGE;
    assert_refused(
        &mut admin,
        &error,
        &state,
        &queue,
        &["pg_jobs.tenant"],
        &jobs,
    );

    scoped.batch_execute("RESET pg_jobs.tenant").unwrap();
    assert!(set_claims_by_kind(&mut scoped, &queue, true).expect("turn it on"));
    for id in &jobs {
        assert!(
            kind_indexed(&mut admin, *id),
            "job {id} of either tenant is marked"
        );
    }
}

/// A prepared transaction that turned the setting on keeps the queue's lock across a crash
/// restart: an enqueue after the restart waits for COMMIT PREPARED, then reads the setting on,
/// and the sessions' kept settings (emptied by the restart, dropped by the commit) let claims
/// of the kind read the kinds index and find every job. The job marked by the prepared
/// transaction is marked once it commits.
#[test]
fn a_prepared_switch_survives_a_crash_and_holds_enqueues_until_it_commits() {
    let settings = settings_with(&["pg_jobs.databases = ''", "max_prepared_transactions = 4"]);
    let cluster = Cluster::start_with_extension("kinds-two-phase", &settings);
    let mut admin = cluster.connect();
    let queue = unique_queue(&mut admin, "kinds-2pc", "");
    let before = enqueue_kind(&mut admin, &queue, "f");

    let mut switcher = cluster.connect();
    switcher
        .batch_execute(&format!(
            "BEGIN;
             SELECT jobs_create_queue('{queue}', claims_by_kind => true);
             PREPARE TRANSACTION 'kinds-switch';"
        ))
        .expect("prepare the switch");
    drop((admin, switcher));
    cluster.crash();
    cluster.restart();

    let mut admin = cluster.connect();
    let mut producer = cluster.connect();
    let pid: i32 = scalar(&mut producer, "SELECT pg_backend_pid()", &[]);
    let after = std::thread::scope(|scope| {
        let queue = &queue;
        let enqueued = scope.spawn(move || enqueue_kind(&mut producer, queue, "f"));
        wait_for_a_lock(
            &mut admin,
            pid,
            "the enqueue to wait for the prepared switch",
        );
        admin
            .batch_execute("COMMIT PREPARED 'kinds-switch'")
            .expect("commit the switch");
        enqueued.join().unwrap()
    });
    assert!(claims_by_kind(&mut admin, &queue));
    for (what, id) in [("before", before), ("after", after)] {
        assert!(
            kind_indexed(&mut admin, id),
            "the job enqueued {what} the switch is in the kinds index"
        );
    }
    assert_eq!(claimed_by_kind(&mut admin, &queue, &["f"]), [before, after]);
}
