//! The checker on synthetic histories: clean histories it must pass, and for every anomaly it
//! claims to find, a history that has it and that it must report.

use uuid::Uuid;

use super::checker::{
    check, check_with_end, Call, Delivered, End, ErrorEntry, FinalJob, KeyProbe, Micros, Op,
    OpResult, Reply, Report, Took, Vanish,
};

/// Builds synthetic histories: one server clock (µs) and one client clock (10 µs per op).
#[derive(Default)]
struct Synthetic {
    ops: Vec<Op>,
    /// When (client clock) the connections the next ops are sent on were made.
    connected_at: u64,
}

/// Server times used below.
const S: Micros = 1_000_000;

impl Synthetic {
    fn push(&mut self, process: usize, call: Call, result: OpResult) -> usize {
        let index = self.ops.len();
        let at = index as u64 * 10;
        self.ops.push(Op {
            index,
            process,
            invoke: at,
            complete: at + 5,
            call,
            result,
            server_floor: None,
            server_ceiling: None,
            backend: 1000 + process as i32,
            connected_at: self.connected_at,
        });
        index
    }

    /// Every later op goes over a connection made now (after a crash or a restart).
    fn reconnect_all(&mut self) {
        self.connected_at = self.ops.len() as u64 * 10;
    }

    /// `call` run inside a transaction prepared as `gid`, with `result`.
    fn prepared(&mut self, process: usize, gid: &str, call: Call, result: OpResult) -> usize {
        self.push(
            process,
            Call::Prepared {
                gid: gid.into(),
                call: Box::new(call),
            },
            result,
        )
    }

    /// `COMMIT PREPARED` (`commit`) or `ROLLBACK PREPARED` of `gid`, answered from server time
    /// `at` to `at + 100`.
    fn finish(&mut self, process: usize, gid: &str, commit: bool, at: Micros) -> usize {
        self.push(
            process,
            Call::Finish {
                gid: gid.into(),
                commit,
            },
            OpResult::Ok(Reply::Outcome {
                outcome: "ok".into(),
                before: at,
                after: at + 100,
            }),
        )
    }

    /// Whether `gid` was in `pg_prepared_xacts` at server time `at`.
    fn inspect(&mut self, process: usize, gid: &str, present: bool, at: Micros) -> usize {
        self.push(
            process,
            Call::Inspect { gid: gid.into() },
            OpResult::Ok(Reply::Present { present, at }),
        )
    }

    /// A claim of one job taken at server time `at` (began 50 µs before), asking for a lease
    /// of `lease_ms`: its lease and its reply.
    fn claim_reply(
        &self,
        (id, tag, attempt): (i64, u64, i32),
        at: Micros,
        lease_ms: i64,
    ) -> (Uuid, OpResult) {
        let lease = Uuid::from_u128(((id as u128) << 32) | (self.ops.len() as u128 + 1));
        let reply = Reply::Claimed {
            jobs: vec![Delivered {
                id,
                lease,
                attempt,
                lease_until: at + lease_ms * 1000,
                tag,
                taken_at: at,
            }],
            before: at - 50,
            after: at,
        };
        (lease, OpResult::Ok(reply))
    }

    /// A one-job enqueue of `tag` with unique key `key` (kept `unique_for` µs after success),
    /// answered `id` between server times `before` and `after`.
    fn enqueue_keyed(
        &mut self,
        (tag, id): (u64, i64),
        key: &str,
        unique_for: Option<Micros>,
        (before, after): (Micros, Micros),
    ) -> usize {
        self.push(
            9,
            Call::Enqueue {
                tags: vec![tag],
                max_attempts: 3,
                unique: vec![Some(key.into())],
                unique_for,
            },
            OpResult::Ok(Reply::Ids {
                ids: vec![id],
                before,
                after,
            }),
        )
    }

    /// A claim whose client vanished while it waited, sent after server time `floor`.
    fn vanished(&mut self, process: usize, floor: Micros, vanish: Vanish) -> usize {
        let ceiling = vanish.ended_by.unwrap_or(vanish.gone_by);
        self.unknown(
            process,
            Call::VanishedClaim {
                n: 1,
                lease_ms: 5000,
                vanish,
            },
            floor,
            ceiling,
        )
    }

    /// A call with an unknown outcome that may have run between server times `floor` and
    /// `ceiling`.
    fn unknown(&mut self, process: usize, call: Call, floor: Micros, ceiling: Micros) -> usize {
        let index = self.push(process, call, OpResult::Unknown("connection closed".into()));
        self.ops[index].server_floor = Some(floor);
        self.ops[index].server_ceiling = Some(ceiling);
        index
    }

    fn enqueue(&mut self, tag: u64, id: i64) {
        self.enqueue_between(tag, id, 0, 100);
    }

    /// An enqueue of one job whose call ran between server times `before` and `after`.
    fn enqueue_between(&mut self, tag: u64, id: i64, before: Micros, after: Micros) {
        self.push(
            9,
            Call::Enqueue {
                tags: vec![tag],
                max_attempts: 3,
                unique: vec![None],
                unique_for: None,
            },
            OpResult::Ok(Reply::Ids {
                ids: vec![id],
                before,
                after,
            }),
        );
    }

    /// A claim of one job that ran from server time `at − 50` to `at`, asking for a lease of
    /// `lease_ms` and reporting `lease_until`.
    fn claim_with(
        &mut self,
        process: usize,
        (id, tag, attempt): (i64, u64, i32),
        at: Micros,
        lease_ms: i64,
        lease_until: Micros,
    ) -> Uuid {
        let lease = Uuid::from_u128(((id as u128) << 32) | (self.ops.len() as u128 + 1));
        self.push(
            process,
            Call::Claim { n: 1, lease_ms },
            OpResult::Ok(Reply::Claimed {
                jobs: vec![Delivered {
                    id,
                    lease,
                    attempt,
                    lease_until,
                    tag,
                    taken_at: at,
                }],
                before: at - 50,
                after: at,
            }),
        );
        lease
    }

    /// A claim of one job at server time `at` with a 1 s lease, as granted.
    fn claim(&mut self, process: usize, id: i64, tag: u64, attempt: i32, at: Micros) -> Uuid {
        self.claim_with(process, (id, tag, attempt), at, 1000, at + S)
    }

