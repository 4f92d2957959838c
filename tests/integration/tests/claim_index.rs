//! "Finished jobs must not slow claims": a claim reads the queued jobs of its queue through
//! `job_claim_idx` and never walks the history of finished ones.
//!
//! The test puts 100,000 finished jobs into a queue, older (earlier `run_at`, same priority)
//! than its queued ones, so that any plan that reaches jobs in claim order through anything but
//! the partial index would have to step over all of them. It then runs real `jobs_claim` calls
//! with `auto_explain` logging every statement they execute (`log_nested_statements`, with
//! ANALYZE and BUFFERS, sent back to the client as NOTICEs) and compares against a queue with
//! the same queued jobs and no history:
//!
//! * no statement of a claim scans `jobs.job` sequentially, and the claim uses `job_claim_idx`;
//! * the shared buffers a claim touches (the claim call's own statement, which counts every
//!   nested statement it ran) stay within 2× + 16 of the queue without history.
//!
//! Both for a claim that finds due jobs and for one that finds none (which also asks when the
//! next job comes due), and both with the custom plans of a session's first calls and the
//! generic plan a long-lived worker session ends up with (`plan_cache_mode`).
//!
//! Last, that the enqueue writer puts every job into each index whose predicate admits it
//! (amcheck), since claims read nothing but those entries.

use std::sync::{Mutex, MutexGuard};

use pg_jobs_tests::{column, plan_buffers, plan_nodes, scalar, unique_queue, Client, Cluster};
use serde_json::Value;

/// The measuring tests each start with `VACUUM ANALYZE jobs.job`, which invalidates every
/// session's plans: run beside another's measurement, it makes a measured claim plan again,
/// and planning's buffers count in the claim's.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Takes a measuring test's turn.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// Finished jobs in the queue with history.
const FINISHED: i32 = 100_000;
/// Queued jobs in each queue that has any.
const QUEUED: i32 = 200;
/// Jobs each measured claim asks for.
const CLAIM_N: i32 = 10;

/// The claims of one session with auto_explain on.
struct ExplainingSession(pg_jobs_tests::ExplainingSession);

impl ExplainingSession {
    fn open(plan_cache_mode: &str) -> ExplainingSession {
        ExplainingSession(pg_jobs_tests::ExplainingSession::open(
            Cluster::shared(),
            &format!("SET plan_cache_mode = '{plan_cache_mode}';"),
        ))
    }

    /// Claims up to [`CLAIM_N`] jobs of `queue` (of `kinds` only, when given) in a transaction
    /// that is rolled back, so every call sees the same jobs, and returns what the claim did.
    fn claim(&mut self, queue: &str, kinds: Option<&[&str]>) -> Claim {
        self.0.take_plans();
        let mut transaction = self.0.client.transaction().expect("begin");
        let claimed: i64 = transaction
            .query_one(
                "SELECT count(*) FROM jobs_claim($1, n => $2, kinds => $3)",
                &[&queue, &CLAIM_N, &kinds.map(<[&str]>::to_vec)],
            )
            .expect("claim")
            .get(0);
        transaction.rollback().expect("roll back");

        let mut plans: Vec<Value> = self.0.take_plans();
        let call = plans
            .iter()
            .position(|p| {
                p["Query Text"]
                    .as_str()
                    .unwrap_or("")
                    .contains("count(*) FROM jobs_claim")
            })
            .expect("auto_explain logged the claim call itself");
        let call = plans.remove(call);
        Claim {
            index: if kinds.is_some() {
                "job_kind_claim_idx"
            } else {
                "job_claim_idx"
            },
            claimed,
            buffers: plan_buffers(&call["Plan"]),
            nested: plans,
        }
    }
}

/// What one claim call did.
struct Claim {
    /// The index the claim must read: the one by kind for a claim of some kinds.
    index: &'static str,
    claimed: i64,
    /// Shared buffers (hit + read) of the claim call, nested statements included.
    buffers: i64,
    /// The plans of the statements the claim executed.
    nested: Vec<Value>,
}

impl Claim {
    /// Checks the claim's plans: no sequential scan of jobs.job, and its index used.
    fn check_plans(&self, what: &str) {
        assert!(
            !self.nested.is_empty(),
            "{what}: auto_explain logged no statement of the claim"
        );
        let all: Vec<&Value> = self
            .nested
            .iter()
            .flat_map(|p| plan_nodes(&p["Plan"]))
            .collect();
        let seq_scans: Vec<&&Value> = all
            .iter()
            .filter(|n| n["Node Type"] == "Seq Scan" && n["Relation Name"] == "job")
            .collect();
        assert!(
            seq_scans.is_empty(),
            "{what}: the claim scans jobs.job sequentially: {}",
            self.render()
        );
        assert!(
            all.iter().any(|n| n["Index Name"] == self.index),
            "{what}: the claim does not use {}: {}",
            self.index,
            self.render()
        );
    }

