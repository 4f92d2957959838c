// A database restart while the worker runs: the worker reconnects, retries its settle calls
// with the same (id, lease), and every job ends succeeded.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { after, it } from 'node:test';

import { enqueueBatch } from '../src/index.js';
import { closePools, eventually, newQueue, PGCTL, pool, recordingWorker, sleep, url } from './helpers.js';

after(closePools);

it('a restart of the server mid-run loses nothing: the worker reconnects and finishes every job', async () => {
  const admin = pool();
  const queue = await newQueue(admin, "lease => '2 seconds'");
  const ids = (await enqueueBatch(pool(url('producer')), queue, Array.from({ length: 400 }, (_, n) => ({ n })))).map((r) => r.id);
  const ran = new Set<string>();
  const { worker, events } = recordingWorker({
    pool: pool(url('worker'), 12),
    queue,
    concurrency: 8,
    handlers: {
      default: async (job) => {
        ran.add(job.id);
        await sleep(10);
        // Odd jobs complete one by one with a result, even ones in batches without one.
        return job.payload.n % 2 ? { n: job.payload.n } : undefined;
      },
    },
  });
  const count = async (state: string) =>
    (await admin.query(`SELECT count(*)::int AS n FROM jobs.job WHERE queue = $1 AND state::text = $2`, [queue, state])).rows[0].n;
  await eventually('some jobs done', async () => (await count('succeeded')) >= 50, 20_000);
  await promisify(execFile)(PGCTL(), ['restart']);
  await eventually('every job to succeed after the restart', async () => (await count('succeeded')) === ids.length, 60_000).catch(
    async (error) => {
      throw new Error(`${error.message}; states: ${JSON.stringify((await admin.query(`SELECT state, count(*) FROM jobs.job WHERE queue = $1 GROUP BY 1`, [queue])).rows)}`);
    },
  );
  await worker.stop();
  assert.ok(events.some(([name]) => name === 'retrying'), 'the restart went unnoticed');
  assert.equal(ran.size, ids.length);
  const { rows } = await admin.query(
    `SELECT count(*)::int AS wrong FROM jobs.job WHERE queue = $1
        AND (result ->> 'n')::int IS DISTINCT FROM CASE WHEN (payload ->> 'n')::int % 2 = 1 THEN (payload ->> 'n')::int END`,
    [queue],
  );
  assert.equal(rows[0].wrong, 0);
  // The settle calls that failed at the restart were retried with the same lease: the jobs in
  // flight did not run again (a rerun needs a claim whose answer was lost, a rare window).
  const reruns = (await admin.query(`SELECT count(*)::int AS n FROM jobs.job WHERE queue = $1 AND attempt > 1`, [queue])).rows[0].n;
  assert.ok(reruns <= 2, `${reruns} jobs ran more than once`);
});