    /// A call that answered `outcome`, running from server time `at` to `at + 100`.
    fn answered(&mut self, process: usize, call: Call, outcome: &str, at: Micros) -> usize {
        self.push(
            process,
            call,
            OpResult::Ok(Reply::Outcome {
                outcome: outcome.into(),
                before: at,
                after: at + 100,
            }),
        )
    }

    fn complete(
        &mut self,
        process: usize,
        id: i64,
        lease: Uuid,
        outcome: &str,
        at: Micros,
    ) -> usize {
        self.answered(process, Call::Complete { id, lease }, outcome, at)
    }

    fn heartbeat(
        &mut self,
        process: usize,
        id: i64,
        lease: Uuid,
        outcome: &str,
        at: Micros,
    ) -> usize {
        self.answered(process, Call::Heartbeat { id, lease }, outcome, at)
    }

    fn fail(
        &mut self,
        process: usize,
        (id, lease): (i64, Uuid),
        retry: bool,
        outcome: &str,
        at: Micros,
    ) -> usize {
        self.answered(process, Call::Fail { id, lease, retry }, outcome, at)
    }

    fn release(
        &mut self,
        process: usize,
        id: i64,
        lease: Uuid,
        outcome: &str,
        at: Micros,
    ) -> usize {
        self.answered(process, Call::Release { id, lease }, outcome, at)
    }

    fn cancel(&mut self, id: i64, outcome: &str, at: Micros) -> usize {
        self.answered(10, Call::Cancel { id }, outcome, at)
    }

    /// `pg_terminate_backend` of `process`'s backend, answered true.
    fn terminate(&mut self, process: usize) {
        self.push(
            10,
            Call::Terminate {
                process,
                pid: 1000 + process as i32,
            },
            OpResult::Ok(Reply::Terminated(true)),
        );
    }

    fn check(&self, finals: &[FinalJob]) -> Report {
        self.check_groups(finals, 1)
    }

    /// [`Synthetic::check`] with what was read at the end besides the rows.
    fn check_end(&self, finals: &[FinalJob], end: &End) -> Report {
        let report = check_with_end(&self.ops, finals, end, 1);
        report.print();
        report
    }

    /// [`Synthetic::check`] for a queue whose groups run `concurrency` jobs at once.
    fn check_groups(&self, finals: &[FinalJob], concurrency: usize) -> Report {
        let report = check(&self.ops, finals, concurrency);
        report.print();
        report
    }
}

/// A job at the end, with `max_attempts` 3 and `errors` of (attempt, error, at).
fn final_job(
    id: i64,
    tag: u64,
    state: &str,
    attempt: i32,
    errors: &[(i32, &str, Micros)],
) -> FinalJob {
    FinalJob {
        id,
        tag: Some(tag),
        state: state.into(),
        attempt,
        max_attempts: 3,
        errors: errors
            .iter()
            .map(|(attempt, error, at)| ErrorEntry {
                attempt: *attempt,
                error: (*error).to_owned(),
                at: *at,
            })
            .collect(),
        result_op: None,
        release_reason: None,
        lease: None,
        group: None,
        unique_key: None,
        unique_hold: false,
        unique_for: None,
        finished_at: None,
    }
}

/// A job that `op` completed under `lease`.
fn succeeded(
    id: i64,
    tag: u64,
    attempt: i32,
    errors: &[(i32, &str, Micros)],
    op: usize,
    lease: Uuid,
) -> FinalJob {
    FinalJob {
        result_op: Some(op),
        lease: Some(lease),
        ..final_job(id, tag, "succeeded", attempt, errors)
    }
}

/// Asserts that one of `found` contains `needle`.
#[track_caller]
fn assert_reported(found: &[String], needle: &str) {
    assert!(
        found.iter().any(|line| line.contains(needle)),
        "expected a report containing {needle:?}, got {found:#?}"
    );
}

#[test]
fn the_checker_passes_clean_histories_with_reclaims_unknown_outcomes_and_late_successes() {
    let mut h = Synthetic::default();
    h.enqueue(1, 10);
    // Lease A runs out at 2 s and is reclaimed at 2.05 s; nobody claims the job, so A's
    // heartbeat at 2.1 s revives it ("done wins"), and A fails it with a retry at 2.2 s.
    let a = h.claim(0, 10, 1, 1, S);
    h.heartbeat(0, 10, a, "running", 2_100_000);
    let fail = h.fail(0, (10, a), true, "queued", 2_200_000);
    // Lease B takes the retry at 2.3 s, heartbeats, and completes within its renewed lease;
    // A's own late complete at 3.6 s is 'lost' (A's fail ended A, and B came since).
    let b = h.claim(1, 10, 1, 2, 2_300_000);
    h.heartbeat(1, 10, b, "running", 2_400_000);
    let done = h.complete(1, 10, b, "succeeded", 3_300_000);
    h.complete(0, 10, a, "lost", 3_600_000);
    let fail_entry = format!("fail op {fail}");
    let job10 = succeeded(
        10,
        1,
        2,
        &[(1, "lease expired", 2_050_000), (1, &fail_entry, 2_200_050)],
        done,
        b,
    );
    // Job 11: enqueued with an unknown outcome, yet stored (recovered), then cancelled.
    h.unknown(
        8,
        Call::Enqueue {
            tags: vec![2],
            max_attempts: 3,
            unique: vec![None],
            unique_for: None,
        },
        0,
        200,
    );
    h.cancel(11, "cancelled", 4 * S);
    let job11 = final_job(11, 2, "cancelled", 0, &[]);
    // Job 12: a claim with an unknown outcome takes it while it is free (its attempt 1, which
    // the reclaim at 5.5 s records); a known claim then gets attempt 2.
    h.enqueue(3, 12);
    h.unknown(
        2,
        Call::Claim {
            n: 5,
            lease_ms: 300,
        },
        5 * S,
        5_100_000,
    );
    let c = h.claim(3, 12, 3, 2, 6 * S);
    let c_done = h.complete(3, 12, c, "succeeded", 6_100_000);
    let job12 = succeeded(12, 3, 2, &[(1, "lease expired", 5_500_000)], c_done, c);
    // Job 13: its complete's connection dies; the stored result shows it acted, so the retry
    // that answers 'lost' is right.
    h.enqueue(4, 13);
    let d = h.claim(4, 13, 4, 1, 7 * S);
    let unknown_complete = h.unknown(4, Call::Complete { id: 13, lease: d }, 7_100_000, 7_200_000);
    h.complete(4, 13, d, "lost", 7_300_000);
    let job13 = succeeded(13, 4, 1, &[], unknown_complete, d);
    // A producer's backend is terminated; its next enqueue, sent after that, never ran.
    h.terminate(7);
    h.unknown(
        7,
        Call::Enqueue {
            tags: vec![5],
            max_attempts: 3,
            unique: vec![None],
            unique_for: None,
        },
        8 * S,
        9 * S,
    );

    let report = h.check(&[job10, job11, job12, job13]);
    assert!(report.is_clean(), "a clean history was judged anomalous");
    assert_eq!(report.recovered, 1);
    assert_eq!(report.phantom_attempts, 1, "job 12's first attempt");
    assert_eq!(report.resolved_unknowns, 1, "job 13's complete");
    assert_eq!(report.answered("enqueue", "not run"), 1);
    assert_eq!(report.judged, 2, "two 'lost' answers");
}

