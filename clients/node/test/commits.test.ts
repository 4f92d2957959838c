// One commit per job: a steady worker completes each job in the same call, and the same
// transaction, that claims its next one (jobs_complete_and_claim). Counted by the server's
// committed transactions in a database of its own; each settle's outcome becomes the same
// event as before; a job that finishes while the claim waits, or while the claim loop is held
// up, is completed on its own at once; `oneCommitPerJob: false` keeps the separate calls.
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';

import pg from 'pg';

import { enqueue } from '../src/index.js';
import {
  calls,
  closePools,
  commitsOf,
  DSN,
  eventually,
  jobRow,
  newQueue,
  pool,
  recordingWorker,
  spyPool,
  url,
  withOwnDatabase,
} from './helpers.js';

const db = pool();
const producer = pool(url('producer'));
after(closePools);

const JOBS = 200;

/** Gates a handler waits on, by job id: the test opens each when the job should finish. */
function gates() {
  const open = new Map<string, () => void>();
  const waiting = new Map<string, Promise<void>>();
  const gate = (id: string) => {
    if (!waiting.has(id)) waiting.set(id, new Promise<void>((resolve) => open.set(id, resolve)));
    return waiting.get(id)!;
  };
  return {
    wait: gate,
    open: (id: string) => {
      void gate(id);
      open.get(id)!();
    },
  };
}

/**
 * A worker of concurrency 1 with a no-op handler burns down JOBS queued jobs in a database of
 * its own: the transactions it committed there, the statements it sent and its events.
 */
async function burnDown(oneCommitPerJob: boolean) {
  const name = `pgjobs_commits_node_${process.pid}`;
  return withOwnDatabase(name, async (dsn) => {
    const setup = new pg.Client({ connectionString: dsn('admin') });
    await setup.connect();
    await setup.query("SELECT jobs_create_queue('steady')");
    await setup.query(
      "SELECT count(*) FROM jobs_enqueue_batch('steady', (SELECT array_agg(jsonb_build_object('n', i)) FROM generate_series(1, $1::int) AS i))",
      [JOBS],
    );
    await setup.end();
    const before = await commitsOf(name);
    const { pool: workers, sent } = spyPool(dsn('worker'), 4);
    const { worker, events } = recordingWorker({
      pool: workers,
      queue: 'steady',
      concurrency: 1,
      oneCommitPerJob,
      handlers: { default: () => undefined },
    });
    await eventually('every job to complete', () => events.filter(([e]) => e === 'completed').length === JOBS, 120_000);
    await worker.stop();
    await workers.end();
    const commits = (await commitsOf(name)) - before;
    return { commits, sent, events };
  });
}

