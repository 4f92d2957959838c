// What the tests share: pools on the test cluster (direct and through PgBouncer), fresh
// queues, waiting for a condition, and a worker that records its events.
import pg from 'pg';

import { Worker, type WorkerOptions } from '../src/index.js';

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run the tests through clients/test, which starts the servers`);
  return value;
}

/** Set-up and checks: the superuser, directly. */
export const DSN = () => env('PG_JOBS_TEST_DSN');
export const PGCTL = () => env('PG_JOBS_TEST_PGCTL');

/** Who connects: workers as a login role granted jobs_worker, producers as one granted jobs_client. */
export type Who = 'worker' | 'producer';
/** Where to: the server, or one of PgBouncer's pools (40, 2 or 3 server connections). */
export type Via = 'direct' | 'bouncer' | 'bouncer2' | 'bouncer3';

export function url(who: Who, via: Via = 'direct'): string {
  const user = env(who === 'worker' ? 'PG_JOBS_TEST_WORKER_ROLE' : 'PG_JOBS_TEST_PRODUCER_ROLE');
  if (via === 'direct') return `postgresql://${user}@127.0.0.1:${env('PG_JOBS_TEST_PORT')}/postgres`;
  const database = { bouncer: 'pgjobs', bouncer2: 'pgjobs_small', bouncer3: 'pgjobs_three' }[via];
  return `postgresql://${user}@127.0.0.1:${env('PG_JOBS_TEST_BOUNCER_PORT')}/${database}`;
}

const pools: pg.Pool[] = [];

/** A pool that every test file closes at the end (see closePools). */
export function pool(connectionString = DSN(), max = 20): pg.Pool {
  const p = new pg.Pool({ connectionString, max });
  p.on('error', () => undefined); // idle connections dropped by a server restart
  pools.push(p);
  return p;
}

export async function closePools(): Promise<void> {
  await Promise.all(pools.splice(0).map((p) => p.end().catch(() => undefined)));
}

let counter = 0;

/** Creates a queue no other test uses; `settings` are named SQL arguments of jobs_create_queue. */
export async function newQueue(db: pg.Pool, settings = ''): Promise<string> {
  const name = `node-${process.pid}-${++counter}`;
  await db.query(`SELECT jobs_create_queue('${name}'${settings ? `, ${settings}` : ''})`);
  return name;
}

/** The job's row as jobs_get returns it. */
export async function jobRow(db: pg.Pool, id: string): Promise<any> {
  const { rows } = await db.query('SELECT (jobs_get($1)).*', [id]);
  return rows[0];
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Polls `check` until it returns a truthy value, or fails after `timeoutMs`. */
export async function eventually<T>(what: string, check: () => Promise<T> | T, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value) return value;
      last = value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${String(last)})`);
    await sleep(25);
  }
}

/** A started worker and the events it emitted, in order. */
export function recordingWorker(options: WorkerOptions): { worker: Worker; events: Array<[string, any]> } {
  const worker = new Worker({ signals: [], ...options });
  const events: Array<[string, any]> = [];
  for (const name of ['picked', 'completed', 'failed', 'released', 'lost', 'retrying', 'error', 'stopped'] as const) {
    worker.on(name, (event: any) => events.push([name, event]));
  }
  worker.start();
  return { worker, events };
}