#[test]
fn the_checker_reports_a_lost_job() {
    let mut h = Synthetic::default();
    h.enqueue(1, 10);
    h.enqueue(2, 11);
    // Job 10 is gone at the end; job 11 is still queued.
    let report = h.check(&[final_job(11, 2, "queued", 0, &[])]);
    assert_eq!(report.lost.len(), 2, "{:?}", report.lost);
    assert!(!report.is_clean());
}

#[test]
fn the_checker_reports_two_live_leases_at_once() {
    let mut h = Synthetic::default();
    h.enqueue(1, 10);
    // Lease A runs until 2 s, but lease B is handed out at 1.5 s.
    h.claim(0, 10, 1, 1, S);
    let b = h.claim(1, 10, 1, 2, 1_500_000);
    let done = h.complete(1, 10, b, "succeeded", 1_600_000);
    let report = h.check(&[succeeded(10, 1, 2, &[], done, b)]);
    assert_reported(&report.duplicated, "live over");
}

#[test]
fn the_checker_reports_a_stale_lease_that_acted() {
    let mut h = Synthetic::default();
    h.enqueue(1, 10);
    // A's lease expired (2 s) and B claimed at 2.5 s; A's late complete must be 'lost', yet it
    // answered 'succeeded' at 2.6 s.
    let a = h.claim(0, 10, 1, 1, S);
    h.claim(1, 10, 1, 2, 2_500_000);
    let stale = h.complete(0, 10, a, "succeeded", 2_600_000);
    let job = succeeded(10, 1, 2, &[(1, "lease expired", 2_100_000)], stale, a);
    let report = h.check(&[job]);
    assert_reported(&report.duplicated, "after it was replaced");
}

#[test]
fn the_checker_reports_an_unexpected_delivery() {
    let mut h = Synthetic::default();
    h.enqueue(1, 10);
    // A claim hands out job 99 with tag 7, which nobody enqueued.
    h.claim(0, 99, 7, 1, S);
    let report = h.check(&[final_job(10, 1, "cancelled", 0, &[])]);
    assert_reported(&report.unexpected, "never enqueued");
}

#[test]
fn the_checker_reports_a_final_state_that_contradicts_the_history() {
    let mut h = Synthetic::default();
    h.enqueue(1, 10);
    let a = h.claim(0, 10, 1, 1, S);
    let done = h.complete(0, 10, a, "succeeded", 1_100_000);
    // The complete was acknowledged, yet the job ends failed, and a cancel after it says
    // 'cancelled' (terminal states must stay terminal).
    h.cancel(10, "cancelled", 1_200_000);
    let mut job = final_job(10, 1, "failed", 1, &[]);
    job.result_op = Some(done);
    let report = h.check(&[job]);
    assert_reported(&report.state_errors, "completed it (succeeded)");
    assert_reported(&report.state_errors, "before cancel op");
}

#[test]
fn the_checker_reports_a_lost_answer_while_the_lease_was_current() {
    let mut h = Synthetic::default();
    h.enqueue(1, 10);
    // Nobody claimed, cancelled or settled the job, yet A's heartbeat hears 'lost'; A then
    // completes it, so the lease was current all along.
    let a = h.claim(0, 10, 1, 1, S);
    h.heartbeat(0, 10, a, "lost", 1_200_000);
    let done = h.complete(0, 10, a, "succeeded", 1_300_000);
    let report = h.check(&[succeeded(10, 1, 1, &[], done, a)]);
    assert_reported(&report.answers, "answered 'lost'");
}

#[test]
fn the_checker_takes_lost_for_a_grouped_jobs_heartbeat_after_its_reclaim_only() {
    // A's lease runs out at 2 s and is reclaimed at 2.05 s; nobody claims the job since. A's
    // heartbeat at 2.1 s hears 'lost' (the reclaim gave the group's slot away), and A's late
    // complete still wins.
    let history = |group: Option<&str>| {
        let mut h = Synthetic::default();
        h.enqueue(1, 10);
        let a = h.claim(0, 10, 1, 1, S);
        h.heartbeat(0, 10, a, "lost", 2_100_000);
        let done = h.complete(0, 10, a, "succeeded", 2_200_000);
        let job = FinalJob {
            group: group.map(str::to_owned),
            ..succeeded(10, 1, 1, &[(1, "lease expired", 2_050_000)], done, a)
        };
        h.check(&[job])
    };
    let report = history(Some("g"));
    assert!(report.answers.is_empty(), "{:?}", report.answers);
    // Without a group the heartbeat would have revived the job.
    assert_reported(&history(None).answers, "answered 'lost'");
}

#[test]
fn the_checker_reports_a_broken_done_wins() {
    let mut h = Synthetic::default();
    h.enqueue(1, 10);
    // A's lease runs out and is reclaimed at 2.1 s; nobody claims the job before A's late
    // complete at 2.5 s, which must win, yet it answers 'lost'. B claims it only at 3 s.
    let a = h.claim(0, 10, 1, 1, S);
    h.complete(0, 10, a, "lost", 2_500_000);
    let b = h.claim(1, 10, 1, 2, 3 * S);
    let done = h.complete(1, 10, b, "succeeded", 3_100_000);
    let job = succeeded(10, 1, 2, &[(1, "lease expired", 2_100_000)], done, b);
    let report = h.check(&[job]);
    assert_reported(&report.answers, "answered 'lost'");
}

