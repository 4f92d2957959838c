// The worker against a real server: every outcome, cancellation, lost leases, shutdown with
// jobs in flight, handlers that never resolve, and the producer functions.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, describe, it } from 'node:test';

import type pg from 'pg';

import {
  enqueue,
  enqueueBatch,
  JobTimeoutError,
  PermanentError,
  results,
  signal,
  UnknownKindError,
  wait,
  Worker,
  type Job,
} from '../src/index.js';
import { closePools, eventually, jobRow, newQueue, pool, recordingWorker, sleep, url } from './helpers.js';

const db = pool(); // set-up and checks
const workers = pool(url('worker'));
const producer = pool(url('producer'));
after(closePools);

/** Claims one job of `queue` as worker 'rescuer' from another process (psql), waiting up to 10 s. */
function rescue(queue: string): Promise<{ id: string; lease: string }> {
  return new Promise((resolve, reject) => {
    const psql = spawn(`${process.env.PG_JOBS_PG_BIN}/psql`, [
      '-X', '-At', '-F', ' ', '-d', url('worker'), '-c',
      `SELECT id, lease FROM jobs_claim('${queue}', worker => 'rescuer', lease => '1 minute', wait => '10 seconds')`,
    ]);
    let out = '';
    psql.stdout.on('data', (chunk) => (out += chunk));
    psql.on('error', reject);
    psql.on('close', (code) => {
      const [id, lease] = out.trim().split(' ');
      if (code === 0 && id && lease) resolve({ id, lease });
      else reject(new Error(`the rescuing claim got nothing (psql exit ${code}, output ${JSON.stringify(out)})`));
    });
  });
}

