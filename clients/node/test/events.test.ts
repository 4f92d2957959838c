// What a worker tells its listeners and what it stores: every event has exactly the fields
// README.md's table of events lists (the Python library's table lists the same ones, which
// clients/python/tests/test_events.py checks), and an error reads the same everywhere: its
// message first, its stack in a field of its own.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, describe, it } from 'node:test';

import { enqueue, PermanentError, type WorkerEvent } from '../src/index.js';
import { closePools, eventually, jobRow, newQueue, pool, recordingWorker, url } from './helpers.js';

const db = pool();
const producer = pool(url('producer'));
after(closePools);

/** The events README.md documents, each with its fields (`type` besides). */
export function documentedEvents(): Map<string, string[]> {
  const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
  const section = readme.slice(readme.indexOf('\n## Events'));
  const events = new Map<string, string[]>();
  for (const line of section.split('\n')) {
    const cells = line.split('|').map((c) => c.trim());
    const name = /^`(\w+)`$/.exec(cells[1] ?? '')?.[1];
    if (!name || cells.length < 5) continue;
    events.set(name, [...cells[3].matchAll(/`(\w+)`/g)].map((m) => m[1]));
  }
  return events;
}

describe('events', () => {
  it('every event carries exactly the fields the README lists for it', { timeout: 60_000 }, async () => {
    const documented = documentedEvents();
    assert.deepEqual(
      [...documented.keys()].sort(),
      ['awaiting', 'completed', 'error', 'failed', 'lost', 'picked', 'released', 'retrying', 'stopped'],
    );
    const queue = await newQueue(db, "lease => '900 milliseconds', backoff_base => '100 milliseconds', jitter => 0");
    const ok = await enqueue(producer, queue, {}, { kind: 'ok' });
    const flaky = await enqueue(producer, queue, {}, { kind: 'flaky' });
    const broken = await enqueue(producer, queue, {}, { kind: 'broken' });
    await enqueue(producer, queue, {}, { kind: 'nobody' });
    const doomed = await enqueue(producer, queue, {}, { kind: 'doomed' });
    const patient = await enqueue(producer, queue, {}, { kind: 'patient' });
    const workers = pool(`${url('worker')}?application_name=events-test`);
    const { worker, events } = recordingWorker({
      pool: workers,
      queue,
      handlers: {
        ok: () => ({ fine: true }),
        flaky: (job) => {
          if (job.attempt === 1) throw new Error('upstream slow');
          return undefined;
        },
        broken: () => {
          throw new PermanentError('cannot ever work');
        },
        doomed: (_job, { signal }) => new Promise((resolve) => signal.addEventListener('abort', resolve)),
        patient: (job, { awaitSignal }) => awaitSignal(`events-test-${job.id}`),
      },
    });
    await eventually('the doomed job to run', async () => (await jobRow(db, doomed)).state === 'running');
    await db.query('SELECT jobs_cancel($1)', [doomed]);
    await eventually('every job settled', async () => {
      const states = await Promise.all([ok, flaky, broken, patient].map(async (id) => (await jobRow(db, id)).state));
      const seen = new Set(events.map(([name]) => name));
      return states.join() === 'succeeded,succeeded,failed,waiting' && ['released', 'lost', 'awaiting'].every((e) => seen.has(e));
    });
    // A claim whose connection dies is retried; an unknown queue is an error.
    await eventually('the claim to wait', async () => {
      const { rows } = await db.query(
        `SELECT pg_terminate_backend(pid) AS done FROM pg_stat_activity
          WHERE application_name = 'events-test' AND query LIKE '%jobs_claim%' AND state = 'active'`,
      );
      return rows.length > 0;
    });
    await eventually('the retry', () => events.some(([name]) => name === 'retrying'));
    await worker.stop();
    const other = recordingWorker({ pool: workers, queue: 'no-such-queue-for-events', handlers: {} });
    await eventually('the error', () => other.events.some(([name]) => name === 'error'));
    await other.worker.stop();
    events.push(...other.events);

    for (const [name, event] of events) {
      const fields = documented.get(name)!.map((f) => (f === 'duration' ? 'durationMs' : f));
      assert.deepEqual(Object.keys(event).sort(), ['type', ...fields].sort(), `the fields of a ${name} event`);
      assert.equal((event as WorkerEvent).type, name);
    }
    const seen = new Set(events.map(([name]) => name));
    for (const name of documented.keys()) assert.ok(seen.has(name), `no ${name} event was seen`);

    const awaiting = events.find(([name]) => name === 'awaiting')![1];
    assert.equal(awaiting.outcome, 'waiting');
    assert.equal(awaiting.signal, `events-test-${patient}`);
    const retrying = events.find(([name]) => name === 'retrying')![1];
    assert.equal(retrying.during, 'claim');
    assert.equal(retrying.job, null);
    const error = other.events.find(([name]) => name === 'error')![1];
    assert.equal(error.during, 'claim');
    // As the Python library writes it, but for the driver's class name.
    assert.equal(
      error.message,
      "DatabaseError: queue 'no-such-queue-for-events' does not exist (SQLSTATE 42704; hint: Create it with SELECT jobs_create_queue('no-such-queue-for-events');)",
    );
  });

  it('an error reads the same in the event and the job: the message first, the stack in its own field', async () => {
    const queue = await newQueue(db, "backoff_base => '1 hour'");
    const id = await enqueue(producer, queue, {});
    const { worker, events } = recordingWorker({
      pool: pool(url('worker')),
      queue,
      handlers: {
        default: function renderInvoice() {
          try {
            JSON.parse('twelve');
          } catch (cause) {
            throw new TypeError('amount is not a number', { cause });
          }
        },
      },
    });
    await eventually('the failure', () => events.some(([name]) => name === 'failed'));
    await worker.stop();
    const failed = events.find(([name]) => name === 'failed')![1];
    assert.ok(failed.error instanceof TypeError);
    assert.equal(failed.message, 'TypeError: amount is not a number');
    assert.match(failed.stack, /^ {4}at (Object\.)?renderInvoice /);
    assert.match(failed.stack, /\ncaused by SyntaxError: Unexpected token .* is not valid JSON\n {4}at JSON\.parse/);
    assert.equal(failed.permanent, false);
    const stored = (await jobRow(db, id)).errors[0].error as string;
    assert.equal(stored, `${failed.message}\n${failed.stack}`);
  });
});