#[test]
fn the_checker_reports_a_cancelled_answer_without_a_cancel_under_that_lease() {
    let mut h = Synthetic::default();
    h.enqueue(1, 10);
    h.enqueue(2, 11);
    // Job 10: nobody cancels it, yet A's heartbeat hears 'cancelled'.
    let a = h.claim(0, 10, 1, 1, S);
    h.heartbeat(0, 10, a, "cancelled", 1_200_000);
    let done = h.complete(0, 10, a, "succeeded", 1_300_000);
    // Job 11: B's heartbeat hears 'cancelled' at 1.2 s, before the cancel at 1.5 s.
    let b = h.claim(1, 11, 2, 1, S);
    h.heartbeat(1, 11, b, "cancelled", 1_200_000);
    h.cancel(11, "cancelled", 1_500_000);
    let mut job11 = final_job(11, 2, "cancelled", 1, &[]);
    job11.lease = Some(b);
    let report = h.check(&[succeeded(10, 1, 1, &[], done, a), job11]);
    let cancelled: Vec<&String> = report
        .answers
        .iter()
        .filter(|a| a.contains("answered 'cancelled'"))
        .collect();
    assert_eq!(cancelled.len(), 2, "{:#?}", report.answers);
}

#[test]
fn the_checker_reports_answers_a_call_never_gives() {
    let mut h = Synthetic::default();
    for (tag, id) in [(1, 10), (2, 11), (3, 12), (4, 13)] {
        h.enqueue(tag, id);
    }
    // Job 10: a fail with a retry answers 'queued' on the final attempt.
    let a = h.claim(0, 10, 1, 3, S);
    let f10 = h.fail(0, (10, a), true, "queued", 1_100_000);
    // Job 11: a fail with retry => false answers 'queued'.
    let b = h.claim(1, 11, 2, 1, S);
    let f11 = h.fail(1, (11, b), false, "queued", 1_100_000);
    // Job 12: a fail with a retry answers 'failed' on attempt 1 of 3.
    let c = h.claim(2, 12, 3, 1, S);
    let f12 = h.fail(2, (12, c), true, "failed", 1_100_000);
    // Job 13: a heartbeat answers 'succeeded'.
    let d = h.claim(3, 13, 4, 1, S);
    h.heartbeat(3, 13, d, "succeeded", 1_100_000);
    let done = h.complete(3, 13, d, "succeeded", 1_200_000);
    let entry = |op: usize, attempt: i32| (attempt, format!("fail op {op}"), 1_100_050);
    let jobs = [
        (10, 1, "queued", 3, f10),
        (11, 2, "queued", 1, f11),
        (12, 3, "failed", 1, f12),
    ]
    .map(|(id, tag, state, attempt, op)| {
        let (attempt_of_entry, error, at) = entry(op, attempt);
        final_job(id, tag, state, attempt, &[(attempt_of_entry, &error, at)])
    });
    let mut finals = jobs.to_vec();
    finals.push(succeeded(13, 4, 1, &[], done, d));
    let report = h.check(&finals);
    assert_reported(&report.answers, "answered 'queued' on attempt 3 of 3");
    assert_reported(
        &report.answers,
        "answered 'queued' on attempt 1 of 3 (retry false)",
    );
    assert_reported(&report.answers, "answered 'failed' on attempt 1 of 3");
    assert_reported(
        &report.answers,
        "answered 'succeeded', which it never answers",
    );
}

#[test]
fn the_checker_bounds_the_attempts_unknown_claims_can_explain() {
    // One claim with an unknown outcome whose server-time window lies inside A's live lease:
    // it cannot have taken the job, so B's attempt 3 is one too many.
    let history = |unknown_claim: &dyn Fn(&mut Synthetic)| {
        let mut h = Synthetic::default();
        h.enqueue(1, 10);
        h.claim(0, 10, 1, 1, S);
        unknown_claim(&mut h);
        let b = h.claim(1, 10, 1, 3, 3 * S);
        let done = h.complete(1, 10, b, "succeeded", 3_100_000);
        let job = succeeded(
            10,
            1,
            3,
            &[
                (1, "lease expired", 2_100_000),
                (2, "lease expired", 2_700_000),
            ],
            done,
            b,
        );
        h.check(&[job])
    };
    let report = history(&|h| {
        h.unknown(
            2,
            Call::Claim {
                n: 5,
                lease_ms: 300,
            },
            1_200_000,
            1_300_000,
        );
    });
    assert_reported(
        &report.state_errors,
        "claimed attempt 3, but the history before allows 2..=2",
    );

    // The same claim while the job was free (after A's lease ran out) explains attempt 2.
    let report = history(&|h| {
        h.unknown(
            2,
            Call::Claim {
                n: 5,
                lease_ms: 300,
            },
            2_200_000,
            2_300_000,
        );
    });
    assert!(
        report.is_clean(),
        "a claim with an unknown outcome while the job was free explains one attempt"
    );

    // A claim sent after its backend was terminated never ran: it explains nothing.
    let report = history(&|h| {
        h.terminate(2);
        h.unknown(
            2,
            Call::Claim {
                n: 5,
                lease_ms: 300,
            },
            2_200_000,
            2_300_000,
        );
    });
    assert_eq!(report.answered("claim", "not run"), 1);
    assert_reported(
        &report.state_errors,
        "claimed attempt 3, but the history before allows 2..=2",
    );

    // One claim of n jobs takes each job at most once: two extra attempts need two claims.
    let mut h = Synthetic::default();
    h.enqueue(1, 10);
    h.claim(0, 10, 1, 1, S);
    h.unknown(
        2,
        Call::Claim {
            n: 5,
            lease_ms: 300,
        },
        2_200_000,
        4 * S,
    );
    let b = h.claim(1, 10, 1, 4, 5 * S);
    let done = h.complete(1, 10, b, "succeeded", 5_100_000);
    let job = succeeded(
        10,
        1,
        4,
        &[
            (1, "lease expired", 2_100_000),
            (2, "lease expired", 2_700_000),
            (3, "lease expired", 3_700_000),
        ],
        done,
        b,
    );
    let report = h.check(&[job]);
    assert_reported(
        &report.state_errors,
        "claimed attempt 4, but the history before allows 2..=3",
    );
}