describe('outcomes', () => {
  it('a returned value completes the job and becomes its result', async () => {
    const queue = await newQueue(db);
    const id = await enqueue(producer, queue, { to: 'ada' }, { kind: 'mail', headers: { traceparent: 't-1' } });
    const seen: Job[] = [];
    const { worker, events } = recordingWorker({
      pool: workers,
      queue,
      name: 'node-outcomes-1',
      handlers: { mail: (job) => (seen.push(job), { sentTo: job.payload.to }) },
    });
    const row = await eventually('the job to succeed', async () => {
      const r = await jobRow(db, id);
      return r.state === 'succeeded' && r;
    });
    await worker.stop();
    assert.deepEqual(row.result, { sentTo: 'ada' });
    assert.equal(row.worker, 'node-outcomes-1');
    assert.equal(seen.length, 1);
    assert.equal(seen[0].id, id);
    assert.equal(typeof seen[0].id, 'string');
    assert.equal(seen[0].kind, 'mail');
    assert.equal(seen[0].attempt, 1);
    assert.deepEqual(seen[0].headers, { traceparent: 't-1' });
    assert.deepEqual(events.map(([name]) => name), ['picked', 'completed', 'stopped']);
    assert.equal(events[1][1].job.attempt, 1);
    assert.ok(events[1][1].durationMs >= 0);
  });

  it('a thrown error fails the attempt and the queue retries it after its backoff', async () => {
    const queue = await newQueue(db, "backoff_base => '200 milliseconds', jitter => 0");
    const id = await enqueue(producer, queue, {});
    const attempts: number[] = [];
    const { worker, events } = recordingWorker({
      pool: workers,
      queue,
      handlers: {
        default: (job) => {
          attempts.push(job.attempt);
          if (job.attempt === 1) throw new Error('smtp timeout');
          return 'second time lucky';
        },
      },
    });
    const row = await eventually('the retry to succeed', async () => {
      const r = await jobRow(db, id);
      return r.state === 'succeeded' && r;
    });
    await worker.stop();
    assert.deepEqual(attempts, [1, 2]);
    assert.equal(row.attempt, 2);
    assert.equal(row.errors.length, 1);
    assert.match(row.errors[0].error, /smtp timeout/);
    const failed = events.find(([name]) => name === 'failed')![1];
    assert.equal(failed.outcome, 'queued');
    assert.equal(failed.permanent, false);
    assert.equal(failed.job.attempt, 1);
    // The retry came due after the backoff (measured on the server's clock).
    const { rows } = await db.query(
      `SELECT started_at - (errors -> 0 ->> 'at')::timestamptz >= interval '200 milliseconds' AS waited FROM jobs.job WHERE id = $1`,
      [id],
    );
    assert.equal(rows[0].waited, true);
  });

  it('a PermanentError fails the job at once, with attempts left', async () => {
    const queue = await newQueue(db);
    const id = await enqueue(producer, queue, {});
    const { worker, events } = recordingWorker({
      pool: workers,
      queue,
      handlers: {
        default: () => {
          throw new PermanentError('mailbox does not exist');
        },
      },
    });
    const row = await eventually('the job to fail', async () => {
      const r = await jobRow(db, id);
      return r.state === 'failed' && r;
    });
    await worker.stop();
    assert.equal(row.attempt, 1);
    assert.equal(row.max_attempts, 5);
    assert.match(row.errors[0].error, /PermanentError: mailbox does not exist/);
    const failed = events.find(([name]) => name === 'failed')![1];
    assert.equal(failed.outcome, 'failed');
    assert.equal(failed.permanent, true);
  });

  it('a job its handler does not accept fails at once and the handler never runs', async () => {
    const queue = await newQueue(db);
    const good = await enqueue(producer, queue, { to: 'ada' });
    const bad = await enqueue(producer, queue, { nobody: true });
    let ran = 0;
    const { worker } = recordingWorker({
      pool: workers,
      queue,
      handlers: {
        default: {
          accepts: (job) => typeof job.payload?.to === 'string',
          run: () => {
            ran++;
          },
        },
      },
    });
    await eventually('both jobs to finish', async () => {
      const [a, b] = [await jobRow(db, good), await jobRow(db, bad)];
      return a.state === 'succeeded' && b.state === 'failed';
    });
    await worker.stop();
    assert.equal(ran, 1);
    const row = await jobRow(db, bad);
    assert.equal(row.attempt, 1);
    assert.match(row.errors[0].error, /does not accept this job/);
  });

  it('a kind without a handler is released with a delay, attempt given back', async () => {
    const queue = await newQueue(db);
    const id = await enqueue(producer, queue, {}, { kind: 'from-the-next-deploy' });
    const { worker, events } = recordingWorker({ pool: workers, queue, handlers: {}, unknownKindDelayMs: 60_000 });
    await eventually('the release', () => events.some(([name]) => name === 'released'));
    await worker.stop();
    const { rows } = await db.query(
      `SELECT state::text, attempt, release_reason, lease_until,
              run_at - now() BETWEEN interval '50 seconds' AND interval '61 seconds' AS delayed
         FROM jobs.job WHERE id = $1`,
      [id],
    );
    assert.deepEqual(rows[0], {
      state: 'queued',
      attempt: 0,
      release_reason: 'no handler for kind "from-the-next-deploy"',
      lease_until: null,
      delayed: true,
    });
  });

  it('a kind without a handler fails once the job is older than unknownKindMaxAgeMs, spending its attempts with backoff', { timeout: 30_000 }, async () => {
    const queue = await newQueue(db, "max_attempts => 3, backoff_base => '100 milliseconds', jitter => 0");
    const { worker, events } = recordingWorker({
      pool: workers,
      queue,
      name: 'node-poison',
      handlers: { mail: () => 'sent', sms: () => 'sent' },
      unknownKindDelayMs: 100,
      unknownKindMaxAgeMs: 1_500,
    });
    await eventually('the claim to wait', async () => {
      const { rows } = await db.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE 'SELECT * FROM jobs_claim%' AND wait_event_type = 'Extension'`);
      return rows[0].n > 0;
    });
    const id = await enqueue(producer, queue, {}, { kind: 'poison' });
    const row = await eventually('the job to fail for good', async () => {
      const r = await jobRow(db, id);
      return r.state === 'failed' && r;
    });
    await worker.stop();
    const mine = events.filter(([, e]) => e.job?.id === id).map(([name, e]) => (name === 'failed' ? `failed:${e.outcome}` : name));
    const released = mine.filter((name) => name === 'released').length;
    // Released while young (the attempt given back each time), then failed three times.
    assert.ok(released >= 1, `never released: ${mine.join()}`);
    assert.deepEqual(mine.filter((name) => name !== 'picked'), [
      ...Array(released).fill('released'),
      'failed:queued',
      'failed:queued',
      'failed:failed',
    ]);
    assert.equal(row.attempt, 3);
    assert.equal(row.errors.length, 3);
    for (const entry of row.errors) {
      assert.match(
        entry.error,
        /^UnknownKindError: no handler for kind "poison" in worker node-poison, which handles "mail", "sms"; the job is \d+ s old, past unknownKindMaxAgeMs \(1500 ms\)/,
      );
    }
    const failed = events.find(([name]) => name === 'failed')![1];
    assert.ok(failed.error instanceof UnknownKindError);
    assert.equal(failed.error.kind, 'poison');
    assert.deepEqual(failed.error.handled, ['mail', 'sms']);
    assert.equal(failed.permanent, false);
    // Each failure was retried after the queue's backoff, on the server's clock.
    const { rows } = await db.query(
      `SELECT bool_and((e2 ->> 'at')::timestamptz - (e1 ->> 'at')::timestamptz >= interval '100 milliseconds') AS backed_off
         FROM jobs.job, jsonb_array_elements(errors) WITH ORDINALITY a(e1, n)
         JOIN jsonb_array_elements(errors) WITH ORDINALITY b(e2, m) ON m = n + 1
        WHERE id = $1`,
      [id],
    );
    assert.equal(rows[0].backed_off, true);
  });

  it('unknownKindMaxAgeMs and unknownKindDelayMs must be non-negative milliseconds', () => {
    assert.throws(() => new Worker({ pool: workers, queue: 'q', handlers: {}, unknownKindMaxAgeMs: -1 }), /unknownKindMaxAgeMs must be a finite, non-negative/);
    assert.throws(() => new Worker({ pool: workers, queue: 'q', handlers: {}, unknownKindDelayMs: Number.NaN }), /unknownKindDelayMs must be a finite, non-negative/);
    assert.throws(() => new Worker({ pool: workers, queue: 'q', handlers: {}, unknownKind: 'drop' as 'fail' }), /unknownKind must be 'release' or 'fail'/);
  });

  it("a kind without a handler fails instead with unknownKind: 'fail'", async () => {
    const queue = await newQueue(db);
    const id = await enqueue(producer, queue, {}, { kind: 'nobody-knows' });
    const { worker } = recordingWorker({ pool: workers, queue, handlers: {}, unknownKind: 'fail' });
    const row = await eventually('the job to fail', async () => {
      const r = await jobRow(db, id);
      return r.state === 'failed' && r;
    });
    await worker.stop();
    assert.match(row.errors[0].error, /no handler for kind "nobody-knows"/);
  });

  it("kinds: 'handled' claims only kinds that have a handler", async () => {
    const queue = await newQueue(db);
    const other = await enqueue(producer, queue, {}, { kind: 'other' });
    const mine = await enqueue(producer, queue, {}, { kind: 'mine' });
    const { worker } = recordingWorker({ pool: workers, queue, kinds: 'handled', handlers: { mine: () => 1 } });
    await eventually('my job to succeed', async () => (await jobRow(db, mine)).state === 'succeeded');
    await sleep(200);
    await worker.stop();
    const row = await jobRow(db, other);
    assert.equal(row.state, 'queued');
    assert.equal(row.attempt, 0);
  });

  it('progress() stores progress and heartbeats keep a long job alive past its lease', async () => {
    const queue = await newQueue(db, "lease => '600 milliseconds'");
    const id = await enqueue(producer, queue, {});
    const { worker } = recordingWorker({
      pool: workers,
      queue,
      handlers: {
        default: async (_job, { progress }) => {
          assert.equal(await progress({ step: 1 }), 'running');
          await sleep(2_000); // more than three leases: only heartbeats keep it ours
          return 'done';
        },
      },
    });
    await eventually('progress', async () => (await jobRow(db, id)).progress?.step === 1);
    const row = await eventually('the job to succeed', async () => {
      const r = await jobRow(db, id);
      return r.state === 'succeeded' && r;
    });
    await worker.stop();
    assert.equal(row.attempt, 1);
    assert.equal(row.result, 'done');
  });
});

describe('cancellation and lost leases', () => {
  it('a cancel mid-handler fires the signal at the next heartbeat and records nothing', async () => {
    const queue = await newQueue(db, "lease => '900 milliseconds'");
    const id = await enqueue(producer, queue, {});
    let aborted: unknown;
    const { worker, events } = recordingWorker({
      pool: workers,
      queue,
      handlers: {
        default: (_job, { signal }) =>
          new Promise((resolve) => {
            signal.addEventListener('abort', () => {
              aborted = signal.reason;
              resolve('finished anyway');
            });
          }),
      },
    });
    await eventually('the job to run', async () => (await jobRow(db, id)).state === 'running');
    assert.equal((await db.query('SELECT jobs_cancel($1) AS s', [id])).rows[0].s, 'cancelled');
    await eventually('the signal', () => aborted !== undefined, 3_000);
    await worker.stop();
    assert.match(String(aborted), /cancelled/);
    const lost = events.find(([name]) => name === 'lost')![1];
    assert.equal(lost.outcome, 'cancelled');
    assert.equal(lost.during, 'heartbeat');
    assert.ok(!events.some(([name]) => name === 'completed'));
    const row = await jobRow(db, id);
    assert.equal(row.state, 'cancelled');
    assert.equal(row.result, null);
  });

  it('a handler that stalls past its lease loses the job to another claim; its result is discarded', async () => {
    const queue = await newQueue(db, "lease => '500 milliseconds'");
    const id = await enqueue(producer, queue, {});
    let signalReason: unknown;
    let rescuer: Promise<{ id: string; lease: string }> | undefined;
    const { worker, events } = recordingWorker({
      pool: workers,
      queue,
      name: 'staller',
      concurrency: 1, // no claim of its own waits in the server meanwhile
      handlers: {
        default: async (_job, { signal }) => {
          // Another process waits to claim the job; this one blocks its event loop (no
          // heartbeat can run) while the lease runs out, the background worker reclaims the
          // job and the other process claims it.
          rescuer = rescue(queue);
          Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 2_500);
          await sleep(600); // now the next heartbeat answers
          signalReason = signal.aborted ? signal.reason : 'not aborted';
          return 'stale result';
        },
      },
    });
    await eventually('the handler to start', () => rescuer);
    const claimed = await rescuer!;
    assert.equal(String(claimed.id), id);
    await eventually('the first worker to learn it lost the job', () => events.some(([name]) => name === 'lost'), 5_000);
    await eventually('the stalled handler to return', () => signalReason !== undefined);
    await worker.stop();
    assert.match(String(signalReason), /lost/);
    assert.equal(events.find(([name]) => name === 'lost')![1].outcome, 'lost');
    assert.ok(!events.some(([name]) => name === 'completed'));
    assert.equal((await db.query('SELECT jobs_complete($1, $2, $3) AS o', [id, claimed.lease, '"rescued"'])).rows[0].o, 'succeeded');
    const row = await jobRow(db, id);
    assert.equal(row.result, 'rescued');
    assert.equal(row.worker, 'rescuer');
    assert.equal(row.attempt, 2);
  });
});

describe('shutdown and handlers that never resolve', () => {
  it('stop() lets handlers finish within the grace, then releases the rest: no lease left held', { timeout: 30_000 }, async () => {
    const queue = await newQueue(db);
    const quick = await enqueue(producer, queue, {}, { kind: 'quick' });
    const slow = await enqueue(producer, queue, {}, { kind: 'slow' });
    const hung = await enqueue(producer, queue, {}, { kind: 'hung' });
    let slowSignal: AbortSignal | undefined;
    const { worker, events } = recordingWorker({
      pool: workers,
      queue,
      handlers: {
        quick: async () => {
          await sleep(300);
          return 'quick';
        },
        slow: async (_job, { signal }) => {
          slowSignal = signal;
          await sleep(5_000);
          return 'too late';
        },
        hung: () => new Promise(() => undefined),
      },
    });
    await eventually('all three to run', () => events.filter(([name]) => name === 'picked').length === 3);
    const started = Date.now();
    await worker.stop({ graceMs: 1_000 });
    const took = Date.now() - started;
    assert.ok(took >= 900 && took < 4_000, `stop took ${took} ms`);
    assert.equal(worker.active, 0);
    assert.equal(slowSignal?.aborted, true);
    assert.equal((await jobRow(db, quick)).state, 'succeeded');
    for (const id of [slow, hung]) {
      const row = await jobRow(db, id);
      assert.equal(row.state, 'queued');
      assert.equal(row.attempt, 0);
      assert.equal(row.lease_until, null);
      assert.equal(row.release_reason, 'shutting down');
    }
    const { rows } = await db.query(`SELECT count(*)::int AS n FROM jobs.job WHERE queue = $1 AND state = 'running'`, [queue]);
    assert.equal(rows[0].n, 0);
  });

  it('a handler past its time limit fails the attempt and frees its slot for the next job', { timeout: 30_000 }, async () => {
    const queue = await newQueue(db, "backoff_base => '1 hour'");
    const hung = await enqueue(producer, queue, {}, { kind: 'hung' });
    const { worker, events } = recordingWorker({
      pool: workers,
      queue,
      concurrency: 1,
      timeoutMs: 300,
      handlers: { hung: () => new Promise(() => undefined), ok: () => 'ok' },
    });
    await eventually('the timeout', () => events.some(([name]) => name === 'failed'));
    const next = await enqueue(producer, queue, {}, { kind: 'ok' });
    await eventually('the next job on the only slot', async () => (await jobRow(db, next)).state === 'succeeded');
    await worker.stop();
    const row = await jobRow(db, hung);
    assert.equal(row.state, 'queued');
    assert.match(row.errors[0].error, /JobTimeoutError: the handler ran longer than its time limit of 300 ms/);
    assert.ok(events.find(([name]) => name === 'failed')![1].error instanceof JobTimeoutError);
  });

  it('a handler that never resolves keeps its job leased (heartbeats) and the other slots keep working', { timeout: 30_000 }, async () => {
    const queue = await newQueue(db, "lease => '600 milliseconds'");
    const hung = await enqueue(producer, queue, {}, { kind: 'hung' });
    const { worker } = recordingWorker({
      pool: workers,
      queue,
      concurrency: 2,
      handlers: { hung: () => new Promise(() => undefined), ok: () => 'ok' },
    });
    await eventually('the hung job to run', async () => (await jobRow(db, hung)).state === 'running');
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push(await enqueue(producer, queue, {}, { kind: 'ok' }));
    await eventually('the other jobs', async () => {
      const { rows } = await db.query(`SELECT count(*)::int AS n FROM jobs.job WHERE id = ANY($1) AND state = 'succeeded'`, [ids]);
      return rows[0].n === 5;
    });
    await sleep(1_500); // well past its lease
    const row = await jobRow(db, hung);
    assert.equal(row.state, 'running');
    assert.equal(row.attempt, 1);
    await worker.stop({ graceMs: 100 });
    assert.equal((await jobRow(db, hung)).state, 'queued');
  });

  it('stop() while the claim waits in the server returns at once', { timeout: 30_000 }, async () => {
    const queue = await newQueue(db);
    const { worker } = recordingWorker({ pool: workers, queue, handlers: {}, waitMs: 60_000 });
    await eventually('the claim to wait', async () => {
      const { rows } = await db.query(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE '%jobs_claim%' AND state = 'active' AND pid <> pg_backend_pid()`,
      );
      return rows[0].n > 0;
    });
    const started = Date.now();
    await worker.stop();
    assert.ok(Date.now() - started < 2_000, `stop took ${Date.now() - started} ms`);
  });

  it('stop() cancels a claim whose statement reaches the server after the first cancel request', { timeout: 30_000 }, async () => {
    // The claim's statement is held back for 500 ms, as a starved backend or a slow network
    // would: stop()'s first CancelRequest finds the backend idle and the server drops it.
    const queue = await newQueue(db);
    const slow = pool(url('worker'));
    let claimSent!: () => void;
    const claiming = new Promise<void>((resolve) => (claimSent = resolve));
    const connect = slow.connect.bind(slow) as () => Promise<pg.PoolClient>;
    (slow as any).connect = async () => {
      const client = await connect();
      const query = client.query.bind(client) as (...args: any[]) => Promise<any>;
      (client as any).query = (...args: any[]) => {
        if (!String(args[0]).includes('jobs_claim')) return query(...args);
        claimSent();
        return sleep(500).then(() => query(...args));
      };
      return client;
    };
    const { worker } = recordingWorker({ pool: slow, queue, handlers: {}, waitMs: 60_000 });
    await claiming;
    const started = Date.now();
    await worker.stop();
    assert.ok(Date.now() - started < 5_000, `stop took ${Date.now() - started} ms`);
  });
});