describe('one commit per job', () => {
  it('a steady worker commits once per job: each completion rides on the next claim', { timeout: 180_000 }, async (t) => {
    const { commits, sent, events } = await burnDown(true);
    t.diagnostic(`${commits} commits for ${JOBS} jobs`);
    // A waiting claim for the first job, one jobs_complete_and_claim per job after it (the
    // last one claims nothing), the queue's lease read; autovacuum may add a few.
    assert.ok(commits >= JOBS, `${commits} commits for ${JOBS} jobs`);
    assert.ok(commits <= JOBS + JOBS / 10 + 10, `${commits} commits for ${JOBS} jobs: not one per job`);
    assert.ok(calls(sent, 'jobs_complete_and_claim') >= JOBS - 5, `${calls(sent, 'jobs_complete_and_claim')} combined calls`);
    assert.deepEqual(new Set(events.map(([e]) => e)), new Set(['picked', 'completed', 'stopped']));
  });

  it('with oneCommitPerJob: false the worker completes and claims in separate calls', { timeout: 180_000 }, async (t) => {
    const { commits, sent, events } = await burnDown(false);
    t.diagnostic(`${commits} commits for ${JOBS} jobs`);
    assert.equal(calls(sent, 'jobs_complete_and_claim'), 0);
    // A claim per job, and a completion per job or two (jobs that finish while the previous
    // completion is on its way go together): above what one commit per job allows.
    assert.ok(calls(sent, 'jobs_complete_batch') >= JOBS / 4);
    assert.ok(commits > JOBS + JOBS / 10 + 10, `${commits} commits for ${JOBS} jobs: a claim and a completion each`);
    assert.deepEqual(new Set(events.map(([e]) => e)), new Set(['picked', 'completed', 'stopped']));
  });

  it("each settle's outcome gives its event: cancelled, lost, succeeded", { timeout: 60_000 }, async () => {
    const queue = await newQueue(db, "lease => '1 minute'");
    const a = await enqueue(producer, queue, { n: 'a' });
    const b = await enqueue(producer, queue, { n: 'b' });
    const c = await enqueue(producer, queue, { n: 'c' });
    const gate = gates();
    const { pool: workers, sent } = spyPool(url('worker'));
    const { worker, events } = recordingWorker({
      pool: workers,
      queue,
      concurrency: 1,
      handlers: { default: async (job) => (await gate.wait(job.id), { done: job.payload.n }) },
    });
    const running = (id: string) => eventually(`job ${id} to run`, async () => (await jobRow(db, id)).state === 'running');
    // Cancelled while its handler runs: the completion answers cancelled.
    await running(a);
    assert.equal((await db.query('SELECT jobs_cancel($1) AS s', [a])).rows[0].s, 'cancelled');
    gate.open(a);
    // Its lease cleared by a retry (due in an hour): the completion answers lost.
    await running(b);
    await db.query('SELECT jobs_cancel($1)', [b]);
    await db.query("SELECT jobs_retry($1, now() + interval '1 hour')", [b]);
    gate.open(b);
    await running(c);
    gate.open(c);
    await eventually('c to succeed', async () => (await jobRow(db, c)).state === 'succeeded');
    await worker.stop();

    const seen = events.map(([e, event]) => [e, event.job?.id ?? null, event.outcome ?? null, event.during ?? null]);
    assert.deepEqual(seen, [
      ['picked', a, null, null],
      ['lost', a, 'cancelled', 'settle'],
      ['picked', b, null, null],
      ['lost', b, 'lost', 'settle'],
      ['picked', c, null, null],
      ['completed', c, 'succeeded', null],
      ['stopped', null, null, null],
    ]);
    assert.deepEqual(events[5][1].result, { done: 'c' });
    // Every completion went with a claim; none on its own.
    assert.equal(calls(sent, 'jobs_complete_and_claim'), 3);
    assert.equal(calls(sent, 'jobs_complete') + calls(sent, 'jobs_complete_batch'), 0);
    const rows = await Promise.all([a, b, c].map((id) => jobRow(db, id)));
    assert.deepEqual(rows.map((r) => [r.state, r.result]), [['cancelled', null], ['queued', null], ['succeeded', { done: 'c' }]]);
  });

  it('a job that finishes while the claim waits is completed at once, on its own', { timeout: 60_000 }, async () => {
    const queue = await newQueue(db, "lease => '1 minute'");
    const id = await enqueue(producer, queue, {});
    const gate = gates();
    const { pool: workers, sent } = spyPool(`${url('worker')}?application_name=waits-${process.pid}`);
    const { worker, events } = recordingWorker({
      pool: workers,
      queue,
      concurrency: 2,
      waitMs: 30_000,
      handlers: { default: async (job) => (await gate.wait(job.id), 'done') },
    });
    await eventually('the job to run', async () => (await jobRow(db, id)).state === 'running');
    // The free slot's claim waits in the server for 30 s.
    await eventually('a claim to wait', async () => {
      const { rows } = await db.query(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND state = 'active' AND query LIKE '%jobs_claim(%'`,
        [`waits-${process.pid}`],
      );
      return rows[0].n === 1;
    });
    gate.open(id);
    // Well before the wait ends (its eventually gives up after 10 s).
    await eventually('the job to succeed', async () => (await jobRow(db, id)).state === 'succeeded');
    assert.equal(calls(sent, 'jobs_complete'), 1);
    assert.equal(calls(sent, 'jobs_complete_and_claim'), 0);
    await worker.stop();
    assert.deepEqual(events.map(([e]) => e), ['picked', 'completed', 'stopped']);
  });

  it('a job that finishes while the claim loop is held up is completed on its own within a bound', { timeout: 60_000 }, async () => {
    const queue = await newQueue(db, "lease => '1 minute'");
    const x = await enqueue(producer, queue, { n: 'x' });
    const y = await enqueue(producer, queue, { n: 'y' });
    const gate = gates();
    const { pool: workers, sent } = spyPool(url('worker'));
    const { worker, events } = recordingWorker({
      pool: workers,
      queue,
      concurrency: 2,
      handlers: { default: async (job) => (await gate.wait(job.id), undefined) },
    });
    await eventually('both jobs to run', async () => (await jobRow(db, x)).state === 'running' && (await jobRow(db, y)).state === 'running');
    // x's row locked: the jobs_complete_and_claim completing x waits for the lock.
    const locker = new pg.Client({ connectionString: DSN() });
    await locker.connect();
    try {
      await locker.query('BEGIN');
      await locker.query('SELECT 1 FROM jobs.job WHERE id = $1 FOR UPDATE', [x]);
      gate.open(x);
      await eventually('the combined call to wait for the lock', () => calls(sent, 'jobs_complete_and_claim') === 1);
      gate.open(y);
      // y does not wait for x's call: it is completed in a call of its own.
      await eventually('y to succeed', async () => (await jobRow(db, y)).state === 'succeeded');
      assert.equal((await jobRow(db, x)).state, 'running');
      assert.equal(calls(sent, 'jobs_complete_batch'), 1);
    } finally {
      await locker.query('ROLLBACK');
      await locker.end();
    }
    await eventually('x to succeed', async () => (await jobRow(db, x)).state === 'succeeded');
    await worker.stop();
    assert.deepEqual(events.filter(([e]) => e === 'completed').map(([, event]) => event.job.id).sort(), [x, y].sort());
  });

  it('stop() does not cancel a jobs_complete_and_claim: it waits for its completions', { timeout: 60_000 }, async () => {
    const queue = await newQueue(db, "lease => '1 minute'");
    const x = await enqueue(producer, queue, { n: 'x' });
    const gate = gates();
    const app = `held-${process.pid}`;
    const { pool: workers, sent } = spyPool(`${url('worker')}?application_name=${app}`);
    const { worker, events } = recordingWorker({
      pool: workers,
      queue,
      concurrency: 1,
      handlers: { default: async (job) => (await gate.wait(job.id), 'kept') },
    });
    await eventually('x to run', async () => (await jobRow(db, x)).state === 'running');
    const locker = new pg.Client({ connectionString: DSN() });
    await locker.connect();
    let stopped: Promise<void>;
    try {
      await locker.query('BEGIN');
      await locker.query('SELECT 1 FROM jobs.job WHERE id = $1 FOR UPDATE', [x]);
      gate.open(x);
      await eventually('the combined call to wait for the lock', () => calls(sent, 'jobs_complete_and_claim') === 1);
      stopped = worker.stop();
      // Past several of the stop's cancel rounds (every 200 ms): the call still waits.
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      const { rows } = await db.query(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND state = 'active' AND query LIKE '%jobs_complete_and_claim(%'`,
        [app],
      );
      assert.equal(rows[0].n, 1);
    } finally {
      await locker.query('ROLLBACK');
      await locker.end();
    }
    await stopped!;
    assert.equal((await jobRow(db, x)).state, 'succeeded');
    assert.equal((await jobRow(db, x)).result, 'kept');
    assert.deepEqual(events.map(([e]) => e), ['picked', 'completed', 'stopped']);
  });

  it('refuses a oneCommitPerJob that is not a boolean', () => {
    assert.throws(
      () => recordingWorker({ pool: db, queue: 'any', handlers: {}, oneCommitPerJob: 'yes' as any }),
      /oneCommitPerJob must be true or false, not "yes"/,
    );
  });
});