#[test]
fn the_checker_reports_attempts_below_the_claims_and_a_wrong_final_attempt() {
    let mut h = Synthetic::default();
    h.enqueue(1, 10);
    h.enqueue(2, 11);
    // Job 10: reclaimed after attempt 1, yet B's claim is attempt 1 again.
    h.claim(0, 10, 1, 1, S);
    let b = h.claim(1, 10, 1, 1, 3 * S);
    let done = h.complete(1, 10, b, "succeeded", 3_100_000);
    let job10 = succeeded(10, 1, 1, &[(1, "lease expired", 2_100_000)], done, b);
    // Job 11: claimed once and completed, yet it ends at attempt 3.
    let c = h.claim(2, 11, 2, 1, S);
    let c_done = h.complete(2, 11, c, "succeeded", 1_100_000);
    let job11 = succeeded(11, 2, 3, &[], c_done, c);
    let report = h.check(&[job10, job11]);
    assert_reported(
        &report.state_errors,
        "claimed attempt 1, but the history before allows 2..=2",
    );
    assert_reported(&report.state_errors, "ends at attempt 3");
}

#[test]
fn the_checker_reports_wrong_error_bookkeeping() {
    let mut h = Synthetic::default();
    for (tag, id) in [(1, 10), (2, 11), (3, 12), (4, 13), (5, 14), (6, 15)] {
        h.enqueue(tag, id);
    }
    // Job 10: an acknowledged failure that errors do not record.
    let a = h.claim(0, 10, 1, 1, S);
    h.fail(0, (10, a), true, "queued", 1_100_000);
    // Job 11: one failure recorded twice, and with the wrong attempt.
    let b = h.claim(1, 11, 2, 1, S);
    let f11 = h.fail(1, (11, b), true, "queued", 1_100_000);
    // Job 12: a failure stamped a second after the call returned (not the server's clock of
    // the call).
    let c = h.claim(2, 12, 3, 1, S);
    let f12 = h.fail(2, (12, c), true, "queued", 1_100_000);
    // Job 13: an entry from a fail that answered 'lost' (it did nothing).
    let d = h.claim(3, 13, 4, 1, S);
    let d_done = h.complete(3, 13, d, "succeeded", 1_050_000);
    let f13 = h.fail(3, (13, d), true, "lost", 1_100_000);
    // Job 14: reclaimed at 1.5 s, while its lease (until 2 s) was certainly live.
    let e = h.claim(4, 14, 5, 1, S);
    let e2 = h.claim(5, 14, 5, 2, 1_600_000);
    let e_done = h.complete(5, 14, e2, "succeeded", 1_700_000);
    let _ = e;
    // Job 15: a claim with an unknown outcome explains attempt 2, but no reclaim of it is
    // recorded, and nobody could have settled it.
    let g = h.claim(6, 15, 6, 1, S);
    let _ = g;
    h.unknown(
        7,
        Call::Claim {
            n: 1,
            lease_ms: 300,
        },
        2_200_000,
        2_300_000,
    );
    let g3 = h.claim(6, 15, 6, 3, 3 * S);
    let g_done = h.complete(6, 15, g3, "succeeded", 3_100_000);

    let twice = format!("fail op {f11}");
    let late = format!("fail op {f12}");
    let from_lost = format!("fail op {f13}");
    let report = h.check(&[
        final_job(10, 1, "queued", 1, &[]),
        final_job(
            11,
            2,
            "queued",
            1,
            &[(2, &twice, 1_100_050), (2, &twice, 1_100_050)],
        ),
        final_job(12, 3, "queued", 1, &[(1, &late, 2_200_000)]),
        succeeded(13, 4, 1, &[(1, &from_lost, 1_100_050)], d_done, d),
        succeeded(14, 5, 2, &[(1, "lease expired", 1_500_000)], e_done, e2),
        succeeded(15, 6, 3, &[(1, "lease expired", 2_100_000)], g_done, g3),
    ]);
    assert_reported(&report.state_errors, "errors do not record it");
    assert_reported(&report.state_errors, "recorded twice");
    assert_reported(
        &report.state_errors,
        "records attempt 2, its lease's attempt was 1",
    );
    assert_reported(&report.state_errors, "outside the call's");
    assert_reported(&report.state_errors, "but that op did not fail this job");
    assert_reported(&report.state_errors, "certainly live");
    assert_reported(&report.state_errors, "no reclaim of it is recorded");
}

#[test]
fn the_checker_reports_a_holder_acting_after_a_cancel() {
    let mut h = Synthetic::default();
    h.enqueue(1, 10);
    let a = h.claim(0, 10, 1, 1, S);
    h.cancel(10, "cancelled", 1_300_000);
    // The holder's heartbeat at 1.5 s must answer 'cancelled', yet it renewed the lease.
    h.heartbeat(0, 10, a, "running", 1_500_000);
    let mut job = final_job(10, 1, "cancelled", 1, &[]);
    job.lease = Some(a);
    let report = h.check(&[job]);
    assert_reported(
        &report.duplicated,
        "took effect after the job was cancelled",
    );
}

#[test]
fn the_checker_reports_a_claim_after_the_job_finished() {
    let mut h = Synthetic::default();
    h.enqueue(1, 10);
    h.enqueue(2, 11);
    // Job 10 succeeded at 1.1 s, and is claimed again at 2 s.
    let a = h.claim(0, 10, 1, 1, S);
    let done = h.complete(0, 10, a, "succeeded", 1_100_000);
    h.claim(1, 10, 1, 2, 2 * S);
    // Job 11 was cancelled at 1.1 s, and is claimed at 2 s.
    h.cancel(11, "cancelled", 1_100_000);
    h.claim(2, 11, 2, 1, 2 * S);
    let report = h.check(&[
        succeeded(10, 1, 2, &[], done, a),
        final_job(11, 2, "cancelled", 1, &[]),
    ]);
    assert_reported(
        &report.duplicated,
        &format!("claimed it after op {done} finished it"),
    );
    assert_reported(&report.duplicated, "claimed it after it was cancelled");
}

#[test]
fn the_checker_reports_a_wrong_release_reason() {
    let mut h = Synthetic::default();
    for (tag, id) in [(1, 10), (2, 11), (3, 12)] {
        h.enqueue(tag, id);
    }
    // Job 10: released twice; the reason must be the second release's.
    let a = h.claim(0, 10, 1, 1, S);
    let first = h.release(0, 10, a, "queued", 1_100_000);
    let b = h.claim(1, 10, 1, 1, 1_200_000);
    let second = h.release(1, 10, b, "queued", 1_300_000);
    let mut job10 = final_job(10, 1, "queued", 0, &[]);
    job10.release_reason = Some(format!("release op {first}"));
    // Job 11: released, but no reason stored.
    let c = h.claim(2, 11, 2, 1, S);
    h.release(2, 11, c, "queued", 1_100_000);
    let job11 = final_job(11, 2, "queued", 0, &[]);
    // Job 12: a reason from an op that never released it.
    let mut job12 = final_job(12, 3, "queued", 0, &[]);
    job12.release_reason = Some("release op 999".into());
    let report = h.check(&[job10, job11, job12]);
    assert_reported(
        &report.state_errors,
        &format!("but op {second} released it later"),
    );
    assert_reported(&report.state_errors, "has no release_reason");
    assert_reported(&report.state_errors, "is not from a release of it");
}

