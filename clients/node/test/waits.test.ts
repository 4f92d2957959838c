// A waiting worker holds nothing back: while its claim sleeps in the server, its backend
// advertises no snapshot (pg_stat_activity.backend_xmin is NULL), so VACUUM is free to clean
// up behind it. The server lets go of the snapshot only for a claim that is the bare call in
// autocommit, which is what the library sends.
import assert from 'node:assert/strict';
import { after, it } from 'node:test';

import { enqueue } from '../src/index.js';
import { closePools, eventually, jobRow, newQueue, pool, recordingWorker, sleep, url } from './helpers.js';

const db = pool();
after(closePools);

/** The claim backends of application `name` asleep in their wait, with their backend_xmin. */
async function sleepingClaims(name: string): Promise<Array<{ xmin: string | null; query: string }>> {
  const { rows } = await db.query(
    `SELECT backend_xmin::text AS xmin, query FROM pg_stat_activity
      WHERE application_name = $1 AND state = 'active' AND wait_event_type = 'Extension'`,
    [name],
  );
  return rows;
}

it('a claim waiting in the server holds no snapshot (backend_xmin is NULL)', { timeout: 30_000 }, async () => {
  for (const lease of [undefined, 5_000]) {
    const queue = await newQueue(db, "lease => '7 seconds'");
    const name = `waits-${lease ?? 'queue-lease'}`;
    const { worker } = recordingWorker({ pool: pool(`${url('worker')}?application_name=${name}`), queue, lease, handlers: { default: () => 'done' }, waitMs: 20_000 });
    await eventually('the claim to sleep', async () => (await sleepingClaims(name)).length > 0);
    // Sampled while the claim sleeps: a snapshot held for the wait would show in every sample.
    for (let i = 0; i < 10; i++) {
      for (const claim of await sleepingClaims(name)) {
        assert.equal(claim.xmin, null, `the waiting claim advertises xmin ${claim.xmin}`);
        assert.match(claim.query, /^SELECT \* FROM jobs_claim\(/);
      }
      await sleep(20);
    }
    // And the wait still ends with the job, heartbeated on the claim's lease.
    const id = await enqueue(db, queue, {});
    await eventually('the job', async () => (await jobRow(db, id)).state === 'succeeded');
    await worker.stop();
    assert.equal((await jobRow(db, id)).lease_duration.seconds, lease ? 5 : 7);
  }
});