describe('producing', () => {
  it("enqueue joins the caller's transaction", async () => {
    const queue = await newQueue(db);
    const client = await producer.connect();
    try {
      await client.query('BEGIN');
      const rolledBack = await enqueue(client, queue, { n: 1 });
      await client.query('ROLLBACK');
      await client.query('BEGIN');
      const committed = await enqueue(client, queue, { n: 2 });
      await client.query('COMMIT');
      assert.equal(await jobRow(db, rolledBack).then((r) => r.id), null);
      assert.equal((await jobRow(db, committed)).state, 'queued');
    } finally {
      client.release();
    }
  });

  it('enqueue passes every option and any JSON payload', async () => {
    const queue = await newQueue(db);
    const runAt = new Date(Date.now() + 3_600_000);
    const array = await enqueue(producer, queue, [1, 'two', { three: 3 }], {
      kind: 'k',
      priority: -5,
      maxAttempts: 2,
      runAt,
      headers: { traceparent: 'x' },
    });
    const text = await enqueue(producer, queue, 'just a string');
    const a = await jobRow(db, array);
    assert.deepEqual(a.payload, [1, 'two', { three: 3 }]);
    assert.equal(a.kind, 'k');
    assert.equal(a.priority, -5);
    assert.equal(a.max_attempts, 2);
    assert.equal(a.run_at.getTime(), runAt.getTime());
    assert.deepEqual(a.headers, { traceparent: 'x' });
    assert.equal((await jobRow(db, text)).payload, 'just a string');
  });

  it('enqueueBatch returns ids in payload order', async () => {
    const queue = await newQueue(db);
    const rows = await enqueueBatch(producer, queue, [{ n: 1 }, { n: 2 }, { n: 3 }], { kind: 'b' });
    assert.equal(rows.length, 3);
    for (const [i, row] of rows.entries()) {
      assert.equal(row.inserted, true);
      const job = await jobRow(db, row.id);
      assert.deepEqual(job.payload, { n: i + 1 });
      assert.equal(job.kind, 'b');
    }
  });

  it('an unknown queue is an error that says how to create it', async () => {
    await assert.rejects(enqueue(producer, 'no-such-queue-here', {}), (error: any) => error.code === '42704' && /jobs_create_queue/.test(error.message + error.hint));
  });
});