#[test]
fn the_checker_keeps_checking_overlaps_after_an_unknown_settle_that_did_nothing() {
    let mut h = Synthetic::default();
    h.enqueue(1, 10);
    // A's complete at 1.1 s loses its connection; the retry at 1.6 s succeeds and stores its
    // result, so the first one did nothing and A's lease stayed live. B, claimed at 1.3 s,
    // overlaps it.
    let a = h.claim(0, 10, 1, 1, S);
    h.unknown(0, Call::Complete { id: 10, lease: a }, 1_100_000, 1_150_000);
    h.claim(1, 10, 1, 2, 1_300_000);
    let retry = h.complete(0, 10, a, "succeeded", 1_600_000);
    let report = h.check(&[succeeded(10, 1, 2, &[], retry, a)]);
    assert_eq!(report.resolved_unknowns, 1);
    assert_reported(&report.duplicated, "live over");
}

#[test]
fn the_checker_reports_a_claim_that_grants_a_shorter_lease_than_asked() {
    let mut h = Synthetic::default();
    h.enqueue(1, 10);
    // Asked for 1 s, granted (and reported) 0.5 s; B's claim at 1.7 s is within the second A
    // asked for.
    h.claim_with(0, (10, 1, 1), S, 1000, 1_500_000);
    let b = h.claim(1, 10, 1, 2, 1_700_000);
    let done = h.complete(1, 10, b, "succeeded", 1_800_000);
    let job = succeeded(10, 1, 2, &[(1, "lease expired", 1_600_000)], done, b);
    let report = h.check(&[job]);
    assert_reported(
        &report.state_errors,
        "asked for a 1000 ms lease but got lease_until 1500000",
    );
    assert_reported(&report.duplicated, "live over");
}

#[test]
fn the_checker_reports_an_answer_on_a_terminated_backend() {
    let mut h = Synthetic::default();
    h.enqueue(1, 10);
    let a = h.claim(0, 10, 1, 1, S);
    h.terminate(0);
    // Sent on the same connection after pg_terminate_backend returned: it cannot have run.
    let done = h.complete(0, 10, a, "succeeded", 1_100_000);
    let report = h.check(&[succeeded(10, 1, 1, &[], done, a)]);
    assert_reported(
        &report.call_errors,
        "was answered, but its backend 1000 had been terminated",
    );
}

/// Jobs 10, 11 and 12 of group g, each claimed and completed by process `p` at the given
/// server times (claim, complete), in seconds.
fn group_history(runs: [(f64, f64); 3]) -> (Synthetic, Vec<FinalJob>) {
    group_history_enqueued(runs, [0.0001; 3])
}

/// [`group_history`] with each job's enqueue answered at the given server time, in seconds.
fn group_history_enqueued(runs: [(f64, f64); 3], answered: [f64; 3]) -> (Synthetic, Vec<FinalJob>) {
    let mut h = Synthetic::default();
    let mut finals = Vec::new();
    let at = |seconds: f64| (seconds * S as f64) as Micros;
    for (i, (claimed, completed)) in runs.into_iter().enumerate() {
        let id = 10 + i as i64;
        h.enqueue_between(i as u64 + 1, id, 0, at(answered[i]));
        let lease = h.claim(i, id, i as u64 + 1, 1, at(claimed));
        let done = h.complete(i, id, lease, "succeeded", at(completed));
        finals.push(FinalJob {
            group: Some("g".into()),
            ..succeeded(id, i as u64 + 1, 1, &[], done, lease)
        });
    }
    (h, finals)
}

#[test]
fn the_checker_passes_groups_that_keep_their_concurrency_and_order() {
    let (h, finals) = group_history([(1.0, 1.5), (1.6, 1.8), (1.9, 2.0)]);
    assert!(h.check_groups(&finals, 1).is_clean());
    // Two at once is within a concurrency of 2, in any order (job 12 before job 11).
    let (h, finals) = group_history([(1.0, 1.5), (1.6, 1.8), (1.1, 1.4)]);
    let report = h.check_groups(&finals, 2);
    assert!(report.is_clean(), "{:?}", report.groups);
    assert_eq!(report.grouped, (3, 1));
}

#[test]
fn the_checker_reports_a_group_running_more_than_its_concurrency() {
    // Jobs 10 and 11 both hold live leases at 1.3 s.
    let (h, finals) = group_history([(1.0, 1.5), (1.2, 1.4), (1.6, 1.7)]);
    assert_reported(
        &h.check_groups(&finals, 1).groups,
        "jobs [10, 11] held live leases at once",
    );
    // At concurrency 2, three at once.
    let (h, finals) = group_history([(1.0, 1.5), (1.1, 1.5), (1.2, 1.5)]);
    assert_reported(
        &h.check_groups(&finals, 2).groups,
        "jobs [10, 11, 12] held live leases at once",
    );
}

#[test]
fn the_checker_reports_a_group_running_out_of_enqueue_order() {
    // Job 11 runs and finishes before job 10, earlier in the group, is claimed: no overlap,
    // but out of order.
    let (h, finals) = group_history([(2.0, 2.5), (1.0, 1.5), (3.0, 3.5)]);
    assert_reported(
        &h.check_groups(&finals, 1).groups,
        "job 11 was claimed by server time 1000000, before job 10",
    );
}

#[test]
fn the_checker_orders_a_group_by_what_was_committed_when_a_claim_began() {
    // Job 10's enqueue may have committed only after job 11's claim (it answered at 1.2 s):
    // that claim could not see it, so job 11 first is no violation.
    let (h, finals) = group_history_enqueued([(2.0, 2.5), (1.0, 1.5), (3.0, 3.5)], [1.2, 0.1, 0.1]);
    let report = h.check_groups(&finals, 1);
    assert!(report.is_clean(), "{:?}", report.groups);
    // Answered at 0.9 s, before job 11's claim began: it was there to be run first.
    let (h, finals) = group_history_enqueued([(2.0, 2.5), (1.0, 1.5), (3.0, 3.5)], [0.9, 0.1, 0.1]);
    assert_reported(
        &h.check_groups(&finals, 1).groups,
        "job 11 was claimed by server time 1000000, before job 10, earlier in the group and enqueued by 900000",
    );
}

