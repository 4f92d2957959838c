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

it('a queue created between the read of its lease and the claim: the claim takes the lease it was given', { timeout: 30_000 }, async () => {
  // The worker reads the queue's lease before each claim (again once a minute); here the
  // queue does not exist at that read and is created, with a job of a kind nobody handles,
  // before the claim. The claim then ran on the queue's lease, which the worker reads again
  // to date the claim: the young job is released, as a job of a deploy in progress.
  const queue = `node-${process.pid}-late`;
  const late = pool(url('worker'));
  let created: Promise<string> | undefined;
  const connect = late.connect.bind(late) as (callback?: (...args: any[]) => void) => Promise<any>;
  const watch = (client: any) => {
    if (!client || client.watched) return client;
    client.watched = true;
    const query = client.query.bind(client);
    client.query = async (...args: any[]) => {
      const result = await query(...args);
      if (String(args[0]).includes('FROM jobs.queue') && !created) {
        created = (async () => {
          await db.query("SELECT jobs_create_queue($1, lease => '60 seconds')", [queue]);
          return enqueue(db, queue, {}, { kind: 'from-the-next-deploy' });
        })();
        await created;
      }
      return result;
    };
    return client;
  };
  // pg.Pool's own query() connects with a callback; the worker's claim without one.
  (late as any).connect = (callback?: (err: Error | undefined, client: any, done: any) => void) =>
    callback
      ? connect((err: Error | undefined, client: any, done: any) => callback(err, watch(client), done))
      : connect().then(watch);
  // Dated by lease_until alone, the job would look a lease (60 s) older than it is.
  const { worker, events } = recordingWorker({ pool: late, queue, handlers: {}, unknownKindMaxAgeMs: 5_000 });
  await eventually('the release', () => events.some(([name]) => name === 'released' || name === 'failed'));
  await worker.stop();
  const id = await created!;
  assert.deepEqual(events.filter(([name]) => name !== 'picked' && name !== 'stopped').map(([name]) => name), ['released']);
  assert.equal((await jobRow(db, id)).lease_duration.minutes, 1);
});