    /// The nested plans, for failure messages.
    fn render(&self) -> String {
        serde_json::to_string_pretty(&self.nested).unwrap_or_default()
    }
}

/// Claims from `queue` once to warm the session up, then three times; checks every plan and
/// returns the number of jobs claimed and the most buffers any measured call touched.
fn measure(
    session: &mut ExplainingSession,
    queue: &str,
    kinds: Option<&[&str]>,
    what: &str,
) -> (i64, i64) {
    session.claim(queue, kinds).check_plans(what);
    let measured: Vec<Claim> = (0..3).map(|_| session.claim(queue, kinds)).collect();
    for claim in &measured {
        claim.check_plans(what);
        assert_eq!(claim.claimed, measured[0].claimed, "{what}: claims differ");
    }
    let most = measured.iter().map(|c| c.buffers).max().unwrap_or(0);
    (measured[0].claimed, most)
}

/// Inserts `count` succeeded jobs into `queue`, all due before any queued job of the queue.
fn add_history(client: &mut Client, queue: &str, count: i32) {
    client
        .execute(
            "INSERT INTO jobs.job (queue, payload, state, attempt, max_attempts, run_at,
                                   created_at, started_at, finished_at, lease, worker, result)
             SELECT $1, jsonb_build_object('n', g), 'succeeded', 1, 5,
                    now() - interval '1 day' + g * interval '1 millisecond',
                    now() - interval '1 day', now() - interval '1 hour',
                    now() - interval '1 hour' + g * interval '1 millisecond',
                    gen_random_uuid(), 'history', '{}'
               FROM generate_series(1, $2) AS g",
            &[&queue, &count],
        )
        .expect("insert finished jobs");
}

#[test]
fn finished_jobs_do_not_slow_claims() {
    let _turn = one_at_a_time();
    let (mut setup, fresh) = Cluster::shared().connect_with_queue("fresh", "");
    let history = unique_queue(&mut setup, "history", "");
    let empty = unique_queue(&mut setup, "empty", "");
    let history_only = unique_queue(&mut setup, "history-only", "");
    for queue in [&fresh, &history] {
        setup
            .execute(
                "SELECT count(*) FROM jobs_enqueue_batch($1, ARRAY(
                     SELECT jsonb_build_object('n', g) FROM generate_series(1, $2) AS g))",
                &[queue, &QUEUED],
            )
            .expect("enqueue");
    }
    add_history(&mut setup, &history, FINISHED);
    add_history(&mut setup, &history_only, FINISHED);
    setup
        .batch_execute("VACUUM ANALYZE jobs.job")
        .expect("vacuum");

    let mut report = Vec::new();
    for mode in ["force_custom_plan", "force_generic_plan"] {
        let mut session = ExplainingSession::open(mode);
        for (without, with, due) in [(&fresh, &history, CLAIM_N), (&empty, &history_only, 0)] {
            let what = format!("{mode}, {due} due");
            let (claimed_without, buffers_without) =
                measure(&mut session, without, None, &format!("{what}, no history"));
            let (claimed_with, buffers_with) = measure(
                &mut session,
                with,
                None,
                &format!("{what}, {FINISHED} finished jobs"),
            );
            assert_eq!(
                (claimed_without, claimed_with),
                (i64::from(due), i64::from(due)),
                "{what}: jobs claimed"
            );
            report.push(format!(
                "{what}: {buffers_without} buffers without history, {buffers_with} with \
                 {FINISHED} finished jobs"
            ));
            assert!(
                buffers_with <= 2 * buffers_without + 16,
                "{what}: a claim touched {buffers_with} shared buffers with {FINISHED} finished \
                 jobs in the queue, {buffers_without} without"
            );
        }
    }
    println!("claim buffers:\n  {}", report.join("\n  "));
}

/// Queued jobs of another kind ahead of the ones a claim of some kinds takes.
const OTHER_KINDS: i32 = 50_000;