/// A one-job enqueue of `tag` as a call (no key).
fn enqueue_call(tag: u64) -> Call {
    Call::Enqueue {
        tags: vec![tag],
        max_attempts: 3,
        unique: vec![None],
        unique_for: None,
    }
}

/// An answer `outcome` from server time `at` to `at + 100`.
fn outcome(outcome: &str, at: Micros) -> OpResult {
    OpResult::Ok(Reply::Outcome {
        outcome: outcome.into(),
        before: at,
        after: at + 100,
    })
}

/// Ids answered by an enqueue from server time `at` to `at + 100`.
fn ids(ids: &[i64], at: Micros) -> OpResult {
    OpResult::Ok(Reply::Ids {
        ids: ids.to_vec(),
        before: at,
        after: at + 100,
    })
}

#[test]
fn the_checker_passes_prepared_transactions_ended_across_a_crash_and_from_other_sessions() {
    let mut h = Synthetic::default();
    // Job 10: enqueued in a prepared transaction that the resolver (process 12) commits.
    h.prepared(8, "p1", enqueue_call(1), ids(&[10], 0));
    h.finish(12, "p1", true, 200_000);
    // A prepared claim of it at 1 s; the server crashes before its end, which, still prepared
    // after the restart, is committed then (1.3 s).
    let (a, reply) = h.claim_reply((10, 1, 1), S, 1000);
    h.prepared(
        0,
        "w1",
        Call::Claim {
            n: 1,
            lease_ms: 1000,
        },
        reply,
    );
    h.push(11, Call::Crash, OpResult::Ok(Reply::Done));
    h.reconnect_all();
    h.inspect(0, "w1", true, 1_250_000);
    h.finish(0, "w1", true, 1_300_000);
    // A prepared complete (1.4 s) whose ROLLBACK PREPARED lost its connection; the gid is gone
    // afterwards, so it was rolled back; the plain complete at 1.6 s succeeds.
    h.prepared(
        0,
        "w2",
        Call::Complete { id: 10, lease: a },
        outcome("succeeded", 1_400_000),
    );
    h.unknown(
        12,
        Call::Finish {
            gid: "w2".into(),
            commit: false,
        },
        1_450_000,
        1_500_000,
    );
    h.inspect(12, "w2", false, 1_500_000);
    let done = h.complete(0, 10, a, "succeeded", 1_600_000);
    // A prepared enqueue whose connection died before PREPARE took: the gid never showed up.
    h.unknown(
        9,
        Call::Prepared {
            gid: "p2".into(),
            call: Box::new(enqueue_call(2)),
        },
        0,
        2 * S,
    );
    h.inspect(9, "p2", false, 2 * S);

    let report = h.check(&[succeeded(10, 1, 1, &[], done, a)]);
    assert!(report.is_clean(), "a clean history was judged anomalous");
    let counts = report.prepared_counts;
    assert_eq!(
        (
            counts.prepared,
            counts.committed,
            counts.rolled_back,
            counts.never
        ),
        (3, 2, 1, 1)
    );
    assert_eq!(counts.across_restarts, 1, "w1 ended after the crash");
    assert_eq!(counts.settled_by_inspection, 1, "w2's rollback");
}

#[test]
fn the_checker_reports_prepared_transactions_that_do_not_square() {
    let mut h = Synthetic::default();
    h.enqueue(1, 10);
    // w1: a prepared complete that nothing ends.
    let a = h.claim(0, 10, 1, 1, S);
    let w1 = h.prepared(
        0,
        "w1",
        Call::Complete { id: 10, lease: a },
        outcome("succeeded", 1_100_000),
    );
    // w2: ended twice.
    h.prepared(8, "w2", enqueue_call(2), ids(&[11], 0));
    let first = h.finish(12, "w2", true, 200_000);
    let second = h.finish(12, "w2", true, 300_000);
    // w3: seen prepared after its rollback.
    h.prepared(8, "w3", enqueue_call(3), ids(&[12], 0));
    let rollback = h.finish(12, "w3", false, 200_000);
    h.inspect(12, "w3", true, 400_000);
    // w4: left prepared at the end.
    h.prepared(8, "w4", enqueue_call(4), ids(&[13], 0));

    let end = End {
        prepared_left: vec!["w4".into()],
        ..End::default()
    };
    let report = h.check_end(
        &[
            succeeded(10, 1, 1, &[], w1, a),
            final_job(11, 2, "cancelled", 0, &[]),
        ],
        &end,
    );
    assert_reported(
        &report.prepared,
        &format!("gid w1: prepared by op {w1}, and the history never saw it end"),
    );
    assert_reported(
        &report.prepared,
        &format!("gid w2: ended twice, by op {first} and op {second}"),
    );
    assert_reported(
        &report.prepared,
        &format!(
            "gid w3: still prepared at 400000 (op {}), after op {rollback} ended it",
            rollback + 1
        ),
    );
    assert_reported(
        &report.prepared,
        "gid w4 was still prepared after the drain",
    );
    assert!(!report.is_clean());
}

#[test]
fn the_checker_reports_effects_of_rolled_back_prepared_calls_and_holds_a_prepared_claims_job_from_the_claim(
) {
    let mut h = Synthetic::default();
    // Job 10: its prepared enqueue was rolled back, yet the job is stored.
    h.prepared(8, "p1", enqueue_call(1), ids(&[10], 0));
    h.finish(12, "p1", false, 200_000);
    // Job 11: a prepared complete rolled back, yet the job succeeded with its result.
    h.enqueue(2, 11);
    let a = h.claim(0, 11, 2, 1, S);
    let rolled_back = h.prepared(
        0,
        "w1",
        Call::Complete { id: 11, lease: a },
        outcome("succeeded", 1_100_000),
    );
    h.finish(0, "w1", false, 1_200_000);
    // Job 12: claimed at 1 s in a prepared transaction committed at 1.8 s; its lease ran from
    // the claim (the row was locked since), so a claim at 1.5 s is a second holder.
    h.enqueue(3, 12);
    let (_, reply) = h.claim_reply((12, 3, 1), S, 1000);
    h.prepared(
        1,
        "w2",
        Call::Claim {
            n: 1,
            lease_ms: 1000,
        },
        reply,
    );
    h.finish(1, "w2", true, 1_800_000);
    let b = h.claim(2, 12, 3, 2, 1_500_000);
    let done = h.complete(2, 12, b, "succeeded", 1_600_000);

    let report = h.check(&[
        final_job(10, 1, "queued", 0, &[]),
        succeeded(11, 2, 1, &[], rolled_back, a),
        succeeded(12, 3, 2, &[], done, b),
    ]);
    assert_reported(
        &report.unexpected,
        "job 10 carries tag 1, whose enqueue failed (rolled back) or never ran",
    );
    assert_reported(
        &report.state_errors,
        "job 11 is succeeded, but no complete of it answered succeeded",
    );
    assert_reported(&report.duplicated, "live over (1000000, 1999950)");
}

