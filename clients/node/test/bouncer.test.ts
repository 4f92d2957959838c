// The library through a real PgBouncer 1.18 in transaction pooling mode, and the facts about
// poolers that README.md states, each measured here: a waiting claim holds a server
// connection for its whole wait, the server's default worker name is whatever connection the
// pooler lends, and a session SET leaks to other clients while SET LOCAL does not.
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import pg from 'pg';

import { enqueue, enqueueBatch } from '../src/index.js';
import {
  calls,
  closePools,
  DSN,
  eventually,
  newQueue,
  pool,
  recordingWorker,
  sleep,
  spyPool,
  url,
  type Via,
} from './helpers.js';

after(closePools);
const direct = pool(DSN());

async function client(connectionString: string): Promise<pg.Client> {
  const c = new pg.Client({ connectionString });
  await c.connect();
  return c;
}

describe('through PgBouncer in transaction pooling mode', () => {
  it('a worker and a producer run every job: enqueues in transactions, heartbeats, settles', async () => {
    const queue = await newQueue(direct, "lease => '600 milliseconds'");
    const { pool: bouncer, sent } = spyPool(url('worker', 'bouncer'), 10);
    const producers = pool(url('producer', 'bouncer'), 2);
    // The producer: single enqueues inside transactions, one of them rolled back, and a batch.
    const producer = await producers.connect();
    for (let i = 0; i < 20; i++) {
      await producer.query('BEGIN');
      await enqueue(producer, queue, { n: i }, { kind: i % 5 === 0 ? 'long' : 'short' });
      await producer.query(i === 7 ? 'ROLLBACK' : 'COMMIT');
    }
    producer.release();
    await enqueueBatch(producers, queue, Array.from({ length: 180 }, (_, i) => ({ n: 100 + i })), { kind: 'short' });
    const { worker, events } = recordingWorker({
      pool: bouncer,
      queue,
      name: 'through-pgbouncer',
      concurrency: 8,
      handlers: {
        short: (job) => job.payload.n,
        long: async (job, { progress }) => {
          await progress({ started: true });
          await sleep(1_500); // past two leases: heartbeats through the pooler keep it
          return job.payload.n;
        },
      },
    });
    await eventually('every job to succeed', async () => {
      const { rows } = await direct.query(`SELECT count(*)::int AS n FROM jobs.job WHERE queue = $1 AND state = 'succeeded'`, [queue]);
      return rows[0].n === 199;
    }, 30_000);
    await worker.stop();
    const { rows } = await direct.query(
      `SELECT count(*)::int AS jobs, count(*) FILTER (WHERE worker = 'through-pgbouncer')::int AS named,
              count(*) FILTER (WHERE attempt = 1 AND result = payload -> 'n')::int AS clean,
              count(*) FILTER (WHERE progress IS NOT NULL)::int AS with_progress
         FROM jobs.job WHERE queue = $1`,
      [queue],
    );
    assert.deepEqual(rows[0], { jobs: 199, named: 199, clean: 199, with_progress: 4 });
    assert.ok(!events.some(([name]) => name === 'lost' || name === 'retrying' || name === 'error'));
    // Completed with the next claims (one commit per job), results included, through the pooler.
    assert.ok(calls(sent, 'jobs_complete_and_claim') > 0);
  });
});