describe('untyped parameters', () => {
  it('every statement the library sends carries its parameters untyped, without casts', async () => {
    const queue = await newQueue(db, "lease => '600 milliseconds'");
    const seen: Array<{ text: string; values: unknown[] }> = [];
    // A pool whose query() and connect()ed clients record what the library sends.
    const spy = pool(url('worker'));
    const record = (target: any) => {
      const query = target.query.bind(target);
      target.query = (...args: any[]) => {
        const [text, values] = args;
        seen.push({ text: typeof text === 'string' ? text : text.text, values: Array.isArray(values) ? values : [] });
        return query(...args);
      };
      return target;
    };
    record(spy);
    const connect = spy.connect.bind(spy) as any;
    (spy as any).connect = (callback?: (err: Error | undefined, client: any, done: any) => void) =>
      callback
        ? connect((err: Error | undefined, client: any, done: any) => callback(err, client && record(client), done))
        : connect().then(record);
    await enqueue(spy, queue, { a: 1 }, { kind: 'ok', priority: 1, headers: { h: 1 }, runAt: new Date() });
    await enqueueBatch(spy, queue, [{ b: 1 }], { kind: 'fail' });
    await enqueue(spy, queue, {}, { kind: 'unknown' });
    await enqueue(spy, queue, {}, { kind: 'slow' });
    const { worker } = recordingWorker({
      pool: spy,
      queue,
      lease: 600,
      handlers: {
        ok: async (_job, { progress }) => (await progress({ p: 1 }), { r: 1 }),
        fail: () => {
          throw new Error('x');
        },
        slow: () => sleep(700),
      },
    });
    await eventually('every job settled', async () => {
      const { rows } = await db.query(`SELECT count(*)::int AS n FROM jobs.job WHERE queue = $1 AND state = 'running'`, [queue]);
      const kinds = new Set(seen.map((s) => s.text.match(/jobs_\w+/)?.[0]));
      return rows[0].n === 0 && ['jobs_complete', 'jobs_fail', 'jobs_release', 'jobs_heartbeat'].every((k) => kinds.has(k));
    });
    await worker.stop();
    // One job at a time, each completed with the next claim (one with a result, one without).
    await enqueueBatch(spy, queue, [{ c: 1 }, { c: 2 }, { c: 3 }], { kind: 'cycle' });
    const cycler = recordingWorker({
      pool: spy,
      queue,
      concurrency: 1,
      kinds: 'handled',
      handlers: { cycle: (job) => (job.payload.c === 2 ? null : { c: job.payload.c }) },
    });
    await eventually('the cycle jobs to succeed', () => cycler.events.filter(([name]) => name === 'completed').length === 3);
    await cycler.worker.stop();
    // Workflows: a job after another (single and batch), signals recorded before the awaits
    // (with a keep and without), a handler's awaitSignal (with a timeout and without),
    // results() and wait().
    const first = await enqueue(spy, queue, { timeoutMs: 60_000 }, { kind: 'awaits' });
    const [second] = await enqueueBatch(spy, queue, [{}], { kind: 'awaits', after: [first] });
    const third = await enqueue(spy, queue, {}, { kind: 'awaits', after: [first, second.id] });
    await signal(spy, `untyped-${first}`, { p: 1 }, { keepMs: 60_000 });
    await signal(spy, `untyped-${second.id}`);
    await signal(spy, `untyped-${third}`, 'text');
    const awaiter = recordingWorker({
      pool: spy,
      queue,
      kinds: 'handled',
      handlers: {
        awaits: (job, ctx) =>
          job.signal ? job.signal.payload : ctx.awaitSignal(`untyped-${job.id}`, job.payload.timeoutMs ? { timeoutMs: job.payload.timeoutMs } : undefined),
      },
    });
    const done = await wait(spy, [first, second.id, third], 20_000);
    await awaiter.worker.stop();
    assert.deepEqual(done.map((r) => r.state), ['succeeded', 'succeeded', 'succeeded']);
    assert.deepEqual((await results(spy, [first, third])).map((r) => r.result), [{ p: 1 }, 'text']);
    const functions = new Set(seen.map((s) => s.text.match(/jobs_\w+/)?.[0]));
    for (const f of [
      'jobs_enqueue',
      'jobs_enqueue_batch',
      'jobs_claim',
      'jobs_heartbeat',
      'jobs_complete',
      'jobs_complete_and_claim',
      'jobs_fail',
      'jobs_release',
      'jobs_await',
      'jobs_signal',
      'jobs_results',
      'jobs_wait',
    ]) {
      assert.ok(functions.has(f), `${f} was not called`);
    }
    for (const { text, values } of seen) {
      assert.doesNotMatch(text, /\$\d+\s*::/, `a parameter is cast in: ${text}`);
      for (const v of values) {
        const ok =
          v === null ||
          ['string', 'number', 'boolean'].includes(typeof v) ||
          (Array.isArray(v) && v.every((e) => e === null || typeof e === 'string'));
        assert.ok(ok, `a parameter is not a plain value (node-postgres sends those untyped): ${JSON.stringify(v)} in ${text}`);
      }
    }
  });
});
