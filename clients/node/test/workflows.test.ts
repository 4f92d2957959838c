// Workflows against a real server, directly and through PgBouncer: jobs enqueued `after`
// others (fan-out and fan-in, a batch after a job, a failed parent), results() and wait()
// (woken by the commit that finishes the last job, a timeout, REPEATABLE READ refused, no
// snapshot held while asleep), and a handler that awaits a signal: sent after the await or
// before it (no lost wake-up), in the sender's own transaction (a rolled-back one wakes
// nothing), timed out, on a cancelled job, refused; the payload reaches the next run and the
// attempt is not spent.
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';

import type pg from 'pg';

import {
  enqueue,
  enqueueBatch,
  PermanentError,
  results,
  signal,
  STATES,
  wait,
  type AwaitOutcome,
  type Job,
  type JobResult,
} from '../src/index.js';
import { closePools, eventually, jobRow, newQueue, pool, recordingWorker, sleep, url, type Via } from './helpers.js';

const db = pool(); // set-up and checks
after(closePools);

/** The wait backends of application `name` asleep in jobs_wait, with their backend_xmin. */
async function sleepingWaits(name: string): Promise<Array<{ xmin: string | null; query: string }>> {
  const { rows } = await db.query(
    `SELECT backend_xmin::text AS xmin, query FROM pg_stat_activity
      WHERE application_name = $1 AND state = 'active' AND wait_event_type = 'Extension'`,
    [name],
  );
  return rows;
}

/** Whether `promise` has settled (it is given a turn of the event loop to do so). */
async function settled(promise: Promise<unknown>): Promise<boolean> {
  let done = false;
  promise.then(
    () => (done = true),
    () => (done = true),
  );
  await sleep(0);
  return done;
}

