// SIGTERM: the worker stops claiming, lets running handlers finish within its grace, releases
// the rest and then lets the signal end the process.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { after, it } from 'node:test';

import { enqueue } from '../src/index.js';
import { closePools, eventually, jobRow, newQueue, pool, url } from './helpers.js';

after(closePools);

it('SIGTERM finishes what fits in the grace, releases the rest, and ends the process', { timeout: 30_000 }, async () => {
  const db = pool();
  const producer = pool(url('producer'));
  const queue = await newQueue(db);
  const slow = await enqueue(producer, queue, {}, { kind: 'slow' });
  const hung = await enqueue(producer, queue, {}, { kind: 'hung' });
  const child = spawn(process.execPath, [fileURLToPath(new URL('./fixtures/sigterm-worker.js', import.meta.url)), queue], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, PG_JOBS_TEST_WORKER_DSN: url('worker') },
  });
  let out = '';
  child.stdout.on('data', (chunk) => (out += chunk));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  await eventually('both jobs picked', () => out.split('PICKED').length === 3);
  const started = Date.now();
  child.kill('SIGTERM');
  const { code, signal } = await exited;
  const took = Date.now() - started;
  assert.equal(signal, 'SIGTERM', `the process exited with code ${code} instead of by the signal`);
  assert.match(out, /STOPPED/);
  assert.ok(took < 4_000, `shutdown took ${took} ms`);
  const s = await jobRow(db, slow);
  assert.equal(s.state, 'succeeded');
  assert.equal(s.result, 'finished in the grace');
  const h = await jobRow(db, hung);
  assert.equal(h.state, 'queued');
  assert.equal(h.release_reason, 'shutting down');
  assert.equal(h.attempt, 0);
  assert.equal(h.lease_until, null);
});