/// Job 10, enqueued at once, taken by a vanished client's claim as `took` tells, then
/// reclaimed (6.3 s) and completed by another worker's claim (6.5 s).
fn vanished_history(took_at: Micros, ended_by: Option<Micros>) -> Report {
    let mut h = Synthetic::default();
    h.enqueue(1, 10);
    h.vanished(
        3,
        500_000,
        Vanish {
            worker: "vanish-3-1".into(),
            pid: 77,
            asleep_at: Some(900_000),
            gone_by: S,
            ended_by,
            took: vec![Took {
                id: 10,
                attempt: 1,
                started_at: took_at,
            }],
        },
    );
    let b = h.claim(1, 10, 1, 2, 6_500_000);
    let done = h.complete(1, 10, b, "succeeded", 6_600_000);
    h.check(&[succeeded(
        10,
        1,
        2,
        &[(1, "lease expired", 6_300_000)],
        done,
        b,
    )])
}

#[test]
fn the_checker_reports_an_attempt_spent_by_a_gone_client() {
    // Taken at 0.95 s, before the socket closed (by 1 s): the client was there.
    let report = vanished_history(950_000, Some(1_300_000));
    assert!(report.is_clean(), "{:?}", report.gone);
    assert_eq!(report.vanished, (1, 1, 1, 1));
    // Taken at 1.2 s, after the client was gone by 1 s.
    let report = vanished_history(1_200_000, Some(1_300_000));
    assert_reported(
        &report.gone,
        "job 10: attempt 1 spent at 1200000 by backend 77 (claim op 1, worker vanish-3-1, a 5000 ms lease), whose client was gone by 1000000",
    );
    assert!(!report.is_clean());
    // A backend still there when the watch ended.
    let report = vanished_history(950_000, None);
    assert_reported(&report.gone, "its backend 77 was still running");
}

#[test]
fn the_checker_reports_unique_keys_held_twice_or_by_nothing() {
    let mut h = Synthetic::default();
    // Job 10 holds k from 0.1 ms; completed (no unique_for) at 1.1 s. An enqueue of k at 2 s
    // answered job 10, which held nothing by then.
    h.enqueue_keyed((1, 10), "k", None, (0, 100));
    let a = h.claim(0, 10, 1, 1, S);
    let done = h.complete(0, 10, a, "succeeded", 1_100_000);
    h.enqueue_keyed((2, 10), "k", None, (2 * S, 2_100_000));
    // Job 11 holds j until its cancel at 3 s, yet job 12 was inserted with j at 2 s.
    h.enqueue_keyed((3, 11), "j", None, (0, 100));
    h.enqueue_keyed((4, 12), "j", None, (2 * S, 2_100_000));
    h.cancel(11, "cancelled", 3 * S);
    h.cancel(12, "cancelled", 4 * S);
    // Job 13 failed for good, and its row still holds m.
    h.enqueue_keyed((5, 13), "m", None, (0, 100));
    let c = h.claim(1, 13, 5, 1, S);
    let fail = h.fail(1, (13, c), false, "failed", 1_100_000);
    let fail_entry = format!("fail op {fail}");

    let keyed = |mut job: FinalJob, key: &str, hold: bool, finished: Micros| {
        job.unique_key = Some(key.into());
        job.unique_hold = hold;
        job.finished_at = Some(finished);
        job
    };
    let finals = [
        keyed(succeeded(10, 1, 1, &[], done, a), "k", false, 1_100_050),
        keyed(final_job(11, 3, "cancelled", 0, &[]), "j", false, 3_000_050),
        keyed(final_job(12, 4, "cancelled", 0, &[]), "j", false, 4_000_050),
        keyed(
            final_job(13, 5, "failed", 1, &[(1, &fail_entry, 1_100_050)]),
            "m",
            true,
            1_100_050,
        ),
    ];
    // After the drain: a probe of k answered job 10 (which holds nothing), one of m inserted
    // its own job (while job 13's row holds m), and group g1's probe job was never claimed.
    let end = End {
        now: Some(10 * S),
        prepared_left: Vec::new(),
        group_probes: vec![("g0".into(), true), ("g1".into(), false)],
        key_probes: vec![
            KeyProbe {
                key: "k".into(),
                before: 9 * S,
                after: 9_100_000,
                holder: Some(10),
            },
            KeyProbe {
                key: "m".into(),
                before: 9 * S,
                after: 9_100_000,
                holder: None,
            },
        ],
    };
    let report = h.check_end(&finals, &end);
    assert_eq!(report.unique_counts, (5, 1));
    assert_reported(
        &report.unique,
        "tag 2 (op 3, key k): answered job 10 over [2000000, 2100000], but that job (succeeded) no longer held the key by 1100100: a key held by nothing",
    );
    assert_reported(
        &report.unique,
        "key j: op 5 inserted job 12 over [2000000, 2100000] while job 11 held the key",
    );
    assert_reported(
        &report.unique,
        "job 13 (failed, key m): unique_hold is true, the rows say it should not hold the key",
    );
    assert_reported(
        &report.unique,
        "key m: a probe enqueue after the drain inserted its own job, but job(s) [13] hold the key",
    );
    assert_reported(
        &report.stuck,
        "key k: a probe enqueue after the drain was answered by job 10",
    );
    assert_reported(
        &report.stuck,
        "group g1: a job enqueued into it after the drain",
    );
    assert!(!report.stuck.iter().any(|line| line.contains("group g0")));
}