for (const via of ['direct', 'bouncer'] as Via[]) {
  describe(`dependencies (${via})`, () => {
    const workers = pool(url('worker', via));
    const producer = pool(url('producer', via));

    it('fan-out and fan-in: a merge after its parts runs once they all succeeded and reads their results', async () => {
      const queue = await newQueue(db);
      const parts = await enqueueBatch(producer, queue, [1, 2, 3].map((part) => ({ part })), { kind: 'part' });
      const partIds = parts.map((p) => p.id);
      const merge = await enqueue(producer, queue, { parts: partIds }, { kind: 'merge', after: partIds });
      // A batch after the merge: every job of it waits for the same parent.
      const reports = await enqueueBatch(producer, queue, [{ to: 'ada' }, { to: 'grace' }], { kind: 'report', after: [merge] });
      assert.deepEqual(
        (await results(producer, [merge, ...reports.map((r) => r.id)])).map((r) => r.state),
        ['waiting', 'waiting', 'waiting'],
      );
      const { worker } = recordingWorker({
        pool: workers,
        queue,
        handlers: {
          part: (job) => ({ rows: 100 * job.payload.part }),
          merge: async (job) => {
            const read = await results(workers, job.payload.parts);
            return { rows: read.reduce((sum, r) => sum + r.result.rows, 0), states: read.map((r) => r.state) };
          },
          report: async (job) => ({ to: job.payload.to, rows: (await results(workers, [merge]))[0].result.rows }),
        },
      });
      const done = await wait(producer, [merge, ...reports.map((r) => r.id)], 30_000);
      await worker.stop();
      assert.deepEqual(done.map((r) => [r.id, r.state]), [[merge, 'succeeded'], ...reports.map((r) => [r.id, 'succeeded'])]);
      assert.deepEqual(done[0].result, { rows: 600, states: ['succeeded', 'succeeded', 'succeeded'] });
      assert.deepEqual(done.slice(1).map((r) => r.result), [{ to: 'ada', rows: 600 }, { to: 'grace', rows: 600 }]);
      assert.ok(done.every((r) => r.finishedAt instanceof Date));
      assert.deepEqual(done.map((r) => r.errors), [[], [], []]);
      // Each child ran only once its parents had succeeded: the merge read the parts as
      // succeeded (above), each report read the merge's result.
      assert.deepEqual((await jobRow(db, merge)).after.map(String), partIds);
    });

    it('a parent that fails for good cancels its dependents, the error naming it', async () => {
      const queue = await newQueue(db);
      const parent = await enqueue(producer, queue, {}, { kind: 'broken' });
      const child = await enqueue(producer, queue, {}, { kind: 'never', after: [parent] });
      const grandchild = await enqueue(producer, queue, {}, { kind: 'never', after: [BigInt(child)] });
      const ran: string[] = [];
      const { worker } = recordingWorker({
        pool: workers,
        queue,
        handlers: {
          broken: () => {
            throw new PermanentError('the file is corrupt');
          },
          never: (job) => ran.push(job.id),
        },
      });
      const done = await wait(producer, [parent, child, grandchild], 30_000);
      await worker.stop();
      assert.deepEqual(done.map((r) => r.state), ['failed', 'cancelled', 'cancelled']);
      assert.match(done[1].errors![0].error, new RegExp(`dependency ${parent} failed`));
      assert.match(done[2].errors![0].error, new RegExp(`dependency ${child} cancelled`));
      assert.deepEqual(ran, []);
    });
  });

  describe(`results and wait (${via})`, () => {
    const producer = pool(url('producer', via));

    it('results() reads each job in the order given, with no row for a job that does not exist', async () => {
      const queue = await newQueue(db);
      const a = await enqueue(producer, queue, {});
      const b = await enqueue(producer, queue, {});
      const [claimed] = (await db.query('SELECT id, lease FROM jobs_claim($1) WHERE id = $2', [queue, a])).rows;
      await db.query("SELECT jobs_complete($1, $2, '{\"ok\": true}')", [claimed.id, claimed.lease]);
      const read: JobResult[] = await results(producer, [b, '999999999999', Number(a)]);
      assert.deepEqual(read.map((r) => [r.id, r.state, r.result, r.finishedAt === null]), [
        [b, 'queued', null, true],
        [a, 'succeeded', { ok: true }, false],
      ]);
      assert.ok(read.every((r) => STATES.includes(r.state)));
    });

    it('wait() is woken by the commit that finishes the last job, holding no snapshot while it sleeps', { timeout: 30_000 }, async () => {
      const queue = await newQueue(db);
      const ids = [await enqueue(producer, queue, {}), await enqueue(producer, queue, {})];
      const held = (await db.query('SELECT id, lease FROM jobs_claim($1, n => 2)', [queue])).rows;
      const name = `node-wait-${via}`;
      const waiter = pool(`${url('producer', via)}?application_name=${name}`, 1);
      const waiting = wait(waiter, ids, 20_000);
      await eventually('the wait to sleep', async () => (await sleepingWaits(name)).length > 0);
      for (let i = 0; i < 10; i++) {
        for (const w of await sleepingWaits(name)) {
          assert.equal(w.xmin, null, `the waiting jobs_wait advertises xmin ${w.xmin}`);
          assert.match(w.query, /^SELECT \* FROM jobs_wait\(/);
        }
        await sleep(20);
      }
      await db.query("SELECT jobs_complete($1, $2, '\"first\"')", [held[0].id, held[0].lease]);
      const settler = await db.connect();
      try {
        await settler.query('BEGIN');
        await settler.query('SELECT jobs_fail($1, $2, $3, retry => false)', [held[1].id, held[1].lease, 'no luck']);
        // Both jobs are finished in that transaction, but it has not committed.
        await eventually('the wait to sleep on', async () => (await sleepingWaits(name)).length > 0);
        assert.equal(await settled(waiting), false);
        await settler.query('COMMIT');
      } finally {
        settler.release();
      }
      const done = await waiting;
      assert.deepEqual(done.map((r) => [r.id, r.state, r.result]), [
        [ids[0], 'succeeded', 'first'],
        [ids[1], 'failed', null],
      ]);
      assert.match(done[1].errors![0].error, /no luck/);
    });

    it('wait() returns at its timeout with the jobs as they are', async () => {
      const queue = await newQueue(db);
      const id = await enqueue(producer, queue, {});
      const done = await wait(producer, [id], 300);
      assert.deepEqual(done.map((r) => [r.id, r.state, r.finishedAt]), [[id, 'queued', null]]);
    });
  });
}

describe('wait() refusals', () => {
  const producer = pool(url('producer'));

  it('refuses a REPEATABLE READ transaction, whose snapshot would never see the jobs finish', async () => {
    const queue = await newQueue(db);
    const id = await enqueue(producer, queue, {});
    const client = await producer.connect();
    try {
      await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
      await assert.rejects(wait(client, [id], 1_000), (error: any) => error.code === '25000');
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
  });

  it('refuses a negative timeout before sending anything', async () => {
    await assert.rejects(wait(producer, ['1'], -1), RangeError);
  });
});

/**
 * A worker whose handler awaits `signalOf(job)` on the job's first run (recording what
 * awaitSignal answered) and on a run woken by the signal returns what it carried.
 */
function awaitingWorker(workers: pg.Pool, queue: string, signalOf: (job: Job) => string, timeoutMs?: number) {
  const answers: AwaitOutcome[] = [];
  const runs: Job[] = [];
  // Whether the run's AbortSignal had fired once awaitSignal answered (the run has ended).
  const aborted: boolean[] = [];
  const recorded = recordingWorker({
    pool: workers,
    queue,
    handlers: {
      order: async (job, ctx) => {
        runs.push(job);
        if (!job.signal) {
          answers.push(await ctx.awaitSignal(signalOf(job), timeoutMs === undefined ? undefined : { timeoutMs }));
          aborted.push(ctx.signal.aborted);
          return 'ignored: the run has ended';
        }
        return { woken: job.signal };
      },
    },
  });
  return { ...recorded, answers, runs, aborted };
}

for (const via of ['direct', 'bouncer'] as Via[]) {
  describe(`a handler that awaits a signal (${via})`, () => {
    const workers = pool(url('worker', via));
    const producer = pool(url('producer', via));

    it('signalled after the await, in the sender\'s transaction: the next run has the payload and the attempt is not spent', async () => {
      const queue = await newQueue(db);
      const id = await enqueue(producer, queue, { order: 1042 }, { kind: 'order' });
      const name = `payment:${via}:${id}`;
      const { worker, events, answers, runs, aborted } = awaitingWorker(workers, queue, () => name, 60_000);
      await eventually('the await', () => events.some(([e]) => e === 'awaiting') && aborted.length > 0);
      assert.deepEqual(aborted, [true], 'the run has ended: its AbortSignal fired');
      let row = await jobRow(db, id);
      assert.deepEqual([row.state, row.attempt, row.lease], ['waiting', 0, null]);
      assert.deepEqual(answers, ['waiting']);
      const awaiting = events.find(([e]) => e === 'awaiting')![1];
      assert.deepEqual([awaiting.outcome, awaiting.signal, awaiting.job.id], ['waiting', name, id]);
      assert.equal(worker.active, 0, 'the awaiting job holds no slot');

      // A webhook's handler: its own write and the signal in one transaction. Rolled back first.
      const client = await producer.connect();
      try {
        await client.query('BEGIN');
        assert.equal(await signal(client, name, { amount: 1 }), 1);
        await client.query('ROLLBACK');
        assert.equal((await jobRow(db, id)).state, 'waiting', 'a rolled-back signal wakes nothing');
        await client.query('BEGIN');
        assert.equal(await signal(client, name, { amount: 59.9, provider: 'acmepay' }, { keepMs: 60_000 }), 1);
        assert.equal((await jobRow(db, id)).state, 'waiting', 'the signal acts at its commit');
        await client.query('COMMIT');
      } finally {
        client.release();
      }
      const [done] = await wait(producer, [id], 20_000);
      await worker.stop();
      assert.equal(done.state, 'succeeded');
      assert.deepEqual(done.result, { woken: { name, payload: { amount: 59.9, provider: 'acmepay' }, timedOut: false } });
      assert.deepEqual(runs.map((job) => job.attempt), [1, 1], 'the await gave the attempt back');
      assert.deepEqual(runs[1].signal, { name, payload: { amount: 59.9, provider: 'acmepay' }, timedOut: false });
      row = await jobRow(db, id);
      assert.equal(row.attempt, 1);
      assert.deepEqual(
        events.map(([e]) => e),
        ['picked', 'awaiting', 'picked', 'completed', 'stopped'],
      );
    });

    it('signalled before the await: the await answers queued at once and the job runs again with the payload', async () => {
      const queue = await newQueue(db);
      const name = `early:${via}:${queue}`;
      assert.equal(await signal(producer, name, { fast: true }), 0, 'nobody awaits it yet: recorded for later');
      const id = await enqueue(producer, queue, {}, { kind: 'order' });
      const { worker, events, answers, runs } = awaitingWorker(workers, queue, () => name);
      const [done] = await wait(producer, [id], 20_000);
      await worker.stop();
      assert.deepEqual(answers, ['queued']);
      assert.equal(events.find(([e]) => e === 'awaiting')![1].outcome, 'queued');
      assert.equal(done.state, 'succeeded');
      assert.deepEqual(runs[1].signal, { name, payload: { fast: true }, timedOut: false });
      assert.deepEqual(runs.map((job) => job.attempt), [1, 1]);
    });
  });
}

describe('a handler that awaits a signal: timeouts, cancellation, refusals', () => {
  const workers = pool(url('worker'));
  const producer = pool(url('producer'));

  it('an await that times out runs the job again, flagged timed out, without a payload', async () => {
    const queue = await newQueue(db);
    const id = await enqueue(producer, queue, {}, { kind: 'order' });
    // The background worker fires timeouts on its tick (200 ms in the test cluster).
    const { worker, answers, runs } = awaitingWorker(workers, queue, (job) => `never-sent:${job.id}`, 300);
    const [done] = await wait(producer, [id], 20_000);
    await worker.stop();
    assert.deepEqual(answers, ['waiting']);
    assert.equal(done.state, 'succeeded');
    assert.deepEqual(runs[1].signal, { name: `never-sent:${id}`, payload: null, timedOut: true });
    assert.deepEqual(runs.map((job) => job.attempt), [1, 1]);
  });

  it('awaiting a job cancelled meanwhile answers cancelled and records nothing', async () => {
    const queue = await newQueue(db);
    const id = await enqueue(producer, queue, {}, { kind: 'order' });
    let cancelled!: () => void;
    const cancel = new Promise<void>((resolve) => (cancelled = resolve));
    const answers: AwaitOutcome[] = [];
    const { worker, events } = recordingWorker({
      pool: workers,
      queue,
      handlers: {
        order: async (job, ctx) => {
          await cancel;
          answers.push(await ctx.awaitSignal(`cancelled:${job.id}`));
        },
      },
    });
    await eventually('the job to run', async () => (await jobRow(db, id)).state === 'running');
    await db.query('SELECT jobs_cancel($1)', [id]);
    cancelled();
    await eventually('the answer', () => answers.length > 0);
    await worker.stop();
    assert.deepEqual(answers, ['cancelled']);
    const lost = events.find(([e]) => e === 'lost')![1];
    assert.deepEqual([lost.outcome, lost.during], ['cancelled', 'settle']);
    assert.ok(!events.some(([e]) => e === 'awaiting'));
    assert.equal((await jobRow(db, id)).state, 'cancelled');
  });

  it('an await the server refuses rejects in the handler and fails the attempt with its error', async () => {
    const queue = await newQueue(db, 'max_attempts => 1');
    const id = await enqueue(producer, queue, {}, { kind: 'order' });
    const errors: unknown[] = [];
    const { worker, events } = recordingWorker({
      pool: workers,
      queue,
      handlers: {
        order: async (_job, ctx) => {
          try {
            await ctx.awaitSignal('x'.repeat(256));
          } catch (error) {
            errors.push(error);
            throw error;
          }
        },
      },
    });
    const [done] = await wait(producer, [id], 20_000);
    await worker.stop();
    assert.equal(done.state, 'failed');
    assert.equal((errors[0] as any).code, '22023');
    assert.match(done.errors![0].error, /SQLSTATE 22023/);
    assert.deepEqual(events.filter(([e]) => e === 'failed').map(([, e]) => e.outcome), ['failed']);
  });
});