/// "A claim with `kinds` behind 200,000 queued jobs of other kinds" (issue 18): it reads the
/// index by kind and touches about as many buffers as the same claim in a queue that holds no
/// other kinds, however many jobs of other kinds are queued ahead of its own.
#[test]
fn jobs_of_other_kinds_do_not_slow_claims_of_some_kinds() {
    let _turn = one_at_a_time();
    let (mut setup, alone) =
        Cluster::shared().connect_with_queue("kinds-alone", "claims_by_kind => true");
    let behind = unique_queue(&mut setup, "kinds-behind", "claims_by_kind => true");
    let enqueue = |client: &mut Client, queue: &str, kind: &str, count: i32| {
        client
            .execute(
                "SELECT count(*) FROM jobs_enqueue_batch($1, ARRAY(
                     SELECT jsonb_build_object('n', g) FROM generate_series(1, $3) AS g),
                     kind => $2)",
                &[&queue, &kind, &count],
            )
            .expect("enqueue");
    };
    enqueue(&mut setup, &behind, "other", OTHER_KINDS);
    for queue in [&alone, &behind] {
        enqueue(&mut setup, queue, "wanted", QUEUED);
        enqueue(&mut setup, queue, "also-wanted", QUEUED);
    }
    setup
        .batch_execute("VACUUM ANALYZE jobs.job")
        .expect("vacuum");

    let kinds: &[&str] = &["wanted", "also-wanted", "wanted"];
    let mut report = Vec::new();
    for mode in ["force_custom_plan", "force_generic_plan"] {
        let mut session = ExplainingSession::open(mode);
        let (claimed_alone, buffers_alone) = measure(
            &mut session,
            &alone,
            Some(kinds),
            &format!("{mode}, no other kinds"),
        );
        let (claimed_behind, buffers_behind) = measure(
            &mut session,
            &behind,
            Some(kinds),
            &format!("{mode}, behind {OTHER_KINDS} jobs of another kind"),
        );
        assert_eq!(
            (claimed_alone, claimed_behind),
            (i64::from(CLAIM_N), i64::from(CLAIM_N)),
            "{mode}: jobs claimed"
        );
        report.push(format!(
            "{mode}: {buffers_alone} buffers without other kinds, {buffers_behind} behind \
             {OTHER_KINDS} jobs of another kind"
        ));
        assert!(
            buffers_behind <= 2 * buffers_alone + 16,
            "{mode}: a claim of some kinds touched {buffers_behind} shared buffers behind \
             {OTHER_KINDS} jobs of another kind, {buffers_alone} without them"
        );
    }
    println!("claim-of-kinds buffers:\n  {}", report.join("\n  "));
}

/// Every index of `jobs.job` holds an entry for each row its predicate admits (amcheck's
/// `bt_index_check` with `heapallindexed`): the enqueue writer checks the predicates itself and
/// opens only the indexes some row goes into, so a predicate it read wrongly would leave
/// claims, groups or unique keys blind to a job.
#[test]
fn the_enqueue_writer_puts_each_job_into_exactly_the_indexes_that_admit_it() {
    let cluster = Cluster::shared();
    let mut client = cluster.connect();
    client
        .batch_execute("CREATE EXTENSION IF NOT EXISTS amcheck")
        .expect("amcheck, which the server builds the suite runs this test on ship");
    let queue = unique_queue(&mut client, "writer-indexes", "group_concurrency => 1");
    client
        .execute(
            "SELECT jobs_enqueue($1, '{}'),
                    jobs_enqueue($1, '{}', kind => 'other', priority => 3),
                    jobs_enqueue($1, '{}', run_at => now() + interval '1 hour'),
                    jobs_enqueue($1, '{}', unique_key => 'one'),
                    jobs_enqueue($1, '{}', unique_key => 'one'),
                    jobs_enqueue($1, '{}', group_key => 'g'),
                    jobs_enqueue($1, '{}', group_key => 'g', unique_key => 'two')",
            &[&queue],
        )
        .expect("single enqueues");
    client
        .execute(
            "SELECT count(*) FROM jobs_enqueue_batch($1, ARRAY['{}', '{}', '{}', '{}']::jsonb[],
                 group_keys => ARRAY['h', 'h', NULL, 'i'],
                 unique_keys => ARRAY['three', NULL, 'four', NULL])",
            &[&queue],
        )
        .expect("a batch, its second job waiting behind its first");
    let waiting: i64 = scalar(
        &mut client,
        "SELECT count(*) FROM jobs.job WHERE queue = $1 AND group_wait",
        &[&queue],
    );
    assert_eq!(
        waiting, 1,
        "the batch marked the job behind its own job of h"
    );
    let indexes: Vec<String> = column(
        &mut client,
        "SELECT indexrelid::regclass::text FROM pg_catalog.pg_index
              WHERE indrelid = 'jobs.job'::regclass ORDER BY 1",
        &[],
    );
    assert!(indexes.len() >= 7, "{indexes:?}");
    for index in &indexes {
        client
            .execute(
                "SELECT bt_index_check($1::text::regclass, heapallindexed => true)",
                &[index],
            )
            .unwrap_or_else(|e| panic!("{index}: {e:?}"));
    }
}