describe('what a user must know behind a pooler (measured)', () => {
  it('a waiting claim holds a server connection for its wait: a pool no larger than the waiting workers blocks producers of the same role', async () => {
    const queue = await newQueue(direct);
    const waitMs = 2_000;
    // PgBouncer keeps one pool per database and user: two waiting workers, then an enqueue
    // through the same database entry as the same role or as another one.
    const timeEnqueue = async (via: Via, producerRole: 'worker' | 'producer') => {
      const workers = [1, 2].map(() =>
        recordingWorker({ pool: pool(url('worker', via), 2), queue, handlers: { default: () => 'ok' }, concurrency: 1, waitMs }),
      );
      await eventually('both claims waiting in the server', async () => {
        const { rows } = await direct.query(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%jobs_claim%' AND pid <> pg_backend_pid()`,
        );
        return rows[0].n === 2;
      });
      const producer = await client(url(producerRole, via));
      const started = Date.now();
      await enqueue(producer, queue, {});
      const took = Date.now() - started;
      await producer.end();
      await eventually('the job to be done', async () => workers.some(({ events }) => events.some(([name]) => name === 'completed')));
      await Promise.all(workers.map(({ worker }) => worker.stop()));
      return took;
    };
    const blocked = await timeEnqueue('bouncer2', 'worker'); // pool_size = 2, both held by waiting claims
    const spare = await timeEnqueue('bouncer3', 'worker'); // pool_size = 3: one left for the producer
    const ownPool = await timeEnqueue('bouncer2', 'producer'); // another role: a pool of its own
    console.log(
      `# enqueue through PgBouncer while 2 claims wait ${waitMs} ms: same role, pool_size=2 ${blocked} ms; ` +
        `same role, pool_size=3 ${spare} ms; another role, pool_size=2 ${ownPool} ms`,
    );
    assert.ok(blocked >= waitMs * 0.8, `the enqueue should have waited for a claim's wait to end, took ${blocked} ms`);
    assert.ok(spare < 500, `with a spare server connection the enqueue should be immediate, took ${spare} ms`);
    assert.ok(ownPool < 500, `another role's pool should have been free, took ${ownPool} ms`);
  });

  it("without a worker name, the server's default names whichever connection PgBouncer lent", async () => {
    const queue = await newQueue(direct);
    await enqueueBatch(pool(url('producer')), queue, [{}, {}]);
    const a = await client(url('worker', 'bouncer'));
    const b = await client(url('worker', 'bouncer'));
    try {
      const first = await a.query(`SELECT id, lease FROM jobs_claim($1)`, [queue]);
      // b holds the server connection a just used (PgBouncer hands out the most recently
      // released one first), so a's next statement runs on another server connection.
      await b.query('BEGIN');
      await b.query('SELECT 1');
      const second = await a.query(`SELECT id, lease FROM jobs_claim($1)`, [queue]);
      await b.query('COMMIT');
      const { rows } = await direct.query(`SELECT worker FROM jobs.job WHERE queue = $1 ORDER BY id`, [queue]);
      console.log(`# one client, two claims through PgBouncer, no worker name: ${rows.map((r) => r.worker).join(', ')}`);
      assert.match(rows[0].worker, /^pid:\d+$/);
      assert.match(rows[1].worker, /^pid:\d+$/);
      assert.notEqual(rows[0].worker, rows[1].worker);
      for (const r of [first.rows[0], second.rows[0]]) await a.query('SELECT jobs_complete($1, $2)', [r.id, r.lease]);
    } finally {
      await Promise.all([a.end(), b.end()]);
    }
  });

  it('a session SET leaks to the next client of the server connection; SET LOCAL does not', async () => {
    const a = await client(url('worker', 'bouncer'));
    const b = await client(url('worker', 'bouncer'));
    try {
      await a.query(`SET pg_jobs_client_test.session_mark = 'set by a'`);
      const leaked = await b.query(`SELECT current_setting('pg_jobs_client_test.session_mark', true) AS v`);
      await a.query('BEGIN');
      await a.query(`SET LOCAL pg_jobs_client_test.local_mark = 'set local by a'`);
      await a.query('COMMIT');
      const kept = await b.query(`SELECT current_setting('pg_jobs_client_test.local_mark', true) AS v`);
      console.log(`# b sees a's SET: ${JSON.stringify(leaked.rows[0].v)}, a's SET LOCAL: ${JSON.stringify(kept.rows[0].v)}`);
      assert.equal(leaked.rows[0].v, 'set by a');
      assert.notEqual(kept.rows[0].v, 'set local by a');
    } finally {
      await a.query('RESET pg_jobs_client_test.session_mark');
      await Promise.all([a.end(), b.end()]);
    }
  });
});
